//! What the relay stage keeps of each PostgreSQL connection once it is judged: what matching
//! reads (its endpoints, and per query its key and times: held in memory, a few dozen bytes a
//! query), and the rest, spooled: its queries whole (what the matched pairs and the
//! forwarding measures read) and what its server -> client direction says about the relay
//! (windows, ACK cadence, writes, Python's verdict).

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::pass::ConnectionReport;
use crate::pgwire::messages::py_space;
use crate::report::conversation::{DeliveredRecord, QueryRecord};
use crate::report::direction::LimitsRecord;
use crate::report::values::Digits;
use crate::report::words::{Limit, Verdict};
use crate::report::ConnectionRecord;
use crate::series::Series;
use crate::transfer::window_bytes;

/// A response in this many segments or more is a bulk one.
pub const BULK_SEGMENTS: u64 = 4;

/// A write size below this is no program's forwarding unit (and a storm's legs, whose writes
/// are all smaller, keep none).
pub const MIN_WRITE_UNIT: i64 = 1024;

/// What only the relay stage reads of a connection, taken from its facts before they become
/// its record: each listed query's bulk response over time, and when the server -> client
/// direction's receiver (the client) advertised a zero window.
#[derive(Debug, Default)]
pub struct LegExtras {
    pub series: Vec<Option<Box<Series>>>,
    pub zero_spans: Vec<(f64, f64)>,
}

impl LegExtras {
    /// Taken out of the facts (`swapped`: the report's client is the engine's server).
    pub fn take(report: &mut ConnectionReport, swapped: bool) -> Self {
        let series = (report.postgres.as_mut())
            .map(|p| p.queries.iter_mut().map(|q| q.series.take()).collect())
            .unwrap_or_default();
        let s2c = usize::from(!swapped);
        let zero_spans = (report.transfer.as_mut())
            .and_then(|t| t.directions.get_mut(s2c))
            .map(|d| std::mem::take(&mut d.window.zero_spans))
            .unwrap_or_default();
        LegExtras { series, zero_spans }
    }
}

/// A query of a leg, whole: what the matched pairs and the forwarding measures read. Spooled
/// when its leg is kept, read back for the queries matched.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LegQuery {
    pub sql: String,
    pub rows: Option<Digits>,
    pub response_bytes: u64,
    pub sent_s: f64,
    pub first_response_s: Option<f64>,
    pub last_response_s: Option<f64>,
    pub sent_frame: u64,
    pub first_frame: Option<u64>,
    pub last_frame: Option<u64>,
    pub response_segments: u64,
    pub response_segment_median: Option<i64>,
    pub response_segment_max: Option<i64>,
    /// Kept for bulk responses only (what forward_chunk reads): (size, segments).
    pub response_segment_sizes: Option<Vec<(i64, u64)>>,
    /// Its moments as the receiver's reader had them, where they differ from the captured.
    pub delivered: Option<DeliveredRecord>,
    /// A bulk response's bytes over time.
    pub series: Option<Series>,
}

impl LegQuery {
    /// When the request reached the server's reader: time and frame.
    pub fn request_delivered(&self) -> (f64, u64) {
        match &self.delivered {
            Some(d) => (d.sent_s, d.sent_frame),
            None => (self.sent_s, self.sent_frame),
        }
    }

    /// When the first and the last response message reached the client's reader.
    pub fn response_delivered(&self) -> [Option<(f64, Option<u64>)>; 2] {
        match &self.delivered {
            Some(d) => [
                d.first_response_s.map(|t| (t, d.first_frame)),
                d.last_response_s.map(|t| (t, d.last_frame)),
            ],
            None => [
                self.first_response_s.map(|t| (t, self.first_frame)),
                self.last_response_s.map(|t| (t, self.last_frame)),
            ],
        }
    }

    pub fn of(q: &QueryRecord, series: Option<Box<Series>>) -> Self {
        LegQuery {
            series: series.map(|s| *s),
            sql: q.sql.clone(),
            rows: q.rows.clone(),
            response_bytes: q.response_bytes,
            sent_s: q.sent_s,
            first_response_s: q.first_response_s,
            last_response_s: q.last_response_s,
            sent_frame: q.sent_frame,
            first_frame: q.first_frame,
            last_frame: q.last_frame,
            response_segments: q.response_segments,
            response_segment_median: q.response_segment_median,
            response_segment_max: q.response_segment_max,
            response_segment_sizes: (q.response_segments >= BULK_SEGMENTS)
                .then(|| q.response_segment_sizes.0.clone()),
            delivered: q.delivered.0.as_deref().cloned(),
        }
    }
}

/// What matching reads of a query, held in memory for every query of every leg (48 bytes;
/// the rest of it is spooled).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MatchQuery {
    /// Its statement's key, as its number among the distinct keys (keys.rs): equal numbers,
    /// equal keys.
    pub key: u64,
    /// When the request's last byte was seen: capture time, then frame (they order equal
    /// times).
    pub sent: (f64, u64),
    /// When the first response byte was seen, the same way; never, when none was.
    pub answered: (f64, u64),
    pub response_bytes: u64,
}

impl MatchQuery {
    pub fn of(q: &LegQuery, key: u64) -> Self {
        MatchQuery {
            key,
            sent: (q.sent_s, q.sent_frame),
            answered: match q.first_response_s {
                Some(first) => (first, q.first_frame.unwrap_or(0)),
                None => (f64::INFINITY, 0),
            },
            response_bytes: q.response_bytes,
        }
    }
}

/// A PostgreSQL connection that can be a relay's leg, as matching reads it: held in memory
/// for every leg (its endpoints' addresses as their numbers among the distinct ones).
#[derive(Clone, Debug, PartialEq)]
pub struct LegHead {
    /// The connection's number (its id is "c<number>").
    pub number: u64,
    pub client: (usize, u16),
    pub server: (usize, u16),
    /// Its place in the order the legs came: where its detail waits.
    pub arrival: usize,
    /// Its queries' places among every leg's queries, in the order the legs came.
    pub queries: Range<usize>,
}

/// What a leg's server -> client direction says about the relay (windows, ACK cadence,
/// writes, Python's verdict): spooled, read back for the relays' legs.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LegDetail {
    pub zero_window_periods: u64,
    pub zero_window_total_s: f64,
    /// The frames of its verdict's evidence.
    pub evidence_frames: Vec<u64>,
    pub bytes_acked_median: Option<i64>,
    pub flight_bytes_median: Option<i64>,
    /// The sender's writes by size, the sizes carrying the most bytes (MIN_WRITE_UNIT and up).
    pub write_sizes: Vec<(i64, u64)>,
    /// What limited it, as judged, and where its time went (a judged transfer's only: a
    /// front leg's verdict may be judged again as the relay's, `RelayWords::front_verdicts`).
    pub limit: Limit,
    pub limits: Option<LimitsRecord>,
    /// A back leg's verdict when its receiver's window (the pooler's) limited it: the relay
    /// may judge whose the window was (`RelayWords::back_verdicts`).
    pub window_verdict: Option<Verdict>,
    /// The largest window the receiver advertised, in bytes; where the scale is unknown (no
    /// handshake in the capture), at least this many.
    pub window_ceiling: Option<i64>,
    pub payload_bytes: i64,
    /// When the client's window (the server -> client direction's receiver) was zero.
    pub zero_spans: Vec<(f64, f64)>,
}

impl LegDetail {
    /// The detail of a judged record that can be a relay's leg (PostgreSQL), with its
    /// queries; None for any other.
    pub fn of(
        record: &ConnectionRecord,
        extras: LegExtras,
    ) -> Option<(LegDetail, impl Iterator<Item = LegQuery> + '_)> {
        let pg = record.postgres.0.as_ref()?;
        if !pg.protocol.is_postgres() {
            return None;
        }
        let s2c = &record.directions.server_to_client;
        let t = s2c.transfer.0.as_ref();
        let detail = LegDetail {
            zero_window_periods: t.map_or(0, |t| t.window.zero_window_periods),
            zero_window_total_s: t.map_or(0.0, |t| t.window.zero_window_total_s),
            evidence_frames: t.map_or_else(Vec::new, |t| t.verdict.evidence_frames.clone()),
            bytes_acked_median: t.and_then(|t| t.acks.bytes_acked_median),
            flight_bytes_median: t.and_then(|t| t.flights.bytes_median),
            write_sizes: t.map_or_else(Vec::new, |t| {
                (t.writes.sizes_by_bytes.0.iter())
                    .filter(|(size, _)| *size >= MIN_WRITE_UNIT)
                    .copied()
                    .collect()
            }),
            limit: t.map_or(Limit::None, |t| t.verdict.limit),
            limits: t
                .filter(|t| t.verdict.limit != Limit::None)
                .map(|t| t.limits.clone()),
            window_verdict: t
                .filter(|t| t.verdict.limit == Limit::ReceiverWindow)
                .map(|t| t.verdict.clone()),
            window_ceiling: t.and_then(|t| {
                window_bytes(t.window.max, t.window.scaled, t.window.scale_lower_bound)
            }),
            payload_bytes: s2c.payload_bytes,
            zero_spans: extras.zero_spans,
        };
        let queries = (pg.queries.iter())
            .zip(
                extras
                    .series
                    .into_iter()
                    .chain(std::iter::repeat_with(|| None)),
            )
            .map(|(q, series)| LegQuery::of(q, series));
        Some((detail, queries))
    }
}

/// A leg's id in the report.
pub fn id(number: u64) -> String {
    format!("c{number}")
}

/// A statement as matching compares it: whitespace runs as one space (Python's
/// `" ".join(sql.split())`), trailing semicolons and the space before them dropped.
pub fn sql_key(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    for word in sql.split(py_space).filter(|w| !w.is_empty()) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    let trimmed = out.trim_end_matches(';').trim_matches(py_space);
    if trimmed.len() != out.len() {
        out = trimmed.to_string();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::sql_key;

    #[test]
    fn keys_as_python_wrote_them() {
        // " ".join(s.split()).rstrip(";").strip()
        for (sql, key) in [
            ("SELECT 1", "SELECT 1"),
            ("  SELECT\n\t1 ;; ", "SELECT 1"),
            ("BEGIN;", "BEGIN"),
            ("SET x = ';'", "SET x = ';'"),
            ("", ""),
            (";", ""),
            ("a\u{3000}b;", "a b"),
        ] {
            assert_eq!(sql_key(sql), key, "{sql:?}");
        }
    }
}
