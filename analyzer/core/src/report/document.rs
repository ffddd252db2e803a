//! The report of a pass ("pktflow.report/1"), assembled by the core and written by it: each
//! connection's record spooled as the pass judges it, the relays found once it is done, the
//! capture's own part and the findings Python words; then the JSON, in connection order, each
//! connection with its relay role. Nothing written is read back: records are kept in a binary
//! form until they are written, once.

use std::collections::HashMap;
use std::io::Write;

use serde::ser::{Error as _, SerializeSeq};
use serde::{Deserialize, Serialize, Serializer};

use super::cancels::Cancels;
use super::connection::{ConnectionRecord, Role};
use super::json::{self, Writer};
use super::numbers::round_to;
use super::spool::{Spool, SpoolError};
use super::values::Maybe;
use super::words::{Finding, Verdict};
use crate::capture::stats::TunnelCount;
use crate::capture::{CaptureStats, Duplicates, Format, Timeline};
use crate::relay::{LegExtras, RelayJudgement, RelayRecord, RelayStage};

pub const SCHEMA: &str = "pktflow.report/1";

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DamageRecord {
    pub frame: u64,
    pub offset: u64,
    /// Python's words.
    pub reason: String,
}

/// The capture as a whole.
#[derive(Clone, Debug, Serialize)]
pub struct CaptureRecord {
    pub file: String,
    pub format: Format,
    pub compressed: bool,
    pub link_types: Vec<String>,
    pub packets: u64,
    pub tcp_packets: u64,
    pub non_tcp_packets: u64,
    pub truncated_packets: u64,
    pub undecodable_packets: u64,
    pub ip_fragments: u64,
    pub if_drops: Option<u128>,
    pub first_ts: Option<f64>,
    pub duration_s: f64,
    pub damage: Option<DamageRecord>,
    /// TCP packets taken out of tunnels, and per tunnel (the first 64).
    pub tunnelled_packets: u64,
    pub tunnels: Vec<TunnelCount>,
    /// TCP packets captured twice, the copies dropped: how many, and the first frames.
    pub duplicates: Duplicates,
    /// Where the records' times jumped (and were kept on one timeline) or stepped back.
    pub timeline: Timeline,
}

impl CaptureRecord {
    /// `file`: the path as the user gave it; `damage_reason`: Python's words for the damage.
    pub fn of(stats: &CaptureStats, file: String, damage_reason: Option<String>) -> Self {
        let duration = match (stats.first_ts, stats.last_ts) {
            (Some(first), Some(last)) => last - first,
            _ => 0.0,
        };
        CaptureRecord {
            file,
            format: stats.format,
            compressed: stats.compressed,
            link_types: stats.link_types.clone(),
            packets: stats.packets,
            tcp_packets: stats.tcp_packets,
            non_tcp_packets: stats.non_tcp_packets,
            truncated_packets: stats.truncated_packets,
            undecodable_packets: stats.undecodable_packets,
            ip_fragments: stats.ip_fragments,
            if_drops: stats.if_drops,
            first_ts: stats.first_ts,
            duration_s: round_to(duration, 6),
            damage: stats.damage.as_ref().map(|d| DamageRecord {
                frame: d.frame,
                offset: d.offset,
                reason: damage_reason.unwrap_or_default(),
            }),
            tunnelled_packets: stats.tunnelled_packets,
            tunnels: stats.tunnels.clone(),
            duplicates: stats.duplicates.clone(),
            timeline: stats.timeline.clone(),
        }
    }
}

/// What Python adds to the report as a whole once the pass is done.
#[derive(Clone, Debug, Deserialize)]
pub struct CaptureWords {
    /// The capture's path as the user gave it.
    pub file: String,
    /// pktflow's version.
    pub version: String,
    /// Why reading stopped early, when it did.
    pub damage_reason: Option<String>,
    /// Every finding, in the order the report lists them.
    pub findings: Vec<Finding>,
}

/// Reading the report back for writing failed.
#[derive(Debug)]
pub enum ReportError {
    Spool(SpoolError),
    /// A spooled record that does not decode: a bug.
    Decode(String),
    Write(String),
}

impl std::fmt::Display for ReportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReportError::Spool(e) => e.fmt(f),
            ReportError::Decode(e) => write!(f, "a spooled record does not decode: {e}"),
            ReportError::Write(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for ReportError {}

impl From<SpoolError> for ReportError {
    fn from(e: SpoolError) -> Self {
        ReportError::Spool(e)
    }
}

/// A pass's report while the pass runs.
#[derive(Default)]
pub struct Assembly {
    spool: Spool,
    /// Per record, in the order they came: the connection's number and payload bytes.
    index: Vec<(u64, i64)>,
    stage: RelayStage,
    relays: Vec<RelayRecord>,
    /// The relays' legs' parts, by connection number (sorted).
    roles: Vec<(u64, Role)>,
    /// Front legs' verdicts judged again as their relay's, by connection number.
    inherited: HashMap<u64, Verdict>,
    cancels: Cancels,
    scratch: Vec<u8>,
}

impl Assembly {
    /// A judged connection: kept as a leg for the relay stage, and spooled.
    pub fn add(
        &mut self,
        number: u64,
        record: &ConnectionRecord,
        extras: LegExtras,
    ) -> Result<(), SpoolError> {
        self.stage.add(record, number, extras)?;
        self.cancels.add(number, record);
        self.scratch.clear();
        // the record's types all serialize; a failure here would be a bug, said as an I/O one
        let bytes =
            postcard::to_extend(record, std::mem::take(&mut self.scratch)).map_err(|e| {
                SpoolError {
                    dir: std::env::temp_dir(),
                    error: std::io::Error::other(e.to_string()),
                }
            })?;
        self.spool.push(&bytes)?;
        self.scratch = bytes;
        self.index.push((number, record.payload_bytes()));
        Ok(())
    }

    /// Once every connection is in: the relays among them, for Python to word (`set_relays`).
    pub fn find_relays(&mut self) -> Result<Vec<(RelayJudgement, RelayRecord)>, ReportError> {
        let found = std::mem::take(&mut self.stage).finish()?;
        self.roles = found.roles;
        Ok(found.relays)
    }

    /// The relays as worded, and the front legs' verdicts their words judged again.
    pub fn set_relays(&mut self, relays: Vec<RelayRecord>, inherited: Vec<(u64, Verdict)>) {
        self.relays = relays;
        self.inherited = inherited.into_iter().collect();
    }

    /// The report, with the capture's part and Python's words for it.
    pub fn finish(mut self, stats: &CaptureStats, words: CaptureWords) -> Report {
        let capture = CaptureRecord::of(stats, words.file, words.damage_reason);
        self.cancels.resolve();
        let mut order: Vec<usize> = (0..self.index.len()).collect();
        order.sort_by_key(|&i| self.index.get(i).map_or(0, |e| e.0));
        Report {
            spool: self.spool,
            index: self.index,
            order,
            roles: self.roles,
            inherited: self.inherited,
            cancels: self.cancels,
            relays: self.relays,
            capture,
            findings: words.findings,
            version: words.version,
        }
    }
}

/// A finished report: its connections read one at a time from the spool, in connection
/// order.
pub struct Report {
    spool: Spool,
    index: Vec<(u64, i64)>,
    /// Spool positions in connection order.
    order: Vec<usize>,
    roles: Vec<(u64, Role)>,
    inherited: HashMap<u64, Verdict>,
    /// Cancel requests and the queries they cancelled, linked.
    cancels: Cancels,
    pub relays: Vec<RelayRecord>,
    pub capture: CaptureRecord,
    pub findings: Vec<Finding>,
    version: String,
}

#[derive(Serialize)]
struct Tool<'a> {
    name: &'static str,
    version: &'a str,
}

#[derive(Serialize)]
struct Document<'a> {
    schema: &'static str,
    tool: Tool<'a>,
    capture: &'a CaptureRecord,
    connections: Connections<'a>,
    relays: &'a [RelayRecord],
    findings: &'a [Finding],
}

/// The connections, decoded one at a time as they are written.
struct Connections<'a>(&'a Report);

impl Serialize for Connections<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let report = self.0;
        let mut seq = s.serialize_seq(Some(report.len()))?;
        let mut buf = Vec::new();
        for i in 0..report.len() {
            let record = report.read(i, &mut buf).map_err(S::Error::custom)?;
            seq.serialize_element(&record)?;
        }
        seq.end()
    }
}

impl Report {
    /// Connections in the report.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The numbers of the connections, in the report's order.
    pub fn numbers(&self) -> Vec<u64> {
        (self.order.iter())
            .map(|&p| self.index.get(p).map_or(0, |e| e.0))
            .collect()
    }

    /// Each connection's payload bytes both ways, in the report's order.
    pub fn payload(&self) -> Vec<i64> {
        (self.order.iter())
            .map(|&p| self.index.get(p).map_or(0, |e| e.1))
            .collect()
    }

    /// Connection `i` (in the report's order), with its relay role.
    pub fn connection(&self, i: usize) -> Result<ConnectionRecord, ReportError> {
        self.read(i, &mut Vec::new())
    }

    fn read(&self, i: usize, buf: &mut Vec<u8>) -> Result<ConnectionRecord, ReportError> {
        let (position, number) = self
            .order
            .get(i)
            .and_then(|&p| Some((p, self.index.get(p)?.0)))
            .ok_or_else(|| ReportError::Decode(format!("no connection at {i}")))?;
        self.spool.read(position, buf)?;
        let mut record: ConnectionRecord =
            postcard::from_bytes(buf).map_err(|e| ReportError::Decode(e.to_string()))?;
        let role = (self.roles.binary_search_by_key(&number, |&(n, _)| n).ok())
            .and_then(|i| self.roles.get(i))
            .map_or(Role::Direct, |&(_, role)| role);
        record.role = Maybe(Some(role));
        if let (Some(v), Some(t)) = (
            self.inherited.get(&number),
            record.directions.server_to_client.transfer.0.as_mut(),
        ) {
            t.verdict = v.clone();
        }
        self.cancels.apply(number, &mut record);
        Ok(record)
    }

    /// The report as JSON text to `out`: indented as json.dumps(report, indent=2) indents it,
    /// or compact on one line; then a newline.
    pub fn write_json<W: Write>(&self, out: W, indented: bool) -> Result<W, ReportError> {
        let doc = Document {
            schema: SCHEMA,
            tool: Tool {
                name: "pktflow",
                version: &self.version,
            },
            capture: &self.capture,
            connections: Connections(self),
            relays: &self.relays,
            findings: &self.findings,
        };
        let mut w = if indented {
            Writer::indented(out, 0)
        } else {
            Writer::compact(out)
        };
        let written = doc.serialize(&mut w).and_then(|()| w.raw(b"\n"));
        written.map_err(|e: json::Error| ReportError::Write(e.to_string()))?;
        w.into_inner()
            .map_err(|e: json::Error| ReportError::Write(e.to_string()))
    }
}
