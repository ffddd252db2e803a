//! What the capture stage hands the TCP engine: one decoded TCP packet, borrowed from the
//! reader's buffer for the length of one `feed`.

use serde::Serialize;

use crate::capture::tunnel::Tunnel;

/// TCP flag bits as they sit in the header's flags byte.
pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const PSH: u8 = 0x08;
pub const ACK: u8 = 0x10;
pub const URG: u8 = 0x20;
pub const ECE: u8 = 0x40;
pub const CWR: u8 = 0x80;

/// An IPv4 or IPv6 address as it was on the wire (4 or 16 bytes used).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct Addr {
    bytes: [u8; 16],
    v6: bool,
}

impl Addr {
    pub fn v4(b: [u8; 4]) -> Self {
        let mut bytes = [0u8; 16];
        bytes[..4].copy_from_slice(&b);
        Addr { bytes, v6: false }
    }

    pub fn v6(bytes: [u8; 16]) -> Self {
        Addr { bytes, v6: true }
    }

    /// The address's bytes: 4 for IPv4, 16 for IPv6.
    pub fn octets(&self) -> &[u8] {
        if self.v6 {
            &self.bytes
        } else {
            &self.bytes[..4]
        }
    }

    pub fn is_v6(&self) -> bool {
        self.v6
    }
}

impl std::fmt::Display for Addr {
    /// As inet_ntop writes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.v6 {
            let b = &self.bytes;
            if b[..12] == [0; 12] && b[12..14] != [0, 0] {
                // IPv4-compatible (six zero words, then a non-zero one): inet_ntop writes the
                // last 32 bits dotted, where Rust's Display writes two hex words
                return write!(f, "::{}.{}.{}.{}", b[12], b[13], b[14], b[15]);
            }
            std::net::Ipv6Addr::from(self.bytes).fmt(f)
        } else {
            let b = &self.bytes;
            write!(f, "{}.{}.{}.{}", b[0], b[1], b[2], b[3])
        }
    }
}

impl Serialize for Addr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One TCP packet of the capture.
#[derive(Clone, Copy, Debug)]
pub struct TcpPacket<'a> {
    /// 1-based, as Wireshark numbers frames (every record counts, TCP or not).
    pub frame: u64,
    /// Epoch seconds.
    pub ts: f64,
    pub src: Addr,
    pub dst: Addr,
    pub sport: u16,
    pub dport: u16,
    /// Raw 32-bit sequence number.
    pub seq: u32,
    /// Raw 32-bit acknowledgement number (meaningful only with the ACK flag).
    pub ack: u32,
    pub flags: u8,
    /// Raw 16-bit window field.
    pub win: u16,
    /// TCP payload length from the IP header: what was on the wire.
    pub plen: u32,
    /// The captured payload: shorter than `plen` when the snapshot length cut it.
    pub payload: &'a [u8],
    /// Raw TCP options (empty when none).
    pub options: &'a [u8],
    /// The snapshot length cut the options: `options` holds only their start.
    pub options_cut: bool,
    /// The tunnel that carried the packet (the innermost, when tunnels nest).
    pub tunnel: Option<Tunnel>,
}

#[cfg(test)]
mod tests {
    use super::Addr;

    fn v6(words: [u16; 8]) -> String {
        let mut b = [0u8; 16];
        for (i, w) in words.iter().enumerate() {
            b[2 * i..2 * i + 2].copy_from_slice(&w.to_be_bytes());
        }
        Addr::v6(b).to_string()
    }

    /// As inet_ntop writes them (glibc, checked against Python's socket.inet_ntop).
    #[test]
    fn addresses_are_written_as_inet_ntop_writes_them() {
        assert_eq!(Addr::v4([10, 0, 0, 254]).to_string(), "10.0.0.254");
        assert_eq!(v6([0xfd00, 0, 0, 0, 0, 0, 0, 1]), "fd00::1");
        assert_eq!(v6([0; 8]), "::");
        assert_eq!(v6([0, 0, 0, 0, 0, 0, 0, 1]), "::1");
        assert_eq!(v6([0, 0, 0, 0, 0, 0, 0x0102, 0x0304]), "::1.2.3.4");
        assert_eq!(v6([0, 0, 0, 0, 0, 0, 1, 0]), "::0.1.0.0");
        assert_eq!(
            v6([0, 0, 0, 0, 0, 0xffff, 0x0102, 0x0304]),
            "::ffff:1.2.3.4"
        );
        assert_eq!(
            v6([0, 0, 0, 0, 0xffff, 0, 0x0102, 0x0304]),
            "::ffff:0:102:304"
        );
        assert_eq!(v6([1, 0, 0, 1, 0, 0, 0, 1]), "1:0:0:1::1");
        assert_eq!(v6([1, 0, 1, 0, 1, 0, 1, 0]), "1:0:1:0:1:0:1:0");
    }
}
