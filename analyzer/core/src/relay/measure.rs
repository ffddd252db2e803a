//! What a relay does to each query and to the transfer, in numbers: each matched pair's delays
//! and re-segmentation, the sizes the server and the relay write in, whether the server waited
//! on the relay's window, and what the relay's verdict reads of its pairs.

use serde::{Deserialize, Serialize};

use super::legs::{id, LegDetail, LegQuery, BULK_SEGMENTS, MIN_WRITE_UNIT};
use crate::report::numbers::round_to;
use crate::report::values::Digits;
use crate::report::words::Limit;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct QueryAt {
    pub connection: String,
    pub query_index: usize,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PerLeg<T> {
    pub front: T,
    pub back: T,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PairFrames {
    pub front_sent: u64,
    pub back_sent: u64,
    pub back_first: Option<u64>,
    pub front_first: Option<u64>,
    pub back_last: Option<u64>,
    pub front_last: Option<u64>,
}

/// A front query and the back-leg execution that served it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Pair {
    pub front: QueryAt,
    pub back: QueryAt,
    pub sql: String,
    pub rows: Option<Digits>,
    pub response_bytes: PerLeg<u64>,
    pub request_delay_ms: f64,
    pub first_byte_delay_ms: Option<f64>,
    pub last_byte_delay_ms: Option<f64>,
    pub through_relay_ms: Option<f64>,
    pub back_leg_ms: Option<f64>,
    pub relay_cost_ms: Option<f64>,
    /// Of the relay's cost, what it did itself: forward the request and the first response
    /// byte (the rest is the front leg draining slower than the back leg).
    pub relay_own_ms: Option<f64>,
    pub segments_in: u64,
    pub segments_out: u64,
    pub segments_out_per_in: Option<f64>,
    pub segment_median_in: Option<i64>,
    pub segment_median_out: Option<i64>,
    pub segment_max_in: Option<i64>,
    pub segment_max_out: Option<i64>,
    pub frames: PairFrames,
}

/// b - a in milliseconds, for report times in seconds.
fn ms_between(a: f64, b: f64) -> f64 {
    round_to((b - a) * 1000.0, 3)
}

fn ms_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    Some(ms_between(a?, b?))
}

/// A query of a leg, for a pair: its leg's number, its index, the query.
pub type Side<'a> = (u64, usize, &'a LegQuery);

impl Pair {
    /// The relay's times: what it received (the front leg's request, the back leg's response)
    /// as delivered to it, what it sent as captured. A reply the capture saw but the relay
    /// took only from a later copy is the server path's time, not the relay's.
    pub fn of((fl, fi, fq): Side<'_>, (bl, bi, bq): Side<'_>) -> Self {
        let (front_sent, front_sent_frame) = fq.request_delivered();
        let [back_first, back_last] = bq.response_delivered();
        let through = fq.last_response_s.map(|last| ms_between(front_sent, last));
        let own = back_last.map(|(last, _)| ms_between(bq.sent_s, last));
        let (seg_in, seg_out) = (bq.response_segments, fq.response_segments);
        let request_delay = ms_between(front_sent, bq.sent_s);
        let first_byte_delay = ms_opt(back_first.map(|f| f.0), fq.first_response_s);
        let cost = through.zip(own).map(|(t, o)| round_to(t - o, 3));
        Pair {
            front: QueryAt {
                connection: id(fl),
                query_index: fi,
            },
            back: QueryAt {
                connection: id(bl),
                query_index: bi,
            },
            sql: fq.sql.to_string(),
            rows: fq.rows.clone(),
            response_bytes: PerLeg {
                front: fq.response_bytes,
                back: bq.response_bytes,
            },
            request_delay_ms: request_delay,
            first_byte_delay_ms: first_byte_delay,
            last_byte_delay_ms: ms_opt(back_last.map(|l| l.0), fq.last_response_s),
            through_relay_ms: through,
            back_leg_ms: own,
            relay_cost_ms: cost,
            relay_own_ms: cost.map(|c| match first_byte_delay {
                Some(first) => c.min((request_delay + first).max(0.0)),
                None => c,
            }),
            segments_in: seg_in,
            segments_out: seg_out,
            segments_out_per_in: (seg_in > 0).then(|| round_to(seg_out as f64 / seg_in as f64, 2)),
            segment_median_in: bq.response_segment_median,
            segment_median_out: fq.response_segment_median,
            segment_max_in: bq.response_segment_max,
            segment_max_out: fq.response_segment_max,
            frames: PairFrames {
                front_sent: front_sent_frame,
                back_sent: bq.sent_frame,
                back_first: back_first.and_then(|f| f.1),
                front_first: fq.first_frame,
                back_last: back_last.and_then(|l| l.1),
                front_last: fq.last_frame,
            },
        }
    }

    pub fn bulk(&self) -> bool {
        self.segments_in >= BULK_SEGMENTS
    }
}

/// The largest chunk the relay forwards as a habit. Large (>= 1 KiB) segment sizes that make
/// up at least 15% of them qualify; coalesced segments (the kernel merging queued writes when
/// the client's window reopens, up to 65,483 bytes on loopback) are sums of several writes, so
/// sizes beyond twice the smallest qualifying one are left out. Measured: 4,096 for
/// PgBouncer's default pkt_buf, 8,099 for Pgpool-II, 1,448 (the MSS) over a bridge. Gathered
/// from the matched front queries one at a time.
#[derive(Default)]
pub struct ForwardChunk {
    sizes: Vec<(i64, u64)>,
}

/// Add `n` to `size`'s count.
fn count(counts: &mut Vec<(i64, u64)>, size: i64, n: u64) {
    match counts.iter_mut().find(|(s, _)| *s == size) {
        Some((_, c)) => *c += n,
        None => counts.push((size, n)),
    }
}

impl ForwardChunk {
    pub fn add(&mut self, q: &LegQuery) {
        if q.response_segments < BULK_SEGMENTS {
            return;
        }
        for &(size, n) in q.response_segment_sizes.iter().flatten() {
            if size >= MIN_WRITE_UNIT {
                count(&mut self.sizes, size, n);
            }
        }
    }

    pub fn size(&self) -> Option<i64> {
        let total: u64 = self.sizes.iter().map(|(_, n)| n).sum();
        let mut common: Vec<i64> = (self.sizes.iter())
            .filter(|(_, n)| *n as f64 >= 0.15 * total as f64)
            .map(|(s, _)| *s)
            .collect();
        common.sort_unstable();
        let smallest = *common.first()?;
        common.into_iter().filter(|&k| k <= 2 * smallest).max()
    }
}

/// What a relay's front or back legs say together, gathered one leg at a time.
#[derive(Default)]
pub struct LegsSeen {
    /// Writes by size: the habitual write size is, of the sizes of at least 1 KiB among those
    /// that carried the most bytes, the one written most often (the larger among equals).
    /// Writes, not segments: on an MTU-1500 path every segment is cut at the MSS, the writes
    /// are the programs' own (an 8,192-byte PostgreSQL write, PgBouncer's 4 KB forwarding:
    /// mechanics.md). Counted, not weighed: under back-pressure a socket takes several writes
    /// as one, and those few large ones carry many bytes but are no program's habit.
    writes: Vec<(i64, u64)>,
    /// The limit of the server -> client direction that carried the most (the first among
    /// equals), and what it carried.
    bulk: Option<(Limit, i64)>,
    zero_window_events: u64,
    zero_window_s: f64,
    evidence_frames: Vec<u64>,
    bytes_per_ack_median: Option<i64>,
    bytes_per_flight_median: Option<i64>,
}

/// Evidence frames a coupling lists.
const COUPLING_FRAMES: usize = 10;

/// The first value that is known and not 0, else the last one (a chain of `a or b`), one
/// value at a time.
fn first_set(acc: &mut Option<i64>, v: Option<i64>) {
    if acc.is_none_or(|x| x == 0) {
        *acc = v;
    }
}

impl LegsSeen {
    pub fn add(&mut self, leg: &LegDetail) {
        for &(size, n) in &leg.write_sizes {
            count(&mut self.writes, size, n);
        }
        if leg.limit != Limit::None && self.bulk.is_none_or(|(_, b)| leg.payload_bytes > b) {
            self.bulk = Some((leg.limit, leg.payload_bytes));
        }
        self.zero_window_events += leg.zero_window_periods;
        self.zero_window_s += leg.zero_window_total_s;
        self.evidence_frames.extend(&leg.evidence_frames);
        if self.evidence_frames.len() > 8 * COUPLING_FRAMES {
            self.lowest_frames();
        }
        first_set(&mut self.bytes_per_ack_median, leg.bytes_acked_median);
        first_set(&mut self.bytes_per_flight_median, leg.flight_bytes_median);
    }

    fn lowest_frames(&mut self) {
        self.evidence_frames.sort_unstable();
        self.evidence_frames.dedup();
        self.evidence_frames.truncate(COUPLING_FRAMES);
    }

    /// The habitual write size.
    pub fn write_unit(&self) -> Option<i64> {
        (self.writes.iter())
            .max_by_key(|(s, n)| (*n, *s))
            .map(|(s, _)| *s)
    }

    /// What limited the leg that carried the most.
    pub fn bulk_limit(&self) -> Limit {
        self.bulk.map_or(Limit::None, |(limit, _)| limit)
    }
}

/// Did the server wait for the relay? The relay's receive window on the back leg (advertised
/// to the server) shrinking to zero while it forwards to the client is the sign.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Coupling {
    pub back_window_zero_events: u64,
    pub back_window_zero_s: f64,
    pub back_bytes_per_ack_median: Option<i64>,
    pub front_bytes_per_ack_median: Option<i64>,
    pub back_bytes_per_flight_median: Option<i64>,
    /// Python's words.
    pub summary: String,
    pub evidence_frames: Vec<u64>,
}

impl Coupling {
    pub fn of(backs: &mut LegsSeen, fronts: &LegsSeen) -> Self {
        backs.lowest_frames();
        Coupling {
            back_window_zero_events: backs.zero_window_events,
            back_window_zero_s: round_to(backs.zero_window_s, 6),
            back_bytes_per_ack_median: backs.bytes_per_ack_median,
            front_bytes_per_ack_median: fronts.bytes_per_ack_median,
            back_bytes_per_flight_median: backs.bytes_per_flight_median,
            summary: String::new(),
            evidence_frames: backs.evidence_frames.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::matching::tests::q;
    use crate::report::conversation::DeliveredRecord;

    /// The server's reply, seen by the capture at the relay, lost before the relay took it:
    /// the 200 ms until its copy came are the back leg's, not the relay's.
    #[test]
    fn a_reply_the_relay_took_from_a_later_copy_is_the_back_legs_time() {
        let front = q("SELECT 1", 0.0, 0.2011, 0.2011, 1);
        let mut back = q("SELECT 1", 0.0001, 0.0010, 0.0010, 2);
        let cost = |front: &LegQuery, back: &LegQuery| Pair::of((1, 0, front), (2, 0, back));
        let seen = cost(&front, &back);
        assert_eq!(seen.relay_cost_ms, Some(200.2));
        back.delivered = Some(DeliveredRecord {
            sent_s: 0.0001,
            sent_frame: 2,
            first_response_s: Some(0.2010),
            first_frame: Some(9),
            last_response_s: Some(0.2010),
            last_frame: Some(9),
        });
        let pair = cost(&front, &back);
        assert_eq!(pair.relay_cost_ms, Some(0.2));
        assert_eq!(pair.back_leg_ms, Some(200.9));
        assert_eq!(
            (pair.frames.back_first, pair.frames.back_last),
            (Some(9), Some(9))
        );
        assert_eq!(pair.first_byte_delay_ms, Some(0.1));
    }
}
