//! What each fuzz target checks, as plain functions: the cargo-fuzz targets call them on
//! libFuzzer's inputs, and the core's `tests/regressions.rs` (stable `cargo test`) replays
//! tests/regressions/ through the same functions. Each panics when the core breaks its word:
//! never a panic of its own on any input, facts that hold together, every float finite, and
//! serde_json serialising every fact struct.

pub mod finite;

use std::borrow::Cow;

use pktflow_core::capture::{Capture, CaptureStats, Item};
use pktflow_core::drawing::{fold, teach, Acks, Drawing, Kind, Lanes, Map};
use pktflow_core::pass::{ConnectionReport, Pass, PassOptions};
use pktflow_core::pgwire::facts::{ConversationFacts, Protocol};
use pktflow_core::pgwire::Conversation;
use pktflow_core::report::{judge_and_record, Judged};
use pktflow_core::tcp::observe::StreamSink;
use serde::Serialize;

/// What the CLI runs with (pipeline.py's LINGER_S, SETTLED_LINGER_S), so the sweeps run.
const LINGER: Option<f64> = Some(30.0);
const SETTLED_LINGER: Option<f64> = Some(2.0);
/// Feeds of a repeated pgwire step: 255 bytes become 64 KiB.
const REPEAT_FEED: usize = 256;
/// The op bits that repeat a pgwire feed: two, so a random op rarely does (long streams are
/// slow to decode: each one costs many short inputs).
const REPEAT_OP: u8 = 0x18;
/// Small, so the diagram's cut is reached too.
const MAX_ROWS: usize = 64;

/// The tag of an input that stands for a large file (see `file`).
pub const REPEAT: &[u8; 4] = b"REP!";
/// The largest file `file` makes.
pub const MAX_FILE: usize = 4 << 20;

/// The capture file an input stands for. Most inputs are the file itself; one starting with
/// REPEAT, a count n and a split s (u32 little endian each) stands for rest[..s] followed by
/// rest[s..] n times, at most MAX_FILE bytes: libFuzzer's inputs stay small while the
/// reader's window refills, records over its 128 KiB block, thousands of packets and
/// gzip members are reached. (Such a file would have an unknown magic: nothing is lost.)
pub fn file(data: &[u8]) -> Cow<'_, [u8]> {
    let header = |at: usize| {
        let b: [u8; 4] = data.get(at..at + 4)?.try_into().ok()?;
        Some(u32::from_le_bytes(b) as usize)
    };
    let (Some(REPEAT), Some(n), Some(split)) = (data.first_chunk::<4>(), header(4), header(8))
    else {
        return Cow::Borrowed(data);
    };
    let rest = data.get(12..).unwrap_or(&[]);
    let (prefix, unit) = rest.split_at(split.min(rest.len()));
    let mut out = prefix.to_vec();
    if !unit.is_empty() {
        let times = n.min((MAX_FILE.saturating_sub(out.len())) / unit.len() + 1);
        for _ in 0..times {
            out.extend_from_slice(unit);
        }
    }
    out.truncate(MAX_FILE);
    Cow::Owned(out)
}

/// Serialised by serde_json, every float finite.
fn sound<T: Serialize>(what: &str, value: &T) {
    if let Err(e) = serde_json::to_string(value) {
        panic!("{what}: serde_json: {e}");
    }
    if let Err(e) = finite::check(value) {
        panic!("{what}: not finite: {e}");
    }
}

/// The reader alone on the bytes as a capture file (see `file`): every item read, the
/// stats agree with what was handed out.
pub fn capture(data: &[u8]) {
    let data = file(data);
    let Ok(mut cap) = Capture::from_bytes(&data) else {
        return;
    };
    let (mut packets, mut last_frame, mut last_ts) = (0u64, 0u64, None);
    let mut unswept = false;
    while let Some(item) = cap.next_item() {
        match item {
            Item::Packet(p) => {
                packets += 1;
                assert!(p.frame > last_frame, "frames go up");
                last_frame = p.frame;
                assert!(p.ts.is_finite(), "packet time {}", p.ts);
                assert!(
                    p.payload.len() as u64 <= u64::from(p.plen),
                    "payload within plen"
                );
                assert!(p.options.len() <= 40, "options within the TCP header");
                last_ts = Some(p.ts);
                unswept = true;
            }
            Item::BatchEnd { ts } => {
                assert!(unswept, "a batch end without packets before it");
                assert_eq!(Some(ts), last_ts, "a batch ends at its last packet's time");
                unswept = false;
            }
        }
    }
    assert!(!unswept, "the last batch was not ended");
    assert!(cap.next_item().is_none(), "items after the end");
    let outcome = cap.outcome();
    let st = cap.stats();
    sane_stats(st);
    assert_eq!(st.tcp_packets, packets, "TCP packets counted as handed out");
    assert!(last_frame <= st.packets);
    if outcome.is_err() {
        assert_eq!(st.tcp_packets, 0, "unsupported with TCP packets");
    }
    sound("outcome", &outcome);
}

fn sane_stats(st: &CaptureStats) {
    sound("stats", st);
    let kinds = st.tcp_packets
        + st.duplicates.packets
        + st.non_tcp_packets
        + st.undecodable_packets
        + st.ip_fragments;
    assert_eq!(kinds, st.packets, "every record counted once: {st:?}");
    assert!(st.truncated_packets <= st.packets);
    assert_eq!(st.first_ts.is_some(), st.packets > 0);
    assert_eq!(st.last_ts.is_some(), st.packets > 0);
    assert_eq!(st.link_types.is_empty(), st.packets == 0);
}

/// The whole pass over the bytes as a capture (see `file`; reader, engine, decoder,
/// transfer, the packets kept for a diagram), every connection's facts sound; then a diagram
/// of the packets kept agrees with it, and each connection's judgement and record are
/// sound.
pub fn pass(data: &[u8]) {
    let data = &*file(data);
    let options = PassOptions {
        decode_postgres: true,
        transfer: true,
        linger: LINGER,
        settled_linger: SETTLED_LINGER,
        record: true,
    };
    let Ok(mut pass) = Pass::from_bytes(data, options) else {
        return;
    };
    let mut reports: Vec<ConnectionReport> = Vec::new();
    // the spool is a temporary file: writing it may fail, but never in a way the input chose
    while pass.step(&mut reports).expect("spool") {}
    assert!(
        !pass.step(&mut reports).expect("spool"),
        "steps after the end"
    );
    let outcome = pass.outcome();
    sound("outcome", &outcome);
    let st = pass.stats().clone();
    sane_stats(&st);
    let engine = pass.engine_facts();
    sound("engine", &engine);
    let mut numbers: Vec<u64> = reports.iter().map(|r| r.tcp.number).collect();
    numbers.sort_unstable();
    let expected: Vec<u64> = (1..=engine.opened).collect();
    assert_eq!(numbers, expected, "every connection opened reported once");
    let mut in_connections = 0u64;
    for r in &reports {
        sound("connection", r);
        let t = &r.tcp;
        assert!(t.packets > 0 && t.first_frame <= t.last_frame);
        assert!(t.last_frame <= st.packets);
        in_connections += t.packets;
        if let Some(pg) = &r.postgres {
            coherent(pg);
        }
        assert!(
            r.transfer.as_ref().is_some_and(|x| x.finished),
            "transfer finished"
        );
    }
    assert_eq!(
        in_connections + engine.late_packets,
        st.tcp_packets,
        "each TCP packet in a connection or late"
    );
    diagram(&pass, &reports, &st);
    let start = pass.start();
    for r in reports {
        let (judgement, record, _) = judge_and_record(r, start, Judged::default());
        sound("judgement", &judgement);
        sound("record", &record);
    }
}

/// The packets the pass kept, drawn: every connection but each third, the whole span, and
/// again cut at MAX_ROWS; rows, folds and totals sound.
fn diagram(pass: &Pass, reports: &[ConnectionReport], st: &CaptureStats) {
    let Some(recording) = pass.recording() else {
        panic!("the pass kept no packets");
    };
    let recording = recording.lock().unwrap_or_else(|e| e.into_inner());
    let chosen: Vec<u64> = reports
        .iter()
        .map(|r| r.tcp.number)
        .filter(|n| n % 3 != 0)
        .collect();
    // every time (a capture's clock may go back before its first packet's)
    let (t0, t1) = (f64::NEG_INFINITY, f64::INFINITY);
    let drawn = match recording.read(&chosen, t0, t1, usize::MAX) {
        Ok(d) => d,
        Err(e) => panic!("the packets kept could not be read: {e}"),
    };
    assert!(!drawn.cut);
    for r in reports.iter().filter(|r| chosen.contains(&r.tcp.number)) {
        let kept = drawn
            .packets
            .iter()
            .filter(|(n, _)| *n == r.tcp.number)
            .count();
        assert_eq!(
            kept as u64, r.tcp.packets,
            "c{}: every packet kept",
            r.tcp.number
        );
    }
    assert!(
        drawn
            .packets
            .windows(2)
            .all(|w| w[0].1.frame < w[1].1.frame),
        "in capture order"
    );
    let lanes: Map<u64, Lanes> = chosen
        .iter()
        .map(|&n| {
            let lane = Lanes {
                client: 0,
                server: 1,
                client_raw: n % 2 == 0,
                server_raw: false,
            };
            (n, lane)
        })
        .collect();
    let kept = drawn.packets.len();
    let drawing = Drawing::new(
        drawn,
        &lanes,
        &Map::default(),
        st.first_ts.unwrap_or(0.0),
        &[0],
        true,
    );
    let rows = &drawing.rows.rows;
    assert_eq!(rows.len(), kept, "a row per packet");
    sound("plot", &drawing.plot);
    let covered: usize = drawing
        .items
        .iter()
        .map(|it| match it {
            fold::Item::Row(_) => 1,
            fold::Item::Group(g) => g.period * g.reps,
        })
        .sum();
    assert_eq!(covered, rows.len(), "the groups cover the rows once");
    if let Some(t) = fold::totals(&drawing.rows, 0, rows.len()) {
        sound("totals", &t);
        assert_eq!(t.rows, rows.len());
    }
    sound("breakdown", &fold::breakdown(&drawing.rows, 0, rows.len()));
    let rules = teach::Rules {
        max_ways: 4,
        min_segments: 4,
        max_losses: 500,
        held_factor: 3,
        coalesced_factor: 2,
        delayed_s: (0.038, 0.25),
        frames: 4,
    };
    sound("tcp facts", &teach::tcp_facts(&drawing.rows, &rules));
    // the walk reads every row but plain ACKs, or sums it up in a run
    let mut read = 0;
    for step in teach::walk_view(&drawing.rows, 4, 10) {
        read += match step {
            teach::Step::Row(i) => usize::from(i < rows.len()),
            teach::Step::Run(run) => run.rows,
        };
    }
    let acks = rows
        .iter()
        .filter(|r| {
            matches!(
                r.kind,
                Kind::Ack | Kind::Window | Kind::Dupack | Kind::Keepalive | Kind::Probe
            ) && r.marks == 0
                && r.owners == 0
                && r.acks == Acks::Nothing
        })
        .count();
    assert_eq!(
        read + acks,
        rows.len(),
        "every row read once, or a plain ACK"
    );
    let cut = match recording.read(&chosen, t0, t1, MAX_ROWS) {
        Ok(d) => d,
        Err(e) => panic!("the packets kept could not be read: {e}"),
    };
    assert!(cut.packets.len() <= MAX_ROWS);
    assert_eq!(cut.cut, rows.len() > MAX_ROWS);
    let first: Vec<u64> = rows.iter().take(MAX_ROWS).map(|r| r.frame).collect();
    let kept: Vec<u64> = cut.packets.iter().map(|p| p.1.frame).collect();
    assert_eq!(kept, first, "a cut keeps the first packets");
}

/// What the decoder says holds together.
fn coherent(facts: &ConversationFacts) {
    assert_eq!(
        facts.frontend_direction.is_none(),
        facts.protocol == Protocol::Unknown
    );
    if facts.protocol == Protocol::Unknown {
        assert!(facts.queries.is_empty());
    }
    assert!(facts.queries.len() as u64 <= facts.queries_total);
    assert!(facts.query_errors <= facts.queries_total);
}

/// The PostgreSQL decoder on arbitrary bytes, cut arbitrarily, with gaps. The input is a
/// script: a first byte of flags (bit d: direction d's start was seen), then steps of
/// [op, length] followed by that many bytes for a feed: op bit 0 the direction, bit 1 a gap
/// instead (of `length` bytes), bit 2 an offset jump (the engine never does it; the decoder
/// must survive it), bits 3 and 4 both: the feed repeated REPEAT_FEED times (streams past
/// the decoder's sync window and message bounds from a small input).
pub fn pgwire(data: &[u8]) {
    let Some((&flags, mut rest)) = data.split_first() else {
        return;
    };
    let mut conv = Conversation::new();
    let mut off = [0i64; 2];
    let mut frame = 0u64;
    while let [op, len, tail @ ..] = rest {
        let (d, n) = (usize::from(op & 1), usize::from(*len));
        frame += 1;
        if op & 4 != 0 {
            off[d] += i64::from(*len) << 20;
        }
        if op & 2 != 0 {
            conv.gap(d, off[d], n as i64, frame, frame as f64);
            off[d] += n as i64;
            rest = tail;
            continue;
        }
        let n = n.min(tail.len());
        let (chunk, after) = tail.split_at(n);
        let times = if op & REPEAT_OP == REPEAT_OP {
            REPEAT_FEED
        } else {
            1
        };
        for _ in 0..times {
            conv.feed(d, chunk, off[d], frame, frame as f64, flags & (1 << d) != 0);
            off[d] += n as i64;
        }
        rest = after;
    }
    conv.finish();
    let facts = conv.facts();
    sound("conversation", &facts);
    coherent(&facts);
}

#[cfg(test)]
mod tests {
    use super::{file, MAX_FILE, REPEAT};

    fn repeat(n: u32, split: u32, rest: &[u8]) -> Vec<u8> {
        let mut d = REPEAT.to_vec();
        d.extend(n.to_le_bytes());
        d.extend(split.to_le_bytes());
        d.extend(rest);
        d
    }

    #[test]
    fn a_repeat_input_stands_for_a_large_file() {
        assert_eq!(&*file(b"\xd4\xc3\xb2\xa1"), b"\xd4\xc3\xb2\xa1");
        assert_eq!(&*file(b"REP!\x01"), b"REP!\x01");
        assert_eq!(&*file(&repeat(3, 2, b"hdab")), b"hdababab");
        assert_eq!(&*file(&repeat(3, 9, b"hdab")), b"hdab");
        assert_eq!(&*file(&repeat(0, 1, b"hdab")), b"h");
        assert_eq!(file(&repeat(u32::MAX, 0, b"abc")).len(), MAX_FILE);
    }
}
