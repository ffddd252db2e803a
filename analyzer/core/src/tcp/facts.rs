//! What the engine knows of a connection once it is finished, as plain values for Python
//! (pythonize / serde): the keys of today's report under the same names, plus what the TCP
//! findings read. Times are raw epoch seconds; rounding and the shift to capture start are
//! Python's part.

use serde::{Deserialize, Serialize};

use super::options::SynOptions;
use crate::capture::tunnel::Tunnel;
use crate::packet::Addr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RoleSource {
    /// The client's SYN was seen.
    Handshake,
    /// The server's SYN-ACK, but no SYN.
    SynAck,
    /// No handshake: the lower port is taken for the server.
    Port,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClosedBy {
    Fin,
    Rst,
}

/// One end of a connection. Serialises as `[ip, port]`, the address as inet_ntop writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Endpoint(pub Addr, pub u16);

/// One direction's counters (Direction.to_json's keys first, then what findings read).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DirectionFacts {
    /// Unique payload bytes on the wire (retransmitted copies not counted again).
    pub payload_bytes: i64,
    pub data_segments: u64,
    pub max_segment: i64,
    /// MSS from this side's SYN.
    pub mss: Option<u16>,
    pub window_scale: Option<u8>,
    pub window_scale_known: bool,
    /// None when the scale is known.
    pub window_scale_lower_bound: Option<u8>,
    pub retransmitted_segments: u64,
    pub retransmitted_bytes: i64,
    pub out_of_order_segments: u64,
    pub gaps: u64,
    pub missing_bytes: i64,
    pub truncated_bytes: i64,
    pub zero_window_events: u64,
    pub window_updates: u64,
    /// Always 0, as in the reference.
    pub segments_above_mss: u64,
    pub keepalives: u64,
    pub truncated_segments: u64,
    /// Holes not remembered past MAX_HOLES (late bytes there count as retransmissions).
    pub holes_forgotten: u64,
    /// Gaps declared because the reassembly buffer reached its bounds.
    pub bound_gaps: u64,
    pub isn_seen: bool,
    /// The options of this side's (last) SYN.
    pub syn: Option<SynOptions>,
    /// The frame of that SYN when the snapshot length cut its options (MSS and window scale
    /// unknown unless read before the cut).
    pub syn_cut_frame: Option<u64>,
    pub fin_seen: bool,
    pub rst_seen: bool,
    /// Evidence frames, the first MAX_EVIDENCE of each.
    pub ev_retrans: Vec<u64>,
    pub ev_ooo: Vec<u64>,
    pub ev_gap: Vec<u64>,
    pub ev_zero: Vec<u64>,
    pub ev_trunc: Vec<u64>,
}

/// A connection as the engine saw it. `directions[0]` is the engine's client->server.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ConnectionFacts {
    /// "c<number>" in the report; numbers follow the order connections opened.
    pub number: u64,
    pub client: Endpoint,
    pub server: Endpoint,
    /// Both SYN and SYN-ACK seen (the SYN first).
    pub handshake_seen: bool,
    pub role_source: RoleSource,
    /// The tunnel that carried it, when one did.
    pub tunnel: Option<Tunnel>,
    pub start_ts: f64,
    pub end_ts: f64,
    pub first_frame: u64,
    pub last_frame: u64,
    pub packets: u64,
    pub closed_by: Option<ClosedBy>,
    /// Frames of every SYN and SYN-ACK.
    pub syn_frames: Vec<u64>,
    pub directions: [DirectionFacts; 2],
}

/// What the engine tells of the pass as a whole.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EngineFacts {
    /// Packets on the 4-tuple of a connection already retired closed (not analysed).
    pub late_packets: u64,
    /// The first MAX_LATE_FRAMES of them.
    pub late_frames: Vec<u64>,
    /// The settled linger in effect (never longer than the linger); None without one.
    pub settled_linger: Option<f64>,
    /// Connections numbered so far.
    pub opened: u64,
}
