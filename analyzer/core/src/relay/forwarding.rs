//! How a relay forwarded a response, from both legs' packets side by side: the same bytes
//! arrive on the back leg (from the server) and leave on the front leg (to the client), so
//! each leg's bytes over time (series.rs) can be set against the other's:
//! - each forwarded segment's delay after its back-leg twin: the time from the back leg
//!   carrying a byte to the front leg carrying it;
//! - the bytes the relay held, back-leg bytes in minus front-leg bytes out, over the
//!   response's time;
//! - which leg's receive window closed first while the response moved: the client's (the
//!   front leg's) or the relay's own (the back leg's).

use serde::{Deserialize, Serialize};

use super::legs::LegQuery;
use crate::report::numbers::round_to;
use crate::series::{bytes_by, time_of};

/// A response's forwarding, or many responses' together.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Forwarding {
    /// Responses measured.
    pub responses: u64,
    /// Each forwarded segment's delay after its back-leg twin (ms): median, 90th percentile,
    /// largest.
    pub delay_ms: Quantiles,
    /// The bytes the relay held, weighted by time: median, 90th percentile, largest.
    pub held_bytes: Quantiles,
    /// What "a few segments" is here: twice the back leg's median segment.
    pub few_segments_bytes: Option<i64>,
    /// How long the relay held more than that, and over how long the responses moved (s).
    pub held_over_few_s: f64,
    pub span_s: f64,
    /// Which window closed first while a response moved: "client" (the front leg's
    /// receiver) or "relay" (the relay's own, on the back leg); None when neither did.
    pub first_closed: Option<Side>,
    /// Responses in which each closed (at least once).
    pub client_closed: u64,
    pub relay_closed: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    Client,
    Relay,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Quantiles {
    pub median: Option<f64>,
    pub p90: Option<f64>,
    pub max: Option<f64>,
}

/// Values with their weights (a sample's, or the time a level held), as they are gathered.
#[derive(Default)]
struct Weighted(Vec<(f64, f64)>);

impl Weighted {
    fn add(&mut self, value: f64, weight: f64) {
        if weight > 0.0 && value.is_finite() {
            self.0.push((value, weight));
        }
    }

    fn quantiles(mut self, places: i32) -> Quantiles {
        self.0
            .sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
        let total: f64 = self.0.iter().map(|v| v.1).sum();
        let at = |q: f64| {
            let mut acc = 0.0;
            for &(v, w) in &self.0 {
                acc += w;
                if acc >= q * total {
                    return Some(round_to(v, places));
                }
            }
            self.0.last().map(|v| round_to(v.0, places))
        };
        Quantiles {
            median: at(0.5),
            p90: at(0.9),
            max: self.0.last().map(|v| round_to(v.0, places)),
        }
    }
}

/// When a leg's window first closed within [from, to] (capture times).
fn first_zero(spans: &[(f64, f64)], from: f64, to: f64) -> Option<f64> {
    (spans.iter())
        .filter(|&&(a, b)| b >= from && a <= to)
        .map(|&(a, _)| a.max(from))
        .reduce(f64::min)
}

/// Gathers the matched pairs of one relay.
#[derive(Default)]
pub struct Gathered {
    responses: u64,
    delays: Weighted,
    held: Weighted,
    over_few: f64,
    span: f64,
    segments: Vec<i64>,
    first: Option<(f64, Side)>,
    client_closed: u64,
    relay_closed: u64,
}

impl Gathered {
    /// Whether a matched pair is measured: when both legs kept its response's bytes over
    /// time.
    pub fn measures(fq: &LegQuery, bq: &LegQuery) -> bool {
        fq.series.is_some() && bq.series.is_some()
    }

    /// A matched pair (front query, back query), with when each leg's client window was
    /// zero.
    pub fn add(
        &mut self,
        (fq, front_zero): (&LegQuery, &[(f64, f64)]),
        (bq, back_zero): (&LegQuery, &[(f64, f64)]),
    ) {
        let (Some(fs), Some(bs)) = (&fq.series, &bq.series) else {
            return;
        };
        let (fp, bp) = (fs.points(), bs.points());
        let (Some(&(start, _)), Some(&(end, _))) = (bp.first(), fp.last()) else {
            return;
        };
        self.responses += 1;
        if let Some(m) = bq.response_segment_median {
            self.segments.push(m);
        }
        let few = bq
            .response_segment_median
            .map_or(f64::INFINITY, |m| 2.0 * m as f64);
        // each front point's bytes, and when the back leg had carried them
        for &(t, bytes) in &fp {
            if let Some(arrived) = time_of(&bp, bytes) {
                self.delays.add((t - arrived).max(0.0) * 1e3, 1.0);
            }
        }
        // the bytes held, a step function changing at every point of either leg
        let mut times: Vec<f64> = fp.iter().chain(&bp).map(|p| p.0).collect();
        times.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        times.dedup();
        for w in times.windows(2) {
            let (t0, t1) = (w[0], w[1]);
            if t0 < start || t1 > end {
                continue;
            }
            let held = bytes_by(&bp, t0).saturating_sub(bytes_by(&fp, t0)) as f64;
            self.held.add(held, t1 - t0);
            if held > few {
                self.over_few += t1 - t0;
            }
        }
        self.span += (end - start).max(0.0);
        let client = first_zero(front_zero, start, end);
        let relay = first_zero(back_zero, start, end);
        self.client_closed += u64::from(client.is_some());
        self.relay_closed += u64::from(relay.is_some());
        let first = match (client, relay) {
            (Some(c), Some(r)) if r < c => Some((r, Side::Relay)),
            (Some(c), _) => Some((c, Side::Client)),
            (None, Some(r)) => Some((r, Side::Relay)),
            (None, None) => None,
        };
        if let Some((t, side)) = first {
            if self.first.is_none_or(|(f, _)| t < f) {
                self.first = Some((t, side));
            }
        }
    }

    pub fn facts(mut self) -> Forwarding {
        self.segments.sort_unstable();
        let segment = self.segments.get(self.segments.len() / 2).copied();
        Forwarding {
            responses: self.responses,
            delay_ms: self.delays.quantiles(3),
            held_bytes: self.held.quantiles(0),
            few_segments_bytes: segment.map(|m| 2 * m),
            held_over_few_s: round_to(self.over_few, 6),
            span_s: round_to(self.span, 6),
            first_closed: self.first.map(|(_, side)| side),
            client_closed: self.client_closed,
            relay_closed: self.relay_closed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::legs::LegQuery;
    use crate::series::Series;

    fn query(points: &[(f64, usize)]) -> LegQuery {
        let mut series = Series::new();
        for &(t, n) in points {
            series.add(t, n);
        }
        LegQuery {
            sql: "SELECT".into(),
            rows: None,
            response_bytes: 10_000,
            sent_s: 0.0,
            first_response_s: Some(0.0),
            last_response_s: Some(10.0),
            sent_frame: 1,
            first_frame: Some(2),
            last_frame: Some(3),
            response_segments: points.len() as u64,
            response_segment_median: Some(1000),
            response_segment_max: Some(1000),
            response_segment_sizes: None,
            delivered: None,
            series: Some(series),
        }
    }

    #[test]
    fn delays_held_bytes_and_the_first_window_closed() {
        // the server's 1,000-byte segments a second apart, each forwarded half a second later;
        // the client's window shut at 4 s, the relay's at 6 s
        let back: Vec<(f64, usize)> = (0..10).map(|i| (i as f64, 1000)).collect();
        let front: Vec<(f64, usize)> = (0..10).map(|i| (i as f64 + 0.5, 1000)).collect();
        let (fq, bq) = (query(&front), query(&back));
        let mut g = Gathered::default();
        g.add((&fq, &[(4.0, 4.2)]), (&bq, &[(6.0, 6.1)]));
        let f = g.facts();
        assert_eq!(f.responses, 1);
        assert_eq!(f.delay_ms.median, Some(500.0));
        assert_eq!(f.delay_ms.max, Some(500.0));
        // from 0 to 9.5 s: a segment held for the first half of each second (5 s in all),
        // none for the second half (4.5 s): the median is the segment
        assert_eq!(f.held_bytes.median, Some(1000.0));
        assert_eq!(f.held_bytes.max, Some(1000.0));
        assert_eq!(f.span_s, 9.5);
        assert_eq!(f.held_over_few_s, 0.0); // never more than two segments
        assert_eq!(f.first_closed, Some(Side::Client));
        assert_eq!((f.client_closed, f.relay_closed), (1, 1));
    }

    #[test]
    fn a_pair_without_both_series_is_not_measured() {
        let back: Vec<(f64, usize)> = vec![(0.0, 10)];
        let (mut fq, bq) = (query(&back), query(&back));
        fq.series = None;
        assert!(!Gathered::measures(&fq, &bq));
        let mut g = Gathered::default();
        g.add((&fq, &[]), (&bq, &[]));
        assert_eq!(g.facts(), Forwarding::default());
    }
}
