//! The report of a pass ("pktflow.report/1"), assembled by the core and written by it: each
//! connection's record spooled as the pass judges it, the relays found once it is done, the
//! capture's own part and the findings Python words; then the JSON, in connection order, each
//! connection with its relay role. Nothing written is read back: records are kept in a binary
//! form until they are written, once.

use std::collections::HashMap;
use std::io::Write;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Condvar, Mutex};

use serde::ser::{Error as _, SerializeSeq};
use serde::{Deserialize, Serialize, Serializer};

use super::cancels::Cancels;
use super::connection::{ConnectionRecord, Role};
use super::json::{self, Writer, Written};
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
    /// Following a stream: each connection was written as it closed, so none is kept for
    /// the report (which then holds the capture, the relays and the findings).
    following: bool,
}

/// Following a stream, relays are judged over windows of legs holding about this many queries.
pub const FOLLOW_QUERIES: usize = 50_000;

impl Assembly {
    /// The assembly of a pass that follows a stream: memory stays flat however long it runs.
    pub fn following() -> Self {
        Assembly {
            stage: RelayStage::bounded(FOLLOW_QUERIES),
            following: true,
            ..Assembly::default()
        }
    }

    /// A judged connection: kept as a leg for the relay stage, and spooled.
    pub fn add(
        &mut self,
        number: u64,
        record: &ConnectionRecord,
        extras: LegExtras,
    ) -> Result<(), SpoolError> {
        self.stage.add(record, number, extras)?;
        if self.following {
            // each connection is written as it closes: no cancel is linked across them
            return Ok(());
        }
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
        crate::grow::push(&mut self.index, (number, record.payload_bytes()));
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

/// The connections, in order: each decoded from the spool and written as JSON text by a few
/// threads, a batch at a time (up to BATCH records, or one record past BATCH_BYTES spooled)
/// and at most AHEAD batches ahead of the writer, which copies the texts out in order. A
/// storm's 80,000 records are most of its report's time; one thread decoding, writing and
/// freeing them left the machine's other cores idle once the pass was done.
struct Connections<'a> {
    report: &'a Report,
    /// The connections' depth when indented (None: compact).
    indented: Option<usize>,
}

const BATCH: usize = 64;
/// A long connection's record (10,000 queries make about 9 MB of JSON) is a batch of its own.
const BATCH_BYTES: u64 = 256 << 10;
const AHEAD: usize = 4;
/// A buffer grown past this (by a long connection) is not kept for reuse.
const SPARE_BYTES: usize = 4 << 20;
const MAX_WRITERS: usize = 4;

/// A batch's texts, one after another, and where each ends. The text's buffer goes back to
/// the threads once copied out: reused, it is never freed by a thread that did not allocate
/// it (which takes that thread's arena lock) and memory stays at AHEAD batches' worth.
type Batch = Result<(String, Vec<usize>), ReportError>;

/// Which batches the writer has copied out, whether it has stopped, and the buffers it has
/// handed back.
#[derive(Default)]
struct Progress {
    state: Mutex<(usize, bool)>,
    changed: Condvar,
    spares: Mutex<Vec<Vec<u8>>>,
}

impl Progress {
    fn spare(&self) -> Vec<u8> {
        let spare = self.spares.lock().ok().and_then(|mut s| s.pop());
        let mut buf = spare.unwrap_or_default();
        buf.clear();
        buf
    }

    fn give_back(&self, text: String) {
        if text.capacity() > SPARE_BYTES {
            return;
        }
        if let Ok(mut s) = self.spares.lock() {
            s.push(text.into_bytes());
        }
    }

    fn copied(&self, batches: usize) {
        if let Ok(mut s) = self.state.lock() {
            s.0 = batches;
            self.changed.notify_all();
        }
    }

    fn stop(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.1 = true;
            self.changed.notify_all();
        }
    }

    /// Wait until batch `b` may be rendered; false once the writer has stopped.
    fn wait_for(&self, b: usize) -> bool {
        let Ok(s) = self.state.lock() else {
            return false;
        };
        let waited = self
            .changed
            .wait_while(s, |(copied, stopped)| b >= *copied + AHEAD && !*stopped);
        waited.is_ok_and(|s| !s.1)
    }
}

impl Connections<'_> {
    /// Where each batch starts (in the report's order), and the report's end.
    fn batches(&self) -> Vec<usize> {
        let mut starts = vec![0];
        let (mut records, mut bytes) = (0, 0);
        for i in 0..self.report.len() {
            if records == BATCH || bytes > BATCH_BYTES {
                starts.push(i);
                (records, bytes) = (0, 0);
            }
            records += 1;
            bytes += self.report.spooled_len(i);
        }
        starts.push(self.report.len());
        starts
    }

    fn batch(&self, records: Range<usize>, buf: &mut Vec<u8>, mut text: Vec<u8>) -> Batch {
        let mut ends = Vec::with_capacity(records.len());
        for i in records {
            let record = self.report.read(i, buf)?;
            text = json::append(&record, self.indented, text)
                .map_err(|e| ReportError::Write(e.to_string()))?;
            ends.push(text.len());
        }
        // the writer escapes everything past ASCII
        let text = String::from_utf8(text).map_err(|e| ReportError::Write(e.to_string()))?;
        Ok((text, ends))
    }

    /// A writer thread's part: the next batch not taken, until none is left.
    fn render(
        &self,
        starts: &[usize],
        next: &AtomicUsize,
        progress: &Progress,
        tx: &Sender<(usize, Batch)>,
    ) {
        let mut buf = Vec::new();
        loop {
            let b = next.fetch_add(1, Ordering::Relaxed);
            let (Some(&from), Some(&to)) = (starts.get(b), starts.get(b + 1)) else {
                return;
            };
            if !progress.wait_for(b) {
                return;
            }
            if tx
                .send((b, self.batch(from..to, &mut buf, progress.spare())))
                .is_err()
            {
                return;
            }
        }
    }

    /// Copy the batches out in order as the threads send them.
    fn copy_out<S: SerializeSeq>(
        seq: &mut S,
        batches: usize,
        rx: &Receiver<(usize, Batch)>,
        progress: &Progress,
    ) -> Result<(), S::Error> {
        let mut waiting: HashMap<usize, Batch> = HashMap::new();
        for b in 0..batches {
            let batch = loop {
                if let Some(batch) = waiting.remove(&b) {
                    break batch;
                }
                match rx.recv() {
                    Ok((at, batch)) => {
                        waiting.insert(at, batch);
                    }
                    Err(_) => return Err(S::Error::custom("a report writer thread stopped")),
                }
            };
            let (text, ends) = batch.map_err(S::Error::custom)?;
            let mut start = 0;
            for end in ends {
                let written = text.get(start..end).unwrap_or_default();
                seq.serialize_element(&Written(written))?;
                start = end;
            }
            progress.give_back(text);
            progress.copied(b + 1);
        }
        Ok(())
    }
}

impl Serialize for Connections<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.report.len()))?;
        let starts = self.batches();
        let batches = starts.len().saturating_sub(1);
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, MAX_WRITERS)
            .min(batches);
        let next = AtomicUsize::new(0);
        let progress = Progress::default();
        let (tx, rx) = channel();
        let copied = std::thread::scope(|scope| {
            for _ in 0..threads {
                let tx = tx.clone();
                let (starts, next, progress) = (&starts, &next, &progress);
                scope.spawn(move || self.render(starts, next, progress, &tx));
            }
            drop(tx);
            let copied = Self::copy_out(&mut seq, batches, &rx, &progress);
            // the threads end whether or not all went well
            progress.stop();
            copied
        });
        copied?;
        seq.end()
    }
}

impl Report {
    /// pktflow's version, as the report names it.
    pub fn version(&self) -> &str {
        &self.version
    }

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

    /// Connection `i`'s record's size in the spool.
    fn spooled_len(&self, i: usize) -> u64 {
        self.order.get(i).map_or(0, |&p| self.spool.item_len(p))
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
            connections: Connections {
                report: self,
                indented: indented.then_some(2),
            },
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
