//! The reader on crafted files: formats, link types, IP variants, cuts and damage. This
//! module builds the files; the tests sit in the modules below by subject.

mod damage;
mod formats;
mod headers;
mod opening;

use std::io::Write;

use super::error::{DamageKind, OpenError, StreamFault};
use super::gzip::GzipStream;
use super::{Capture, Format, Item};

// -- building captures ------------------------------------------------------------------------

pub(super) const SRC: [u8; 4] = [10, 0, 0, 1];
pub(super) const DST: [u8; 4] = [10, 0, 0, 2];

/// TCP header (20 bytes + options) and payload.
pub(super) fn tcp(payload: &[u8], seq: u32, options: &[u8]) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend(40000u16.to_be_bytes());
    t.extend(5432u16.to_be_bytes());
    t.extend(seq.to_be_bytes());
    t.extend(7u32.to_be_bytes());
    t.push((((20 + options.len()) / 4) << 4) as u8);
    t.push(0x18);
    t.extend(512u16.to_be_bytes());
    t.extend([0, 0, 0, 0]);
    t.extend(options);
    t.extend(payload);
    t
}

pub(super) fn ipv4(l4: &[u8], proto: u8, frag: [u8; 2], options: &[u8]) -> Vec<u8> {
    let ihl = 20 + options.len();
    let mut ip = vec![0x40 | (ihl / 4) as u8, 0];
    ip.extend(((ihl + l4.len()) as u16).to_be_bytes());
    ip.extend([0, 0, frag[0], frag[1], 64, proto, 0, 0]);
    ip.extend(SRC);
    ip.extend(DST);
    ip.extend(options);
    ip.extend(l4);
    ip
}

/// IPv6 with extension headers given as (type, total length in bytes).
pub(super) fn ipv6(l4: &[u8], exts: &[(u8, usize)]) -> Vec<u8> {
    let mut body = Vec::new();
    for (i, &(t, size)) in exts.iter().enumerate() {
        let next = exts.get(i + 1).map_or(6, |e| e.0);
        let units = if t == 51 { size / 4 - 2 } else { size / 8 - 1 };
        body.push(next);
        body.push(units as u8);
        body.extend(vec![0u8; size - 2]);
    }
    body.extend(l4);
    let mut ip = vec![0x60, 0, 0, 0];
    ip.extend((body.len() as u16).to_be_bytes());
    ip.push(exts.first().map_or(6, |e| e.0));
    ip.push(64);
    ip.extend([0xfd; 16]);
    ip.extend([0xfe; 16]);
    ip.extend(body);
    ip
}

pub(super) fn ether(ip: &[u8], etype: u16, vlans: &[u16]) -> Vec<u8> {
    let mut f = vec![2u8; 12];
    for &tag in vlans {
        f.extend(tag.to_be_bytes());
        f.extend([0, 100]);
    }
    f.extend(etype.to_be_bytes());
    f.extend(ip);
    f
}

pub(super) fn segment(payload: &[u8], seq: u32) -> Vec<u8> {
    ether(&ipv4(&tcp(payload, seq, &[]), 6, [0, 0], &[]), 0x0800, &[])
}

pub(super) struct Rec {
    pub(super) frame: Vec<u8>,
    pub(super) orig: u32,
}

pub(super) fn rec(frame: Vec<u8>) -> Rec {
    Rec {
        orig: frame.len() as u32,
        frame,
    }
}

pub(super) fn pcap(recs: &[Rec], link: u32, nano: bool, big: bool) -> Vec<u8> {
    let w32 = |v: u32| {
        if big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let w16 = |v: u16| {
        if big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let mut out = Vec::new();
    out.extend(w32(if nano { 0xA1B2_3C4D } else { 0xA1B2_C3D4 }));
    out.extend(w16(2));
    out.extend(w16(4));
    out.extend([0; 8]);
    out.extend(w32(262_144));
    out.extend(w32(link));
    for (i, r) in recs.iter().enumerate() {
        out.extend(w32(1_700_000_000 + i as u32));
        out.extend(w32(if nano { 123_456_789 } else { 123_456 }));
        out.extend(w32(r.frame.len() as u32));
        out.extend(w32(r.orig));
        out.extend(&r.frame);
    }
    out
}

pub(super) struct Ng {
    pub(super) big: bool,
    pub(super) out: Vec<u8>,
}

impl Ng {
    pub(super) fn section(big: bool) -> Ng {
        let mut ng = Ng {
            big,
            out: Vec::new(),
        };
        ng.append_section();
        ng
    }

    pub(super) fn append_section(&mut self) {
        let mut body = self.u32(0x1A2B_3C4D).to_vec();
        body.extend(self.u16(1));
        body.extend(self.u16(0));
        body.extend([0xff; 8]);
        self.block(0x0A0D_0D0A, &body);
    }

    pub(super) fn u32(&self, v: u32) -> [u8; 4] {
        if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }

    pub(super) fn u16(&self, v: u16) -> [u8; 2] {
        if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }

    pub(super) fn block(&mut self, btype: u32, body: &[u8]) {
        let mut body = body.to_vec();
        while body.len() % 4 != 0 {
            body.push(0);
        }
        let n = body.len() as u32 + 12;
        self.out.extend(self.u32(btype));
        self.out.extend(self.u32(n));
        self.out.extend(body);
        self.out.extend(self.u32(n));
    }

    pub(super) fn option(&self, code: u16, val: &[u8]) -> Vec<u8> {
        let mut o = self.u16(code).to_vec();
        o.extend(self.u16(val.len() as u16));
        o.extend(val);
        while o.len() % 4 != 0 {
            o.push(0);
        }
        o
    }

    pub(super) fn idb(&mut self, link: u16, snap: u32, opts: &[Vec<u8>]) {
        let mut body = self.u16(link).to_vec();
        body.extend(self.u16(0));
        body.extend(self.u32(snap));
        for o in opts {
            body.extend(o);
        }
        if !opts.is_empty() {
            body.extend([0; 4]);
        }
        self.block(1, &body);
    }

    pub(super) fn epb(&mut self, iface: u32, ts: u64, frame: &[u8], orig: u32) {
        let mut body = self.u32(iface).to_vec();
        body.extend(self.u32((ts >> 32) as u32));
        body.extend(self.u32(ts as u32));
        body.extend(self.u32(frame.len() as u32));
        body.extend(self.u32(orig));
        body.extend(frame);
        self.block(6, &body);
    }

    pub(super) fn spb(&mut self, frame: &[u8]) {
        let mut body = self.u32(frame.len() as u32).to_vec();
        body.extend(frame);
        self.block(3, &body);
    }

    pub(super) fn pb(&mut self, iface: u16, ts: u64, frame: &[u8]) {
        let mut body = self.u16(iface).to_vec();
        body.extend(self.u16(0));
        body.extend(self.u32((ts >> 32) as u32));
        body.extend(self.u32(ts as u32));
        body.extend(self.u32(frame.len() as u32));
        body.extend(self.u32(frame.len() as u32));
        body.extend(frame);
        self.block(2, &body);
    }

    pub(super) fn isb(&mut self, iface: u32, drops: u64) {
        let mut body = self.u32(iface).to_vec();
        body.extend([0; 8]);
        let v = if self.big {
            drops.to_be_bytes()
        } else {
            drops.to_le_bytes()
        };
        body.extend(self.option(5, &v));
        body.extend([0; 4]);
        self.block(5, &body);
    }
}

pub(super) fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
    e.write_all(data).unwrap_or_default();
    e.finish().unwrap_or_default()
}

/// Everything a capture hands out: (frame, ts, payload, plen) per packet, the batch ends.
pub(super) struct Read {
    pub(super) packets: Vec<(u64, f64, Vec<u8>, u32)>,
    pub(super) batch_ends: Vec<f64>,
    pub(super) cap: Capture,
}

pub(super) fn read_cap(mut cap: Capture) -> Read {
    let (mut packets, mut batch_ends) = (Vec::new(), Vec::new());
    while let Some(item) = cap.next_item() {
        match item {
            Item::Packet(p) => packets.push((p.frame, p.ts, p.payload.to_vec(), p.plen)),
            Item::BatchEnd { ts } => batch_ends.push(ts),
        }
    }
    Read {
        packets,
        batch_ends,
        cap,
    }
}

pub(super) fn read(data: &[u8]) -> Read {
    match Capture::from_bytes(data) {
        Ok(cap) => read_cap(cap),
        Err(e) => panic!("not opened: {e:?}"),
    }
}

pub(super) fn payloads(r: &Read) -> Vec<Vec<u8>> {
    r.packets.iter().map(|p| p.2.clone()).collect()
}

pub(super) const PAYLOADS: [&[u8]; 3] = [b"Q\x00\x00\x00\x0dselect 1;\x00", &[b'x'; 1400], b""];

pub(super) fn three() -> Vec<Rec> {
    PAYLOADS
        .iter()
        .enumerate()
        .map(|(i, p)| rec(segment(p, 1000 + 2000 * i as u32)))
        .collect()
}
