//! The decoder on crafted byte streams: the same bytes whole, a byte at a time and at random
//! cuts give the same facts; protocol cases; every kind of event; hostile bytes.

use super::conversation::{KEEP_CAP, MAX_ERROR_FINDINGS, MAX_QUERIES, SYNC_WINDOW};
use super::facts::{
    ConversationFacts, Encryption, EncryptionRequest, Event, Protocol, StartedAt, StopReason,
};
use super::messages::Role;
use super::query::{QueryKind, RowCount};
use super::Conversation;
use crate::tcp::observe::StreamSink;

pub fn msg(t: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![t];
    v.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    v.extend_from_slice(body);
    v
}

pub fn cstr(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

pub fn startup() -> Vec<u8> {
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

const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
const GSS_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30];

fn auth_ok() -> Vec<u8> {
    msg(b'R', &0u32.to_be_bytes())
}

fn ready() -> Vec<u8> {
    msg(b'Z', b"I")
}

fn desc() -> Vec<u8> {
    msg(b'T', &[&[0u8, 1][..], &cstr("v"), &[0u8; 18]].concat())
}

fn datarow(i: usize) -> Vec<u8> {
    let val = format!("row-{i}");
    let mut body = vec![0, 1];
    body.extend_from_slice(&(val.len() as u32).to_be_bytes());
    body.extend_from_slice(val.as_bytes());
    msg(b'D', &body)
}

fn rows(n: usize) -> Vec<u8> {
    (0..n).flat_map(datarow).collect()
}

fn error(code: &str, text: &str) -> Vec<u8> {
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

fn select_exchange(n: usize) -> (Vec<u8>, Vec<u8>) {
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
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

#[derive(Clone, Copy)]
enum Cut {
    Whole,
    Bytes,
    Random(u64),
}

/// Feed the frontend bytes first, then the backend's, each cut as asked; the facts with the
/// values that depend on where cuts fall taken out.
fn run(front: &[u8], back: &[u8], cut: Cut, seen: bool) -> ConversationFacts {
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

fn counts(f: &ConversationFacts, role: Role) -> Vec<(String, u64)> {
    match role {
        Role::Frontend => f.messages.frontend.0.clone(),
        Role::Backend => f.messages.backend.0.clone(),
    }
}

fn count(f: &ConversationFacts, role: Role, name: &str) -> u64 {
    counts(f, role)
        .iter()
        .find(|e| e.0 == name)
        .map_or(0, |e| e.1)
}

#[test]
fn simple_query_whole() {
    let (front, back) = select_exchange(100);
    let f = run(&front, &back, Cut::Whole, true);
    assert_eq!(f.protocol, Protocol::Postgresql);
    assert_eq!(f.decode_started_at, Some(StartedAt::Startup));
    let su = f.startup.as_ref().unwrap();
    assert_eq!(
        (
            su.user.as_deref(),
            su.database.as_deref(),
            su.application_name.as_deref()
        ),
        (Some("alice"), Some("shop"), Some("psql"))
    );
    let names: Vec<_> = counts(&f, Role::Frontend);
    assert_eq!(
        names,
        [
            ("StartupMessage".into(), 1),
            ("Query".into(), 1),
            ("Terminate".into(), 1)
        ]
    );
    assert_eq!(count(&f, Role::Backend, "DataRow"), 100);
    assert_eq!(f.backend_pid, Some(4242));
    assert_eq!(
        f.server_parameters.0,
        [("server_version".to_string(), "15.20".to_string())]
    );
    let q = &f.queries[0];
    assert_eq!(f.queries.len(), 1);
    assert_eq!(
        (
            q.sql.as_str(),
            q.command_tag.as_deref(),
            q.rows.clone(),
            q.data_rows
        ),
        (
            "SELECT * FROM t",
            Some("SELECT 100"),
            Some(RowCount::Small(100)),
            100
        )
    );
    assert_eq!(q.response_messages, 100 + 3);
    let response = [desc(), rows(100), msg(b'C', &cstr("SELECT 100")), ready()].concat();
    assert!(back.ends_with(&response) && q.response_bytes == response.len() as u64);
    assert_eq!(f.frontend_direction, Some(0));
}

#[test]
fn response_segments_are_the_backend_segments_of_the_query() {
    let (front, back) = select_exchange(200);
    let mut conv = Conversation::new();
    conv.feed(0, &front, 0, 1, 0.0, true);
    let mut off = 0;
    let mut i = 0;
    while off < back.len() {
        let end = (off + 1000).min(back.len());
        conv.feed(
            1,
            &back[off..end],
            off as i64,
            2 + i,
            0.1 + i as f64 / 1000.0,
            true,
        );
        off = end;
        i += 1;
    }
    conv.finish();
    let f = conv.facts();
    let q = &f.queries[0];
    assert_eq!(q.rows, Some(RowCount::Small(200)));
    assert_eq!(q.response_segments, i);
    assert_eq!(
        (q.response_segment_median, q.response_segment_max),
        (Some(1000), Some(1000))
    );
    assert_eq!(q.response_segment_sizes[0], (1000, i - 1));
}

#[test]
fn byte_at_a_time_and_random_splits_equal_whole() {
    let (front, back) = select_exchange(30);
    let whole = run(&front, &back, Cut::Whole, true);
    assert_eq!(run(&front, &back, Cut::Bytes, true), whole);
    for seed in 0..100 {
        assert_eq!(run(&front, &back, Cut::Random(seed), true), whole);
    }
}

#[test]
fn server_parameters_last_wins_at_most_64() {
    let front = [startup(), msg(b'Q', &cstr("SELECT 1")), msg(b'X', b"")].concat();
    let mut params: Vec<(String, Option<&str>)> = vec![
        ("application_name".into(), Some("app")),
        ("TimeZone".into(), Some("UTC")),
        ("bad".into(), None),
        ("application_name".into(), Some("appb")),
        ("server_version".into(), Some("15.20")),
    ];
    params.extend((0..70).map(|k| (format!("p{k}"), Some("x"))));
    params.push(("TimeZone".into(), Some("CET"))); // full: not even an update
    let mut back = auth_ok();
    for (k, v) in &params {
        back.extend(match v {
            Some(v) => msg(b'S', &[cstr(k), cstr(v)].concat()),
            None => msg(b'S', k.as_bytes()), // no NUL, no value
        });
    }
    back.extend(ready());
    let f = run(&front, &back, Cut::Whole, true);
    let got = &f.server_parameters.0;
    assert_eq!(got.len(), 64);
    assert_eq!(got[0], ("application_name".into(), "appb".into()));
    assert_eq!(got[1], ("TimeZone".into(), "UTC".into()));
    assert_eq!(got[2], ("server_version".into(), "15.20".into()));
}

#[test]
fn ssl_refused_then_plaintext() {
    let (front, back) = select_exchange(3);
    let f = run(
        &[&SSL_REQUEST[..], &front].concat(),
        &[b"N".as_slice(), &back].concat(),
        Cut::Whole,
        true,
    );
    assert_eq!(
        (f.protocol, f.encryption),
        (Protocol::Postgresql, Encryption::None)
    );
    assert_eq!(count(&f, Role::Frontend, "SSLRequest"), 1);
    assert_eq!(count(&f, Role::Backend, "EncryptionRefused"), 1);
    assert_eq!(f.queries[0].rows, Some(RowCount::Small(3)));
}

#[test]
fn ssl_or_gss_accepted_stops_decoding() {
    for (ask, answer, want) in [
        (SSL_REQUEST, b'S', (Encryption::Tls, EncryptionRequest::Ssl)),
        (
            GSS_REQUEST,
            b'G',
            (Encryption::Gss, EncryptionRequest::Gssenc),
        ),
        (SSL_REQUEST, b'G', (Encryption::Gss, EncryptionRequest::Ssl)),
    ] {
        let mut conv = Conversation::new();
        conv.feed(0, &ask, 0, 1, 1.0, true);
        conv.feed(1, &[answer], 0, 2, 1.1, true);
        conv.feed(
            0,
            &[&b"\x16\x03\x01\x02\x00"[..], &[1u8; 512]].concat(),
            8,
            3,
            1.2,
            true,
        );
        conv.finish();
        let f = conv.facts();
        assert!(f.queries.is_empty());
        assert_eq!(f.encryption, want.0);
        assert_eq!(
            f.events,
            [Event::Encrypted {
                encryption: want.0,
                request: Some(want.1),
                frame: 2
            }]
        );
    }
}

#[test]
fn http_on_5432_is_not_postgres() {
    let f = run(
        b"GET / HTTP/1.1\r\nHost: db\r\n\r\n",
        b"HTTP/1.1 400 Bad Request\r\n\r\n",
        Cut::Whole,
        true,
    );
    assert_eq!(f.protocol, Protocol::Unknown);
    assert!(
        f.queries.is_empty() && f.messages.frontend.0.is_empty() && f.messages.backend.0.is_empty()
    );
    assert_eq!(f.frontend_direction, None);
    let stopped = f.decode_stopped.unwrap();
    assert_eq!(
        (stopped.direction, stopped.offset, stopped.reason),
        (Role::Frontend, 0, StopReason::NotStartup)
    );
    assert!(matches!(
        f.events[..],
        [Event::NotPostgresql { frame: 1, .. }]
    ));
}

#[test]
fn garbage_without_start_is_given_up_after_a_window() {
    let mut rng = Rng::new(5);
    let junk = rng.bytes(300_000);
    let mut conv = Conversation::new();
    for (i, c) in junk.chunks(4096).enumerate() {
        conv.feed(0, c, (i * 4096) as i64, i as u64 + 1, 1.0, false);
        assert!(conv.sides[0].buf.len() <= SYNC_WINDOW + 4096);
    }
    conv.finish();
    let f = conv.facts();
    assert_eq!(f.protocol, Protocol::Unknown);
    let Some(Event::NotPostgresql {
        reason: StopReason::NoFraming { lost },
        ..
    }) = f.events.first()
    else {
        panic!("{:?}", f.events);
    };
    assert!(*lost > SYNC_WINDOW as i64);
}

#[test]
fn mid_stream_roles_proven_by_types_even_when_guess_is_wrong() {
    // A pooled server connection captured late: the engine guessed the server is direction 0.
    let back = [
        rows(5)[7..].to_vec(),
        msg(b'C', &cstr("SELECT 9")),
        ready(),
        msg(b'T', &[0, 0]),
        datarow(1),
        msg(b'C', &cstr("SELECT 1")),
        ready(),
    ]
    .concat();
    let front = [msg(b'Q', &cstr("SELECT 1")), msg(b'Q', &cstr("SELECT 2"))].concat();
    let mut conv = Conversation::new();
    conv.feed(0, &back, 0, 1, 1.0, false);
    conv.feed(1, &front, 0, 2, 1.0, false);
    conv.finish();
    let f = conv.facts();
    assert_eq!(
        (f.frontend_direction, f.decode_started_at),
        (Some(1), Some(StartedAt::MidStream))
    );
    assert_eq!(counts(&f, Role::Frontend), [("Query".into(), 2)]);
    assert_eq!(count(&f, Role::Backend, "ReadyForQuery"), 2);
    assert!(f.lost_bytes.backend > 0);
    assert!(matches!(
        f.events[0],
        Event::MidStream {
            role: Role::Backend,
            frame: 1,
            ..
        }
    ));
}

#[test]
fn gap_inside_datarow_body_loses_nothing() {
    let (front, back) = select_exchange(50);
    let mut conv = Conversation::new();
    conv.feed(0, &front, 0, 1, 1.0, true);
    let i = back
        .windows(datarow(10).len())
        .position(|w| w == datarow(10))
        .unwrap();
    conv.feed(1, &back[..i + 8], 0, 2, 1.0, true); // header + 3 body bytes of row 10
    conv.gap(1, i as i64 + 8, 2, 3, 1.0); // 2 body bytes never captured
    conv.feed(1, &back[i + 10..], i as i64 + 10, 4, 1.0, true);
    conv.finish();
    let f = conv.facts();
    assert_eq!(f.queries[0].rows, Some(RowCount::Small(50)));
    assert!(!f.queries[0].incomplete && f.lost_bytes.backend == 0 && f.events.is_empty());
}

#[test]
fn gap_across_messages_resynchronises_without_invention() {
    let (front, back) = select_exchange(200);
    let mut conv = Conversation::new();
    conv.feed(0, &front, 0, 1, 1.0, true);
    let i = back
        .windows(datarow(50).len())
        .position(|w| w == datarow(50))
        .unwrap()
        + 3;
    conv.feed(1, &back[..i], 0, 2, 1.0, true);
    conv.gap(1, i as i64, 500, 3, 1.0);
    conv.feed(1, &back[i + 500..], i as i64 + 500, 4, 1.0, true);
    conv.finish();
    let f = conv.facts();
    assert!(count(&f, Role::Backend, "DataRow") < 200);
    assert_eq!(count(&f, Role::Backend, "CommandComplete"), 1); // found again after the gap
    assert_eq!(f.queries[0].command_tag.as_deref(), Some("SELECT 200"));
    assert!(f.queries[0].incomplete);
    assert_eq!(
        f.events[0],
        Event::Resync {
            role: Role::Backend,
            length: 500,
            offset: i as i64,
            frame: 3
        }
    );
}

#[test]
fn malformed_framing_is_an_event_with_its_offset() {
    let (front, back) = select_exchange(5);
    let i = back
        .windows(datarow(2).len())
        .position(|w| w == datarow(2))
        .unwrap();
    for (bad, reason) in [
        (
            &b"D\x00\x00\x00\x02"[..],
            StopReason::LengthUnder4 { length: 2 },
        ),
        (
            b"D\x7f\xff\xff\xff",
            StopReason::LengthAbsurd {
                length: 0x7fff_ffff,
            },
        ),
        (
            b"?\x00\x00\x00\x04",
            StopReason::NotRoleType {
                type_byte: b'?',
                role: Role::Backend,
            },
        ),
    ] {
        let broken = [&back[..i], bad, &back[i + 5..]].concat();
        let mut conv = Conversation::new();
        conv.feed(0, &front, 0, 1, 1.0, true);
        conv.feed(1, &broken, 0, 7, 1.0, true);
        conv.finish();
        let f = conv.facts();
        let want = Event::Malformed {
            role: Role::Backend,
            offset: i as i64,
            frame: 7,
            reason: reason.clone(),
        };
        assert_eq!(f.events, [want]);
        assert_eq!(f.decode_stopped.unwrap().offset, i as i64);
    }
    // nothing decoded yet: not PostgreSQL, and no event
    let mut conv = Conversation::new();
    conv.feed(1, b"?\x00\x00\x00\x04", 0, 1, 1.0, true);
    conv.feed(0, b"", 0, 2, 1.0, true);
    let f = conv.facts();
    assert!(f.events.is_empty() && f.protocol == Protocol::Unknown);
}

#[test]
fn huge_length_claim_keeps_memory_bounded() {
    let (front, _) = select_exchange(0);
    let mut conv = Conversation::new();
    conv.feed(0, &front, 0, 1, 1.0, true);
    let head = [
        auth_ok(),
        ready(),
        b"D".to_vec(),
        0x7fff_fff0u32.to_be_bytes().to_vec(),
    ]
    .concat();
    conv.feed(1, &head, 0, 2, 1.0, true);
    let chunk = vec![0u8; 65536];
    for k in 0..64 {
        conv.feed(
            1,
            &chunk,
            head.len() as i64 + k * 65536,
            3 + k as u64,
            1.0,
            true,
        );
        assert!(conv.sides[1].buf.capacity() < 1 << 16);
    }
}

#[test]
fn oversized_control_messages_are_read_up_to_keep_cap() {
    let huge = format!("SELECT '{}'", "z".repeat(KEEP_CAP + 5000));
    let front = [
        startup(),
        msg(b'Q', &cstr(&huge)),
        msg(b'Q', &cstr("SELECT 2")),
    ]
    .concat();
    let back = [
        auth_ok(),
        ready(),
        msg(b'C', &cstr("SELECT 1")),
        ready(),
        error("XX000", &"m".repeat(KEEP_CAP + 10)),
        ready(),
    ]
    .concat();
    let whole = run(&front, &back, Cut::Whole, true);
    let cut = run(&front, &back, Cut::Random(3), true);
    // whole, the long SQL is read entirely (and cut at SQL_CAP); cut, what its first segment
    // holds (the rest is skipped)
    assert!(whole.queries[0].sql_truncated && whole.queries[0].sql.len() == super::query::SQL_CAP);
    assert!(!cut.queries[0].sql_truncated && cut.queries[0].sql.len() < 300);
    assert_eq!(cut.queries[1].sql, "SELECT 2");
    let message = |f: &ConversationFacts| {
        f.queries[1]
            .error
            .as_ref()
            .and_then(|e| e.message.clone())
            .unwrap_or_default()
    };
    assert_eq!(message(&whole).len(), KEEP_CAP + 10);
    assert!(message(&cut).len() < 300);
    for f in [&whole, &cut] {
        assert_eq!(f.queries.len(), 2);
        assert_eq!(
            f.queries[1].error.as_ref().unwrap().code.as_deref(),
            Some("XX000")
        );
    }
}

fn extended_pipeline() -> (Vec<u8>, Vec<u8>) {
    let bind = msg(b'B', &[cstr(""), cstr("s1"), vec![0; 6]].concat());
    let front = [
        startup(),
        msg(
            b'P',
            &[cstr("s1"), cstr("SELECT $1::int"), vec![0, 0]].concat(),
        ),
        bind.clone(),
        msg(b'D', &[&b"P"[..], &cstr("")].concat()),
        msg(b'E', &[cstr(""), vec![0; 4]].concat()),
        bind,
        msg(b'E', &[cstr(""), vec![0; 4]].concat()),
        msg(b'S', b""),
    ]
    .concat();
    let back = [
        auth_ok(),
        ready(),
        msg(b'1', b""),
        msg(b'2', b""),
        msg(b'T', &[0, 0]),
        datarow(1),
        msg(b'C', &cstr("SELECT 1")),
        msg(b'2', b""),
        datarow(2),
        msg(b'C', &cstr("SELECT 1")),
        ready(),
    ]
    .concat();
    (front, back)
}

#[test]
fn extended_protocol_pipeline() {
    let (front, back) = extended_pipeline();
    let f = run(&front, &back, Cut::Whole, true);
    let got: Vec<_> = f
        .queries
        .iter()
        .map(|q| (q.sql.as_str(), q.kind, q.rows.clone()))
        .collect();
    let one = Some(RowCount::Small(1));
    assert_eq!(
        got,
        [
            ("SELECT $1::int", QueryKind::Extended, one.clone()),
            ("SELECT $1::int", QueryKind::Extended, one)
        ]
    );
    assert_eq!(count(&f, Role::Backend, "ParseComplete"), 1);
    assert_eq!(count(&f, Role::Frontend, "Describe"), 1);
    assert_eq!(run(&front, &back, Cut::Bytes, true), f);
}

#[test]
fn copy_out_and_copy_in() {
    let front = [
        startup(),
        msg(b'Q', &cstr("COPY t TO STDOUT")),
        msg(b'Q', &cstr("COPY t FROM STDIN")),
        msg(b'd', b"1\tx\n").repeat(4),
        msg(b'c', b""),
    ]
    .concat();
    let back = [
        auth_ok(),
        ready(),
        msg(b'H', b"\x00\x00\x01\x00\x00"),
        msg(b'd', b"1\ta\n").repeat(7),
        msg(b'c', b""),
        msg(b'C', &cstr("COPY 7")),
        ready(),
        msg(b'G', b"\x00\x00\x01\x00\x00"),
        msg(b'C', &cstr("COPY 4")),
        ready(),
    ]
    .concat();
    let f = run(&front, &back, Cut::Whole, true);
    let got: Vec<_> = f
        .queries
        .iter()
        .map(|q| (q.kind, q.rows.clone(), q.copy_data))
        .collect();
    assert_eq!(
        got,
        [
            (QueryKind::Copy, Some(RowCount::Small(7)), 7),
            (QueryKind::Copy, Some(RowCount::Small(4)), 4)
        ]
    );
    assert_eq!(count(&f, Role::Frontend, "CopyData"), 4);
    for seed in 0..20 {
        assert_eq!(run(&front, &back, Cut::Random(seed), true), f);
    }
}

#[test]
fn errors_attached_to_queries_then_counted() {
    let mut front = startup();
    let mut back = [auth_ok(), ready()].concat();
    for i in 0..25 {
        front.extend(msg(b'Q', &cstr(&format!("SELECT * FROM nope_{i}"))));
        back.extend([error("42P01", "relation \"nope\" does not exist"), ready()].concat());
    }
    let f = run(&front, &back, Cut::Whole, true);
    let q = &f.queries[0];
    let e = q.error.as_ref().unwrap();
    assert_eq!(
        (e.code.as_deref(), e.severity.as_deref()),
        (Some("42P01"), Some("ERROR"))
    );
    assert!(q.command_tag.is_none() && q.rows.is_none());
    assert_eq!(f.query_errors, 25);
    let errors = f
        .events
        .iter()
        .filter(|e| matches!(e, Event::QueryError { .. }))
        .count();
    assert_eq!(errors as u64, MAX_ERROR_FINDINGS);
    assert_eq!(
        f.events.last(),
        Some(&Event::QueryErrorsTotal {
            count: 25,
            listed: 20
        })
    );
    let Event::QueryError { sql, code, .. } = &f.events[0] else {
        panic!()
    };
    assert_eq!(
        (sql.as_str(), code.as_deref()),
        ("SELECT * FROM nope_0", Some("42P01"))
    );
}

#[test]
fn error_outside_any_query_is_a_server_error() {
    let f = run(
        &startup(),
        &error("28P01", "password authentication failed"),
        Cut::Whole,
        true,
    );
    assert_eq!(
        f.events,
        [Event::ServerError {
            code: Some("28P01".into()),
            message: Some("password authentication failed".into()),
            frame: 1
        }]
    );
}

#[test]
fn scram_exchange_names_without_secrets() {
    let init = msg(
        b'p',
        &[
            cstr("SCRAM-SHA-256"),
            5u32.to_be_bytes().to_vec(),
            b"n,,n=".to_vec(),
        ]
        .concat(),
    );
    let last = msg(b'p', b"c=biws,r=secretnonce,p=PROOF");
    let sasl = msg(
        b'R',
        &[10u32.to_be_bytes().to_vec(), cstr("SCRAM-SHA-256"), vec![0]].concat(),
    );
    let cont = msg(
        b'R',
        &[&11u32.to_be_bytes()[..], b"r=x,s=y,i=4096"].concat(),
    );
    let fin = [
        msg(b'R', &[&12u32.to_be_bytes()[..], b"v=sig"].concat()),
        auth_ok(),
        ready(),
    ]
    .concat();
    let mut conv = Conversation::new();
    let mut off = [0i64; 2];
    for (d, data) in [
        (0, startup()),
        (1, sasl),
        (0, init),
        (1, cont),
        (0, last),
        (1, fin),
    ] {
        conv.feed(d, &data, off[d], 1, 1.0, true);
        off[d] += data.len() as i64;
    }
    let f = conv.facts();
    assert_eq!(count(&f, Role::Frontend, "SASLInitialResponse"), 1);
    assert_eq!(count(&f, Role::Frontend, "SASLResponse"), 1);
    assert_eq!(count(&f, Role::Backend, "AuthenticationSASLFinal"), 1);
    let text = serde_json::to_string(&f).unwrap();
    assert!(!text.contains("PROOF") && !text.contains("secretnonce"));
}

#[test]
fn unnamed_authentication_codes_keep_their_number() {
    let back = [
        msg(b'R', &77u32.to_be_bytes()),
        msg(b'R', b"\x01"),
        auth_ok(),
    ]
    .concat();
    let f = run(&startup(), &back, Cut::Whole, true);
    assert_eq!(
        counts(&f, Role::Backend),
        [
            ("Authentication77".into(), 1),
            ("Authentication".into(), 1),
            ("AuthenticationOk".into(), 1)
        ]
    );
}

#[test]
fn function_call_is_a_query_with_its_response() {
    let call = msg(
        b'F',
        &[&764u32.to_be_bytes()[..], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 1]].concat(),
    );
    let result = msg(b'V', &[4u32.to_be_bytes(), 16385u32.to_be_bytes()].concat());
    let front = [startup(), call, msg(b'X', b"")].concat();
    let back = [auth_ok(), ready(), result.clone(), ready()].concat();
    let f = run(&front, &back, Cut::Whole, true);
    let q = &f.queries[0];
    assert_eq!(
        (q.kind, q.sql.as_str()),
        (QueryKind::Function, "FunctionCall oid 764")
    );
    assert_eq!(q.response_messages, 2);
    assert_eq!(q.response_bytes, (result.len() + ready().len()) as u64);
}

#[test]
fn queries_beyond_the_cap_are_counted_not_kept() {
    let n = MAX_QUERIES as usize + 50;
    let q = msg(b'Q', &cstr("SELECT 1"));
    let answer = [desc(), datarow(1), msg(b'C', &cstr("SELECT 1")), ready()].concat();
    let mut conv = Conversation::new();
    conv.feed(0, &startup(), 0, 1, 0.0, true);
    conv.feed(1, &[auth_ok(), ready()].concat(), 0, 2, 0.0, true);
    let mut off = [
        startup().len() as i64,
        (auth_ok().len() + ready().len()) as i64,
    ];
    for i in 0..n {
        conv.feed(0, &q, off[0], 3 + 2 * i as u64, i as f64, true);
        conv.feed(1, &answer, off[1], 4 + 2 * i as u64, i as f64, true);
        off[0] += q.len() as i64;
        off[1] += answer.len() as i64;
    }
    conv.finish();
    let f = conv.facts();
    assert_eq!(
        (f.queries_total, f.queries.len()),
        (n as u64, MAX_QUERIES as usize)
    );
    assert_eq!(count(&f, Role::Backend, "DataRow"), n as u64);
    assert!(conv.pending.is_empty() && conv.store.extra.len() <= 2);
    let capped: Vec<_> = f
        .events
        .iter()
        .filter(|e| matches!(e, Event::QueriesCapped { .. }))
        .collect();
    assert_eq!(
        capped,
        [&Event::QueriesCapped {
            listed: MAX_QUERIES,
            frame: 3 + 2 * MAX_QUERIES
        }]
    );
}

#[test]
fn direct_tls_with_and_without_alpn_postgresql() {
    let hello = super::tls::tests_hello(Some(&[b"postgresql"]), 0);
    let mut conv = Conversation::new();
    for (i, c) in hello.chunks(100).enumerate() {
        conv.feed(0, c, i as i64 * 100, 1 + i as u64, 1.0, true);
    }
    conv.feed(
        1,
        &[&b"\x16\x03\x03\x00\x7a\x02"[..], &[0; 200]].concat(),
        0,
        50,
        2.0,
        true,
    );
    conv.finish();
    let f = conv.facts();
    assert_eq!(f.protocol, Protocol::PostgresqlTls);
    let last = 1 + (hello.len() as u64 - 1) / 100;
    assert_eq!(
        f.events,
        [Event::Encrypted {
            encryption: Encryption::Tls,
            request: None,
            frame: last
        }]
    );
    for alpn in [None, Some(&[&b"h2"[..], b"http/1.1"][..])] {
        let mut conv = Conversation::new();
        conv.feed(0, &super::tls::tests_hello(alpn, 0), 0, 1, 1.0, true);
        conv.finish();
        let f = conv.facts();
        assert_eq!(f.protocol, Protocol::Unknown);
        let offered: Vec<String> = alpn
            .unwrap_or(&[])
            .iter()
            .map(|n| String::from_utf8_lossy(n).into())
            .collect();
        assert_eq!(
            f.decode_stopped.unwrap().reason,
            StopReason::TlsWithoutAlpn { offered }
        );
    }
}

#[test]
fn command_tags_summed_past_64_bits() {
    let big = format!("SELECT {}", 1u64 << 62);
    let front = [startup(), msg(b'Q', &cstr("q1; q2; q3"))].concat();
    let back = [
        auth_ok(),
        ready(),
        msg(b'C', &cstr(&big)).repeat(5),
        ready(),
    ]
    .concat();
    let f = run(&front, &back, Cut::Whole, true);
    assert_eq!(
        f.queries[0].rows,
        Some(RowCount::Big("23058430092136939520".into()))
    );
    let json = serde_json::to_value(&f.queries[0]).unwrap();
    assert_eq!(json["rows"], "23058430092136939520");
}

#[test]
fn facts_serialize_in_the_reports_order() {
    let (front, back) = select_exchange(2);
    let f = run(&front, &back, Cut::Whole, true);
    let text = serde_json::to_string(&f).unwrap();
    let at = |k: &str| text.find(k).unwrap();
    assert!(at("\"StartupMessage\"") < at("\"Query\"") && at("\"Query\"") < at("\"Terminate\""));
    assert!(at("\"protocol\"") < at("\"startup\"") && at("\"queries\"") < at("\"queries_total\""));
}

/// Hostile bytes never panic, and the same bytes cut any way give the same facts.
#[test]
fn arbitrary_and_mutated_bytes() {
    let mut rng = Rng::new(1);
    let (front, back) = select_exchange(15);
    let (xf, xb) = extended_pipeline();
    for i in 0..3000 {
        let (mut f, mut b) = match i % 3 {
            0 => {
                let (a, b) = (rng.below(600), rng.below(600));
                (rng.bytes(a), rng.bytes(b))
            }
            1 => (front.clone(), back.clone()),
            _ => (xf.clone(), xb.clone()),
        };
        for _ in 0..rng.below(4) {
            let target = if rng.below(2) == 0 { &mut f } else { &mut b };
            if target.is_empty() {
                continue;
            }
            let at = rng.below(target.len());
            let n = 1 + rng.below(8);
            let junk = rng.bytes(n);
            let end = (at + junk.len()).min(target.len());
            match rng.below(3) {
                0 => drop(target.splice(at..end, junk)),
                1 => drop(target.splice(at..at, junk)),
                _ => drop(target.drain(at..end)),
            }
        }
        let seen = rng.below(2) == 0;
        let whole = run(&f, &b, Cut::Whole, seen);
        let split = run(&f, &b, Cut::Random(i), seen);
        if !matches!(whole.protocol, Protocol::Unknown) || i % 3 != 0 {
            // every cut sees the same messages (a sync window filled at a different byte can
            // settle elsewhere: only whole and cut PostgreSQL streams are compared)
            assert_eq!(whole.messages, split.messages, "case {i}");
        }
        let _ = serde_json::to_string(&whole).unwrap();
    }
}

#[test]
fn gaps_and_feeds_in_any_order_never_panic() {
    let mut rng = Rng::new(9);
    let (front, back) = select_exchange(40);
    for _ in 0..2000 {
        let mut conv = Conversation::new();
        for _ in 0..rng.below(30) {
            let d = rng.below(3); // 2: a direction that does not exist
            let off = rng.next() as i64 >> rng.below(64);
            match rng.below(4) {
                0 => conv.gap(d, off, rng.next() as i64 >> rng.below(64), 1, 0.0),
                1 => {
                    let n = rng.below(50);
                    let data = rng.bytes(n);
                    conv.feed(d, &data, off, 2, 0.0, rng.below(2) == 0)
                }
                _ => {
                    let src = if d == 0 { &front } else { &back };
                    let at = rng.below(src.len());
                    let end = (at + rng.below(200)).min(src.len());
                    conv.feed(d, &src[at..end], off, 3, 0.0, true)
                }
            }
        }
        conv.finish();
        let _ = conv.facts();
    }
}

#[test]
fn a_long_pipeline_before_its_sync_stays_linear() {
    let n = 20_000;
    let exec = [msg(b'B', &[0; 8]), msg(b'E', &[0; 5])].concat();
    let front = [
        startup(),
        msg(b'P', &[cstr(""), cstr("SELECT 1"), vec![0, 0]].concat()),
        exec.repeat(n),
        msg(b'S', b""),
    ]
    .concat();
    let answer = [msg(b'2', b""), datarow(1), msg(b'C', &cstr("SELECT 1"))].concat();
    let back = [
        auth_ok(),
        ready(),
        msg(b'1', b""),
        answer.repeat(n),
        ready(),
    ]
    .concat();
    let t = std::time::Instant::now();
    let f = run(&front, &back, Cut::Random(1), true);
    assert!(t.elapsed().as_secs_f64() < 10.0, "{:?}", t.elapsed()); // quadratic: minutes
    assert_eq!(f.queries_total, n as u64);
    assert!(f
        .queries
        .iter()
        .all(|q| q.rows == Some(RowCount::Small(1)) && q.sql == "SELECT 1"));
    assert_eq!(f.queries.first().map(|q| q.response_messages), Some(4)); // with the ParseComplete
}

#[test]
fn a_query_is_compact_and_the_decoder_can_move_between_threads() {
    fn send<T: Send>() {}
    send::<Conversation>();
    // a listed query in memory: this struct, its SQL (shared with its statement) and its
    // segment sizes' few keys
    let size = std::mem::size_of::<super::query::Query>();
    assert!(size <= 192, "{size} bytes per query");
}

#[test]
fn a_cut_control_message_waits_whole_up_to_keep_cap() {
    let (front, _) = select_exchange(0);
    let mut conv = Conversation::new();
    conv.feed(0, &front, 0, 1, 1.0, true);
    let head = [auth_ok(), ready()].concat();
    conv.feed(1, &head, 0, 2, 1.0, true);
    let mut off = head.len();
    // a RowDescription of KEEP_CAP bytes, cut in 1,460-byte segments: it waits in the buffer
    let big = msg(b'T', &vec![0; KEEP_CAP - 4]);
    for (i, c) in big.chunks(1460).enumerate() {
        conv.feed(1, c, off as i64, 3 + i as u64, 1.0, true);
        off += c.len();
        assert!(conv.sides[1].buf.len() <= KEEP_CAP + 1);
    }
    assert!(conv.sides[1].buf.is_empty());
    // past KEEP_CAP it is read up to there and skipped
    let bigger = msg(b'T', &vec![0; KEEP_CAP + 10]);
    for c in bigger.chunks(1460) {
        conv.feed(1, c, off as i64, 9, 1.0, true);
        off += c.len();
        assert!(conv.sides[1].buf.len() < 1460 + 5);
    }
    assert_eq!(count(&conv.facts(), Role::Backend, "RowDescription"), 2);
}
