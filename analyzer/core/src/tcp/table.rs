//! The engine's bookkeeping besides its connections: 4-tuple keys, the 4-tuples of retired
//! connections (to tell late packets from new connections), and connections kept as their
//! handshake segments until they are made.

use std::collections::VecDeque;
use std::hash::BuildHasher;

use foldhash::quality::RandomState;
use foldhash::HashMap;

use crate::capture::tunnel::Tunnel;
use crate::packet::{Addr, TcpPacket, ACK, FIN, RST, SYN};

/// 4-tuples of connections retired after closing, remembered (both ways: two keys each).
pub const MAX_GONE: usize = 1 << 16;
/// A retired 4-tuple is remembered this long after its connection's last packet: twice the
/// maximum segment lifetime (RFC 9293: 2 minutes), the longest a peer in TIME-WAIT may still
/// answer on it. A packet later than that is a new connection's, and an endless stream keeps
/// only the last few minutes' tuples.
pub const GONE_S: f64 = 240.0;
/// Handshake segments kept of a connection not made yet; one more makes it.
pub const MAX_WAITING: usize = 16;

/// (source address, source port, destination address, destination port, what tells the
/// tunnel that carried it from others: 0 untunnelled or an IP-in-IP tunnel).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Key(pub Addr, pub u16, pub Addr, pub u16, pub u64);

impl std::hash::Hash for Key {
    /// One write of the packed tuple: the keyed hasher (hostile captures choose the keys)
    /// then costs a third of hashing it field by field.
    fn hash<S: std::hash::Hasher>(&self, state: &mut S) {
        let mut buf = [0u8; 45];
        let (src, dst) = buf.split_at_mut(16);
        for (to, from) in src.iter_mut().zip(self.0.octets()) {
            *to = *from;
        }
        for (to, from) in dst.iter_mut().zip(self.2.octets()) {
            *to = *from;
        }
        buf[32..34].copy_from_slice(&self.1.to_be_bytes());
        buf[34..36].copy_from_slice(&self.3.to_be_bytes());
        buf[36] = u8::from(self.0.is_v6()) | u8::from(self.2.is_v6()) << 1;
        buf[37..45].copy_from_slice(&self.4.to_be_bytes());
        state.write(&buf);
    }
}

impl Key {
    pub fn of(p: &TcpPacket<'_>) -> Self {
        Key(
            p.src,
            p.sport,
            p.dst,
            p.dport,
            p.tunnel.map_or(0, Tunnel::tag),
        )
    }

    pub fn reverse(self) -> Self {
        Key(self.2, self.3, self.0, self.1, self.4)
    }
}

/// The keys retired in the last GONE_S seconds, at most the last MAX_GONE of them, each
/// with the time it was retired at; adding a key again renews it. Each is kept as a 64-bit
/// fingerprint, an eighth of a key's room: a capture of 80,000 short connections in a minute
/// remembers 65,536 keys. Two keys share a fingerprint with odds of about MAX_GONE in 2^64,
/// and the seed is the process's own, so a capture cannot choose them.
#[derive(Debug, Default)]
pub(crate) struct Gone {
    seed: RandomState,
    /// (fingerprint, retired at), in the order added; a renewed key is here twice.
    order: VecDeque<(u64, f64)>,
    /// Each fingerprint's latest retirement.
    at: HashMap<u64, f64>,
}

impl Gone {
    pub fn add(&mut self, key: Key, ts: f64) {
        let print = self.seed.hash_one(key);
        self.at.insert(print, ts);
        self.order.push_back((print, ts));
        while let Some(&(old, when)) = self.order.front() {
            if self.order.len() <= MAX_GONE && ts - when <= GONE_S {
                break;
            }
            self.order.pop_front();
            if self
                .at
                .get(&old)
                .is_some_and(|t| t.to_bits() == when.to_bits())
            {
                self.at.remove(&old);
            }
        }
    }

    /// Whether a packet at `ts` on this key belongs to a connection retired before it.
    pub fn contains(&self, key: &Key, ts: f64) -> bool {
        self.at
            .get(&self.seed.hash_one(key))
            .is_some_and(|&when| ts - when <= GONE_S)
    }
}

/// A handshake segment kept: a packet without payload, its options copied.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeptPacket {
    frame: u64,
    ts: f64,
    src: Addr,
    dst: Addr,
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    win: u16,
    options: [u8; 40],
    optlen: u8,
    options_cut: bool,
    tunnel: Option<Tunnel>,
}

impl KeptPacket {
    pub fn keep(p: &TcpPacket<'_>) -> Self {
        let mut options = [0u8; 40];
        let n = p.options.len().min(options.len());
        if let (Some(to), Some(from)) = (options.get_mut(..n), p.options.get(..n)) {
            to.copy_from_slice(from);
        }
        KeptPacket {
            frame: p.frame,
            ts: p.ts,
            src: p.src,
            dst: p.dst,
            sport: p.sport,
            dport: p.dport,
            seq: p.seq,
            ack: p.ack,
            flags: p.flags,
            win: p.win,
            options,
            optlen: u8::try_from(n).unwrap_or(40),
            options_cut: p.options_cut,
            tunnel: p.tunnel,
        }
    }

    /// The packet again, to be fed.
    pub fn packet(&self) -> TcpPacket<'_> {
        TcpPacket {
            frame: self.frame,
            ts: self.ts,
            src: self.src,
            dst: self.dst,
            sport: self.sport,
            dport: self.dport,
            seq: self.seq,
            ack: self.ack,
            flags: self.flags,
            win: self.win,
            plen: 0,
            payload: &[],
            options: self
                .options
                .get(..usize::from(self.optlen))
                .unwrap_or_default(),
            options_cut: self.options_cut,
            tunnel: self.tunnel,
        }
    }
}

/// A connection not made yet: its reserved number and its packets, all handshake segments
/// without data, the first a SYN or a SYN-ACK.
#[derive(Debug)]
pub(crate) struct Waiting {
    pub number: u64,
    pub packets: Vec<KeptPacket>,
}

impl Waiting {
    /// Whether the packet is a handshake segment the connection, once made, would take as
    /// its own (lookup's rules): a SYN-ACK, or the first SYN again (same ISN, same way).
    pub fn takes(&self, p: &TcpPacket<'_>) -> bool {
        if p.plen != 0
            || p.flags & (FIN | RST) != 0
            || p.flags & SYN == 0
            || self.packets.len() >= MAX_WAITING
        {
            return false;
        }
        if p.flags & ACK != 0 {
            return true;
        }
        self.packets.first().is_some_and(|f| {
            f.flags & ACK == 0 && f.seq == p.seq && f.sport == p.sport && f.src == p.src
        })
    }

    pub fn first(&self) -> Option<&KeptPacket> {
        self.packets.first()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(port: u16) -> Key {
        Key(
            Addr::v4([10, 0, 0, 1]),
            port,
            Addr::v4([10, 0, 0, 2]),
            5432,
            0,
        )
    }

    fn far(n: u32) -> Key {
        Key(Addr::v4(n.to_be_bytes()), 1, Addr::v4([1, 1, 1, 1]), 2, 0)
    }

    #[test]
    fn gone_keeps_at_most_max_gone_and_renews_a_key_added_again() {
        let mut g = Gone::default();
        for n in 0..MAX_GONE as u32 {
            g.add(far(n), 0.0);
        }
        g.add(far(0), 1.0); // renewed: now the newest
        g.add(key(1), 1.0);
        g.add(key(2), 1.0);
        assert!(g.contains(&far(0), 1.0));
        assert!(!g.contains(&far(1), 1.0), "the oldest goes first");
        assert!(g.contains(&key(1), 1.0) && g.contains(&key(2), 1.0));
        assert!(g.order.len() <= MAX_GONE);
        assert!(g.at.len() <= MAX_GONE);
    }

    #[test]
    fn gone_forgets_a_key_twice_the_segment_lifetime_after_it_retired() {
        let mut g = Gone::default();
        g.add(key(1), 10.0);
        assert!(g.contains(&key(1), 10.0 + GONE_S));
        assert!(
            !g.contains(&key(1), 10.5 + GONE_S),
            "a new connection's, not a late packet"
        );
        // a stream's later retirements drop it, so an endless one keeps minutes of keys
        g.add(key(2), 11.0 + GONE_S);
        assert!(!g.contains(&key(1), 10.0));
        assert_eq!((g.order.len(), g.at.len()), (1, 1));
    }

    #[test]
    fn kept_packets_keep_at_most_40_option_bytes() {
        let opts = [1u8; 60];
        let p = TcpPacket {
            frame: 3,
            ts: 1.5,
            src: Addr::v4([1, 2, 3, 4]),
            dst: Addr::v4([5, 6, 7, 8]),
            sport: 1,
            dport: 2,
            seq: 7,
            ack: 0,
            flags: SYN,
            win: 9,
            plen: 0,
            payload: &[],
            options: &opts,
            options_cut: false,
            tunnel: None,
        };
        let k = KeptPacket::keep(&p);
        let again = k.packet();
        assert_eq!(again.options.len(), 40);
        assert_eq!(
            (again.frame, again.seq, again.flags, again.win),
            (3, 7, SYN, 9)
        );
    }
}
