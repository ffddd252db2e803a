//! Counts of integer values in bounded memory (ported from transfer/histogram.py, whose
//! rules are kept exactly: the report prints what these answer).
//!
//! `Histogram`: bytes per ACK or segment sizes take a handful of distinct values, so counts
//! stay exact and the most frequent values can be listed. Past `cap` distinct values, new
//! values are rounded to 4 significant bits (under 7 % error), which bounds the number of
//! keys whatever the capture's length.
//!
//! `Quantiles`: for wide distributions read only through quantiles (bytes in flight, RTTs),
//! exact counts while values are few, then log-linear buckets: a few kilobytes where a
//! Histogram would hold thousands of keys.
//!
//! `Bins`: counts by a small non-negative index (bytes per 100 ms of a flow), kept in a map
//! while few indexes have counts and in an array once they are dense.
//!
//! Values repeat in runs (segment sizes, bytes per ACK), so `add` counts the current run in
//! two integers and reaches the counts only when the value changes. Reads take `&self`: they
//! see the pending run as if it had been counted, which is what the reference's reads (that
//! flush it) answer, and flushing early or late changes neither the counts nor the order in
//! which keys were first counted.

use std::borrow::Cow;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};

/// Rounded to 4 significant bits (values under 16 stay).
fn coarse(v: i64) -> i64 {
    if v < 16 {
        return v;
    }
    let shift = bit_length(v) - 4;
    (v >> shift) << shift
}

fn bit_length(v: i64) -> u32 {
    64 - v.unsigned_abs().leading_zeros()
}

/// The first value of `seen` ((value, count) in increasing order of value) whose cumulative
/// count passes q * (n - 1); None when `seen` is empty.
fn quantile_of(seen: &[(i64, u64)], q: f64) -> Option<i64> {
    let n: u64 = seen.iter().map(|&(_, c)| c).sum();
    let target = q * (n as f64 - 1.0);
    let mut total = 0u64;
    for &(v, c) in seen {
        total += c;
        if total as f64 > target {
            return Some(v);
        }
    }
    seen.last().map(|&(v, _)| v)
}

/// The run not yet counted: its value and its length (0: no run; a value of -1 then extends
/// it correctly, as in the reference).
#[derive(Clone, Debug)]
struct Run {
    last: i64,
    len: u64,
}

impl Default for Run {
    fn default() -> Self {
        Run { last: -1, len: 0 }
    }
}

impl Run {
    /// Counts v; returns the run it ended (value, length), which the caller must count.
    fn add(&mut self, v: i64) -> Option<(i64, u64)> {
        if v == self.last {
            self.len += 1;
            return None;
        }
        let ended = (self.len > 0).then_some((self.last, self.len));
        self.last = v;
        self.len = 1;
        ended
    }

    fn take(&mut self) -> Option<(i64, u64)> {
        let run = (self.len > 0).then_some((self.last, self.len));
        *self = Run::default();
        run
    }
}

/// Counts by value, exact up to `cap` distinct values, keys in the order first counted.
#[derive(Clone, Debug)]
pub struct Histogram {
    run: Run,
    /// (value, count) in the order the values were first counted.
    keys: Vec<(i64, u64)>,
    index: HashMap<i64, usize>,
    cap: usize,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new(4096)
    }
}

impl Histogram {
    pub fn new(cap: usize) -> Self {
        Histogram {
            run: Run::default(),
            keys: Vec::new(),
            index: HashMap::new(),
            cap,
        }
    }

    pub fn add(&mut self, v: i64) {
        if let Some((v, k)) = self.run.add(v) {
            self.put(v, k);
        }
    }

    fn put(&mut self, v: i64, k: u64) {
        let key = if self.index.contains_key(&v) || self.keys.len() < self.cap {
            v
        } else {
            coarse(v)
        };
        match self.index.get(&key) {
            Some(&i) => {
                if let Some(e) = self.keys.get_mut(i) {
                    e.1 += k;
                }
            }
            None => {
                self.index.insert(key, self.keys.len());
                self.keys.push((key, k));
            }
        }
    }

    /// With the pending run counted.
    fn settled(&self) -> Cow<'_, Histogram> {
        if self.run.len == 0 {
            return Cow::Borrowed(self);
        }
        let mut h = self.clone();
        if let Some((v, k)) = h.run.take() {
            h.put(v, k);
        }
        Cow::Owned(h)
    }

    /// (value, count) in the order the values were first counted.
    pub fn counts(&self) -> Vec<(i64, u64)> {
        self.settled().keys.clone()
    }

    /// The count of value v (0 when not counted).
    pub fn get(&self, v: i64) -> u64 {
        let h = self.settled();
        h.index
            .get(&v)
            .and_then(|&i| h.keys.get(i))
            .map_or(0, |e| e.1)
    }

    pub fn n(&self) -> u64 {
        self.settled().keys.iter().map(|e| e.1).sum()
    }

    /// (value, count) in increasing order of value.
    pub fn values(&self) -> Vec<(i64, u64)> {
        let mut v = self.counts();
        v.sort_unstable();
        v
    }

    /// The first value whose cumulative count passes q * (n - 1).
    pub fn quantile(&self, q: f64) -> Option<i64> {
        quantile_of(&self.values(), q)
    }

    pub fn median(&self) -> Option<i64> {
        self.quantile(0.5)
    }

    pub fn lo(&self) -> Option<i64> {
        self.settled().keys.iter().map(|e| e.0).min()
    }

    pub fn hi(&self) -> Option<i64> {
        self.settled().keys.iter().map(|e| e.0).max()
    }

    /// The most frequent value; the first counted among equals.
    pub fn mode(&self) -> Option<i64> {
        let mut best = None;
        let mut most = 0;
        for &(v, c) in &self.settled().keys {
            if c > most {
                best = Some(v);
                most = c;
            }
        }
        best
    }

    /// The k most frequent (value, count), largest count first, smaller value first among
    /// equals.
    pub fn top(&self, k: usize) -> Vec<(i64, u64)> {
        let mut v = self.counts();
        v.sort_unstable_by_key(|&(value, count)| (std::cmp::Reverse(count), value));
        v.truncate(k);
        v
    }
}

/// Quantiles stay exact while there are at most EXACT_KEYS distinct values; then buckets:
/// values below 2**EXACT_BITS are their own bucket, and above, each power of two is cut into
/// HALF buckets, so that a bucket is under 1/HALF (0.8 %) of its values wide.
pub const EXACT_KEYS: usize = 1024;
pub const EXACT_BITS: u32 = 8;
pub const HALF: i64 = 1 << (EXACT_BITS - 1);

/// The bucket of v >= 0 (at most 55 * HALF + 2 * HALF for i64::MAX: bounded).
fn bucket(v: i64) -> usize {
    if v < (1 << EXACT_BITS) {
        return usize::try_from(v).unwrap_or(0);
    }
    let shift = bit_length(v) - EXACT_BITS;
    // v >> shift is in [HALF, 2 * HALF): the buckets of one power follow the previous one's
    usize::try_from(i64::from(shift) * HALF + (v >> shift)).unwrap_or(0)
}

/// Counts of integer values read only through quantiles, for wide distributions (bytes in
/// flight, RTTs in microseconds) whose distinct values a Histogram would keep one key each.
///
/// Exact while the values take at most EXACT_KEYS distinct values. Past that, counts move
/// to log-linear buckets, whose number grows with the logarithm of the largest value only,
/// and a quantile is the smallest value seen in the bucket that holds it: a value that
/// occurred, exact under 256 and for buckets that saw one value, otherwise at most 0.8 %
/// below the exact quantile. Negative values (an RTT when the clock steps back) stay exact,
/// apart.
#[derive(Clone, Debug, Default)]
pub struct Quantiles {
    run: Run,
    /// Exact counts; None once the counts are in buckets.
    exact: Option<HashMap<i64, u64>>,
    /// By bucket, grown to the largest bucket seen, and the least value seen in each.
    counts: Vec<u64>,
    least: Vec<i64>,
    neg: BTreeMap<i64, u64>,
    n: u64,
    hi: Option<i64>,
}

impl Quantiles {
    pub fn new() -> Self {
        Quantiles {
            exact: Some(HashMap::new()),
            ..Quantiles::default()
        }
    }

    pub fn add(&mut self, v: i64) {
        if let Some((v, k)) = self.run.add(v) {
            self.put(v, k);
        }
    }

    fn put(&mut self, v: i64, k: u64) {
        self.n += k;
        if self.hi.is_none_or(|hi| v > hi) {
            self.hi = Some(v);
        }
        let Some(exact) = self.exact.as_mut() else {
            self.bucket_put(v, k);
            return;
        };
        *exact.entry(v).or_insert(0) += k;
        if exact.len() > EXACT_KEYS {
            if let Some(exact) = self.exact.take() {
                for (value, count) in exact {
                    self.bucket_put(value, count);
                }
            }
        }
    }

    fn bucket_put(&mut self, v: i64, k: u64) {
        if v < 0 {
            *self.neg.entry(v).or_insert(0) += k;
            return;
        }
        let b = bucket(v);
        if b >= self.counts.len() {
            self.counts.resize(b + 1, 0);
            self.least.resize(b + 1, 0);
        }
        if let (Some(c), Some(l)) = (self.counts.get_mut(b), self.least.get_mut(b)) {
            if *c == 0 || v < *l {
                *l = v;
            }
            *c += k;
        }
    }

    fn settled(&self) -> Cow<'_, Quantiles> {
        if self.run.len == 0 {
            return Cow::Borrowed(self);
        }
        let mut q = self.clone();
        if let Some((v, k)) = q.run.take() {
            q.put(v, k);
        }
        Cow::Owned(q)
    }

    /// (value, count) in increasing order: exact counts, or the exact negatives and then
    /// each bucket's least value.
    pub fn values(&self) -> Vec<(i64, u64)> {
        let q = self.settled();
        if let Some(exact) = &q.exact {
            let mut out: Vec<(i64, u64)> = exact.iter().map(|(&v, &c)| (v, c)).collect();
            out.sort_unstable();
            return out;
        }
        let mut out: Vec<(i64, u64)> = q.neg.iter().map(|(&v, &c)| (v, c)).collect();
        out.extend(
            q.least
                .iter()
                .zip(&q.counts)
                .filter(|e| *e.1 > 0)
                .map(|(&l, &c)| (l, c)),
        );
        out
    }

    pub fn quantile(&self, q: f64) -> Option<i64> {
        quantile_of(&self.values(), q)
    }

    pub fn median(&self) -> Option<i64> {
        self.quantile(0.5)
    }

    pub fn n(&self) -> u64 {
        self.n + self.run.len
    }

    pub fn lo(&self) -> Option<i64> {
        self.values().first().map(|e| e.0)
    }

    pub fn hi(&self) -> Option<i64> {
        self.settled().hi
    }

    /// Buckets allocated (a measure of memory, for tests).
    pub fn bucket_slots(&self) -> usize {
        self.settled().counts.len()
    }
}

/// Bins go from a map to an array once DENSE_AFTER indexes have counts and the array up to
/// the largest would take no more than the map (an entry is about 90 bytes, a slot 8).
pub const DENSE_AFTER: usize = 32;
pub const DENSE_RATIO: i64 = 11;
/// Indexes at or past this stay in the map even once dense: an array slot per index up to
/// a corrupt one would be gigabytes (the transfer analysis keeps its indexes far below).
const DENSE_LIMIT: i64 = 1 << 24;

/// Positive counts by index: a map while sparse (a flow idle for hours between queries), an
/// array indexed from 0 once dense (a busy flow's hour is 36,000 bins of 100 ms). Negative
/// indexes (a timestamp before the first) stay in the map.
#[derive(Clone, Debug)]
pub struct Bins {
    sparse: BTreeMap<i64, i64>,
    dense: Option<Vec<i64>>,
    /// Indexes with a count.
    count: usize,
    /// The largest index with a count (-1: none).
    hi: i64,
}

impl Default for Bins {
    fn default() -> Self {
        Bins {
            sparse: BTreeMap::new(),
            dense: None,
            count: 0,
            hi: -1,
        }
    }
}

impl Bins {
    pub fn new() -> Self {
        Bins::default()
    }

    fn dense_slot(&mut self, i: i64) -> Option<&mut i64> {
        let dense = self.dense.as_mut()?;
        if !(0..DENSE_LIMIT).contains(&i) {
            return None;
        }
        let at = usize::try_from(i).ok()?;
        if at >= dense.len() {
            // grown 4,096 bins at least: not a copy of it all per bin
            let grow = (at + 1 - dense.len()).max(4096);
            dense.resize(dense.len() + grow, 0);
        }
        dense.get_mut(at)
    }

    /// Count n (> 0) at index i.
    pub fn add(&mut self, i: i64, n: i64) {
        if i > self.hi {
            self.hi = i;
        }
        if let Some(c) = self.dense_slot(i) {
            let was = *c;
            *c = was.wrapping_add(n);
            if was == 0 {
                self.count += 1;
            }
            return;
        }
        match self.sparse.entry(i) {
            Entry::Occupied(mut e) => *e.get_mut() = e.get().wrapping_add(n),
            Entry::Vacant(e) => {
                self.count += 1;
                e.insert(n);
            }
        }
        let keys = self.sparse.len();
        if self.dense.is_none()
            && keys >= DENSE_AFTER
            && self.hi < DENSE_RATIO * keys as i64
            && self.hi < DENSE_LIMIT
        {
            let size = usize::try_from(self.hi + 1).unwrap_or(0);
            let mut dense = vec![0i64; size];
            let sparse = std::mem::take(&mut self.sparse);
            for (k, v) in sparse {
                match usize::try_from(k).ok().and_then(|at| dense.get_mut(at)) {
                    Some(slot) => *slot = v,
                    None => {
                        self.sparse.insert(k, v);
                    }
                }
            }
            self.dense = Some(dense);
        }
    }

    /// Indexes with a count.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn get(&self, i: i64) -> i64 {
        if let Some(dense) = &self.dense {
            if (0..DENSE_LIMIT).contains(&i) {
                return usize::try_from(i)
                    .ok()
                    .and_then(|at| dense.get(at))
                    .copied()
                    .unwrap_or(0);
            }
        }
        self.sparse.get(&i).copied().unwrap_or(0)
    }

    /// (index, count) of the indexes with a count, in increasing order.
    pub fn items(&self) -> Vec<(i64, i64)> {
        let mut out: Vec<(i64, i64)> = self.sparse.iter().map(|(&i, &c)| (i, c)).collect();
        if let Some(dense) = &self.dense {
            let below = out.partition_point(|e| e.0 < 0);
            let mid: Vec<(i64, i64)> = (0i64..)
                .zip(dense.iter().copied())
                .filter(|e| e.1 != 0)
                .collect();
            out.splice(below..below, mid);
        }
        out
    }

    /// (index, count) of the largest count, the lowest index among equals; (0, -1) when
    /// there is none.
    pub fn most(&self) -> (i64, i64) {
        let (mut best_i, mut best) = (0, -1);
        for (i, c) in self.items() {
            if c > best {
                best_i = i;
                best = c;
            }
        }
        (best_i, best)
    }

    /// The index in [0, end) of the smallest count (0 where none), the lowest among equals;
    /// found without walking every index when one has no count (an index range that a
    /// corrupt or jumping timestamp can stretch to years).
    pub fn least(&self, end: i64) -> i64 {
        if (self.count as i64) < end {
            // some index in [0, end) has no count: the first, within count + 1 steps
            return (0..end).find(|&i| self.get(i) == 0).unwrap_or(0);
        }
        // end <= count: a walk bounded by what is stored
        let mut best_i = 0;
        let mut best = None;
        for i in 0..end {
            let c = self.get(i);
            if best.is_none_or(|b| c < b) {
                best_i = i;
                best = Some(c);
            }
        }
        best_i
    }
}

#[cfg(test)]
#[path = "histogram_tests.rs"]
mod tests;
