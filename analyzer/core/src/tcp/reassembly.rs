//! A direction's payload: classified against what the capture saw before (new, retransmitted,
//! reordered, keep-alive), counted, and handed to the stream consumer in order.
//!
//! - Data below the highest byte seen is a retransmission unless it fills a hole the capture
//!   saw open for less than OOO_THRESHOLD_S (then it is reordering, as tshark counts it).
//! - A hole becomes a capture gap once the receiver has acknowledged past it (the bytes went
//!   by but the capture missed them), when buffering it would exceed the bounds, or at the end.
//! - Bytes the snapshot length cut are told to the consumer as a gap, never invented.

use super::direction::{
    note, Direction, Resend, Segment, MAX_BUFFERED_BYTES, MAX_BUFFERED_SEGMENTS, MAX_HOLES,
    OOO_THRESHOLD_S,
};
use super::observe::{
    StreamSink, FILLS_HOLE, KEEPALIVE, NEW, OUT_OF_ORDER, PARTIAL_RETRANS, RETRANS,
};
use super::options::{first_sack_block, timestamps};

/// One packet's payload of direction d: [seq, end) in relative offsets, `payload` what the
/// capture kept of it (at most end - seq bytes).
pub(crate) struct Payload<'a> {
    pub seq: i64,
    pub end: i64,
    pub plen: i64,
    pub bytes: &'a [u8],
    /// The packet's TCP options.
    pub options: &'a [u8],
    pub frame: u64,
    pub ts: f64,
}

impl Direction {
    /// Classify, count and deliver a payload; returns its `kind` bits.
    pub(crate) fn data<S: StreamSink + ?Sized>(
        &mut self,
        d: usize,
        p: &Payload<'_>,
        sink: &mut S,
    ) -> u8 {
        let (seq, end, plen) = (p.seq, p.end, p.plen);
        let high = self.high;
        self.max_segment = self.max_segment.max(plen);
        let kind;
        if seq >= high {
            kind = if seq > high {
                if self.holes.len() < MAX_HOLES {
                    self.holes.push((high, seq));
                } else {
                    self.holes_forgotten += 1;
                }
                NEW | OUT_OF_ORDER
            } else {
                NEW
            };
            self.payload_bytes += plen;
            self.data_segments += 1;
            self.high = end;
            self.high_ts = p.ts;
        } else if end <= high {
            if plen <= 1 && seq == high - 1 {
                self.keepalives += 1;
                return KEEPALIVE;
            }
            let fresh = self.fill_holes(seq, end);
            if fresh != 0 {
                self.payload_bytes += fresh;
                self.data_segments += 1;
                if p.ts - self.high_ts < OOO_THRESHOLD_S {
                    self.ooo_segments += 1;
                    note(&mut self.ev_ooo, p.frame);
                    kind = FILLS_HOLE;
                } else {
                    self.count_retransmission(plen, p.frame);
                    kind = FILLS_HOLE | RETRANS;
                }
            } else {
                self.count_retransmission(plen, p.frame);
                kind = RETRANS;
            }
        } else {
            let fresh = end - high + self.fill_holes(seq, high);
            self.payload_bytes += fresh;
            self.data_segments += 1;
            self.count_retransmission(plen - fresh, p.frame);
            self.high = end;
            self.high_ts = p.ts;
            kind = NEW | PARTIAL_RETRANS;
        }
        if kind & (RETRANS | PARTIAL_RETRANS) != 0 {
            self.resent(d, p, sink);
        }
        let captured = i64::try_from(p.bytes.len()).unwrap_or(i64::MAX);
        if captured < plen {
            self.truncated_bytes += plen - captured;
            self.truncated_segments += 1;
            note(&mut self.ev_trunc, p.frame);
        }
        self.deliver(d, p, sink);
        kind
    }

    /// A retransmission of bytes fed already that the receiver had not acknowledged: the
    /// copy the capture saw may not have reached it. TCP hands bytes to the reader in order,
    /// so if so, those and every byte fed after them reached the reader no sooner than this
    /// copy. The receiver's next answer says which (`settle_resend`); a copy of bytes it had
    /// acknowledged already is spurious.
    fn resent<S: StreamSink + ?Sized>(&mut self, d: usize, p: &Payload<'_>, sink: &mut S) {
        let lo = p.seq.max(self.max_acked);
        if lo >= p.end.min(self.next) {
            return;
        }
        let copy = Resend {
            lo,
            hi: self.next,
            frame: p.frame,
            ts: p.ts,
            tsval: timestamps(p.options).map(|t| t.0),
        };
        // a later copy of the same bytes stands for both; an earlier copy of other bytes
        // unanswered still is taken as the one the receiver got
        if let Some(old) = self.resend.replace(copy) {
            if old.lo < lo {
                sink.resent(d, old.lo, old.hi - old.lo, old.frame, old.ts);
            }
        }
    }

    /// The receiver acknowledged up to `ack_rel` (`options` its packet's) after a resent
    /// copy: it took that copy unless its ACK reports the copy as a duplicate (a D-SACK) or
    /// echoes a timestamp older than the copy's (made before the copy came: the first copy
    /// had arrived). An ACK below the copy leaves it open.
    pub(crate) fn settle_resend<S: StreamSink + ?Sized>(
        &mut self,
        d: usize,
        ack_rel: i64,
        options: &[u8],
        sink: &mut S,
    ) {
        let Some(copy) = self.resend else {
            return;
        };
        let duplicate = first_sack_block(options).is_some_and(|(left, right)| {
            let (left, right) = (self.unwrap(left), self.unwrap(right));
            left < ack_rel && left < copy.hi && right > copy.lo
        });
        if duplicate {
            self.resend = None;
            return;
        }
        if ack_rel <= copy.lo {
            return;
        }
        self.resend = None;
        let echo = timestamps(options).map(|t| t.1);
        if let (Some(val), Some(ecr)) = (copy.tsval, echo) {
            // serial-number order: the echo precedes the copy's own TSval
            if (val.wrapping_sub(ecr) as i32) > 0 {
                return;
            }
        }
        sink.resent(d, copy.lo, copy.hi - copy.lo, copy.frame, copy.ts);
    }

    fn count_retransmission(&mut self, bytes: i64, frame: u64) {
        self.retrans_segments += 1;
        self.retrans_bytes += bytes;
        note(&mut self.ev_retrans, frame);
    }

    /// Remove [seq, end) from the open holes; return how many never-seen bytes it held.
    fn fill_holes(&mut self, seq: i64, end: i64) -> i64 {
        let mut fresh = 0;
        let mut i = self.holes.len();
        while i > 0 {
            i -= 1;
            let Some(&(h0, h1)) = self.holes.get(i) else {
                continue;
            };
            if h1 <= seq || h0 >= end {
                continue;
            }
            let (lo, hi) = (seq.max(h0), end.min(h1));
            fresh += hi - lo;
            self.holes.remove(i);
            if h0 < lo {
                self.holes.push((h0, lo));
            }
            if hi < h1 {
                self.holes.push((hi, h1));
            }
        }
        if self.holes.len() > MAX_HOLES {
            // splits past the bound: forget the holes furthest back
            self.holes.sort_by_key(|h| h.0);
            let drop = self.holes.len() - MAX_HOLES;
            self.holes_forgotten += drop as u64;
            self.holes.drain(..drop);
        }
        fresh
    }

    fn deliver<S: StreamSink + ?Sized>(&mut self, d: usize, p: &Payload<'_>, sink: &mut S) {
        if p.end <= self.next {
            return;
        }
        if p.seq > self.next {
            let replace = self.buffer.get(&p.seq).is_none_or(|old| old.end < p.end);
            if replace {
                let seg = Segment {
                    end: p.end,
                    payload: p.bytes.to_vec(),
                    frame: p.frame,
                    ts: p.ts,
                };
                self.buffered_bytes += seg.payload.len();
                if let Some(old) = self.buffer.insert(p.seq, seg) {
                    self.buffered_bytes = self.buffered_bytes.saturating_sub(old.payload.len());
                }
            }
            if self.buffered_bytes > MAX_BUFFERED_BYTES || self.buffer.len() > MAX_BUFFERED_SEGMENTS
            {
                self.bound_gaps += 1;
                if let Some(first) = self.first_buffered() {
                    self.declare_gap(d, first, p.frame, p.ts, sink);
                }
            }
            return;
        }
        self.push(d, p.seq, p.end, p.bytes, p.frame, p.ts, sink);
        if !self.buffer.is_empty() {
            self.drain(d, sink);
        }
    }

    fn first_buffered(&self) -> Option<i64> {
        self.buffer.keys().next().copied()
    }

    /// Hand [next, end) to the sink; seq <= next < end.
    #[allow(clippy::too_many_arguments)]
    fn push<S: StreamSink + ?Sized>(
        &mut self,
        d: usize,
        seq: i64,
        end: i64,
        payload: &[u8],
        frame: u64,
        ts: f64,
        sink: &mut S,
    ) {
        let skip = usize::try_from(self.next - seq).unwrap_or(usize::MAX);
        let data = payload.get(skip..).unwrap_or_default();
        if !data.is_empty() {
            sink.feed(d, data, self.next, frame, ts, self.isn_seen);
        }
        let got = self.next + i64::try_from(data.len()).unwrap_or(i64::MAX);
        if got < end {
            // snaplen cut the payload: say so, never invent it
            sink.gap(d, got, end - got, frame, ts);
        }
        self.next = end;
    }

    /// Push the buffered segments the stream has reached.
    fn drain<S: StreamSink + ?Sized>(&mut self, d: usize, sink: &mut S) {
        while let Some(entry) = self.buffer.first_entry() {
            let start = *entry.key();
            if start > self.next {
                return;
            }
            let seg = entry.remove();
            self.buffered_bytes = self.buffered_bytes.saturating_sub(seg.payload.len());
            if seg.end > self.next {
                self.push(d, start, seg.end, &seg.payload, seg.frame, seg.ts, sink);
            }
        }
    }

    /// The capture will not see [next, upto): tell the sink and count it.
    pub(crate) fn declare_gap<S: StreamSink + ?Sized>(
        &mut self,
        d: usize,
        upto: i64,
        frame: u64,
        ts: f64,
        sink: &mut S,
    ) {
        if upto <= self.next {
            return;
        }
        let size = upto - self.next;
        self.gaps += 1;
        self.missing_bytes += size;
        note(&mut self.ev_gap, frame);
        sink.gap(d, self.next, size, frame, ts);
        self.next = upto;
        // The hole will not be filled now: forget it, so a late copy counts as a retransmission.
        self.holes.retain(|h| h.1 > upto);
        self.drain(d, sink);
    }

    /// The receiver acknowledged bytes of this direction up to ack_rel: a hole below it was
    /// missed by the capture.
    pub(crate) fn gap_acked<S: StreamSink + ?Sized>(
        &mut self,
        d: usize,
        ack_rel: i64,
        frame: u64,
        ts: f64,
        sink: &mut S,
    ) {
        if let Some(first) = self.first_buffered() {
            if ack_rel >= first {
                self.declare_gap(d, first, frame, ts, sink);
            }
        }
    }

    /// At the end: what is still buffered follows gaps, and bytes acknowledged past the
    /// highest seen were missed at the tail (a FIN takes one sequence number).
    pub(crate) fn finish<S: StreamSink + ?Sized>(
        &mut self,
        d: usize,
        frame: u64,
        ts: f64,
        sink: &mut S,
    ) {
        while let Some(first) = self.first_buffered() {
            let before = self.buffer.len();
            self.declare_gap(d, first, frame, ts, sink);
            if self.buffer.len() == before {
                // (cannot happen: every buffered start is past `next`) never loop forever
                self.drain(d, sink);
                if self.buffer.len() == before {
                    self.buffer.clear();
                    self.buffered_bytes = 0;
                }
            }
        }
        if let Some(copy) = self.resend.take() {
            // never answered within the capture: as for any copy unacknowledged when sent
            sink.resent(d, copy.lo, copy.hi - copy.lo, copy.frame, copy.ts);
        }
        let acked = self.max_acked - i64::from(self.fin_at.is_some());
        if acked > self.high && self.high >= self.next {
            self.high = acked;
            self.declare_gap(d, acked, frame, ts, sink);
        }
    }
}
