//! What one direction's sender has in flight, as seen at the capture point: the highest byte
//! sent, the highest acknowledged, the receiver's latest window and the largest segment. The
//! one bookkeeping both the measurements (flow.rs) and the time per limit (limits.rs) read;
//! each decides which segments and ACKs it feeds it.

/// A direction's bytes sent and acknowledged, and its receiver's window.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Flight {
    /// The end of the highest byte sent.
    pub high: i64,
    /// The highest byte acknowledged; None before the first ACK.
    pub acked: Option<i64>,
    /// The receiver's latest window (as carried, scaled when the scale is known).
    pub win: Option<i64>,
    /// The largest segment sent.
    pub maxseg: i64,
}

impl Flight {
    /// A segment [seq, end) sent.
    pub fn sent(&mut self, seq: i64, end: i64) {
        self.segment(end.wrapping_sub(seq));
        self.reach(end);
    }

    /// A segment of `n` bytes, whatever it carried.
    pub fn segment(&mut self, n: i64) {
        if n > self.maxseg {
            self.maxseg = n;
        }
    }

    /// Bytes sent up to `end`.
    pub fn reach(&mut self, end: i64) {
        if end > self.high {
            self.high = end;
        }
    }

    /// An ACK of `ack`: the bytes acknowledged before it when it acknowledges more (None
    /// for the first ACK, which only sets where acknowledgement stands), else no change.
    pub fn acknowledge(&mut self, ack: i64) -> Option<Option<i64>> {
        match self.acked {
            Some(a) if ack <= a => None,
            before => {
                self.acked = Some(ack);
                Some(before)
            }
        }
    }

    /// Highest byte sent minus highest acknowledged (None before the first ACK); negative
    /// when the receiver acknowledged bytes the capture never saw sent.
    pub fn outstanding(&self) -> Option<i64> {
        self.acked.map(|a| self.high.wrapping_sub(a))
    }

    /// Bytes in flight: what is outstanding, none before the first ACK.
    pub fn in_flight(&self) -> i64 {
        self.outstanding().unwrap_or(0).max(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_flight_is_sent_less_acknowledged() {
        let mut f = Flight::default();
        f.sent(0, 1448);
        f.sent(1448, 2896);
        assert_eq!((f.outstanding(), f.in_flight(), f.maxseg), (None, 0, 1448));
        assert_eq!(f.acknowledge(0), Some(None), "the first ACK sets the base");
        assert_eq!(f.in_flight(), 2896);
        assert_eq!(f.acknowledge(1448), Some(Some(0)));
        assert_eq!(f.acknowledge(1448), None, "nothing new");
        assert_eq!(f.acknowledge(1000), None, "behind");
        assert_eq!(f.in_flight(), 1448);
        f.sent(0, 100); // a resent segment moves nothing forward
        assert_eq!((f.high, f.maxseg), (2896, 1448));
        assert_eq!(f.acknowledge(4000), Some(Some(1448)));
        assert_eq!((f.outstanding(), f.in_flight()), (Some(-1104), 0));
    }
}
