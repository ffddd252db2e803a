//! What each control message does: requests become queries, responses are charged to the
//! oldest unfinished query, the session's own messages (authentication, parameters, key data)
//! fill the conversation's facts.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;

use super::conversation::{
    Conversation, MAX_ERROR_FINDINGS, MAX_PARAMETERS, MAX_QUERIES, MAX_SESSION_MESSAGES,
};
use super::facts::{AuthOutcome, Event, ServerMessage};
use super::held::HOLD_BATCH;
use super::messages::{
    auth_method, auth_name, backend_name, be16, be32, decode, error_fields, frontend_name, lossy,
    name_list, password_reply, rstrip_nul, two_cstrings, upto_nul, Name, Role, AUTH_NAME_CAP,
};
use super::query::{Moment, Query, QueryKind, MAX_COLUMN_NAMES, MAX_QUERY_NOTICES, SQL_CAP};

/// Texts (SQL, command tags) shared per connection: at most this many, this long.
const MAX_SHARED: usize = 256;
const MAX_SHARED_LEN: usize = 1024;

/// The connection's copy of a text: queries with the same SQL or tag share one (an
/// application repeats its statements; a driver parses the same one again and again).
/// Taken as a borrowed text where it can be: a text already shared costs no allocation.
fn intern(texts: &mut HashSet<Arc<str>>, text: Cow<'_, str>) -> Arc<str> {
    if text.len() > MAX_SHARED_LEN {
        return Arc::from(text);
    }
    if let Some(t) = texts.get(&*text) {
        return t.clone();
    }
    let t: Arc<str> = Arc::from(text);
    if texts.len() < MAX_SHARED {
        texts.insert(t.clone());
    }
    t
}

/// A RowDescription's column count and its first MAX_COLUMN_NAMES names, NUL-separated
/// (each field: its name, then 18 bytes of table, type and format numbers). A cut body keeps
/// the names it holds.
fn columns(body: &[u8]) -> (Option<u16>, String) {
    let Some(count) = be16(body, 0) else {
        return (None, String::new());
    };
    let mut names: Vec<Cow<'_, str>> = Vec::new();
    let mut rest = body.get(2..).unwrap_or(&[]);
    while names.len() < usize::from(count).min(MAX_COLUMN_NAMES) {
        let Some(end) = rest.iter().position(|&c| c == 0) else {
            break;
        };
        names.push(lossy(rest.get(..end).unwrap_or(&[])));
        rest = rest.get(end + 1 + 18..).unwrap_or(&[]);
    }
    (Some(count), names.join("\0"))
}

impl Conversation {
    /// The message being handled, as a query's moment.
    fn moment(&self, frame: u64, ts: f64) -> Moment {
        Moment {
            ts,
            frame,
            end: self.msg_end,
        }
    }

    pub(super) fn message(&mut self, d: usize, t: u8, body: &[u8], ln: i64, frame: u64, ts: f64) {
        if self.sides[d].role == Role::Frontend {
            self.frontend(d, t, body, frame, ts);
        } else {
            self.backend(d, t, body, ln, frame, ts);
        }
    }

    fn frontend(&mut self, d: usize, t: u8, body: &[u8], frame: u64, ts: f64) {
        let Some(mut name) = frontend_name(t) else {
            return;
        };
        if t == b'p' {
            // what it is depends on the authentication request it answers
            name = password_reply(self.auth);
            self.auth_reply(body);
        }
        self.sides[d].counts.count(Name::Known(name));
        match t {
            b'Q' => {
                self.close_unfinished_after_gap();
                let sql = intern(&mut self.texts, lossy(rstrip_nul(body)));
                let mut q = Query::new(sql, QueryKind::Simple, self.moment(frame, ts));
                q.sql_truncated |= self.cut_message;
                self.add_query(q, frame);
            }
            b'P' => {
                // statement name, SQL: kept as a query would keep it (cut at SQL_CAP + 1
                // characters, so that the cut still shows)
                // statement name, then the SQL: a cut one keeps the SQL's start
                let named = two_cstrings(body).or_else(|| {
                    let stmt = upto_nul(body);
                    let rest = body.get(stmt.len() + 1..)?;
                    self.cut_message.then_some((stmt, rest))
                });
                if let Some((stmt, sql)) = named {
                    let sql = lossy(sql);
                    let kept = match sql.char_indices().nth(SQL_CAP + 1) {
                        Some((at, _)) => Cow::Borrowed(sql.get(..at).unwrap_or(&sql)),
                        None => Cow::Borrowed(&*sql),
                    };
                    let kept = intern(&mut self.texts, kept);
                    self.statements.put(&lossy(stmt), kept);
                }
            }
            b'B' => {
                // portal, statement
                if let Some((portal, stmt)) = two_cstrings(body) {
                    let sql = self
                        .statements
                        .get(&lossy(stmt))
                        .cloned()
                        .unwrap_or_else(|| Arc::from(""));
                    self.portals.put(&lossy(portal), sql);
                }
            }
            b'E' => {
                let portal = lossy(upto_nul(body));
                let sql = self
                    .portals
                    .get(&portal)
                    .cloned()
                    .unwrap_or_else(|| Arc::from(""));
                self.add_query(
                    Query::new(sql, QueryKind::Extended, self.moment(frame, ts)),
                    frame,
                );
            }
            b'F' => {
                // FunctionCall: the fast-path call of a function OID
                if let Some(oid) = be32(body, 0) {
                    let sql = format!("FunctionCall oid {oid}");
                    self.add_query(
                        Query::new(Arc::from(sql), QueryKind::Function, self.moment(frame, ts)),
                        frame,
                    );
                }
            }
            _ => {}
        }
    }

    /// Every query is tracked until answered; the first MAX_QUERIES are kept for the report,
    /// so a connection captured for hours does not grow without bound.
    fn add_query(&mut self, mut q: Query, frame: u64) {
        let id = self.queries_total;
        self.queries_total += 1;
        q.in_pending = true;
        q.gaps_at = self.gaps;
        if id < MAX_QUERIES {
            let listed = &mut self.store.listed;
            if listed.len() == listed.capacity() {
                // grown by at most 1,024 at a time: doubling would leave up to half unused
                listed.reserve_exact(listed.capacity().clamp(4, 1024));
            }
            listed.push_back(q);
        } else {
            self.store.extra.insert(id, q);
            if id == MAX_QUERIES {
                self.events.push(Event::QueriesCapped {
                    listed: MAX_QUERIES,
                    frame,
                });
            }
        }
        if self.live.is_some() {
            self.clocks.insert(id, self.clock);
        }
        let before = self.last_query.replace(id);
        self.pending.push_back(id);
        if let Some(old) = before {
            self.release(old);
        }
    }

    /// Response bytes the capture did not show (a gap, or bytes skipped to find a message
    /// boundary after one) belong to the response under way: a query's response size is then
    /// what the sequence numbers say, not only what was decoded (a short snaplen cuts most).
    pub(super) fn lost_response(&mut self, d: usize, bytes: i64, end: i64, frame: u64, ts: f64) {
        let backend = self.sides.get(d).is_some_and(|s| s.role == Role::Backend);
        if !backend || bytes <= 0 {
            return;
        }
        if let Some(q) = self.head().and_then(|id| self.store.get_mut(id)) {
            q.respond(bytes as u64, 0, end, Moment { ts, frame, end });
        }
    }

    /// A client sends a simple Query only once the previous one's ReadyForQuery came: simple
    /// queries still open that were answered and had a backend gap since lost their end in it.
    fn close_unfinished_after_gap(&mut self) {
        let gap_at = self.backend_gap_at;
        let mut closed = false;
        for &id in &self.pending {
            if let Some(q) = self.store.get_mut(id) {
                if q.kind == QueryKind::Simple
                    && !q.done
                    && q.first().is_some()
                    && gap_at > q.gaps_at
                {
                    q.finish();
                    q.incomplete = true;
                    closed = true;
                }
            }
        }
        if closed {
            let pending = std::mem::take(&mut self.pending);
            self.pending_done = 0;
            for id in pending {
                let open = self.store.get(id).is_some_and(|q| !q.done);
                if open {
                    self.pending.push_back(id);
                } else if let Some(q) = self.store.get_mut(id) {
                    q.in_pending = false;
                    self.said_final(id);
                    let before = self.last_done.replace(id);
                    self.release(id);
                    if let Some(old) = before {
                        self.release(old);
                    }
                }
            }
        }
    }

    /// Following a stream: query `id` left the pending ones, final; its response's limit
    /// seconds are the backend's since it was sent.
    fn said_final(&mut self, id: u64) {
        let sent = self.clocks.remove(&id);
        if let (Some((number, live)), Some(q)) = (&self.live, self.store.get(id)) {
            let took = sent.map(|at| {
                let mut d = self.clock;
                for (x, a) in d.iter_mut().zip(at) {
                    *x = (*x - a).max(0.0);
                }
                d
            });
            live.push((*number, self.query_facts(q), took));
        }
    }

    /// A query past the listed ones is dropped once nothing refers to it.
    fn release(&mut self, id: u64) {
        if id < MAX_QUERIES || self.last_query == Some(id) || self.last_done == Some(id) {
            return;
        }
        if self.store.extra.get(&id).is_some_and(|q| !q.in_pending) {
            self.store.extra.remove(&id);
        }
    }

    /// The oldest pending query not finished.
    pub(super) fn head(&self) -> Option<u64> {
        let from = self.pending_done.min(self.pending.len());
        self.pending
            .range(from..)
            .copied()
            .find(|&id| self.store.get(id).is_some_and(|q| !q.done))
    }

    fn finished(&mut self, id: u64) {
        if let Some(q) = self.store.get_mut(id) {
            q.finish();
        }
        while let Some(&next) = self.pending.get(self.pending_done) {
            if !self.store.get(next).is_some_and(|q| q.done) {
                break;
            }
            self.pending_done += 1;
        }
        if let Some(old) = self.last_done.replace(id) {
            self.release(old);
        }
    }

    fn backend(&mut self, d: usize, t: u8, body: &[u8], ln: i64, frame: u64, ts: f64) {
        let Some(known) = backend_name(t) else {
            return;
        };
        let mut name = Name::Known(known);
        if t == b'R' {
            if let Some(code) = be32(body, 0) {
                self.auth = code;
                name = auth_name(code);
                self.auth_request(code, body.get(4..).unwrap_or(&[]), frame, ts);
            }
        }
        self.sides[d].counts.count(name);
        // an ErrorResponse's or NoticeResponse's fields, read once
        let fields = matches!(t, b'E' | b'N').then(|| error_fields(body));
        if let (b'C' | b'E' | b'N' | b'Z', Some(trail)) = (t, self.sides[d].counts.trail.as_mut()) {
            // what a diagram shows of them: the tag as sent, the severity, SQLSTATE and
            // message, and ReadyForQuery's transaction status byte (I idle, T in a transaction
            // block, E in a failed one)
            if t == b'C' {
                trail.detail(name, None, None, &lossy(rstrip_nul(body)));
            } else if t == b'Z' {
                trail.detail(name, None, None, &lossy(body.get(..1).unwrap_or_default()));
            } else if let Some(err) = &fields {
                let text = err.message.as_deref().unwrap_or("");
                trail.detail(name, err.severity.clone(), err.code.clone(), text);
            }
        }
        let fields = fields.map(|fields| ServerMessage { fields, frame, ts });
        if t == b'E' {
            self.auth_decided(AuthOutcome::Failed, frame, ts);
        }
        if t == b'R' {
            return; // authentication belongs to the session, not to a query
        }
        let head = self.head();
        let resp = (ln + 1) as u64;
        match t {
            b'Z' => {
                self.ready_for_query(head, resp, frame, ts);
                return;
            }
            b'S' if !body.is_empty() => {
                if let Some((k, v)) = two_cstrings(body) {
                    if self.parameters.len() < MAX_PARAMETERS {
                        let (k, v) = (lossy(k), decode(v));
                        match self.parameters.iter_mut().find(|p| p.0 == *k) {
                            Some(p) => p.1 = v,
                            None => self.parameters.push((k.into_owned(), v)),
                        }
                    }
                }
                return;
            }
            b'v' => {
                // NegotiateProtocolVersion: the newest minor version the server supports
                if let (Some(newest), Some(asked)) = (be32(body, 0), self.minor) {
                    self.minor = Some(asked.min(u16::try_from(newest).unwrap_or(u16::MAX)));
                }
            }
            b'K' if body.len() >= 4 => {
                self.backend_pid = be32(body, 0);
                self.backend_key = body.get(4..).map(<[u8]>::to_vec);
                return;
            }
            _ => {}
        }
        let Some(id) = head else {
            // outside any query: at startup (a failed authentication), or while idle (a
            // server shutting down)
            match (t, fields) {
                (b'E', Some(err)) => {
                    self.events.push(Event::ServerError {
                        code: err.fields.code.clone(),
                        message: err.fields.message.clone(),
                        frame,
                    });
                    if self.errors.len() < MAX_SESSION_MESSAGES {
                        self.errors.push(err);
                    }
                }
                (b'N', Some(notice)) => {
                    self.notices_total += 1;
                    if self.notices.len() < MAX_SESSION_MESSAGES {
                        self.notices.push(notice);
                    }
                }
                _ => {}
            }
            return;
        };
        let now = self.moment(frame, ts);
        let Some(q) = self.store.get_mut(id) else {
            return;
        };
        q.respond(resp, 1, now.end, now);
        match t {
            b'C' | b'I' => {
                let tag = if t == b'C' {
                    lossy(rstrip_nul(body))
                } else {
                    Cow::Borrowed("")
                };
                q.command_complete(intern(&mut self.texts, tag));
                if q.kind != QueryKind::Simple {
                    // extended: each Execute ends with its own CommandComplete
                    self.finished(id);
                }
            }
            b'E' => {
                let Some(err) = fields else {
                    return;
                };
                self.query_errors += 1;
                let event = (self.query_errors <= MAX_ERROR_FINDINGS).then(|| Event::QueryError {
                    code: err.fields.code.clone(),
                    message: err.fields.message.clone(),
                    sql: q.sql.to_string(),
                    sent_frame: q.sent.frame,
                    frame,
                });
                q.extra().error = Some(Box::new(err));
                self.finished(id);
                self.events.extend(event);
                self.batch_error = true;
            }
            b'N' => {
                // a notice belongs to the query that raised it, as an error does
                if let Some(notice) = fields {
                    let extra = q.extra();
                    extra.notices_total += 1;
                    if extra.notices.len() < MAX_QUERY_NOTICES {
                        extra.notices.push(notice);
                    }
                }
            }
            // RowDescription: the result's shape, the first one a query gets
            b'T' if q.extra.as_ref().is_none_or(|x| x.column_count.is_none()) => {
                let (count, names) = columns(body);
                let names = intern(&mut self.texts, Cow::Owned(names));
                let extra = q.extra();
                extra.column_count = count;
                extra.columns = count.map(|_| names);
            }
            b's' => {
                // PortalSuspended: row limit reached
                if q.tag.as_deref().is_none_or(str::is_empty) {
                    q.tag = Some(Arc::from("PortalSuspended"));
                }
                self.finished(id);
            }
            b'G' | b'H' | b'W' => q.kind = QueryKind::Copy,
            _ => {}
        }
    }

    /// An authentication request (its body after the code): the method, SASL's mechanisms,
    /// the outcome once AuthenticationOk comes. The data of SASL, GSS and MD5 exchanges is
    /// never read.
    fn auth_request(&mut self, code: u32, rest: &[u8], frame: u64, ts: f64) {
        let Some(a) = self.authentication.as_mut() else {
            return;
        };
        if a.outcome != AuthOutcome::Unfinished {
            return;
        }
        if let Some(method) = auth_method(code) {
            a.method.get_or_insert_with(|| method.into_owned());
        }
        if code == 10 {
            a.mechanisms = name_list(rest, 8);
        }
        if code == 0 {
            // no request before it: the server asked nothing (trust; ident and cert too)
            a.method.get_or_insert_with(|| "trust".to_owned());
            self.auth_decided(AuthOutcome::Ok, frame, ts);
        } else if std::mem::take(&mut self.auth_awaiting) {
            a.round_trips += 1;
        }
    }

    /// The client's answer to an authentication request: a password, a SASL or GSS message.
    /// Only a SASLInitialResponse's mechanism name is read.
    fn auth_reply(&mut self, body: &[u8]) {
        let Some(a) = self.authentication.as_mut() else {
            return;
        };
        if a.outcome != AuthOutcome::Unfinished {
            return;
        }
        if self.auth == 10 {
            let chosen = upto_nul(body);
            a.mechanism = Some(decode(chosen.get(..AUTH_NAME_CAP).unwrap_or(chosen)));
        }
        self.auth_awaiting = true;
    }

    /// AuthenticationOk, or an ErrorResponse before it: the exchange is over.
    fn auth_decided(&mut self, outcome: AuthOutcome, frame: u64, ts: f64) {
        let Some(a) = self.authentication.as_mut() else {
            return;
        };
        if a.outcome != AuthOutcome::Unfinished {
            return;
        }
        if std::mem::take(&mut self.auth_awaiting) {
            a.round_trips += 1;
        }
        a.outcome = outcome;
        a.last_frame = Some(frame);
        a.end_ts = Some(ts);
    }

    /// The end of a simple query or of a Sync'd batch.
    fn ready_for_query(&mut self, head: Option<u64>, resp: u64, frame: u64, ts: f64) {
        let now = self.moment(frame, ts);
        let answered = head.filter(|&id| self.store.get(id).is_some_and(|q| q.first().is_some()));
        if let Some(q) = answered
            .or(self.last_done)
            .and_then(|id| self.store.get_mut(id))
        {
            q.respond(resp, 1, now.end, now);
        }
        // Close what was answered, and after an error the Executes the server skipped; a query
        // not answered yet may be one whose bytes the capture showed early.
        let pending = std::mem::take(&mut self.pending);
        self.pending_done = 0;
        let mut closed = Vec::new();
        for id in pending {
            let Some(q) = self.store.get_mut(id) else {
                continue;
            };
            if q.first().is_some() || (self.batch_error && q.kind == QueryKind::Extended) {
                q.finish();
                q.in_pending = false;
                q.incomplete = q.incomplete || self.gaps > q.gaps_at;
                closed.push(id);
            } else {
                self.pending.push_back(id);
            }
        }
        for &id in &closed {
            self.said_final(id);
        }
        if let Some(&last) = closed.last() {
            let before = self.last_done.replace(last);
            for id in closed.into_iter().chain(before) {
                self.release(id);
            }
        }
        self.batch_error = false;
        self.hold_finished();
    }

    /// Hand the oldest listed queries over to the spool, HOLD_BATCH at a time, once they are
    /// final and nothing refers to them: no message can change them any more.
    fn hold_finished(&mut self) {
        if self.store.held.is_none() || self.store.listed.len() < HOLD_BATCH + HOLD_BATCH / 8 {
            return;
        }
        let base = self.store.held();
        let referred = [self.last_query, self.last_done];
        let free = (self.store.listed.iter().zip(base..))
            .take(HOLD_BATCH)
            .take_while(|(q, id)| q.done && !q.in_pending && !referred.contains(&Some(*id)))
            .count();
        if free < HOLD_BATCH {
            return;
        }
        let queries: Vec<Query> = self.store.listed.drain(..free).collect();
        let mut series = Vec::new();
        let mut batch = Vec::with_capacity(free);
        for (mut q, id) in queries.into_iter().zip(base..) {
            if let Some(s) = q.series.take() {
                series.push((id, s));
            }
            batch.push(self.query_facts(&q));
        }
        if let Some(held) = self.store.held.as_mut() {
            held.hand_over(batch, series);
        }
    }
}
