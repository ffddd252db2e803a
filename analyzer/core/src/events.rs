//! The packets of chosen connections within a time span, for a diagram: what each packet was
//! and which PostgreSQL messages each segment completed, in wire order. A second, selective
//! pass with the analysis pass's engine and rules, so connections and numbers are the same.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;
use std::rc::Rc;

use serde::Serialize;

use crate::capture::Item;
use crate::capture::{Capture, OpenError};
use crate::pgwire::{Conversation, ConversationFacts};
use crate::tcp::observe::{DirectionInfo, Observed, PacketObserver, StreamSink};
use crate::tcp::{Connection, ConnectionFacts, ConnectionMeta, Handler, TcpEngine};

/// One packet: connection number, then the engine's observation of it.
#[derive(Serialize)]
pub struct Event(u64, usize, u64, f64, i64, i64, i64, i64, u8, u8);

/// Messages a segment completed: each name and how many, in the order first met.
pub type Label = Vec<(String, u64)>;

/// What the diagram draws.
#[derive(Serialize, Default)]
pub struct Collected {
    pub events: Vec<Event>,
    /// (connection, frame, messages completed in that frame: name and count)
    pub labels: Vec<(u64, u64, Label)>,
    /// (connection, frame) of segments that ended inside a message
    pub partial: Vec<(u64, u64)>,
    /// each selected connection's engine facts and PostgreSQL facts (roles, for the lanes)
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
    partial: BTreeSet<(u64, u64)>,
    cut: bool,
}

/// A selected connection's recorder and decoder.
pub struct Recorder {
    number: u64,
    conversation: Conversation,
    shared: Rc<RefCell<Shared>>,
    /// per direction: its control messages' counts when last compared, and how many
    seen: [Vec<(String, u64)>; 2],
    named: [u64; 2],
}

impl Recorder {
    /// The messages direction d completed since `before` (named, rows, copies): control
    /// messages from their counts (compared only when one came), DataRows and CopyDatas from
    /// their totals, as most segments hold only those.
    fn completed(&mut self, d: usize, before: (u64, u64, u64)) -> Label {
        let Some((named, rows, copies, _)) = self.conversation.side_progress(d) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if let (Some(seen), Some(last)) = (self.seen.get_mut(d), self.named.get_mut(d)) {
            if named != *last {
                let now = self.conversation.side_counts(d);
                for (name, n) in &now {
                    if name == "DataRow" || name == "CopyData" {
                        continue;
                    }
                    let was = seen.iter().find(|(k, _)| k == name).map_or(0, |(_, v)| *v);
                    if *n != was {
                        out.push((name.clone(), n.saturating_sub(was)));
                    }
                }
                *seen = now;
                *last = named;
            }
        }
        for (name, n) in [
            ("DataRow", rows - before.1),
            ("CopyData", copies - before.2),
        ] {
            if n > 0 {
                out.push((name.to_string(), n));
            }
        }
        out
    }
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
            number, p.d, p.frame, p.ts, p.seq, p.end, p.ack, p.win, p.flags, p.kind,
        ));
    }

    fn finish(&mut self, _info: &[DirectionInfo; 2]) {}
}

impl StreamSink for Recorder {
    fn feed(&mut self, d: usize, data: &[u8], offset: i64, frame: u64, ts: f64, start_seen: bool) {
        let before = self
            .conversation
            .side_progress(d)
            .map_or((0, 0, 0), |(n, r, c, _)| (n, r, c));
        self.conversation
            .feed(d, data, offset, frame, ts, start_seen);
        let done = self.completed(d, before);
        let partial = self.conversation.side_progress(d).is_some_and(|p| p.3);
        let key = (self.number, frame);
        let mut s = self.shared.borrow_mut();
        if !done.is_empty() {
            let label = s.labels.entry(key).or_default();
            for (name, n) in done {
                match label.iter_mut().find(|(k, _)| *k == name) {
                    Some((_, count)) => *count += n,
                    None => label.push((name, n)),
                }
            }
        }
        if partial {
            s.partial.insert(key);
        } else {
            s.partial.remove(&key);
        }
    }

    fn gap(&mut self, d: usize, offset: i64, length: i64, frame: u64, ts: f64) {
        self.conversation.gap(d, offset, length, frame, ts);
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
        Maybe(Some(Recorder {
            number: meta.number,
            conversation: Conversation::new(),
            shared: Rc::clone(&self.shared),
            seen: [Vec::new(), Vec::new()],
            named: [0, 0],
        }))
    }
}

/// Packets of the connections numbered `numbers` with capture times in [t0, t1].
pub fn collect(
    path: &Path,
    numbers: &[u64],
    t0: f64,
    t1: f64,
    max_events: usize,
    linger: Option<f64>,
    settled_linger: Option<f64>,
) -> Result<Collected, OpenError> {
    let capture = Capture::open(path)?;
    Ok(collect_from(
        capture,
        numbers,
        t0,
        t1,
        max_events,
        linger,
        settled_linger,
    ))
}

/// The same over a capture held in memory (tests, fuzzing).
pub fn collect_bytes(
    data: &[u8],
    numbers: &[u64],
    t0: f64,
    t1: f64,
    max_events: usize,
    linger: Option<f64>,
    settled_linger: Option<f64>,
) -> Result<Collected, OpenError> {
    let capture = Capture::from_bytes(data)?;
    Ok(collect_from(
        capture,
        numbers,
        t0,
        t1,
        max_events,
        linger,
        settled_linger,
    ))
}

fn collect_from(
    mut capture: Capture,
    numbers: &[u64],
    t0: f64,
    t1: f64,
    max_events: usize,
    linger: Option<f64>,
    settled_linger: Option<f64>,
) -> Collected {
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
    out.partial = s.partial.into_iter().collect();
    out.cut = s.cut;
    out.records = capture.stats().packets;
    out
}
