//! A connection's PostgreSQL conversation as the report shows it: the decoder's facts with
//! query times from the capture's start, and each query's rate.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::direction::{bits_per_second, Counts};
use super::numbers::round_to;
use super::values::{Digits, Maybe};
use crate::pgwire::facts::{
    AuthOutcome, Authentication, ConversationFacts, DecodeStopped, Encryption, Ordered, PerRole,
    Protocol, QueryFacts, ServerMessage, StartedAt, StopReason,
};
use crate::pgwire::messages::Role;
use crate::pgwire::query::{QueryKind, RowCount};

/// Python will not read (nor write) an int of more digits than this (its
/// `sys.get_int_max_str_digits()` default): a row count that long is no count.
const MAX_INT_DIGITS: usize = 4300;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ConversationRecord {
    pub protocol: Protocol,
    pub startup: Option<StartupRecord>,
    pub authentication: Option<AuthenticationRecord>,
    pub decode_started_at: Option<StartedAt>,
    pub decode_stopped: Option<DecodeStoppedRecord>,
    pub lost_bytes: PerRole<i64>,
    pub backend_pid: Option<u32>,
    /// BackendKeyData's secret key: read to link cancel requests, never written.
    #[serde(skip)]
    pub backend_key: Option<Vec<u8>>,
    /// This connection's CancelRequest, and the query it cancelled.
    pub cancel_request: Option<CancelRecord>,
    pub server_parameters: Ordered<String>,
    pub messages: PerRole<Ordered<u64, Cow<'static, str>>>,
    /// Notices and errors outside any query: the first 16 of each.
    pub notices: Vec<ServerMessageRecord>,
    pub notices_total: u64,
    pub errors: Vec<ServerMessageRecord>,
    pub queries: Vec<QueryRecord>,
    pub queries_total: u64,
}

/// An ErrorResponse or NoticeResponse: the fields every report has had (null when not sent),
/// the others only where the server sent them, and where it came.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ServerMessageRecord {
    pub code: Option<String>,
    pub message: Option<String>,
    pub severity: Option<String>,
    pub detail: Option<String>,
    pub hint: Option<String>,
    pub position: Option<String>,
    pub localized_severity: Maybe<String>,
    pub internal_position: Maybe<String>,
    pub internal_query: Maybe<String>,
    pub r#where: Maybe<String>,
    pub schema: Maybe<String>,
    pub table: Maybe<String>,
    pub column: Maybe<String>,
    pub data_type: Maybe<String>,
    pub constraint: Maybe<String>,
    pub file: Maybe<String>,
    pub line: Maybe<String>,
    pub routine: Maybe<String>,
    pub frame: u64,
    pub at_s: f64,
}

impl ServerMessageRecord {
    fn of(m: ServerMessage, start: f64) -> Self {
        let f = m.fields;
        ServerMessageRecord {
            code: f.code,
            message: f.message,
            severity: f.severity,
            detail: f.detail,
            hint: f.hint,
            position: f.position,
            localized_severity: Maybe(f.localized_severity),
            internal_position: Maybe(f.internal_position),
            internal_query: Maybe(f.internal_query),
            r#where: Maybe(f.r#where),
            schema: Maybe(f.schema),
            table: Maybe(f.table),
            column: Maybe(f.column),
            data_type: Maybe(f.data_type),
            constraint: Maybe(f.constraint),
            file: Maybe(f.file),
            line: Maybe(f.line),
            routine: Maybe(f.routine),
            frame: m.frame,
            at_s: round_to(m.ts - start, 6),
        }
    }

    fn list(list: Vec<ServerMessage>, start: f64) -> Vec<Self> {
        list.into_iter().map(|m| Self::of(m, start)).collect()
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StartupRecord {
    pub user: Option<String>,
    pub database: Option<String>,
    pub application_name: Option<String>,
    pub encryption: Encryption,
    pub protocol_version: String,
    /// Every parameter the StartupMessage sent (the first 32), in order.
    pub parameters: Ordered<String>,
    /// Only when the snapshot length cut the StartupMessage: the bytes of it captured; the
    /// parameters past them are unknown (null above and not in `parameters`, not absent from
    /// the message).
    pub captured_bytes: Maybe<i64>,
}

/// A CancelRequest: the backend it names, when it was sent, and what it stopped (set once
/// every connection is in: `report::cancels`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CancelRecord {
    pub backend_pid: u32,
    pub frame: u64,
    pub sent_s: f64,
    /// The connection whose BackendKeyData named that process id and key; the query there
    /// that ended in 57014 (query_canceled) after the request, when one did.
    pub target: Option<CancelTarget>,
    /// From the request to that query's ErrorResponse.
    pub cancel_to_error_ms: Option<f64>,
    /// The secret key: read to find the target, never written.
    #[serde(skip)]
    pub key: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CancelTarget {
    pub connection: String,
    pub query_index: Option<usize>,
}

/// The CancelRequest that stopped a query.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CancelledBy {
    pub connection: String,
    pub frame: u64,
    pub cancel_to_error_ms: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AuthenticationRecord {
    pub method: Option<String>,
    pub mechanisms: Vec<String>,
    pub mechanism: Option<String>,
    pub outcome: AuthOutcome,
    pub round_trips: u64,
    /// From the StartupMessage to the AuthenticationOk or ErrorResponse that decided.
    pub ms: Option<f64>,
    pub first_frame: u64,
    pub last_frame: Option<u64>,
}

impl AuthenticationRecord {
    fn of(a: Authentication) -> Self {
        AuthenticationRecord {
            method: a.method,
            mechanisms: a.mechanisms,
            mechanism: a.mechanism,
            outcome: a.outcome,
            round_trips: a.round_trips,
            ms: a.end_ts.map(|end| round_to((end - a.start_ts) * 1e3, 3)),
            first_frame: a.first_frame,
            last_frame: a.last_frame,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DecodeStoppedRecord {
    pub direction: Role,
    pub offset: i64,
    /// None when the decision came at the capture's end (a connection found not to be
    /// PostgreSQL).
    pub frame: Option<u64>,
    /// Python's words for the reason.
    pub reason: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct QueryRecord {
    pub sql: String,
    pub sql_truncated: bool,
    pub kind: QueryKind,
    pub command_tag: Option<String>,
    pub rows: Option<Digits>,
    pub data_rows: u64,
    pub copy_data: u64,
    pub response_bytes: u64,
    pub response_messages: u64,
    pub sent_s: f64,
    pub first_response_s: Option<f64>,
    pub last_response_s: Option<f64>,
    pub sent_frame: u64,
    pub first_frame: Option<u64>,
    pub last_frame: Option<u64>,
    /// The same moments as the receiver's reader had them, written only where a copy of the
    /// query's bytes that the capture saw was lost past the capture point and a later copy
    /// carried them (captured at a pooler, its back leg's replies then reach it later than
    /// the capture shows).
    pub delivered: Maybe<Box<DeliveredRecord>>,
    /// Boxed, as the facts' (most queries have none).
    pub error: Option<Box<ServerMessageRecord>>,
    /// The first 8 notices it raised, and how many in all.
    pub notices: Vec<ServerMessageRecord>,
    pub notices_total: u64,
    /// Its result's shape: the first RowDescription's column names (the first 64) and count;
    /// and its DataRows' bytes (bodies, without the 5-byte headers).
    pub columns: Option<Vec<String>>,
    pub column_count: Option<u16>,
    pub data_row_bytes: u64,
    /// The CancelRequest (another connection's) after which it ended in 57014.
    pub cancelled_by: Option<CancelledBy>,
    pub incomplete: bool,
    pub response_segments: u64,
    pub response_segment_median: Option<i64>,
    pub response_segment_max: Option<i64>,
    pub response_segment_sizes: Counts,
    pub goodput_bps: Option<i64>,
}

/// A query's request, first and last response message as delivered (times from the
/// capture's start): each the captured one but where a later copy carried it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeliveredRecord {
    pub sent_s: f64,
    pub sent_frame: u64,
    pub first_response_s: Option<f64>,
    pub first_frame: Option<u64>,
    pub last_response_s: Option<f64>,
    pub last_frame: Option<u64>,
}

/// A stop whose reason says the connection is not PostgreSQL (as far as the capture shows);
/// the others are malformed framing.
fn not_postgres(reason: &StopReason) -> bool {
    matches!(
        reason,
        StopReason::NotStartup
            | StopReason::TlsWithoutAlpn { .. }
            | StopReason::NoFraming { .. }
            | StopReason::OtherProtocol { .. }
            | StopReason::Unproven { .. }
            | StopReason::NothingCaptured { .. }
    )
}

impl ConversationRecord {
    /// The conversation's part of the report; the facts' strings and lists are moved.
    pub fn of(facts: ConversationFacts, start: f64) -> Self {
        let startup = facts.startup.map(|s| StartupRecord {
            user: s.user,
            database: s.database,
            application_name: s.application_name,
            encryption: facts.encryption,
            protocol_version: s.protocol_version,
            parameters: s.parameters,
            captured_bytes: Maybe(s.captured),
        });
        ConversationRecord {
            protocol: facts.protocol,
            startup,
            authentication: facts.authentication.map(AuthenticationRecord::of),
            decode_started_at: if facts.protocol == Protocol::Unknown {
                None
            } else {
                facts.decode_started_at
            },
            decode_stopped: facts.decode_stopped.map(DecodeStoppedRecord::of),
            lost_bytes: facts.lost_bytes,
            backend_pid: facts.backend_pid,
            backend_key: facts.backend_key,
            cancel_request: facts.cancel_request.map(|c| CancelRecord {
                backend_pid: c.backend_pid,
                frame: c.frame,
                sent_s: round_to(c.ts - start, 6),
                target: None,
                cancel_to_error_ms: None,
                key: c.key,
            }),
            server_parameters: facts.server_parameters,
            messages: facts.messages,
            notices: ServerMessageRecord::list(facts.notices, start),
            notices_total: facts.notices_total,
            errors: ServerMessageRecord::list(facts.errors, start),
            queries: facts
                .queries
                .into_iter()
                .map(|q| QueryRecord::of(q, start))
                .collect(),
            queries_total: facts.queries_total,
        }
    }
}

impl DecodeStoppedRecord {
    fn of(s: DecodeStopped) -> Self {
        let frame = if not_postgres(&s.reason) && s.frame == 0 {
            None
        } else {
            Some(s.frame)
        };
        DecodeStoppedRecord {
            direction: s.direction,
            offset: s.offset,
            frame,
            reason: String::new(),
        }
    }
}

impl QueryRecord {
    /// A query as the report lists it (times from the capture's `start`).
    pub fn of(q: QueryFacts, start: f64) -> Self {
        let at = |ts: f64| round_to(ts - start, 6);
        let goodput_bps = match (q.first_response_ts, q.last_response_ts) {
            (Some(first), Some(last)) => {
                bits_per_second(q.response_bytes as i64, last - first, q.response_segments)
            }
            _ => None,
        };
        let rows = q.rows.and_then(|r| match r {
            RowCount::Small(n) => Some(Digits(n.to_string())),
            RowCount::Big(d) if d.len() <= MAX_INT_DIGITS => Some(Digits(d.into())),
            RowCount::Big(_) => None,
        });
        QueryRecord {
            sql: q.sql,
            sql_truncated: q.sql_truncated,
            kind: q.kind,
            command_tag: q.command_tag,
            rows,
            data_rows: q.data_rows,
            copy_data: q.copy_data,
            response_bytes: q.response_bytes,
            response_messages: q.response_messages,
            sent_s: at(q.sent_ts),
            first_response_s: q.first_response_ts.map(at),
            last_response_s: q.last_response_ts.map(at),
            sent_frame: q.sent_frame,
            first_frame: q.first_frame,
            last_frame: q.last_frame,
            delivered: Maybe(q.delivered.map(|d| {
                Box::new(DeliveredRecord {
                    sent_s: at(d.sent_ts),
                    sent_frame: d.sent_frame,
                    first_response_s: d.first_response_ts.map(at),
                    first_frame: d.first_frame,
                    last_response_s: d.last_response_ts.map(at),
                    last_frame: d.last_frame,
                })
            })),
            error: q
                .error
                .map(|e| Box::new(ServerMessageRecord::of(*e, start))),
            notices: ServerMessageRecord::list(q.notices, start),
            notices_total: q.notices_total,
            columns: q.columns,
            column_count: q.column_count,
            data_row_bytes: q.data_row_bytes,
            cancelled_by: None,
            incomplete: q.incomplete,
            response_segments: q.response_segments,
            response_segment_median: q.response_segment_median,
            response_segment_max: q.response_segment_max,
            response_segment_sizes: Counts(q.response_segment_sizes),
            goodput_bps,
        }
    }
}
