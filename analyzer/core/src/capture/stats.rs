//! Counters about the capture as a whole, filled in as the records are read.

use serde::Serialize;

use super::error::Damage;

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
    pub ip_fragments: u64,
    /// Epoch seconds of the first and last record.
    pub first_ts: Option<f64>,
    pub last_ts: Option<f64>,
    /// The capturing tool's drop counters summed (pcapng Interface Statistics), when given.
    pub if_drops: Option<u128>,
    /// Set when the file ended early or was corrupt: what precedes was read.
    pub damage: Option<Damage>,
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
        }
    }
}
