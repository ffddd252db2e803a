//! What the decoder hands out about a connection: plain values, no sentences. Python maps them
//! to the report (pktflow/pgwire/report.py): the keys are today's JSON keys where one exists.

use std::borrow::Cow;

use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::conversation::BULK_SEGMENTS;
use super::conversation::{Conversation, Side};
use super::messages::{ErrorFields, Role};
use super::query::{Query, QueryKind, RowCount};
use crate::report::spool::SpoolError;
use crate::series::Series;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Protocol {
    #[serde(rename = "unknown")]
    Unknown,
    #[serde(rename = "postgresql")]
    Postgresql,
    #[serde(rename = "postgresql-tls")]
    PostgresqlTls,
    #[serde(rename = "postgresql-gss")]
    PostgresqlGss,
}

impl Protocol {
    /// PostgreSQL, in the clear or encrypted.
    pub fn is_postgres(self) -> bool {
        self != Protocol::Unknown
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encryption {
    None,
    Tls,
    Gss,
}

/// An untyped first message asking for encryption.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum EncryptionRequest {
    #[serde(rename = "SSLRequest")]
    Ssl,
    #[serde(rename = "GSSENCRequest")]
    Gssenc,
}

/// Where decoding began: at the stream's start, or at a boundary found mid-stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StartedAt {
    #[serde(rename = "startup")]
    Startup,
    #[serde(rename = "mid-stream")]
    MidStream,
}

/// Why a direction is not decoded past some point.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StopReason {
    /// A message length under 4.
    #[serde(rename = "length_under_4")]
    LengthUnder4 { length: i64 },
    /// A message length past MAX_MESSAGE.
    LengthAbsurd { length: i64 },
    /// A type byte this side never sends.
    NotRoleType { type_byte: u8, role: Role },
    /// A type whose length is fixed (or bounded), at another length.
    WrongLength {
        type_byte: u8,
        role: Role,
        length: i64,
        min: i64,
        max: i64,
    },
    /// The first message is not a startup, SSL, GSS or cancel request.
    NotStartup,
    /// The first message is a ClientHello without ALPN "postgresql"; the names offered.
    TlsWithoutAlpn { offered: Vec<String> },
    /// No message framing in a whole sync window: the bytes lost on that side.
    NoFraming { lost: i64 },
    /// Another protocol where a segment starts (detect.rs): its name and what was seen.
    OtherProtocol {
        protocol: &'static str,
        seen: String,
    },
    /// Before the connection was proven PostgreSQL, a message whose length or body does not
    /// fit its type (shape.rs).
    Misfit {
        type_byte: u8,
        role: Role,
        length: i64,
    },
    /// Of the connection's payload only gaps reached the decoder (a snapshot length that
    /// keeps no payload byte): how many bytes.
    NothingCaptured { bytes: i64 },
    /// The capture ended without proof (detect.rs): the messages that framed as PostgreSQL,
    /// the requests answered by their kind of response, and those answered by another kind.
    Unproven {
        frontend_messages: u64,
        backend_messages: u64,
        exchanges: u32,
        misfits: u32,
    },
}

/// Why a connection seen mid-stream was taken as PostgreSQL (detect.rs): the first request
/// answered by its kind of response, how many were, and the ReadyForQuery that closed the
/// first cycle (None when a second exchange proved it first).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Proof {
    pub request: &'static str,
    pub request_frame: u64,
    pub response: &'static str,
    pub response_frame: u64,
    pub exchanges: u32,
    pub closed_frame: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DecodeStopped {
    pub direction: Role,
    pub offset: i64,
    /// As given; 0 when the decision came at the end (finish).
    pub frame: u64,
    pub reason: StopReason,
}

/// What happened on the connection, in order, with its numbers and frames.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// A capture gap cut a message: decoding resumes at the next provable boundary.
    Resync {
        role: Role,
        length: i64,
        offset: i64,
        frame: u64,
    },
    /// The stream's start was not seen (the connection began before the capture, or the
    /// snapshot length cut its first message to fewer than 8 bytes): decoding starts at this
    /// offset, where a boundary was found, and the connection is PostgreSQL by `proof`.
    MidStream {
        role: Role,
        offset: i64,
        frame: u64,
        start_seen: bool,
        proof: Proof,
    },
    /// The snapshot length cut the first (untyped) message: `captured` of its `length` bytes
    /// were read, the parameters past them are unknown.
    StartupCut {
        message: &'static str,
        length: i64,
        captured: i64,
        frame: u64,
    },
    /// The rest is encrypted; request None: the client started TLS directly (ALPN
    /// "postgresql").
    Encrypted {
        encryption: Encryption,
        request: Option<EncryptionRequest>,
        frame: u64,
    },
    /// Not PostgreSQL as far as the capture shows (frame 0: at the end).
    NotPostgresql {
        role: Role,
        offset: i64,
        frame: u64,
        reason: StopReason,
    },
    /// Malformed framing: this direction is not decoded past the offset.
    Malformed {
        role: Role,
        offset: i64,
        frame: u64,
        reason: StopReason,
    },
    /// An ErrorResponse outside any query (authentication, startup).
    ServerError {
        code: Option<String>,
        message: Option<String>,
        frame: u64,
    },
    /// A query failed (the first `MAX_ERROR_FINDINGS` of a connection).
    QueryError {
        code: Option<String>,
        message: Option<String>,
        sql: String,
        sent_frame: u64,
        frame: u64,
    },
    /// More queries failed than were listed one by one.
    QueryErrorsTotal { count: u64, listed: u64 },
    /// More than `listed` queries: the rest are counted, from this frame.
    QueriesCapped { listed: u64, frame: u64 },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Startup {
    pub user: Option<String>,
    pub database: Option<String>,
    pub application_name: Option<String>,
    /// The protocol version asked for ("3.0").
    pub protocol_version: String,
    /// Every parameter sent, in order (user, database, options, replication, client_encoding,
    /// DateStyle, TimeZone, extra_float_digits, ...): the first 32.
    pub parameters: Ordered<String>,
    /// When the snapshot length cut the message: the bytes of it captured (the parameters
    /// past them are unknown, not absent).
    pub captured: Option<i64>,
}

/// How the client proved who it is, as the wire shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Authentication {
    /// From the server's first request: trust (AuthenticationOk at once), cleartext-password,
    /// md5, sasl, gss, sspi, kerberos-v5, scm-credential, or "code N"; None when the server
    /// refused before asking anything (an ErrorResponse at once).
    pub method: Option<String>,
    /// SASL: the mechanisms the server offered, and the one the client chose.
    pub mechanisms: Vec<String>,
    pub mechanism: Option<String>,
    pub outcome: AuthOutcome,
    /// Client messages (the StartupMessage, each password, SASL or GSS response) the server
    /// answered before the outcome: each a round trip.
    pub round_trips: u64,
    /// The StartupMessage, and the AuthenticationOk or ErrorResponse that decided (epoch s).
    pub first_frame: u64,
    pub start_ts: f64,
    pub last_frame: Option<u64>,
    pub end_ts: Option<f64>,
}

/// A CancelRequest: the backend it names. The secret key is kept to find that backend's
/// connection (its BackendKeyData) and is never written.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CancelRequest {
    pub backend_pid: u32,
    #[serde(skip)]
    pub key: Vec<u8>,
    pub frame: u64,
    /// Epoch seconds.
    pub ts: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthOutcome {
    Ok,
    Failed,
    /// The capture ends (or the connection closes) before the server decided.
    Unfinished,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PerRole<T> {
    pub frontend: T,
    pub backend: T,
}

/// (key, value) pairs in order, serialized as a map (a dict in that order).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ordered<V, K = String>(pub Vec<(K, V)>);

impl<V: Serialize, K: Serialize> Serialize for Ordered<V, K> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de, V: Deserialize<'de>, K: Deserialize<'de>> Deserialize<'de> for Ordered<V, K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Pairs<V, K>(std::marker::PhantomData<(V, K)>);
        impl<'de, V: Deserialize<'de>, K: Deserialize<'de>> serde::de::Visitor<'de> for Pairs<V, K> {
            type Value = Ordered<V, K>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Self::Value, A::Error> {
                let mut out = Vec::with_capacity(a.size_hint().unwrap_or(0));
                while let Some(kv) = a.next_entry()? {
                    out.push(kv);
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(Pairs(std::marker::PhantomData))
    }
}

/// An ErrorResponse or a NoticeResponse: its fields, and the frame and time it came.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServerMessage {
    pub fields: ErrorFields,
    pub frame: u64,
    /// Epoch seconds.
    pub ts: f64,
}

/// Also read back: a long conversation's finished queries wait in a spool (held.rs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueryFacts {
    pub sql: String,
    pub sql_truncated: bool,
    pub kind: QueryKind,
    pub command_tag: Option<String>,
    /// Rows from the command tags, else the DataRows, else 0 after a tag; digits as a string
    /// past 64 bits.
    pub rows: Option<RowCount>,
    pub data_rows: u64,
    pub copy_data: u64,
    pub response_bytes: u64,
    pub response_messages: u64,
    /// Epoch seconds, unrounded.
    pub sent_ts: f64,
    pub first_response_ts: Option<f64>,
    pub last_response_ts: Option<f64>,
    pub sent_frame: u64,
    pub first_frame: Option<u64>,
    pub last_frame: Option<u64>,
    /// Boxed: most queries end without one, and a long connection lists 10,000 queries.
    pub error: Option<Box<ServerMessage>>,
    /// The first MAX_QUERY_NOTICES notices it raised, and how many in all.
    pub notices: Vec<ServerMessage>,
    pub notices_total: u64,
    /// The first RowDescription's column names (the first MAX_COLUMN_NAMES) and count.
    pub columns: Option<Vec<String>>,
    pub column_count: Option<u16>,
    pub data_row_bytes: u64,
    pub incomplete: bool,
    pub response_segments: u64,
    pub response_segment_median: Option<i64>,
    pub response_segment_max: Option<i64>,
    /// The 6 most frequent segment sizes: (size, count), largest count first.
    pub response_segment_sizes: Vec<(i64, u64)>,
    /// Its moments as the receiver's reader had them, where a copy of its bytes that the
    /// capture saw was lost past the capture point and a later one carried them.
    pub delivered: Option<Box<DeliveredFacts>>,
    /// A bulk response's bytes over time (moved out by `into_facts`, for a relay's legs).
    #[serde(skip)]
    pub series: Option<Box<Series>>,
}

/// A query's request, first and last response message as delivered: epoch seconds and
/// frames, each the captured one but where a later copy carried it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeliveredFacts {
    pub sent_ts: f64,
    pub sent_frame: u64,
    pub first_response_ts: Option<f64>,
    pub first_frame: Option<u64>,
    pub last_response_ts: Option<f64>,
    pub last_frame: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ConversationFacts {
    /// The engine direction (0 or 1) that is the frontend; None while not PostgreSQL.
    pub frontend_direction: Option<u8>,
    pub protocol: Protocol,
    pub encryption: Encryption,
    pub startup: Option<Startup>,
    pub authentication: Option<Authentication>,
    /// As decoded, also when the protocol ended up unknown (the report then shows none).
    pub decode_started_at: Option<StartedAt>,
    pub decode_stopped: Option<DecodeStopped>,
    pub lost_bytes: PerRole<i64>,
    pub backend_pid: Option<u32>,
    /// BackendKeyData's secret key, which a CancelRequest must name: never written.
    #[serde(skip)]
    pub backend_key: Option<Vec<u8>>,
    pub cancel_request: Option<CancelRequest>,
    pub server_parameters: Ordered<String>,
    /// Keyed by the message's name: static but for unnamed authentication codes.
    pub messages: PerRole<Ordered<u64, Cow<'static, str>>>,
    /// The first MAX_QUERIES queries.
    pub queries: Vec<QueryFacts>,
    pub queries_total: u64,
    pub query_errors: u64,
    /// Notices and errors outside any query (at startup, or while idle): the first
    /// MAX_SESSION_MESSAGES of each, and how many notices in all.
    pub notices: Vec<ServerMessage>,
    pub notices_total: u64,
    pub errors: Vec<ServerMessage>,
    pub events: Vec<Event>,
}

impl ConversationFacts {
    /// A connection found not to be PostgreSQL has no PostgreSQL facts: what its bytes looked
    /// like before that was clear (a MySQL greeting framed as an Authentication request, then
    /// "malformed" bytes) says nothing of PostgreSQL, and its errors would be false alarms. The
    /// decision and its reason stay.
    fn unless_not_postgres(mut self) -> Self {
        if self.protocol != Protocol::Unknown {
            return self;
        }
        self.startup = None;
        self.authentication = None;
        self.backend_pid = None;
        self.backend_key = None;
        self.cancel_request = None;
        self.server_parameters = Ordered::default();
        self.messages = PerRole::default();
        self.queries.clear();
        self.queries_total = 0;
        self.query_errors = 0;
        self.notices.clear();
        self.notices_total = 0;
        self.errors.clear();
        self.events
            .retain(|e| matches!(e, Event::NotPostgresql { .. }));
        self
    }
}

impl Conversation {
    /// Everything the report reads of the conversation, as it stands, but the queries it
    /// handed over to a spool (`into_facts` reads those back).
    pub fn facts(&self) -> ConversationFacts {
        let queries = (self.store.listed.iter())
            .map(|q| self.query_facts(q))
            .collect();
        self.facts_with(queries)
    }

    fn facts_with(&self, queries: Vec<QueryFacts>) -> ConversationFacts {
        let (front, back) = if self.sides[0].role == Role::Frontend {
            (&self.sides[0], &self.sides[1])
        } else {
            (&self.sides[1], &self.sides[0])
        };
        let counts = |s: &Side| Ordered(s.counts.items().map(|(n, k)| (n.label(), k)).collect());
        ConversationFacts {
            frontend_direction: self.frontend_direction().map(|d| d as u8),
            protocol: self.protocol,
            encryption: self.encryption,
            startup: self.startup.clone(),
            authentication: self.authentication.clone(),
            decode_started_at: self.decode_started_at,
            decode_stopped: self.decode_stopped.clone(),
            lost_bytes: PerRole {
                frontend: front.lost,
                backend: back.lost,
            },
            backend_pid: self.backend_pid,
            backend_key: self.backend_key.clone(),
            cancel_request: self.cancel_request.clone(),
            server_parameters: Ordered(self.parameters.clone()),
            messages: PerRole {
                frontend: counts(front),
                backend: counts(back),
            },
            queries,
            queries_total: self.queries_total,
            query_errors: self.query_errors,
            notices: self.notices.clone(),
            notices_total: self.notices_total,
            errors: self.errors.clone(),
            events: self.events.clone(),
        }
        .unless_not_postgres()
    }

    /// The same facts once the conversation is done: its strings and lists are moved, not
    /// copied (a connection storm reports thousands of conversations a second), and each bulk
    /// response's series with its query. The queries handed over are read back from the
    /// spool, which may fail.
    pub fn into_facts(mut self) -> Result<ConversationFacts, SpoolError> {
        let parameters = std::mem::take(&mut self.parameters);
        let events = std::mem::take(&mut self.events);
        let (notices, errors) = (
            std::mem::take(&mut self.notices),
            std::mem::take(&mut self.errors),
        );
        let startup = self.startup.take();
        // each query dropped as its facts are made: a long connection's 10,000 are never
        // held twice
        let listed = std::mem::take(&mut self.store.listed);
        let mut queries = match self.store.held.as_mut() {
            Some(held) => held.take()?,
            None => Vec::new(),
        };
        queries.reserve_exact(listed.len());
        for mut q in listed {
            let series = q.series.take().filter(|s| s.totals().0 >= BULK_SEGMENTS);
            queries.push(QueryFacts {
                series,
                ..self.query_facts(&q)
            });
        }
        let mut facts = self.facts_with(queries);
        facts.server_parameters = Ordered(parameters);
        facts.events = events;
        facts.notices = notices;
        facts.errors = errors;
        facts.startup = startup;
        Ok(facts.unless_not_postgres())
    }

    pub(super) fn query_facts(&self, q: &Query) -> QueryFacts {
        QueryFacts {
            sql: q.sql.to_string(),
            sql_truncated: q.sql_truncated,
            kind: q.kind,
            command_tag: q.tag.as_deref().map(str::to_owned),
            rows: q.rows(),
            data_rows: q.data_rows,
            copy_data: q.copy_data,
            response_bytes: q.resp_bytes,
            response_messages: q.resp_msgs,
            sent_ts: q.sent.ts,
            first_response_ts: q.first().map(|m| m.ts),
            last_response_ts: q.last().map(|m| m.ts),
            sent_frame: q.sent.frame,
            first_frame: q.first().map(|m| m.frame),
            last_frame: q.last().map(|m| m.frame),
            error: q.error().cloned().map(Box::new),
            notices: q
                .extra
                .as_ref()
                .map(|x| x.notices.clone())
                .unwrap_or_default(),
            notices_total: q.extra.as_ref().map_or(0, |x| x.notices_total),
            columns: (q.extra.as_ref()).and_then(|x| x.columns.as_deref()).map(
                |names| match names {
                    "" => Vec::new(),
                    _ => names.split('\0').map(str::to_owned).collect(),
                },
            ),
            column_count: q.extra.as_ref().and_then(|x| x.column_count),
            data_row_bytes: q.data_row_bytes,
            incomplete: q.incomplete || (q.in_pending && self.gaps > q.gaps_at),
            response_segments: q.segments.n(),
            response_segment_median: q.segments.median(),
            response_segment_max: q.segments.hi(),
            response_segment_sizes: q.segments.top(6),
            delivered: (q.extra.as_ref()).and_then(|x| x.delivered).map(|at| {
                let answered = q.first().is_some();
                Box::new(DeliveredFacts {
                    sent_ts: at.sent.ts,
                    sent_frame: at.sent.frame,
                    first_response_ts: answered.then_some(at.first.ts),
                    first_frame: answered.then_some(at.first.frame),
                    last_response_ts: answered.then_some(at.last.ts),
                    last_frame: answered.then_some(at.last.frame),
                })
            }),
            series: None,
        }
    }
}
