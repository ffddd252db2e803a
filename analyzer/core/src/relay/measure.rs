//! What a relay does to each query and to the transfer, in numbers: each matched pair's delays
//! and re-segmentation, the sizes the server and the relay write in, whether the server waited
//! on the relay's window, and what the relay's verdict reads of its pairs.

use serde::{Deserialize, Serialize};

use super::legs::{Leg, LegQuery, BULK_SEGMENTS, MIN_WRITE_UNIT};
use super::matching::QueryRef;
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

impl Pair {
    pub fn of(legs: &[Leg], f: QueryRef, b: QueryRef) -> Self {
        let (fl, bl) = (&legs[f.0], &legs[b.0]);
        let (fq, bq) = (&fl.queries[f.1], &bl.queries[b.1]);
        let through = fq.last_response_s.map(|last| ms_between(fq.sent_s, last));
        let own = bq.last_response_s.map(|last| ms_between(bq.sent_s, last));
        let (seg_in, seg_out) = (bq.response_segments, fq.response_segments);
        let request_delay = ms_between(fq.sent_s, bq.sent_s);
        let first_byte_delay = ms_opt(bq.first_response_s, fq.first_response_s);
        let cost = through.zip(own).map(|(t, o)| round_to(t - o, 3));
        Pair {
            front: QueryAt {
                connection: fl.id(),
                query_index: f.1,
            },
            back: QueryAt {
                connection: bl.id(),
                query_index: b.1,
            },
            sql: fq.sql.to_string(),
            rows: fq.rows.clone(),
            response_bytes: PerLeg {
                front: fq.response_bytes,
                back: bq.response_bytes,
            },
            request_delay_ms: request_delay,
            first_byte_delay_ms: first_byte_delay,
            last_byte_delay_ms: ms_opt(bq.last_response_s, fq.last_response_s),
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
                front_sent: fq.sent_frame,
                back_sent: bq.sent_frame,
                back_first: bq.first_frame,
                front_first: fq.first_frame,
                back_last: bq.last_frame,
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
/// PgBouncer's default pkt_buf, 8,099 for Pgpool-II, 1,448 (the MSS) over a bridge.
pub fn forward_chunk<'a>(front_queries: impl Iterator<Item = &'a LegQuery>) -> Option<i64> {
    let mut sizes: Vec<(i64, u64)> = Vec::new();
    for q in front_queries {
        if q.response_segments < BULK_SEGMENTS {
            continue;
        }
        for &(size, n) in q.response_segment_sizes.iter().flat_map(|c| &c.0) {
            if size >= MIN_WRITE_UNIT {
                match sizes.iter_mut().find(|(s, _)| *s == size) {
                    Some((_, count)) => *count += n,
                    None => sizes.push((size, n)),
                }
            }
        }
    }
    let total: u64 = sizes.iter().map(|(_, n)| n).sum();
    let mut common: Vec<i64> = (sizes.iter())
        .filter(|(_, n)| *n as f64 >= 0.15 * total as f64)
        .map(|(s, _)| *s)
        .collect();
    common.sort_unstable();
    let smallest = *common.first()?;
    common.into_iter().filter(|&k| k <= 2 * smallest).max()
}

/// The write size a leg's sender habitually uses: of the sizes of at least 1 KiB among those
/// that carried the most bytes, the one written most often (the larger among equals). Writes,
/// not segments: on an MTU-1500 path every segment is cut at the MSS, the writes are the
/// programs' own (an 8,192-byte PostgreSQL write, PgBouncer's 4 KB forwarding: mechanics.md).
/// Counted, not weighed: under back-pressure a socket takes several writes as one, and those
/// few large ones carry many bytes but are no program's habit.
pub fn write_unit<'a>(legs: impl Iterator<Item = &'a Leg>) -> Option<i64> {
    let mut counts: Vec<(i64, u64)> = Vec::new();
    for leg in legs {
        for &(size, n) in &leg.write_sizes {
            match counts.iter_mut().find(|(s, _)| *s == size) {
                Some((_, c)) => *c += n,
                None => counts.push((size, n)),
            }
        }
    }
    counts.iter().max_by_key(|(s, n)| (*n, *s)).map(|(s, _)| *s)
}

/// The limit of the legs' server -> client direction that carried the most (the first among
/// equals).
pub fn bulk_limit<'a>(legs: impl Iterator<Item = &'a Leg>) -> Limit {
    let mut best: Option<&Leg> = None;
    for leg in legs.filter(|l| l.limit != Limit::None) {
        if best.is_none_or(|b| leg.payload_bytes > b.payload_bytes) {
            best = Some(leg);
        }
    }
    best.map_or(Limit::None, |l| l.limit)
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

/// The first value that is known and not 0, else the last one (a chain of `a or b`).
fn first_set(values: impl Iterator<Item = Option<i64>>) -> Option<i64> {
    let mut acc = None;
    for v in values {
        if acc.is_none_or(|x| x == 0) {
            acc = v;
        }
    }
    acc
}

impl Coupling {
    pub fn of(backs: &[&Leg], fronts: &[&Leg]) -> Self {
        let zero_events: u64 = backs.iter().map(|c| c.zero_window_periods).sum();
        let zero_s: f64 = backs.iter().map(|c| c.zero_window_total_s).sum();
        let mut frames: Vec<u64> = backs
            .iter()
            .flat_map(|c| c.evidence_frames.iter().copied())
            .collect();
        frames.sort_unstable();
        frames.dedup();
        frames.truncate(10);
        Coupling {
            back_window_zero_events: zero_events,
            back_window_zero_s: round_to(zero_s, 6),
            back_bytes_per_ack_median: first_set(backs.iter().map(|c| c.bytes_acked_median)),
            front_bytes_per_ack_median: first_set(fronts.iter().map(|c| c.bytes_acked_median)),
            back_bytes_per_flight_median: first_set(backs.iter().map(|c| c.flight_bytes_median)),
            summary: String::new(),
            evidence_frames: frames,
        }
    }
}
