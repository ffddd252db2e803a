//! A response's bytes over time, as a bounded list of (time, bytes so far) points: how a relay's
//! two legs carried the same response is read by setting one leg's points against the other's
//! (relay/forwarding.rs). Past MAX_POINTS every other point is dropped and the spacing doubles,
//! so a response of any length keeps at most that many, evenly spread over its segments.

use serde::{Deserialize, Serialize};

/// Points kept per response.
pub const MAX_POINTS: usize = 4096;

/// (Serialized only to wait in the relay stage's spool.)
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// (capture time, bytes of the response up to and including the segment), in order.
    points: Vec<(f64, u64)>,
    /// Every `stride`-th segment is kept (a power of two).
    stride: u64,
    /// Segments seen.
    seen: u64,
    /// Bytes so far.
    bytes: u64,
    /// The latest segment's time (the response's end, once it is done).
    last_ts: f64,
}

impl Default for Series {
    fn default() -> Self {
        Series::new()
    }
}

impl Series {
    pub fn new() -> Self {
        Series {
            points: Vec::new(),
            stride: 1,
            seen: 0,
            bytes: 0,
            last_ts: 0.0,
        }
    }

    /// A segment of `len` bytes of the response, at `ts`.
    pub fn add(&mut self, ts: f64, len: usize) {
        self.bytes += len as u64;
        self.seen += 1;
        self.last_ts = ts;
        if self.seen % self.stride != 0 {
            return;
        }
        if self.points.len() >= MAX_POINTS {
            let mut i = 0;
            self.points.retain(|_| {
                i += 1;
                i % 2 == 0
            });
            self.stride *= 2;
            if self.seen % self.stride != 0 {
                return;
            }
        }
        self.points.push((ts, self.bytes));
    }

    /// Bytes of the response the capture did not keep (cut by the snapshot length, or in a
    /// gap), at `ts`: counted with the point of that time when there is one.
    pub fn extend(&mut self, ts: f64, bytes: u64) {
        self.bytes += bytes;
        if let Some(last) = self.points.last_mut().filter(|p| p.0 == ts) {
            last.1 = self.bytes;
        }
    }

    /// The kept points, and the response's last segment after them when it was not kept.
    pub fn points(&self) -> Vec<(f64, u64)> {
        let mut out = self.points.clone();
        if self.seen > 0 && out.last().is_none_or(|&(_, b)| b < self.bytes) {
            out.push((self.last_ts, self.bytes));
        }
        out
    }

    /// Segments seen, and bytes carried.
    pub fn totals(&self) -> (u64, u64) {
        (self.seen, self.bytes)
    }
}

/// When the first `bytes` had been carried, as `points` (in order) tell: the time of the
/// first point at or past them (None past the last).
pub fn time_of(points: &[(f64, u64)], bytes: u64) -> Option<f64> {
    let i = points.partition_point(|&(_, b)| b < bytes);
    points.get(i).map(|&(t, _)| t)
}

/// The bytes carried by `ts`: those of the last point at or before it.
pub fn bytes_by(points: &[(f64, u64)], ts: f64) -> u64 {
    let i = points.partition_point(|&(t, _)| t <= ts);
    i.checked_sub(1)
        .and_then(|i| points.get(i))
        .map_or(0, |&(_, b)| b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_response_keeps_its_points_bounded_and_even() {
        let mut s = Series::new();
        for i in 0..100_000u64 {
            s.add(i as f64 * 1e-3, 1448);
        }
        let pts = s.points();
        assert!(
            pts.len() <= MAX_POINTS + 1 && pts.len() > MAX_POINTS / 2,
            "{}",
            pts.len()
        );
        assert_eq!(s.totals(), (100_000, 100_000 * 1448));
        assert_eq!(
            pts.last(),
            Some(&(99_999.0 * 1e-3, 100_000 * 1448)),
            "the end is always there"
        );
        // evenly spread: each kept point a stride of segments after the one before
        let kept = &pts[..pts.len() - 1];
        let steps: Vec<u64> = kept.windows(2).map(|w| (w[1].1 - w[0].1) / 1448).collect();
        assert!(steps.iter().all(|&k| k == steps[0]), "{steps:?}");
        assert_eq!(
            bytes_by(&pts, 50.0),
            pts.iter().rfind(|p| p.0 <= 50.0).unwrap().1
        );
        assert!(time_of(&pts, 1448 * 50_000).unwrap() >= 49.999);
    }
}
