//! The same packet captured twice: `tcpdump -i any` on a host with a bridge sees each packet
//! on the port it came in by and on the one it left by, a mirror session may deliver it from
//! both ends. Unnoticed, the second copy is a retransmission to the TCP engine. A TCP packet
//! whose IP packet has the same bytes as one within DUP_WINDOW_S before it (its hop count and
//! the IPv4 header checksum aside: a host that routes between the two copies changes them)
//! and that came through the same tunnel is a copy: counted, not handed on (editcap -d's
//! idea, by content within a time window).
//!
//! A sender's own retransmission is never such a copy: its IPv4 identification or TCP
//! timestamp differs, and none comes within 10 ms (Linux's shortest tail-loss probe; the
//! shortest retransmission timeout is 200 ms).

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hasher};

use foldhash::fast::FixedState;
use foldhash::HashMap;
use serde::Serialize;

/// Copies come within microseconds; a retransmission never within 10 ms.
pub const DUP_WINDOW_S: f64 = 0.005;
/// Packets remembered, however many the window holds (memory stays bounded).
pub const MAX_RECENT: usize = 4096;
/// Duplicate frames kept as evidence.
pub const MAX_FRAMES: usize = 20;

/// What was dropped, for the report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Duplicates {
    pub packets: u64,
    /// (the copy's frame, the frame it copies), the first MAX_FRAMES.
    pub frames: Vec<(u64, u64)>,
}

#[derive(Debug, Default)]
pub(crate) struct Recent {
    /// (time, identity), oldest first: what leaves the window first.
    seen: VecDeque<(f64, u128)>,
    /// identity -> (time, frame) of the packets in the window.
    index: HashMap<u128, (f64, u64)>,
    pub duplicates: Duplicates,
}

/// The bytes after the first 12 that the identity's second half hashes: the rest of an IPv4
/// header and a TCP header with options (an IPv6 header's addresses, and its TCP ports).
const HEADERS: usize = 64;

/// The identity of an IP packet: its bytes as captured, TTL / hop limit and the IPv4
/// checksum zeroed, and the tunnel's tag: a 64-bit hash of them all, and one of the headers
/// alone with the length. A packet's payload is hashed once (a bulk transfer's every byte
/// went through it twice, and a keyed hash indexed the identities).
fn identity(ip: &[u8], tag: u64) -> u128 {
    let mut head = [0u8; 12];
    let n = ip.len().min(12);
    if let (Some(h), Some(src)) = (head.get_mut(..n), ip.get(..n)) {
        h.copy_from_slice(src);
    }
    match head[0] >> 4 {
        4 => {
            head[8] = 0; // TTL
            head[10] = 0; // header checksum
            head[11] = 0;
        }
        6 => head[7] = 0, // hop limit
        _ => {}
    }
    let rest = ip.get(12..).unwrap_or(&[]);
    let hash = |seed: u64, bytes: &[u8]| {
        let mut h = FixedState::with_seed(seed).build_hasher();
        h.write(&head);
        h.write(bytes);
        h.write_u64(tag);
        h.write_usize(ip.len());
        h.finish()
    };
    let headers = rest.get(..HEADERS).unwrap_or(rest);
    u128::from(hash(0x243F_6A88_85A3_08D3, rest)) << 64
        | u128::from(hash(0x1319_8A2E_0370_7344, headers))
}

impl Recent {
    /// Whether the TCP packet of record `frame` at `ts`, its IP packet `ip` (what was captured
    /// of it) through a tunnel of `tag`, copies one just before; it is remembered if not.
    pub fn copy(&mut self, ts: f64, ip: &[u8], tag: u64, frame: u64) -> bool {
        while let Some(&(t, old)) = self.seen.front() {
            if ts - t <= DUP_WINDOW_S && self.seen.len() < MAX_RECENT {
                break;
            }
            self.seen.pop_front();
            if self.index.get(&old).is_some_and(|&(at, _)| at == t) {
                self.index.remove(&old);
            }
        }
        let id = identity(ip, tag);
        // a step back in time (interfaces merged out of order) still finds its twin
        if let Some(&(_, of)) = self
            .index
            .get(&id)
            .filter(|&&(t, _)| (ts - t).abs() <= DUP_WINDOW_S)
        {
            let d = &mut self.duplicates;
            d.packets += 1;
            if d.frames.len() < MAX_FRAMES {
                d.frames.push((frame, of));
            }
            return true;
        }
        self.seen.push_back((ts, id));
        self.index.insert(id, (ts, frame));
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(id: u16, ttl: u8, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0x45, 0, 0, 40];
        p.extend(id.to_be_bytes());
        p.extend([0x40, 0, ttl, 6, 0xab, 0xcd]);
        p.extend([10, 0, 0, 1, 10, 0, 0, 2]);
        p.extend(payload);
        p
    }

    #[test]
    fn copies_within_the_window_only() {
        let mut r = Recent::default();
        assert!(!r.copy(1.0, &ip(7, 64, b"seg"), 0, 1));
        // the same packet on another interface, after a routing hop
        assert!(r.copy(1.000_01, &ip(7, 63, b"seg"), 0, 2));
        // a retransmission: another IP identification
        assert!(!r.copy(1.000_02, &ip(8, 64, b"seg"), 0, 3));
        // another tunnel: another network's packet
        assert!(!r.copy(1.000_03, &ip(7, 64, b"seg"), 5, 4));
        // too late to be a copy
        assert!(!r.copy(1.02, &ip(7, 64, b"seg"), 0, 5));
        assert_eq!(r.duplicates.packets, 1);
        assert_eq!(r.duplicates.frames, [(2, 1)]);
    }

    #[test]
    fn memory_is_bounded() {
        let mut r = Recent::default();
        for i in 0..20_000u32 {
            r.copy(1.0, &ip(0, 64, &i.to_be_bytes()), 0, u64::from(i));
        }
        assert!(r.seen.len() <= MAX_RECENT && r.index.len() <= MAX_RECENT);
    }
}
