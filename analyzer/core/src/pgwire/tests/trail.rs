//! The trail a diagram reads: each segment's completed messages in wire order, consecutive
//! repeats folded, a message charged to the segment that ends it; tags and errors beside.

use super::*;

type Steps = Vec<(String, u64)>;
/// A detail as (message, SQLSTATE, text).
type Details = Vec<(String, Option<String>, String)>;

/// Feed each segment of `segments` (direction, bytes) in order; what each completed.
fn trails(segments: &[(usize, Vec<u8>)]) -> Vec<(Steps, Details)> {
    let mut conv = Conversation::new();
    conv.record_trail();
    let mut offsets = [0i64; 2];
    let mut out = Vec::new();
    for (frame, (d, data)) in segments.iter().enumerate() {
        conv.feed(*d, data, offsets[*d], frame as u64 + 1, 1.0, true);
        offsets[*d] += data.len() as i64;
        let (steps, details) = conv.take_trail(*d).unwrap();
        out.push((
            steps.iter().map(|(n, k)| (n.text(), *k)).collect(),
            details
                .into_iter()
                .map(|x| (x.name.text(), x.code, x.text))
                .collect(),
        ));
    }
    out
}

fn steps(list: &[(&str, u64)]) -> Steps {
    list.iter().map(|(n, k)| (n.to_string(), *k)).collect()
}

fn opening() -> Vec<(usize, Vec<u8>)> {
    vec![(0, startup()), (1, [auth_ok(), ready()].concat())]
}

#[test]
fn an_extended_query_segment_reads_in_wire_order() {
    let mut segs = opening();
    segs.push((
        0,
        [
            msg(b'P', &[cstr(""), cstr("SELECT 1"), vec![0, 0]].concat()),
            msg(b'B', &[cstr(""), cstr(""), vec![0; 6]].concat()),
            msg(b'D', b"P\0"),
            msg(b'E', &[cstr(""), vec![0; 4]].concat()),
            msg(b'S', b""),
        ]
        .concat(),
    ));
    segs.push((
        1,
        [
            msg(b'1', b""),
            msg(b'2', b""),
            desc(),
            rows(3),
            msg(b'C', &cstr("SELECT 3")),
            ready(),
        ]
        .concat(),
    ));
    let got = trails(&segs);
    assert_eq!(got[0].0, steps(&[("StartupMessage", 1)]));
    assert_eq!(
        got[1].0,
        steps(&[("AuthenticationOk", 1), ("ReadyForQuery", 1)])
    );
    assert_eq!(
        got[2].0,
        steps(&[
            ("Parse", 1),
            ("Bind", 1),
            ("Describe", 1),
            ("Execute", 1),
            ("Sync", 1)
        ])
    );
    assert_eq!(
        got[3].0,
        steps(&[
            ("ParseComplete", 1),
            ("BindComplete", 1),
            ("RowDescription", 1),
            ("DataRow", 3),
            ("CommandComplete", 1),
            ("ReadyForQuery", 1)
        ])
    );
    assert_eq!(
        got[3].1,
        [
            ("CommandComplete".to_string(), None, "SELECT 3".to_string()),
            ("ReadyForQuery".to_string(), None, "I".to_string())
        ]
    );
}

#[test]
fn ready_for_query_keeps_its_transaction_status() {
    // BEGIN: 'T'; a failing statement inside: 'E'; ROLLBACK: 'I'
    let mut segs = opening();
    for (sql, reply) in [
        (
            "BEGIN",
            [msg(b'C', &cstr("BEGIN")), msg(b'Z', b"T")].concat(),
        ),
        (
            "SELECT 1/0",
            [error("22012", "division by zero"), msg(b'Z', b"E")].concat(),
        ),
        (
            "ROLLBACK",
            [msg(b'C', &cstr("ROLLBACK")), msg(b'Z', b"I")].concat(),
        ),
    ] {
        segs.push((0, msg(b'Q', &cstr(sql))));
        segs.push((1, reply));
    }
    let status: Vec<String> = trails(&segs)
        .into_iter()
        .flat_map(|t| t.1)
        .filter(|x| x.0 == "ReadyForQuery")
        .map(|x| x.2)
        .collect();
    assert_eq!(status, ["I", "T", "E", "I"]);
    // a ReadyForQuery without its status byte is malformed framing, not a ReadyForQuery
    let mut segs = opening();
    segs.push((0, msg(b'Q', &cstr("SELECT 1"))));
    segs.push((1, msg(b'Z', b"")));
    let last = trails(&segs).pop().map(|t| t.1);
    assert_eq!(last, Some(vec![]));
}

#[test]
fn rows_then_completion_and_repeats_apart_stay_apart() {
    let mut segs = opening();
    segs.push((0, msg(b'Q', &cstr("SELECT 1; SELECT 2"))));
    segs.push((
        1,
        [
            rows(3),
            msg(b'C', &cstr("SELECT 3")),
            ready(),
            desc(),
            rows(1),
            msg(b'C', &cstr("SELECT 1")),
            msg(b'C', &cstr("COPY 7")),
        ]
        .concat(),
    ));
    let got = trails(&segs);
    assert_eq!(
        got[3].0,
        steps(&[
            ("DataRow", 3),
            ("CommandComplete", 1),
            ("ReadyForQuery", 1),
            ("RowDescription", 1),
            ("DataRow", 1),
            ("CommandComplete", 2)
        ])
    );
    let tags: Vec<_> = got[3].1.iter().map(|x| x.2.as_str()).collect();
    assert_eq!(tags, ["SELECT 3", "I", "SELECT 1", "COPY 7"]);
}

#[test]
fn a_message_belongs_to_the_segment_that_ends_it() {
    // DataRows cut mid-body (counted at their header by the hot loop), a RowDescription cut
    // mid-body (kept until whole), and a header cut after 3 bytes
    let body = [desc(), rows(4), msg(b'C', &cstr("SELECT 4")), ready()].concat();
    let t_len = desc().len();
    let row = datarow(0).len();
    let cuts = [
        t_len - 2,           // inside T
        t_len + row + 3,     // inside the second D's header... after 3 bytes
        t_len + 2 * row + 7, // inside the third D's body
        t_len + 4 * row - 1, // one byte short of the fourth D's end
        body.len(),
    ];
    let mut segs = opening();
    segs.push((0, msg(b'Q', &cstr("SELECT 4"))));
    let mut at = 0;
    for c in cuts {
        segs.push((1, body[at..c].to_vec()));
        at = c;
    }
    let got: Vec<Steps> = trails(&segs).into_iter().map(|t| t.0).skip(3).collect();
    assert_eq!(
        got,
        [
            steps(&[]),
            steps(&[("RowDescription", 1), ("DataRow", 1)]),
            steps(&[("DataRow", 1)]),
            steps(&[("DataRow", 1)]),
            steps(&[("DataRow", 1), ("CommandComplete", 1), ("ReadyForQuery", 1)]),
        ]
    );
}

#[test]
fn errors_and_notices_keep_sqlstate_and_message() {
    let notice = {
        let mut e = error("01000", "just saying");
        e[0] = b'N';
        e
    };
    let mut segs = opening();
    segs.push((0, msg(b'Q', &cstr("SELECT * FROM nope"))));
    segs.push((
        1,
        [
            notice,
            error("42P01", "relation \"nope\" does not exist"),
            ready(),
        ]
        .concat(),
    ));
    let got = trails(&segs);
    assert_eq!(
        got[3].0,
        steps(&[
            ("NoticeResponse", 1),
            ("ErrorResponse", 1),
            ("ReadyForQuery", 1)
        ])
    );
    assert_eq!(
        got[3].1,
        [
            (
                "NoticeResponse".to_string(),
                Some("01000".to_string()),
                "just saying".to_string()
            ),
            (
                "ErrorResponse".to_string(),
                Some("42P01".to_string()),
                "relation \"nope\" does not exist".to_string()
            ),
            ("ReadyForQuery".to_string(), None, "I".to_string())
        ]
    );
}

#[test]
fn no_trail_unless_asked_and_the_facts_do_not_change() {
    let (front, back) = select_exchange(50);
    let mut plain = Conversation::new();
    let mut traced = Conversation::new();
    traced.record_trail();
    for conv in [&mut plain, &mut traced] {
        conv.feed(0, &front, 0, 1, 1.0, true);
        for (i, chunk) in back.chunks(37).enumerate() {
            conv.feed(1, chunk, (i * 37) as i64, 2 + i as u64, 1.0, true);
        }
        conv.finish();
    }
    assert!(plain.take_trail(1).is_none());
    assert!(plain.facts() == traced.facts());
}

#[test]
fn a_detail_keeps_the_severity_never_localized() {
    let mut conv = Conversation::new();
    conv.record_trail();
    let (front, _) = select_exchange(0);
    let fatal = msg(
        b'E',
        &[
            &b"SFATAL\0VFATAL\0C28P01\0Mpassword authentication failed\0"[..],
            b"\0",
        ]
        .concat(),
    );
    conv.feed(0, &front, 0, 1, 1.0, true);
    conv.feed(1, &[auth_ok(), fatal].concat(), 0, 2, 1.0, true);
    let (_, details) = conv.take_trail(1).unwrap();
    let got: Vec<_> = details
        .iter()
        .map(|d| (d.severity.as_deref(), d.code.as_deref()))
        .collect();
    assert_eq!(got, [(Some("FATAL"), Some("28P01"))]);
}
