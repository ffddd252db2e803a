//! The packets of chosen connections within a time span, for a diagram: what each packet was
//! and which PostgreSQL messages each segment completed, in wire order (a message belongs to
//! the segment that ends it, as tshark's reassembly attributes it). A second, selective
//! pass with the analysis pass's engine and rules, so connections and numbers are the same.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;
use std::rc::Rc;

use serde::Serialize;

use crate::capture::Item;
use crate::capture::{Capture, OpenError};
use crate::pgwire::counts::{Detail as TrailDetail, MAX_DETAILS};
use crate::pgwire::facts::Encryption;
use crate::pgwire::messages::Name;
use crate::pgwire::tls::{
    cipher_name, group_name, handshake_name, record_name, version_name, RecordWalk,
};
use crate::pgwire::{Conversation, ConversationFacts};
use crate::report::connection::settle_roles;
use crate::tcp::observe::{DirectionInfo, Observed, PacketObserver, StreamSink};
use crate::tcp::{Connection, ConnectionFacts, ConnectionMeta, Handler, TcpEngine};

/// One packet: connection number, then the engine's observation of it (direction, frame,
/// time, seq, end, ack, window, flags, payload class, first SACK block's place).
#[derive(Serialize)]
pub struct Event(u64, usize, u64, f64, i64, i64, i64, i64, u8, u8, u8);

/// Messages a segment completed, in wire order, consecutive repeats folded: name and count.
pub type Label = Vec<(String, u64)>;

/// What a diagram shows of a message beside its name: a command tag as sent, an error's or
/// notice's severity, SQLSTATE and message.
#[derive(Serialize, Debug, PartialEq)]
pub struct Detail {
    pub name: String,
    pub severity: Option<String>,
    pub code: Option<String>,
    pub text: String,
}

/// What the diagram draws.
#[derive(Serialize, Default)]
pub struct Collected {
    pub events: Vec<Event>,
    /// (connection, frame, messages completed in that frame: name and count)
    pub labels: Vec<(u64, u64, Label)>,
    /// (connection, frame, details of the tags, errors and notices it completed, in order)
    pub details: Vec<(u64, u64, Vec<Detail>)>,
    /// (connection, frame) of segments that ended inside a message
    pub partial: Vec<(u64, u64)>,
    /// each selected connection, and whether the report swaps the engine's client and server
    /// (report::connection::settle_roles): the lanes follow the report's roles
    pub swapped: Vec<(u64, bool)>,
    /// each selected connection's engine and decoder facts (for checks that the diagram's
    /// pass saw what the analysis pass saw; not handed out)
    #[serde(skip)]
    pub connections: Vec<(u64, ConnectionFacts, Option<ConversationFacts>)>,
    /// past `max_events`, packets were not kept
    pub cut: bool,
    pub records: u64,
}

#[derive(Default)]
struct Shared {
    t0: f64,
    t1: f64,
    max_events: usize,
    events: Vec<Event>,
    labels: BTreeMap<(u64, u64), Label>,
    details: BTreeMap<(u64, u64), Vec<Detail>>,
    partial: BTreeSet<(u64, u64)>,
    cut: bool,
}

/// A selected connection's recorder and decoder.
pub struct Recorder {
    number: u64,
    conversation: Conversation,
    shared: Rc<RefCell<Shared>>,
    /// Per direction, the latest frame whose bytes were fed: segments held back for a hole
    /// are fed when the frame filling it comes, and what they complete belongs to that frame.
    fed: [u64; 2],
    /// Per direction, TLS records walked once TLS took over (named by content type).
    tls: [RecordWalk; 2],
}

impl PacketObserver for Recorder {
    fn on_packet(&mut self, p: &Observed) {
        let number = self.number;
        let mut s = self.shared.borrow_mut();
        if !(s.t0 <= p.ts && p.ts <= s.t1) {
            return;
        }
        if s.events.len() >= s.max_events {
            s.cut = true;
            return;
        }
        s.events.push(Event(
            number, p.d, p.frame, p.ts, p.seq, p.end, p.ack, p.win, p.flags, p.kind, p.sack,
        ));
    }

    fn finish(&mut self, _info: &[DirectionInfo; 2]) {}
}

impl StreamSink for Recorder {
    fn feed(&mut self, d: usize, data: &[u8], offset: i64, frame: u64, ts: f64, start_seen: bool) {
        let tls_before = self.conversation.encryption() == Encryption::Tls;
        self.conversation
            .feed(d, data, offset, frame, ts, start_seen);
        let (mut steps, mut details) = self.conversation.take_trail(d).unwrap_or_default();
        // TLS from here on (after the server's 'S'), or from the first byte (direct TLS)
        let tls_now = self.conversation.encryption() == Encryption::Tls;
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
        let partial = self.conversation.side_progress(d).is_some_and(|p| p.3);
        let frame = match self.fed.get_mut(d) {
            Some(last) => {
                *last = (*last).max(frame);
                *last
            }
            None => frame,
        };
        let key = (self.number, frame);
        let mut s = self.shared.borrow_mut();
        if !steps.is_empty() {
            // a frame fed in pieces (a hole filled) continues its label: the bytes are
            // consecutive in the stream, so a repeat across the join folds too
            let label = s.labels.entry(key).or_default();
            for (name, n) in steps {
                match label.last_mut() {
                    Some((last, count)) if *last == *name.label() => *count += n,
                    _ => label.push((name.text(), n)),
                }
            }
        }
        if !details.is_empty() {
            s.details
                .entry(key)
                .or_default()
                .extend(details.into_iter().map(|x| Detail {
                    name: x.name.text(),
                    severity: x.severity,
                    code: x.code,
                    text: x.text,
                }));
        }
        if partial {
            s.partial.insert(key);
        } else {
            s.partial.remove(&key);
        }
    }

    fn gap(&mut self, d: usize, offset: i64, length: i64, frame: u64, ts: f64) {
        self.conversation.gap(d, offset, length, frame, ts);
        if self.conversation.encryption() == Encryption::Tls {
            if let Some(walk) = self.tls.get_mut(d) {
                walk.gap(); // record boundaries lost with the bytes
            }
        }
    }

    fn finish(&mut self) {
        StreamSink::finish(&mut self.conversation);
    }
}

/// Both traits for a connection that may or may not be drawn.
pub struct Maybe(Option<Recorder>);

impl PacketObserver for Maybe {
    fn on_packet(&mut self, p: &Observed) {
        if let Some(r) = self.0.as_mut() {
            r.on_packet(p);
        }
    }

    fn finish(&mut self, info: &[DirectionInfo; 2]) {
        if let Some(r) = self.0.as_mut() {
            PacketObserver::finish(r, info);
        }
    }
}

impl StreamSink for Maybe {
    fn feed(&mut self, d: usize, data: &[u8], offset: i64, frame: u64, ts: f64, start_seen: bool) {
        if let Some(r) = self.0.as_mut() {
            r.feed(d, data, offset, frame, ts, start_seen);
        }
    }

    fn gap(&mut self, d: usize, offset: i64, length: i64, frame: u64, ts: f64) {
        if let Some(r) = self.0.as_mut() {
            r.gap(d, offset, length, frame, ts);
        }
    }

    fn finish(&mut self) {
        if let Some(r) = self.0.as_mut() {
            StreamSink::finish(r);
        }
    }
}

struct Picker {
    numbers: HashSet<u64>,
    shared: Rc<RefCell<Shared>>,
}

impl Handler for Picker {
    type Analyses = Maybe;

    fn open(&mut self, meta: &ConnectionMeta) -> Maybe {
        if !self.numbers.contains(&meta.number) {
            return Maybe(None);
        }
        let mut conversation = Conversation::new();
        conversation.record_trail();
        Maybe(Some(Recorder {
            number: meta.number,
            conversation,
            shared: Rc::clone(&self.shared),
            fed: [0, 0],
            tls: Default::default(),
        }))
    }
}

/// Packets of the connections numbered `numbers` with capture times in [t0, t1].
pub fn collect(path: &Path, pick: &Selection) -> Result<Collected, OpenError> {
    Ok(collect_from(Capture::open(path)?, pick))
}

/// The same over a capture held in memory (tests, fuzzing).
pub fn collect_bytes(data: &[u8], pick: &Selection) -> Result<Collected, OpenError> {
    Ok(collect_from(Capture::from_bytes(data)?, pick))
}

/// What a diagram asks of the capture: which connections, which span, how many events at
/// most, and the pass's lingers (so connections are numbered as the report's pass numbers
/// them).
#[derive(Clone, Copy, Debug)]
pub struct Selection<'a> {
    pub numbers: &'a [u64],
    pub t0: f64,
    pub t1: f64,
    pub max_events: usize,
    pub linger: Option<f64>,
    pub settled_linger: Option<f64>,
}

fn collect_from(mut capture: Capture, pick: &Selection) -> Collected {
    let Selection {
        numbers,
        t0,
        t1,
        max_events,
        linger,
        settled_linger,
    } = *pick;
    let shared = Rc::new(RefCell::new(Shared {
        t0,
        t1,
        max_events,
        ..Shared::default()
    }));
    let picker = Picker {
        numbers: numbers.iter().copied().collect(),
        shared: Rc::clone(&shared),
    };
    let mut engine = TcpEngine::new(picker, linger, settled_linger);
    let mut out = Collected::default();
    let keep = |conn: Connection<Maybe>, out: &mut Collected| {
        let facts = conn.facts();
        if let Some(r) = conn.into_analyses().0 {
            let front = r.conversation.frontend_direction().map(|d| d as u8);
            let (swapped, _) = settle_roles(&facts, front);
            out.swapped.push((r.number, swapped));
            out.connections
                .push((r.number, facts, Some(r.conversation.facts())));
        }
    };
    while let Some(item) = capture.next_item() {
        match item {
            Item::Packet(pkt) => engine.feed(&pkt),
            Item::BatchEnd { ts } => {
                engine.sweep(ts);
                for conn in engine.take_retired() {
                    keep(*conn, &mut out);
                }
            }
        }
    }
    engine.finish();
    for conn in engine.take_retired() {
        keep(*conn, &mut out);
    }
    drop(engine);
    let s = shared.take();
    out.events = s.events;
    out.labels = s.labels.into_iter().map(|((n, f), l)| (n, f, l)).collect();
    out.details = s.details.into_iter().map(|((n, f), l)| (n, f, l)).collect();
    out.partial = s.partial.into_iter().collect();
    out.cut = s.cut;
    out.records = capture.stats().packets;
    out
}
