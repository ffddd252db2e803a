//! The legs the relay stage keeps while the pass runs: what matching reads in memory (a head
//! per leg, a MatchQuery per query, addresses and statements by number), the rest spooled
//! (legs.rs). A storm of 80,000 two-query connections holds about 150 bytes a leg.

use std::collections::HashMap;

use serde::de::DeserializeOwned;

use super::keys::SqlKeys;
use super::legs::{sql_key, LegDetail, LegExtras, LegHead, LegQuery, MatchQuery};
use super::matching::QueryRef;
use crate::report::spool::{self, Spool, SpoolError};
use crate::report::{ConnectionRecord, ReportError};

#[derive(Default)]
pub struct Legs {
    heads: Vec<LegHead>,
    /// Every leg's queries, in the order the legs came.
    queries: Vec<MatchQuery>,
    /// Each distinct address, by its number.
    ips: Vec<Box<str>>,
    ip_numbers: HashMap<Box<str>, usize>,
    keys: SqlKeys,
    /// A LegDetail per leg and a LegQuery per query, in the order they came.
    details: Spool,
    queries_spooled: Spool,
    scratch: Vec<u8>,
}

fn encode<T: serde::Serialize>(value: &T, scratch: &mut Vec<u8>) -> Result<(), SpoolError> {
    scratch.clear();
    // the types all serialize; a failure here would be a bug, said as an I/O one
    let bytes = postcard::to_extend(value, std::mem::take(scratch)).map_err(|e| SpoolError {
        dir: std::env::temp_dir(),
        error: std::io::Error::other(e.to_string()),
    })?;
    *scratch = bytes;
    Ok(())
}

impl Legs {
    /// Keep what a judged connection can tell as a relay's leg (nothing for one that is not
    /// PostgreSQL).
    pub fn add(
        &mut self,
        record: &ConnectionRecord,
        number: u64,
        extras: LegExtras,
    ) -> Result<(), SpoolError> {
        let Some((detail, queries)) = LegDetail::of(record, extras) else {
            return Ok(());
        };
        let client = (record.client.ip.as_str(), record.client.port);
        let server = (record.server.ip.as_str(), record.server.port);
        self.push(number, client, server, &detail, queries)
    }

    /// A leg: its number, endpoints, detail and queries.
    pub fn push(
        &mut self,
        number: u64,
        client: (&str, u16),
        server: (&str, u16),
        detail: &LegDetail,
        queries: impl Iterator<Item = LegQuery>,
    ) -> Result<(), SpoolError> {
        let first = self.queries.len();
        for q in queries {
            let key = self.keys.number(&sql_key(&q.sql))?;
            encode(&q, &mut self.scratch)?;
            self.queries_spooled.push(&self.scratch)?;
            crate::grow::push(&mut self.queries, MatchQuery::of(&q, key));
        }
        encode(detail, &mut self.scratch)?;
        self.details.push(&self.scratch)?;
        let head = LegHead {
            number,
            client: (self.ip(client.0), client.1),
            server: (self.ip(server.0), server.1),
            arrival: self.heads.len(),
            queries: first..self.queries.len(),
        };
        crate::grow::push(&mut self.heads, head);
        Ok(())
    }

    fn ip(&mut self, ip: &str) -> usize {
        if let Some(&n) = self.ip_numbers.get(ip) {
            return n;
        }
        let n = self.ips.len();
        self.ips.push(ip.into());
        self.ip_numbers.insert(ip.into(), n);
        n
    }

    /// Connections retire in any order; matching reads the legs in the order they opened.
    pub fn sort(&mut self) {
        self.heads.sort_by_key(|h| h.number);
    }

    pub fn len(&self) -> usize {
        self.heads.len()
    }

    /// Queries held, each leg counting one at least (what bounds a followed stream's).
    pub fn held(&self) -> usize {
        self.queries.len() + self.heads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heads.is_empty()
    }

    /// The leg at place `l`.
    pub fn head(&self, l: usize) -> &LegHead {
        &self.heads[l]
    }

    /// Its queries.
    pub fn queries(&self, l: usize) -> &[MatchQuery] {
        &self.queries[self.heads[l].queries.clone()]
    }

    pub fn query(&self, (l, q): QueryRef) -> &MatchQuery {
        &self.queries(l)[q]
    }

    /// Address number `n`.
    pub fn address(&self, n: usize) -> &str {
        self.ips.get(n).map_or("", |ip| ip)
    }

    /// Reads legs' details and queries back.
    pub fn reader(&self) -> Reader<'_> {
        Reader {
            legs: self,
            details: self.details.reader(),
            queries: self.queries_spooled.reader(),
            buf: Vec::new(),
        }
    }
}

pub struct Reader<'a> {
    legs: &'a Legs,
    details: spool::Reader<'a>,
    queries: spool::Reader<'a>,
    buf: Vec<u8>,
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ReportError> {
    postcard::from_bytes(bytes).map_err(|e| ReportError::Decode(e.to_string()))
}

impl Reader<'_> {
    /// Query `r` whole.
    pub fn query(&mut self, (l, q): QueryRef) -> Result<LegQuery, ReportError> {
        let at = self.legs.heads[l].queries.start + q;
        self.queries.read(at, &mut self.buf)?;
        decode(&self.buf)
    }

    /// The detail of the leg at place `l`.
    pub fn leg(&mut self, l: usize) -> Result<LegDetail, ReportError> {
        self.details
            .read(self.legs.heads[l].arrival, &mut self.buf)?;
        decode(&self.buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::values::Digits;
    use crate::series::Series;

    fn query(sql: &str, sent: f64, frame: u64, bulk: bool) -> LegQuery {
        let mut series = Series::new();
        series.add(sent + 0.1, 1448);
        LegQuery {
            sql: sql.into(),
            rows: Some(Digits("1".into())),
            response_bytes: 1448,
            sent_s: sent,
            first_response_s: bulk.then_some(sent + 0.1),
            last_response_s: bulk.then_some(sent + 0.2),
            sent_frame: frame,
            first_frame: bulk.then_some(frame + 1),
            last_frame: bulk.then_some(frame + 2),
            response_segments: 1,
            response_segment_median: Some(1448),
            response_segment_max: None,
            response_segment_sizes: bulk.then(|| vec![(1448, 1)]),
            delivered: None,
            series: bulk.then_some(series),
        }
    }

    #[test]
    fn legs_read_back_in_the_order_they_opened() {
        let mut legs = Legs::default();
        let detail = |n: u64| LegDetail {
            payload_bytes: n as i64,
            evidence_frames: vec![n],
            zero_spans: vec![(n as f64, n as f64 + 1.0)],
            ..LegDetail::default()
        };
        // retired out of order; a statement repeated, one of its own
        let all: Vec<(u64, Vec<LegQuery>)> = vec![
            (
                3,
                vec![
                    query("SELECT 1;", 3.0, 30, true),
                    query("END", 3.5, 35, false),
                ],
            ),
            (1, vec![query("SELECT  1", 1.0, 10, false)]),
            (2, vec![]),
        ];
        for (n, qs) in &all {
            let client = format!("10.0.0.{n}");
            legs.push(
                *n,
                (&client, 40000),
                ("10.0.0.9", 6432),
                &detail(*n),
                qs.iter().cloned(),
            )
            .unwrap();
        }
        legs.sort();
        assert_eq!(
            (0..3).map(|l| legs.head(l).number).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert_eq!(legs.address(legs.head(2).client.0), "10.0.0.3");
        assert_eq!(legs.head(0).server.0, legs.head(2).server.0);
        // "SELECT 1;" and "SELECT  1" are one statement
        assert_eq!(legs.query((0, 0)).key, legs.query((2, 0)).key);
        assert_ne!(legs.query((2, 0)).key, legs.query((2, 1)).key);
        assert_eq!(legs.query((0, 0)).answered, (f64::INFINITY, 0));
        assert_eq!(legs.query((2, 0)).answered, (3.1, 31));
        let mut read = legs.reader();
        for (l, n) in [(2, 3u64), (0, 1), (1, 2)] {
            let d = read.leg(l).unwrap();
            assert_eq!((d.payload_bytes, d.evidence_frames), (n as i64, vec![n]));
            let qs = &all.iter().find(|(m, _)| *m == n).unwrap().1;
            for (i, q) in qs.iter().enumerate() {
                let back = read.query((l, i)).unwrap();
                assert_eq!(
                    (back.sql, back.series, back.response_segment_sizes),
                    (
                        q.sql.clone(),
                        q.series.clone(),
                        q.response_segment_sizes.clone()
                    )
                );
            }
        }
    }
}
