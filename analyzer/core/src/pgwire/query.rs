//! One query's journey: request, response messages and bytes, timing, and the frames.
//!
//! Kept compactly: a connection lists up to MAX_QUERIES of them for its whole life.

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::conversation::BULK_SEGMENTS;
use super::facts::ServerMessage;
use super::messages::command_rows;
use super::segments::SegmentSizes;
use crate::series::Series;

/// SQL kept per query (in characters, as the reference counts them); longer text is cut and
/// marked.
pub const SQL_CAP: usize = 64 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueryKind {
    Simple,
    Extended,
    Copy,
    Function,
}

/// A row count from command tags: their numbers have no bound, so past 64 bits the sum is
/// kept as decimal digits (serialized as a string).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RowCount {
    Small(u64),
    Big(Box<str>),
}

/// In JSON a number, or a string of digits past 64 bits; in a binary spool (not
/// self-describing) a tagged value, so that it reads back.
impl Serialize for RowCount {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match (self, s.is_human_readable()) {
            (RowCount::Small(n), true) => s.serialize_u64(*n),
            (RowCount::Big(digits), true) => s.serialize_str(digits),
            (RowCount::Small(n), false) => Spooled::<&str>::Small(*n).serialize(s),
            (RowCount::Big(digits), false) => Spooled::Big(digits).serialize(s),
        }
    }
}

#[derive(Serialize, Deserialize)]
enum Spooled<S> {
    Small(u64),
    Big(S),
}

impl<'de> Deserialize<'de> for RowCount {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            #[derive(Deserialize)]
            #[serde(untagged)]
            enum Json {
                Small(u64),
                Big(String),
            }
            return Ok(match Json::deserialize(d)? {
                Json::Small(n) => RowCount::Small(n),
                Json::Big(digits) => RowCount::Big(digits.into()),
            });
        }
        Ok(match Spooled::<String>::deserialize(d)? {
            Spooled::Small(n) => RowCount::Small(n),
            Spooled::Big(digits) => RowCount::Big(digits.into()),
        })
    }
}

impl RowCount {
    /// A count from ASCII digits (leading zeros allowed).
    pub fn parse(digits: &str) -> RowCount {
        let trimmed = digits.trim_start_matches('0');
        match trimmed.parse::<u64>() {
            Ok(n) => RowCount::Small(n),
            Err(_) if trimmed.is_empty() => RowCount::Small(0),
            Err(_) => RowCount::Big(trimmed.into()),
        }
    }

    fn digits(&self) -> String {
        match self {
            RowCount::Small(n) => n.to_string(),
            RowCount::Big(d) => d.to_string(),
        }
    }

    pub fn add(&self, other: &RowCount) -> RowCount {
        if let (RowCount::Small(a), RowCount::Small(b)) = (self, other) {
            if let Some(sum) = a.checked_add(*b) {
                return RowCount::Small(sum);
            }
        }
        // schoolbook addition of the decimal digits
        let (a, b) = (self.digits(), other.digits());
        let (a, b) = (a.as_bytes(), b.as_bytes());
        let mut out = Vec::with_capacity(a.len().max(b.len()) + 1);
        let mut carry = 0u8;
        let mut i = 0;
        while i < a.len() || i < b.len() || carry > 0 {
            let da = a
                .len()
                .checked_sub(i + 1)
                .and_then(|k| a.get(k))
                .map_or(0, |c| c - b'0');
            let db = b
                .len()
                .checked_sub(i + 1)
                .and_then(|k| b.get(k))
                .map_or(0, |c| c - b'0');
            let s = da + db + carry;
            out.push(b'0' + s % 10);
            carry = s / 10;
            i += 1;
        }
        out.reverse();
        RowCount::parse(&String::from_utf8_lossy(&out))
    }
}

/// Rows summed over a query's command tags, kept in 16 bytes (the digits only past 64 bits).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum TagRows {
    #[default]
    None,
    Small(u64),
    Big(Box<String>),
}

impl TagRows {
    fn get(&self) -> Option<RowCount> {
        match self {
            TagRows::None => None,
            TagRows::Small(n) => Some(RowCount::Small(*n)),
            TagRows::Big(d) => Some(RowCount::Big(d.as_str().into())),
        }
    }

    fn set(&mut self, rows: RowCount) {
        *self = match rows {
            RowCount::Small(n) => TagRows::Small(n),
            RowCount::Big(d) => TagRows::Big(Box::new(d.into())),
        };
    }
}

/// The frame and time of a request's last byte, or a response's first or last message, and
/// where that message ends in its direction's stream.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Moment {
    pub ts: f64,
    pub frame: u64,
    /// The stream offset just past the message's last byte.
    pub end: i64,
}

impl Moment {
    /// Bytes [lo, hi) arrived again at `ts`, with `frame`: a message whose last byte they
    /// hold arrived then, if not before.
    fn redate(&mut self, lo: i64, hi: i64, frame: u64, ts: f64) {
        if lo < self.end && self.end <= hi && ts > self.ts {
            self.ts = ts;
            self.frame = frame;
        }
    }
}

/// Notices a query keeps one by one; the rest are counted.
pub const MAX_QUERY_NOTICES: usize = 8;
/// Column names a query keeps of its result's RowDescription; the rest are counted.
pub const MAX_COLUMN_NAMES: usize = 64;

/// What only some queries have, kept apart so that a query without them stays small: its
/// error, its notices, the shape of its result.
#[derive(Clone, Debug, Default)]
pub struct QueryExtra {
    pub error: Option<Box<ServerMessage>>,
    pub notices: Vec<ServerMessage>,
    pub notices_total: u64,
    /// The first RowDescription's column names (the first MAX_COLUMN_NAMES), NUL-separated:
    /// one text a repeated statement's queries share.
    pub columns: Option<Arc<str>>,
    pub column_count: Option<u16>,
    /// Its moments as the receiver's reader had them, where a copy the capture saw of its
    /// bytes was lost past the capture point (a later one carried them).
    pub delivered: Option<Delivered>,
}

/// A query's three moments as delivered (the first and last valid once it was answered).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Delivered {
    pub sent: Moment,
    pub first: Moment,
    pub last: Moment,
}

/// A query as a connection keeps it for its report (about 200 bytes and its SQL, which an
/// extended query shares with its prepared statement).
#[derive(Clone, Debug)]
pub struct Query {
    pub sql: Arc<str>,
    pub tag: Option<Arc<str>>,
    pub tags_rows: TagRows,
    pub data_rows: u64,
    pub copy_data: u64,
    pub resp_bytes: u64,
    pub resp_msgs: u64,
    /// The frame carrying the request's last byte.
    pub sent: Moment,
    first: Moment, // valid once responded
    last: Moment,
    /// Bytes of its DataRows' bodies (each message's length less its length field).
    pub data_row_bytes: u64,
    pub extra: Option<Box<QueryExtra>>,
    /// Gaps counted when the query joined the pending queue.
    pub gaps_at: u64,
    /// Sizes of the backend's segments while this query was the one being answered: how the
    /// response was carried, which a relay changes (re-segmentation).
    pub segments: SegmentSizes,
    /// Its bytes over time, segment by segment (for a relay's legs, set against each other).
    pub series: Option<Box<Series>>,
    pub kind: QueryKind,
    pub sql_truncated: bool,
    pub done: bool,
    /// A capture gap hid part of the response (read with the gap count while pending).
    pub incomplete: bool,
    pub in_pending: bool,
    responded: bool,
}

/// `sql[:SQL_CAP]` in characters, and whether it was longer.
pub fn cap_sql(sql: &str) -> (&str, bool) {
    match sql.char_indices().nth(SQL_CAP) {
        Some((at, _)) => (sql.get(..at).unwrap_or(sql), true),
        None => (sql, false),
    }
}

impl Query {
    pub fn new(sql: Arc<str>, kind: QueryKind, sent: Moment) -> Query {
        let (sql, sql_truncated) = match cap_sql(&sql) {
            (cut, true) => (Arc::from(cut), true),
            (_, false) => (sql, false),
        };
        Query {
            sql,
            tag: None,
            tags_rows: TagRows::None,
            data_rows: 0,
            copy_data: 0,
            resp_bytes: 0,
            resp_msgs: 0,
            sent,
            first: Moment::default(),
            last: Moment::default(),
            data_row_bytes: 0,
            extra: None,
            gaps_at: 0,
            segments: SegmentSizes::default(),
            series: None,
            kind,
            sql_truncated,
            done: false,
            incomplete: false,
            in_pending: false,
            responded: false,
        }
    }

    /// The query is answered (or given up on). A response of fewer than BULK_SEGMENTS
    /// segments is no bulk one: its series would be dropped when the connection is reported,
    /// and a long session lists thousands of such queries meanwhile.
    pub fn finish(&mut self) {
        self.done = true;
        if (self.series.as_ref()).is_some_and(|s| s.totals().0 < BULK_SEGMENTS) {
            self.series = None;
        }
    }

    pub fn extra(&mut self) -> &mut QueryExtra {
        self.extra.get_or_insert_with(Box::default)
    }

    pub fn error(&self) -> Option<&ServerMessage> {
        self.extra.as_ref()?.error.as_deref()
    }

    pub fn first(&self) -> Option<Moment> {
        self.responded.then_some(self.first)
    }

    pub fn last(&self) -> Option<Moment> {
        self.responded.then_some(self.last)
    }

    /// Response messages came, the first of them ending at `first_end` (a run of rows is
    /// counted at once), the last at `now`.
    pub fn respond(&mut self, nbytes: u64, nmsgs: u64, first_end: i64, now: Moment) {
        let answered = self.responded;
        if !answered {
            self.responded = true;
            self.first = Moment {
                end: first_end,
                ..now
            };
        }
        self.resp_bytes = self.resp_bytes.saturating_add(nbytes);
        self.resp_msgs = self.resp_msgs.saturating_add(nmsgs);
        self.last = now;
        if let Some(at) = self.extra.as_mut().and_then(|x| x.delivered.as_mut()) {
            if !answered {
                (at.first, at.last) = (self.first, now);
            } else if now.ts >= at.last.ts {
                at.last = now;
            } else {
                // bytes after ones that came late reach the reader no sooner than they did
                at.last.end = now.end;
            }
        }
    }

    /// Bytes [lo, hi) of the request's direction (`response` false) or of the response's
    /// reached the receiver's reader only with `frame`, at `ts`: the moments they end are
    /// delivered then (the captured ones stay). Whether a query before this one can still
    /// have a moment in them.
    pub fn redate(&mut self, response: bool, lo: i64, hi: i64, frame: u64, ts: f64) -> bool {
        if response && !self.responded {
            return true;
        }
        let was = self.delivered();
        let mut at = was;
        if response {
            at.first.redate(lo, hi, frame, ts);
            at.last.redate(lo, hi, frame, ts);
        } else {
            at.sent.redate(lo, hi, frame, ts);
        }
        if at != was {
            self.extra().delivered = Some(at);
        }
        if response {
            self.first.end > lo
        } else {
            self.sent.end > lo
        }
    }

    /// When the receiver's reader could have the request and the response: as captured,
    /// unless a copy the capture saw was lost past it.
    pub fn delivered(&self) -> Delivered {
        (self.extra.as_ref().and_then(|x| x.delivered)).unwrap_or(Delivered {
            sent: self.sent,
            first: self.first,
            last: self.last,
        })
    }

    pub fn command_complete(&mut self, tag: Arc<str>) {
        if let Some(digits) = command_rows(&tag) {
            let rows = RowCount::parse(digits);
            let sum = match self.tags_rows.get() {
                Some(sum) => sum.add(&rows),
                None => rows,
            };
            self.tags_rows.set(sum);
        }
        self.tag = Some(tag);
    }

    /// Rows from the tags, else the DataRows counted (unless a gap or the capture's end cut
    /// the response: then they are only a lower bound), else 0 when a tag came, else unknown.
    pub fn rows(&self) -> Option<RowCount> {
        if let Some(r) = self.tags_rows.get() {
            return Some(r);
        }
        if self.incomplete {
            return None;
        }
        if self.data_rows > 0 {
            return Some(RowCount::Small(self.data_rows));
        }
        self.tag
            .as_ref()
            .filter(|t| !t.is_empty())
            .map(|_| RowCount::Small(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_counts_past_64_bits() {
        let big = RowCount::parse(&(1u64 << 62).to_string());
        let mut sum = big.clone();
        for _ in 0..4 {
            sum = sum.add(&big);
        }
        assert_eq!(sum, RowCount::Big("23058430092136939520".into()));
        assert_eq!(RowCount::parse("0005"), RowCount::Small(5));
        assert_eq!(RowCount::parse("000"), RowCount::Small(0));
        assert_eq!(
            RowCount::parse("99999999999999999999999999").add(&RowCount::Small(1)),
            RowCount::Big("100000000000000000000000000".into())
        );
        assert_eq!(
            RowCount::parse("000000000000000000000000000012"),
            RowCount::Small(12)
        );
    }

    #[test]
    fn sql_cap_counts_characters() {
        let s: String = "é".repeat(SQL_CAP + 1);
        let q = Query::new(Arc::from(s.as_str()), QueryKind::Simple, Moment::default());
        assert!(q.sql_truncated && q.sql.chars().count() == SQL_CAP);
        let s: String = "é".repeat(SQL_CAP);
        assert!(
            !Query::new(Arc::from(s.as_str()), QueryKind::Simple, Moment::default()).sql_truncated
        );
    }

    #[test]
    fn rows_rule() {
        let mut q = Query::new(Arc::from("q"), QueryKind::Simple, Moment::default());
        assert_eq!(q.rows(), None);
        q.command_complete(Arc::from(""));
        assert_eq!(q.rows(), None);
        q.command_complete(Arc::from("CREATE TABLE"));
        assert_eq!(q.rows(), Some(RowCount::Small(0)));
        q.data_rows = 3;
        assert_eq!(q.rows(), Some(RowCount::Small(3)));
        q.command_complete(Arc::from("SELECT 2"));
        q.command_complete(Arc::from("SELECT 5"));
        assert_eq!(q.rows(), Some(RowCount::Small(7)));
    }
}
