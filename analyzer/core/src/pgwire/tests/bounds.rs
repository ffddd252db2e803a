//! The memory bounds, the caps, and hostile input: never a panic, never unbounded growth.

use super::sessions::extended_pipeline;
use super::*;

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
    assert!(
        whole.queries[0].sql_truncated
            && whole.queries[0].sql.len() == crate::pgwire::query::SQL_CAP
    );
    assert!(!cut.queries[0].sql_truncated && cut.queries[0].sql.len() < 300);
    assert_eq!(cut.queries[1].sql, "SELECT 2");
    let message = |f: &ConversationFacts| {
        f.queries[1]
            .error
            .as_ref()
            .and_then(|e| e.fields.message.clone())
            .unwrap_or_default()
    };
    assert_eq!(message(&whole).len(), KEEP_CAP + 10);
    assert!(message(&cut).len() < 300);
    for f in [&whole, &cut] {
        assert_eq!(f.queries.len(), 2);
        assert_eq!(
            f.queries[1].error.as_ref().unwrap().fields.code.as_deref(),
            Some("XX000")
        );
    }
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
    // segment sizes' few keys (224 bytes, 24 of them the stream offsets a late copy of its
    // bytes redates its moments by, until its DataRows' bytes were counted; its error,
    // notices and columns are apart, in a box only the queries that have them take)
    let size = std::mem::size_of::<crate::pgwire::query::Query>();
    assert!(size <= 224, "{size} bytes per query");
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

/// A long session fed to `conv`: varied SQL, rows, an error now and then, a bulk response
/// (many segments) among them, and a row count past 64 bits.
fn long_session(conv: &mut Conversation, n: usize) {
    conv.feed(0, &startup(), 0, 1, 0.0, true);
    conv.feed(1, &[auth_ok(), ready()].concat(), 0, 2, 0.0, true);
    let mut off = [
        startup().len() as i64,
        (auth_ok().len() + ready().len()) as i64,
    ];
    let mut frame = 3;
    for i in 0..n {
        let q = msg(b'Q', &cstr(&format!("SELECT v FROM t WHERE k = {i}")));
        let t = i as f64 * 0.001;
        conv.feed(0, &q, off[0], frame, t, true);
        off[0] += q.len() as i64;
        frame += 1;
        let answer: Vec<Vec<u8>> = match i % 97 {
            13 => vec![error("22012", &format!("division by zero {i}")), ready()],
            // a bulk response: each DataRow a segment of its own
            50 if i < 300 => (0..8)
                .map(datarow)
                .chain([[msg(b'C', &cstr("SELECT 8")), ready()].concat()])
                .collect(),
            70 => vec![[msg(b'C', &cstr("UPDATE 98765432109876543210")), ready()].concat()],
            _ => vec![[desc(), rows(i % 3), msg(b'C', &cstr("SELECT 1")), ready()].concat()],
        };
        for segment in answer {
            conv.feed(1, &segment, off[1], frame, t + 0.0005, true);
            off[1] += segment.len() as i64;
            frame += 1;
        }
    }
    conv.finish();
}

#[test]
fn a_long_sessions_finished_queries_wait_in_the_spool_and_come_back_in_order() {
    use crate::pgwire::held::{QuerySpool, HOLD_BATCH};
    let n = 3 * HOLD_BATCH + 77;
    let mut kept = Conversation::new();
    long_session(&mut kept, n);
    let mut held = Conversation::new();
    held.hold_in(QuerySpool::default());
    long_session(&mut held, n);
    // in memory: the queries not handed over yet, fewer than two batches
    assert!(held.store.held() >= 3 * HOLD_BATCH as u64);
    assert!(held.store.listed.len() < 2 * HOLD_BATCH);
    assert_eq!(held.listed_queries(), n);
    let (kept, held) = (kept.into_facts().unwrap(), held.into_facts().unwrap());
    assert_eq!(held.queries.len(), n);
    assert!(held.queries.iter().any(|q| q.series.is_some()));
    assert!(held.queries.iter().any(|q| q.error.is_some()));
    assert!(held
        .queries
        .iter()
        .any(|q| matches!(q.rows, Some(crate::pgwire::query::RowCount::Big(_)))));
    assert_eq!(held, kept);
}
