//! One pass over a capture: the reader's packets into the TCP engine, each connection's
//! analyses (PostgreSQL decoder, transfer measurements) fed by it, and each connection's facts
//! handed out once the engine retires it. Memory follows the connections open at once. When a
//! diagram is to be drawn, every connection's packets are kept too (drawing::record), on disk.

use std::path::Path;

use serde::Serialize;

use crate::capture::{Capture, CaptureStats, Item, OpenError, Stream};
use crate::drawing::{Recorder, Recording, Shared};
use crate::pgwire::conversation::FinalQuery;
use crate::pgwire::facts::Encryption;
use crate::pgwire::held::QuerySpool;
use crate::pgwire::{Conversation, ConversationFacts, LiveQueries};
use crate::report::connection::settle_roles;
use crate::report::spool::SpoolError;
use crate::tcp::observe::{DirectionInfo, Observed, PacketObserver, StreamSink};
use crate::tcp::{Connection, ConnectionFacts, ConnectionMeta, EngineFacts, Handler, TcpEngine};
use crate::transfer::{TransferAnalyzer, TransferFacts};

#[derive(Clone, Copy, Debug)]
pub struct PassOptions {
    pub decode_postgres: bool,
    pub transfer: bool,
    /// A closed connection silent this long (capture seconds) is retired; None: never.
    pub linger: Option<f64>,
    /// The same after a RST or once both FINs are acknowledged.
    pub settled_linger: Option<f64>,
    /// Keep every connection's packets for a diagram (drawing::record).
    pub record: bool,
}

/// What one connection's analyses are: each optional, as the options ask.
pub struct Analyses {
    conversation: Option<Conversation>,
    transfer: Option<TransferAnalyzer>,
    recorder: Option<Recorder>,
}

impl PacketObserver for Analyses {
    fn on_packet(&mut self, p: &Observed) {
        if let Some(t) = self.transfer.as_mut() {
            t.on_packet(p);
        }
        if let Some(r) = self.recorder.as_mut() {
            r.packet(p);
        }
    }

    fn finish(&mut self, info: &[DirectionInfo; 2]) {
        if let Some(t) = self.transfer.as_mut() {
            t.finish(info);
        }
    }
}

impl StreamSink for Analyses {
    fn feed(&mut self, d: usize, data: &[u8], offset: i64, frame: u64, ts: f64, start_seen: bool) {
        if let Some(c) = self.conversation.as_mut() {
            if c.following_stream() {
                // the backend's limit seconds, for each final query's response
                let backend = c.frontend_direction().map(|f| 1 - f);
                let clock = backend.and_then(|b| self.transfer.as_ref()?.limit_seconds(b));
                if let Some(clock) = clock {
                    c.set_clock(clock);
                }
            }
            let tls_before = c.encryption() == Encryption::Tls;
            c.feed(d, data, offset, frame, ts, start_seen);
            if let Some(r) = self.recorder.as_mut() {
                r.fed(c, d, data, frame, tls_before);
            }
        }
    }

    fn gap(&mut self, d: usize, offset: i64, length: i64, frame: u64, ts: f64) {
        if let Some(c) = self.conversation.as_mut() {
            c.gap(d, offset, length, frame, ts);
            if let Some(r) = self.recorder.as_mut() {
                r.gap(c, d);
            }
        }
    }

    fn resent(&mut self, d: usize, offset: i64, length: i64, frame: u64, ts: f64) {
        if let Some(c) = self.conversation.as_mut() {
            c.resent(d, offset, length, frame, ts);
        }
    }

    fn finish(&mut self) {
        if let Some(c) = self.conversation.as_mut() {
            StreamSink::finish(c);
        }
    }
}

struct Factory {
    options: PassOptions,
    /// Where long conversations' finished queries wait for their reports.
    held: QuerySpool,
    /// Following a stream: where each conversation says its queries once final.
    live: Option<LiveQueries>,
    recording: Option<Shared>,
}

impl Handler for Factory {
    type Analyses = Analyses;

    fn open(&mut self, meta: &ConnectionMeta) -> Analyses {
        let conversation = |live: &Option<LiveQueries>| match live {
            Some(l) => Conversation::following(meta.number, l.clone()),
            None => Conversation::new(),
        };
        let recorder = (self.recording.as_ref()).map(|r| Recorder::new(meta.number, r.clone()));
        let mut conversation = (self.options.decode_postgres).then(|| conversation(&self.live));
        if let Some(c) = conversation.as_mut() {
            c.hold_in(self.held.clone());
        }
        if let (Some(c), Some(_)) = (conversation.as_mut(), recorder.as_ref()) {
            c.record_trail(); // what each segment completed, for the diagram
        }
        Analyses {
            conversation,
            transfer: self.options.transfer.then(TransferAnalyzer::new),
            recorder,
        }
    }
}

/// Everything known of one connection once it is done.
#[derive(Serialize)]
pub struct ConnectionReport {
    pub tcp: ConnectionFacts,
    pub postgres: Option<ConversationFacts>,
    pub transfer: Option<TransferFacts>,
}

impl ConnectionReport {
    /// The engine direction the PostgreSQL frontend speaks on, when known.
    pub fn frontend(&self) -> Option<u8> {
        self.postgres.as_ref().and_then(|p| p.frontend_direction)
    }
}

pub struct Pass {
    capture: Capture,
    engine: TcpEngine<Factory>,
    done: bool,
    recording: Option<Shared>,
}

impl Pass {
    pub fn open(path: &Path, options: PassOptions) -> Result<Pass, OpenError> {
        Ok(Pass::over(Capture::open(path)?, options))
    }

    /// The same pass over a capture read from a pipe (`name`: what the report calls it).
    pub fn open_stream(
        name: &str,
        stream: Stream,
        options: PassOptions,
    ) -> Result<Pass, OpenError> {
        Ok(Pass::over(Capture::open_stream(name, stream)?, options))
    }

    /// The same pass over a capture held in memory (tests, fuzzing).
    pub fn from_bytes(data: &[u8], options: PassOptions) -> Result<Pass, OpenError> {
        Ok(Pass::over(Capture::from_bytes(data)?, options))
    }

    fn over(capture: Capture, options: PassOptions) -> Pass {
        let recording = options.record.then(Recording::shared);
        let factory = Factory {
            options,
            held: QuerySpool::default(),
            live: None,
            recording: recording.clone(),
        };
        let engine = TcpEngine::new(factory, options.linger, options.settled_linger);
        Pass {
            capture,
            engine,
            done: false,
            recording,
        }
    }

    /// Follow the stream: from now on each query is said once final (`take_final_queries`).
    pub fn follow(&mut self) {
        self.engine.handler_mut().live = Some(LiveQueries::default());
    }

    /// The queries said final since the last take, each with its connection's number
    /// (following only).
    pub fn take_final_queries(&mut self) -> Vec<FinalQuery> {
        (self.engine.handler().live.as_ref()).map_or_else(Vec::new, LiveQueries::take)
    }

    /// Every connection's packets kept for a diagram (with `PassOptions::record`); complete
    /// once the pass is done.
    pub fn recording(&self) -> Option<Shared> {
        self.recording.clone()
    }

    /// Feed the next batch of packets (the engine is swept where the reader ends a batch);
    /// append the connections retired meanwhile to `out`. False once the capture is done
    /// (then every connection still open is in `out` too).
    pub fn step(&mut self, out: &mut Vec<ConnectionReport>) -> Result<bool, SpoolError> {
        if self.done {
            return Ok(false);
        }
        if !self.feed() {
            self.end();
        }
        self.take(out)?;
        Ok(!self.done)
    }

    /// Feed packets up to where the reader ends a batch (the engine swept there); false once
    /// the capture is exhausted (what remains open is retired by `end`).
    pub fn feed(&mut self) -> bool {
        loop {
            match self.capture.next_item() {
                Some(Item::Packet(pkt)) => self.engine.feed(&pkt),
                Some(Item::BatchEnd { ts }) => {
                    self.engine.sweep(ts);
                    return true;
                }
                None => return false,
            }
        }
    }

    /// The capture is done: every connection still open is retired.
    pub fn end(&mut self) {
        if !self.done {
            self.done = true;
            self.engine.finish();
        }
    }

    /// Append the connections retired so far to `out`.
    pub fn take(&mut self, out: &mut Vec<ConnectionReport>) -> Result<(), SpoolError> {
        for conn in self.engine.take_retired() {
            out.push(report(conn)?);
        }
        Ok(())
    }

    /// Append the connections retired so far to `out`, their reports not made yet: a caller
    /// that makes them a few at a time holds one long connection's queries as facts at
    /// once, not every connection's that a step retired (the capture's end retires them all).
    pub fn take_retired(&mut self, out: &mut Vec<Retired>) {
        out.extend(self.engine.take_retired().map(Retired));
    }

    /// After the last step: a capture with records but none it could decode.
    pub fn outcome(&self) -> Result<(), OpenError> {
        self.capture.outcome()
    }

    pub fn stats(&self) -> &CaptureStats {
        self.capture.stats()
    }

    pub fn records(&self) -> u64 {
        self.capture.stats().packets
    }

    /// The capture's first packet's time, which report times count from (0 before any).
    pub fn start(&self) -> f64 {
        self.capture.stats().first_ts.unwrap_or(0.0)
    }

    /// Late packets, the settled linger in effect, connections numbered.
    pub fn engine_facts(&self) -> EngineFacts {
        self.engine.facts()
    }
}

/// A retired connection whose report is not made yet.
pub struct Retired(Box<Connection<Analyses>>);

impl Retired {
    /// The queries its report will list: what its report weighs, nearly.
    pub fn queries(&self) -> usize {
        (self.0.analyses().conversation.as_ref()).map_or(0, Conversation::listed_queries)
    }

    /// Its report; the queries it handed over are read back from the spool, which may fail.
    pub fn report(self) -> Result<ConnectionReport, SpoolError> {
        report(self.0)
    }
}

fn report(conn: Box<Connection<Analyses>>) -> Result<ConnectionReport, SpoolError> {
    let tcp = conn.facts();
    let mut analyses = conn.into_analyses();
    if let Some(r) = analyses.recorder.take() {
        let front = (analyses.conversation.as_ref())
            .and_then(Conversation::frontend_direction)
            .and_then(|d| u8::try_from(d).ok());
        r.close(settle_roles(&tcp, front).0);
    }
    Ok(ConnectionReport {
        tcp,
        postgres: analyses
            .conversation
            .map(Conversation::into_facts)
            .transpose()?,
        transfer: analyses.transfer.map(|t| t.facts()),
    })
}
