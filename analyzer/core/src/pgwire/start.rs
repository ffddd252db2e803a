//! A side's bytes outside the steady state: the untyped first messages (startup, SSL, GSS and
//! cancel requests, an encryption answer, a direct-TLS ClientHello), the search for a message
//! boundary mid-stream, and the decisions that stop a side.

use super::conversation::{Conversation, State, MAX_CLIENT_HELLO};
use super::facts::{
    AuthOutcome, Authentication, CancelRequest, DecodeStopped, Encryption, EncryptionRequest,
    Event, Ordered, Protocol, StartedAt, Startup, StopReason,
};
use super::framing::{find_boundary, BoundaryScan, Sides, MAX_MESSAGE};
use super::messages::{
    be32, expected_length, name_of, startup_params, Name, Role, CANCEL_REQUEST, GSSENC_REQUEST,
    SSL_REQUEST,
};
use super::tls::{ascii_text, client_hello_alpn, Alpn};

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
            let (sides, proof) = if self.roles_known {
                (Sides::One(self.sides[d].role), false)
            } else {
                (Sides::Both, true)
            };
            let s = &mut self.sides[d];
            let scan = match &mut s.scan {
                Some(scan) if scan.sides == sides && scan.need_proof == proof => scan,
                slot => slot.insert(BoundaryScan::new(sides, proof)),
            };
            let Some((at, side)) = scan.find(
                buf.get(pos..).unwrap_or(&[]),
                super::conversation::at(off, pos),
            ) else {
                return pos; // keep buffering (bounded by SYNC_WINDOW)
            };
            s.scan = None;
            pos += at;
            self.synced(d, side, off, pos, frame, ts);
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
            let typed = self.startup.is_some() || self.start_seen[d];
            self.sides[d].state = if typed { State::Typed } else { State::Sync };
            return 0;
        }
        if buf.first() == Some(&0x16) {
            // a TLS record, where a startup length would be >= 369 MB
            return self.direct_tls(d, buf, off, frame);
        }
        let (Some(ln), Some(code)) = (be32(buf, 0), be32(buf, 4)) else {
            return 0;
        };
        let known =
            matches!(code, SSL_REQUEST | GSSENC_REQUEST | CANCEL_REQUEST) || code >> 16 == 3;
        if !known || !(8..=10_000).contains(&ln) {
            if self.start_seen[d] {
                self.not_postgres(d, off, frame, StopReason::NotStartup, true);
            } else {
                self.sides[d].state = State::Sync;
            }
            return 0;
        }
        let ln = ln as usize;
        let Some(body) = buf.get(8..ln) else {
            return 0;
        };
        self.roles_known = true;
        self.sides[d].decoded = true;
        self.decode_started_at.get_or_insert(StartedAt::Startup);
        if self.protocol == Protocol::Unknown {
            self.protocol = Protocol::Postgresql;
        }
        let s = &mut self.sides[d];
        match code {
            SSL_REQUEST | GSSENC_REQUEST => {
                let (name, asked) = if code == SSL_REQUEST {
                    ("SSLRequest", EncryptionRequest::Ssl)
                } else {
                    ("GSSENCRequest", EncryptionRequest::Gssenc)
                };
                s.counts.count(Name::Known(name));
                self.encryption_asked = Some(asked);
            }
            CANCEL_REQUEST => {
                s.counts.count(Name::Known("CancelRequest"));
                s.state = State::Typed;
                // the backend's process id, then its secret key (4 bytes; up to 256 from
                // protocol 3.2)
                if let Some(backend_pid) = be32(body, 0) {
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
                s.counts.count(Name::Known("StartupMessage"));
                s.state = State::Typed;
                let parameters = startup_params(body);
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
        ln
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
            self.roles_known = true;
            self.sides[d].decoded = true;
            self.decode_started_at.get_or_insert(StartedAt::Startup);
            self.encrypted(Encryption::Tls, frame, None);
            return buf.len();
        }
        if self.start_seen[d] {
            let offered = names.iter().map(|n| ascii_text(n)).collect();
            self.not_postgres(d, off, frame, StopReason::TlsWithoutAlpn { offered }, true);
        } else {
            self.sides[d].state = State::Sync;
        }
        0
    }

    /// A boundary found mid-stream at buf[pos] (buf at stream offset off).
    pub(super) fn synced(
        &mut self,
        d: usize,
        side: Role,
        off: i64,
        pos: usize,
        frame: u64,
        ts: f64,
    ) {
        if !self.roles_known {
            if side != self.sides[d].role {
                let r = self.sides[0].role;
                self.sides[0].role = self.sides[1].role;
                self.sides[1].role = r;
            }
            self.roles_known = true;
        }
        self.lost_response(d, pos as i64, frame, ts);
        let s = &mut self.sides[d];
        s.lost = s.lost.saturating_add(pos as i64);
        s.state = State::Typed;
        let role = s.role;
        if self.protocol == Protocol::Unknown {
            self.protocol = Protocol::Postgresql;
        }
        if self.decode_started_at.is_none() {
            self.decode_started_at = Some(StartedAt::MidStream);
            self.events.push(Event::MidStream {
                role,
                offset: super::conversation::at(off, pos),
                frame,
            });
        }
        let other = &mut self.sides[1 - d];
        if other.state == State::Start {
            other.state = State::Sync;
        }
    }

    /// No boundary with proof in a full window: accept one without, or give the side up.
    pub(super) fn settle_sync(&mut self, d: usize, frame: u64, ts: f64) {
        let s = &mut self.sides[d];
        s.scan = None;
        let Some((pos, side)) = find_boundary(&s.buf, s.role, false) else {
            let skipped = s.buf.len() as i64;
            s.lost = s.lost.saturating_add(skipped);
            s.keep(&[]);
            let (base, lost) = (s.base, s.lost);
            self.lost_response(d, skipped, frame, ts);
            if !self.sides.iter().any(|x| x.decoded) && self.protocol == Protocol::Unknown {
                self.sides[d].state = State::Stopped;
                if self.decode_stopped.is_none() {
                    self.not_postgres(d, base, frame, StopReason::NoFraming { lost }, false);
                }
            }
            return;
        };
        let base = s.base;
        let buf = std::mem::take(&mut s.buf);
        self.synced(d, side, base, pos, frame, ts);
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

    fn not_postgres(&mut self, d: usize, off: i64, frame: u64, reason: StopReason, stop: bool) {
        self.protocol = Protocol::Unknown;
        let role = self.sides[d].role;
        self.decode_stopped = Some(DecodeStopped {
            direction: role,
            offset: off,
            frame,
            reason: reason.clone(),
        });
        if stop {
            for s in &mut self.sides {
                s.state = State::Stopped;
            }
        }
        self.events.push(Event::NotPostgresql {
            role,
            offset: off,
            frame,
            reason,
        });
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
        s.state = State::Stopped;
        self.decode_stopped = Some(DecodeStopped {
            direction: role,
            offset: at,
            frame,
            reason: reason.clone(),
        });
        if !self.sides.iter().any(|x| x.decoded) && self.queries_total == 0 {
            self.protocol = Protocol::Unknown;
            return;
        }
        self.events.push(Event::Malformed {
            role,
            offset: at,
            frame,
            reason,
        });
    }
}
