//! What the plots of a drawing show, measured from its packets: per direction carrying data
//! its segments (time-sequence), the ACKs and windows coming back, bytes in flight,
//! throughput, round-trip time, bytes per ACK, and its progress for a relay's legs side by
//! side. A plot is as many pixels wide as it is: each series is cut to what a pixel column can
//! show (consecutive points in one column keep their first, lowest, highest and last), so a
//! 20,000-row dump and its 200,000 segments draw as fast as a short query.

use super::{Map, Set};

use serde::Serialize;

use super::record::Packet;
use super::rows::Lanes;
use crate::packet::ACK;
use crate::tcp::observe::{PARTIAL_RETRANS, RETRANS};

/// Directions plotted at most (the ones carrying the most bytes).
pub const MAX_SERIES: usize = 3;
/// A direction is plotted when it carried this many segments (else the busiest alone).
pub const MIN_SEGMENTS: usize = 4;
/// Throughput is averaged over this many segments (tcptrace's tput graph averages too): one
/// segment's bytes over the gap to the next is a burst's rate, not the transfer's.
pub const TPUT_SEGMENTS: usize = 10;
/// Pixel columns of a time axis, a few more than a plot has: nothing a pixel shows is lost.
pub const COLUMNS: f64 = 2000.0;
/// The bars of bytes per ACK: the commonest sizes.
pub const ACK_SIZES: usize = 15;

/// One direction carrying data, as its panels draw it. Times are milliseconds from the
/// capture's first packet; sequence numbers, ACKs and windows are stream offsets (`base`:
/// its first byte drawn).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Series {
    pub conn: u64,
    pub from_client: bool,
    pub base: i64,
    /// The receiver's window scale is unknown: its windows are raw.
    pub raw_window: bool,
    /// Data segments [seq, end) at a time, per pixel column one line from the lowest byte to
    /// the highest; `seg_ends` the ends marked.
    pub segments: Vec<(f64, i64, i64)>,
    pub seg_ends: Vec<(f64, i64)>,
    pub retransmissions: Vec<(f64, i64, i64)>,
    pub retrans_ends: Vec<(f64, i64)>,
    /// The receiver's ACK, and ACK + window, over time; its zero windows.
    pub acks: Vec<(f64, i64)>,
    pub windows: Vec<(f64, i64)>,
    pub zero_windows: Vec<(f64, i64)>,
    /// Bytes in flight (highest sent less highest acknowledged), and the window advertised.
    pub in_flight: Vec<(f64, i64)>,
    pub advertised: Vec<(f64, i64)>,
    /// Mbit/s over the last TPUT_SEGMENTS segments.
    pub throughput: Vec<(f64, f64)>,
    /// ms from a segment to the first ACK covering its end (none for retransmitted bytes).
    pub rtt: Vec<(f64, f64)>,
    /// Bytes each advancing ACK acknowledged: the commonest sizes and their counts.
    pub ack_sizes: Vec<(i64, u64)>,
    /// Bytes delivered so far (the relay view sets each leg's against the others').
    pub progress: Vec<(f64, i64)>,
}

/// A drawing's plots: the directions drawn, and the time span their panels share (ms: the
/// selection's first packet to the ACK of the last data byte drawn, or its last segment).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Plot {
    pub series: Vec<Series>,
    pub span: Option<(f64, f64)>,
    /// Packets in the selection.
    pub packets: usize,
}

/// Points (t, v) cut to what a pixel column shows: of consecutive points in one column of
/// `width` ms, the first, the lowest, the highest and the last, in their order.
pub fn decimate<T: Copy + PartialOrd>(
    points: &[(f64, T)],
    origin: f64,
    width: f64,
) -> Vec<(f64, T)> {
    let mut out = Vec::new();
    let column = |t: f64| ((t - origin) / width).floor();
    let mut i = 0;
    while i < points.len() {
        let c = column(points[i].0);
        let mut j = i + 1;
        while j < points.len() && column(points[j].0) == c {
            j += 1;
        }
        let run = &points[i..j];
        let (mut lo, mut hi) = (0, 0);
        for (k, p) in run.iter().enumerate() {
            if p.1 < run[lo].1 {
                lo = k;
            }
            if p.1 > run[hi].1 {
                hi = k;
            }
        }
        let mut keep = [0, lo, hi, run.len() - 1];
        keep.sort_unstable();
        let mut last = None;
        for k in keep {
            if last != Some(k) {
                out.push(run[k]);
                last = Some(k);
            }
        }
        i = j;
    }
    out
}

/// A segment [seq, end) at a time (ms).
type Segment = (f64, i64, i64);

/// Segments [seq, end) at a time, one line per pixel column from its lowest byte to its
/// highest (at the column's first segment), and the ends to mark.
fn columns(segs: &[(f64, i64, i64)], origin: f64, width: f64) -> (Vec<Segment>, Vec<(f64, i64)>) {
    let mut lines = Vec::new();
    let column = |t: f64| ((t - origin) / width).floor();
    let mut i = 0;
    while i < segs.len() {
        let c = column(segs[i].0);
        let mut j = i + 1;
        while j < segs.len() && column(segs[j].0) == c {
            j += 1;
        }
        let run = &segs[i..j];
        let lo = run.iter().map(|s| s.1).min().unwrap_or(0);
        let hi = run.iter().map(|s| s.2).max().unwrap_or(0);
        lines.push((run[0].0, lo, hi));
        i = j;
    }
    let ends: Vec<(f64, i64)> = segs.iter().map(|&(t, _, e)| (t, e)).collect();
    (lines, decimate(&ends, origin, width))
}

/// A direction's packets, as they came.
#[derive(Default)]
struct Raw {
    first: usize,
    seg: Vec<(f64, i64, i64)>,
    retr: Vec<(f64, i64, i64)>,
    ack: Vec<(f64, i64)>,
    win: Vec<(f64, i64)>,
    zero: Vec<(f64, i64)>,
}

/// The plots of `packets` (in capture order), drawn as `lanes` and `swapped` say.
pub fn plot(
    packets: &[(u64, Packet)],
    lanes: &Map<u64, Lanes>,
    swapped: &Map<u64, bool>,
    start: f64,
) -> Plot {
    let mut raw: Map<(u64, u8), Raw> = Map::default();
    for (i, &(conn, p)) in packets.iter().enumerate() {
        let t = (p.ts - start) * 1000.0;
        if p.end > p.seq {
            let s = raw.entry((conn, p.d)).or_insert_with(|| Raw {
                first: i,
                ..Raw::default()
            });
            let seg = (t, p.seq, p.end);
            if p.kind & (RETRANS | PARTIAL_RETRANS) != 0 {
                s.retr.push(seg);
            } else {
                s.seg.push(seg);
            }
        }
        if p.flags & ACK != 0 && p.ack >= 0 {
            if let Some(acked) = raw.get_mut(&(conn, 1 - p.d.min(1))) {
                acked.ack.push((t, p.ack));
                acked.win.push((t, p.ack.wrapping_add(p.win)));
                if p.win == 0 {
                    acked.zero.push((t, p.ack));
                }
            }
        }
    }
    // the busiest directions first (ties in the order their data came)
    let mut every: Vec<((u64, u8), Raw)> = raw.into_iter().collect();
    every.sort_by_key(|((_, _), r)| r.first);
    every.sort_by_key(|(_, r)| -r.seg.iter().map(|s| s.2 - s.1).sum::<i64>());
    let many: Vec<usize> = (0..every.len())
        .filter(|&i| every[i].1.seg.len() + every[i].1.retr.len() >= MIN_SEGMENTS)
        .take(MAX_SERIES)
        .collect();
    let chosen: Vec<usize> = if many.is_empty() {
        (0..every.len().min(1)).collect()
    } else {
        many
    };
    let drawn: Vec<&((u64, u8), Raw)> = chosen.iter().filter_map(|&i| every.get(i)).collect();
    let span = span(packets, &drawn, start);
    let (origin, width) = match span {
        Some((lo, hi)) => {
            let pad = ((hi - lo) * 0.02).max(0.005);
            (
                lo - pad,
                ((hi - lo + 2.0 * pad) / COLUMNS).max(f64::MIN_POSITIVE),
            )
        }
        None => (0.0, 1.0),
    };
    let series = drawn
        .into_iter()
        .map(|((conn, d), r)| {
            let from_client = (*d == 0) != swapped.get(conn).copied().unwrap_or(false);
            let lane = lanes.get(conn);
            // the window limiting this data is advertised by its receiver
            let raw_window = lane.is_some_and(|l| {
                if from_client {
                    l.server_raw
                } else {
                    l.client_raw
                }
            });
            series(*conn, from_client, raw_window, r, origin, width)
        })
        .collect();
    Plot {
        series,
        span,
        packets: packets.len(),
    }
}

/// From the selection's first packet to the ACK of the last data byte of the directions
/// plotted (their last segment if it was never acknowledged), ms.
fn span(packets: &[(u64, Packet)], drawn: &[&((u64, u8), Raw)], start: f64) -> Option<(f64, f64)> {
    let first = packets.first()?;
    if drawn.is_empty() {
        return None;
    }
    let lo = (first.1.ts - start) * 1000.0;
    let mut hi = lo;
    for (_, r) in drawn {
        let segs = r.seg.iter().chain(&r.retr);
        let top = segs.clone().map(|s| s.2).max().unwrap_or(0);
        let last = segs.map(|s| s.0).fold(f64::NEG_INFINITY, f64::max);
        let acked = r.ack.iter().find(|a| a.1 >= top).map(|a| a.0);
        hi = hi.max(acked.unwrap_or(last));
    }
    Some((lo, hi))
}

fn series(
    conn: u64,
    from_client: bool,
    raw_window: bool,
    r: &Raw,
    origin: f64,
    width: f64,
) -> Series {
    let base = r.seg.iter().chain(&r.retr).map(|s| s.1).min().unwrap_or(0);
    let (segments, seg_ends) = columns(&r.seg, origin, width);
    let (retransmissions, retrans_ends) = columns(&r.retr, origin, width);
    // bytes in flight: the highest byte sent less the highest acknowledged, at each segment
    // and ACK (segments before ACKs of the same time)
    let mut events: Vec<(f64, u8, i64)> = r.seg.iter().map(|&(t, _, e)| (t, 0, e)).collect();
    events.extend(r.ack.iter().map(|&(t, a)| (t, 1, a)));
    events.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let (mut high, mut acked) = (base, base);
    let in_flight: Vec<(f64, i64)> = events
        .iter()
        .map(|&(t, k, v)| {
            if k == 0 {
                high = high.max(v);
            } else {
                acked = acked.max(v);
            }
            (t, (high - acked).max(0))
        })
        .collect();
    let advertised: Vec<(f64, i64)> = r
        .win
        .iter()
        .zip(&r.ack)
        .map(|(&(t, w), &(_, a))| (t, w - a))
        .collect();
    let mut segs = r.seg.clone();
    segs.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let throughput: Vec<(f64, f64)> = (TPUT_SEGMENTS..segs.len())
        .filter_map(|i| {
            let (t0, t1) = (segs[i - TPUT_SEGMENTS].0, segs[i].0);
            (t1 > t0).then(|| {
                let bytes: i64 = segs[i + 1 - TPUT_SEGMENTS..=i]
                    .iter()
                    .map(|s| s.2 - s.1)
                    .sum();
                (t1, bytes as f64 * 8.0 / ((t1 - t0) / 1000.0) / 1e6)
            })
        })
        .collect();
    let mut progress = Vec::new();
    let mut all = r.seg.clone();
    all.extend(&r.retr);
    all.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let mut hi = base;
    for &(t, _, e) in &all {
        hi = hi.max(e);
        progress.push((t, hi - base));
    }
    Series {
        conn,
        from_client,
        base,
        raw_window,
        segments,
        seg_ends,
        retransmissions,
        retrans_ends,
        acks: decimate(&r.ack, origin, width),
        windows: decimate(&r.win, origin, width),
        zero_windows: decimate(&r.zero, origin, width),
        in_flight: decimate(&in_flight, origin, width),
        advertised: decimate(&advertised, origin, width),
        throughput: decimate(&throughput, origin, width),
        rtt: decimate(&rtt(r), origin, width),
        ack_sizes: ack_sizes(&r.ack, base),
        progress: decimate(&progress, origin, width),
    }
}

/// Round-trip time over time, as seen at the capture point: from a segment to the first ACK
/// covering its end, at that ACK; retransmitted bytes give no sample (Karn).
fn rtt(r: &Raw) -> Vec<(f64, f64)> {
    let resent: Set<i64> = r.retr.iter().map(|s| s.2).collect();
    let mut segs = r.seg.clone();
    segs.sort_by_key(|s| s.2);
    let mut out = Vec::new();
    let mut j = 0;
    for &(t, _, e) in &segs {
        while j < r.ack.len() && (r.ack[j].1 < e || r.ack[j].0 < t) {
            j += 1;
        }
        let Some(&(at, _)) = r.ack.get(j) else {
            break;
        };
        if !resent.contains(&e) {
            out.push((at, at - t));
        }
    }
    out.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    out
}

/// How many bytes each advancing ACK acknowledged: the ACK_SIZES commonest (ties in the
/// order first seen), by size.
fn ack_sizes(acks: &[(f64, i64)], base: i64) -> Vec<(i64, u64)> {
    let mut counts: Vec<(i64, u64)> = Vec::new();
    let mut at: Map<i64, usize> = Map::default();
    let mut last = base;
    for &(_, a) in acks {
        if a > last {
            let size = a - last;
            match at.get(&size) {
                Some(&i) => counts[i].1 += 1,
                None => {
                    at.insert(size, counts.len());
                    counts.push((size, 1));
                }
            }
            last = a;
        }
    }
    counts.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
    counts.truncate(ACK_SIZES);
    counts.sort_by_key(|&(size, _)| size);
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_column_keeps_its_first_lowest_highest_and_last() {
        let pts: Vec<(f64, i64)> = vec![(0.0, 5), (0.1, 9), (0.2, 1), (0.3, 4), (1.5, 7)];
        assert_eq!(
            decimate(&pts, 0.0, 1.0),
            vec![(0.0, 5), (0.1, 9), (0.2, 1), (0.3, 4), (1.5, 7)]
        );
        let many: Vec<(f64, i64)> = (0..1000)
            .map(|i| (f64::from(i) / 1000.0, i64::from(i % 7)))
            .collect();
        let kept = decimate(&many, 0.0, 0.5);
        // the first column's first point is its lowest too: three points, then four
        assert_eq!(kept.len(), 7, "{kept:?}");
        assert_eq!(kept.first(), Some(&(0.0, 0)));
        assert_eq!(kept.last(), Some(&(0.999, 999 % 7)));
        assert!(kept.iter().any(|p| p.1 == 6) && kept.iter().any(|p| p.1 == 0));
        let (lines, ends) = columns(&[(0.0, 0, 10), (0.4, 10, 20), (2.0, 20, 30)], 0.0, 1.0);
        assert_eq!(lines, vec![(0.0, 0, 20), (2.0, 20, 30)]);
        assert_eq!(ends, vec![(0.0, 10), (0.4, 20), (2.0, 30)]);
    }
}
