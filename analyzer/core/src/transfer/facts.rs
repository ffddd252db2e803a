//! What the transfer analysis measured, as plain values for Python to interpret: counts,
//! sizes, frames, times as raw f64 (epoch seconds or durations, unrounded) and the answers of
//! the histograms (medians, modes, top values). Field names follow the report's JSON keys.

use serde::Serialize;

use super::exact::trunc;
use super::flow::Flow;
use super::limits::LimitFacts;
use super::{TransferAnalyzer, TOP_K};
use crate::histogram::{quantile_of, Histogram};

#[derive(Clone, Debug, Serialize)]
pub struct TransferFacts {
    /// By the engine's direction: 0 client->server, 1 server->client.
    pub directions: [DirectionFacts; 2],
    /// Epoch seconds of the client's SYN, the server's SYN-ACK and the client's ACK that
    /// completed the handshake (the latest seen of each; None when not seen).
    pub syn_ts: [Option<f64>; 3],
    /// SYN-ACK minus SYN in seconds, as they stood when the first data segment came.
    pub handshake_syn_to_synack_s: Option<f64>,
    /// finish() was called.
    pub finished: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct DirectionFacts {
    /// New bytes (each byte once).
    pub data_bytes: i64,
    /// Data segments, retransmissions included.
    pub segments: u64,
    pub retransmitted_segments: u64,
    /// Times of the first and last data segments (epoch seconds).
    pub first_ts: Option<f64>,
    pub last_ts: f64,
    pub first_frame: u64,
    pub last_frame: u64,
    pub max_segment: i64,
    pub segment_size: HistogramFacts,
    pub acks: AckFacts,
    pub window: WindowFacts,
    pub in_flight: InFlightFacts,
    pub flights: FlightFacts,
    pub rtt: RttFacts,
    pub goodput: GoodputFacts,
    pub idle_periods: IdleFacts,
    pub writes: WriteFacts,
    /// Where the transfer time went, per limit.
    pub limits: LimitFacts,
}

/// The sender's application writes: new bytes up to each segment with PSH.
#[derive(Clone, Debug, Serialize)]
pub struct WriteFacts {
    pub count: u64,
    /// Quantiles of the write sizes weighted by bytes: half the bytes went in writes of
    /// `median_by_bytes` or smaller (a few large writes and many small ones are not summarised
    /// by the small ones' size).
    pub p10_by_bytes: Option<i64>,
    pub median_by_bytes: Option<i64>,
    pub p90_by_bytes: Option<i64>,
    /// The TOP_K sizes carrying the most bytes: [size, writes], most bytes first.
    pub top_by_bytes: Vec<(i64, u64)>,
    /// New bytes after the last PSH (a write not ended in the capture).
    pub unended_bytes: i64,
}

/// The first value at which the cumulative bytes (value x count) reach q of the total.
pub(super) fn quantile_by_bytes(values: &[(i64, u64)], q: f64) -> Option<i64> {
    let weight = |&(v, n): &(i64, u64)| (v.max(0) as f64) * (n as f64);
    let total: f64 = values.iter().map(weight).sum();
    if total <= 0.0 {
        return values.first().map(|&(v, _)| v);
    }
    let mut acc = 0.0;
    for e in values {
        acc += weight(e);
        if acc >= q * total {
            return Some(e.0);
        }
    }
    values.last().map(|&(v, _)| v)
}

impl WriteFacts {
    fn of(h: &Histogram, unended: i64) -> Self {
        let values = h.values();
        let mut top = values.clone();
        // most bytes first; among equals the smaller size
        top.sort_by(|a, b| {
            let (wa, wb) = (a.0 as i128 * a.1 as i128, b.0 as i128 * b.1 as i128);
            wb.cmp(&wa).then(a.0.cmp(&b.0))
        });
        top.truncate(TOP_K);
        WriteFacts {
            count: h.n(),
            p10_by_bytes: quantile_by_bytes(&values, 0.1),
            median_by_bytes: quantile_by_bytes(&values, 0.5),
            p90_by_bytes: quantile_by_bytes(&values, 0.9),
            top_by_bytes: top,
            unended_bytes: unended,
        }
    }
}

/// A Histogram's answers.
#[derive(Clone, Debug, Serialize)]
pub struct HistogramFacts {
    pub count: u64,
    pub median: Option<i64>,
    /// The most frequent value (the first counted among equals) and its count.
    pub mode: Option<i64>,
    pub mode_count: u64,
    /// The TOP_K most frequent [value, count], largest count first.
    pub top: Vec<(i64, u64)>,
}

impl HistogramFacts {
    fn of(h: &Histogram) -> Self {
        let s = h.summary(TOP_K);
        HistogramFacts {
            count: s.n,
            median: s.median,
            mode: s.mode,
            mode_count: s.mode_count,
            top: s.top,
        }
    }
}

/// ACKs that advanced over this direction's data.
#[derive(Clone, Debug, Serialize)]
pub struct AckFacts {
    pub count: u64,
    pub causes: Causes,
    pub bytes_acked: HistogramFacts,
    pub segments_per_ack: HistogramFacts,
}

#[derive(Clone, Debug, Serialize)]
pub struct Causes {
    pub every_second_segment: u64,
    pub window_update: u64,
    pub quick_ack: u64,
    pub delayed_timer: u64,
    pub duplicate: u64,
}

/// The receiver's advertised window.
#[derive(Clone, Debug, Serialize)]
pub struct WindowFacts {
    pub min: Option<i64>,
    pub max: Option<i64>,
    /// The receiver's window scale is known: windows are bytes.
    pub scaled: bool,
    /// The smallest scale consistent with bytes in flight, from the engine (after finish).
    pub scale_lower_bound: Option<u8>,
    pub zero_window_periods: u64,
    pub zero_window_total_s: f64,
    /// Frames that shut the window, and frames whose data filled it (the first 20 each).
    pub zero_frames: Vec<u64>,
    pub full_frames: Vec<u64>,
    /// When it was zero: (from, to) capture times, the first 20.
    pub zero_spans: Vec<(f64, f64)>,
}

#[derive(Clone, Debug, Serialize)]
pub struct InFlightFacts {
    pub max: i64,
    pub median: Option<i64>,
    pub max_frame: u64,
    /// The largest bytes in flight / window seen with the scale known (0.0 when none).
    pub max_ratio_to_window: f64,
}

/// Per flight end reason, in the report's order.
#[derive(Clone, Debug, Serialize)]
pub struct EndReasons<T> {
    pub window_full: T,
    pub ack_arrived: T,
    pub cwnd_wait: T,
    pub sender_idle: T,
}

impl<T: Clone> EndReasons<T> {
    fn of(by_reason: &[T; 4]) -> Self {
        let [window_full, ack_arrived, cwnd_wait, sender_idle] = by_reason.clone();
        EndReasons {
            window_full,
            ack_arrived,
            cwnd_wait,
            sender_idle,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct FlightFacts {
    pub count: u64,
    pub bytes_median: Option<i64>,
    pub segments_median: Option<i64>,
    pub end_reasons: EndReasons<u64>,
    /// The ACK frame that ended each flight (the first 20 per reason).
    pub end_frames: EndReasons<Vec<u64>>,
}

/// RTT samples (Karn's rule), in microseconds truncated, and the least in seconds.
#[derive(Clone, Debug, Serialize)]
pub struct RttFacts {
    pub samples: u64,
    pub min_s: Option<f64>,
    pub median_us: Option<i64>,
    pub p95_us: Option<i64>,
}

/// One 100 ms bin: its index from the first data segment and its new bytes.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct BinFacts {
    pub index: i64,
    pub bytes: i64,
}

#[derive(Clone, Debug, Serialize)]
pub struct GoodputFacts {
    /// Bins with bytes.
    pub bins: usize,
    /// The bin with the most bytes (the earliest among equals); None without bins.
    pub best: Option<BinFacts>,
    /// Over the bins the data's span covers ([0, int(span * 10))): the first without bytes,
    /// else the one with the fewest (the earliest among equals); None without bins.
    pub worst: Option<BinFacts>,
}

#[derive(Clone, Debug, Serialize)]
pub struct IdlePeriod {
    /// The last data before the pause (epoch seconds), and the pause's length.
    pub start_ts: f64,
    pub seconds: f64,
    pub from_frame: u64,
    pub to_frame: u64,
    /// Bytes unacknowledged when the sender resumed (0 before any ACK).
    pub outstanding: i64,
    /// The receiver's window was zero.
    pub zero_window: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct IdleFacts {
    pub count: u64,
    pub total_s: f64,
    /// Idle time with data unacknowledged or the window shut.
    pub waiting_s: f64,
    /// The first 20 pauses.
    pub first: Vec<IdlePeriod>,
}

impl Flow {
    fn goodput(&self) -> GoodputFacts {
        let (mut best, mut worst) = (None, None);
        if let (Some(first), false) = (self.first_ts, self.bins.is_empty()) {
            let (index, bytes) = self.bins.most();
            best = Some(BinFacts { index, bytes });
            let index = self.bins.least(trunc((self.last_ts - first) * 10.0));
            worst = Some(BinFacts {
                index,
                bytes: self.bins.get(index),
            });
        }
        GoodputFacts {
            bins: self.bins.len(),
            best,
            worst,
        }
    }

    /// `lower_bound`: the engine's scale lower bound for the side advertising the windows.
    fn facts(&self, lower_bound: Option<u8>) -> DirectionFacts {
        let rtt = self.rtt.values();
        DirectionFacts {
            data_bytes: self.data_bytes,
            segments: self.segments,
            retransmitted_segments: self.retrans,
            first_ts: self.first_ts,
            last_ts: self.last_ts,
            first_frame: self.first_frame,
            last_frame: self.last_frame,
            max_segment: self.flight.maxseg,
            segment_size: HistogramFacts::of(&self.seg_sizes),
            acks: AckFacts {
                count: self.acks,
                causes: Causes {
                    every_second_segment: self.every_second,
                    window_update: self.window_updates,
                    quick_ack: self.quick_acks,
                    delayed_timer: self.delayed_timer,
                    duplicate: self.duplicates,
                },
                bytes_acked: HistogramFacts::of(&self.ack_hist),
                segments_per_ack: HistogramFacts::of(&self.segs_hist),
            },
            window: WindowFacts {
                min: self.win_min,
                max: self.win_max,
                scaled: self.scale_known,
                scale_lower_bound: lower_bound,
                zero_window_periods: self.zero_periods,
                zero_window_total_s: self.zero_total,
                zero_frames: self.zero_frames.clone(),
                full_frames: self.full_frames.clone(),
                zero_spans: self.zero_spans.clone(),
            },
            in_flight: InFlightFacts {
                max: self.inflight_max,
                median: self.inflight.median(),
                max_frame: self.inflight_max_frame,
                max_ratio_to_window: self.ratio_max,
            },
            flights: FlightFacts {
                count: self.flights,
                bytes_median: self.fl_bytes_hist.median(),
                segments_median: self.fl_segs_hist.median(),
                end_reasons: EndReasons::of(&self.end_reasons),
                end_frames: EndReasons::of(&self.end_frames),
            },
            rtt: RttFacts {
                samples: self.rtt.n(),
                min_s: self.rtt_min,
                median_us: quantile_of(&rtt, 0.5),
                p95_us: quantile_of(&rtt, 0.95),
            },
            goodput: self.goodput(),
            idle_periods: IdleFacts {
                count: self.idle_count,
                total_s: self.idle_total,
                waiting_s: self.idle_waiting,
                first: self.idle.clone(),
            },
            writes: WriteFacts::of(&self.write_sizes, self.write_cur),
            limits: self.chrono.facts(),
        }
    }
}

impl TransferAnalyzer {
    /// What was measured so far (complete after finish).
    pub fn facts(&self) -> TransferFacts {
        // flows[d]'s windows are advertised by side 1 - d
        let bound = |side: usize| {
            self.info
                .and_then(|i| i.get(side).copied()?.window_scale_lower_bound)
        };
        let [f0, f1] = &self.flows;
        TransferFacts {
            directions: [f0.facts(bound(1)), f1.facts(bound(0))],
            syn_ts: self.syn_ts,
            handshake_syn_to_synack_s: self.handshake,
            finished: self.info.is_some(),
        }
    }
}

/// A window's largest value in bytes: as advertised when the scale is known, else shifted by
/// the smallest scale the bytes in flight allow (no handshake in the capture: at least this).
pub fn window_bytes(max: Option<i64>, scaled: bool, scale_lower_bound: Option<u8>) -> Option<i64> {
    let max = max?;
    match (scaled, scale_lower_bound) {
        (false, Some(lb)) => max.checked_shl(u32::from(lb.min(14))),
        _ => Some(max),
    }
}
