//! Counts of integer values in bounded memory (ported from transfer/histogram.py).
//!
//! Stand-in written on the pgwire branch with the API the transfer port provides
//! (`new`, `add`, `median`, `quantile`, `values`): replaced by port-transfer's module.

use std::collections::HashMap;

/// Distinct values kept exactly by default.
pub const DEFAULT_CAP: usize = 4096;

/// Past `cap` distinct values, new values are rounded to 4 significant bits.
fn coarse(v: i64) -> i64 {
    if v < 16 {
        return v;
    }
    let bits = 64 - v.leading_zeros() as i64;
    let shift = bits - 4;
    (v >> shift) << shift
}

/// Counts by value, exact up to `cap` distinct values. Values repeat in runs (segment
/// sizes), so the current run is counted apart and reaches the counts when the value changes.
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Vec<(i64, u64)>, // in first-counted order
    index: HashMap<i64, usize>,
    cap: usize,
    last: i64,
    run: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl Histogram {
    pub fn new() -> Self {
        Self::with_cap(DEFAULT_CAP)
    }

    pub fn with_cap(cap: usize) -> Self {
        Histogram {
            counts: Vec::new(),
            index: HashMap::new(),
            cap,
            last: -1,
            run: 0,
        }
    }

    pub fn add(&mut self, v: i64) {
        if v == self.last {
            self.run += 1;
            return;
        }
        if self.run > 0 {
            self.put(self.last, self.run);
        }
        self.last = v;
        self.run = 1;
    }

    fn put(&mut self, v: i64, k: u64) {
        if let Some(&i) = self.index.get(&v) {
            if let Some(e) = self.counts.get_mut(i) {
                e.1 += k;
            }
            return;
        }
        let key = if self.counts.len() < self.cap {
            v
        } else {
            coarse(v)
        };
        match self.index.get(&key) {
            Some(&i) => {
                if let Some(e) = self.counts.get_mut(i) {
                    e.1 += k;
                }
            }
            None => {
                self.index.insert(key, self.counts.len());
                self.counts.push((key, k));
            }
        }
    }

    /// (value, count) in first-counted order, the current run included.
    fn counted(&self) -> Vec<(i64, u64)> {
        let mut out = self.counts.clone();
        if self.run > 0 {
            let mut h = Histogram {
                counts: out,
                index: self.index.clone(),
                cap: self.cap,
                last: -1,
                run: 0,
            };
            h.put(self.last, self.run);
            out = h.counts;
        }
        out
    }

    /// (value, count) in increasing order of value.
    pub fn values(&self) -> Vec<(i64, u64)> {
        let mut v = self.counted();
        v.sort_unstable();
        v
    }

    pub fn n(&self) -> u64 {
        self.counts.iter().map(|e| e.1).sum::<u64>() + self.run
    }

    pub fn hi(&self) -> Option<i64> {
        self.counted().iter().map(|e| e.0).max()
    }

    /// The first value whose cumulative count passes q * (n - 1).
    pub fn quantile(&self, q: f64) -> Option<i64> {
        let seen = self.values();
        if seen.len() == 1 {
            return seen.first().map(|e| e.0);
        }
        let n: u64 = seen.iter().map(|e| e.1).sum();
        let target = q * (n as f64 - 1.0);
        let mut total = 0u64;
        for &(v, c) in &seen {
            total += c;
            if total as f64 > target {
                return Some(v);
            }
        }
        seen.last().map(|e| e.0)
    }

    pub fn median(&self) -> Option<i64> {
        self.quantile(0.5)
    }

    /// The k most frequent values with their counts, largest count first (then value).
    pub fn top(&self, k: usize) -> Vec<(i64, u64)> {
        let mut v = self.counted();
        v.sort_unstable_by_key(|&(value, count)| (std::cmp::Reverse(count), value));
        v.truncate(k);
        v
    }
}
