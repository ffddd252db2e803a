//! What a pass that follows a stream says as it goes (`pktflow analyze - --follow`), one
//! line each ("pktflow.follow/1"): a query once it is final, a connection once it is judged.
//! The capture's own parts (relays, findings) follow at the end, as a report.

use serde::Serialize;

use super::connection::ConnectionRecord;
use super::conversation::QueryRecord;
use super::numbers::round_to;
use crate::transfer::{ByLimit, LIMITS};

pub const FOLLOW_SCHEMA: &str = "pktflow.follow/1";

#[derive(Serialize)]
pub struct LiveQuery<'a> {
    pub schema: &'static str,
    pub event: &'static str,
    /// The connection's id, as the report numbers it.
    pub connection: String,
    pub query: &'a QueryRecord,
    /// Seconds the response gave to each limit (the backend direction's, from the request to
    /// the query's end), as the direction's `limits.seconds` counts them; null when the
    /// transfer was not measured.
    pub response_limits: Option<ByLimit<f64>>,
}

impl<'a> LiveQuery<'a> {
    pub fn new(number: u64, query: &'a QueryRecord, limits: Option<[f64; LIMITS]>) -> Self {
        LiveQuery {
            schema: FOLLOW_SCHEMA,
            event: "query",
            connection: format!("c{number}"),
            query,
            response_limits: limits.map(|s| ByLimit::of(&s.map(|x| round_to(x, 6)))),
        }
    }
}

#[derive(Serialize)]
pub struct LiveConnection<'a> {
    pub schema: &'static str,
    pub event: &'static str,
    pub connection: &'a ConnectionRecord,
}

impl<'a> LiveConnection<'a> {
    pub fn new(connection: &'a ConnectionRecord) -> Self {
        LiveConnection {
            schema: FOLLOW_SCHEMA,
            event: "connection",
            connection,
        }
    }
}
