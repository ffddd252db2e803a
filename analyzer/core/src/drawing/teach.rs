//! What teaching mode reads of a drawing. Its words and rules are Python's (flow/explain.py,
//! tcpnotes.py, walk.py); here are the facts they rest on, measured over every row once:
//! - the rows the walk reads, with each run of plain bulk segments (rows of DataRow, CopyData
//!   or TLS data and nothing else) past its first few kept as one summary, and the ACKs
//!   that say nothing of their own left out: a 20,000-row dump's walk reads a few hundred
//!   rows, not 250,000;
//! - per direction carrying data (the busiest), how the receiver acknowledged it, the writes
//!   it was made of, a window that closed and reopened, its TLS records; reorderings, losses
//!   and the duplicate ACKs that reported them; a delayed ACK; the rounds of its segments.
//!
//! Each threshold is the caller's (Python's rules), passed in.

use serde::Serialize;

use super::fold::Counts;
use super::rows::{Acks, Kind, Row, Rows, AFTER_HOLE, RETRANSMISSION, SACK, ZERO_WINDOW};
use super::Map;

const BULK: [&str; 3] = ["DataRow", "CopyData", "TLSApplicationData"];

/// A run of plain bulk segments of one connection one way, past its first rows.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Run {
    pub conn: u64,
    pub src: u16,
    pub dst: u16,
    pub to_server: bool,
    pub rows: usize,
    /// The first frames (up to the cap asked for), and the last.
    pub frames: Vec<u64>,
    pub last_frame: u64,
    pub messages: Counts,
    /// A segment that ends inside a DataRow, or inside a message it completes none of.
    pub partial_datarow: bool,
    pub partial_empty: bool,
}

/// A row the walk reads, or a run summed up.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    Row(usize),
    Run(Run),
}

fn bulk_only(rows: &Rows, r: &Row) -> bool {
    rows.label(r)
        .iter()
        .all(|(n, _)| BULK.contains(&n.as_str()))
}

/// A row with nothing of its own: an ACK, window update, duplicate ACK or keep-alive without a
/// mark and acknowledging neither SYN nor FIN; or a bulk segment without mark or detail.
fn plain(rows: &Rows, r: &Row) -> bool {
    let unmarked = r.marks == 0 && r.owners == 0;
    match r.kind {
        Kind::Data => unmarked && r.details == 0 && bulk_only(rows, r),
        Kind::Ack | Kind::Window | Kind::Dupack | Kind::Keepalive | Kind::Probe => {
            unmarked && r.acks == Acks::Nothing
        }
        _ => false,
    }
}

/// The rows the walk reads: every row but plain ACKs, each run of plain bulk segments of a
/// connection one way kept for its first `keep` rows and summed up past them (at most `cap`
/// of its frames listed).
pub fn walk_view(rows: &Rows, keep: usize, cap: usize) -> Vec<Step> {
    // per connection, the run open: its way, its rows kept, its summary
    let mut open: Map<u64, (u16, u16, usize, Run)> = Map::default();
    let mut out = Vec::new();
    let close = |out: &mut Vec<Step>, run: Option<(u16, u16, usize, Run)>| {
        if let Some((_, _, _, run)) = run.filter(|r| r.3.rows > 0) {
            out.push(Step::Run(run));
        }
    };
    for (i, r) in rows.rows.iter().enumerate() {
        if !plain(rows, r) {
            close(&mut out, open.remove(&r.conn));
            out.push(Step::Row(i));
            continue;
        }
        if r.kind != Kind::Data {
            continue; // an ACK that says nothing the walk reads
        }
        let same = open
            .get(&r.conn)
            .is_some_and(|(s, d, _, _)| (*s, *d) == (r.src, r.dst));
        if !same {
            close(&mut out, open.remove(&r.conn));
            let run = Run {
                conn: r.conn,
                src: r.src,
                dst: r.dst,
                to_server: r.to_server,
                ..Run::default()
            };
            open.insert(r.conn, (r.src, r.dst, 0, run));
        }
        let Some((_, _, kept, run)) = open.get_mut(&r.conn) else {
            continue;
        };
        if *kept < keep {
            *kept += 1;
            out.push(Step::Row(i));
            continue;
        }
        run.rows += 1;
        if run.frames.len() < cap {
            run.frames.push(r.frame);
        }
        run.last_frame = r.frame;
        let label = rows.label(r);
        for (name, n) in label {
            run.messages.add(name, *n);
        }
        if r.partial {
            run.partial_empty |= label.is_empty();
            run.partial_datarow |= label.iter().any(|(n, _)| n == "DataRow");
        }
    }
    let mut rest: Vec<(u64, (u16, u16, usize, Run))> = open.into_iter().collect();
    rest.sort_by_key(|(conn, _)| *conn);
    for (_, run) in rest {
        close(&mut out, Some(run));
    }
    out
}

/// The thresholds teaching mode's TCP notes are said at (Python's rules).
#[derive(Clone, Copy, Debug)]
pub struct Rules {
    /// Directions spoken of, the busiest.
    pub max_ways: usize,
    /// Segments of one size before it is the direction's size.
    pub min_segments: usize,
    /// Retransmissions read for the losses' note.
    pub max_losses: usize,
    /// An ACK held: of this many median segments or more.
    pub held_factor: i64,
    /// A coalesced segment: this many of the direction's size or more.
    pub coalesced_factor: i64,
    /// A delayed ACK: this long after the data it acknowledges, and less than the second.
    pub delayed_s: (f64, f64),
    /// Frames listed of a kind.
    pub frames: usize,
}

/// An ACK of many segments at once while the receiver's window shrank.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Held {
    pub frame: u64,
    pub bytes: i64,
    /// The direction's segments it covers.
    pub segments: usize,
    pub win_before: i64,
    pub win: i64,
    pub raw: bool,
    /// The window update after it that opened the window again: its frame and how long after
    /// (ms).
    pub update: Option<(u64, f64)>,
}

/// A segment much larger than the direction's size, the first after the window reopened.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Coalesced {
    pub frame: u64,
    pub bytes: i64,
    /// The ACK or window update that reopened the window.
    pub opened: u64,
}

/// One direction carrying data (its segments that were not retransmissions).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Way {
    pub conn: u64,
    pub src: u16,
    pub dst: u16,
    /// Its first segment went toward the server.
    pub to_server: bool,
    pub segments: usize,
    /// Its most frequent segment size, when min_segments segments have it (else 0).
    pub common: i64,
    /// The ACKs of new data coming back; those of two common segments, and their first
    /// frames.
    pub acks: usize,
    pub pairs: usize,
    pub pair_frames: Vec<u64>,
    pub held: Option<Held>,
    /// The writes (new bytes up to each PSH) it was sent in: the most frequent shape (segment
    /// sizes) and how many times it came.
    pub write: Option<(Vec<i64>, usize)>,
    pub coalesced: Option<Coalesced>,
    /// CopyData among its messages.
    pub copy_data: bool,
    /// Of its segments that complete one TLS record and nothing else: the most frequent size
    /// (when min_segments have it, else 0), and the consecutive pairs of that size.
    pub tls_size: i64,
    pub tls_runs: usize,
}

/// A segment beyond a hole and the one that filled it (sent once: a reordering).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Hole {
    pub frame: u64,
    pub fill_frame: u64,
    /// Microseconds from the one to the other.
    pub us: f64,
    /// The receiver's ACK that reported the hole with a SACK block.
    pub sack: Option<u64>,
}

/// A retransmission whose original the capture saw, and the duplicate ACKs with SACK that
/// came between them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LossExample {
    pub frame: u64,
    pub original: u64,
    pub dups: usize,
    pub dup_frames: Vec<u64>,
    /// From the first duplicate ACK to the retransmission, ms.
    pub ms: f64,
}

/// The retransmissions, and of the first max_losses those whose original the capture saw:
/// the duplicate ACKs with SACK before each, and how long after the first the resend came.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Losses {
    pub resent: usize,
    pub counts: Vec<usize>,
    /// Seconds, of those reported by a duplicate ACK.
    pub delays: Vec<f64>,
    pub example: Option<LossExample>,
}

/// An ACK alone, long after the data it acknowledges.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Delayed {
    pub frame: u64,
    pub bytes: i64,
    pub ms: f64,
    pub data_frame: u64,
}

/// What teaching mode's TCP notes read.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TcpFacts {
    /// The busiest directions, most segments first.
    pub ways: Vec<Way>,
    /// Some ACK acknowledged new data.
    pub acks: bool,
    /// Rows marked zero window: how many, the first frames, and the lanes they went between.
    pub zero_windows: usize,
    pub zero_frames: Vec<u64>,
    pub zero_lanes: Vec<(u16, u16)>,
    pub window_updates: bool,
    pub dupacks: bool,
    pub raw_windows: bool,
    pub hole: Option<Hole>,
    pub losses: Losses,
    pub delayed: Option<Delayed>,
}

/// Each connection's rows (indexes), connections in the order first drawn.
fn by_conn(rows: &Rows) -> Vec<Vec<usize>> {
    let mut order: Map<u64, usize> = Map::default();
    let mut out: Vec<Vec<usize>> = Vec::new();
    for (i, r) in rows.rows.iter().enumerate() {
        let k = *order.entry(r.conn).or_insert_with(|| {
            out.push(Vec::new());
            out.len() - 1
        });
        if let Some(v) = out.get_mut(k) {
            v.push(i);
        }
    }
    out
}

/// The most frequent value (ties: the first met), when it comes `min` times or more.
fn most_frequent(values: impl Iterator<Item = i64>, min: usize) -> i64 {
    let mut counts: Vec<(i64, usize)> = Vec::new();
    let mut at: Map<i64, usize> = Map::default();
    for v in values {
        match at.get(&v) {
            Some(&i) => counts[i].1 += 1,
            None => {
                at.insert(v, counts.len());
                counts.push((v, 1));
            }
        }
    }
    let mut best: Option<(i64, usize)> = None;
    for &(v, n) in &counts {
        if best.is_none_or(|(_, b)| n > b) {
            best = Some((v, n));
        }
    }
    best.filter(|&(_, n)| n >= min).map_or(0, |(v, _)| v)
}

/// The facts of teaching mode's TCP notes.
pub fn tcp_facts(rows: &Rows, rules: &Rules) -> TcpFacts {
    let all = &rows.rows;
    let conns = by_conn(rows);
    // the directions' segments (not retransmissions) and the ACKs of new data coming back,
    // keyed by the data's way, in the order first met
    let mut ways: Vec<((u64, u16, u16), Vec<usize>)> = Vec::new();
    let mut way_at: Map<(u64, u16, u16), usize> = Map::default();
    let mut acks: Map<(u64, u16, u16), Vec<usize>> = Map::default();
    let mut out = TcpFacts::default();
    for (i, r) in all.iter().enumerate() {
        if r.kind == Kind::Data && r.marks & RETRANSMISSION == 0 {
            let key = (r.conn, r.src, r.dst);
            let k = *way_at.entry(key).or_insert_with(|| {
                ways.push((key, Vec::new()));
                ways.len() - 1
            });
            if let Some(w) = ways.get_mut(k) {
                w.1.push(i);
            }
        } else if r.kind == Kind::Ack && r.nbytes != 0 {
            acks.entry((r.conn, r.dst, r.src)).or_default().push(i);
        }
        if r.marks & ZERO_WINDOW != 0 {
            out.zero_windows += 1;
            if out.zero_frames.len() < rules.frames {
                out.zero_frames.push(r.frame);
            }
            if !out.zero_lanes.contains(&(r.src, r.dst)) {
                out.zero_lanes.push((r.src, r.dst));
            }
        }
        out.window_updates |= r.kind == Kind::Window;
        out.dupacks |= r.kind == Kind::Dupack;
        out.raw_windows |= r.win_raw;
    }
    out.acks = !acks.is_empty();
    // the busiest first (ties in the order first met)
    ways.sort_by_key(|(_, segs)| std::cmp::Reverse(segs.len()));
    ways.truncate(rules.max_ways);
    let conn_rows: Map<u64, &Vec<usize>> = conns
        .iter()
        .filter_map(|c| c.first().and_then(|&i| all.get(i)).map(|r| (r.conn, c)))
        .collect();
    for (key, segs) in &ways {
        let rows_of = conn_rows.get(&key.0).map_or(&[][..], |v| v.as_slice());
        out.ways
            .push(way(rows, *key, segs, acks.get(key), rows_of, rules));
    }
    out.hole = conns.iter().find_map(|c| hole(rows, c));
    out.losses = losses(rows, &conns, rules);
    out.delayed = delayed(rows, rules);
    out
}

fn way(
    rows: &Rows,
    (conn, src, dst): (u64, u16, u16),
    segs: &[usize],
    acks: Option<&Vec<usize>>,
    conn_rows: &[usize],
    rules: &Rules,
) -> Way {
    let all = &rows.rows;
    let seg = |i: &usize| all.get(*i);
    let segments: Vec<&Row> = segs.iter().filter_map(seg).collect();
    let common = most_frequent(segments.iter().map(|r| r.nbytes), rules.min_segments);
    let acks: Vec<&Row> = acks.map_or(Vec::new(), |a| a.iter().filter_map(seg).collect());
    let pairs: Vec<&&Row> = if common != 0 {
        acks.iter().filter(|a| a.nbytes == 2 * common).collect()
    } else {
        Vec::new()
    };
    let mut sizes: Vec<i64> = segments.iter().map(|r| r.nbytes).collect();
    sizes.sort_unstable();
    let median = sizes.get(sizes.len() / 2).copied().unwrap_or(0);
    let one = |r: &Row| {
        let l = rows.label(r);
        l.len() == 1
            && l.first()
                .is_some_and(|(n, c)| n == "TLSApplicationData" && *c == 1)
    };
    let tls_size = most_frequent(
        segments.iter().filter(|r| one(r)).map(|r| r.nbytes),
        rules.min_segments,
    );
    let tls_runs = segments
        .windows(2)
        .filter(|w| one(w[0]) && one(w[1]) && w[0].nbytes == tls_size && w[1].nbytes == tls_size)
        .count();
    Way {
        conn,
        src,
        dst,
        to_server: segments.first().is_some_and(|r| r.to_server),
        segments: segments.len(),
        common,
        acks: acks.len(),
        pairs: pairs.len(),
        pair_frames: pairs.iter().take(rules.frames).map(|a| a.frame).collect(),
        held: held(rows, dst, &segments, median, conn_rows, rules),
        write: writes(&segments),
        coalesced: coalesced(rows, src, dst, common, conn_rows, rules),
        copy_data: segments
            .iter()
            .any(|r| rows.label(r).iter().any(|(n, _)| n == "CopyData")),
        tls_size: if tls_runs > 0 { tls_size } else { 0 },
        tls_runs: if tls_size != 0 { tls_runs } else { 0 },
    }
}

/// The first ACK of held_factor median segments or more whose window is smaller than the
/// receiver's window before it: the application had read less than arrived.
fn held(
    rows: &Rows,
    dst: u16,
    segments: &[&Row],
    median: i64,
    conn_rows: &[usize],
    rules: &Rules,
) -> Option<Held> {
    let all = &rows.rows;
    let mut win: Option<i64> = None;
    for (k, &i) in conn_rows.iter().enumerate() {
        let r = all.get(i)?;
        if r.src != dst || !matches!(r.kind, Kind::Ack | Kind::Window) {
            continue;
        }
        if r.kind == Kind::Ack
            && median > 0
            && r.nbytes >= rules.held_factor * median
            && win.is_some_and(|w| r.win < w)
        {
            let n = segments
                .iter()
                .filter(|s| {
                    s.frame < r.frame && r.ack - r.nbytes <= s.seq && s.seq + s.nbytes <= r.ack
                })
                .count();
            let update = conn_rows
                .get(k + 1..)
                .unwrap_or_default()
                .iter()
                .find_map(|&j| {
                    let u = all.get(j)?;
                    (u.src == dst && u.kind == Kind::Window && u.win > r.win)
                        .then_some((u.frame, (u.t - r.t) * 1000.0))
                });
            return Some(Held {
                frame: r.frame,
                bytes: r.nbytes,
                segments: n,
                win_before: win.unwrap_or(0),
                win: r.win,
                raw: r.win_raw,
                update,
            });
        }
        win = Some(r.win);
    }
    None
}

/// The direction's writes: its segments up to each with PSH; the most frequent shape (ties:
/// the first met) and its count.
fn writes(segments: &[&Row]) -> Option<(Vec<i64>, usize)> {
    let mut counts: Vec<(Vec<i64>, usize)> = Vec::new();
    let mut at: Map<Vec<i64>, usize> = Map::default();
    let mut run = Vec::new();
    for r in segments {
        run.push(r.nbytes);
        if r.push {
            let shape = std::mem::take(&mut run);
            match at.get(&shape) {
                Some(&i) => counts[i].1 += 1,
                None => {
                    at.insert(shape.clone(), counts.len());
                    counts.push((shape, 1));
                }
            }
        }
    }
    let mut best: Option<&(Vec<i64>, usize)> = None;
    for c in &counts {
        if best.is_none_or(|b| c.1 > b.1) {
            best = Some(c);
        }
    }
    best.cloned()
}

/// The first segment of coalesced_factor times the direction's size or more right after the
/// receiver's window reopened from zero.
fn coalesced(
    rows: &Rows,
    src: u16,
    dst: u16,
    common: i64,
    conn_rows: &[usize],
    rules: &Rules,
) -> Option<Coalesced> {
    if common == 0 {
        return None;
    }
    let (mut zero, mut opened) = (false, None::<u64>);
    for &i in conn_rows {
        let r = rows.rows.get(i)?;
        if r.src == dst && matches!(r.kind, Kind::Ack | Kind::Window | Kind::Dupack) {
            if r.win == 0 {
                (zero, opened) = (true, None);
            } else if zero {
                (zero, opened) = (false, Some(r.frame));
            }
        } else if r.src == src && r.kind == Kind::Data {
            if let Some(o) = opened {
                if r.nbytes >= rules.coalesced_factor * common {
                    return Some(Coalesced {
                        frame: r.frame,
                        bytes: r.nbytes,
                        opened: o,
                    });
                }
            }
            opened = None;
        }
    }
    None
}

/// A connection's first segment beyond a hole whose filling segment came later, sent once.
fn hole(rows: &Rows, conn_rows: &[usize]) -> Option<Hole> {
    let all = &rows.rows;
    for (k, &i) in conn_rows.iter().enumerate() {
        let Some(r) = all.get(i) else {
            continue;
        };
        if r.marks & AFTER_HOLE == 0 {
            continue;
        }
        let later = conn_rows.get(k + 1..).unwrap_or_default();
        let fill = later
            .iter()
            .filter_map(|&j| all.get(j))
            .find(|f| f.src == r.src && f.kind == Kind::Data && f.seq < r.seq);
        let Some(fill) = fill.filter(|f| f.marks & RETRANSMISSION == 0) else {
            continue;
        };
        let sack = later
            .iter()
            .filter_map(|&j| all.get(j))
            .find(|a| a.src == r.dst && a.marks & SACK != 0 && a.ack <= fill.seq);
        return Some(Hole {
            frame: r.frame,
            fill_frame: fill.frame,
            us: (fill.t - r.t) * 1e6,
            sack: sack.map(|a| a.frame),
        });
    }
    None
}

/// The retransmissions, connection by connection, and of the first max_losses those whose
/// original the capture saw: the duplicate ACKs with a SACK block between the two.
fn losses(rows: &Rows, conns: &[Vec<usize>], rules: &Rules) -> Losses {
    let all = &rows.rows;
    let mut out = Losses::default();
    let mut read = 0;
    for conn_rows in conns {
        // the latest data row of each (sender, seq); each receiver's SACK ACKs by what they
        // acknowledge, in order
        let mut last: Map<(u16, i64), usize> = Map::default();
        let mut sacks: Map<(u16, i64), Vec<usize>> = Map::default();
        for (k, &i) in conn_rows.iter().enumerate() {
            let Some(r) = all.get(i) else {
                continue;
            };
            if r.marks & SACK != 0 {
                sacks.entry((r.src, r.ack)).or_default().push(k);
            }
            if r.kind != Kind::Data {
                continue;
            }
            if r.marks & RETRANSMISSION != 0 {
                out.resent += 1;
                if read < rules.max_losses {
                    read += 1;
                    if let Some(&at) = last.get(&(r.src, r.seq)) {
                        loss(rows, conn_rows, &sacks, at, k, r, rules, &mut out);
                    }
                }
            }
            last.insert((r.src, r.seq), k);
        }
    }
    out
}

/// The retransmission r (the connection's k-th row) of the row at `at`.
#[allow(clippy::too_many_arguments)]
fn loss(
    rows: &Rows,
    conn_rows: &[usize],
    sacks: &Map<(u16, i64), Vec<usize>>,
    at: usize,
    k: usize,
    r: &Row,
    rules: &Rules,
    out: &mut Losses,
) {
    let between: &[usize] = sacks.get(&(r.dst, r.seq)).map_or(&[], |v| {
        let lo = v.partition_point(|&x| x <= at);
        let hi = v.partition_point(|&x| x < k);
        v.get(lo..hi).unwrap_or_default()
    });
    let dups: Vec<&Row> = between
        .iter()
        .filter_map(|&x| conn_rows.get(x).and_then(|&i| rows.rows.get(i)))
        .collect();
    out.counts.push(dups.len());
    if let Some(first) = dups.first() {
        out.delays.push(r.t - first.t);
        if out.example.is_none() {
            let original = conn_rows
                .get(at)
                .and_then(|&i| rows.rows.get(i))
                .map_or(0, |o| o.frame);
            out.example = Some(LossExample {
                frame: r.frame,
                original,
                dups: dups.len(),
                dup_frames: dups.iter().take(rules.frames).map(|a| a.frame).collect(),
                ms: (r.t - first.t) * 1000.0,
            });
        }
    }
}

/// The first ACK of new data that came delayed_s after the data it acknowledges, with
/// nothing sent back since.
fn delayed(rows: &Rows, rules: &Rules) -> Option<Delayed> {
    let mut last: Map<(u64, u16), &Row> = Map::default();
    for r in &rows.rows {
        if r.kind == Kind::Data {
            last.insert((r.conn, r.src), r);
        } else if r.kind == Kind::Ack && r.nbytes != 0 {
            let Some(data) = last.get(&(r.conn, r.dst)) else {
                continue;
            };
            let mine = last.get(&(r.conn, r.src));
            let gap = r.t - data.t;
            if rules.delayed_s.0 <= gap
                && gap < rules.delayed_s.1
                && mine.is_none_or(|m| m.t < data.t)
            {
                return Some(Delayed {
                    frame: r.frame,
                    bytes: r.nbytes,
                    ms: gap * 1000.0,
                    data_frame: data.frame,
                });
            }
        }
    }
    None
}

/// A direction's segments (not retransmissions) in rounds: a new round after a pause of
/// `gap_ms` or more; each round's segment count and first frame.
pub fn rounds(rows: &Rows, (conn, src, dst): (u64, u16, u16), gap_ms: f64) -> Vec<(usize, u64)> {
    let mut out: Vec<(usize, u64)> = Vec::new();
    let mut last: Option<f64> = None;
    for r in &rows.rows {
        if r.conn != conn
            || (r.src, r.dst) != (src, dst)
            || r.kind != Kind::Data
            || r.marks & RETRANSMISSION != 0
        {
            continue;
        }
        match (last, out.last_mut()) {
            (Some(t), Some(round)) if (r.t - t) * 1000.0 < gap_ms => round.0 += 1,
            _ => out.push((1, r.frame)),
        }
        last = Some(r.t);
    }
    out
}
