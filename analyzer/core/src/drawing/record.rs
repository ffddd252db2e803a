//! What a diagram draws, kept while the pass runs: each connection's packets as the engine
//! observed them, and the PostgreSQL messages (or TLS records) each segment completed, in wire
//! order (a message belongs to the segment that ends it, as tshark's reassembly attributes it).
//! A connection's entries go in a compact binary form to a spool, a chunk at a time, so
//! memory stays flat whatever the capture's size; once the report says what to draw, the
//! chosen connections' entries are read back (`Recording::read`).

use super::{Map, Set};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::pgwire::counts::{Detail as TrailDetail, MAX_DETAILS};
use crate::pgwire::facts::Encryption;
use crate::pgwire::messages::Name;
use crate::pgwire::tls::{
    cipher_name, group_name, handshake_name, record_name, version_name, RecordWalk,
};
use crate::pgwire::Conversation;
use crate::report::spool::{Spool, SpoolError};
use crate::tcp::observe::Observed;

/// Bytes of a connection's entries held before they go to the spool.
const CHUNK: usize = 64 << 10;

/// One packet as a diagram draws it: the engine's direction (0: client to server as first
/// guessed), frame, time, payload [seq, end) in its direction's stream, ACK (-1: none),
/// window, TCP flags, payload class and first SACK block's place (crate::tcp::observe).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Packet {
    pub d: u8,
    pub frame: u64,
    pub ts: f64,
    pub seq: i64,
    pub end: i64,
    pub ack: i64,
    pub win: i64,
    pub flags: u8,
    pub kind: u8,
    pub sack: u8,
}

impl Packet {
    fn of(p: &Observed) -> Self {
        Packet {
            d: u8::from(p.d != 0),
            frame: p.frame,
            ts: p.ts,
            seq: p.seq,
            end: p.end,
            ack: p.ack,
            win: p.win,
            flags: p.flags,
            kind: p.kind,
            sack: p.sack,
        }
    }
}

/// What a diagram shows of a message beside its name: a command tag as sent, an error's or
/// notice's severity, SQLSTATE and message, a TLS handshake message with what it chose.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Detail {
    pub name: String,
    pub severity: Option<String>,
    pub code: Option<String>,
    pub text: String,
}

/// Messages a segment completed, in wire order, consecutive repeats folded: name and count.
pub type Label = Vec<(String, u64)>;

/// A frame's detail as spooled: name number, severity, SQLSTATE, text.
type DetailEntry = (u32, Option<String>, Option<String>, String);

/// A connection's entries in the spool. Message names are numbered per connection, each
/// number defined by a `Name` entry before its first use.
#[derive(Serialize, Deserialize)]
enum Entry {
    Packet(Packet),
    Name(String),
    /// The messages frame completed (name numbers and counts), appended to its label.
    Messages(u64, Vec<(u32, u64)>),
    Details(u64, Vec<DetailEntry>),
    /// Whether frame ended inside a message (the latest entry for a frame holds).
    Partial(u64, bool),
}

/// Every connection's entries, and where each connection's chunks are.
#[derive(Default)]
pub struct Recording {
    spool: Spool,
    chunks: Map<u64, Vec<usize>>,
    /// Per connection, whether the report swaps the engine's client and server
    /// (report::connection::settle_roles): the lanes follow the report's roles.
    swapped: Map<u64, bool>,
    /// Per connection, its packets.
    packets: Map<u64, usize>,
    failed: Option<SpoolError>,
}

/// The recording, shared by the connections' recorders on the pass's thread and handed to
/// the report once the pass is done.
pub type Shared = Arc<Mutex<Recording>>;

impl Recording {
    pub fn shared() -> Shared {
        Arc::new(Mutex::new(Recording::default()))
    }

    fn push(&mut self, number: u64, chunk: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        match self.spool.push(chunk) {
            Ok(()) => self
                .chunks
                .entry(number)
                .or_default()
                .push(self.spool.len() - 1),
            Err(e) => self.failed = Some(e),
        }
    }

    /// The packets of connections `numbers` with capture times in [t0, t1], at most `max`
    /// (the first in capture order: past it `cut` is set), and what their segments completed.
    pub fn read(&self, numbers: &[u64], t0: f64, t1: f64, max: usize) -> Result<Drawn, SpoolError> {
        if let Some(e) = &self.failed {
            return Err(SpoolError {
                dir: e.dir.clone(),
                error: std::io::Error::new(e.error.kind(), e.error.to_string()),
            });
        }
        let mut out = Drawn::default();
        let mut chosen: Vec<u64> = numbers.to_vec();
        chosen.sort_unstable();
        chosen.dedup();
        out.label_table.push(Label::new());
        let mut table: Map<Label, u32> = Map::default();
        out.packets.reserve_exact(
            (chosen.iter())
                .map(|n| self.packets.get(n).copied().unwrap_or(0))
                .sum(),
        );
        for &n in &chosen {
            let mut names: Vec<String> = Vec::new();
            let name = |names: &Vec<String>, i: u32| names.get(i as usize).cloned();
            // this connection's labels by its own name numbers, until they are complete
            let mut labels = Labelling {
                connection: n,
                table: &mut table,
                current: None,
                mine: Map::default(),
                theirs: Map::default(),
            };
            self.walk(n, |e| match e {
                Entry::Packet(p) => {
                    if t0 <= p.ts && p.ts <= t1 {
                        out.packets.push((n, p));
                    }
                }
                Entry::Name(s) => names.push(s),
                Entry::Messages(frame, msgs) => labels.add(frame, msgs, &names, &mut out),
                Entry::Details(frame, details) => {
                    let kept = out.details.entry((n, frame)).or_default();
                    for (i, severity, code, text) in details {
                        if let Some(name) = name(&names, i) {
                            kept.push(Detail {
                                name,
                                severity,
                                code,
                                text,
                            });
                        }
                    }
                }
                Entry::Partial(frame, partial) => {
                    if partial {
                        out.partial.insert((n, frame));
                    } else {
                        out.partial.remove(&(n, frame));
                    }
                }
            })?;
            labels.close(&names, &mut out);
            out.swapped
                .insert(n, self.swapped.get(&n).copied().unwrap_or(false));
        }
        // in capture order (frames are unique across connections), the first `max` kept
        out.packets.sort_unstable_by_key(|(_, p)| p.frame);
        if out.packets.len() > max {
            out.packets.truncate(max);
            out.packets.shrink_to_fit();
            out.cut = true;
        }
        Ok(out)
    }

    /// Each entry of connection `number`, in order.
    fn walk(&self, number: u64, mut f: impl FnMut(Entry)) -> Result<(), SpoolError> {
        let mut buf = Vec::new();
        for &chunk in self.chunks.get(&number).into_iter().flatten() {
            self.spool.read(chunk, &mut buf)?;
            let mut rest: &[u8] = &buf;
            while !rest.is_empty() {
                match postcard::take_from_bytes::<Entry>(rest) {
                    Ok((e, tail)) => {
                        f(e);
                        rest = tail;
                    }
                    // written by this process a moment ago: a bad entry is a bug, and ends
                    // the connection's entries rather than the drawing
                    Err(_) => break,
                }
            }
        }
        Ok(())
    }

    /// Connections recorded.
    pub fn len(&self) -> usize {
        self.chunks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }
}

/// A connection's labels as its entries are read back: the frame being labelled (a frame's
/// messages usually come in one entry, or in a few in a row), each label finished numbered
/// in the drawing's table (a bulk transfer's segments complete a few kinds of label,
/// "CopyData×5", many times: each is kept once).
struct Labelling<'t> {
    connection: u64,
    /// Every label of the drawing, numbered.
    table: &'t mut Map<Label, u32>,
    current: Option<(u64, Vec<(u32, u64)>)>,
    /// This connection's labels (by its own name numbers) and their numbers in the table.
    mine: Map<Vec<(u32, u64)>, u32>,
    theirs: Map<u32, Vec<(u32, u64)>>,
}

impl Labelling<'_> {
    fn add(&mut self, frame: u64, msgs: Vec<(u32, u64)>, names: &[String], out: &mut Drawn) {
        if self.current.as_ref().is_none_or(|(f, _)| *f != frame) {
            self.close(names, out);
            // a frame labelled before, fed again in pieces: its label goes on
            let before = (out.labels.get(&(self.connection, frame)))
                .and_then(|id| self.theirs.get(id))
                .cloned()
                .unwrap_or_default();
            self.current = Some((frame, before));
        }
        if let Some((_, label)) = self.current.as_mut() {
            for (i, count) in msgs {
                match label.last_mut() {
                    Some((last, c)) if *last == i => *c += count,
                    _ => label.push((i, count)),
                }
            }
        }
    }

    /// The frame being labelled is done: its label numbered.
    fn close(&mut self, names: &[String], out: &mut Drawn) {
        let Some((frame, label)) = self.current.take() else {
            return;
        };
        let id = match self.mine.get(&label) {
            Some(&id) => id,
            None => {
                let named: Label = (label.iter())
                    .filter_map(|&(i, c)| names.get(i as usize).map(|t| (t.clone(), c)))
                    .collect();
                let next = u32::try_from(out.label_table.len()).unwrap_or(0);
                let id = *self.table.entry(named.clone()).or_insert(next);
                if id == next {
                    out.label_table.push(named);
                }
                self.mine.insert(label.clone(), id);
                self.theirs.insert(id, label);
                id
            }
        };
        out.labels.insert((self.connection, frame), id);
    }
}

/// A selection's packets read back, in capture order, with what their segments completed.
#[derive(Debug, Default)]
pub struct Drawn {
    /// (connection, packet)
    pub packets: Vec<(u64, Packet)>,
    /// (connection, frame) -> the messages it completed, in wire order (a number in
    /// `label_table`)
    pub labels: Map<(u64, u64), u32>,
    /// The labels, each once; the first is empty.
    pub label_table: Vec<Label>,
    /// (connection, frame) -> the details of its tags, errors, notices and TLS hellos
    pub details: Map<(u64, u64), Vec<Detail>>,
    /// (connection, frame) of segments that ended inside a message
    pub partial: Set<(u64, u64)>,
    /// per connection drawn, whether the report swaps the engine's client and server
    pub swapped: Map<u64, bool>,
    /// more packets in the span than were kept
    pub cut: bool,
}

/// One connection's recorder: its packets as they come, and what its segments completed as
/// the conversation's trail says, appended to its chunk.
pub struct Recorder {
    number: u64,
    shared: Shared,
    packets: usize,
    buf: Vec<u8>,
    names: Map<String, u32>,
    /// Per direction, the latest frame whose bytes were fed: segments held back for a hole
    /// are fed when the frame filling it comes, and what they complete belongs to that frame.
    fed: [u64; 2],
    /// Per direction, the frame last said to end inside a message.
    partial: [Option<u64>; 2],
    /// Per direction, TLS records walked once TLS took over (named by content type).
    tls: [RecordWalk; 2],
}

impl Recorder {
    pub fn new(number: u64, shared: Shared) -> Self {
        Recorder {
            number,
            shared,
            packets: 0,
            buf: Vec::new(),
            names: Map::default(),
            fed: [0, 0],
            partial: [None, None],
            tls: Default::default(),
        }
    }

    fn entry(&mut self, e: &Entry) {
        // an entry that cannot be encoded (never: plain data) is left out
        if let Ok(out) = postcard::to_extend(e, std::mem::take(&mut self.buf)) {
            self.buf = out;
        }
        if self.buf.len() >= CHUNK {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let mut rec = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        rec.push(self.number, &self.buf);
        self.buf.clear();
    }

    fn name(&mut self, text: &str) -> u32 {
        if let Some(&i) = self.names.get(text) {
            return i;
        }
        let i = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
        self.names.insert(text.to_string(), i);
        self.entry(&Entry::Name(text.to_string()));
        i
    }

    pub fn packet(&mut self, p: &Observed) {
        self.packets += 1;
        self.entry(&Entry::Packet(Packet::of(p)));
    }

    /// After the conversation was fed direction d's bytes of `frame` (`tls_before`: TLS had
    /// taken over before them): what they completed.
    pub fn fed(
        &mut self,
        conversation: &mut Conversation,
        d: usize,
        data: &[u8],
        frame: u64,
        tls_before: bool,
    ) {
        let (mut steps, mut details) = conversation.take_trail(d).unwrap_or_default();
        // TLS from here on (after the server's 'S'), or from the first byte (direct TLS)
        let tls_now = conversation.encryption() == Encryption::Tls;
        if tls_before || (tls_now && data.first() == Some(&0x16)) {
            if let Some(walk) = self.tls.get_mut(d) {
                walk.feed(data, |t, handshakes| {
                    let name = Name::Known(record_name(t));
                    match steps.last_mut() {
                        Some((last, n)) if *last == name => *n += 1,
                        _ => steps.push((name, 1)),
                    }
                    // the plaintext handshake messages by name, a ServerHello with what it
                    // chose ("ServerHello, TLS 1.3, TLS_AES_256_GCM_SHA384")
                    for h in handshakes
                        .iter()
                        .take(MAX_DETAILS.saturating_sub(details.len()))
                    {
                        let mut text = handshake_name(h)
                            .map_or_else(|| format!("handshake type {}", h.kind), str::to_string);
                        if let Some(v) = h.version {
                            text += &format!(", {}", version_name(v));
                        }
                        if let Some(c) = h.cipher {
                            text += &format!(", {}", cipher_name(c));
                        }
                        if let Some(g) = h.group {
                            text += &format!(", {}", group_name(g));
                        }
                        details.push(TrailDetail {
                            name,
                            severity: None,
                            code: None,
                            text,
                        });
                    }
                });
            }
        }
        let partial = conversation.side_progress(d).is_some_and(|p| p.3);
        let frame = match self.fed.get_mut(d) {
            Some(last) => {
                *last = (*last).max(frame);
                *last
            }
            None => frame,
        };
        if !steps.is_empty() {
            let msgs: Vec<(u32, u64)> = steps
                .into_iter()
                .map(|(name, n)| (self.name(&name.label()), n))
                .collect();
            self.entry(&Entry::Messages(frame, msgs));
        }
        if !details.is_empty() {
            let kept: Vec<DetailEntry> = details
                .into_iter()
                .map(|x| (self.name(&x.name.label()), x.severity, x.code, x.text))
                .collect();
            self.entry(&Entry::Details(frame, kept));
        }
        let said = self.partial.get(d).copied().flatten();
        if partial && said != Some(frame) {
            self.entry(&Entry::Partial(frame, true));
        } else if !partial && said == Some(frame) {
            self.entry(&Entry::Partial(frame, false));
        }
        if let Some(slot) = self.partial.get_mut(d) {
            *slot = partial.then_some(frame).or(said.filter(|&f| f != frame));
        }
    }

    /// Bytes of direction d lost to the capture: TLS record boundaries go with them.
    pub fn gap(&mut self, conversation: &Conversation, d: usize) {
        if conversation.encryption() == Encryption::Tls {
            if let Some(walk) = self.tls.get_mut(d) {
                walk.gap();
            }
        }
    }

    /// The connection is done (`swapped`: the report swaps the engine's client and server).
    pub fn close(mut self, swapped: bool) {
        self.flush();
        let mut rec = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        rec.swapped.insert(self.number, swapped);
        rec.packets.insert(self.number, self.packets);
    }
}
