//! Transfer dynamics of one connection, per direction of data, from the engine's packet
//! stream (ported from transfer/analyzer.py; the measuring half of it: verdicts and words
//! stay in Python).
//!
//! Definitions (the report's words mean exactly this):
//! - An ACK "advances" when it acknowledges bytes of the direction's data not acknowledged
//!   before; bytes_acked is that difference, segments_per_ack the data segments it newly
//!   covers.
//! - ACK causes: every_second_segment (covers 2+ segments or more than the largest segment:
//!   Linux ACKs once more than one receive-MSS is unacknowledged); delayed_timer (covers one
//!   segment, sent >= 40 ms after it: the delayed-ACK timer fired); quick_ack (covers one
//!   segment, sooner); window_update (same ack, larger window, no data); duplicate (same ack,
//!   same window, no data, data outstanding).
//! - A flight is the data sent between two advancing ACKs. It ended because the window was
//!   full (in flight reached the receiver's window, or a zero window), because an ACK arrived
//!   while the sender was still sending (ack_arrived), because the sender waited for that ACK
//!   with the window open (cwnd_wait), or because the sender had nothing to send
//!   (sender_idle).
//! - In flight: highest byte sent minus highest byte acknowledged, at the capture point
//!   (tshark's tcp.analysis.bytes_in_flight for new data).
//! - Writes: the new bytes up to each segment with PSH (Linux ends each send() with it).
//! - Limits: where the direction's time went (limits.rs).
//!
//! Memory is bounded: histograms and capped queues, nothing per packet.

mod analyzer;
mod exact;
mod facts;
mod flight;
mod flow;
mod limits;

pub use analyzer::TransferAnalyzer;
pub use facts::{
    window_bytes, AckFacts, BinFacts, Causes, DirectionFacts, EndReasons, FlightFacts,
    GoodputFacts, HistogramFacts, IdleFacts, IdlePeriod, InFlightFacts, RttFacts, TransferFacts,
    WindowFacts, WriteFacts,
};
pub use limits::{ByLimit, LimitFacts, Stretch, LIMITS};

/// Linux's minimum delayed-ACK timeout.
pub const DELAYED_ACK_S: f64 = 0.040;
/// A sender pausing less than this between segments was not waiting.
pub const CONTINUOUS_S: f64 = 0.001;
/// A sender resuming this soon after an ACK was waiting for it.
pub const ACK_CLOCK_S: f64 = 0.0005;
/// Pauses longer than this are idle periods.
pub const IDLE_S: f64 = 0.010;
/// Segments remembered for RTT and segments-per-ACK.
pub const MAX_OUTSTANDING: usize = 4096;
/// Idle periods kept with their frames (all are counted).
pub const MAX_IDLE_KEPT: usize = 20;
/// 100 ms goodput bins: over five hours.
pub const MAX_BINS: i64 = 200_000;
/// Frames kept per kind of evidence (zero windows, full windows, each flight end reason).
pub const MAX_FRAMES_KEPT: usize = 20;
/// The most frequent values listed per histogram.
pub const TOP_K: usize = 12;

#[cfg(test)]
mod tests;
