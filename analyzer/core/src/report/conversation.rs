//! A connection's PostgreSQL conversation as the report shows it: the decoder's facts with
//! query times from the capture's start, and each query's rate.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::direction::{bits_per_second, Counts};
use super::numbers::round_to;
use super::values::{Digits, Maybe};
use crate::pgwire::facts::{
    ConversationFacts, DecodeStopped, Encryption, Ordered, PerRole, Protocol, QueryFacts,
    StartedAt, StopReason,
};
use crate::pgwire::messages::{ErrorFields, Role};
use crate::pgwire::query::{QueryKind, RowCount};

/// Python will not read (nor write) an int of more digits than this (its
/// `sys.get_int_max_str_digits()` default): a row count that long is no count.
const MAX_INT_DIGITS: usize = 4300;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ConversationRecord {
    pub protocol: Protocol,
    pub startup: Option<StartupRecord>,
    pub decode_started_at: Option<StartedAt>,
    pub decode_stopped: Option<DecodeStoppedRecord>,
    pub lost_bytes: PerRole<i64>,
    pub backend_pid: Option<u32>,
    pub server_parameters: Ordered<String>,
    pub messages: PerRole<Ordered<u64, Cow<'static, str>>>,
    pub queries: Vec<QueryRecord>,
    pub queries_total: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StartupRecord {
    pub user: Option<String>,
    pub database: Option<String>,
    pub application_name: Option<String>,
    pub encryption: Encryption,
    /// Only when the snapshot length cut the StartupMessage: the bytes of it captured; the
    /// parameters past them are unknown (null here, not absent from the message).
    pub captured_bytes: Maybe<i64>,
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
    pub error: Option<ErrorFields>,
    pub incomplete: bool,
    pub response_segments: u64,
    pub response_segment_median: Option<i64>,
    pub response_segment_max: Option<i64>,
    pub response_segment_sizes: Counts,
    pub goodput_bps: Option<i64>,
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
            captured_bytes: Maybe(s.captured),
        });
        ConversationRecord {
            protocol: facts.protocol,
            startup,
            decode_started_at: if facts.protocol == Protocol::Unknown {
                None
            } else {
                facts.decode_started_at
            },
            decode_stopped: facts.decode_stopped.map(DecodeStoppedRecord::of),
            lost_bytes: facts.lost_bytes,
            backend_pid: facts.backend_pid,
            server_parameters: facts.server_parameters,
            messages: facts.messages,
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
    fn of(q: QueryFacts, start: f64) -> Self {
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
            error: q.error,
            incomplete: q.incomplete,
            response_segments: q.response_segments,
            response_segment_median: q.response_segment_median,
            response_segment_max: q.response_segment_max,
            response_segment_sizes: Counts(q.response_segment_sizes),
            goodput_bps,
        }
    }
}
