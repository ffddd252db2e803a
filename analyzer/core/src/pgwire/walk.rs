//! The steady state: typed messages walked one after another. DataRow and CopyData runs are
//! counted without reading their bodies (the hot loop); other messages go to handle.rs.

use super::conversation::{Conversation, State, KEEP_CAP};
use super::facts::StopReason;
use super::framing::{header, message_run, MAX_MESSAGE};
use super::messages::Role;
use super::query::Moment;
use super::shape::fits;

impl Conversation {
    /// Walk the messages of buf (stream offset `off` at buf[0]) from pos: where the bytes not
    /// consumed begin.
    pub(super) fn typed(
        &mut self,
        d: usize,
        buf: &[u8],
        pos: usize,
        off: i64,
        frame: u64,
        ts: f64,
    ) -> usize {
        let role = self.sides[d].role;
        // 'D' is DataRow from the backend, Describe from the frontend
        let big_d = if role == Role::Backend {
            Some(b'D')
        } else {
            None
        };
        let n = buf.len();
        let mut pos = pos;
        // bulk messages since the last control message, and the DataRows' body bytes
        let (mut rows, mut copies, mut nbytes, mut row_bytes) = (0u64, 0u64, 0u64, 0u64);
        // where the first and the last of them end in the stream
        let mut ends = (0i64, 0i64);
        // the last message counted ends in a later segment (for the trail's attribution)
        let mut held = false;
        while n.saturating_sub(pos) >= 5 {
            let Some((t, ln)) = header(buf, pos) else {
                break;
            };
            let at = super::conversation::at(off, pos);
            if t == b'd' || Some(t) == big_d {
                // the hot path: a run of DataRow or CopyData, counted, never parsed (the
                // first one's shape read while the connection is unproven)
                if self.evidence.is_some() && (4..=MAX_MESSAGE).contains(&ln) {
                    let body = buf
                        .get(pos + 5..n.min(pos + 1 + ln as usize))
                        .unwrap_or(&[]);
                    if !self.evident(d, t, body, ln, at, frame) {
                        return n;
                    }
                }
                let run = message_run(buf, pos);
                if rows == 0 && copies == 0 {
                    ends.0 = at.saturating_add(1).saturating_add(ln);
                }
                ends.1 = super::conversation::at(off, run.end);
                nbytes += (run.end - pos) as u64;
                if t == b'D' {
                    rows += run.count;
                    // each message is its 5-byte header and its body
                    row_bytes += ((run.end - pos) as u64).saturating_sub(5 * run.count);
                } else {
                    copies += run.count;
                }
                pos = run.end;
                if let Some(bad) = run.bad {
                    if rows > 0 || copies > 0 {
                        self.bulk(d, (rows, copies, nbytes, row_bytes), ends, frame, ts);
                    }
                    let reason = self
                        .fault(d, t, bad)
                        .unwrap_or(StopReason::LengthUnder4 { length: bad });
                    self.malformed(d, reason, super::conversation::at(off, pos), frame);
                    return n;
                }
                if pos > n {
                    // the last one continues in the next segment
                    self.sides[d].skip = (pos - n) as i64;
                    pos = n;
                    held = true;
                    break;
                }
                continue;
            }
            if rows > 0 || copies > 0 {
                self.bulk(d, (rows, copies, nbytes, row_bytes), ends, frame, ts);
                (rows, copies, nbytes, row_bytes) = (0, 0, 0, 0);
            }
            if let Some(reason) = self.fault(d, t, ln) {
                self.malformed(d, reason, super::conversation::at(off, pos), frame);
                return n;
            }
            let end = pos + 1 + ln as usize;
            let body_at = pos + 5;
            self.msg_end = at.saturating_add(1).saturating_add(ln);
            if end > n {
                if ln as usize <= KEEP_CAP {
                    break;
                }
                // read up to KEEP_CAP, the rest skipped
                let body = buf.get(body_at..n.min(body_at + KEEP_CAP)).unwrap_or(&[]);
                if self.evidence.is_some() && !self.evident(d, t, body, ln, at, frame) {
                    return n;
                }
                self.message(d, t, body, ln, frame, ts);
                self.sides[d].skip = (end - n) as i64;
                pos = n;
                held = true;
                break;
            }
            let body = buf.get(body_at..end).unwrap_or(&[]);
            if self.evidence.is_some() && !self.evident(d, t, body, ln, at, frame) {
                return n;
            }
            self.message(d, t, body, ln, frame, ts);
            pos = end;
            if self.sides[d].state == State::Stopped {
                return n;
            }
        }
        if rows > 0 || copies > 0 {
            self.bulk(d, (rows, copies, nbytes, row_bytes), ends, frame, ts);
        }
        if let (true, Some(t)) = (held, self.sides[d].counts.trail.as_mut()) {
            t.hold_last();
        }
        pos
    }

    /// While the connection is unproven, a message is evidence (detect.rs): one whose length
    /// or body does not fit its type refuses the connection (false); a type or length a side
    /// never sends (`fault`) is left to `malformed`.
    pub(super) fn evident(
        &mut self,
        d: usize,
        t: u8,
        body: &[u8],
        ln: i64,
        at: i64,
        frame: u64,
    ) -> bool {
        let role = self.sides[d].role;
        if self.fault(d, t, ln).is_some() {
            return true;
        }
        if !fits(role, t, ln, body) {
            let reason = StopReason::Misfit {
                type_byte: t,
                role,
                length: ln,
            };
            self.refuse(d, at, frame, reason);
            return false;
        }
        let leads = at == self.sides[d].seg_start;
        let Some(ev) = self.evidence.as_mut() else {
            return true;
        };
        match role {
            Role::Frontend => ev.frontend(t, frame, leads),
            Role::Backend => ev.backend(t, frame, leads),
        }
        if ev.proven() {
            self.prove();
        }
        true
    }

    /// DataRows and CopyDatas counted (rows, copies, their bytes, the rows' body bytes): the
    /// side's counts, and the query they answer (or, from the frontend, the query that asked
    /// for them: COPY FROM STDIN).
    fn bulk(
        &mut self,
        d: usize,
        run: (u64, u64, u64, u64),
        (first_end, end): (i64, i64),
        frame: u64,
        ts: f64,
    ) {
        let (rows, copies, nbytes, row_bytes) = run;
        let s = &mut self.sides[d];
        if rows > 0 {
            s.counts.add_rows(rows);
        }
        if copies > 0 {
            s.counts.add_copies(copies);
        }
        if s.role == Role::Frontend {
            if let Some(q) = self.last_query.and_then(|id| self.store.get_mut(id)) {
                q.copy_data += copies;
            }
            return;
        }
        let Some(q) = self.head().and_then(|id| self.store.get_mut(id)) else {
            return;
        };
        q.data_rows += rows;
        q.data_row_bytes += row_bytes;
        q.copy_data += copies;
        q.respond(nbytes, rows + copies, first_end, Moment { ts, frame, end });
    }
}
