//! Streams that do not start as a plain session does: encryption, foreign bytes, a capture
//! that began mid-stream, gaps, malformed framing.

use super::*;

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
        (
            Role::Frontend,
            0,
            StopReason::OtherProtocol {
                protocol: "HTTP",
                seen: "\"GET / HTTP/1.1\"".into()
            }
        )
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

/// A pooled server connection captured late: the backend is in the middle of a response,
/// then the pooler sends two queries.
fn late_pool() -> (Vec<u8>, Vec<u8>) {
    let back = [
        rows(5)[7..].to_vec(),
        msg(b'C', &cstr("SELECT 9")),
        ready(),
        msg(b'T', &[0, 0]),
        msg(b'C', &cstr("SELECT 0")),
        ready(),
        msg(b'C', &cstr("SET")),
        ready(),
    ]
    .concat();
    let front = [msg(b'Q', &cstr("SELECT 1")), msg(b'Q', &cstr("SET x=1"))].concat();
    (front, back)
}

#[test]
fn mid_stream_a_request_answered_and_closed_is_proof() {
    let (front, back) = late_pool();
    let q1 = msg(b'Q', &cstr("SELECT 1")).len();
    let tail = rows(5).len() - 7 + msg(b'C', &cstr("SELECT 9")).len() + ready().len();
    let answer = msg(b'T', &[0, 0]).len() + msg(b'C', &cstr("SELECT 0")).len() + ready().len();
    let mut conv = Conversation::new();
    conv.feed(1, &back[..tail], 0, 1, 1.0, false); // the end of an answer: nothing proven
    conv.feed(0, &front[..q1], 0, 2, 1.1, false);
    conv.feed(1, &back[tail..tail + answer], tail as i64, 3, 1.2, false);
    assert_eq!(conv.protocol(), Protocol::Postgresql);
    conv.feed(0, &front[q1..], q1 as i64, 4, 1.3, false);
    conv.feed(
        1,
        &back[tail + answer..],
        (tail + answer) as i64,
        5,
        1.4,
        false,
    );
    conv.finish();
    let f = conv.facts();
    assert_eq!(
        (f.frontend_direction, f.decode_started_at),
        (Some(0), Some(StartedAt::MidStream))
    );
    assert_eq!(counts(&f, Role::Frontend), [("Query".into(), 2)]);
    assert_eq!(count(&f, Role::Backend, "ReadyForQuery"), 3);
    assert_eq!(f.queries.len(), 2);
    assert_eq!(f.queries[0].command_tag.as_deref(), Some("SELECT 0"));
    assert!(f.lost_bytes.backend > 0);
    let Event::MidStream {
        role: Role::Backend,
        frame: 1,
        start_seen: false,
        proof,
        ..
    } = &f.events[0]
    else {
        panic!("{:?}", f.events);
    };
    assert_eq!(
        proof,
        &Proof {
            request: "Query",
            request_frame: 2,
            response: "RowDescription",
            response_frame: 3,
            exchanges: 1,
            closed_frame: Some(3),
        }
    );
}

#[test]
fn mid_stream_roles_are_tcps_never_swapped() {
    // the same bytes with the engine's guess the other way round: the backend's bytes are
    // read as a frontend's, and they are not a frontend's
    let (front, back) = late_pool();
    let mut conv = Conversation::new();
    conv.feed(0, &back, 0, 1, 1.0, false);
    conv.feed(1, &front, 0, 2, 1.0, false);
    conv.finish();
    let f = conv.facts();
    assert_eq!(
        (f.protocol, f.frontend_direction),
        (Protocol::Unknown, None)
    );
    assert!(f.queries.is_empty() && f.messages.frontend.0.is_empty());
    assert!(matches!(f.events[..], [Event::NotPostgresql { .. }]));
}

#[test]
fn mid_stream_plausible_messages_without_an_exchange_are_not_proof() {
    // the HTTPS case: a CloseComplete and a ParameterDescription frame, nothing
    // answers anything
    let back = [
        msg(b'3', b""),
        msg(b't', &[0, 1, 0, 0, 0, 23]),
        msg(b'3', b""),
    ]
    .concat();
    let front = msg(b'S', b"");
    let mut conv = Conversation::new();
    conv.feed(1, &back, 0, 1, 1.0, false);
    conv.feed(0, &front, 0, 2, 1.0, false);
    conv.finish();
    let f = conv.facts();
    assert_eq!(f.protocol, Protocol::Unknown);
    assert!(f.messages.backend.0.is_empty() && f.events.len() == 1);
    assert_eq!(
        f.decode_stopped.map(|s| s.reason),
        Some(StopReason::Unproven {
            frontend_messages: 1,
            backend_messages: 3,
            exchanges: 0,
            misfits: 0
        })
    );
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
fn bytes_a_gap_hid_count_in_the_response_size() {
    let (front, back) = select_exchange(200);
    let whole = {
        let mut conv = Conversation::new();
        conv.feed(0, &front, 0, 1, 1.0, true);
        conv.feed(1, &back, 0, 2, 1.0, true);
        conv.finish();
        conv.facts().queries[0].response_bytes
    };
    let i = back
        .windows(datarow(50).len())
        .position(|w| w == datarow(50))
        .unwrap()
        + 3;
    let mut conv = Conversation::new();
    conv.feed(0, &front, 0, 1, 1.0, true);
    conv.feed(1, &back[..i], 0, 2, 1.0, true);
    conv.gap(1, i as i64, 500, 3, 1.5);
    conv.feed(1, &back[i + 500..], i as i64 + 500, 4, 2.0, true);
    conv.finish();
    let f = conv.facts();
    // the sequence numbers' size, though fewer messages were decoded
    assert_eq!(f.queries[0].response_bytes, whole);
    assert!(f.queries[0].response_messages < 203);
}

#[test]
fn a_query_whose_end_a_gap_hid_closes_at_the_next_query() {
    // SELECT's CommandComplete and ReadyForQuery fall in a gap (a short snaplen); the client
    // then sends DISCARD ALL: its answer must not become the SELECT's
    let front = [
        startup(),
        msg(b'Q', &cstr("SELECT * FROM t")),
        msg(b'Q', &cstr("DISCARD ALL")),
    ];
    let head = [auth_ok(), ready(), desc(), rows(20)].concat();
    let lost = [msg(b'C', &cstr("SELECT 20")), ready()].concat();
    let tail = [msg(b'C', &cstr("DISCARD ALL")), ready()].concat();
    let mut conv = Conversation::new();
    conv.feed(
        0,
        &[front[0].clone(), front[1].clone()].concat(),
        0,
        1,
        1.0,
        true,
    );
    conv.feed(1, &head, 0, 2, 1.1, true);
    conv.gap(1, head.len() as i64, lost.len() as i64, 3, 1.2);
    let at = (front[0].len() + front[1].len()) as i64;
    conv.feed(0, &front[2], at, 4, 1.3, true);
    conv.feed(1, &tail, (head.len() + lost.len()) as i64, 5, 1.4, true);
    conv.finish();
    let f = conv.facts();
    let (select, discard) = (&f.queries[0], &f.queries[1]);
    assert!(select.incomplete);
    assert_eq!(select.command_tag, None);
    assert_eq!((select.rows.clone(), select.data_rows), (None, 20)); // 20 seen, more maybe
    let select_bytes = (head.len() - auth_ok().len() - ready().len() + lost.len()) as u64;
    assert_eq!(select.response_bytes, select_bytes);
    assert_eq!(discard.command_tag.as_deref(), Some("DISCARD ALL"));
    assert!(!discard.incomplete);
    assert_eq!(discard.response_bytes, tail.len() as u64);
}

#[test]
fn a_message_cut_by_a_short_snaplen_keeps_its_boundary() {
    // each segment keeps its first bytes only: the Query's SQL is cut, but its length says
    // where the next message starts, so nothing is lost to a resync
    let long = format!("SELECT {} FROM t", "x, ".repeat(100));
    let first = msg(b'Q', &cstr(&long));
    let second = msg(b'Q', &cstr("SELECT 1"));
    let mut conv = Conversation::new();
    conv.feed(0, &startup(), 0, 1, 1.0, true);
    let at = startup().len() as i64;
    conv.feed(0, &first[..60], at, 2, 1.1, true);
    conv.gap(0, at + 60, first.len() as i64 - 60, 2, 1.1);
    conv.feed(0, &second, at + first.len() as i64, 3, 1.2, true);
    let back = [auth_ok(), ready(), msg(b'C', &cstr("SELECT 1")), ready()].concat();
    conv.feed(1, &back, 0, 4, 1.3, true);
    conv.finish();
    let f = conv.facts();
    assert!(f.events.is_empty(), "{:?}", f.events);
    assert_eq!(f.queries.len(), 2);
    assert!(f.queries[0].sql_truncated && long.starts_with(&*f.queries[0].sql));
    assert_eq!(
        (&*f.queries[1].sql, f.queries[1].sql_truncated),
        ("SELECT 1", false)
    );
    assert_eq!(count(&f, Role::Frontend, "Query"), 2);
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
    // nothing decoded yet: not PostgreSQL, and the event says why
    let mut conv = Conversation::new();
    conv.feed(1, b"?\x00\x00\x00\x04", 0, 1, 1.0, true);
    conv.feed(0, b"", 0, 2, 1.0, true);
    let f = conv.facts();
    assert_eq!(f.protocol, Protocol::Unknown);
    assert_eq!(
        f.events,
        [Event::NotPostgresql {
            role: Role::Backend,
            offset: 0,
            frame: 1,
            reason: StopReason::NotRoleType {
                type_byte: b'?',
                role: Role::Backend
            }
        }]
    );
}

#[test]
fn direct_tls_with_and_without_alpn_postgresql() {
    let hello = crate::pgwire::tls::tests_hello(Some(&[b"postgresql"]), 0);
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
        conv.feed(
            0,
            &crate::pgwire::tls::tests_hello(alpn, 0),
            0,
            1,
            1.0,
            true,
        );
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

/// A message of type `t` whose length field says `ln` (the body zeros).
fn sized(t: u8, ln: usize) -> Vec<u8> {
    msg(t, &vec![0u8; ln.saturating_sub(4)])
}

#[test]
fn fixed_length_types_at_other_lengths_are_malformed() {
    let (front, back) = select_exchange(1);
    let at = back.len() - ready().len(); // before the last ReadyForQuery
    let cases: [(Role, u8, i64, &[usize]); 12] = [
        (Role::Backend, b'I', 4, &[5, 6, 12]),
        (Role::Backend, b'1', 4, &[5, 8]),
        (Role::Backend, b'2', 4, &[5, 8]),
        (Role::Backend, b'3', 4, &[5, 8]),
        (Role::Backend, b'n', 4, &[5, 8]),
        (Role::Backend, b's', 4, &[5, 8]),
        (Role::Backend, b'c', 4, &[5, 8]),
        (Role::Backend, b'Z', 5, &[4, 6, 10]),
        (Role::Backend, b'K', 12, &[4, 8, 11, 13, 16]),
        (Role::Frontend, b'S', 4, &[5, 8]),
        (Role::Frontend, b'H', 4, &[5, 8]),
        (Role::Frontend, b'X', 4, &[5, 8]),
    ];
    for (role, t, want, lengths) in cases {
        for &ln in lengths {
            let bad = sized(t, ln);
            let (f_bytes, b_bytes, offset) = if role == Role::Backend {
                let b = [&back[..at], &bad, &back[at..]].concat();
                (front.clone(), b, at)
            } else {
                let q = startup().len() + msg(b'Q', &cstr("SELECT * FROM t")).len();
                let f = [&front[..q], &bad, &front[q..]].concat();
                (f, back.clone(), q)
            };
            let mut conv = Conversation::new();
            conv.feed(0, &f_bytes, 0, 1, 1.0, true);
            conv.feed(1, &b_bytes, 0, 7, 1.0, true);
            conv.finish();
            let f = conv.facts();
            let reason = StopReason::WrongLength {
                type_byte: t,
                role,
                length: ln as i64,
                min: want,
                max: want,
            };
            let frame = if role == Role::Backend { 7 } else { 1 };
            assert_eq!(
                f.events,
                [Event::Malformed {
                    role,
                    offset: offset as i64,
                    frame,
                    reason
                }],
                "{} at length {ln}",
                t as char
            );
        }
    }
    // CopyDone from the frontend: after a COPY FROM STDIN's CopyData
    let front = [
        startup(),
        msg(b'Q', &cstr("COPY t FROM STDIN")),
        msg(b'd', b"1\n"),
        sized(b'c', 6),
    ]
    .concat();
    let back = [auth_ok(), ready(), msg(b'G', &[0, 0, 1, 0, 0])].concat();
    let f = run(&front, &back, Cut::Whole, true);
    assert!(matches!(
        f.decode_stopped.map(|s| s.reason),
        Some(StopReason::WrongLength {
            type_byte: b'c',
            role: Role::Frontend,
            length: 6,
            min: 4,
            max: 4
        })
    ));
}

#[test]
fn backend_key_data_of_protocol_3_2_may_carry_a_longer_key() {
    // protocol 3.2 (PostgreSQL 18): a secret key of up to 256 bytes
    let mut start = startup();
    start[4..8].copy_from_slice(&196_610u32.to_be_bytes());
    let key = [&4242u32.to_be_bytes()[..], &[7u8; 32]].concat();
    let back = [auth_ok(), msg(b'K', &key), ready()].concat();
    let f = run(&start, &back, Cut::Whole, true);
    assert!(f.events.is_empty(), "{:?}", f.events);
    assert_eq!(f.backend_pid, Some(4242));
    // the server settled on 3.0 (NegotiateProtocolVersion): the key is 4 bytes again
    let nego = msg(b'v', &[0u32.to_be_bytes(), 0u32.to_be_bytes()].concat());
    let back = [auth_ok(), nego, msg(b'K', &key), ready()].concat();
    let f = run(&start, &back, Cut::Whole, true);
    assert!(matches!(
        f.decode_stopped.map(|s| s.reason),
        Some(StopReason::WrongLength {
            type_byte: b'K',
            length: 40,
            min: 12,
            max: 12,
            ..
        })
    ));
}

/// A MySQL server greeting (protocol 10) whose payload is `len` bytes: its 3-byte length and
/// sequence number 0 read as a PostgreSQL header of type `len as u8` and length 10.
fn mysql_greeting(len: usize) -> Vec<u8> {
    let mut body = b"\x0a8.0.36\0".to_vec();
    body.extend_from_slice(&12u32.to_le_bytes());
    body.extend_from_slice(b"abcdefgh\0\xff\xff\x21\x02\x00\xff\xdf\x15");
    body.resize(len.saturating_sub(22), 0);
    body.extend_from_slice(b"caching_sha2_password\0");
    let mut v = (body.len() as u32).to_le_bytes()[..3].to_vec();
    v.push(0);
    v.extend(body);
    v
}

#[test]
fn a_mysql_server_greeting_is_not_postgres_and_no_error() {
    let login = [&[0x40u8, 0, 0, 1][..], &[0x85, 0xa6, 0x0f, 0], &[0u8; 60]].concat();
    // 'I' (EmptyQueryResponse) of length 10 is no EmptyQueryResponse; 'R' (Authentication)
    // and 'E' (ErrorResponse) of length 10 frame, but their bodies fit neither: the greeting
    // itself (frame 4) refuses the connection, before the client's login
    for len in [0x49usize, 0x52, 0x45] {
        let greeting = mysql_greeting(len);
        assert_eq!(
            (greeting[0], &greeting[1..5]),
            (len as u8, &[0, 0, 0, 10][..])
        );
        let mut conv = Conversation::new();
        conv.feed(1, &greeting, 0, 4, 1.0, true);
        conv.feed(0, &login, 0, 6, 1.1, true);
        conv.finish();
        let f = conv.into_facts().expect("no spool: nothing to read back");
        assert_eq!(f.protocol, Protocol::Unknown, "{len:#x}");
        assert!(
            matches!(
                f.events[..],
                [Event::NotPostgresql {
                    role: Role::Backend,
                    frame: 4,
                    ..
                }]
            ),
            "{len:#x}: {:?}",
            f.events
        );
        assert!(f.messages.backend.0.is_empty() && f.queries.is_empty() && f.startup.is_none());
    }
}
