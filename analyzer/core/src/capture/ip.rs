//! IPv4 / IPv6 / TCP headers (capture/ip.py). Payload lengths come from the IP header (what
//! was on the wire), never from the captured length: a snaplen cut shortens the payload but
//! not `plen`, and Ethernet padding is not payload. Checksums are not checked. A tunnel
//! (tunnel.rs) hands back where the packet it carries starts.

use super::link::IpStart;
use super::tunnel::{self, Tunnel};
use crate::packet::Addr;

/// Why a frame is not handed on as a TCP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// Not IP, not TCP, or a link type not decoded.
    NotTcp,
    /// An IP fragment (IPv4 MF or offset; any IPv6 fragment header).
    Fragment,
    /// TCP over IP but the IP header or TCP's first 20 bytes cut by the snapshot length, or
    /// malformed.
    Undecodable,
}

/// A decoded TCP header: offsets into the frame it came from, so the packet borrows the
/// reader's buffer only when it is handed out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tcp {
    pub src: Addr,
    pub dst: Addr,
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub win: u16,
    pub plen: u32,
    /// frame[payload.0..payload.1]: the captured payload.
    pub payload: (usize, usize),
    /// frame[options.0..options.1]: raw TCP options (what was captured of them).
    pub options: (usize, usize),
    /// The snapshot length cut the options: what they say past the cut is unknown.
    pub options_cut: bool,
}

/// IPv6 extension headers walked to reach TCP: hop-by-hop, routing, destination options, AH
/// (a fragment header, 44, makes the packet a fragment).
const V6_EXT: [u8; 4] = [0, 43, 60, 51];

const TCP: u8 = 6;
const UDP: u8 = 17;
const GRE: u8 = 47;
const IPV4_IN_IP: u8 = 4;
const IPV6_IN_IP: u8 = 41;

/// What an IP packet holds: TCP, or a tunnel and where the packet it carries starts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Decoded {
    Tcp(Tcp),
    Tunnel(Tunnel, IpStart),
}

/// The transport at `t` of an IP packet of `version` ending at `ip_end`: TCP, or a tunnel.
fn transport(
    f: &[u8],
    proto: u8,
    version: u8,
    t: usize,
    ip_end: usize,
    src: Addr,
    dst: Addr,
) -> Result<Decoded, Skip> {
    let carried = match proto {
        TCP => return tcp(f, t, ip_end, src, dst).map(Decoded::Tcp),
        UDP if f.len() >= t + 8 => tunnel::udp(f, be16(f, t + 2), t + 8),
        GRE => tunnel::gre(f, t),
        IPV4_IN_IP | IPV6_IN_IP => tunnel::ipip(proto, version, t),
        _ => None,
    };
    carried
        .map(|(tn, start)| Decoded::Tunnel(tn, start))
        .ok_or(Skip::NotTcp)
}

/// Decode the IP and TCP headers of `f`, whose IP header (of `version`) starts at `off`.
pub fn decode(f: &[u8], version: u8, off: usize) -> Result<Decoded, Skip> {
    let n = f.len();
    match version {
        4 => {
            if n < off + 20 {
                return Err(Skip::Undecodable);
            }
            let vihl = byte(f, off);
            let ihl = usize::from(vihl & 0x0F) * 4;
            if vihl >> 4 != 4 || ihl < 20 {
                return Err(Skip::Undecodable);
            }
            let proto = byte(f, off + 9);
            if !matches!(proto, TCP | UDP | GRE | IPV4_IN_IP | IPV6_IN_IP) {
                return Err(Skip::NotTcp);
            }
            if byte(f, off + 6) & 0x3F != 0 || byte(f, off + 7) != 0 {
                return Err(Skip::Fragment);
            }
            let mut total = usize::from(be16(f, off + 2));
            if total == 0 {
                total = n - off; // TSO on the capturing host: the length is not filled in yet
            }
            let src = Addr::v4(arr(f, off + 12));
            let dst = Addr::v4(arr(f, off + 16));
            transport(f, proto, 4, off + ihl, off + total, src, dst)
        }
        6 => {
            if n < off + 40 {
                return Err(Skip::Undecodable);
            }
            let ip_end = off + 40 + usize::from(be16(f, off + 4));
            let mut t = off + 40;
            let mut nxt = byte(f, off + 6);
            while !matches!(nxt, TCP | UDP | GRE | IPV4_IN_IP | IPV6_IN_IP) {
                if nxt == 44 {
                    return Err(Skip::Fragment);
                }
                if !V6_EXT.contains(&nxt) {
                    return Err(Skip::NotTcp);
                }
                if n < t + 2 {
                    return Err(Skip::Undecodable);
                }
                let hlen = usize::from(byte(f, t + 1));
                let next_header = byte(f, t);
                // AH counts its length in 4-byte units minus 2; the others in 8-byte units minus 1
                t += if nxt == 51 {
                    (hlen + 2) * 4
                } else {
                    (hlen + 1) * 8
                };
                nxt = next_header;
            }
            let src = Addr::v6(arr(f, off + 8));
            let dst = Addr::v6(arr(f, off + 24));
            transport(f, nxt, 6, t, ip_end, src, dst)
        }
        _ => Err(Skip::NotTcp),
    }
}

fn tcp(f: &[u8], t: usize, ip_end: usize, src: Addr, dst: Addr) -> Result<Tcp, Skip> {
    let n = f.len();
    if n < t + 20 {
        return Err(Skip::Undecodable);
    }
    let thl = usize::from(byte(f, t + 12) >> 4) * 4;
    if thl < 20 {
        return Err(Skip::Undecodable);
    }
    // A header whose options the snapshot length cut is still the packet's: its ports,
    // sequence numbers, flags and window are whole (a SYN's options at -s 68).
    let options_cut = n < t + thl;
    let p0 = t + thl;
    let plen = match ip_end.checked_sub(p0) {
        Some(p) => p,
        None => return Err(Skip::Undecodable),
    };
    let p1 = n.min(p0 + plen).max(p0.min(n));
    Ok(Tcp {
        src,
        dst,
        sport: be16(f, t),
        dport: be16(f, t + 2),
        seq: be32(f, t + 4),
        ack: be32(f, t + 8),
        flags: byte(f, t + 13),
        win: be16(f, t + 14),
        // ip_end - p0 is below 2 * 65,536 + frame length: a u32
        plen: u32::try_from(plen).unwrap_or(u32::MAX),
        payload: (p0.min(n), p1),
        options: (t + 20, p0.min(n)),
        options_cut,
    })
}

// Readers of bytes whose presence the caller checked; a missing byte reads as zero.
fn byte(f: &[u8], at: usize) -> u8 {
    f.get(at).copied().unwrap_or(0)
}

fn be16(f: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([byte(f, at), byte(f, at + 1)])
}

fn be32(f: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(arr(f, at))
}

fn arr<const N: usize>(f: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(s) = f.get(at..at + N) {
        out.copy_from_slice(s);
    }
    out
}
