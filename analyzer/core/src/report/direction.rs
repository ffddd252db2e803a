//! A direction of a connection as the report shows it: the TCP engine's counters, then what the
//! transfer analysis measured, in the report's units (times from the capture's start, rounded
//! as the report has always rounded them). The words (`pattern`, `waiting_for`, `verdict`) are
//! Python's, written in by `Words::apply`.

use serde::{Deserialize, Serialize};

use super::numbers::{int_text, round_int, round_to};
use super::values::{Inline, Maybe};
use super::words::Verdict;
use crate::tcp;
use crate::transfer::{self, ByLimit, LimitFacts};

/// Histogram values and their counts, most frequent first, keyed by the value as text.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counts(pub Vec<(i64, u64)>);

impl Serialize for Counts {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        let mut key = [0u8; 40];
        for (value, count) in &self.0 {
            m.serialize_entry(int_text((*value).into(), &mut key), count)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Counts {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Counts;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of integers (as text) to counts")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Counts, A::Error> {
                let mut out = Vec::with_capacity(a.size_hint().unwrap_or(0));
                while let Some((k, v)) = a.next_entry::<std::borrow::Cow<'de, str>, u64>()? {
                    let value = k.parse().map_err(serde::de::Error::custom)?;
                    out.push((value, v));
                }
                Ok(Counts(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// One direction (client_to_server or server_to_client).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DirectionRecord {
    pub payload_bytes: i64,
    pub data_segments: u64,
    pub max_segment: i64,
    pub mss: Option<u16>,
    pub window_scale: Option<u8>,
    pub window_scale_known: bool,
    pub window_scale_lower_bound: Option<u8>,
    /// The frame of this side's SYN when the snapshot length cut its TCP options (absent
    /// otherwise): the MSS and window scale it offered are unknown.
    pub syn_options_cut_frame: Maybe<u64>,
    pub retransmitted_segments: u64,
    pub retransmitted_bytes: i64,
    pub out_of_order_segments: u64,
    pub gaps: u64,
    pub missing_bytes: i64,
    pub truncated_bytes: i64,
    pub zero_window_events: u64,
    pub window_updates: u64,
    pub segments_above_mss: u64,
    pub keepalives: u64,
    /// What the transfer analysis measured (absent without it).
    pub transfer: Inline<TransferRecord>,
    /// Of the client -> server direction only (the engine's first), when the handshake
    /// showed them: SYN -> SYN-ACK when the first data came, and each half of the handshake.
    pub handshake_rtt_ms: Maybe<f64>,
    pub handshake_ms: Maybe<HandshakeMs>,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct HandshakeMs {
    /// The round trip seen from the client's side of the capture point.
    pub syn_to_synack: f64,
    /// The one on the server's side.
    pub synack_to_ack: f64,
}

impl DirectionRecord {
    pub fn of(d: &tcp::DirectionFacts) -> Self {
        DirectionRecord {
            payload_bytes: d.payload_bytes,
            data_segments: d.data_segments,
            max_segment: d.max_segment,
            mss: d.mss,
            window_scale: d.window_scale,
            window_scale_known: d.window_scale_known,
            window_scale_lower_bound: d.window_scale_lower_bound,
            syn_options_cut_frame: Maybe(d.syn_cut_frame),
            retransmitted_segments: d.retransmitted_segments,
            retransmitted_bytes: d.retransmitted_bytes,
            out_of_order_segments: d.out_of_order_segments,
            gaps: d.gaps,
            missing_bytes: d.missing_bytes,
            truncated_bytes: d.truncated_bytes,
            zero_window_events: d.zero_window_events,
            window_updates: d.window_updates,
            segments_above_mss: d.segments_above_mss,
            keepalives: d.keepalives,
            transfer: Inline(None),
            handshake_rtt_ms: Maybe(None),
            handshake_ms: Maybe(None),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TransferRecord {
    pub acks: AcksRecord,
    /// Python's words: the ACK cadence.
    pub pattern: String,
    pub segment_size_median: Option<i64>,
    pub segment_size_histogram: Counts,
    pub window: WindowRecord,
    pub in_flight: InFlightRecord,
    pub flights: FlightsRecord,
    pub rtt_ms: Option<RttRecord>,
    pub goodput_bps: Option<i64>,
    pub best_100ms: Option<BinRecord>,
    pub worst_100ms: Option<BinRecord>,
    pub idle_periods: IdleRecord,
    pub writes: WritesRecord,
    pub limits: LimitsRecord,
    /// Python's judgement: what limited the transfer.
    pub verdict: Verdict,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AcksRecord {
    pub count: u64,
    pub bytes_acked_median: Option<i64>,
    pub bytes_acked_histogram: Counts,
    pub segments_per_ack_median: Option<i64>,
    pub causes: CausesRecord,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CausesRecord {
    pub every_second_segment: u64,
    pub window_update: u64,
    pub quick_ack: u64,
    pub delayed_timer: u64,
    pub duplicate: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WindowRecord {
    pub min: Option<i64>,
    pub max: Option<i64>,
    pub scaled: bool,
    pub scale_lower_bound: Option<u8>,
    pub zero_window_periods: u64,
    pub zero_window_total_s: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct InFlightRecord {
    pub max: i64,
    pub median: Option<i64>,
    pub max_frame: u64,
    pub max_ratio_to_window: Option<f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FlightsRecord {
    pub count: u64,
    pub bytes_median: Option<i64>,
    pub segments_median: Option<i64>,
    pub end_reasons: EndReasonsRecord,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EndReasonsRecord {
    pub window_full: u64,
    pub ack_arrived: u64,
    pub cwnd_wait: u64,
    pub sender_idle: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RttRecord {
    pub samples: u64,
    pub min: f64,
    pub median: Option<f64>,
    pub p95: Option<f64>,
}

/// A 100 ms bin: its rate and start.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BinRecord {
    pub bps: i64,
    pub start_s: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IdleRecord {
    pub count: u64,
    pub total_s: f64,
    pub first: Vec<IdlePeriodRecord>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IdlePeriodRecord {
    pub seconds: f64,
    pub from_frame: u64,
    pub to_frame: u64,
    /// Python's words: what the sender waited for.
    pub waiting_for: String,
    pub start_s: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WritesRecord {
    pub count: u64,
    pub size_p10_by_bytes: Option<i64>,
    pub size_median_by_bytes: Option<i64>,
    pub size_p90_by_bytes: Option<i64>,
    pub sizes_by_bytes: Counts,
    pub unended_bytes: i64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LimitsRecord {
    pub transfer_s: f64,
    pub seconds: ByLimit<f64>,
    pub sender_idle_s: f64,
    pub ack_tail_s: f64,
    pub after_loss_s: f64,
    pub low_window_s: f64,
    pub turns: u64,
    pub turns_s: f64,
    pub recoveries: u64,
    pub longest: ByLimit<Option<RunRecord>>,
}

/// A run of time under one limit.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunRecord {
    pub from_frame: u64,
    pub to_frame: u64,
    pub seconds: f64,
}

fn ms(us: Option<i64>) -> Option<f64> {
    us.map(|us| round_to(us as f64 / 1000.0, 3))
}

/// Fewer data segments than this, or a span shorter than MIN_SPAN_S, has no rate: the first
/// segment's bytes over a gap between two writes would be read as one.
pub const RATE_MIN_SEGMENTS: u64 = 4;
pub const RATE_MIN_SPAN_S: f64 = 100e-6;

/// `nbytes` carried in `segments` over `span_s` as bits per second; None when too small to
/// measure.
pub fn bits_per_second(nbytes: i64, span_s: f64, segments: u64) -> Option<i64> {
    if segments < RATE_MIN_SEGMENTS || span_s < RATE_MIN_SPAN_S {
        return None;
    }
    Some(round_int(nbytes as f64 * 8.0 / span_s))
}

/// The 100 ms bins say something only over a span of two of them or more.
const BINS_MIN_SPAN_S: f64 = 0.2;

impl TransferRecord {
    /// Direction facts in the report's units; times from `start` (the capture's first).
    pub fn of(f: &transfer::DirectionFacts, start: f64) -> Self {
        let (mut rate, mut best, mut worst) = (None, None, None);
        if let Some(first) = f.first_ts {
            let span = f.last_ts - first;
            rate = bits_per_second(f.data_bytes, span, f.segments);
            if f.goodput.bins > 0 && span >= BINS_MIN_SPAN_S {
                let bin = |b: Option<transfer::BinFacts>| {
                    b.map(|b| BinRecord {
                        bps: b.bytes * 80,
                        start_s: round_to(first + b.index as f64 / 10.0 - start, 6),
                    })
                };
                best = bin(f.goodput.best);
                worst = bin(f.goodput.worst);
            }
        }
        let r = &f.rtt;
        let rtt_ms = (r.samples > 0).then(|| RttRecord {
            samples: r.samples,
            min: round_to(r.min_s.unwrap_or(0.0) * 1e3, 3),
            median: ms(r.median_us),
            p95: ms(r.p95_us),
        });
        let (acks, w, inf, fl, idle, wr) = (
            &f.acks,
            &f.window,
            &f.in_flight,
            &f.flights,
            &f.idle_periods,
            &f.writes,
        );
        TransferRecord {
            acks: AcksRecord {
                count: acks.count,
                bytes_acked_median: acks.bytes_acked.median,
                bytes_acked_histogram: Counts(acks.bytes_acked.top.clone()),
                segments_per_ack_median: acks.segments_per_ack.median,
                causes: CausesRecord {
                    every_second_segment: acks.causes.every_second_segment,
                    window_update: acks.causes.window_update,
                    quick_ack: acks.causes.quick_ack,
                    delayed_timer: acks.causes.delayed_timer,
                    duplicate: acks.causes.duplicate,
                },
            },
            pattern: String::new(),
            segment_size_median: f.segment_size.median,
            segment_size_histogram: Counts(f.segment_size.top.clone()),
            window: WindowRecord {
                min: w.min,
                max: w.max,
                scaled: w.scaled,
                scale_lower_bound: if w.scaled { None } else { w.scale_lower_bound },
                zero_window_periods: w.zero_window_periods,
                zero_window_total_s: round_to(w.zero_window_total_s, 6),
            },
            in_flight: InFlightRecord {
                max: inf.max,
                median: inf.median,
                max_frame: inf.max_frame,
                max_ratio_to_window: w.scaled.then(|| round_to(inf.max_ratio_to_window, 3)),
            },
            flights: FlightsRecord {
                count: fl.count,
                bytes_median: fl.bytes_median,
                segments_median: fl.segments_median,
                end_reasons: EndReasonsRecord {
                    window_full: fl.end_reasons.window_full,
                    ack_arrived: fl.end_reasons.ack_arrived,
                    cwnd_wait: fl.end_reasons.cwnd_wait,
                    sender_idle: fl.end_reasons.sender_idle,
                },
            },
            rtt_ms,
            goodput_bps: rate,
            best_100ms: best,
            worst_100ms: worst,
            idle_periods: IdleRecord {
                count: idle.count,
                total_s: round_to(idle.total_s, 6),
                first: idle
                    .first
                    .iter()
                    .map(|p| IdlePeriodRecord {
                        seconds: round_to(p.seconds, 6),
                        from_frame: p.from_frame,
                        to_frame: p.to_frame,
                        waiting_for: String::new(),
                        start_s: round_to(p.start_ts - start, 6),
                    })
                    .collect(),
            },
            writes: WritesRecord {
                count: wr.count,
                size_p10_by_bytes: wr.p10_by_bytes,
                size_median_by_bytes: wr.median_by_bytes,
                size_p90_by_bytes: wr.p90_by_bytes,
                sizes_by_bytes: Counts(wr.top_by_bytes.clone()),
                unended_bytes: wr.unended_bytes,
            },
            limits: LimitsRecord::of(&f.limits),
            verdict: Verdict::default(),
        }
    }
}

impl LimitsRecord {
    fn of(l: &LimitFacts) -> Self {
        let s = &l.seconds;
        let run = |r: &Option<transfer::Stretch>| {
            r.map(|r| RunRecord {
                from_frame: r.from_frame,
                to_frame: r.to_frame,
                seconds: round_to(r.seconds, 6),
            })
        };
        let lo = &l.longest;
        LimitsRecord {
            transfer_s: round_to(l.transfer_s, 6),
            seconds: ByLimit {
                receiver_window: round_to(s.receiver_window, 6),
                network: round_to(s.network, 6),
                loss: round_to(s.loss, 6),
                latency: round_to(s.latency, 6),
                sender: round_to(s.sender, 6),
            },
            sender_idle_s: round_to(l.sender_idle_s, 6),
            ack_tail_s: round_to(l.ack_tail_s, 6),
            after_loss_s: round_to(l.after_loss_s, 6),
            low_window_s: round_to(l.low_window_s, 6),
            turns: l.turns,
            turns_s: round_to(l.turns_s, 6),
            recoveries: l.recoveries,
            longest: ByLimit {
                receiver_window: run(&lo.receiver_window),
                network: run(&lo.network),
                loss: run(&lo.loss),
                latency: run(&lo.latency),
                sender: run(&lo.sender),
            },
        }
    }
}
