//! Cancel requests linked to what they cancelled, across connections: a CancelRequest comes on
//! a connection of its own and names a backend by the process id and secret key its
//! BackendKeyData gave; the query running there ends in 57014 (query_canceled). Collected as
//! the records come, resolved once every connection is in, and written into both records (the
//! request's target, the query's `cancelled_by`) as they are read back.
//!
//! Per connection that gave a BackendKeyData, 16 bytes are kept (a hash of the server's
//! address, port, process id and key, and the connection's number): a storm of 80,000
//! connections holds 1.3 MB. The key itself is never kept here nor written anywhere.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use super::connection::{ConnectionRecord, EndpointRecord};
use super::conversation::{CancelTarget, CancelledBy};
use super::numbers::round_to;

/// SQLSTATE query_canceled: what a cancelled statement ends with.
pub const QUERY_CANCELED: &str = "57014";

#[derive(Default)]
pub struct Cancels {
    /// (the backend's hash, the connection's number) of each connection with BackendKeyData.
    keys: Vec<(u64, u64)>,
    /// Per connection, its queries that ended in 57014: (index, sent_s, the error's at_s).
    canceled: HashMap<u64, Vec<(usize, f64, f64)>>,
    /// Each CancelRequest: (the backend's hash, its connection's number, sent_s, frame).
    requests: Vec<(u64, u64, f64, u64)>,
    /// Resolved: by the request's connection, its target and the time to the error.
    links: HashMap<u64, (CancelTarget, Option<f64>)>,
    /// Resolved: by the target's connection, each cancelled query.
    stopped: HashMap<u64, Vec<(usize, CancelledBy)>>,
}

/// The backend a BackendKeyData or a CancelRequest names, on the server it was sent to.
fn backend(server: &EndpointRecord, pid: u32, key: &[u8]) -> u64 {
    let mut h = DefaultHasher::new(); // fixed keys: the same hash for the same backend
    (server.ip.as_str(), server.port, pid, key).hash(&mut h);
    h.finish()
}

impl Cancels {
    /// A judged connection's part: its backend's key, its cancelled queries, its request.
    pub fn add(&mut self, number: u64, record: &ConnectionRecord) {
        let Some(pg) = record.postgres.0.as_ref() else {
            return;
        };
        if let (Some(pid), Some(key)) = (pg.backend_pid, pg.backend_key.as_deref()) {
            crate::grow::push(&mut self.keys, (backend(&record.server, pid, key), number));
        }
        let canceled: Vec<(usize, f64, f64)> = (pg.queries.iter().enumerate())
            .filter_map(|(i, q)| {
                let e = q.error.as_ref()?;
                (e.code.as_deref() == Some(QUERY_CANCELED)).then_some((i, q.sent_s, e.at_s))
            })
            .collect();
        if !canceled.is_empty() {
            self.canceled.insert(number, canceled);
        }
        if let Some(c) = &pg.cancel_request {
            let hash = backend(&record.server, c.backend_pid, &c.key);
            self.requests.push((hash, number, c.sent_s, c.frame));
        }
    }

    /// Once every connection is in: each request's target, and the query it cancelled (sent
    /// before the request, ended in 57014 after it; the first such error).
    pub fn resolve(&mut self) {
        if self.requests.is_empty() {
            self.keys = Vec::new();
            return;
        }
        self.keys.sort_unstable();
        for &(hash, number, sent_s, frame) in &self.requests {
            let from = self.keys.partition_point(|e| e.0 < hash);
            let Some(&(_, target)) = self.keys.get(from).filter(|e| e.0 == hash) else {
                continue;
            };
            let query = (self.canceled.get(&target).into_iter().flatten())
                .filter(|q| q.1 <= sent_s && q.2 >= sent_s)
                .min_by(|a, b| a.2.total_cmp(&b.2));
            let ms = query.map(|q| round_to((q.2 - sent_s) * 1e3, 3));
            let link = CancelTarget {
                connection: format!("c{target}"),
                query_index: query.map(|q| q.0),
            };
            self.links.insert(number, (link, ms));
            if let (Some(q), Some(ms)) = (query, ms) {
                let stopped = self.stopped.entry(target).or_default();
                if !stopped.iter().any(|s| s.0 == q.0) {
                    let by = CancelledBy {
                        connection: format!("c{number}"),
                        frame,
                        cancel_to_error_ms: ms,
                    };
                    stopped.push((q.0, by));
                }
            }
        }
        self.keys = Vec::new();
        self.canceled = HashMap::new();
    }

    /// A record read back: its request's target, its queries' cancellers.
    pub fn apply(&self, number: u64, record: &mut ConnectionRecord) {
        let Some(pg) = record.postgres.0.as_mut() else {
            return;
        };
        if let (Some(c), Some((target, ms))) = (pg.cancel_request.as_mut(), self.links.get(&number))
        {
            c.target = Some(target.clone());
            c.cancel_to_error_ms = *ms;
        }
        for (i, by) in self.stopped.get(&number).into_iter().flatten() {
            if let Some(q) = pg.queries.get_mut(*i) {
                q.cancelled_by = Some(by.clone());
            }
        }
    }
}
