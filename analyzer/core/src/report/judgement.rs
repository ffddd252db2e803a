//! What Python reads to judge a connection and word it: the few numbers each of its rules
//! reads (the verdict's seconds per limit, the findings' counters and frames, the ACK
//! pattern's modes, the capture point's handshake), not the whole record. Directions are in
//! the report's order (client_to_server first).

use serde::Serialize;

use super::connection::ConnectionRecord;
use super::conversation::QueryRecord;
use super::direction::HandshakeMs;
use super::numbers::round_to;
use super::round_trips::RoundTrips;
use crate::pass::ConnectionReport;
use crate::pgwire::facts::{Event, StopReason};
use crate::relay::legs::LegExtras;
use crate::tcp;
use crate::transfer::{self, window_bytes, LimitFacts};

#[derive(Clone, Debug, Serialize)]
pub struct Judgement {
    pub id: String,
    /// The report swapped the engine's client and server (the wire protocol corrected the
    /// engine's guess by port): the engine's first direction is the report's server_to_client.
    pub swapped: bool,
    /// Both ends on loopback addresses.
    pub loopback: bool,
    /// The handshake's halves, as the report gives them.
    pub handshake_ms: Option<HandshakeMs>,
    pub directions: JudgedDirections,
    pub postgres: Option<PgJudgement>,
    /// The round trips' numbers, for their summary and finding.
    pub round_trips: Option<RoundTrips>,
    /// The frames of the first and the last query sent.
    pub query_frames: Option<(u64, u64)>,
}

#[derive(Clone, Debug, Serialize)]
pub struct JudgedDirections {
    pub client_to_server: DirectionJudgement,
    pub server_to_client: DirectionJudgement,
}

/// A direction's engine counters (what the findings read) and its transfer. Evidence frames
/// are None where there are none (most connections).
#[derive(Clone, Debug, Serialize)]
pub struct DirectionJudgement {
    pub payload_bytes: i64,
    pub max_segment: i64,
    /// From this side's SYN.
    pub mss: Option<u16>,
    pub segments_above_mss: u64,
    pub window_scale_known: bool,
    pub window_scale_lower_bound: Option<u8>,
    pub syn_options_cut_frame: Option<u64>,
    pub gaps: u64,
    pub missing_bytes: i64,
    pub bound_gaps: u64,
    pub holes_forgotten: u64,
    pub retransmitted_segments: u64,
    pub retransmitted_bytes: i64,
    pub out_of_order_segments: u64,
    pub truncated_bytes: i64,
    pub truncated_segments: u64,
    pub zero_window_events: u64,
    pub ev_gap: Option<Vec<u64>>,
    pub ev_retrans: Option<Vec<u64>>,
    pub ev_ooo: Option<Vec<u64>>,
    pub ev_trunc: Option<Vec<u64>>,
    pub ev_zero: Option<Vec<u64>>,
    pub transfer: Option<TransferJudgement>,
}

/// What the verdict, the ACK pattern and the transfer's findings read.
#[derive(Clone, Debug, Serialize)]
pub struct TransferJudgement {
    pub data_bytes: i64,
    pub segments: u64,
    pub retransmitted_segments: u64,
    /// First data segment to last (0 without data).
    pub span_s: f64,
    pub acks: AckJudgement,
    pub window: WindowJudgement,
    /// The report's RTT median (ms), when there were samples.
    pub rtt_median_ms: Option<f64>,
    /// The least RTT sample (ms): the path's own round trip, as near as the capture shows.
    pub rtt_min_ms: Option<f64>,
    pub idle: IdleJudgement,
    /// Where the transfer's time went: for a transfer the judge judges (Judged: as many bytes
    /// and segments as it declares it needs), else None.
    pub limits: Option<LimitFacts>,
}

/// The least a transfer carries for the judge to read its limits (it words the rest as too
/// little to judge, from the counts alone).
#[derive(Clone, Copy, Debug, Default)]
pub struct Judged {
    pub min_bytes: i64,
    pub min_segments: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct AckJudgement {
    pub count: u64,
    /// The most frequent segments per ACK and bytes per ACK, and how many ACKs had those
    /// bytes.
    pub segments_mode: Option<i64>,
    pub bytes_mode: Option<i64>,
    pub bytes_mode_count: u64,
    /// The median ACK's segments and bytes: what the pattern names when no size is most ACKs.
    pub segments_median: Option<i64>,
    pub bytes_median: Option<i64>,
    pub delayed_timer: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct WindowJudgement {
    /// The largest window advertised, in bytes; where the scale is unknown (no handshake in
    /// the capture), shifted by the smallest scale the bytes in flight allow: at least this.
    pub max: Option<i64>,
    pub scaled: bool,
    pub zero_window_periods: u64,
    pub zero_window_total_s: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct IdleJudgement {
    /// Idle time with data unacknowledged or the window shut.
    pub waiting_s: f64,
    /// The idle periods listed in the record, in order.
    pub periods: Vec<IdleJudged>,
}

#[derive(Clone, Debug, Serialize)]
pub struct IdleJudged {
    pub zero_window: bool,
    pub outstanding: i64,
    pub to_frame: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct PgJudgement {
    pub events: Vec<Event>,
    pub decode_stopped: Option<StopReason>,
    /// Requests and responses the receiver took only from a later copy; None when none.
    pub late: Option<LateCopies>,
}

/// Queries whose request or last response message the receiver took only from a later copy
/// (the one the capture saw was lost past it): how many, how much later in all, the longest.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LateCopies {
    pub requests: u64,
    pub responses: u64,
    /// Seconds the copies taken came after the ones seen, summed.
    pub added_s: f64,
    pub longest: LateCopy,
    /// The frames of the copies taken (the first MAX_LATE_FRAMES).
    pub frames: Vec<u64>,
}

/// One late copy: how much later, of which query, the frame seen and the frame taken.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LateCopy {
    pub seconds: f64,
    pub query_index: usize,
    pub seen_frame: u64,
    pub taken_frame: u64,
}

const MAX_LATE_FRAMES: usize = 10;

impl LateCopies {
    fn of(queries: &[QueryRecord]) -> Option<LateCopies> {
        let mut late = LateCopies::default();
        for (i, q) in queries.iter().enumerate() {
            let Some(d) = q.delivered.0.as_deref() else {
                continue;
            };
            let request = (d.sent_s - q.sent_s, q.sent_frame, d.sent_frame);
            let response = match (q.last_response_s, d.last_response_s) {
                (Some(seen), Some(taken)) => (
                    taken - seen,
                    q.last_frame.unwrap_or(0),
                    d.last_frame.unwrap_or(0),
                ),
                _ => (0.0, 0, 0),
            };
            for (n, (seconds, seen_frame, taken_frame)) in [
                (&mut late.requests, request),
                (&mut late.responses, response),
            ] {
                if seconds <= 0.0 {
                    continue;
                }
                *n += 1;
                late.added_s += seconds;
                if late.frames.len() < MAX_LATE_FRAMES {
                    late.frames.push(taken_frame);
                }
                if seconds > late.longest.seconds {
                    late.longest = LateCopy {
                        seconds: round_to(seconds, 6),
                        query_index: i,
                        seen_frame,
                        taken_frame,
                    };
                }
            }
        }
        late.added_s = round_to(late.added_s, 6);
        (late.requests + late.responses > 0).then_some(late)
    }
}

fn frames(v: &[u64]) -> Option<Vec<u64>> {
    (!v.is_empty()).then(|| v.to_vec())
}

fn direction(
    d: &tcp::DirectionFacts,
    t: Option<&transfer::DirectionFacts>,
    judged: Judged,
) -> DirectionJudgement {
    DirectionJudgement {
        payload_bytes: d.payload_bytes,
        max_segment: d.max_segment,
        mss: d.mss,
        segments_above_mss: d.segments_above_mss,
        window_scale_known: d.window_scale_known,
        window_scale_lower_bound: d.window_scale_lower_bound,
        syn_options_cut_frame: d.syn_cut_frame,
        gaps: d.gaps,
        missing_bytes: d.missing_bytes,
        bound_gaps: d.bound_gaps,
        holes_forgotten: d.holes_forgotten,
        retransmitted_segments: d.retransmitted_segments,
        retransmitted_bytes: d.retransmitted_bytes,
        out_of_order_segments: d.out_of_order_segments,
        truncated_bytes: d.truncated_bytes,
        truncated_segments: d.truncated_segments,
        zero_window_events: d.zero_window_events,
        ev_gap: frames(&d.ev_gap),
        ev_retrans: frames(&d.ev_retrans),
        ev_ooo: frames(&d.ev_ooo),
        ev_trunc: frames(&d.ev_trunc),
        ev_zero: frames(&d.ev_zero),
        transfer: t.map(|t| transfer_judgement(t, judged)),
    }
}

fn transfer_judgement(f: &transfer::DirectionFacts, judged: Judged) -> TransferJudgement {
    let acks = &f.acks;
    TransferJudgement {
        data_bytes: f.data_bytes,
        segments: f.segments,
        retransmitted_segments: f.retransmitted_segments,
        span_s: f.first_ts.map_or(0.0, |first| f.last_ts - first),
        acks: AckJudgement {
            count: acks.count,
            segments_mode: acks.segments_per_ack.mode,
            bytes_mode: acks.bytes_acked.mode,
            bytes_mode_count: acks.bytes_acked.mode_count,
            segments_median: acks.segments_per_ack.median,
            bytes_median: acks.bytes_acked.median,
            delayed_timer: acks.causes.delayed_timer,
        },
        window: WindowJudgement {
            max: window_bytes(f.window.max, f.window.scaled, f.window.scale_lower_bound),
            scaled: f.window.scaled,
            zero_window_periods: f.window.zero_window_periods,
            zero_window_total_s: f.window.zero_window_total_s,
        },
        rtt_median_ms: None,
        rtt_min_ms: None,
        idle: IdleJudgement {
            waiting_s: f.idle_periods.waiting_s,
            periods: f
                .idle_periods
                .first
                .iter()
                .map(|p| IdleJudged {
                    zero_window: p.zero_window,
                    outstanding: p.outstanding,
                    to_frame: p.to_frame,
                })
                .collect(),
        },
        limits: (f.data_bytes >= judged.min_bytes && f.segments >= judged.min_segments)
            .then(|| f.limits.clone()),
    }
}

fn loopback(ip: &str) -> bool {
    ip.starts_with("127.") || ip == "::1"
}

/// A retired connection's judgement, its record (the facts move into it), and what only the
/// relay stage reads (each bulk response's bytes over time, when the client's window was
/// closed).
pub fn judge_and_record(
    mut report: ConnectionReport,
    start: f64,
    judged: Judged,
) -> (Judgement, ConnectionRecord, LegExtras) {
    let (swapped, _) = super::connection::settle_roles(&report.tcp, report.frontend());
    let [tcp0, tcp1] = &report.tcp.directions;
    let (tr0, tr1) = match &report.transfer {
        Some(t) => {
            let [a, b] = &t.directions;
            (Some(a), Some(b))
        }
        None => (None, None),
    };
    let (e0, e1) = (direction(tcp0, tr0, judged), direction(tcp1, tr1, judged));
    let extras = LegExtras::take(&mut report, swapped);
    let mut postgres = report.postgres.as_ref().map(|p| PgJudgement {
        events: p.events.clone(),
        decode_stopped: p.decode_stopped.as_ref().map(|s| s.reason.clone()),
        late: None,
    });
    let record = ConnectionRecord::of(report, start);
    let (mut c2s, mut s2c) = if swapped { (e1, e0) } else { (e0, e1) };
    for (j, d) in [
        (&mut c2s, &record.directions.client_to_server),
        (&mut s2c, &record.directions.server_to_client),
    ] {
        if let Some(t) = j.transfer.as_mut() {
            let rtt = d.transfer.0.as_ref().and_then(|t| t.rtt_ms.as_ref());
            t.rtt_median_ms = rtt.and_then(|r| r.median);
            t.rtt_min_ms = rtt.map(|r| r.min);
        }
    }
    let queries = record.postgres.0.as_ref().map(|p| &p.queries);
    if let (Some(pg), Some(queries)) = (postgres.as_mut(), queries) {
        pg.late = LateCopies::of(queries);
    }
    let sent: Vec<u64> = queries
        .into_iter()
        .flatten()
        .map(|q| q.sent_frame)
        .filter(|&f| f != 0)
        .collect();
    let judgement = Judgement {
        id: record.id.clone(),
        swapped,
        loopback: loopback(&record.client.ip) && loopback(&record.server.ip),
        handshake_ms: record.directions.client_to_server.handshake_ms.0,
        directions: JudgedDirections {
            client_to_server: c2s,
            server_to_client: s2c,
        },
        postgres,
        round_trips: record.round_trips.0.clone(),
        query_frames: sent.first().copied().zip(sent.last().copied()),
    };
    (judgement, record, extras)
}

#[cfg(test)]
mod tests {
    use super::loopback;

    #[test]
    fn loopback_as_pythons_ipaddress_says() {
        // ipaddress.ip_address(ip).is_loopback, for the report's address strings
        for (ip, is) in [
            ("127.0.0.1", true),
            ("127.255.3.4", true),
            ("::1", true),
            ("10.0.0.1", false),
            ("128.0.0.1", false),
            ("::ffff:127.0.0.1", false),
            ("fe80::1", false),
            ("2001:db8::127", false),
        ] {
            assert_eq!(loopback(ip), is, "{ip}");
        }
    }
}
