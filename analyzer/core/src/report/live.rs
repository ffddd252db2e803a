//! What a pass that follows a stream says as it goes (`pktflow analyze - --follow`), one
//! line each ("pktflow.follow/1"): a query once it is final, a connection once it is judged.
//! The capture's own parts (relays, findings) follow at the end, as a report.

use serde::Serialize;

use super::connection::ConnectionRecord;
use super::conversation::QueryRecord;

pub const FOLLOW_SCHEMA: &str = "pktflow.follow/1";

#[derive(Serialize)]
pub struct LiveQuery<'a> {
    pub schema: &'static str,
    pub event: &'static str,
    /// The connection's id, as the report numbers it.
    pub connection: String,
    pub query: &'a QueryRecord,
}

impl<'a> LiveQuery<'a> {
    pub fn new(number: u64, query: &'a QueryRecord) -> Self {
        LiveQuery {
            schema: FOLLOW_SCHEMA,
            event: "query",
            connection: format!("c{number}"),
            query,
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
