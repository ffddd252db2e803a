//! Counters about the capture as a whole, filled in as the records are read.

use serde::Serialize;

use super::clock::Timeline;
use super::duplicates::Duplicates;
use super::error::Damage;
use super::tunnel::Tunnel;

/// Tunnels listed one by one (the TCP packets of all are in `tunnelled_packets`).
pub const MAX_TUNNELS: usize = 64;

/// The TCP packets one tunnel carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct TunnelCount {
    #[serde(flatten)]
    pub tunnel: Tunnel,
    pub packets: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Pcap,
    Pcapng,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CaptureStats {
    /// The path as given (lossily converted when not UTF-8: Python keeps its own string).
    pub file: String,
    pub format: Format,
    /// Gzip-compressed (detected by content, not by name).
    pub compressed: bool,
    /// pcap with nanosecond timestamps.
    pub nanosecond: bool,
    /// Names of the link types of the records read, in first-seen order.
    pub link_types: Vec<String>,
    /// Every record, TCP or not.
    pub packets: u64,
    pub tcp_packets: u64,
    pub non_tcp_packets: u64,
    /// Records whose captured length is below their original length.
    pub truncated_packets: u64,
    /// TCP over IP but headers cut by the snapshot length, or malformed.
    pub undecodable_packets: u64,
    /// IP fragments of TCP, UDP (a tunnel's datagram may be one), GRE or IP-in-IP packets.
    pub ip_fragments: u64,
    /// Epoch seconds of the first and last record, on the capture's timeline (clock.rs: a
    /// record whose time jumped takes the time of the one before it).
    pub first_ts: Option<f64>,
    pub last_ts: Option<f64>,
    /// The capturing tool's drop counters summed (pcapng Interface Statistics), when given.
    pub if_drops: Option<u128>,
    /// Set when the file ended early or was corrupt: what precedes was read.
    pub damage: Option<Damage>,
    /// TCP packets taken out of tunnels.
    pub tunnelled_packets: u64,
    /// The same per tunnel, the first MAX_TUNNELS in first-seen order.
    pub tunnels: Vec<TunnelCount>,
    /// TCP packets captured twice: the copies dropped (duplicates.rs).
    pub duplicates: Duplicates,
    /// Where the records' times jumped or stepped back (clock.rs).
    pub timeline: Timeline,
}

impl CaptureStats {
    pub(crate) fn new(file: String, format: Format, compressed: bool) -> Self {
        CaptureStats {
            file,
            format,
            compressed,
            nanosecond: false,
            link_types: Vec::new(),
            packets: 0,
            tcp_packets: 0,
            non_tcp_packets: 0,
            truncated_packets: 0,
            undecodable_packets: 0,
            ip_fragments: 0,
            first_ts: None,
            last_ts: None,
            if_drops: None,
            damage: None,
            tunnelled_packets: 0,
            tunnels: Vec::new(),
            duplicates: Duplicates::default(),
            timeline: Timeline::default(),
        }
    }

    /// A TCP packet `tunnel` carried.
    pub(crate) fn tunnelled(&mut self, tunnel: Tunnel) {
        self.tunnelled_packets += 1;
        if let Some(c) = self.tunnels.iter_mut().find(|c| c.tunnel == tunnel) {
            c.packets += 1;
        } else if self.tunnels.len() < MAX_TUNNELS {
            self.tunnels.push(TunnelCount { tunnel, packets: 1 });
        }
    }
}
