//! Tunnels: where the packet a tunnel carries starts, and what identifies the tunnel.
//!
//! Cloud traffic mirroring delivers packets in VXLAN (AWS, UDP 4789), overlays use VXLAN or
//! Geneve (UDP 6081), port mirroring uses GRE with ERSPAN (types I, II and III), and routers
//! tunnel IP in IP (IPv4 or IPv6 in IPv4 or IPv6: ipip, sit/6in4, ip6tnl). Each is taken off
//! so the TCP inside is analysed as if captured directly. What tells the tunnel's flows apart
//! (a VNI, a GRE key, an ERSPAN session) is kept with the packet: two networks may reuse the
//! same inner addresses.

use serde::{Deserialize, Serialize};

use super::link::{ethernet, IpStart};

pub const VXLAN_PORT: u16 = 4789;
pub const GENEVE_PORT: u16 = 6081;
/// How many tunnels deep a packet is followed (a mirror of an overlay is two).
pub const MAX_DEPTH: usize = 4;

const ETH_IPV4: u16 = 0x0800;
const ETH_IPV6: u16 = 0x86DD;
/// Transparent Ethernet bridging: an Ethernet frame inside (gretap, Geneve).
const ETH_BRIDGED: u16 = 0x6558;
const ERSPAN_I_II: u16 = 0x88BE;
const ERSPAN_III: u16 = 0x22EB;

/// Which tunnel carried a packet, and its identifier where the tunnel has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Tunnel {
    Vxlan {
        vni: u32,
    },
    Geneve {
        vni: u32,
    },
    /// GRE carrying IP or Ethernet (gretap); its key when present.
    Gre {
        key: Option<u32>,
    },
    /// ERSPAN (GRE): its version (1: type I or II, 2: type III) and session ID; type I has
    /// none.
    Erspan {
        version: u8,
        session: Option<u16>,
    },
    /// IP in IP: the inner and outer IP versions (ipip: 4 in 4, sit: 6 in 4).
    Ipip {
        inner: u8,
        outer: u8,
    },
}

impl Tunnel {
    /// What tells this tunnel's flows from another's (the kind and its identifier): two
    /// tunnels of the same inner 4-tuple are two connections.
    pub fn tag(self) -> u64 {
        match self {
            Tunnel::Vxlan { vni } => 1 << 40 | u64::from(vni),
            Tunnel::Geneve { vni } => 2 << 40 | u64::from(vni),
            Tunnel::Gre { key } => 3 << 40 | key.map_or(1 << 32, u64::from),
            Tunnel::Erspan { session, .. } => 4 << 40 | session.map_or(1 << 16, u64::from),
            Tunnel::Ipip { .. } => 0,
        }
    }
}

fn be16(f: &[u8], at: usize) -> Option<u16> {
    let b = f.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

fn be32(f: &[u8], at: usize) -> Option<u32> {
    let b = f.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Where the IP packet inside `f` starts, given the protocol type that says what follows at
/// `at` (an Ethertype, as GRE and Geneve name it).
fn inner(f: &[u8], proto: u16, at: usize) -> Option<IpStart> {
    match proto {
        ETH_IPV4 => Some((4, at)),
        ETH_IPV6 => Some((6, at)),
        ETH_BRIDGED => bridged(f, at),
        _ => None,
    }
}

/// An Ethernet frame at `at`: where its IP packet starts.
fn bridged(f: &[u8], at: usize) -> Option<IpStart> {
    let (version, off) = ethernet(f.get(at..)?)?;
    Some((version, at + off))
}

/// A UDP datagram's payload at `at` to `dport`: VXLAN or Geneve, when its header says so.
pub fn udp(f: &[u8], dport: u16, at: usize) -> Option<(Tunnel, IpStart)> {
    match dport {
        VXLAN_PORT => {
            // flags (I: a VNI follows), 3 reserved bytes, the VNI, a reserved byte
            let h = f.get(at..at + 8)?;
            if h[0] & 0x08 == 0 {
                return None;
            }
            let vni = be32(h, 4)? >> 8;
            Some((Tunnel::Vxlan { vni }, bridged(f, at + 8)?))
        }
        GENEVE_PORT => {
            // version 0, option length in 4-byte words, protocol type, VNI, reserved
            let h = f.get(at..at + 8)?;
            if h[0] >> 6 != 0 {
                return None;
            }
            let options = usize::from(h[0] & 0x3F) * 4;
            let proto = be16(h, 2)?;
            let vni = be32(h, 4)? >> 8;
            Some((Tunnel::Geneve { vni }, inner(f, proto, at + 8 + options)?))
        }
        _ => None,
    }
}

/// A GRE packet at `at` (RFC 2784, 2890): IP, Ethernet (gretap) or ERSPAN inside.
pub fn gre(f: &[u8], at: usize) -> Option<(Tunnel, IpStart)> {
    let flags = be16(f, at)?;
    let proto = be16(f, at + 2)?;
    // version 0 (1 is PPTP's enhanced GRE); no source routing
    if flags & 0x0007 != 0 || flags & 0x4000 != 0 {
        return None;
    }
    let (checksum, keyed, sequenced) = (
        flags & 0x8000 != 0,
        flags & 0x2000 != 0,
        flags & 0x1000 != 0,
    );
    let mut off = at + 4;
    if checksum {
        off += 4;
    }
    let key = if keyed {
        let k = be32(f, off)?;
        off += 4;
        Some(k)
    } else {
        None
    };
    if sequenced {
        off += 4;
    }
    match proto {
        ERSPAN_I_II if !sequenced => {
            // type I: the mirrored frame right after GRE
            let t = Tunnel::Erspan {
                version: 1,
                session: None,
            };
            Some((t, bridged(f, off)?))
        }
        ERSPAN_I_II | ERSPAN_III => {
            // ver (4 bits), VLAN; COS, encapsulation, truncated, session ID (10 bits); ...
            let version = *f.get(off)? >> 4;
            let session = be16(f, off + 2)? & 0x03FF;
            let header = match (proto, version) {
                (ERSPAN_I_II, 1) => 8,
                // type III: 12 bytes, and an 8-byte platform subheader when its O bit is set
                (ERSPAN_III, 2) => 12 + if *f.get(off + 11)? & 0x01 != 0 { 8 } else { 0 },
                _ => return None,
            };
            let t = Tunnel::Erspan {
                version,
                session: Some(session),
            };
            Some((t, bridged(f, off + header)?))
        }
        _ => Some((Tunnel::Gre { key }, inner(f, proto, off)?)),
    }
}

/// IP in IP: protocol 4 (IPv4) or 41 (IPv6) inside an IP packet of `outer` version.
pub fn ipip(inner_proto: u8, outer: u8, at: usize) -> Option<(Tunnel, IpStart)> {
    let inner = match inner_proto {
        4 => 4,
        41 => 6,
        _ => return None,
    };
    Some((Tunnel::Ipip { inner, outer }, (inner, at)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eth_ipv4() -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend([0x08, 0x00, 0x45]);
        f
    }

    #[test]
    fn vxlan_and_geneve() {
        let mut f = vec![0x08, 0, 0, 0, 0, 0, 42, 0];
        f.extend(eth_ipv4());
        assert_eq!(udp(&f, 4789, 0), Some((Tunnel::Vxlan { vni: 42 }, (4, 22))));
        f[0] = 0; // no VNI: not VXLAN as tshark reads it
        assert_eq!(udp(&f, 4789, 0), None);
        // Geneve with one 4-byte option, carrying Ethernet
        let mut g = vec![0x01, 0, 0x65, 0x58, 0, 1, 0, 0, 1, 2, 3, 4];
        g.extend(eth_ipv4());
        assert_eq!(
            udp(&g, 6081, 0),
            Some((Tunnel::Geneve { vni: 256 }, (4, 26)))
        );
        let ip = [0x00, 0, 0x86, 0xDD, 0, 0, 7, 0, 0x60];
        assert_eq!(udp(&ip, 6081, 0), Some((Tunnel::Geneve { vni: 7 }, (6, 8))));
        assert_eq!(udp(&f, 53, 0), None);
    }

    #[test]
    fn gre_keys_gretap_and_erspan() {
        // key and sequence number, IPv4 inside
        let keyed = [0x30, 0, 0x08, 0x00, 0, 0, 0, 9, 0, 0, 0, 1, 0x45];
        assert_eq!(
            gre(&keyed, 0),
            Some((Tunnel::Gre { key: Some(9) }, (4, 12)))
        );
        // checksum, Ethernet inside (gretap)
        let mut tap = vec![0x80, 0, 0x65, 0x58, 0, 0, 0, 0];
        tap.extend(eth_ipv4());
        assert_eq!(gre(&tap, 0), Some((Tunnel::Gre { key: None }, (4, 22))));
        // ERSPAN type II: sequenced GRE, an 8-byte header with session 5
        let mut ii = vec![
            0x10, 0, 0x88, 0xBE, 0, 0, 0, 1, 0x10, 0x64, 0x00, 0x05, 0, 0, 0, 0,
        ];
        ii.extend(eth_ipv4());
        let want = Tunnel::Erspan {
            version: 1,
            session: Some(5),
        };
        assert_eq!(gre(&ii, 0), Some((want, (4, 30))));
        // type I: no sequence number, no ERSPAN header
        let mut i = vec![0x00, 0, 0x88, 0xBE];
        i.extend(eth_ipv4());
        assert!(matches!(
            gre(&i, 0),
            Some((
                Tunnel::Erspan {
                    version: 1,
                    session: None
                },
                (4, 18)
            ))
        ));
        // type III: 12 bytes, session 0x3ff, no platform subheader
        let mut iii = vec![0x10, 0, 0x22, 0xEB, 0, 0, 0, 1, 0x20, 0, 0x03, 0xFF];
        iii.extend([0u8; 8]);
        iii.extend(eth_ipv4());
        assert!(matches!(
            gre(&iii, 0),
            Some((
                Tunnel::Erspan {
                    version: 2,
                    session: Some(1023)
                },
                (4, 34)
            ))
        ));
        // PPTP's enhanced GRE (version 1) and source routing are not taken
        assert_eq!(gre(&[0x30, 0x01, 0x88, 0x0B], 0), None);
        assert_eq!(gre(&[0x40, 0, 0x08, 0x00, 0x45], 0), None);
    }

    #[test]
    fn tags_tell_tunnels_apart() {
        let a = Tunnel::Vxlan { vni: 1 }.tag();
        assert_ne!(a, Tunnel::Vxlan { vni: 2 }.tag());
        assert_ne!(a, Tunnel::Geneve { vni: 1 }.tag());
        assert_ne!(
            Tunnel::Gre { key: None }.tag(),
            Tunnel::Gre { key: Some(0) }.tag()
        );
        assert_eq!(Tunnel::Ipip { inner: 4, outer: 4 }.tag(), 0);
    }
}
