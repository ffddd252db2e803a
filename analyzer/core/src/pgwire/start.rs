//! A side's bytes outside the steady state: the untyped first messages (startup, SSL, GSS and
//! cancel requests, an encryption answer, a direct-TLS ClientHello), the search for a message
//! boundary mid-stream, and the decisions that stop a side or settle what the connection is.

use super::conversation::{Conversation, State, MAX_CLIENT_HELLO};
use super::detect::other_protocol;
use super::facts::{
    AuthOutcome, Authentication, CancelRequest, DecodeStopped, Encryption, EncryptionRequest,
    Event, Ordered, Proof, Protocol, StartedAt, Startup, StopReason,
};
use super::framing::{find_boundary, BoundaryScan, MAX_MESSAGE};
use super::messages::{
    backend_name, be32, expected_length, frontend_name, name_of, startup_params, Name, Role,
    CANCEL_REQUEST, GSSENC_REQUEST, SSL_REQUEST,
};
use super::tls::{ascii_text, client_hello_alpn, Alpn};

/// The longest untyped first message read (a StartupMessage with every parameter).
const MAX_STARTUP: u32 = 10_000;

/// An untyped first message: its name, when `code` and `len` say it is one.
fn untyped_name(code: u32, len: u32) -> Option<&'static str> {
    if !(8..=MAX_STARTUP).contains(&len) {
        return None;
    }
    code_name(code)
}

/// The untyped message a code names.
fn code_name(code: u32) -> Option<&'static str> {
    Some(match code {
        SSL_REQUEST => "SSLRequest",
        GSSENC_REQUEST => "GSSENCRequest",
        CANCEL_REQUEST => "CancelRequest",
        c if c >> 16 == 3 => "StartupMessage",
        _ => return None,
    })
}

/// How much of a cut StartupMessage body holds whole (key, value) pairs.
fn whole_pairs(body: &[u8]) -> usize {
    let mut end = 0;
    let mut ends = body
        .iter()
        .enumerate()
        .filter(|&(_, &c)| c == 0)
        .map(|(i, _)| i + 1);
    while let (Some(_), Some(value_end)) = (ends.next(), ends.next()) {
        end = value_end;
    }
    end
}

impl Conversation {
    /// Bytes of a side not in the steady state: the position reached.
    pub(super) fn consume(&mut self, d: usize, buf: &[u8], off: i64, frame: u64, ts: f64) -> usize {
        let mut pos = 0;
        // SSLRequest, its answer and StartupMessage may share a buffer
        while self.sides[d].state == State::Start {
            let used = self.start(
                d,
                buf.get(pos..).unwrap_or(&[]),
                super::conversation::at(off, pos),
                frame,
                ts,
            );
            pos += used;
            let state = self.sides[d].state;
            if state == State::Stopped || (state == State::Start && used == 0) {
                return pos;
            }
        }
        if self.sides[d].state == State::Stopped {
            return pos;
        }
        if self.sides[d].state == State::Sync {
            let s = &mut self.sides[d];
            let role = s.role;
            let scan = s.scan.get_or_insert_with(|| BoundaryScan::new(role));
            let Some(at) = scan.find(
                buf.get(pos..).unwrap_or(&[]),
                super::conversation::at(off, pos),
            ) else {
                return pos; // keep buffering (bounded by SYNC_WINDOW)
            };
            s.scan = None;
            pos += at;
            self.synced(d, off, pos, frame, ts);
        }
        self.typed(d, buf, pos, off, frame, ts)
    }

    /// The first bytes of a direction: untyped startup messages, or an encryption answer.
    fn start(&mut self, d: usize, buf: &[u8], off: i64, frame: u64, ts: f64) -> usize {
        if self.sides[d].role == Role::Backend {
            if let Some(asked) = self.encryption_asked {
                match buf.first() {
                    None => return 0,
                    Some(b'S') => {
                        if let Some(t) = self.sides[d].counts.trail.as_mut() {
                            // not a message to count, but a diagram names it
                            t.push(Name::Known("EncryptionAccepted"), 1);
                        }
                        self.encrypted(Encryption::Tls, frame, Some(asked));
                        return buf.len();
                    }
                    Some(b'G') => {
                        self.encrypted(Encryption::Gss, frame, Some(asked));
                        return buf.len();
                    }
                    Some(b'N') => {
                        // refused: plaintext goes on, startup follows
                        self.encryption_asked = None;
                        self.sides[d].counts.count(Name::Known("EncryptionRefused"));
                        return 1;
                    }
                    Some(_) => {}
                }
            }
            // The frontend speaks first; with its start seen, the backend's is typed framing.
            if self.startup.is_some() || self.start_seen[d] {
                self.sides[d].state = State::Typed;
            } else {
                self.sides[d].state = State::Sync;
            }
            return 0;
        }
        if buf.first() == Some(&0x16) {
            // a TLS record, where a startup length would be >= 369 MB
            return self.direct_tls(d, buf, off, frame);
        }
        let (Some(ln), Some(code)) = (be32(buf, 0), be32(buf, 4)) else {
            return 0;
        };
        if untyped_name(code, ln).is_none() {
            if self.start_seen[d] {
                let reason = match other_protocol(buf) {
                    Some(o) => StopReason::OtherProtocol {
                        protocol: o.protocol,
                        seen: o.seen,
                    },
                    None => StopReason::NotStartup,
                };
                self.refuse(d, off, frame, reason);
            } else {
                self.sides[d].state = State::Sync;
            }
            return 0;
        }
        let ln = ln as usize;
        let Some(body) = buf.get(8..ln) else {
            return 0;
        };
        self.untyped(d, code, body, None, frame, ts);
        ln
    }

    /// An untyped first message of `code`, `body` after its 8 bytes (the start of it
    /// when `cut` gives (length, captured): the snapshot length cut the rest).
    pub(super) fn untyped(
        &mut self,
        d: usize,
        code: u32,
        body: &[u8],
        cut: Option<(i64, i64)>,
        frame: u64,
        ts: f64,
    ) {
        let Some(name) = code_name(code) else {
            return;
        };
        self.decided();
        self.decode_started_at.get_or_insert(StartedAt::Startup);
        if self.protocol == Protocol::Unknown {
            self.protocol = Protocol::Postgresql;
        }
        if let Some((length, captured)) = cut {
            self.events.push(Event::StartupCut {
                message: name,
                length,
                captured,
                frame,
            });
        }
        let s = &mut self.sides[d];
        s.counts.count(Name::Known(name));
        match code {
            SSL_REQUEST => self.encryption_asked = Some(EncryptionRequest::Ssl),
            GSSENC_REQUEST => self.encryption_asked = Some(EncryptionRequest::Gssenc),
            CANCEL_REQUEST => {
                s.state = State::Typed;
                // the backend's process id, then its secret key (4 bytes; up to 256 from
                // protocol 3.2); a key the snaplen cut is no key
                if let (Some(backend_pid), None) = (be32(body, 0), cut) {
                    self.cancel_request = Some(CancelRequest {
                        backend_pid,
                        key: body.get(4..).unwrap_or(&[]).to_vec(),
                        frame,
                        ts,
                    });
                }
            }
            _ => {
                self.minor = Some((code & 0xffff) as u16);
                let s = &mut self.sides[d];
                s.state = State::Typed;
                // the parameters whose value's end was captured: a value cut short is
                // unknown, not short
                let whole = match cut {
                    Some(_) => body.get(..whole_pairs(body)).unwrap_or(&[]),
                    None => body,
                };
                let parameters = startup_params(whole);
                let value = |key: &str| {
                    (parameters.iter())
                        .find(|p| p.0 == key)
                        .map(|p| p.1.clone())
                };
                self.startup = Some(Startup {
                    user: value("user"),
                    database: value("database"),
                    application_name: value("application_name"),
                    protocol_version: format!("{}.{}", code >> 16, code & 0xffff),
                    parameters: Ordered(parameters),
                    captured: cut.map(|(_, captured)| captured),
                });
                self.authentication = Some(Authentication {
                    method: None,
                    mechanisms: Vec::new(),
                    mechanism: None,
                    outcome: AuthOutcome::Unfinished,
                    round_trips: 0,
                    first_frame: frame,
                    start_ts: ts,
                    last_frame: None,
                    end_ts: None,
                });
                self.auth_awaiting = true;
                if self.encryption_asked.is_none() {
                    let other = &mut self.sides[1 - d];
                    if other.state == State::Start {
                        other.state = State::Typed;
                    }
                }
            }
        }
    }

    /// The snapshot length cut the stream's first message after `buf` (its captured bytes,
    /// at offset `base`) and the gap ends at `gap_end`: an untyped message whose first 8 bytes
    /// came is read from them and the rest skipped; with fewer, the start is lost.
    pub(super) fn start_cut(
        &mut self,
        d: usize,
        buf: &[u8],
        base: i64,
        gap_end: i64,
        frame: u64,
        ts: f64,
    ) {
        let s = &self.sides[d];
        if s.role == Role::Frontend && self.start_seen[d] && base == 0 && buf.first() != Some(&0x16)
        {
            if let (Some(ln), Some(code)) = (be32(buf, 0), be32(buf, 4)) {
                if untyped_name(code, ln).is_some() {
                    let end = i64::from(ln);
                    if end >= gap_end {
                        let captured = buf.len() as i64;
                        let body = buf.get(8..).unwrap_or(&[]).to_vec();
                        self.untyped(d, code, &body, Some((end, captured)), frame, ts);
                        let s = &mut self.sides[d];
                        s.keep(&[]);
                        s.skip = end - gap_end;
                        s.base = gap_end;
                        return;
                    }
                }
            }
        }
        // what the first message was is unknown: decoding starts at a boundary, if any
        let s = &mut self.sides[d];
        s.state = State::Sync;
    }

    /// PostgreSQL 17's direct TLS: a ClientHello offering ALPN "postgresql".
    fn direct_tls(&mut self, d: usize, buf: &[u8], off: i64, frame: u64) -> usize {
        let alpn = client_hello_alpn(buf);
        if alpn == Alpn::NeedMore && buf.len() <= MAX_CLIENT_HELLO {
            return 0;
        }
        let names = match alpn {
            Alpn::List(names) => names,
            _ => Vec::new(),
        };
        if names.iter().any(|n| *n == b"postgresql") {
            self.decided();
            self.decode_started_at.get_or_insert(StartedAt::Startup);
            self.encrypted(Encryption::Tls, frame, None);
            return buf.len();
        }
        if self.start_seen[d] {
            let offered = names.iter().map(|n| ascii_text(n)).collect();
            self.refuse(d, off, frame, StopReason::TlsWithoutAlpn { offered });
        } else {
            self.sides[d].state = State::Sync;
        }
        0
    }

    /// A boundary found mid-stream at buf[pos] (buf at stream offset off).
    pub(super) fn synced(&mut self, d: usize, off: i64, pos: usize, frame: u64, ts: f64) {
        let offset = super::conversation::at(off, pos);
        self.lost_response(d, pos as i64, offset, frame, ts);
        let s = &mut self.sides[d];
        s.lost = s.lost.saturating_add(pos as i64);
        s.state = State::Typed;
        let role = s.role;
        if self.decode_started_at.is_none() {
            self.decode_started_at = Some(StartedAt::MidStream);
            self.started = Some((role, offset, frame));
        }
        let other = &mut self.sides[1 - d];
        if other.state == State::Start {
            other.state = State::Sync;
        }
    }

    /// No boundary in a full window: accept one at the buffer's end, or give the side up.
    pub(super) fn settle_sync(&mut self, d: usize, frame: u64, ts: f64) {
        let s = &mut self.sides[d];
        s.scan = None;
        let Some(pos) = find_boundary(&s.buf, s.role) else {
            let skipped = s.buf.len() as i64;
            s.lost = s.lost.saturating_add(skipped);
            s.keep(&[]);
            let (base, lost) = (s.base, s.lost);
            self.lost_response(d, skipped, base.saturating_add(skipped), frame, ts);
            if self.evidence.is_some() {
                self.refuse(d, base, frame, StopReason::NoFraming { lost });
            }
            return;
        };
        let base = s.base;
        let buf = std::mem::take(&mut s.buf);
        self.synced(d, base, pos, frame, ts);
        let done = self.typed(d, &buf, pos, base, frame, ts);
        let s = &mut self.sides[d];
        s.buf = buf;
        s.buf.drain(..done.min(s.buf.len()));
        s.keep_own();
        s.base = super::conversation::at(base, done);
    }

    fn encrypted(&mut self, kind: Encryption, frame: u64, request: Option<EncryptionRequest>) {
        self.protocol = if kind == Encryption::Tls {
            Protocol::PostgresqlTls
        } else {
            Protocol::PostgresqlGss
        };
        self.encryption = kind;
        for s in &mut self.sides {
            s.state = State::Stopped;
        }
        self.events.push(Event::Encrypted {
            encryption: kind,
            request,
            frame,
        });
    }

    /// What the connection is, settled by its start: no proof is looked for any more.
    fn decided(&mut self) {
        self.evidence = None;
    }

    /// The evidence proves the connection PostgreSQL: say why, once.
    pub(super) fn prove(&mut self) {
        let Some(ev) = self.evidence.take() else {
            return;
        };
        self.protocol = Protocol::Postgresql;
        let (Some(first), Some((role, offset, frame))) = (ev.first, self.started) else {
            return;
        };
        self.events.insert(
            0,
            Event::MidStream {
                role,
                offset,
                frame,
                start_seen: self.start_seen.iter().any(|&s| s),
                proof: Proof {
                    request: frontend_name(first.request).unwrap_or("?"),
                    request_frame: first.request_frame,
                    response: backend_name(first.response).unwrap_or("?"),
                    response_frame: first.response_frame,
                    exchanges: ev.exchanges,
                    closed_frame: ev.closed,
                },
            },
        );
    }

    /// Not PostgreSQL as far as the capture shows: what was decoded on the way is dropped
    /// (it was never proven), the reason kept, both sides stopped.
    pub(super) fn refuse(&mut self, d: usize, off: i64, frame: u64, reason: StopReason) {
        self.evidence = None;
        self.protocol = Protocol::Unknown;
        self.forget();
        let role = self.sides[d].role;
        self.decode_stopped = Some(DecodeStopped {
            direction: role,
            offset: off,
            frame,
            reason: reason.clone(),
        });
        for s in &mut self.sides {
            s.state = State::Stopped;
            s.keep(&[]);
            s.skip = 0;
        }
        self.events.push(Event::NotPostgresql {
            role,
            offset: off,
            frame,
            reason,
        });
    }

    /// The end of the capture, the connection still unproven.
    pub(super) fn unproven(&mut self) {
        let Some(ev) = self.evidence.as_ref() else {
            return;
        };
        let lost: i64 = self.sides.iter().map(|s| s.lost).sum();
        let reason = if !self.fed && lost == 0 {
            return; // no payload either way: nothing to say
        } else if !self.fed {
            StopReason::NothingCaptured { bytes: lost }
        } else if ev.messages == [0, 0] {
            StopReason::NoFraming {
                lost: self.sides.iter().map(|s| s.lost).sum(),
            }
        } else {
            StopReason::Unproven {
                frontend_messages: ev.messages[0],
                backend_messages: ev.messages[1],
                exchanges: ev.exchanges,
                misfits: ev.misfits,
            }
        };
        let (d, off) = match self.started {
            Some((role, offset, _)) => (usize::from(role == Role::Backend), offset),
            None if self.fed => (0, self.sides[0].base),
            None => (0, 0),
        };
        self.refuse(d, off, 0, reason);
    }

    /// Why a header of this side is not PostgreSQL framing; None when it is.
    pub(super) fn fault(&self, d: usize, t: u8, ln: i64) -> Option<StopReason> {
        let role = self.sides.get(d)?.role;
        if ln < 4 {
            return Some(StopReason::LengthUnder4 { length: ln });
        }
        if ln > MAX_MESSAGE {
            return Some(StopReason::LengthAbsurd { length: ln });
        }
        if name_of(role, t).is_none() {
            return Some(StopReason::NotRoleType { type_byte: t, role });
        }
        match expected_length(role, t, self.minor) {
            Some((min, max)) if !(min..=max).contains(&ln) => Some(StopReason::WrongLength {
                type_byte: t,
                role,
                length: ln,
                min,
                max,
            }),
            _ => None,
        }
    }

    /// Framing PostgreSQL never sends: this direction is not decoded past `at`.
    pub(super) fn malformed(&mut self, d: usize, reason: StopReason, at: i64, frame: u64) {
        let s = &mut self.sides[d];
        let role = s.role;
        if self.evidence.is_some() {
            self.refuse(d, at, frame, reason);
            return;
        }
        s.state = State::Stopped;
        self.decode_stopped = Some(DecodeStopped {
            direction: role,
            offset: at,
            frame,
            reason: reason.clone(),
        });
        self.events.push(Event::Malformed {
            role,
            offset: at,
            frame,
            reason,
        });
    }
}
