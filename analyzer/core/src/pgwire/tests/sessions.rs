//! Whole sessions: startup, simple and extended queries, COPY, errors, authentication, and
//! the same bytes cut every way giving the same facts.

use super::*;

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

pub(super) fn extended_pipeline() -> (Vec<u8>, Vec<u8>) {
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
        (e.fields.code.as_deref(), e.fields.severity.as_deref()),
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

fn notice(severity: &str, code: &str, text: &str) -> Vec<u8> {
    let body = [
        b"S",
        cstr(severity).as_slice(),
        b"V",
        &cstr(severity),
        b"C",
        &cstr(code),
        b"M",
        &cstr(text),
        b"\0",
    ]
    .concat();
    msg(b'N', &body)
}

/// Segments fed in the order given, as a conversation has them (each side's offsets kept).
pub(super) fn talk(segments: &[(usize, Vec<u8>)]) -> ConversationFacts {
    let mut conv = Conversation::new();
    let mut off = [0i64; 2];
    for (i, (d, data)) in segments.iter().enumerate() {
        conv.feed(*d, data, off[*d], 1 + i as u64, 1000.0 + i as f64, true);
        off[*d] += data.len() as i64;
    }
    conv.finish();
    conv.into_facts().expect("no spool: nothing to read back")
}

#[test]
fn notices_belong_to_their_query_and_outside_one_to_the_session() {
    let skip = notice("NOTICE", "00000", "table \"gone\" does not exist, skipping");
    let f = talk(&[
        (0, startup()),
        (
            1,
            [auth_ok(), notice("WARNING", "01000", "at startup"), ready()].concat(),
        ),
        (0, msg(b'Q', &cstr("DROP TABLE IF EXISTS gone"))),
        (
            1,
            [skip.clone(), msg(b'C', &cstr("DROP TABLE")), ready()].concat(),
        ),
        (0, msg(b'Q', &cstr("SELECT 1"))),
        (
            1,
            [desc(), rows(1), msg(b'C', &cstr("SELECT 1")), ready()].concat(),
        ),
        (1, notice("WARNING", "01000", "while idle")),
    ]);
    let q = &f.queries[0];
    assert_eq!((q.notices.len(), q.notices_total), (1, 1));
    let n = &q.notices[0].fields;
    assert_eq!(
        (
            n.severity.as_deref(),
            n.code.as_deref(),
            n.message.as_deref()
        ),
        (
            Some("NOTICE"),
            Some("00000"),
            Some("table \"gone\" does not exist, skipping")
        )
    );
    assert_eq!(q.command_tag.as_deref(), Some("DROP TABLE"));
    assert_eq!((q.notices[0].frame, q.notices[0].ts), (4, 1003.0));
    assert!(f.queries[1].notices.is_empty() && f.queries[1].notices_total == 0);
    let session: Vec<_> = f
        .notices
        .iter()
        .map(|n| n.fields.message.as_deref())
        .collect();
    assert_eq!(session, [Some("at startup"), Some("while idle")]);
    assert_eq!(f.notices_total, 2);
    // a query raising many notices keeps the first few and counts them all
    let front = [startup(), msg(b'Q', &cstr("DO $$ ... $$"))].concat();
    let back = [
        auth_ok(),
        ready(),
        skip.repeat(20),
        msg(b'C', &cstr("DO")),
        ready(),
    ]
    .concat();
    let f = run(&front, &back, Cut::Bytes, true);
    assert_eq!(
        (f.queries[0].notices.len(), f.queries[0].notices_total),
        (crate::pgwire::query::MAX_QUERY_NOTICES, 20)
    );
}

#[test]
fn an_error_keeps_every_field_it_was_sent() {
    let mut body = Vec::new();
    for (letter, value) in [
        ('S', "ERREUR"),
        ('V', "ERROR"),
        ('C', "23503"),
        ('M', "insert or update violates foreign key constraint"),
        (
            'D',
            "Key (customer)=(7) is not present in table \"customers\".",
        ),
        ('s', "public"),
        ('t', "orders"),
        ('n', "orders_customer_fkey"),
        ('F', "ri_triggers.c"),
        ('L', "2608"),
        ('R', "ri_ReportViolation"),
    ] {
        body.push(letter as u8);
        body.extend(cstr(value));
    }
    body.push(0);
    let front = [startup(), msg(b'Q', &cstr("INSERT INTO orders VALUES (7)"))].concat();
    let back = [auth_ok(), ready(), msg(b'E', &body), msg(b'Z', b"I")].concat();
    let f = run(&front, &back, Cut::Random(3), true);
    let e = &f.queries[0].error.as_ref().unwrap().fields;
    assert_eq!(e.localized_severity.as_deref(), Some("ERREUR"));
    assert_eq!(e.severity.as_deref(), Some("ERROR"));
    assert_eq!(e.table.as_deref(), Some("orders"));
    assert_eq!(e.constraint.as_deref(), Some("orders_customer_fkey"));
    assert_eq!(e.routine.as_deref(), Some("ri_ReportViolation"));
    assert_eq!((e.hint.as_deref(), e.column.as_deref()), (None, None));
}

#[test]
fn a_result_has_its_columns_and_its_rows_bytes() {
    let field = |name: &str| [cstr(name), vec![0u8; 18]].concat();
    let mut t = 3u16.to_be_bytes().to_vec();
    for name in ["id", "payload", "é"] {
        t.extend(field(name));
    }
    let front = [
        startup(),
        msg(b'Q', &cstr("SELECT id, payload, 'x' AS é FROM t")),
    ]
    .concat();
    let back = [
        auth_ok(),
        ready(),
        msg(b'T', &t),
        rows(12),
        msg(b'C', &cstr("SELECT 12")),
        ready(),
    ]
    .concat();
    let f = run(&front, &back, Cut::Random(9), true);
    let q = &f.queries[0];
    assert_eq!(
        q.columns.as_deref(),
        Some(&["id".into(), "payload".into(), "é".into()][..])
    );
    assert_eq!(q.column_count, Some(3));
    // each DataRow: 2 + 4 + len("row-i") bytes of body
    let want: usize = (0..12).map(|i| datarow(i).len() - 5).sum();
    assert_eq!(q.data_row_bytes, want as u64);
    // a statement without a result (INSERT) has neither
    let front = [startup(), msg(b'Q', &cstr("INSERT INTO t VALUES (1)"))].concat();
    let back = [auth_ok(), ready(), msg(b'C', &cstr("INSERT 0 1")), ready()].concat();
    let f = run(&front, &back, Cut::Whole, true);
    assert_eq!(
        (f.queries[0].column_count, f.queries[0].data_row_bytes),
        (None, 0)
    );
    // a table of 1,600 columns keeps 64 names and counts them all; no columns is no names
    let mut wide = 1600u16.to_be_bytes().to_vec();
    for i in 0..1600 {
        wide.extend(field(&format!("c{i}")));
    }
    let back = [auth_ok(), ready(), msg(b'T', &wide), ready()].concat();
    let f = run(&front, &back, Cut::Whole, true);
    let q = &f.queries[0];
    assert_eq!(q.column_count, Some(1600));
    assert_eq!(
        q.columns.as_ref().map(Vec::len),
        Some(crate::pgwire::query::MAX_COLUMN_NAMES)
    );
    let back = [auth_ok(), ready(), msg(b'T', &[0, 0]), ready()].concat();
    let f = run(&front, &back, Cut::Whole, true);
    assert_eq!(
        (f.queries[0].column_count, f.queries[0].columns.clone()),
        (Some(0), Some(vec![]))
    );
}

fn auth(code: u32, rest: &[u8]) -> Vec<u8> {
    msg(b'R', &[&code.to_be_bytes()[..], rest].concat())
}

fn fatal(code: &str, text: &str) -> Vec<u8> {
    msg(
        b'E',
        &[
            &b"SFATAL\0VFATAL\0C"[..],
            &cstr(code),
            b"M",
            &cstr(text),
            b"\0",
        ]
        .concat(),
    )
}

#[test]
fn authentication_method_outcome_and_round_trips() {
    use crate::pgwire::facts::AuthOutcome::{Failed, Ok, Unfinished};
    let secret = b"hunter2-secret".as_slice();
    let sasl_list = [cstr("SCRAM-SHA-256-PLUS"), cstr("SCRAM-SHA-256"), vec![0]].concat();
    let initial = [
        cstr("SCRAM-SHA-256"),
        20u32.to_be_bytes().to_vec(),
        b"n,,n=,r=clientnonce0".to_vec(),
    ]
    .concat();
    let scram = vec![
        (0, startup()),
        (1, auth(10, &sasl_list)),
        (0, msg(b'p', &initial)),
        (1, auth(11, b"r=clientnonce0server,s=c2FsdA==,i=4096")),
        (
            0,
            msg(b'p', b"c=biws,r=clientnonce0server,p=hunter2-secret"),
        ),
        (
            1,
            [auth(12, b"v=c2lnbmF0dXJl"), auth(0, b""), ready()].concat(),
        ),
    ];
    let md5 = vec![
        (0, startup()),
        (1, auth(5, b"salt")),
        (0, msg(b'p', &cstr("md5hunter2-secret"))),
        (1, [auth(0, b""), ready()].concat()),
    ];
    let cleartext = vec![
        (0, startup()),
        (1, auth(3, b"")),
        (0, msg(b'p', &[secret, b"\0"].concat())),
        (1, [auth(0, b""), ready()].concat()),
    ];
    let trust = vec![(0, startup()), (1, [auth(0, b""), ready()].concat())];
    let wrong = vec![
        (0, startup()),
        (1, auth(5, b"salt")),
        (0, msg(b'p', &cstr("md5wrong"))),
        (
            1,
            fatal("28P01", "password authentication failed for user \"alice\""),
        ),
    ];
    let rejected = vec![
        (0, startup()),
        (1, fatal("28000", "no pg_hba.conf entry for host")),
    ];
    let unanswered = vec![(0, startup()), (1, auth(3, b"")), (0, msg(b'p', secret))];
    type Want<'a> = (
        Option<&'a str>,
        &'a [&'a str],
        Option<&'a str>,
        crate::pgwire::facts::AuthOutcome,
        u64,
        Option<u64>,
    );
    type Talk = [(usize, Vec<u8>)];
    let cases: [(&str, &Talk, Want); 7] = [
        (
            "scram",
            &scram,
            (
                Some("sasl"),
                &["SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"],
                Some("SCRAM-SHA-256"),
                Ok,
                3,
                Some(6),
            ),
        ),
        ("md5", &md5, (Some("md5"), &[], None, Ok, 2, Some(4))),
        (
            "cleartext",
            &cleartext,
            (Some("cleartext-password"), &[], None, Ok, 2, Some(4)),
        ),
        ("trust", &trust, (Some("trust"), &[], None, Ok, 1, Some(2))),
        (
            "wrong password",
            &wrong,
            (Some("md5"), &[], None, Failed, 2, Some(4)),
        ),
        ("rejected", &rejected, (None, &[], None, Failed, 1, Some(2))),
        (
            "unanswered",
            &unanswered,
            (Some("cleartext-password"), &[], None, Unfinished, 1, None),
        ),
    ];
    for (name, segments, want) in cases {
        let f = talk(segments);
        let a = f.authentication.clone().unwrap();
        let got = (
            a.method.as_deref(),
            a.mechanisms.iter().map(String::as_str).collect::<Vec<_>>(),
            a.mechanism.as_deref(),
            a.outcome,
            a.round_trips,
            a.last_frame,
        );
        assert_eq!(
            got,
            (want.0, want.1.to_vec(), want.2, want.3, want.4, want.5),
            "{name}"
        );
        assert_eq!((a.first_frame, a.start_ts), (1, 1000.0), "{name}");
        // never a password, a SASL proof or nonce, a hash
        let text = serde_json::to_string(&f).unwrap();
        for secret in [
            "hunter2",
            "clientnonce",
            "c2FsdA",
            "c2lnbmF0dXJl",
            "md5wrong",
        ] {
            assert!(!text.contains(secret), "{name}: {secret} in {text}");
        }
    }
    // mid-stream: no startup, no authentication
    let (_, back) = select_exchange(1);
    let f = run(&msg(b'Q', &cstr("SELECT 1")), &back[9..], Cut::Whole, false);
    assert!(f.authentication.is_none());
}

#[test]
fn every_startup_parameter_in_order() {
    let mut body = 196_608u32.to_be_bytes().to_vec();
    for s in [
        "user",
        "alice",
        "database",
        "shop",
        "client_encoding",
        "UTF8",
        "DateStyle",
        "ISO, MDY",
        "TimeZone",
        "Europe/Paris",
        "extra_float_digits",
        "3",
        "options",
        "-c geqo=off",
        "replication",
        "database",
        "application_name",
        "pg_receivewal",
    ] {
        body.extend(cstr(s));
    }
    body.push(0);
    let start = [&(body.len() as u32 + 4).to_be_bytes()[..], &body].concat();
    let f = run(&start, &auth(0, b""), Cut::Bytes, true);
    let s = f.startup.unwrap();
    let keys: Vec<&str> = s.parameters.0.iter().map(|p| p.0.as_str()).collect();
    assert_eq!(
        keys,
        [
            "user",
            "database",
            "client_encoding",
            "DateStyle",
            "TimeZone",
            "extra_float_digits",
            "options",
            "replication",
            "application_name"
        ]
    );
    assert_eq!(s.parameters.0[4].1, "Europe/Paris");
    assert_eq!(
        (s.protocol_version.as_str(), s.application_name.as_deref()),
        ("3.0", Some("pg_receivewal"))
    );
}

/// A response the capture saw but the client took only from a later copy (lost past the
/// capture point): its moments as delivered are that copy's, and every moment after the
/// resent bytes moves with them (TCP hands bytes over in order); the captured moments stay.
/// A copy of bytes before a query's, or older than its moments, leaves it as captured.
#[test]
fn a_late_copy_dates_the_moments_it_carried() {
    let (front, back) = select_exchange(3);
    let mut conv = Conversation::new();
    conv.feed(0, &front, 0, 1, 1.0, true);
    conv.feed(1, &back, 0, 2, 1.1, true);
    let rows_at = back.len() - rows(3).len() - msg(b'C', &cstr("SELECT 3")).len() - 6;
    let (rows_at, end) = (rows_at as i64, back.len() as i64);
    // bytes before the query's response, and a copy older than its moments: no change
    conv.resent(1, 0, 10, 3, 1.2);
    conv.resent(1, rows_at, end - rows_at, 3, 1.05);
    let f = conv.facts();
    let q = f.queries.first().expect("a query");
    assert!(q.delivered.is_none());
    // the rows resent, and what followed them as the TCP layer tells it: the last message
    // (ReadyForQuery, after them) moves, the first (RowDescription, before them) stays
    conv.resent(1, rows_at, end - rows_at, 4, 1.3);
    let f = conv.facts();
    let q = f.queries.first().expect("a query");
    let d = q.delivered.as_deref().expect("delivered");
    assert_eq!((q.last_response_ts, q.last_frame), (Some(1.1), Some(2)));
    assert_eq!((d.last_response_ts, d.last_frame), (Some(1.3), Some(4)));
    assert_eq!((d.first_response_ts, d.first_frame), (Some(1.1), Some(2)));
    assert_eq!((d.sent_ts, d.sent_frame), (1.0, 1));
    // the request resent: its moment moves too
    conv.resent(0, 0, front.len() as i64, 5, 1.4);
    let f = conv.facts();
    let d = f.queries.first().and_then(|q| q.delivered.as_deref());
    assert_eq!(d.map(|d| (d.sent_ts, d.sent_frame)), Some((1.4, 5)));
}
