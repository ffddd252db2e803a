//! A TCP connection: two directions, who is client and server, and its analyses; what one
//! packet does to it once the engine has found it.

use super::direction::{note, Direction};
use super::facts::{ClosedBy, ConnectionFacts, Endpoint, RoleSource};
use super::observe::{Observed, PacketObserver, StreamSink, SACK_ABOVE, SACK_DUPLICATE};
use super::options::{first_sack_block, parse_syn_options, proved_scale};
use super::reassembly::Payload;
use crate::capture::tunnel::Tunnel;
use crate::packet::{TcpPacket, ACK, FIN, RST, SYN};

/// What a connection's analyses are told when it is made.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ConnectionMeta {
    pub number: u64,
    pub client: Endpoint,
    pub server: Endpoint,
    pub role_source: RoleSource,
    /// The first packet's time and frame.
    pub start_ts: f64,
    pub first_frame: u64,
    /// The tunnel that carried its first packet (its key tells the tunnel's flows apart).
    pub tunnel: Option<Tunnel>,
}

/// What a packet changed in how a connection closes (for the engine's queues).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Closing {
    /// It closed with this packet (both FINs, or a RST).
    pub closed: bool,
    /// It settled with this packet: a RST, or both FINs acknowledged.
    pub settled: bool,
}

#[derive(Debug)]
pub struct Connection<A> {
    meta: ConnectionMeta,
    end_ts: f64,
    last_frame: u64,
    packets: u64,
    closed_by: Option<ClosedBy>,
    handshake_seen: bool,
    syn_frames: Vec<u64>,
    /// [0] client->server, [1] server->client (the engine's view).
    pub(crate) dirs: [Direction; 2],
    analyses: A,
    finished: bool,
    pub(crate) settled: bool,
}

impl<A> Connection<A> {
    pub(crate) fn new(meta: ConnectionMeta, analyses: A) -> Self {
        Connection {
            meta,
            end_ts: meta.start_ts,
            last_frame: meta.first_frame,
            packets: 0,
            closed_by: None,
            handshake_seen: false,
            syn_frames: Vec::new(),
            dirs: [Direction::default(), Direction::default()],
            analyses,
            finished: false,
            settled: false,
        }
    }

    pub fn meta(&self) -> &ConnectionMeta {
        &self.meta
    }

    pub fn number(&self) -> u64 {
        self.meta.number
    }

    pub fn packets(&self) -> u64 {
        self.packets
    }

    pub fn end_ts(&self) -> f64 {
        self.end_ts
    }

    pub fn is_finished(&self) -> bool {
        self.finished
    }

    pub fn analyses(&self) -> &A {
        &self.analyses
    }

    pub fn analyses_mut(&mut self) -> &mut A {
        &mut self.analyses
    }

    pub fn into_analyses(self) -> A {
        self.analyses
    }

    /// Whether the capture saw the start of direction d's stream (its SYN).
    pub fn isn_seen(&self, d: usize) -> bool {
        self.dirs.get(d).is_some_and(|m| m.isn_seen)
    }

    /// Both FINs, or a RST.
    pub(crate) fn closed(&self) -> bool {
        let [a, b] = &self.dirs;
        a.rst || b.rst || (a.fin_at.is_some() && b.fin_at.is_some())
    }

    pub fn facts(&self) -> ConnectionFacts {
        let [c2s, s2c] = &self.dirs;
        ConnectionFacts {
            number: self.meta.number,
            client: self.meta.client,
            server: self.meta.server,
            handshake_seen: self.handshake_seen,
            role_source: self.meta.role_source,
            tunnel: self.meta.tunnel,
            start_ts: self.meta.start_ts,
            end_ts: self.end_ts,
            first_frame: self.meta.first_frame,
            last_frame: self.last_frame,
            packets: self.packets,
            closed_by: self.closed_by,
            syn_frames: self.syn_frames.clone(),
            directions: [c2s.facts(s2c), s2c.facts(c2s)],
        }
    }
}

impl<A: PacketObserver + StreamSink> Connection<A> {
    /// One packet of direction d (0: from the client).
    pub(crate) fn take(&mut self, d: usize, p: &TcpPacket<'_>, lingering: bool) -> Closing {
        self.packets += 1;
        self.end_ts = p.ts;
        self.last_frame = p.frame;
        let flags = p.flags;
        let plen = i64::from(p.plen);
        let Connection {
            dirs: [c2s, s2c],
            analyses,
            ..
        } = self;
        let (mine, peer) = if d == 0 { (c2s, s2c) } else { (s2c, c2s) };

        let (seq_rel, end) = if flags & SYN != 0 {
            mine.syn = Some(parse_syn_options(p.options, p.options_cut));
            mine.syn_cut_frame = p.options_cut.then_some(p.frame);
            mine.base = (i64::from(p.seq) + 1) & 0xFFFF_FFFF;
            mine.isn_seen = true;
            self.syn_frames.push(p.frame);
            if flags & ACK != 0 {
                self.handshake_seen = peer.isn_seen;
            }
            mine.update_scale(peer.syn);
            peer.update_scale(mine.syn);
            (0, 0)
        } else {
            if mine.base < 0 {
                mine.base = i64::from(p.seq);
            }
            let seq_rel = mine.unwrap(p.seq);
            (seq_rel, seq_rel + plen)
        };

        // The peer's stream: this packet acknowledges up to ack_rel.
        let mut ack_rel = -1;
        if flags & ACK != 0 {
            if peer.base < 0 {
                peer.base = i64::from(p.ack);
            }
            ack_rel = peer.unwrap(p.ack);
            if ack_rel > peer.max_acked {
                peer.max_acked = ack_rel;
                if !peer.buffer.is_empty() {
                    peer.gap_acked(1 - d, ack_rel, p.frame, p.ts, analyses);
                }
            }
            if peer.resend.is_some() {
                peer.settle_resend(1 - d, ack_rel, p.options, analyses);
            }
        }

        // Window: scaled when the handshake proves the factor; SYN windows are never scaled.
        let win = i64::from(p.win);
        let mut scaled_win = win;
        if flags & SYN == 0 {
            scaled_win = win << mine.wscale;
            if win == 0 && flags & (RST | FIN) == 0 {
                mine.zero_window_events += 1;
                note(&mut mine.ev_zero, p.frame);
            } else if plen == 0
                && flags & (FIN | RST) == 0
                && win != mine.last_win
                && mine.last_win >= 0
                && ack_rel == mine.last_ack
                && seq_rel == mine.last_seq
            {
                mine.window_updates += 1;
            }
            // Data sent beyond the receiver's raw window proves a minimum scale factor.
            if plen != 0 && !peer.wscale_known && peer.last_win > 0 && peer.last_ack >= 0 {
                peer.wscale_lb = proved_scale(peer.wscale_lb, peer.last_win, end - peer.last_ack);
            }
        }
        mine.last_win = win;
        mine.last_ack = ack_rel;
        mine.last_seq = seq_rel;

        let mut kind = 0;
        if plen != 0 {
            // what the capture kept, never more than the wire length
            let bytes = p
                .payload
                .get(..usize::try_from(p.plen).unwrap_or(usize::MAX))
                .unwrap_or(p.payload);
            let payload = Payload {
                seq: seq_rel,
                end,
                plen,
                bytes,
                options: p.options,
                frame: p.frame,
                ts: p.ts,
            };
            kind = mine.data(d, &payload, analyses);
        }

        let mut out = Closing::default();
        if flags & (FIN | RST) != 0 {
            let was_open = self.closed_by.is_none();
            if flags & FIN != 0 {
                mine.fin_at = Some(end);
                if was_open && peer.fin_at.is_some() {
                    self.closed_by = Some(ClosedBy::Fin);
                }
            }
            if flags & RST != 0 {
                mine.rst = true;
                self.closed_by = Some(ClosedBy::Rst);
            }
            out.closed = was_open && self.closed_by.is_some() && lingering;
        }
        if lingering
            && !self.settled
            && (self.closed_by == Some(ClosedBy::Rst)
                || self.closed_by.is_some()
                    && mine.max_acked > mine.fin_at.unwrap_or(0)
                    && peer.max_acked > peer.fin_at.unwrap_or(0))
        {
            // A RST, or both FINs acknowledged: what can still come is what crossed the RST
            // (a round trip), or a FIN retransmitted for an ACK lost past the capture point,
            // an RTO later (200 ms at least, doubling).
            self.settled = true;
            out.settled = true;
        }
        let (scale_known, mss) = if d == 0 {
            (
                [mine.wscale_known, peer.wscale_known],
                [mine.syn.and_then(|s| s.mss), peer.syn.and_then(|s| s.mss)],
            )
        } else {
            (
                [peer.wscale_known, mine.wscale_known],
                [peer.syn.and_then(|s| s.mss), mine.syn.and_then(|s| s.mss)],
            )
        };
        let sack = match first_sack_block(p.options) {
            Some((left, _)) if ack_rel >= 0 => {
                if peer.unwrap(left) < ack_rel {
                    SACK_DUPLICATE
                } else {
                    SACK_ABOVE
                }
            }
            _ => 0,
        };
        analyses.on_packet(&Observed {
            d,
            frame: p.frame,
            ts: p.ts,
            seq: seq_rel,
            end,
            ack: ack_rel,
            win: scaled_win,
            flags,
            kind,
            scale_known,
            mss,
            sack,
        });
        out
    }

    /// Declare what will never come as gaps, then finish the analyses (the sink first).
    pub(crate) fn finish(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        let (frame, ts) = (self.last_frame, self.end_ts);
        for (d, m) in self.dirs.iter_mut().enumerate() {
            m.finish(d, frame, ts, &mut self.analyses);
        }
        StreamSink::finish(&mut self.analyses);
        let [c2s, s2c] = &self.dirs;
        let info = [c2s.info(s2c), s2c.info(c2s)];
        PacketObserver::finish(&mut self.analyses, &info);
    }
}
