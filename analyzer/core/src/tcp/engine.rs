//! The TCP engine: fed packets in capture order, it tracks connections and hands the
//! reassembled streams and per-packet facts to each connection's analyses.
//!
//! Rules, in the order `feed` applies them:
//! - A connection is keyed by its 4-tuple; both orientations map to it with the direction.
//! - A SYN without ACK on a known 4-tuple starts a new connection when the old one is closed
//!   or its client ISN differs (a retransmitted SYN carries the same ISN and stays in the old).
//! - Client/server: from SYN / SYN-ACK when seen, else the lower port is the server (the
//!   report may swap them later if the application protocol says otherwise).
//! - Stream offsets are relative to the first byte after the SYN, or to the first byte seen.
//! - Classification and reassembly: see `reassembly`.
//! - A connection leaves the engine, finished, when its 4-tuple is reused or, with a linger,
//!   once it is closed (both FINs, or a RST) and `sweep` finds it silent for `linger` seconds
//!   of capture time (`settled_linger` after a RST or once both FINs are acknowledged; past
//!   MAX_SETTLED such connections waiting, the oldest go at once): memory then follows the
//!   connections open at once, not all a capture held. A later packet on its 4-tuple other
//!   than a SYN is counted as late, not taken for a new connection (the last MAX_GONE known).
//! - A connection whose packets are all handshake segments without data (SYN, SYN-ACK, their
//!   retransmissions) is kept as those packets, its number reserved, and made when another
//!   kind of packet comes (they are then fed first) or at the end: a SYN flood or a scan of
//!   unanswered ports opens a connection a packet.

use std::collections::{BTreeMap, VecDeque};

use foldhash::HashMap;

use super::connection::{Connection, ConnectionMeta};
use super::facts::{Endpoint, EngineFacts, RoleSource};
use super::observe::{PacketObserver, StreamSink};
use super::table::{Gone, KeptPacket, Key, Waiting};
use crate::capture::tunnel::Tunnel;
use crate::packet::{TcpPacket, ACK, FIN, RST, SYN};

/// Late packets whose frames are kept.
pub const MAX_LATE_FRAMES: usize = 20;
/// Settled connections waiting out settled_linger: past this, the oldest go at once (a scan
/// of 100,000 connections in 0.2 s would hold every one's analyses for the linger).
pub const MAX_SETTLED: usize = 2_000;

/// Makes each connection's analyses: the PostgreSQL decoder (the stream) and the transfer
/// measurements (the packets), or whatever a caller wants told.
pub trait Handler {
    type Analyses: PacketObserver + StreamSink;
    fn open(&mut self, meta: &ConnectionMeta) -> Self::Analyses;
}

#[derive(Clone, Copy)]
enum Queue {
    Closing,
    Settled,
}

pub struct TcpEngine<H: Handler> {
    handler: H,
    linger: Option<f64>,
    /// The settled linger in effect: never longer than linger.
    settled_linger: Option<f64>,
    /// Closed connections (by made order), in the order they closed.
    closing: VecDeque<u64>,
    /// Reset, or both FINs acknowledged, in that order. A connection retired by reuse stays
    /// until it reaches the head.
    settled: VecDeque<u64>,
    /// Those of `settled` not retired yet: what MAX_SETTLED bounds.
    settled_waiting: usize,
    /// 4-tuple -> (connection, direction), both ways.
    table: HashMap<Key, (u64, usize)>,
    /// The last two entries found in the table: a capture interleaves few busy connections,
    /// and most packets then find theirs without hashing. Emptied when the table changes.
    recent: [Option<(Key, (u64, usize))>; 2],
    /// The connections made and not retired, by the order they were made (`made`; boxed:
    /// a connection is about 1 KB, and the table moves its entries as it grows).
    live: HashMap<u64, Box<Connection<H::Analyses>>>,
    made: u64,
    opened: u64,
    /// Connections not made yet, by number, and their 4-tuples both ways.
    waiting: BTreeMap<u64, Waiting>,
    waiting_keys: HashMap<Key, u64>,
    gone: Gone,
    late_packets: u64,
    late_frames: Vec<u64>,
    /// Finished and retired, not yet taken (still boxed: a connection with its analyses is
    /// kilobytes, copied at each move).
    retired: VecDeque<Box<Connection<H::Analyses>>>,
}

impl<H: Handler> TcpEngine<H> {
    /// `linger`: retire closed connections once silent this long (None: only at the end or
    /// when their 4-tuple is reused); `settled_linger`: the same once settled.
    pub fn new(handler: H, linger: Option<f64>, settled_linger: Option<f64>) -> Self {
        let settled_linger = match (linger, settled_linger) {
            (Some(l), Some(s)) => Some(if s < l { s } else { l }),
            (l, _) => l,
        };
        TcpEngine {
            handler,
            linger,
            settled_linger,
            closing: VecDeque::new(),
            settled: VecDeque::new(),
            settled_waiting: 0,
            table: HashMap::default(),
            recent: [None, None],
            live: HashMap::default(),
            made: 0,
            opened: 0,
            waiting: BTreeMap::new(),
            waiting_keys: HashMap::default(),
            gone: Gone::default(),
            late_packets: 0,
            late_frames: Vec::new(),
            retired: VecDeque::new(),
        }
    }

    pub fn handler(&self) -> &H {
        &self.handler
    }

    pub fn handler_mut(&mut self) -> &mut H {
        &mut self.handler
    }

    /// The connections made and not retired, in the order they were made.
    pub fn live(&self) -> impl Iterator<Item = &Connection<H::Analyses>> {
        let mut made: Vec<(&u64, &Box<Connection<H::Analyses>>)> = self.live.iter().collect();
        made.sort_unstable_by_key(|(id, _)| **id);
        made.into_iter().map(|(_, c)| &**c)
    }

    /// How many connections are made and not retired.
    pub fn live_count(&self) -> usize {
        self.live.len()
    }

    /// Connections finished and retired since the last call, in the order they were retired
    /// (after `finish`: every connection).
    pub fn take_retired(&mut self) -> impl Iterator<Item = Box<Connection<H::Analyses>>> + '_ {
        self.retired.drain(..)
    }

    pub fn facts(&self) -> EngineFacts {
        EngineFacts {
            late_packets: self.late_packets,
            late_frames: self.late_frames.clone(),
            settled_linger: self.settled_linger,
            opened: self.opened,
        }
    }

    pub fn feed(&mut self, p: &TcpPacket<'_>) {
        let Some((id, d)) = self.lookup(p) else {
            return;
        };
        let lingering = self.linger.is_some();
        let Some(conn) = self.live.get_mut(&id) else {
            return;
        };
        let closing = conn.take(d, p, lingering);
        if closing.closed {
            self.closing.push_back(id);
        }
        if closing.settled {
            self.settled.push_back(id);
            self.settled_waiting += 1;
        }
    }

    /// Retire the closed connections silent since `now - linger` (capture time), the settled
    /// ones since `now - settled_linger`; call it between packets, now and then. The oldest
    /// closed first: one that still has packets holds the others back until it too is silent.
    pub fn sweep(&mut self, now: f64) {
        let (Some(linger), Some(settled)) = (self.linger, self.settled_linger) else {
            return;
        };
        self.sweep_queue(Queue::Settled, now, settled, Some(MAX_SETTLED));
        self.sweep_queue(Queue::Closing, now, linger, None);
    }

    /// The end of the capture: the connections kept as handshakes are made and retired one at
    /// a time, then every other is finished; all are then in `take_retired`.
    pub fn finish(&mut self) {
        let kept: Vec<u64> = self.waiting.keys().copied().collect();
        for number in kept {
            if let Some(id) = self.make(number) {
                self.retire(id, false);
            }
        }
        let mut live: Vec<_> = std::mem::take(&mut self.live).into_iter().collect();
        live.sort_unstable_by_key(|(id, _)| *id);
        for (_, mut conn) in live {
            conn.finish();
            self.retired.push_back(conn);
        }
        self.table.clear();
        self.recent = [None, None];
        self.closing.clear();
        self.settled.clear();
        self.settled_waiting = 0;
    }

    fn queue(&mut self, which: Queue) -> &mut VecDeque<u64> {
        match which {
            Queue::Closing => &mut self.closing,
            Queue::Settled => &mut self.settled,
        }
    }

    /// Retire from the head of a queue those silent for `linger`, and while more than `most`
    /// settled connections wait, the oldest, silent or not.
    fn sweep_queue(&mut self, which: Queue, now: f64, linger: f64, most: Option<usize>) {
        while let Some(&id) = self.queue(which).front() {
            if let Some(conn) = self.live.get(&id) {
                let crowded = most.is_some_and(|m| m < self.settled_waiting);
                if now - conn.end_ts() < linger && !crowded {
                    return;
                }
                self.retire(id, true);
            }
            self.queue(which).pop_front();
        }
    }

    /// The packet's connection and direction; None for a late packet (counted) or one kept
    /// for a connection not made yet.
    fn lookup(&mut self, p: &TcpPacket<'_>) -> Option<(u64, usize)> {
        let key = Key::of(p);
        let mut hit = self.find(&key);
        if hit.is_none() && !self.waiting_keys.is_empty() {
            if let Some(&number) = self.waiting_keys.get(&key) {
                if let Some(w) = self.waiting.get_mut(&number) {
                    if w.takes(p) {
                        w.packets.push(KeptPacket::keep(p));
                        return None;
                    }
                }
                self.make(number);
                hit = self.find(&key);
            }
        }
        if hit.is_none() && p.flags & SYN == 0 && self.gone.contains(&key, p.ts) {
            self.late_packets += 1;
            if self.late_frames.len() < MAX_LATE_FRAMES {
                self.late_frames.push(p.frame);
            }
            return None;
        }
        if let Some((id, d)) = hit {
            if p.flags & (SYN | ACK) != SYN {
                return hit;
            }
            if let Some(conn) = self.live.get(&id) {
                // A retransmitted SYN carries the same ISN; anything else reuses the 4-tuple.
                // (A connection without packets was just made for this one, from those kept.)
                let c2s = &conn.dirs[0];
                let isn = (i64::from(p.seq) + 1) & 0xFFFF_FFFF;
                if conn.packets() == 0
                    || d == 0 && c2s.isn_seen && c2s.base == isn && !conn.closed()
                {
                    return hit;
                }
            }
            self.retire(id, false);
        }
        // Kept as packets, unless the 4-tuple is its own reverse: fed again, its first packet
        // would be taken for side 1.
        if p.flags & SYN != 0
            && p.flags & (FIN | RST) == 0
            && p.plen == 0
            && (p.sport != p.dport || p.src != p.dst)
        {
            self.opened += 1;
            let number = self.opened;
            self.waiting.insert(
                number,
                Waiting {
                    number,
                    packets: vec![KeptPacket::keep(p)],
                },
            );
            self.waiting_keys.insert(key, number);
            self.waiting_keys.insert(key.reverse(), number);
            return None;
        }
        Some(self.open(p, 0))
    }

    /// The table's entry for a key, through `recent`.
    fn find(&mut self, key: &Key) -> Option<(u64, usize)> {
        for (k, hit) in self.recent.iter().flatten() {
            if k == key {
                return Some(*hit);
            }
        }
        let hit = self.table.get(key).copied()?;
        self.recent = [Some((*key, hit)), self.recent[0]];
        Some(hit)
    }

    /// A connection opened by this packet, client and server as the rules say (numbered
    /// next, or `number` when one was reserved), and the packet's direction in it.
    fn open(&mut self, p: &TcpPacket<'_>, number: u64) -> (u64, usize) {
        let from = Endpoint(p.src, p.sport);
        let to = Endpoint(p.dst, p.dport);
        let (client, server, role_source, d) = match p.flags & (SYN | ACK) {
            SYN => (from, to, RoleSource::Handshake, 0),
            f if f == SYN | ACK => (to, from, RoleSource::SynAck, 1),
            _ if p.sport < p.dport => (to, from, RoleSource::Port, 1),
            _ => (from, to, RoleSource::Port, 0),
        };
        let number = if number == 0 {
            self.opened += 1;
            self.opened
        } else {
            number
        };
        let meta = ConnectionMeta {
            number,
            client,
            server,
            role_source,
            start_ts: p.ts,
            first_frame: p.frame,
            tunnel: p.tunnel,
        };
        self.made += 1;
        let id = self.made;
        let key = Key(client.0, client.1, server.0, server.1, Key::of(p).4);
        self.recent = [None, None];
        self.table.insert(key, (id, 0));
        self.table.insert(key.reverse(), (id, 1));
        let analyses = self.handler.open(&meta);
        self.live
            .insert(id, Box::new(Connection::new(meta, analyses)));
        (id, d)
    }

    /// Make a connection kept as its handshake segments, and feed it them.
    fn make(&mut self, number: u64) -> Option<u64> {
        let w = self.waiting.remove(&number)?;
        let first = w.first()?.packet();
        let key = Key::of(&first);
        self.waiting_keys.remove(&key);
        self.waiting_keys.remove(&key.reverse());
        let (id, _) = self.open(&first, w.number);
        for kept in &w.packets {
            self.feed(&kept.packet());
        }
        Some(id)
    }

    /// Finish a connection whose 4-tuple is being reused, or (closed) that closed and went
    /// silent: its 4-tuple is then remembered, to tell late packets from new connections.
    fn retire(&mut self, id: u64, closed: bool) {
        let Some(mut conn) = self.live.remove(&id) else {
            return;
        };
        let meta = conn.meta();
        let tag = meta.tunnel.map_or(0, Tunnel::tag);
        let key = Key(
            meta.client.0,
            meta.client.1,
            meta.server.0,
            meta.server.1,
            tag,
        );
        self.recent = [None, None];
        self.table.remove(&key);
        self.table.remove(&key.reverse());
        let last = conn.end_ts();
        conn.finish();
        if conn.settled {
            self.settled_waiting = self.settled_waiting.saturating_sub(1);
        }
        if closed {
            self.gone.add(key, last);
            self.gone.add(key.reverse(), last);
        }
        self.retired.push_back(conn);
    }
}
