//! What the TCP engine tells per-connection analyses, packet by packet.
//!
//! The engine owns sequence arithmetic (wraparound, relative offsets, window scaling):
//! consumers get plain integers and never see raw 32-bit sequence numbers.

/// Classification of a packet's payload in its own direction's stream (bits of `kind`).
pub const NEW: u8 = 0x01; // carries bytes beyond the highest byte seen so far
pub const RETRANS: u8 = 0x02; // only bytes already seen (a retransmission, or a duplicate)
pub const PARTIAL_RETRANS: u8 = 0x04; // overlaps seen bytes and also carries new ones
pub const OUT_OF_ORDER: u8 = 0x08; // starts beyond the next expected byte: a hole precedes it
pub const FILLS_HOLE: u8 = 0x10; // bytes below the highest seen that the capture had not seen
pub const KEEPALIVE: u8 = 0x20; // one byte (or none) just below the next expected, idle stream

/// One packet as a connection's analyses see it.
#[derive(Clone, Copy, Debug)]
pub struct Observed {
    /// 0 for the client->server direction, 1 for server->client (the engine's view).
    pub d: usize,
    pub frame: u64,
    pub ts: f64,
    /// The payload's place in direction d's stream, relative to its first byte (SYN
    /// excluded); end - seq is the payload length on the wire. seq == end: no payload.
    pub seq: i64,
    pub end: i64,
    /// Next byte expected of direction 1-d's stream, same relative numbering; -1 when the
    /// packet has no ACK flag or the peer's stream base is not known yet.
    pub ack: i64,
    /// Advertised receive window in bytes, scaled by the sender's window scale when known,
    /// otherwise the raw 16-bit field.
    pub win: i64,
    pub flags: u8,
    /// Bits above, 0 for a packet without payload.
    pub kind: u8,
    /// Whether each direction's window scale is proven by the handshake (so far).
    pub scale_known: [bool; 2],
    /// The MSS each side announced in its SYN (so far; None without one).
    pub mss: [Option<u16>; 2],
    /// The packet's first SACK block: SACK_ABOVE (beyond the ACK: the receiver holds data past
    /// a hole), SACK_DUPLICATE (below it: D-SACK, a segment arrived twice), or 0.
    pub sack: u8,
}

pub const SACK_ABOVE: u8 = 1;
pub const SACK_DUPLICATE: u8 = 2;

/// Facts about one direction known at the end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DirectionInfo {
    /// MSS from this side's SYN.
    pub mss: Option<u32>,
    /// Shift this side applies to its advertised windows; None when unknown.
    pub window_scale: Option<u8>,
    pub window_scale_known: bool,
    pub window_scale_lower_bound: Option<u8>,
}

/// Receives every TCP packet of one connection, in capture order.
pub trait PacketObserver {
    fn on_packet(&mut self, p: &Observed);
    /// The connection is done; info[d] describes direction d.
    fn finish(&mut self, info: &[DirectionInfo; 2]);
}

/// Consumes the reassembled byte streams of both directions (the PostgreSQL decoder).
pub trait StreamSink {
    /// In-order bytes of direction d starting at stream offset `offset`. `start_seen`: the
    /// capture saw this direction's SYN, so offset 0 is the true start of its stream.
    fn feed(&mut self, d: usize, data: &[u8], offset: i64, frame: u64, ts: f64, start_seen: bool);
    /// Bytes [offset, offset + length) of direction d will never be seen (capture gap or
    /// snaplen cut).
    fn gap(&mut self, d: usize, offset: i64, length: i64, frame: u64, ts: f64);
    /// Bytes [offset, offset + length) of direction d, fed before, reached the receiver's
    /// reader no sooner than this packet: it resends their first bytes, which the receiver
    /// had not acknowledged (the copy the capture saw was lost past the capture point), and
    /// TCP hands bytes over in order.
    fn resent(&mut self, d: usize, offset: i64, length: i64, frame: u64, ts: f64);
    fn finish(&mut self);
}
