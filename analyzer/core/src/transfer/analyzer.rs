//! The per-connection observer: splits each packet into the data of its own direction and
//! the ACK and window it carries about the other's, and times the handshake.

use super::flow::Flow;
use crate::packet::{ACK, SYN};
use crate::tcp::observe::{DirectionInfo, Observed, PacketObserver};

#[derive(Clone, Debug)]
pub struct TransferAnalyzer {
    /// flows[d]'s windows are advertised by side 1 - d.
    pub(super) flows: [Flow; 2],
    /// The client's SYN, the server's SYN-ACK (after a SYN), the client's ACK completing the
    /// handshake: epoch seconds, the latest seen of each.
    pub(super) syn_ts: [Option<f64>; 3],
    /// SYN-ACK seen, the client's ACK not yet.
    await_hs_ack: bool,
    /// SYN-ACK minus SYN (seconds) as they stood when the first data segment came.
    pub(super) handshake: Option<f64>,
    pub(super) info: Option<[DirectionInfo; 2]>,
}

impl Default for TransferAnalyzer {
    fn default() -> Self {
        TransferAnalyzer::new()
    }
}

impl TransferAnalyzer {
    /// Seconds given to each limit so far in direction `d` (engine direction).
    pub fn limit_seconds(&self, d: usize) -> Option<[f64; super::limits::LIMITS]> {
        self.flows.get(d).map(|f| f.chrono.seconds_so_far())
    }

    /// For a connection the engine has just met: no window scale is known yet.
    pub fn new() -> Self {
        TransferAnalyzer::with_scale_known([false, false])
    }

    /// `known[side]`: whether side's window scale is known (it is read again at every SYN,
    /// from the packet's `scale_known`, and at finish).
    pub fn with_scale_known(known: [bool; 2]) -> Self {
        TransferAnalyzer {
            flows: [Flow::new(known[1]), Flow::new(known[0])],
            syn_ts: [None; 3],
            await_hs_ack: false,
            handshake: None,
            info: None,
        }
    }

    fn syn(&mut self, p: &Observed) {
        if p.flags & ACK == 0 {
            self.syn_ts[0] = Some(p.ts);
        } else if self.syn_ts[0].is_some() {
            self.syn_ts[1] = Some(p.ts);
            self.await_hs_ack = self.syn_ts[2].is_none();
        }
        let [f0, f1] = &mut self.flows;
        f0.scale_known = p.scale_known[1];
        f1.scale_known = p.scale_known[0];
    }
}

impl PacketObserver for TransferAnalyzer {
    fn on_packet(&mut self, p: &Observed) {
        let d = p.d;
        if d > 1 {
            return;
        }
        if p.flags & SYN != 0 {
            self.syn(p);
            return;
        }
        if self.await_hs_ack && d == 0 && p.flags & ACK != 0 {
            self.syn_ts[2] = Some(p.ts); // the client's ACK completing the handshake
            self.await_hs_ack = false;
        }
        let has_data = p.end > p.seq;
        let timed = if let [Some(syn), Some(synack), Some(ack)] = self.syn_ts {
            // an ACK seen here reaches a direction's sender, and its answer comes back, after
            // the round trip between the capture point and that sender: the handshake times
            // it for each side (the server answers the SYN, the client the SYN-ACK, at once)
            let [f0, f1] = &mut self.flows;
            f0.chrono.far_s = (ack - synack).max(0.0);
            f1.chrono.far_s = (synack - syn).max(0.0);
            true
        } else {
            false
        };
        let [f0, f1] = &mut self.flows;
        let (mine, theirs) = if d == 0 { (f0, f1) } else { (f1, f0) };
        // the MSS the receiver of each direction's data announced
        if let Some(m) = p.mss.get(1 - d).copied().flatten() {
            mine.mss = Some(i64::from(m));
        }
        if let Some(m) = p.mss.get(d).copied().flatten() {
            theirs.mss = Some(i64::from(m));
        }
        if let (false, Some(m)) = (timed, mine.rtt_min) {
            // without the handshake: this direction's own data waits for its ACKs at the
            // least that round trip (and longer, by the other side's delayed ACKs and work)
            theirs.chrono.far_s = m;
        }
        if p.ack >= 0 {
            // this packet's window and ACK speak about the other direction's data
            theirs.ack(p.frame, p.ts, p.ack, p.win, p.flags, has_data, p.sack);
        }
        if has_data {
            if mine.first_ts.is_none() && self.handshake.is_none() {
                if let [Some(syn), Some(synack), _] = self.syn_ts {
                    self.handshake = Some(synack - syn);
                }
            }
            mine.data(p.frame, p.ts, p.seq, p.end, p.kind, p.flags);
        }
    }

    fn finish(&mut self, info: &[DirectionInfo; 2]) {
        self.info = Some(*info);
        let [f0, f1] = &mut self.flows;
        f0.finish(info[1].window_scale_known);
        f1.finish(info[0].window_scale_known);
    }
}
