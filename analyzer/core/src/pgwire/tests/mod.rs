//! The decoder on crafted byte streams (helpers here, cases in the modules below): the same
//! bytes whole, a byte at a time and at random cuts give the same facts; protocol cases;
//! every kind of event; hostile bytes.

mod bounds;
mod detection;
mod sessions;
mod streams;
mod trail;

use super::conversation::{KEEP_CAP, MAX_ERROR_FINDINGS, MAX_QUERIES, SYNC_WINDOW};
use super::facts::{
    ConversationFacts, Encryption, EncryptionRequest, Event, Proof, Protocol, StartedAt, StopReason,
};
use super::messages::Role;
use super::query::{QueryKind, RowCount};
use super::Conversation;
use crate::tcp::observe::StreamSink;

pub(super) fn msg(t: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![t];
    v.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    v.extend_from_slice(body);
    v
}

pub(super) fn cstr(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

pub(super) fn startup() -> Vec<u8> {
    let mut body = 196_608u32.to_be_bytes().to_vec();
    for s in [
        "user",
        "alice",
        "database",
        "shop",
        "application_name",
        "psql",
    ] {
        body.extend(cstr(s));
    }
    body.push(0);
    let mut v = (body.len() as u32 + 4).to_be_bytes().to_vec();
    v.extend(body);
    v
}

pub(super) const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
pub(super) const GSS_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30];

pub(super) fn auth_ok() -> Vec<u8> {
    msg(b'R', &0u32.to_be_bytes())
}

pub(super) fn ready() -> Vec<u8> {
    msg(b'Z', b"I")
}

pub(super) fn desc() -> Vec<u8> {
    msg(b'T', &[&[0u8, 1][..], &cstr("v"), &[0u8; 18]].concat())
}

pub(super) fn datarow(i: usize) -> Vec<u8> {
    let val = format!("row-{i}");
    let mut body = vec![0, 1];
    body.extend_from_slice(&(val.len() as u32).to_be_bytes());
    body.extend_from_slice(val.as_bytes());
    msg(b'D', &body)
}

pub(super) fn rows(n: usize) -> Vec<u8> {
    (0..n).flat_map(datarow).collect()
}

pub(super) fn error(code: &str, text: &str) -> Vec<u8> {
    let body = [
        &b"SERROR\0VERROR\0C"[..],
        &cstr(code),
        b"M",
        &cstr(text),
        b"\0",
    ]
    .concat();
    msg(b'E', &body)
}

pub(super) fn select_exchange(n: usize) -> (Vec<u8>, Vec<u8>) {
    let front = [
        startup(),
        msg(b'Q', &cstr("SELECT * FROM t")),
        msg(b'X', b""),
    ]
    .concat();
    let back = [
        auth_ok(),
        msg(b'S', &[cstr("server_version"), cstr("15.20")].concat()),
        msg(b'K', &[4242u32.to_be_bytes(), 7u32.to_be_bytes()].concat()),
        ready(),
        desc(),
        rows(n),
        msg(b'C', &cstr(&format!("SELECT {n}"))),
        ready(),
    ]
    .concat();
    (front, back)
}

/// A small deterministic generator (no dependency for tests).
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    pub(super) fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

#[derive(Clone, Copy)]
pub(super) enum Cut {
    Whole,
    Bytes,
    Random(u64),
}

/// Feed the frontend bytes first, then the backend's, each cut as asked; the facts with the
/// values that depend on where cuts fall taken out.
pub(super) fn run(front: &[u8], back: &[u8], cut: Cut, seen: bool) -> ConversationFacts {
    let mut conv = Conversation::new();
    let mut rng = Rng::new(match cut {
        Cut::Random(s) => s,
        _ => 0,
    });
    for (d, data) in [(0usize, front), (1, back)] {
        let mut pos = 0;
        while pos < data.len() {
            let n = match cut {
                Cut::Whole => data.len(),
                Cut::Bytes => 1,
                Cut::Random(_) => 1 + rng.below(300),
            };
            let end = (pos + n).min(data.len());
            conv.feed(d, &data[pos..end], pos as i64, 1, 1001.0, seen);
            pos = end;
        }
    }
    conv.finish();
    let mut f = conv.facts();
    for q in &mut f.queries {
        q.response_segments = 0;
        q.response_segment_median = None;
        q.response_segment_max = None;
        q.response_segment_sizes.clear();
    }
    f
}

pub(super) fn counts(f: &ConversationFacts, role: Role) -> Vec<(String, u64)> {
    let of = match role {
        Role::Frontend => &f.messages.frontend.0,
        Role::Backend => &f.messages.backend.0,
    };
    of.iter().map(|(n, k)| (n.to_string(), *k)).collect()
}

pub(super) fn count(f: &ConversationFacts, role: Role, name: &str) -> u64 {
    counts(f, role)
        .iter()
        .find(|e| e.0 == name)
        .map_or(0, |e| e.1)
}
