//! One direction of a connection: the sender's stream and what the capture saw of it.
//!
//! Sequence numbers are kept relative to the stream's first byte (SYN excluded) and unwrapped
//! to i64, so 32-bit wraparound is handled once, in `unwrap`, and nowhere else.

use std::collections::BTreeMap;

use super::facts::DirectionFacts;
use super::observe::DirectionInfo;
use super::options::SynOptions;

// Reassembly bounds per direction: beyond these, the oldest hole is declared a capture gap
// rather than buffering without limit (a stream whose hole never fills must not eat memory).
pub const MAX_BUFFERED_BYTES: usize = 4 << 20;
pub const MAX_BUFFERED_SEGMENTS: usize = 2048;
/// Open holes remembered for classifying late arrivals (out-of-order vs retransmission).
pub const MAX_HOLES: usize = 64;
/// tshark's default: a hole filled within this time of opening is reordering, not loss.
pub const OOO_THRESHOLD_S: f64 = 0.003;
/// Frames kept per evidence list.
pub const MAX_EVIDENCE: usize = 20;

const MASK32: i64 = 0xFFFF_FFFF;
const HALF32: i64 = 0x8000_0000;

/// A copy of bytes fed already that the receiver had not acknowledged, until the receiver
/// says whether it took this copy or had the first: [lo, hi) the bytes from the copy's first
/// to the last fed then, the copy's frame, time and TSval.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Resend {
    pub lo: i64,
    pub hi: i64,
    pub frame: u64,
    pub ts: f64,
    pub tsval: Option<u32>,
}

/// An out-of-order segment waiting for the stream to reach it.
#[derive(Debug)]
pub(crate) struct Segment {
    pub end: i64,
    /// The captured bytes (fewer than end - start when the snapshot length cut them).
    pub payload: Vec<u8>,
    pub frame: u64,
    pub ts: f64,
}

#[derive(Debug)]
pub(crate) struct Direction {
    /// Raw 32-bit sequence number of relative byte 0; -1 until known.
    pub base: i64,
    /// Highest relative end seen (exclusive).
    pub high: i64,
    /// Next relative byte to hand to the stream consumer.
    pub next: i64,
    pub high_ts: f64,
    pub isn_seen: bool,
    pub syn: Option<SynOptions>,
    /// The frame of this side's (last) SYN when the snapshot length cut its options.
    pub syn_cut_frame: Option<u64>,
    /// Relative offset the FIN occupies.
    pub fin_at: Option<i64>,
    pub rst: bool,
    /// Out-of-order segments waiting for `next`, by start.
    pub buffer: BTreeMap<i64, Segment>,
    pub buffered_bytes: usize,
    /// Never-seen ranges [start, end) below `high`, disjoint.
    pub holes: Vec<(i64, i64)>,
    pub holes_forgotten: u64,
    /// A resent copy the receiver has not answered yet.
    pub(crate) resend: Option<Resend>,
    pub bound_gaps: u64,
    /// Highest relative ack the peer sent for this stream.
    pub max_acked: i64,
    pub payload_bytes: i64,
    pub data_segments: u64,
    pub max_segment: i64,
    pub retrans_segments: u64,
    pub retrans_bytes: i64,
    pub ooo_segments: u64,
    pub gaps: u64,
    pub missing_bytes: i64,
    pub truncated_bytes: i64,
    pub truncated_segments: u64,
    pub zero_window_events: u64,
    pub window_updates: u64,
    pub keepalives: u64,
    pub last_seq: i64,
    pub last_ack: i64,
    pub last_win: i64,
    /// Shift applied to this side's windows (0 while unknown).
    pub wscale: u8,
    pub wscale_known: bool,
    /// Smallest window scale consistent with the bytes seen in flight.
    pub wscale_lb: u8,
    pub ev_retrans: Vec<u64>,
    pub ev_ooo: Vec<u64>,
    pub ev_gap: Vec<u64>,
    pub ev_zero: Vec<u64>,
    pub ev_trunc: Vec<u64>,
}

impl Default for Direction {
    fn default() -> Self {
        Direction {
            base: -1,
            high: 0,
            next: 0,
            high_ts: 0.0,
            isn_seen: false,
            syn: None,
            syn_cut_frame: None,
            fin_at: None,
            rst: false,
            buffer: BTreeMap::new(),
            buffered_bytes: 0,
            holes: Vec::new(),
            holes_forgotten: 0,
            resend: None,
            bound_gaps: 0,
            max_acked: -1,
            payload_bytes: 0,
            data_segments: 0,
            max_segment: 0,
            retrans_segments: 0,
            retrans_bytes: 0,
            ooo_segments: 0,
            gaps: 0,
            missing_bytes: 0,
            truncated_bytes: 0,
            truncated_segments: 0,
            zero_window_events: 0,
            window_updates: 0,
            keepalives: 0,
            last_seq: -1,
            last_ack: -1,
            last_win: -1,
            wscale: 0,
            wscale_known: false,
            wscale_lb: 0,
            ev_retrans: Vec::new(),
            ev_ooo: Vec::new(),
            ev_gap: Vec::new(),
            ev_zero: Vec::new(),
            ev_trunc: Vec::new(),
        }
    }
}

/// Keep a frame as evidence, the first MAX_EVIDENCE only.
pub(crate) fn note(evidence: &mut Vec<u64>, frame: u64) {
    if evidence.len() < MAX_EVIDENCE {
        evidence.push(frame);
    }
}

/// The shift side `mine` applies to its windows, and whether the capture proves it.
pub(crate) fn window_scale(
    mine: Option<SynOptions>,
    theirs: Option<SynOptions>,
) -> (Option<u8>, bool) {
    // a SYN whose options were cut before a window scale says nothing of it
    let unknown = |s: Option<SynOptions>| s.is_some_and(|s| s.cut && s.window_scale.is_none());
    if unknown(mine) || unknown(theirs) {
        return (None, false);
    }
    match (mine, theirs) {
        (Some(a), Some(b)) => match (a.window_scale, b.window_scale) {
            (Some(s), Some(_)) => (Some(s), true),
            _ => (Some(0), true), // scaling needs both SYNs to offer it
        },
        // Only one SYN seen: one without the option proves scaling is off both ways.
        (Some(one), None) | (None, Some(one)) if one.window_scale.is_none() => (Some(0), true),
        _ => (None, false),
    }
}

impl Direction {
    /// Relative offset of raw sequence number `raw`: the 2**32 cycle nearest `high`.
    pub fn unwrap(&self, raw: u32) -> i64 {
        let high = self.high;
        let delta = i64::from(raw).wrapping_sub(self.base).wrapping_sub(high) & MASK32;
        let back = if delta >= HALF32 { 1i64 << 32 } else { 0 };
        high.wrapping_add(delta).wrapping_sub(back)
    }

    pub fn update_scale(&mut self, peer: Option<SynOptions>) {
        let (scale, known) = window_scale(self.syn, peer);
        self.wscale = scale.unwrap_or(0);
        self.wscale_known = known;
    }

    pub fn info(&self, peer: &Direction) -> DirectionInfo {
        let (window_scale, known) = window_scale(self.syn, peer.syn);
        DirectionInfo {
            mss: self.syn.and_then(|s| s.mss).map(u32::from),
            window_scale,
            window_scale_known: known,
            window_scale_lower_bound: if known { None } else { Some(self.wscale_lb) },
        }
    }

    pub fn facts(&self, peer: &Direction) -> DirectionFacts {
        let info = self.info(peer);
        DirectionFacts {
            payload_bytes: self.payload_bytes,
            data_segments: self.data_segments,
            max_segment: self.max_segment,
            mss: self.syn.and_then(|s| s.mss),
            window_scale: info.window_scale,
            window_scale_known: info.window_scale_known,
            window_scale_lower_bound: info.window_scale_lower_bound,
            retransmitted_segments: self.retrans_segments,
            retransmitted_bytes: self.retrans_bytes,
            out_of_order_segments: self.ooo_segments,
            gaps: self.gaps,
            missing_bytes: self.missing_bytes,
            truncated_bytes: self.truncated_bytes,
            zero_window_events: self.zero_window_events,
            window_updates: self.window_updates,
            // the reference never counts these (captured segments above the MSS show in
            // max_segment against the peer's mss instead)
            segments_above_mss: 0,
            keepalives: self.keepalives,
            truncated_segments: self.truncated_segments,
            holes_forgotten: self.holes_forgotten,
            bound_gaps: self.bound_gaps,
            isn_seen: self.isn_seen,
            syn: self.syn,
            syn_cut_frame: self.syn_cut_frame,
            fin_seen: self.fin_at.is_some(),
            rst_seen: self.rst,
            ev_retrans: self.ev_retrans.clone(),
            ev_ooo: self.ev_ooo.clone(),
            ev_gap: self.ev_gap.clone(),
            ev_zero: self.ev_zero.clone(),
            ev_trunc: self.ev_trunc.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(base: i64, high: i64) -> Direction {
        Direction {
            base,
            high,
            ..Direction::default()
        }
    }

    #[test]
    fn unwrap_takes_the_cycle_nearest_high() {
        assert_eq!(at(1000, 0).unwrap(1100), 100);
        assert_eq!(at(1000, 0).unwrap(900), -100);
        // across the wrap: base near the top, raw past zero
        assert_eq!(at(0xFFFF_FF00, 0).unwrap(0x10), 0x110);
        assert_eq!(at(0xFFFF_FF00, 0x110).unwrap(0xFFFF_FF80), 0x80);
        // a stream past 4 GiB keeps counting
        assert_eq!(at(0, 0xFFFF_FFF0).unwrap(0x20), 0x1_0000_0020);
        assert_eq!(at(5, 1 << 40).unwrap(5), 1 << 40);
    }

    #[test]
    fn window_scale_needs_both_syns_or_a_syn_without_it() {
        let with = |s| {
            Some(SynOptions {
                window_scale: Some(s),
                ..SynOptions::default()
            })
        };
        let without = Some(SynOptions::default());
        assert_eq!(window_scale(with(7), with(9)), (Some(7), true));
        assert_eq!(window_scale(with(7), without), (Some(0), true));
        assert_eq!(window_scale(without, with(7)), (Some(0), true));
        assert_eq!(window_scale(with(7), None), (None, false));
        assert_eq!(window_scale(None, with(7)), (None, false));
        assert_eq!(window_scale(None, without), (Some(0), true));
        assert_eq!(window_scale(None, None), (None, false));
        // a SYN cut by the snapshot length inside its options: no proof either way
        let cut = Some(SynOptions {
            cut: true,
            ..SynOptions::default()
        });
        assert_eq!(window_scale(cut, with(7)), (None, false));
        assert_eq!(window_scale(with(7), cut), (None, false));
        assert_eq!(window_scale(cut, None), (None, false));
        let read_before_the_cut = Some(SynOptions {
            cut: true,
            window_scale: Some(7),
            ..SynOptions::default()
        });
        assert_eq!(window_scale(read_before_the_cut, with(9)), (Some(7), true));
    }
}
