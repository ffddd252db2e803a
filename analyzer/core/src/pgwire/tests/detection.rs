//! What is taken as PostgreSQL: a startup cut by a short snapshot length, a connection seen
//! mid-stream and proven (or not), other protocols where a segment starts.

use super::*;

/// Feed each segment whole or, past `keep` bytes, its first `keep` and a gap for the rest
/// (tcpdump -s: the headers take the rest of the snapshot length). Frames count up from
/// `frame` across the segments, both directions interleaved in the order given.
fn feed_cut(conv: &mut Conversation, segments: &[(usize, Vec<u8>)], keep: usize, seen: bool) {
    let mut offsets = [0i64; 2];
    for (i, (d, seg)) in segments.iter().enumerate() {
        let frame = i as u64 + 1;
        let kept = &seg[..seg.len().min(keep)];
        conv.feed(*d, kept, offsets[*d], frame, frame as f64, seen);
        if seg.len() > keep {
            let at = offsets[*d] + keep as i64;
            conv.gap(*d, at, (seg.len() - keep) as i64, frame, frame as f64);
        }
        offsets[*d] += seg.len() as i64;
    }
    conv.finish();
}

fn session(n: usize) -> Vec<(usize, Vec<u8>)> {
    vec![
        (0, startup()),
        (
            1,
            [
                auth_ok(),
                msg(b'S', &[cstr("server_version"), cstr("15.20")].concat()),
                ready(),
            ]
            .concat(),
        ),
        (0, msg(b'Q', &cstr("SELECT * FROM t10k"))),
        (
            1,
            [
                desc(),
                rows(n),
                msg(b'C', &cstr(&format!("SELECT {n}"))),
                ready(),
            ]
            .concat(),
        ),
        (
            0,
            msg(
                b'Q',
                &cstr("SET application_name = 'a long name for a setting'"),
            ),
        ),
        (1, [msg(b'C', &cstr("SET")), ready()].concat()),
        (0, msg(b'X', b"")),
    ]
}

#[test]
fn a_startup_cut_after_its_first_8_bytes_is_recognised() {
    // at -s 96 on loopback 30 payload bytes remain: "user\0alice\0database\0sh" of 53
    let mut conv = Conversation::new();
    feed_cut(&mut conv, &session(20), 30, true);
    let f = conv.facts();
    assert_eq!(f.protocol, Protocol::Postgresql);
    assert_eq!(f.decode_started_at, Some(StartedAt::Startup));
    let startup = f.startup.clone().unwrap();
    assert_eq!(
        (startup.user.as_deref(), startup.database, startup.captured),
        (Some("alice"), None, Some(30))
    );
    assert_eq!(
        f.events[0],
        Event::StartupCut {
            message: "StartupMessage",
            length: startup_len(),
            captured: 30,
            frame: 1
        }
    );
    let sql: Vec<&str> = f.queries.iter().map(|q| q.sql.as_str()).collect();
    assert_eq!(sql, ["SELECT * FROM t10k", "SET application_name = 'a"]);
    assert!(f.queries[1].sql_truncated);
}

fn startup_len() -> i64 {
    startup().len() as i64
}

#[test]
fn a_startup_cut_before_8_bytes_is_decoded_from_the_next_boundary() {
    // at -s 68 two payload bytes remain: the startup is lost, the rest has to prove itself
    let mut conv = Conversation::new();
    let mut segs = session(2);
    segs.truncate(6);
    segs[0].1.truncate(2); // what -s 68 keeps, as if the whole segment were 2 bytes
    let mut offsets = [0i64; 2];
    for (i, (d, seg)) in segs.iter().enumerate() {
        let frame = i as u64 + 1;
        if i == 0 {
            conv.feed(0, &seg[..2], 0, 1, 1.0, true);
            conv.gap(0, 2, startup_len() - 2, 1, 1.0);
            offsets[0] = startup_len();
            continue;
        }
        conv.feed(*d, seg, offsets[*d], frame, frame as f64, true);
        offsets[*d] += seg.len() as i64;
    }
    conv.finish();
    let f = conv.facts();
    assert_eq!(f.protocol, Protocol::Postgresql);
    assert!(f.startup.is_none());
    let Event::MidStream {
        start_seen: true,
        proof,
        ..
    } = &f.events[0]
    else {
        panic!("{:?}", f.events);
    };
    assert_eq!((proof.request, proof.response), ("Query", "RowDescription"));
    assert_eq!(f.queries.len(), 2);
}

#[test]
fn mid_stream_at_a_short_snaplen_two_exchanges_prove_it() {
    // a pooled server connection seen mid-stream at -s 96: every segment's first 30 bytes;
    // no ReadyForQuery survives, two requests answered by their kind do
    let segs: Vec<(usize, Vec<u8>)> = session(200).into_iter().skip(2).collect();
    let mut conv = Conversation::new();
    feed_cut(&mut conv, &segs, 30, false);
    let f = conv.facts();
    assert_eq!(f.protocol, Protocol::Postgresql);
    let Event::MidStream { proof, .. } = &f.events[0] else {
        panic!("{:?}", f.events);
    };
    assert_eq!(
        (proof.exchanges, proof.closed_frame, proof.response),
        (2, None, "RowDescription")
    );
    let sql: Vec<&str> = f.queries.iter().map(|q| q.sql.as_str()).collect();
    assert_eq!(sql, ["SELECT * FROM t10k", "SET application_name = 'a"]);
    assert_eq!(f.queries[1].command_tag.as_deref(), Some("SET"));
}

#[test]
fn one_exchange_without_its_ready_for_query_is_not_proof() {
    let segs = vec![
        (0, msg(b'Q', &cstr("SELECT * FROM t10k"))),
        (1, [desc(), rows(200)].concat()),
    ];
    let mut conv = Conversation::new();
    feed_cut(&mut conv, &segs, 30, false);
    let f = conv.facts();
    assert_eq!(f.protocol, Protocol::Unknown);
    assert!(f.queries.is_empty());
    assert_eq!(
        f.decode_stopped.map(|s| s.reason),
        Some(StopReason::Unproven {
            frontend_messages: 1,
            backend_messages: 1,
            exchanges: 1,
            misfits: 0
        })
    );
}

fn refused_as(front: &[u8], back: &[u8]) -> StopReason {
    let mut conv = Conversation::new();
    conv.feed(0, front, 0, 1, 1.0, false);
    conv.feed(1, back, 0, 2, 1.0, false);
    conv.finish();
    let f = conv.facts();
    assert_eq!(f.protocol, Protocol::Unknown);
    assert!(f.queries.is_empty() && f.messages.frontend.0.is_empty());
    assert_eq!(f.events.len(), 1, "{:?}", f.events);
    f.decode_stopped.unwrap().reason
}

#[test]
fn other_protocols_say_so_mid_stream() {
    let tls = [
        &[23u8, 3, 3, 0, 40][..],
        &[0x5a; 40],
        &[23, 3, 3, 0, 8],
        &[1; 8],
    ]
    .concat();
    let StopReason::OtherProtocol { protocol, seen } = refused_as(&tls, &tls) else {
        panic!()
    };
    assert_eq!(protocol, "TLS");
    assert!(seen.contains("ApplicationData"), "{seen}");
    let http = refused_as(
        b"GET /metrics HTTP/1.1\r\nHost: db\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n\r\n",
    );
    assert!(matches!(
        http,
        StopReason::OtherProtocol {
            protocol: "HTTP",
            ..
        }
    ));
    let mut keepalive = vec![0xFF; 16];
    keepalive.extend([0, 19, 4]);
    let bgp = refused_as(&keepalive, &keepalive);
    assert!(matches!(
        bgp,
        StopReason::OtherProtocol {
            protocol: "BGP",
            ..
        }
    ));
    let ssh = refused_as(b"SSH-2.0-OpenSSH_9.2p1\r\n", b"SSH-2.0-OpenSSH_9.2p1\r\n");
    assert!(matches!(
        ssh,
        StopReason::OtherProtocol {
            protocol: "SSH",
            ..
        }
    ));
}

#[test]
fn a_message_of_the_wrong_shape_refuses_an_unproven_connection() {
    // a ReadyForQuery of a status PostgreSQL never sends
    let back = [msg(b'C', &cstr("SELECT 1")), msg(b'Z', b"Q")].concat();
    let reason = refused_as(&msg(b'Q', &cstr("SELECT 1")), &back);
    assert_eq!(
        reason,
        StopReason::Misfit {
            type_byte: b'Z',
            role: Role::Backend,
            length: 5
        }
    );
}

#[test]
fn random_bytes_are_never_proven() {
    for seed in 0..200 {
        let mut rng = Rng::new(seed);
        let mut conv = Conversation::new();
        let mut offsets = [0i64; 2];
        for i in 0..40 {
            let d = i % 2;
            let n = 1 + rng.below(1500);
            let seg = rng.bytes(n);
            conv.feed(d, &seg, offsets[d], i as u64 + 1, i as f64, false);
            offsets[d] += seg.len() as i64;
        }
        conv.finish();
        let f = conv.facts();
        assert_eq!(f.protocol, Protocol::Unknown, "seed {seed}");
        assert!(f.queries.is_empty() && f.messages.backend.0.is_empty());
    }
}

#[test]
fn a_connection_of_which_no_payload_byte_was_captured_says_so() {
    // -s 54 on Ethernet: every segment's payload is a gap
    let mut conv = Conversation::new();
    conv.gap(0, 0, 53, 1, 1.0);
    conv.gap(1, 0, 40, 2, 1.0);
    conv.finish();
    let f = conv.facts();
    assert_eq!(f.protocol, Protocol::Unknown);
    assert_eq!(
        f.decode_stopped.map(|s| (s.offset, s.reason)),
        Some((0, StopReason::NothingCaptured { bytes: 93 }))
    );
    // and one without any payload says nothing
    let mut conv = Conversation::new();
    conv.finish();
    assert!(conv.facts().events.is_empty());
}
