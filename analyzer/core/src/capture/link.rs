//! Link layers: where the IP header starts in a captured frame, per supported link type
//! (tcpdump.org/linktypes numbers), and the names tcpdump prints for them.

/// IP version and the offset of its header in the frame.
pub type IpStart = (u8, usize);

const ETH_IPV4: u16 = 0x0800;
const ETH_IPV6: u16 = 0x86DD;
/// 802.1Q, 802.1ad and the older QinQ tag.
const VLAN_TAGS: [u16; 3] = [0x8100, 0x88A8, 0x9100];
/// BSDs disagree on AF_INET6.
const AF_INET6: [u32; 3] = [24, 28, 30];

/// Whether pktflow decodes this link type.
pub fn supported(linktype: u32) -> bool {
    matches!(
        linktype,
        0 | 1 | 12 | 14 | 101 | 108 | 113 | 228 | 229 | 276
    )
}

/// tcpdump's name of a link type, LINKTYPE_<n> for the others.
pub fn link_name(linktype: u32) -> String {
    let name = match linktype {
        0 => "NULL",
        1 => "EN10MB",
        12 | 14 | 101 => "RAW",
        108 => "LOOP",
        113 => "LINUX_SLL",
        228 => "IPV4",
        229 => "IPV6",
        276 => "LINUX_SLL2",
        _ => return format!("LINKTYPE_{linktype}"),
    };
    name.to_string()
}

/// Where IP starts in `frame`, None for non-IP traffic and unsupported link types.
pub fn ip_start(linktype: u32, frame: &[u8]) -> Option<IpStart> {
    match linktype {
        1 => ethernet(frame),
        113 => ethertype(be16(frame, 14)?, 16).filter(|_| frame.len() >= 16),
        276 => ethertype(be16(frame, 0)?, 20).filter(|_| frame.len() >= 20),
        0 | 108 => bsd_null(frame),
        12 | 14 | 101 => match frame.first()? >> 4 {
            v @ (4 | 6) => Some((v, 0)),
            _ => None,
        },
        228 => frame.first().map(|_| (4, 0)),
        229 => frame.first().map(|_| (6, 0)),
        _ => None,
    }
}

fn be16(f: &[u8], at: usize) -> Option<u16> {
    let b = f.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

fn ethertype(etype: u16, off: usize) -> Option<IpStart> {
    match etype {
        ETH_IPV4 => Some((4, off)),
        ETH_IPV6 => Some((6, off)),
        _ => None,
    }
}

/// Ethernet with any stack of VLAN tags (also inside a tunnel).
pub(crate) fn ethernet(frame: &[u8]) -> Option<IpStart> {
    if frame.len() < 14 {
        return None;
    }
    let mut etype = be16(frame, 12)?;
    let mut off = 14usize;
    while VLAN_TAGS.contains(&etype) {
        etype = be16(frame, off + 2)?;
        off += 4;
    }
    ethertype(etype, off)
}

/// The 4-byte address family in the capturing host's byte order: either is accepted.
fn bsd_null(frame: &[u8]) -> Option<IpStart> {
    let b = frame.get(..4)?;
    let mut fam = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    if fam > 0xFFFF {
        fam = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    }
    if fam == 2 {
        Some((4, 4))
    } else if AF_INET6.contains(&fam) {
        Some((6, 4))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_tcpdump_prints_them() {
        assert_eq!(link_name(1), "EN10MB");
        assert_eq!(link_name(276), "LINUX_SLL2");
        assert_eq!(link_name(14), "RAW");
        assert_eq!(link_name(147), "LINKTYPE_147");
    }

    #[test]
    fn ethernet_and_vlan_stacks() {
        let mut f = vec![0u8; 12];
        f.extend([0x81, 0x00, 0, 100, 0x88, 0xA8, 0, 200, 0x86, 0xDD]);
        f.extend([0u8; 40]);
        assert_eq!(ip_start(1, &f), Some((6, 22)));
        assert_eq!(ip_start(1, &f[..19]), None, "a tag cut short");
        assert_eq!(ip_start(1, &f[..13]), None);
        let mut arp = vec![0u8; 12];
        arp.extend([0x08, 0x06]);
        assert_eq!(ip_start(1, &arp), None);
    }

    #[test]
    fn cooked_loopback_and_raw() {
        let mut sll = vec![0u8; 14];
        sll.extend([0x08, 0x00]);
        assert_eq!(ip_start(113, &sll), Some((4, 16)));
        assert_eq!(ip_start(113, &sll[..15]), None);
        let mut sll2 = vec![0x86, 0xDD];
        sll2.extend([0u8; 18]);
        assert_eq!(ip_start(276, &sll2), Some((6, 20)));
        assert_eq!(ip_start(276, &sll2[..19]), None);
        assert_eq!(ip_start(0, &2u32.to_le_bytes()), Some((4, 4)));
        assert_eq!(ip_start(108, &30u32.to_be_bytes()), Some((6, 4)));
        assert_eq!(ip_start(0, &7u32.to_le_bytes()), None);
        assert_eq!(ip_start(101, &[0x45]), Some((4, 0)));
        assert_eq!(ip_start(12, &[0x60]), Some((6, 0)));
        assert_eq!(ip_start(14, &[0x50]), None);
        assert_eq!(ip_start(228, &[0x60]), Some((4, 0)));
        assert_eq!(ip_start(229, &[]), None);
        assert_eq!(ip_start(147, &[0x45; 40]), None);
        assert!(supported(276) && !supported(147));
    }
}
