//! Where a direction's transfer time went, in the manner of Linux's sender chronographs
//! (tcp_chrono: busy, rwnd_limited, sndbuf_limited) and RFC 4898's SndLimTime, read from the
//! capture: every moment from the first data segment to the ACK of the last byte is given to
//! one limit, by the state the sender was in (T-RAT, Siekkinen's root cause analysis).
//!
//! The time between two consecutive packets of the direction (its data, the receiver's ACKs)
//! goes to the state that held after the first of them:
//! - loss: in recovery (from a retransmission, a duplicate ACK, or data arriving beyond a hole
//!   the capture never saw filled, until the ACK passes what was sent by then), or the pause
//!   ended by a retransmission (the sender waited for a timeout or for duplicate ACKs);
//! - receiver_window: the receiver's window was zero, or too small for one more largest
//!   segment beyond the bytes in flight (without the handshake's scale, the raw window shifted
//!   by the least scale the bytes in flight had proved by then);
//! - sender: the last segment was a short one (its write's tail: the sender had sent all it
//!   had), or the receiver has sent a request since: the application had nothing to send;
//! - the last segment was full-sized, so more data was waiting, and the window was open:
//!   - network, while the sender kept sending (the link's pace), or with nothing in flight
//!     (data waited, yet nothing was sent: a rate limit or pacing before the capture point);
//!   - with data in flight, waiting for an ACK: one round trip; the part of the latest RTT
//!     sample above the least one is queueing at a bottleneck (network), the rest the path's
//!     own round trip (latency).
//!
//! The direction's time ends with its last data segment; the wait from a response's last
//! segment to the next one, when everything was acknowledged and the receiver sent a request
//! in it, is the conversation's turn, not transfer time.

use serde::{Deserialize, Serialize};

use super::flight::Flight;
use crate::tcp::observe::{SACK_ABOVE, SACK_DUPLICATE};
use crate::tcp::options::proved_scale;

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
    fn of(v: &[T; LIMITS]) -> Self {
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
    },
    /// The receiver's ACK and window; a duplicate ACK; the packet carries data of its own
    /// (a request); the latest RTT sample and the least (seconds).
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

#[derive(Clone, Debug)]
pub(super) struct Chrono {
    /// Time and frame of the last packet accounted to.
    t: Option<f64>,
    frame: u64,
    first_ts: f64,
    flight: Flight,
    /// The least window scale the bytes in flight have proved so far.
    scale_lb: u8,
    last_full: bool,
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
    rtt: Option<f64>,
    rtt_min: Option<f64>,
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
            last_full: false,
            peer_spoke: false,
            recovery_until: None,
            regrow_to: None,
            recovery_by_resend: false,
            spurious_as: Limit::Latency,
            rtt: None,
            rtt_min: None,
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
        let regrowing = self.regrow_to.is_some_and(|r| self.in_flight() < r);
        let mut book = |limit: Limit, secs: f64, idle: bool| {
            let e = Entry {
                limit,
                secs,
                from_ts: t,
                from,
                to: frame,
                idle,
            };
            if ended_by_data {
                self.books.apply(&e);
            } else if let Some(last) = self
                .pending
                .last_mut()
                .filter(|l| l.limit == limit && l.idle == idle)
            {
                last.secs += secs;
                last.to = frame;
            } else {
                if self.pending.len() >= MAX_PENDING {
                    let oldest = self.pending.remove(0);
                    self.books.apply(&oldest);
                }
                self.pending.push(e);
            }
        };
        if loss {
            book(Limit::Loss, gap, false);
        } else if closed {
            book(Limit::ReceiverWindow, gap, false);
        } else if !self.last_full || self.peer_spoke {
            book(Limit::Sender, gap, idle);
        } else if regrowing && !idle {
            book(Limit::Loss, gap, false);
        } else if ended_by_data || idle {
            book(Limit::Network, gap, false);
        } else {
            // a round trip: the path's own, and queueing above it
            let path = match (self.rtt_min, self.rtt) {
                (Some(m), Some(r)) if r > 0.0 && m < r => (m / r).max(0.0),
                _ => 1.0,
            };
            let queue = gap * (1.0 - path);
            if queue > 0.5 * gap {
                book(Limit::Latency, gap - queue, false);
                book(Limit::Network, queue, false);
            } else {
                if queue > 0.0 {
                    book(Limit::Network, queue, false);
                }
                book(Limit::Latency, gap - queue, false);
            }
        }
    }

    pub fn event(&mut self, frame: u64, ts: f64, e: Event, scale_known: bool) {
        if self.t.is_none() && !matches!(e, Event::Data { .. }) {
            // before the first data: only the window and ACK matter
            if let Event::Ack { ack, win, .. } = e {
                self.flight.acknowledge(ack);
                self.flight.win = Some(win);
            }
            return;
        }
        if let Event::Data { .. } = e {
            // data after a pause with everything acknowledged: the pause counts, as the
            // conversation's turn if the receiver sent a request in it
            match (self.all_acked && self.peer_spoke, self.last_data_ts) {
                (true, Some(last)) => {
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
                _ => {
                    for e in self.pending.drain(..) {
                        self.books.apply(&e);
                    }
                }
            }
            self.all_acked = false;
        }
        if matches!(e, Event::Data { again: true, .. }) && !self.recovering() {
            // a recovery begins with the pause this retransmission ends
            self.books.spurious = 0.0;
            self.spurious_as = if self.window_closed(scale_known) {
                Limit::ReceiverWindow
            } else {
                Limit::Latency
            };
        }
        self.account(frame, ts, &e, scale_known);
        match e {
            Event::Data {
                seq,
                end,
                again,
                beyond_hole,
                full,
            } => {
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
                    // what a new segment's size says of the data waiting
                    self.last_full = full;
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
                self.flight.acknowledge(ack);
                self.flight.win = Some(win);
                if rtt.is_some() {
                    self.rtt = rtt;
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
            first: ByLimit::of(&books.first),
            longest: ByLimit::of(&books.longest),
            recoveries: self.recoveries.iter().sum(),
            recovery_by_retransmission: self.recoveries[0],
            recovery_by_duplicate_ack: self.recoveries[1],
            recovery_by_hole: self.recoveries[2],
        }
    }
}
