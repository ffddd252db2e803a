//! Where a direction's transfer time went, in the manner of Linux's sender chronographs
//! (tcp_chrono: busy, rwnd_limited, sndbuf_limited) and RFC 4898's SndLimTime, read from the
//! capture: every moment from the first data segment to the ACK of the last byte is given to
//! one limit, by the state the sender was in (T-RAT, Siekkinen's root cause analysis).
//!
//! The time between two consecutive packets of the direction (its data, the receiver's ACKs)
//! goes to the state that held after the first of them:
//! - loss: in recovery, from a loss's detection (a retransmission, a duplicate ACK or SACK,
//!   data arriving beyond a hole the capture never saw filled) to the ACK that covers what was
//!   sent by then, and the pause a retransmission that begins a recovery ends (a timeout, or a
//!   tail-loss probe: whatever held the sender before it, a write's end or queued data, it
//!   waited on the loss from then on). A recovery the receiver
//!   reports as spurious (D-SACK) goes back to what held the sender before it. The congestion
//!   window's regrowth after a loss is not loss: it is booked as the round trips it waits for
//!   (latency, or network with a queue), and counted apart (`after_loss_s`) so the verdict
//!   can say what a loss cost beyond its recovery;
//! - receiver_window: the receiver's window was zero, or too small for one more largest
//!   segment beyond the bytes in flight (without the handshake's scale, the raw window shifted
//!   by the least scale the bytes in flight had proved by then: the flight sits at that bound
//!   by construction, so a pause under it that a timeout ends is the loss's); and from an ACK
//!   that opens it to data within REOPEN_S after it (plus the round trip to the sender): the
//!   sender's stack saw the window open only once it took that ACK in, which a loaded host
//!   does hundreds of microseconds late, and its chronograph counts the window's time until
//!   then;
//! - a write's end (a short segment, or a full one with PSH: the sender had queued nothing
//!   more when it went), or the receiver having sent a request since: the sender's, unless the
//!   next data follows the first ACK since that write within a reaction time (tens of
//!   microseconds, plus the round trip to the sender when the capture is not beside it).
//!   Then data was queued behind the congestion window, and the pause was the round trip's
//!   (an ACK that freed room and drew nothing shows the sender had nothing queued). A train
//!   the stack filled (TRAIN_SEGMENTS full segments or more, PSH on the last: Linux marks each
//!   burst it sends from a backlog so) with data in flight is answered more loosely: by the
//!   latest ACK, or at the bound on deferring a send (DEFER_S);
//! - data queued (the last segment full, no PSH), the window open:
//!   - between segments, at the sender's peak spacing (within PEAK_FACTOR of the closest
//!     spacing per byte seen): transmission, the sender's own pace; further apart, the path's
//!     pace (network: a bottleneck, a shaper, pacing); with nothing in flight, a rate limit
//!     before the capture point (network);
//!   - with data in flight, waiting for an ACK: one round trip. Its part above the least RTT
//!     is queueing at a bottleneck (network) only when the smoothed RTT stands well above the
//!     least (QUEUE_*): occasional late ACKs (the receiver's CPU, its delayed ACKs) are not a
//!     queue; the rest is the path's own round trip (latency).
//!
//! The direction's time ends with its last data segment; the wait from a response's last
//! segment to the next one, when everything was acknowledged and the receiver sent a request
//! in it, is the conversation's turn, not transfer time.

use serde::{Deserialize, Serialize};

use super::flight::Flight;
use crate::tcp::observe::{SACK_ABOVE, SACK_DUPLICATE};
use crate::tcp::options::proved_scale;

/// A sender answering an ACK sends within this, beyond the round trip between the capture
/// point and the sender ("tens of microseconds": the stack's own reaction).
const REACT_S: f64 = 0.000_05;
/// A train of queued data ended by nothing left in flight is a rate limit's when the next
/// data is this many least round trips away, and queued again.
const TRAIN_GAP_RTTS: f64 = 10.0;
/// A train: at least this many full segments in a row up to the full one with PSH that ends
/// it. Queued data leaves as runs of full segments with the writes' pushes landing on some
/// (4 to hundreds in a row behind a shaper); a write of one or two full segments is a
/// write's end, no train (a pooler passing on the one or two segments it read).
const TRAIN_SEGMENTS: u32 = 3;
/// Linux holds a send back while its window has room for less than a full TSO burst, but not
/// past this long since its last send (tcp_tso_should_defer): a train queued behind the window
/// leaves at this bound when no ACK made room before it.
const DEFER_S: f64 = 0.001;
/// How close to DEFER_S after the last data a train resumes to be taken as leaving at it: the
/// bound runs from the burst's start, the capture sees its last segment up to its length later.
const DEFER_SLACK_S: f64 = 0.000_1;
/// A sender held by the receiver's window sends once its stack has taken in the ACK that
/// opens it, within a loaded host's scheduling delay (the lab's server took 40-500 us): until
/// then its chronograph still counts the window's time. Data this soon after that ACK (plus
/// the round trip to the sender) was held by the window; later, by something else.
const REOPEN_S: f64 = 0.001;

/// Segments this many times further apart (per byte) than the closest seen left at the
/// path's pace, not the sender's.
const PEAK_FACTOR: f64 = 4.0;
/// A queue: the smoothed RTT above the least by more than this share of the least, and by
/// more than QUEUE_FLOOR_S.
const QUEUE_SHARE: f64 = 0.5;
const QUEUE_FLOOR_S: f64 = 0.001;

/// The limits, in the report's order.
pub const LIMITS: usize = 5;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Limit {
    ReceiverWindow = 0,
    Network = 1,
    Loss = 2,
    Latency = 3,
    Sender = 4,
}

/// A run of time under one limit: the frames that began and ended it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Stretch {
    pub from_frame: u64,
    pub to_frame: u64,
    /// Epoch seconds of its start, and its length.
    pub start_ts: f64,
    pub seconds: f64,
}

/// Per limit, in the report's order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ByLimit<T> {
    pub receiver_window: T,
    pub network: T,
    pub loss: T,
    pub latency: T,
    pub sender: T,
}

impl<T: Clone> ByLimit<T> {
    pub fn of(v: &[T; LIMITS]) -> Self {
        let [receiver_window, network, loss, latency, sender] = v.clone();
        ByLimit {
            receiver_window,
            network,
            loss,
            latency,
            sender,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct LimitFacts {
    /// Seconds from the first data segment to the last, less the turns: the sum of
    /// `seconds`.
    pub transfer_s: f64,
    /// Pauses with everything acknowledged in which the receiver sent data (a request)
    /// before the sender's next: the conversation's turns, not part of the transfer.
    pub turns: u64,
    pub turns_s: f64,
    pub seconds: ByLimit<f64>,
    /// Of the sender's seconds, those with nothing in flight: the rest of the transfer is
    /// what Linux's chronographs count as busy.
    pub sender_idle_s: f64,
    /// Waits for the ACK of a send's last segment that are left out of the transfer (before
    /// a turn, and after the last data): Linux counts them busy, as data was in flight.
    pub ack_tail_s: f64,
    /// Of the latency and network seconds, those while the congestion window regrew to the
    /// flight it had before a loss: what losses cost beyond their recoveries.
    pub after_loss_s: f64,
    /// Of the receiver window's seconds, those with the window under a quarter of the largest
    /// it had advertised: a reader that fell behind, not a buffer that filled.
    pub low_window_s: f64,
    /// The first and the longest run of each limit (None: it never held).
    pub first: ByLimit<Option<Stretch>>,
    pub longest: ByLimit<Option<Stretch>>,
    /// Recoveries entered, and by what: retransmissions, duplicate ACKs, data beyond a hole.
    pub recoveries: u64,
    pub recovery_by_retransmission: u64,
    pub recovery_by_duplicate_ack: u64,
    pub recovery_by_hole: u64,
}

/// What the accounting holds, up to the last data segment (the intervals after it wait in
/// Chrono::pending).
#[derive(Clone, Copy, Debug)]
struct Books {
    /// Pauses waiting for the peer's request: (count, seconds).
    turns: (u64, f64),
    /// Loss seconds since the current recovery began.
    spurious: f64,

    /// Sender seconds with nothing in flight (the kernel's chronographs do not count them
    /// busy).
    sender_idle: f64,
    /// Waits for the last ACK before a turn.
    ack_tail: f64,
    /// Seconds booked while regrowing after a loss.
    after_loss: f64,
    /// Receiver-window seconds with the window far below its ceiling.
    low_window: f64,
    seconds: [f64; LIMITS],
    first: [Option<Stretch>; LIMITS],
    longest: [Option<Stretch>; LIMITS],
    /// The run being extended and its limit.
    run: Option<(Limit, Stretch)>,
}

impl Books {
    fn new() -> Self {
        Books {
            turns: (0, 0.0),
            spurious: 0.0,

            sender_idle: 0.0,
            ack_tail: 0.0,
            after_loss: 0.0,
            low_window: 0.0,
            seconds: [0.0; LIMITS],
            first: [None; LIMITS],
            longest: [None; LIMITS],
            run: None,
        }
    }

    fn close_run(&mut self) {
        if let Some((limit, s)) = self.run.take() {
            let i = limit as usize;
            if let Some(slot) = self.first.get_mut(i) {
                slot.get_or_insert(s);
            }
            if let Some(slot) = self.longest.get_mut(i) {
                if slot.is_none_or(|l| s.seconds > l.seconds) {
                    *slot = Some(s);
                }
            }
        }
    }

    fn apply(&mut self, e: &Entry) {
        self.add(e.limit, e.secs, e.from_ts, e.from, e.to);
        if e.idle {
            self.sender_idle += e.secs;
        }
        if e.after_loss {
            self.after_loss += e.secs;
        }
        if e.low_window {
            self.low_window += e.secs;
        }
    }

    /// `secs` of [from_ts, ...) to `limit`, from frame `from` to frame `to`.
    fn add(&mut self, limit: Limit, secs: f64, from_ts: f64, from: u64, to: u64) {
        if let Some(x) = self.seconds.get_mut(limit as usize) {
            *x += secs;
        }
        if limit == Limit::Loss {
            self.spurious += secs;
        }

        match &mut self.run {
            Some((l, s)) if *l == limit => {
                s.seconds += secs;
                s.to_frame = to;
            }
            _ => {
                self.close_run();
                self.run = Some((
                    limit,
                    Stretch {
                        from_frame: from,
                        to_frame: to,
                        start_ts: from_ts,
                        seconds: secs,
                    },
                ));
            }
        }
    }
}

/// An interval after the last data segment, held until data follows: the wait after a
/// response's last segment is the conversation's turn, or at the end of nothing.
#[derive(Clone, Copy, Debug)]
struct Entry {
    limit: Limit,
    secs: f64,
    from_ts: f64,
    from: u64,
    to: u64,
    /// The sender had nothing in flight.
    idle: bool,
    /// The congestion window was regrowing after a loss.
    after_loss: bool,
    /// The receiver's window held the sender while far below its own ceiling.
    low_window: bool,
    /// An ACK had reopened a closed window since the last data segment.
    after_reopen: bool,
    /// How the next data segment may change its limit.
    kind: Kind,
}

/// What an interval's limit depends on, until the next data segment settles it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// Decided.
    Fixed,
    /// The sender's, as a write had ended; the given limit if the next data answers an ACK
    /// (data was queued behind it after all).
    WriteEnd(Limit),
    /// A train the stack filled (TRAIN_SEGMENTS full segments or more, the last with PSH)
    /// ended with data in flight: the given limit if the next train answers any ACK since,
    /// or leaves at the deferral bound after one (a window that had room for less than a
    /// burst held it), else the sender's.
    FilledEnd(Limit),
    /// A full-size segment with PSH ended a train, nothing in flight: a rate limit's
    /// (network) if the next data comes only after TRAIN_GAP_RTTS least round trips, else
    /// the sender's.
    TrainEnd,
    /// Data was queued: a round trip, unless the next data segment's spacing from the last
    /// shows the sender never waited (its peak spacing: transmission), or no ACK came between
    /// them (the path's pace: network).
    Queued,
    /// The receiver's window, read without the handshake's scale (the raw window shifted by
    /// the least scale the flight proved, which the flight itself sits at): the window's,
    /// unless the pause ends in a timeout, whose retransmission shows the sender waited on a
    /// loss, not on a window it may never have reached.
    Bounded,
}

/// What a data segment says of the pause before it (`Chrono::settle`).
#[derive(Clone, Copy, Debug, Default)]
struct Next {
    /// It answers the first ACK since the last data (`answers_ack`).
    ack: bool,
    /// It is a queued train let go by the window (`answers_window`).
    window: bool,
    /// A retransmission that begins a recovery: the pause was a timeout's.
    timeout: bool,
    /// It came soon after an ACK reopened a closed window (REOPEN_S).
    reopened: bool,
}

/// Intervals held after the last data segment, at most (a pause with more changes of state
/// books its oldest at once).
const MAX_PENDING: usize = 64;

/// One packet as the accounting needs it.
#[derive(Clone, Copy, Debug)]
pub(super) enum Event {
    /// A data segment [seq, end): retransmitted (or filling a hole the capture never saw),
    /// arriving beyond a hole, full-sized.
    Data {
        seq: i64,
        end: i64,
        again: bool,
        beyond_hole: bool,
        full: bool,
        /// PSH: the segment ends a write.
        push: bool,
    },
    /// The receiver's ACK and window; a duplicate ACK; the packet carries data of its own
    /// (a request); the RTT sample this ACK gave, if any, and the least (seconds).
    Ack {
        ack: i64,
        win: i64,
        duplicate: bool,
        /// SACK_ABOVE, SACK_DUPLICATE or 0 (crate::tcp::observe).
        sack: u8,
        peer_data: bool,
        rtt: Option<f64>,
        rtt_min: Option<f64>,
    },
}

/// A window under 1/LOW_WINDOW of the largest the receiver advertised is far below its
/// ceiling: its reader fell behind (issue rule 6), where a buffer that fills stays near it.
const LOW_WINDOW: i64 = 4;

#[derive(Clone, Debug)]
pub(super) struct Chrono {
    /// Time and frame of the last packet accounted to.
    t: Option<f64>,
    frame: u64,
    first_ts: f64,
    flight: Flight,
    /// The least window scale the bytes in flight have proved so far.
    scale_lb: u8,
    /// The largest window the receiver advertised so far, in bytes (as `window` reads it).
    win_ceiling: i64,
    last_full: bool,
    last_push_full: bool,
    /// Full segments in a row since the last short one or the last PSH, this one included.
    full_run: u32,
    peer_spoke: bool,
    recovery_until: Option<i64>,
    /// The flight when the last recovery began, until the sender has that much in flight
    /// again.
    regrow_to: Option<i64>,
    /// The current recovery began with a retransmission.
    recovery_by_resend: bool,
    /// What held the sender in the pause that retransmission ended, had it not been sent:
    /// the receiver's window when it was closed (the receiver withheld its ACK and the
    /// sender probed), else the round trip. A spurious retransmission's time goes there.
    spurious_as: Limit,
    rtt_min: Option<f64>,
    /// The RTT smoothed as the sender's stack smooths it (7/8 old, 1/8 new sample).
    srtt: Option<f64>,
    /// The closest spacing of queued data seen so far: seconds per byte.
    peak: Option<f64>,
    /// The latest ACK, or window update, and whether it came since the last data segment.
    ack_ts: Option<f64>,
    /// The first ACK, or window update, since the last data segment.
    first_ack_ts: Option<f64>,
    /// How long after an ACK the sender's answer reaches the capture point beyond its
    /// reaction time: the round trip between the capture point and the sender, as the
    /// handshake times it, else as the other direction's least RTT shows it (0 until then).
    pub far_s: f64,
    /// When an ACK last reopened a closed window, since the last data segment.
    reopened_at: Option<f64>,
    books: Books,
    /// The intervals since the last data segment, and its time.
    pending: Vec<Entry>,
    last_data_ts: Option<f64>,
    /// Everything sent was acknowledged since the last data segment.
    all_acked: bool,
    /// When everything sent was last acknowledged.
    acked_ts: Option<f64>,

    recoveries: [u64; 3],
}

impl Chrono {
    pub fn new() -> Self {
        Chrono {
            t: None,
            frame: 0,
            first_ts: 0.0,
            flight: Flight::default(),
            scale_lb: 0,
            win_ceiling: 0,
            last_full: false,
            last_push_full: false,
            full_run: 0,
            peer_spoke: false,
            recovery_until: None,
            regrow_to: None,
            recovery_by_resend: false,
            spurious_as: Limit::Latency,
            rtt_min: None,
            srtt: None,
            peak: None,
            ack_ts: None,
            first_ack_ts: None,
            far_s: 0.0,
            reopened_at: None,
            books: Books::new(),
            pending: Vec::new(),
            last_data_ts: None,
            all_acked: false,
            acked_ts: None,

            recoveries: [0; 3],
        }
    }

    fn in_flight(&self) -> i64 {
        self.flight.in_flight()
    }

    /// The window in bytes: as advertised when the scale is known, else shifted by the least
    /// scale the bytes in flight so far prove (the engine's lower bound, as it stood then).
    fn window(&self, scale_known: bool) -> Option<i64> {
        let w = self.flight.win?;
        Some(if scale_known { w } else { w << self.scale_lb })
    }

    fn note_ceiling(&mut self, scale_known: bool) {
        self.win_ceiling = self.win_ceiling.max(self.window(scale_known).unwrap_or(0));
    }

    fn window_closed(&self, scale_known: bool) -> bool {
        match self.window(scale_known) {
            Some(0) => true,
            Some(w) => self.in_flight().wrapping_add(self.flight.maxseg) > w,
            None => false,
        }
    }

    /// Bytes in flight beyond the raw window prove a scale at least this large.
    fn prove_scale(&mut self) {
        if let Some(w) = self.flight.win.filter(|&w| w > 0) {
            self.scale_lb = proved_scale(self.scale_lb, w, self.in_flight());
        }
    }

    fn recovering(&self) -> bool {
        match (self.recovery_until, self.flight.acked) {
            (Some(until), Some(a)) => a < until,
            (Some(_), None) => true,
            _ => false,
        }
    }

    fn recover(&mut self, why: usize) {
        if !self.recovering() {
            if let Some(n) = self.recoveries.get_mut(why) {
                *n += 1;
            }
            let flight = self.in_flight();
            self.recovery_by_resend = why == 0;
            self.regrow_to = Some(self.regrow_to.map_or(flight, |r| r.max(flight)));
        }
        let high = self.flight.high;
        self.recovery_until = Some(self.recovery_until.map_or(high, |u| u.max(high)));
    }

    /// A round trip's wait, split into the path's own (latency) and queueing above it
    /// (network) when the smoothed RTT shows a standing queue.
    fn round_trip(&self, gap: f64) -> [(Limit, f64); 2] {
        let queue = match (self.rtt_min, self.srtt) {
            (Some(m), Some(r)) if r > 0.0 && r - m > (QUEUE_SHARE * m).max(QUEUE_FLOOR_S) => {
                gap * (1.0 - (m / r).max(0.0))
            }
            _ => 0.0,
        };
        [(Limit::Latency, gap - queue), (Limit::Network, queue)]
    }

    /// Whether data at `ts` answers an ACK: it came within the sender's reaction time of
    /// the first ACK since the last data segment. A sender held by its congestion window
    /// sends on the first ACK that frees room; one that let ACKs pass and sent later had
    /// nothing queued, and data that happens to follow a later ACK (many arrive while a
    /// large flight drains) is its own pace. Beside the sender (a round trip to it under
    /// REACT_S), the ACK must also have come a reaction time or more after that data: on a
    /// path of microseconds every write follows some ACK that closely.
    fn answers_ack(&self, ts: f64) -> bool {
        match (self.first_ack_ts, self.last_data_ts) {
            (Some(a), Some(d)) => self.reacts_to(ts, a, d),
            _ => false,
        }
    }

    /// Whether data at `ts` is the sender's reaction to an ACK seen at `a`, after its last
    /// data at `d`: within the reaction time (plus the round trip to the sender), the ACK a
    /// reaction time or more after that data where the capture is beside the sender.
    fn reacts_to(&self, ts: f64, a: f64, d: f64) -> bool {
        a >= d && ts - a <= REACT_S + self.far_s && (a - d > REACT_S || self.far_s > REACT_S)
    }

    /// Whether a full segment at `ts` is a queued train let go by the window: it left within
    /// the reaction time of the latest ACK (a window with room for less than a burst waits
    /// for the ACK that makes room, not the first), or at the deferral bound after an ACK.
    /// Beside the sender, that ACK must have come a reaction time or more after the last data,
    /// as for `answers_ack`.
    fn answers_window(&self, ts: f64, full: bool) -> bool {
        match (self.ack_ts, self.last_data_ts) {
            (Some(a), Some(d)) if full && a >= d => {
                self.reacts_to(ts, a, d) || (ts - d - DEFER_S).abs() <= DEFER_SLACK_S
            }
            _ => false,
        }
    }

    /// The interval from the last packet to this one, under the state that held.
    fn account(&mut self, frame: u64, ts: f64, e: &Event, scale_known: bool) {
        let Some(t) = self.t else {
            return;
        };
        let gap = ts - t;
        if gap.is_nan() || gap <= 0.0 {
            return;
        }
        let ended_by_data = matches!(e, Event::Data { .. });
        let resent = matches!(e, Event::Data { again: true, .. });
        let from = self.frame;
        let (loss, closed, idle) = (
            self.recovering() || resent,
            self.window_closed(scale_known),
            self.in_flight() == 0,
        );
        // the congestion window cut by a loss and not yet grown back to the flight before it
        let after_loss = self.regrow_to.is_some_and(|r| self.in_flight() < r) && !idle;
        let low = closed
            && self
                .window(scale_known)
                .is_some_and(|w| w.saturating_mul(LOW_WINDOW) < self.win_ceiling);
        let mut parts: [(Limit, f64, Kind); 2] = [(Limit::Sender, 0.0, Kind::Fixed); 2];
        if loss {
            parts[0] = (Limit::Loss, gap, Kind::Fixed);
        } else if closed {
            // only a zero window is closed whatever the scale
            let kind = if scale_known || self.flight.win == Some(0) {
                Kind::Fixed
            } else {
                Kind::Bounded
            };
            parts[0] = (Limit::ReceiverWindow, gap, kind);
        } else if self.peer_spoke {
            parts[0] = (Limit::Sender, gap, Kind::Fixed);
        } else if idle && self.last_push_full {
            // a train of queued data (TRAIN_SEGMENTS full ones in a row or more) cut at a
            // full segment (PSH on an skb the stack filled) and nothing left in flight: a
            // rate limit before the capture point releasing trains, if the next one is long
            // in coming; else the sender had no more
            parts[0] = (Limit::Sender, gap, Kind::TrainEnd);
        } else if self.last_push_full {
            // a train the stack filled, data in flight: its PSH may be an skb's, not the
            // application's; the next train says whether more was queued behind the window
            parts[0] = (Limit::Sender, gap, Kind::FilledEnd(Limit::Latency));
        } else if !self.last_full {
            // a write ended: the sender's, unless the next data answers an ACK
            let held = if idle { Limit::Sender } else { Limit::Latency };
            parts[0] = (Limit::Sender, gap, Kind::WriteEnd(held));
        } else if idle || ended_by_data {
            // data queued with nothing in flight (held before the capture point), or between
            // segments: the next segment's spacing tells the sender's pace from the path's
            parts[0] = (Limit::Network, gap, Kind::Queued);
        } else {
            let [(l0, s0), (l1, s1)] = self.round_trip(gap);
            parts = [(l0, s0, Kind::Queued), (l1, s1, Kind::Queued)];
        }
        for (limit, secs, kind) in parts {
            if secs <= 0.0 {
                continue;
            }
            let entry = Entry {
                limit,
                secs,
                from_ts: t,
                from,
                to: frame,
                idle: idle && limit == Limit::Sender,
                after_loss: after_loss && matches!(limit, Limit::Latency | Limit::Network),
                low_window: low && limit == Limit::ReceiverWindow,
                after_reopen: self.reopened_at.is_some(),
                kind,
            };
            if let Some(last) = self.pending.last_mut().filter(|l| {
                l.limit == limit
                    && l.idle == entry.idle
                    && l.after_loss == entry.after_loss
                    && l.low_window == entry.low_window
                    && l.after_reopen == entry.after_reopen
                    && l.kind == kind
            }) {
                last.secs += secs;
                last.to = frame;
            } else {
                if self.pending.len() >= MAX_PENDING {
                    let oldest = self.pending.remove(0);
                    self.books.apply(&oldest);
                }
                self.pending.push(entry);
            }
        }
    }

    /// Book what waited since the last data segment, now that data came: a write's end
    /// answered by an ACK within the reaction time was data queued behind it; queued data
    /// that left at the sender's peak spacing never waited (`spacing`: the limit the whole
    /// gap goes to, when its spacing decides it).
    fn settle(&mut self, next: Next, spacing: Option<Limit>, gap: f64, next_full: bool) {
        let long = next_full && self.rtt_min.is_some_and(|m| gap >= TRAIN_GAP_RTTS * m);
        for mut e in std::mem::take(&mut self.pending) {
            match e.kind {
                _ if next.reopened && e.after_reopen && !next.timeout => {
                    e.limit = Limit::ReceiverWindow;
                    e.idle = false;
                }
                _ if next.timeout && e.kind != Kind::Fixed => {
                    e.limit = Limit::Loss;
                    e.idle = false;
                }
                Kind::TrainEnd if long => {
                    e.limit = Limit::Network;
                    e.idle = false;
                }
                Kind::WriteEnd(held) if next.ack => {
                    e.limit = held;
                    e.idle = false;
                }
                Kind::FilledEnd(held) if next.ack || next.window => {
                    e.limit = held;
                    e.idle = false;
                }
                Kind::Queued => {
                    if let Some(l) = spacing {
                        e.limit = l;
                        e.after_loss = e.after_loss && l != Limit::Sender;
                    }
                }
                _ => {}
            }
            self.books.apply(&e);
        }
    }

    /// Seconds given to each limit so far (up to the last data segment; a stream followed
    /// reads a response's share of them).
    pub fn seconds_so_far(&self) -> [f64; LIMITS] {
        self.books.seconds
    }

    pub fn event(&mut self, frame: u64, ts: f64, e: Event, scale_known: bool) {
        if self.t.is_none() && !matches!(e, Event::Data { .. }) {
            // before the first data: only the window and ACK matter
            if let Event::Ack { ack, win, .. } = e {
                self.flight.acknowledge(ack);
                self.flight.win = Some(win);
                self.note_ceiling(scale_known);
            }
            return;
        }
        let mut next = Next::default();
        if let Event::Data { full, .. } = e {
            next.ack = self.answers_ack(ts);
            next.window = self.answers_window(ts, full);
            // data after a pause with everything acknowledged: the pause counts, as the
            // conversation's turn if the receiver sent a request in it
            if let (true, Some(last)) = (self.all_acked && self.peer_spoke, self.last_data_ts) {
                // from the last data segment, less what an overlong pause booked already
                let since = self
                    .pending
                    .first()
                    .map_or(self.t.unwrap_or(last), |e| e.from_ts);
                self.pending.clear();
                self.books.ack_tail += self.ack_tail(last);
                self.books.turns.0 += 1;
                self.books.turns.1 += ts - since;
                self.t = Some(ts);
                self.frame = frame;
            }
            self.all_acked = false;
        }
        // a retransmission that begins a recovery ends a pause no ACK explained: a timeout
        // (or a tail-loss probe), whatever held the sender before it
        next.timeout = matches!(e, Event::Data { again: true, .. }) && !self.recovering();
        if next.timeout {
            // a recovery begins with the pause this retransmission ends
            self.books.spurious = 0.0;
            self.spurious_as = if self.window_closed(scale_known) {
                Limit::ReceiverWindow
            } else {
                Limit::Latency
            };
        }
        let queued_before = self.last_full;
        self.account(frame, ts, &e, scale_known);
        if let Event::Data {
            seq,
            end,
            again,
            full,
            push,
            ..
        } = e
        {
            let spacing = match self.last_data_ts {
                Some(last) if self.last_full && !again => {
                    let per_byte = (ts - last) / end.wrapping_sub(seq).max(1) as f64;
                    if ts - last <= REACT_S || self.peak.is_none_or(|p| per_byte <= PEAK_FACTOR * p)
                    {
                        // (gaps of tens of microseconds are the hosts' scheduling)
                        Some(Limit::Sender)
                    } else if self.ack_ts.is_some_and(|a| a >= last) {
                        None // an ACK came meanwhile: the wait for it stands
                    } else {
                        Some(Limit::Network)
                    }
                }
                _ => None,
            };
            let gap = self.last_data_ts.map_or(0.0, |last| ts - last);
            // the sender's stack saw the window open only once it took in the ACK that
            // opened it: data soon after that ACK was held by the window until then
            next.reopened = self
                .reopened_at
                .is_some_and(|r| ts - r <= REOPEN_S + self.far_s);
            self.settle(next, spacing, gap, full && !push);
            self.reopened_at = None;
        }
        match e {
            Event::Data {
                seq,
                end,
                again,
                beyond_hole,
                full,
                push,
            } => {
                if let (true, false, Some(last)) = (queued_before, again, self.last_data_ts) {
                    // the spacing of queued data: the closest is the sender's peak
                    let per_byte = (ts - last) / end.wrapping_sub(seq).max(1) as f64;
                    if per_byte > 0.0 && self.peak.is_none_or(|p| per_byte < p) {
                        self.peak = Some(per_byte);
                    }
                }
                if self.t.is_none() {
                    self.first_ts = ts;
                    // nothing acknowledged yet: in flight counts from the first byte seen
                    if self.flight.acked.is_none_or(|a| a < seq) {
                        self.flight.acked = Some(seq);
                    }
                }
                self.flight.sent(seq, end);
                if again {
                    self.recover(0);
                } else if beyond_hole {
                    self.recover(2);
                }
                if end >= self.flight.high {
                    // what a new segment says of the data waiting: a short one, or one with
                    // PSH, ended a write
                    self.last_full = full && !push;
                    self.full_run = if full {
                        self.full_run.saturating_add(1)
                    } else {
                        0
                    };
                    self.last_push_full = full && push && self.full_run >= TRAIN_SEGMENTS;
                    if push {
                        self.full_run = 0;
                    }
                }
                self.peer_spoke = false;
                if !full || self.regrow_to.is_some_and(|r| self.in_flight() >= r) {
                    // grown back, or the application, not the window, sets the pace now
                    if !self.recovering() {
                        self.regrow_to = None;
                    }
                }
            }
            Event::Ack {
                ack,
                win,
                duplicate,
                sack,
                peer_data,
                rtt,
                rtt_min,
            } => {
                let was_closed = self.window_closed(scale_known);
                self.flight.acknowledge(ack);
                self.flight.win = Some(win);
                self.note_ceiling(scale_known);
                if was_closed && !self.window_closed(scale_known) && self.reopened_at.is_none() {
                    self.reopened_at = Some(ts);
                }
                self.ack_ts = Some(ts);
                if self.first_ack_ts.is_none() {
                    self.first_ack_ts = Some(ts);
                }
                if let Some(r) = rtt {
                    self.srtt = Some(self.srtt.map_or(r, |s| 0.875 * s + 0.125 * r));
                }
                self.rtt_min = rtt_min;
                if sack & SACK_DUPLICATE != 0 && self.recovery_by_resend {
                    // the receiver had the data: the retransmission was spurious, and the
                    // time since it began was a wait for a late ACK: a round trip, or the
                    // receiver's window when it was closed
                    let (x, to) = (self.books.spurious, self.spurious_as);
                    if let Some(loss) = self.books.seconds.get_mut(Limit::Loss as usize) {
                        *loss -= x;
                    }
                    if let Some(held) = self.books.seconds.get_mut(to as usize) {
                        *held += x;
                    }
                    self.books.spurious = 0.0;
                    if let Some((limit @ Limit::Loss, _)) = &mut self.books.run {
                        *limit = to;
                    }
                    for e in &mut self.pending {
                        if e.limit == Limit::Loss {
                            e.limit = to;
                        }
                    }
                    self.recovery_until = None;
                    self.regrow_to = None;
                    self.recovery_by_resend = false;
                } else if duplicate || sack & SACK_ABOVE != 0 {
                    self.recover(1);
                }
                if peer_data {
                    self.peer_spoke = true;
                }
            }
        }
        if !scale_known {
            self.prove_scale();
        }
        self.t = Some(ts);
        self.frame = frame;
        if self.in_flight() == 0 && !self.all_acked {
            self.all_acked = true;
            self.acked_ts = Some(ts);
        }
        if let Event::Data { .. } = e {
            self.last_data_ts = Some(ts);
            self.first_ack_ts = None;
        }
    }

    /// From the data segment at `last` until everything was acknowledged, if it was.
    fn ack_tail(&self, last: f64) -> f64 {
        match self.acked_ts {
            Some(a) if self.all_acked && a > last => a - last,
            _ => 0.0,
        }
    }

    pub fn facts(&self) -> LimitFacts {
        // what came after the last data segment is left out
        let (mut books, end) = (self.books, self.last_data_ts.unwrap_or(self.first_ts));
        books.close_run();
        if let Some(last) = self.last_data_ts {
            books.ack_tail += self.ack_tail(last);
        }
        LimitFacts {
            transfer_s: if self.t.is_some() {
                (end - self.first_ts - books.turns.1).max(0.0)
            } else {
                0.0
            },
            turns: books.turns.0,
            turns_s: books.turns.1,
            seconds: ByLimit::of(&books.seconds),
            sender_idle_s: books.sender_idle,
            ack_tail_s: books.ack_tail,
            after_loss_s: books.after_loss,
            low_window_s: books.low_window,
            first: ByLimit::of(&books.first),
            longest: ByLimit::of(&books.longest),
            recoveries: self.recoveries.iter().sum(),
            recovery_by_retransmission: self.recoveries[0],
            recovery_by_duplicate_ack: self.recoveries[1],
            recovery_by_hole: self.recoveries[2],
        }
    }
}
