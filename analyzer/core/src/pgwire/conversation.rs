//! The PostgreSQL conversation on one TCP connection, rebuilt from both byte streams
//! (sans-IO). Fed in-order bytes per direction (and gap markers) by the TCP engine. Each side
//! moves through:
//!   start -> typed             the stream's beginning was seen: untyped startup, then typed
//!   start/sync -> typed        mid-stream: decoding begins at the first message boundary
//!   typed -> sync              after a capture gap that cut a message: resynchronise
//!   any -> stopped             TLS/GSS took over, malformed framing, or not PostgreSQL
//! A connection whose startup was not seen is PostgreSQL only once proven (detect.rs); until
//! then what is decoded is tentative, and dropped if the proof never comes. The roles are
//! TCP's: direction 0 (the engine's client) is the frontend.
//! DataRow and CopyData are counted in the hot loop, never kept. Queries are answered in
//! order, so backend messages are charged to the oldest unfinished query.
//!
//! The rest of the decoder is in start.rs (untyped first bytes, TLS, resynchronisation,
//! settling what the connection is), walk.rs (the typed message walk) and handle.rs (what
//! each message does).

use std::collections::VecDeque;

use super::counts::{Counts, Drained};
use super::detect::{other_protocol, Evidence};
use super::facts::{
    Authentication, CancelRequest, DecodeStopped, Encryption, EncryptionRequest, Event, Protocol,
    ServerMessage, StartedAt, Startup, StopReason,
};
use super::framing::{header, plausible, BoundaryScan, MAX_CONTROL};
use super::held::{Held, QuerySpool};
use super::messages::Role;
use super::names::Names;
use super::query::Query;
use crate::tcp::observe::StreamSink;

/// Queries listed per connection; the rest are counted.
pub const MAX_QUERIES: u64 = 10_000;
/// Failed queries reported one by one per connection, then counted.
pub const MAX_ERROR_FINDINGS: u64 = 20;
/// Bytes searched for a provable boundary before settling for less.
pub const SYNC_WINDOW: usize = 256 * 1024;
/// Larger control messages are read up to here and the rest skipped.
pub const KEEP_CAP: usize = 1 << 20;
/// A TLS record is at most 16 KiB + 2 KiB: beyond, stop waiting for a ClientHello.
pub const MAX_CLIENT_HELLO: usize = 1 << 15;
/// Notices, and errors, outside any query kept per connection.
pub const MAX_SESSION_MESSAGES: usize = 16;
/// Server parameters kept per connection.
pub const MAX_PARAMETERS: usize = 64;
/// An empty side buffer gives back memory it grew past this.
const BUF_KEEP: usize = 1 << 16;

/// The stream offset of buf[pos] when buf[0] is at `off` (offsets come from the caller:
/// never an overflow).
pub(super) fn at(off: i64, pos: usize) -> i64 {
    off.saturating_add(i64::try_from(pos).unwrap_or(i64::MAX))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    Start,
    Typed,
    Sync,
    Stopped,
}

#[derive(Debug)]
pub(super) struct Side {
    pub role: Role,
    pub state: State,
    /// Bytes not consumed yet; base is the stream offset of buf[0].
    pub buf: Vec<u8>,
    pub base: i64,
    /// Body bytes of a counted (bulk or oversized) message still to pass.
    pub skip: i64,
    pub counts: Counts,
    pub lost: i64,
    /// The stream offset of the last segment fed: where a message may start after a gap.
    pub seg_start: i64,
    /// The boundary search while in Sync.
    pub scan: Option<BoundaryScan>,
}

impl Side {
    fn new(role: Role) -> Side {
        Side {
            role,
            state: State::Start,
            buf: Vec::new(),
            base: 0,
            skip: 0,
            counts: Counts::default(),
            lost: 0,
            seg_start: 0,
            scan: None,
        }
    }

    /// Keep `rest` as the unconsumed bytes (reusing the buffer's memory).
    pub fn keep(&mut self, rest: &[u8]) {
        self.buf.clear();
        self.buf.extend_from_slice(rest);
        self.keep_own();
    }

    /// A stopped side keeps nothing; an empty buffer gives back what a large message or a
    /// sync window made it take.
    pub fn keep_own(&mut self) {
        if self.state == State::Stopped {
            self.buf.clear();
        }
        if self.buf.is_empty() && self.buf.capacity() > BUF_KEEP {
            self.buf = Vec::new();
        }
    }
}

/// Queries by number (the order they were sent): the first MAX_QUERIES listed for the
/// report, the oldest of them handed over to the pass's spool once final (`held`); later
/// ones only while something still refers to them.
#[derive(Debug, Default)]
pub(super) struct Store {
    /// The listed queries not handed over: numbers from `held()` on.
    pub listed: VecDeque<Query>,
    pub extra: std::collections::HashMap<u64, Query>,
    /// Where finished queries go (None: all stay listed in memory).
    pub held: Option<Held>,
}

impl Store {
    /// Queries handed over: the first listed ones.
    pub fn held(&self) -> u64 {
        self.held.as_ref().map_or(0, |h| h.count)
    }

    fn index(&self, id: u64) -> Option<usize> {
        id.checked_sub(self.held())
            .and_then(|i| usize::try_from(i).ok())
    }

    pub fn get(&self, id: u64) -> Option<&Query> {
        if id < MAX_QUERIES {
            return self.index(id).and_then(|i| self.listed.get(i));
        }
        self.extra.get(&id)
    }

    pub fn get_mut(&mut self, id: u64) -> Option<&mut Query> {
        if id < MAX_QUERIES {
            return self.index(id).and_then(|i| self.listed.get_mut(i));
        }
        self.extra.get_mut(&id)
    }

    /// Empty, keeping where finished queries go.
    pub fn clear(&mut self) {
        self.listed = VecDeque::new();
        self.extra.clear();
        if let Some(h) = self.held.as_mut() {
            h.clear();
        }
    }
}

/// The decoder of one connection: a StreamSink for the TCP engine.
#[derive(Debug)]
pub struct Conversation {
    pub(super) sides: [Side; 2],
    /// Whether each direction's SYN was seen, as the last feed of it said.
    pub(super) start_seen: [bool; 2],
    /// While the connection is neither proven PostgreSQL nor refused (its startup not seen).
    pub(super) evidence: Option<Box<Evidence>>,
    /// Where mid-stream decoding started: the side, its stream offset and frame.
    pub(super) started: Option<(Role, i64, u64)>,
    /// Any payload was fed.
    pub(super) fed: bool,
    pub(super) protocol: Protocol,
    pub(super) encryption: Encryption,
    pub(super) startup: Option<Startup>,
    pub(super) authentication: Option<Authentication>,
    /// A client message of the authentication exchange awaits the server's answer.
    pub(super) auth_awaiting: bool,
    pub(super) decode_started_at: Option<StartedAt>,
    pub(super) decode_stopped: Option<DecodeStopped>,
    pub(super) events: Vec<Event>,
    pub(super) store: Store,
    pub(super) queries_total: u64,
    pub(super) last_query: Option<u64>,
    /// Sent, not finished (those done form its head until a ReadyForQuery drains them).
    pub(super) pending: VecDeque<u64>,
    /// How many of pending's first entries are known done: the search for the oldest
    /// unfinished query starts past them (a pipeline of Executes before its Sync).
    pub(super) pending_done: usize,
    pub(super) last_done: Option<u64>,
    pub(super) statements: Names,
    pub(super) portals: Names,
    pub(super) parameters: Vec<(String, String)>,
    pub(super) backend_pid: Option<u32>,
    pub(super) backend_key: Option<Vec<u8>>,
    pub(super) cancel_request: Option<CancelRequest>,
    /// The last authentication request: names the frontend's 'p' reply.
    pub(super) auth: u32,
    /// The protocol minor version the startup asked for, as the server settled it (None:
    /// not seen): BackendKeyData's length depends on it.
    pub(super) minor: Option<u16>,
    pub(super) encryption_asked: Option<EncryptionRequest>,
    /// An ErrorResponse since the last ReadyForQuery.
    pub(super) batch_error: bool,
    pub(super) query_errors: u64,
    /// Notices and errors outside any query (the first MAX_SESSION_MESSAGES of each).
    pub(super) notices: Vec<ServerMessage>,
    pub(super) notices_total: u64,
    pub(super) errors: Vec<ServerMessage>,
    /// Gaps that marked the pending queries incomplete (read when they leave `pending`).
    pub(super) gaps: u64,
    /// `gaps` when the backend stream last had one: what may have hidden a ReadyForQuery
    pub(super) backend_gap_at: u64,
    /// the message being handled lost the end of its body to a gap (a short snaplen)
    pub(super) cut_message: bool,
    /// The stream offset just past the message being handled: where its moment ends.
    pub(super) msg_end: i64,
    /// Texts seen (SQL, command tags), shared by the queries that repeat them.
    pub(super) texts: std::collections::HashSet<std::sync::Arc<str>>,
    /// Responses whose bytes over time were kept as bulk (BULK_SEGMENTS or more): past
    /// MAX_BULK_SERIES, no more are (each is up to 64 KB).
    pub(super) bulk_series: usize,
    /// Following a stream: where each query goes once final, with the connection's number.
    pub(super) live: Option<(u64, LiveQueries)>,
    /// Following: the backend's limit seconds as the transfer measurements stood at the last
    /// feed (`set_clock`), and as they stood when each pending query was sent: a final
    /// query's response took the difference.
    pub(super) clock: [f64; LIMITS],
    pub(super) clocks: std::collections::HashMap<u64, [f64; LIMITS]>,
}

use crate::transfer::LIMITS;

/// A query said final, with the seconds its response gave to each limit (following).
pub type FinalQuery = (u64, super::QueryFacts, Option<[f64; LIMITS]>);

/// Queries said final while the pass follows a stream (`pktflow analyze - --follow`), each
/// with its connection's number, taken by the pass after each batch. Shared by the pass's
/// conversations, all on the pass's thread: the lock is never contended.
#[derive(Clone, Debug, Default)]
pub struct LiveQueries(std::sync::Arc<std::sync::Mutex<Vec<FinalQuery>>>);

impl LiveQueries {
    pub(super) fn push(&self, query: FinalQuery) {
        if let Ok(mut q) = self.0.lock() {
            q.push(query);
        }
    }

    /// The queries said final since the last take.
    pub fn take(&self) -> Vec<FinalQuery> {
        self.0
            .lock()
            .map(|mut q| std::mem::take(&mut *q))
            .unwrap_or_default()
    }
}

/// Queries, the latest first, whose moments a late copy of their bytes can redate.
const REDATE_REACH: usize = 64;

/// A response in this many segments or more keeps its bytes over time (series.rs).
pub const BULK_SEGMENTS: u64 = 4;
/// Bulk responses a connection keeps their series of: a relay's legs are compared over them.
pub const MAX_BULK_SERIES: usize = 64;

impl Default for Conversation {
    fn default() -> Self {
        Self::new()
    }
}

impl Conversation {
    pub fn new() -> Conversation {
        Conversation {
            sides: [Side::new(Role::Frontend), Side::new(Role::Backend)],
            start_seen: [false; 2],
            evidence: Some(Box::default()),
            started: None,
            fed: false,
            protocol: Protocol::Unknown,
            encryption: Encryption::None,
            startup: None,
            authentication: None,
            auth_awaiting: false,
            decode_started_at: None,
            decode_stopped: None,
            events: Vec::new(),
            store: Store::default(),
            queries_total: 0,
            last_query: None,
            pending: VecDeque::new(),
            pending_done: 0,
            last_done: None,
            statements: Names::default(),
            portals: Names::default(),
            parameters: Vec::new(),
            backend_pid: None,
            backend_key: None,
            cancel_request: None,
            auth: 0,
            minor: None,
            encryption_asked: None,
            batch_error: false,
            query_errors: 0,
            notices: Vec::new(),
            notices_total: 0,
            errors: Vec::new(),
            gaps: 0,
            backend_gap_at: 0,
            cut_message: false,
            msg_end: 0,
            texts: std::collections::HashSet::new(),
            bulk_series: 0,
            live: None,
            clock: [0.0; LIMITS],
            clocks: std::collections::HashMap::new(),
        }
    }

    /// Following: the backend direction's limit seconds as they stand now.
    pub fn set_clock(&mut self, seconds: [f64; LIMITS]) {
        self.clock = seconds;
    }

    /// Queries its facts will list.
    pub fn listed_queries(&self) -> usize {
        usize::try_from(self.store.held()).unwrap_or(usize::MAX) + self.store.listed.len()
    }

    /// Hand finished queries over to `spool` (a long connection's) rather than keep them all.
    pub fn hold_in(&mut self, spool: QuerySpool) {
        self.store.held = Some(Held::new(spool));
    }

    /// Following a stream (queries said once final).
    pub fn following_stream(&self) -> bool {
        self.live.is_some()
    }

    /// A conversation that says each query once it is final (connection `number`).
    pub fn following(number: u64, live: LiveQueries) -> Conversation {
        Conversation {
            live: Some((number, live)),
            ..Conversation::new()
        }
    }

    /// Drop what was decoded of a connection found not to be PostgreSQL: it was tentative.
    pub(super) fn forget(&mut self) {
        for s in &mut self.sides {
            let trail = s.counts.trail.take();
            s.counts = Counts::default();
            s.counts.trail = trail;
            s.lost = 0;
            s.scan = None;
        }
        self.startup = None;
        self.decode_started_at = None;
        self.started = None;
        self.events.clear();
        self.store.clear();
        self.queries_total = 0;
        self.last_query = None;
        self.pending.clear();
        self.pending_done = 0;
        self.last_done = None;
        self.statements = Names::default();
        self.portals = Names::default();
        self.parameters.clear();
        self.backend_pid = None;
        self.query_errors = 0;
        self.texts.clear();
    }

    /// The engine direction that is the frontend; None while not PostgreSQL.
    pub fn frontend_direction(&self) -> Option<usize> {
        if self.protocol == Protocol::Unknown {
            return None;
        }
        Some(if self.sides[0].role == Role::Frontend {
            0
        } else {
            1
        })
    }

    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// Whether TLS or GSSAPI took over the connection (decoding stopped there).
    pub fn encryption(&self) -> Encryption {
        self.encryption
    }

    /// Keep each side's messages in wire order for `take_trail` (a diagram's pass).
    pub fn record_trail(&mut self) {
        for s in &mut self.sides {
            s.counts.trail.get_or_insert_with(Box::default);
        }
    }

    /// The messages direction d completed since the last call, in wire order with consecutive
    /// repeats folded, and the details kept of them; None unless `record_trail` was called.
    pub fn take_trail(&mut self, d: usize) -> Option<Drained> {
        Some(self.sides.get_mut(d)?.counts.trail.as_mut()?.drain())
    }

    /// Direction d's (named messages, DataRows, CopyDatas) counted so far, and whether its
    /// stream stopped inside a message.
    pub fn side_progress(&self, d: usize) -> Option<(u64, u64, u64, bool)> {
        let s = self.sides.get(d)?;
        Some((
            s.counts.named,
            s.counts.rows,
            s.counts.copies,
            !s.buf.is_empty() || s.skip > 0,
        ))
    }

    fn do_feed(&mut self, d: usize, data: &[u8], offset: i64, frame: u64, ts: f64) {
        let Some(s) = self.sides.get_mut(d) else {
            return;
        };
        if s.state == State::Stopped {
            return;
        }
        s.seg_start = offset;
        let role = s.role;
        self.fed |= !data.is_empty();
        if self.evidence.is_some() && self.foreign(d, data, offset, frame) {
            return;
        }
        if let (Role::Backend, Some(ev)) = (role, self.evidence.as_mut()) {
            ev.backend_segment();
        }
        if role == Role::Backend && !self.pending.is_empty() {
            let room = self.bulk_series < MAX_BULK_SERIES;
            if let Some(q) = self.head().and_then(|id| self.store.get_mut(id)) {
                q.segments.add(data.len());
                if room || q.series.is_some() {
                    let series = q.series.get_or_insert_with(Default::default);
                    series.add(ts, data.len());
                    if series.totals().0 == BULK_SEGMENTS {
                        self.bulk_series += 1;
                    }
                }
            }
        }
        let s = &mut self.sides[d];
        let mut start = 0usize; // where the next message starts in data
        if s.skip > 0 {
            start = usize::try_from(s.skip)
                .unwrap_or(usize::MAX)
                .min(data.len());
            s.skip -= start as i64;
            if let (0, Some(t)) = (s.skip, s.counts.trail.as_mut()) {
                t.complete_held();
            }
            if start == data.len() {
                return;
            }
        }
        if !s.buf.is_empty() {
            // s.buf + data[start:]: the walk goes over both as one
            let mut joined = std::mem::take(&mut s.buf);
            joined.extend_from_slice(data.get(start..).unwrap_or(&[]));
            let base = s.base;
            let pos = self.walk(d, &joined, 0, base, frame, ts);
            let s = &mut self.sides[d];
            joined.drain(..pos.min(joined.len()));
            s.buf = joined;
            s.keep_own();
            s.base = at(base, pos);
        } else {
            let pos = self.walk(d, data, start, offset, frame, ts);
            let s = &mut self.sides[d];
            s.keep(data.get(pos..).unwrap_or(&[]));
            s.base = at(offset, pos);
        }
        let s = &self.sides[d];
        if s.state == State::Sync && s.buf.len() > SYNC_WINDOW {
            self.settle_sync(d, frame, ts);
        }
    }

    /// While the connection is unproven, another protocol where a segment starts (and no
    /// PostgreSQL message does) refuses it.
    fn foreign(&mut self, d: usize, data: &[u8], offset: i64, frame: u64) -> bool {
        let Some(s) = self.sides.get(d) else {
            return false;
        };
        let at_start = s.state == State::Start && self.start_seen.get(d) == Some(&true);
        let typed_here = s.state == State::Typed
            && header(data, 0).is_some_and(|(t, ln)| plausible(t, ln, s.role));
        if s.skip > 0 || !s.buf.is_empty() || at_start || typed_here {
            return false;
        }
        let Some(o) = other_protocol(data) else {
            return false;
        };
        let reason = StopReason::OtherProtocol {
            protocol: o.protocol,
            seen: o.seen,
        };
        self.refuse(d, offset, frame, reason);
        true
    }

    /// The walk of `buf` (stream offset `offset` at buf[0]) from `start`: where the bytes
    /// not consumed begin.
    fn walk(
        &mut self,
        d: usize,
        buf: &[u8],
        start: usize,
        offset: i64,
        frame: u64,
        ts: f64,
    ) -> usize {
        if self.sides[d].state == State::Typed {
            // the steady state: straight to the message walk
            return self.typed(d, buf, start, offset, frame, ts);
        }
        let rest = buf.get(start..).unwrap_or(&[]);
        start + self.consume(d, rest, at(offset, start), frame, ts)
    }

    fn do_gap(&mut self, d: usize, offset: i64, length: i64, frame: u64, ts: f64) {
        let Some(s) = self.sides.get(d) else {
            return;
        };
        if s.state == State::Stopped {
            return;
        }
        if s.role == Role::Backend && !self.pending.is_empty() {
            // bytes the capture did not keep (a short snaplen) still belong to the response
            if let Some(series) = (self.head())
                .and_then(|id| self.store.get_mut(id))
                .and_then(|q| q.series.as_mut())
            {
                series.extend(ts, u64::try_from(length).unwrap_or(0));
            }
        }
        let Some(s) = self.sides.get_mut(d) else {
            return;
        };
        // a message held for the trail that ends in (or is cut by) the gap ends in no segment
        if let Some(t) = s.counts.trail.as_mut() {
            t.held = None;
        }
        let gap_end = offset.saturating_add(length);
        if s.state == State::Start {
            // the first message cut: read from its first 8 bytes, or the start is lost
            let (buf, base) = (std::mem::take(&mut s.buf), s.base);
            self.start_cut(d, &buf, base, gap_end, frame, ts);
            let s = &mut self.sides[d];
            if s.state == State::Typed {
                return;
            }
            s.buf = buf;
        }
        if self.sides[d].state == State::Sync {
            self.gap_boundary(d, gap_end, frame, ts);
        }
        let Some(s) = self.sides.get_mut(d) else {
            return;
        };
        if s.state == State::Stopped {
            return;
        }
        if s.skip >= length && s.buf.is_empty() {
            s.skip = s.skip.saturating_sub(length); // inside a counted body: no boundary was lost
            return;
        }
        // A message whose header came and whose body the gap cuts (a short snaplen keeps the
        // first bytes of every segment): its end is known, so no boundary is lost. It is
        // handled with the body seen (a Query keeps its SQL's start) and the rest skipped.
        let held = (s.state == State::Typed && s.skip == 0)
            .then(|| header(&s.buf, 0))
            .flatten();
        if let Some((t, ln)) = held {
            let framed = self.fault(d, t, ln).is_none();
            let s = &mut self.sides[d];
            let start = offset.saturating_sub(s.buf.len() as i64);
            {
                let end = start.saturating_add(1).saturating_add(ln);
                if framed && end >= gap_end {
                    let body = s.buf.get(5..).unwrap_or(&[]).to_vec();
                    s.keep(&[]);
                    s.skip = end - gap_end;
                    s.base = gap_end;
                    if self.evidence.is_some() && !self.evident(d, t, &body, ln, start, frame) {
                        return;
                    }
                    self.cut_message = true;
                    self.msg_end = end;
                    self.message(d, t, &body, ln, frame, ts);
                    self.cut_message = false;
                    return;
                }
            }
        }
        let s = &mut self.sides[d];
        let cut = length
            .saturating_add(s.buf.len() as i64)
            .saturating_add(s.skip);
        // the part of the cut no message header counted yet: the rest of a counted body was
        let uncounted = length
            .saturating_sub(s.skip)
            .saturating_add(s.buf.len() as i64);
        s.lost = s.lost.saturating_add(cut);
        s.keep(&[]);
        s.skip = 0;
        s.base = offset.saturating_add(length);
        s.scan = None;
        s.state = State::Sync;
        let role = s.role;
        self.gaps += 1;
        if role == Role::Backend {
            self.backend_gap_at = self.gaps;
        }
        self.lost_response(d, uncounted, gap_end, frame, ts);
        self.events.push(Event::Resync {
            role,
            length,
            offset,
            frame,
        });
    }

    /// A side searching for a boundary meets a gap: where the segment before it started, a
    /// run of messages that fills the captured bytes (its last running into the gap, or the
    /// gap cutting the next one's header) is taken as a boundary, as it would be in the
    /// steady state: a short snaplen keeps each segment's first bytes, and writes start with
    /// a message. Claims past MAX_CONTROL, and bodies not of their type's shape, are not
    /// taken (a segment starting inside a row would make one).
    fn gap_boundary(&mut self, d: usize, gap_end: i64, frame: u64, ts: f64) {
        let Some(s) = self.sides.get(d) else {
            return;
        };
        let Ok(pos0) = usize::try_from(s.seg_start - s.base) else {
            return;
        };
        let mut pos = pos0;
        loop {
            let Some((t, ln)) = header(&s.buf, pos) else {
                if pos == pos0 || pos + 5 <= s.buf.len() {
                    return;
                }
                break; // whole messages, then a header the gap cut: they are decoded
            };
            if !plausible(t, ln, s.role) || ln > MAX_CONTROL {
                return;
            }
            let end = pos.saturating_add(1 + ln as usize);
            let body = s.buf.get(pos + 5..end.min(s.buf.len())).unwrap_or(&[]);
            if !super::shape::fits(s.role, t, ln, body) {
                return;
            }
            if end > s.buf.len() {
                if at(s.base, end) < gap_end {
                    return; // it ends inside the gap: what follows is unknown
                }
                break;
            }
            pos = end;
        }
        let s = &mut self.sides[d];
        s.scan = None;
        let (buf, base) = (std::mem::take(&mut s.buf), s.base);
        self.synced(d, base, pos0, frame, ts);
        let done = self.typed(d, &buf, pos0, base, frame, ts);
        let s = &mut self.sides[d];
        s.buf = buf;
        s.buf.drain(..done.min(s.buf.len()));
        s.keep_own();
        s.base = at(base, done);
    }

    /// Bytes [lo, hi) of direction d reached the receiver's reader only with a later copy
    /// (the one the capture saw first was lost past it): the requests and responses whose
    /// messages end in them are dated by that copy. A pooler's back leg, captured at the
    /// pooler, then says when the server's answer could reach the pooler, not when it left
    /// the server. Recent queries only: those handed over are final, and a copy is resent
    /// within a few timeouts of the first.
    fn redate(&mut self, d: usize, lo: i64, hi: i64, frame: u64, ts: f64) {
        let Some(side) = self.sides.get(d) else {
            return;
        };
        let response = side.role == Role::Backend;
        for q in self.store.listed.iter_mut().rev().take(REDATE_REACH) {
            if !q.redate(response, lo, hi, frame, ts) {
                return;
            }
        }
    }

    fn do_finish(&mut self) {
        if self.query_errors > MAX_ERROR_FINDINGS {
            self.events.push(Event::QueryErrorsTotal {
                count: self.query_errors,
                listed: MAX_ERROR_FINDINGS,
            });
        }
        for d in 0..2 {
            let s = &self.sides[d];
            if s.state == State::Sync && !s.buf.is_empty() {
                self.settle_sync(d, 0, 0.0);
            }
        }
        self.unproven();
        for &id in &self.pending {
            if let Some(q) = self.store.get_mut(id) {
                q.incomplete = true;
            }
        }
    }
}

impl StreamSink for Conversation {
    fn feed(&mut self, d: usize, data: &[u8], offset: i64, frame: u64, ts: f64, start_seen: bool) {
        if let Some(seen) = self.start_seen.get_mut(d) {
            *seen = start_seen;
        }
        self.do_feed(d, data, offset, frame, ts);
    }

    fn gap(&mut self, d: usize, offset: i64, length: i64, frame: u64, ts: f64) {
        self.do_gap(d, offset, length, frame, ts);
    }

    fn resent(&mut self, d: usize, offset: i64, length: i64, frame: u64, ts: f64) {
        self.redate(d, offset, offset.saturating_add(length), frame, ts);
    }

    fn finish(&mut self) {
        self.do_finish();
    }
}
