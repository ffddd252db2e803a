//! One direction of data: its sender's segments and its receiver's ACKs and windows.
//!
//! Arithmetic on offsets wraps instead of overflowing (the reference's ints are unbounded;
//! only offsets past 2**63, which no engine produces, differ).

use std::collections::VecDeque;

use super::exact::{int_div, trunc};
use super::facts::IdlePeriod;
use super::flight::Flight;
use super::limits::{Chrono, Event};
use super::{
    ACK_CLOCK_S, CONTINUOUS_S, DELAYED_ACK_S, IDLE_S, MAX_BINS, MAX_FRAMES_KEPT, MAX_IDLE_KEPT,
    MAX_OUTSTANDING,
};
use crate::histogram::{Bins, Histogram, Quantiles};
use crate::packet::{FIN, PSH, RST};
use crate::tcp::observe::{FILLS_HOLE, KEEPALIVE, NEW, OUT_OF_ORDER, PARTIAL_RETRANS, RETRANS};

/// The MSS of an Ethernet path without options (1500 - 40).
const ETHERNET_MSS: i64 = 1460;

/// Why a flight ended, in the order the report lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reason {
    WindowFull = 0,
    AckArrived = 1,
    CwndWait = 2,
    SenderIdle = 3,
}

/// A flight closed by an ACK (or by the data's end), classified when the sender's next move
/// is seen: its bytes, segments, whether the window was full, its last data's time, the
/// ACK's time and frame.
#[derive(Clone, Copy, Debug)]
struct Pending {
    bytes: i64,
    segs: i64,
    full: bool,
    data_ts: f64,
    ack_ts: f64,
    frame: u64,
}

fn note(frames: &mut Vec<u64>, frame: u64) {
    if frames.len() < MAX_FRAMES_KEPT {
        frames.push(frame);
    }
}

#[derive(Clone, Debug)]
pub(super) struct Flow {
    pub data_bytes: i64,
    pub segments: u64,
    pub retrans: u64,
    pub seg_sizes: Histogram,
    pub first_ts: Option<f64>,
    pub last_ts: f64,
    pub first_frame: u64,
    pub last_frame: u64,
    /// Bytes sent and acknowledged (new data only), the receiver's window, the largest
    /// segment.
    pub flight: Flight,
    /// The end and send time of each unacknowledged new segment, oldest first.
    out: VecDeque<(i64, f64)>,
    /// No RTT samples for bytes up to here: they were retransmitted (Karn).
    karn_upto: i64,
    pub ack_hist: Histogram,
    pub segs_hist: Histogram,
    pub every_second: u64,
    pub window_updates: u64,
    pub quick_acks: u64,
    pub delayed_timer: u64,
    pub duplicates: u64,
    pub acks: u64,
    pub win_min: Option<i64>,
    pub win_max: Option<i64>,
    win_prev: i64,
    zero_since: Option<f64>,
    pub zero_periods: u64,
    pub zero_total: f64,
    pub zero_frames: Vec<u64>,
    /// When the window was zero: (from, to) capture times, the first MAX_FRAMES_KEPT (a
    /// relay's legs are set against each other: which window closed first).
    pub zero_spans: Vec<(f64, f64)>,
    pub inflight: Quantiles,
    pub inflight_max: i64,
    pub inflight_max_frame: u64,
    pub ratio_max: f64,
    fl_bytes: i64,
    fl_segs: i64,
    fl_full: bool,
    pend: Option<Pending>,
    pub flights: u64,
    pub fl_bytes_hist: Quantiles,
    pub fl_segs_hist: Quantiles,
    pub end_reasons: [u64; 4],
    pub end_frames: [Vec<u64>; 4],
    /// Microseconds.
    pub rtt: Quantiles,
    pub rtt_min: Option<f64>,
    pub idle: Vec<IdlePeriod>,
    pub idle_count: u64,
    pub idle_total: f64,
    /// Idle time with data unacknowledged or the window shut.
    pub idle_waiting: f64,
    /// New bytes per 100 ms since the first data; complete after finish (the bin being
    /// filled is in bin_cur / bin_new until then).
    pub bins: Bins,
    bin_cur: i64,
    bin_new: i64,
    /// Whether the receiver's window scale is known (its windows are then bytes).
    pub scale_known: bool,
    pub full_frames: Vec<u64>,
    /// The MSS the receiver announced in its SYN.
    pub mss: Option<i64>,
    /// The latest RTT sample (seconds).
    rtt_last: Option<f64>,
    /// The RTT sample the latest ACK gave, for the chronograph's smoothed RTT.
    rtt_new: Option<f64>,
    /// Where the transfer time went.
    pub chrono: Chrono,
    /// The application's writes: new bytes up to a segment with PSH (Linux marks the last
    /// segment of each send()), and the bytes of the one not yet ended.
    pub write_sizes: Histogram,
    pub write_cur: i64,
}

impl Flow {
    pub fn new(scale_known: bool) -> Self {
        Flow {
            data_bytes: 0,
            segments: 0,
            retrans: 0,
            seg_sizes: Histogram::default(),
            first_ts: None,
            last_ts: 0.0,
            first_frame: 0,
            last_frame: 0,
            flight: Flight::default(),
            out: VecDeque::new(),
            karn_upto: -1,
            ack_hist: Histogram::default(),
            segs_hist: Histogram::default(),
            every_second: 0,
            window_updates: 0,
            quick_acks: 0,
            delayed_timer: 0,
            duplicates: 0,
            acks: 0,
            win_min: None,
            win_max: None,
            win_prev: -1,
            zero_since: None,
            zero_periods: 0,
            zero_total: 0.0,
            zero_frames: Vec::new(),
            zero_spans: Vec::new(),
            inflight: Quantiles::new(),
            inflight_max: 0,
            inflight_max_frame: 0,
            ratio_max: 0.0,
            fl_bytes: 0,
            fl_segs: 0,
            fl_full: false,
            pend: None,
            flights: 0,
            fl_bytes_hist: Quantiles::new(),
            fl_segs_hist: Quantiles::new(),
            end_reasons: [0; 4],
            end_frames: Default::default(),
            rtt: Quantiles::new(),
            rtt_min: None,
            idle: Vec::new(),
            idle_count: 0,
            idle_total: 0.0,
            idle_waiting: 0.0,
            bins: Bins::new(),
            bin_cur: -1,
            bin_new: 0,
            scale_known,
            full_frames: Vec::new(),
            mss: None,
            rtt_last: None,
            rtt_new: None,
            chrono: Chrono::new(),
            write_sizes: Histogram::default(),
            write_cur: 0,
        }
    }

    /// Segments remembered for RTT and segments-per-ACK (bounded by MAX_OUTSTANDING).
    #[cfg(test)]
    pub fn outstanding(&self) -> usize {
        self.out.len()
    }

    /// End the current flight (by an ACK at ack_ts, or the data's end): it waits for the
    /// sender's next move to tell why it ended.
    fn end_flight(&mut self, ack_ts: f64, frame: u64) {
        self.pend = Some(Pending {
            bytes: self.fl_bytes,
            segs: self.fl_segs,
            full: self.fl_full,
            data_ts: self.last_ts,
            ack_ts,
            frame,
        });
        self.fl_bytes = 0;
        self.fl_segs = 0;
    }

    fn flush_bin(&mut self) {
        if self.bin_new != 0 {
            self.bins.add(self.bin_cur, self.bin_new);
            self.bin_new = 0;
        }
    }

    /// A data segment [seq, end) of this direction.
    pub fn data(&mut self, frame: u64, ts: f64, seq: i64, end: i64, kind: u8, flags: u8) {
        let n = end.wrapping_sub(seq);
        if kind & KEEPALIVE == 0 {
            // full-sized: within the IP and TCP options' 40 bytes of the receiver's MSS; one
            // above it is several merged by offloads (or a loopback write), full unless a
            // write ends in it (PSH). Without the MSS: the largest so far, above an Ethernet
            // MSS only without PSH.
            let full = match self.mss {
                Some(m) => n.saturating_add(40) >= m && (n <= m || flags & PSH == 0),
                None => n >= self.flight.maxseg && (n <= ETHERNET_MSS || flags & PSH == 0),
            };
            self.chrono.event(
                frame,
                ts,
                Event::Data {
                    seq,
                    end,
                    again: kind & (RETRANS | PARTIAL_RETRANS | FILLS_HOLE) != 0,
                    beyond_hole: kind & OUT_OF_ORDER != 0,
                    full,
                    push: flags & PSH != 0,
                },
                self.scale_known,
            );
        }
        let first_ts = match self.first_ts {
            None => {
                self.first_ts = Some(ts);
                self.first_frame = frame;
                ts
            }
            Some(first) => {
                if ts - self.last_ts > IDLE_S {
                    self.idle_period(ts, frame);
                }
                first
            }
        };
        if self.pend.is_some() {
            self.close_flight(Some(ts));
        }
        self.segments += 1;
        self.seg_sizes.add(n);
        self.flight.segment(n);
        if kind & RETRANS != 0 {
            self.retrans += 1;
            if end > self.karn_upto {
                self.karn_upto = end;
            }
        }
        if kind & NEW != 0 && end > self.flight.high {
            let new = end.wrapping_sub(seq.max(self.flight.high));
            self.data_bytes = self.data_bytes.wrapping_add(new);
            self.flight.reach(end);
            self.write_cur = self.write_cur.wrapping_add(new);
            let x = (ts - first_ts) * 10.0;
            // int(x) < MAX_BINS exactly when x is
            if x < MAX_BINS as f64 {
                let b = trunc(x);
                if b != self.bin_cur {
                    // thousands of segments share a bin: one update each
                    self.flush_bin();
                    self.bin_cur = b;
                }
                self.bin_new = self.bin_new.wrapping_add(new);
            }
            if self.out.len() >= MAX_OUTSTANDING {
                self.out.pop_front();
            }
            self.out.push_back((end, ts));
        }
        if flags & PSH != 0 && end >= self.flight.high && self.write_cur > 0 {
            self.write_sizes.add(self.write_cur);
            self.write_cur = 0;
        }
        self.fl_bytes = self.fl_bytes.wrapping_add(n);
        self.fl_segs += 1;
        if let Some(inflight) = self.flight.outstanding() {
            self.inflight.add(inflight);
            if inflight > self.inflight_max {
                self.inflight_max = inflight;
                self.inflight_max_frame = frame;
            }
            if let (Some(win), true) = (self.flight.win, self.scale_known) {
                if win != 0 {
                    let ratio = int_div(inflight, win);
                    if ratio > self.ratio_max {
                        self.ratio_max = ratio;
                    }
                }
                if inflight >= win.wrapping_sub(self.flight.maxseg) {
                    self.fl_full = true;
                    note(&mut self.full_frames, frame);
                }
            }
        }
        self.last_ts = ts;
        self.last_frame = frame;
    }

    /// A packet of the other direction, whose ACK and window speak about this one's data.
    #[allow(clippy::too_many_arguments)]
    pub fn ack(
        &mut self,
        frame: u64,
        ts: f64,
        ack: i64,
        win: i64,
        flags: u8,
        has_data: bool,
        sack: u8,
    ) {
        if win == 0 {
            if self.zero_since.is_none() && flags & (RST | FIN) == 0 {
                self.zero_since = Some(ts);
                self.zero_periods += 1;
                self.fl_full = true;
                note(&mut self.zero_frames, frame);
            }
        } else if let Some(since) = self.zero_since.take() {
            self.zero_total += ts - since;
            if self.zero_spans.len() < MAX_FRAMES_KEPT {
                self.zero_spans.push((since, ts));
            }
        }
        if flags & RST == 0 {
            self.flight.win = Some(win);
            if self.win_min.is_none_or(|m| win < m) {
                self.win_min = Some(win);
            }
            if self.win_max.is_none_or(|m| win > m) {
                self.win_max = Some(win);
            }
        }
        let mut duplicate = false;
        let before = self.flight.acked;
        if let Some(advanced) = self.flight.acknowledge(ack) {
            if let Some(from) = advanced {
                self.advance(frame, ts, from, ack);
            }
        } else if before == Some(ack) && !has_data && flags & (FIN | RST) == 0 {
            // (SYNs never get here: the analyzer takes them apart)
            if win > self.win_prev && self.win_prev >= 0 {
                self.window_updates += 1;
            } else if win == self.win_prev && self.flight.high > ack {
                self.duplicates += 1;
                duplicate = true;
            }
        }
        self.win_prev = win;
        if flags & RST == 0 {
            self.chrono.event(
                frame,
                ts,
                Event::Ack {
                    ack,
                    win,
                    duplicate,
                    sack,
                    peer_data: has_data,
                    rtt: self.rtt_new.take(),
                    rtt_min: self.rtt_min,
                },
                self.scale_known,
            );
        }
    }

    /// An ACK acknowledging bytes not acknowledged before (up to `from` until then).
    fn advance(&mut self, frame: u64, ts: f64, from: i64, ack: i64) {
        let nbytes = ack.wrapping_sub(from);
        let mut segs = 0i64;
        let mut sent = 0.0;
        while let Some(&(end, at)) = self.out.front() {
            if end > ack {
                break;
            }
            sent = at;
            segs += 1;
            if end > self.karn_upto {
                // Karn: no sample from retransmitted data
                let rtt = ts - sent;
                self.rtt_last = Some(rtt);
                self.rtt_new = Some(rtt);
                self.rtt.add(trunc(rtt * 1e6));
                if self.rtt_min.is_none_or(|m| rtt < m) {
                    self.rtt_min = Some(rtt);
                }
            }
            self.out.pop_front();
        }
        self.acks += 1;
        self.ack_hist.add(nbytes);
        self.segs_hist.add(segs);
        if segs >= 2 || nbytes > self.flight.maxseg {
            self.every_second += 1;
        } else if segs != 0 && ts - sent >= DELAYED_ACK_S {
            self.delayed_timer += 1;
        } else {
            self.quick_acks += 1;
        }
        if self.fl_segs != 0 {
            self.end_flight(ts, frame);
            self.fl_full = self.flight.win == Some(0);
        }
    }

    /// Classify the pending flight by the sender's next move: data at next_ts, or none
    /// (the capture ended).
    fn close_flight(&mut self, next_ts: Option<f64>) {
        let Some(p) = self.pend.take() else {
            return;
        };
        let reason = match next_ts {
            _ if p.full => Reason::WindowFull,
            None => Reason::SenderIdle,
            Some(next) if next - p.data_ts <= CONTINUOUS_S => Reason::AckArrived,
            Some(next) => {
                // `rtt_min or 0.0`: None and zeros alike; max() keeps the first unless the
                // second is larger
                let quarter = 0.25 * self.rtt_min.filter(|&m| m != 0.0).unwrap_or(0.0);
                let clock = if quarter > ACK_CLOCK_S {
                    quarter
                } else {
                    ACK_CLOCK_S
                };
                if next - p.ack_ts <= clock {
                    Reason::CwndWait
                } else {
                    Reason::SenderIdle
                }
            }
        };
        self.flights += 1;
        self.fl_bytes_hist.add(p.bytes);
        self.fl_segs_hist.add(p.segs);
        let r = reason as usize;
        if let Some(count) = self.end_reasons.get_mut(r) {
            *count += 1;
        }
        if let Some(frames) = self.end_frames.get_mut(r) {
            note(frames, p.frame);
        }
    }

    fn idle_period(&mut self, ts: f64, frame: u64) {
        let gap = ts - self.last_ts;
        self.idle_count += 1;
        self.idle_total += gap;
        let outstanding = self.flight.outstanding().unwrap_or(0);
        let zero_window = self.flight.win == Some(0);
        if zero_window || outstanding > 0 {
            self.idle_waiting += gap;
        }
        if self.idle.len() < MAX_IDLE_KEPT {
            self.idle.push(IdlePeriod {
                start_ts: self.last_ts,
                seconds: gap,
                from_frame: self.last_frame,
                to_frame: frame,
                outstanding,
                zero_window,
            });
        }
    }

    /// The connection is done: the last bin, the last flight, an open zero-window period.
    pub fn finish(&mut self, scale_known: bool) {
        self.flush_bin();
        if self.fl_segs != 0 && self.pend.is_none() {
            // the last flight: data simply ended
            self.end_flight(self.last_ts, self.last_frame);
        }
        if self.pend.is_some() {
            self.close_flight(None);
        }
        if let Some(since) = self.zero_since {
            self.zero_total += if self.last_ts > since {
                self.last_ts - since
            } else {
                0.0
            };
            if self.zero_spans.len() < MAX_FRAMES_KEPT {
                self.zero_spans.push((since, self.last_ts.max(since)));
            }
        }
        self.scale_known = scale_known;
    }
}
