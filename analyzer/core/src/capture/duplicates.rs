//! The same packet captured twice: `tcpdump -i any` on a host with a bridge sees each packet
//! on the port it came in by and on the one it left by, a mirror session may deliver it from
//! both ends. Unnoticed, the second copy is a retransmission to the TCP engine. A TCP packet
//! whose IP and TCP headers and length are those of one within DUP_WINDOW_S before it (its hop
//! count and the IPv4 header checksum aside: a host that routes between the two copies changes
//! them; the TCP checksum sums the payload) and that came through the same tunnel is a copy:
//! counted, not handed on (editcap -d's idea, by content within a time window).
//!
//! A sender's own retransmission is never such a copy: its IPv4 identification or TCP
//! timestamp differs, and none comes within 10 ms (Linux's shortest tail-loss probe; the
//! shortest retransmission timeout is 200 ms).

use std::hash::{BuildHasher, Hasher};

use foldhash::fast::FixedState;
use serde::Serialize;

/// Copies come within microseconds; a retransmission never within 10 ms.
pub const DUP_WINDOW_S: f64 = 0.005;
/// Slots of the table of recent packets: a packet's identity picks its slot, and a later
/// packet whose identity picks the same one takes it. A copy comes microseconds after its
/// twin, a record or two later, so its twin's slot is all but never taken meanwhile (each
/// record between them takes it with a chance of 1 in 4,096: a copy 100 records late is
/// missed 2.4% of the time). Looked up in place, the table costs a packet no allocation and
/// stays in the cache (128 KB), where a map and a queue of the window's packets took a tenth
/// of a bulk transfer's pass, and a table of 16,384 slots missed the cache on every packet.
const SLOTS: usize = 1 << 12;
/// Duplicate frames kept as evidence.
pub const MAX_FRAMES: usize = 20;

/// What was dropped, for the report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Duplicates {
    pub packets: u64,
    /// (the copy's frame, the frame it copies), the first MAX_FRAMES.
    pub frames: Vec<(u64, u64)>,
}

/// A packet remembered: its identity, time and frame (0: an empty slot; frames count from 1).
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    id: u128,
    ts: f64,
    frame: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Recent {
    /// Made at the first packet.
    slots: Vec<Slot>,
    pub duplicates: Duplicates,
}

/// The bytes after the first 12 that an identity covers: the rest of an IPv4 header and a
/// TCP header with its options, or an IPv6 header and the TCP header's first 36 bytes (its
/// checksum among them).
const HEADERS: usize = 64;

/// The identity of an IP packet: its headers as captured (TTL / hop limit and the IPv4
/// checksum zeroed), its length and the tunnel's tag; two independent 64-bit hashes. The
/// payload is left out: the TCP checksum already sums it, and two transmissions by a sender
/// differ in their headers (IPv4 identification, the sequence number, a timestamp) where a
/// payload could not tell them apart anyway (a retransmission carries the same bytes).
/// Hashing every byte of a bulk transfer twice was a tenth of the pass.
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
    let headers = rest.get(..HEADERS).unwrap_or(rest);
    let hash = |seed: u64| {
        let mut h = FixedState::with_seed(seed).build_hasher();
        h.write(&head);
        h.write(headers);
        h.write_u64(tag);
        h.write_usize(ip.len());
        h.finish()
    };
    u128::from(hash(0x243F_6A88_85A3_08D3)) << 64 | u128::from(hash(0x1319_8A2E_0370_7344))
}

impl Recent {
    /// Whether the TCP packet of record `frame` at `ts`, its IP packet `ip` (what was captured
    /// of it) through a tunnel of `tag`, copies one just before; it is remembered if not.
    pub fn copy(&mut self, ts: f64, ip: &[u8], tag: u64, frame: u64) -> bool {
        if self.slots.is_empty() {
            self.slots = vec![Slot::default(); SLOTS];
        }
        let id = identity(ip, tag);
        let Some(slot) = self.slots.get_mut(id as usize % SLOTS) else {
            return false;
        };
        // a step back in time (interfaces merged out of order) still finds its twin
        if slot.frame != 0 && slot.id == id && (ts - slot.ts).abs() <= DUP_WINDOW_S {
            let d = &mut self.duplicates;
            d.packets += 1;
            if d.frames.len() < MAX_FRAMES {
                d.frames.push((frame, slot.frame));
            }
            return true;
        }
        *slot = Slot { id, ts, frame };
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
    fn memory_is_bounded_and_a_copy_found_past_many_packets() {
        let mut r = Recent::default();
        assert!(!r.copy(1.0, &ip(9, 64, b"first"), 0, 1));
        for i in 0..20_000u32 {
            assert!(!r.copy(1.0, &ip(0, 64, &i.to_be_bytes()), 0, u64::from(i) + 2));
        }
        assert_eq!(r.slots.len(), SLOTS);
        // a copy 20,000 packets later is found unless one of them took its twin's slot
        let taken = (0..20_000u32).any(|i| {
            identity(&ip(0, 64, &i.to_be_bytes()), 0) as usize % SLOTS
                == identity(&ip(9, 64, b"first"), 0) as usize % SLOTS
        });
        assert_eq!(r.copy(1.001, &ip(9, 63, b"first"), 0, 30_000), !taken);
    }
}
