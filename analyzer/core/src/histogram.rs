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
pub(crate) fn quantile_of(seen: &[(i64, u64)], q: f64) -> Option<i64> {
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

    /// The pending run as put() would count it: (key, count). Reads add it to what they
    /// see instead of counting it into a clone of the whole histogram.
    fn pending(&self) -> Option<(i64, u64)> {
        if self.run.len == 0 {
            return None;
        }
        let v = self.run.last;
        let key = if self.index.contains_key(&v) || self.keys.len() < self.cap {
            v
        } else {
            coarse(v)
        };
        Some((key, self.run.len))
    }

    /// (value, count) in the order the values were first counted.
    pub fn counts(&self) -> Vec<(i64, u64)> {
        let mut keys = self.keys.clone();
        if let Some((key, k)) = self.pending() {
            match self.index.get(&key) {
                Some(&i) => {
                    if let Some(e) = keys.get_mut(i) {
                        e.1 += k;
                    }
                }
                None => keys.push((key, k)),
            }
        }
        keys
    }

    /// The count of value v (0 when not counted).
    pub fn get(&self, v: i64) -> u64 {
        let counted = self
            .index
            .get(&v)
            .and_then(|&i| self.keys.get(i))
            .map_or(0, |e| e.1);
        match self.pending() {
            Some((key, k)) if key == v => counted + k,
            _ => counted,
        }
    }

    pub fn n(&self) -> u64 {
        self.keys.iter().map(|e| e.1).sum::<u64>() + self.run.len
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
        let keys = self.keys.iter().map(|e| e.0);
        keys.chain(self.pending().map(|e| e.0)).min()
    }

    pub fn hi(&self) -> Option<i64> {
        let keys = self.keys.iter().map(|e| e.0);
        keys.chain(self.pending().map(|e| e.0)).max()
    }

    /// The most frequent value; the first counted among equals.
    pub fn mode(&self) -> Option<i64> {
        mode_of(&self.counts()).map(|e| e.0)
    }

    /// Count, median, mode and its count, the k most frequent: from one copy of the counts.
    pub fn summary(&self, k: usize) -> Summary {
        let mut keys = self.counts();
        let mode = mode_of(&keys);
        let n = keys.iter().map(|e| e.1).sum();
        keys.sort_unstable();
        let median = quantile_of(&keys, 0.5);
        keys.sort_unstable_by_key(|&(value, count)| (std::cmp::Reverse(count), value));
        keys.truncate(k);
        Summary {
            n,
            median,
            mode: mode.map(|e| e.0),
            mode_count: mode.map_or(0, |e| e.1),
            top: keys,
        }
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

/// What a Histogram answers of itself as a whole.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub n: u64,
    pub median: Option<i64>,
    pub mode: Option<i64>,
    pub mode_count: u64,
    /// The most frequent (value, count), largest count first, smaller value first among
    /// equals.
    pub top: Vec<(i64, u64)>,
}

/// The (value, count) of the largest count in `keys`, the first among equals.
fn mode_of(keys: &[(i64, u64)]) -> Option<(i64, u64)> {
    let mut best = None;
    let mut most = 0;
    for &(v, c) in keys {
        if c > most {
            best = Some((v, c));
            most = c;
        }
    }
    best
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
        if let (Some(exact), true) = (&self.exact, self.run.len > 0) {
            let (v, k) = (self.run.last, self.run.len);
            if exact.contains_key(&v) || exact.len() < EXACT_KEYS {
                // counting the run keeps the counts exact: no clone of the map needed
                let mut out: Vec<(i64, u64)> = Vec::with_capacity(exact.len() + 1);
                out.extend(exact.iter().map(|(&value, &c)| (value, c)));
                match out.iter_mut().find(|e| e.0 == v) {
                    Some(e) => e.1 += k,
                    None => out.push((v, k)),
                }
                out.sort_unstable();
                return out;
            }
        }
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
        self.iter().collect()
    }

    /// What `items` lists, without collecting it: the map's negative indexes, the array's
    /// counts, then the map's other indexes.
    fn iter(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        let below = self.sparse.range(..0).map(|(&i, &c)| (i, c));
        let dense = self
            .dense
            .iter()
            .flat_map(|d| (0i64..).zip(d.iter().copied()).filter(|e| e.1 != 0));
        let above = self.sparse.range(0..).map(|(&i, &c)| (i, c));
        below.chain(dense).chain(above)
    }

    /// (index, count) of the largest count, the lowest index among equals; (0, -1) when
    /// there is none.
    pub fn most(&self) -> (i64, i64) {
        let (mut best_i, mut best) = (0, -1);
        for (i, c) in self.iter() {
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
mod tests {
    // Histogram: the run-length fast path counts exactly what one map update per value does.
    // Quantiles: every quantile within its stated error of the exact one, in bounded memory.
    // Bins: what a map of counts by index says, sparse or dense.

    use super::*;

    /// splitmix64: reproducible values without a dependency.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        fn pick<T: Copy>(&mut self, of: &[T]) -> T {
            of[self.below(of.len() as u64) as usize]
        }
    }

    /// The histogram's contract, one value at a time: exact keys until `cap` distinct values,
    /// then new values rounded to 4 significant bits; keys in first-counted order.
    fn reference(values: &[i64], cap: usize) -> Vec<(i64, u64)> {
        let mut keys: Vec<(i64, u64)> = Vec::new();
        for &v in values {
            if let Some(e) = keys.iter_mut().find(|e| e.0 == v) {
                e.1 += 1;
            } else if keys.len() < cap {
                keys.push((v, 1));
            } else {
                let mut c = v;
                if c >= 16 {
                    let shift = 64 - c.leading_zeros() - 4;
                    c = (c >> shift) << shift;
                }
                match keys.iter_mut().find(|e| e.0 == c) {
                    Some(e) => e.1 += 1,
                    None => keys.push((c, 1)),
                }
            }
        }
        keys
    }

    /// Values in runs, as segment sizes and bytes per ACK come.
    fn runs(rng: &mut Rng, n: usize, distinct: u64) -> Vec<i64> {
        let mut out = Vec::new();
        while out.len() < n {
            let v = rng.below(distinct) as i64 * 37;
            let len = rng.pick(&[1, 1, 2, 5, 40]);
            out.extend(std::iter::repeat_n(v, len));
        }
        out.truncate(n);
        out
    }

    #[test]
    fn counts_match_one_update_per_value() {
        for seed in 0..8 {
            for cap in [4, 64, 4096] {
                let mut rng = Rng(seed);
                let distinct = rng.pick(&[3, 50, 2000]);
                let values = runs(&mut rng, 3000, distinct);
                let mut h = Histogram::new(cap);
                for &v in &values {
                    h.add(v);
                }
                let want = reference(&values, cap);
                assert_eq!(
                    h.counts(),
                    want,
                    "keys in first-counted order, as JSON lists them"
                );
                assert_eq!(h.n(), values.len() as u64);
                assert_eq!(h.lo(), want.iter().map(|e| e.0).min());
                assert_eq!(h.hi(), want.iter().map(|e| e.0).max());
                let mode =
                    want.iter().fold(
                        (None, 0),
                        |b, e| if e.1 > b.1 { (Some(e.0), e.1) } else { b },
                    );
                assert_eq!(h.mode(), mode.0, "the first counted among equals");
            }
        }
    }

    #[test]
    fn reading_mid_run_then_adding_more() {
        let mut h = Histogram::default();
        for v in [1448, 1448, 1448] {
            h.add(v);
        }
        assert_eq!(h.counts(), vec![(1448, 3)]);
        assert_eq!(h.median(), Some(1448));
        for v in [1448, 0, 0, 1448] {
            h.add(v);
        }
        assert_eq!(h.counts(), vec![(1448, 5), (0, 2)]);
        assert_eq!(h.top(12), vec![(1448, 5), (0, 2)]);
        assert_eq!(h.get(0), 2);
        assert_eq!(h.get(7), 0);
    }

    #[test]
    fn mode_is_the_first_counted_among_equals() {
        let mut h = Histogram::default();
        for v in [9, 9, 3, 3, 7] {
            h.add(v);
        }
        assert_eq!(h.mode(), Some(9));
        assert_eq!(
            h.top(2),
            vec![(3, 2), (9, 2)],
            "top: smaller value first among equals"
        );
        assert_eq!(h.top(0), vec![]);
    }

    #[test]
    fn negative_values_count_too() {
        let mut h = Histogram::default();
        for v in [-1, -1, 5, -1] {
            h.add(v);
        }
        assert_eq!(h.counts(), vec![(-1, 3), (5, 1)]);
    }

    #[test]
    fn histogram_empty() {
        let h = Histogram::default();
        assert!(h.counts().is_empty());
        assert_eq!(
            (h.n(), h.median(), h.lo(), h.hi(), h.mode()),
            (0, None, None, None, None)
        );
        assert!(h.top(12).is_empty());
    }

    #[test]
    fn quantile_definition() {
        let mut h = Histogram::default();
        for v in [1, 2, 3, 4] {
            h.add(v);
        }
        // q * (n - 1) = 1.5: the first value whose cumulative count passes it
        assert_eq!(h.median(), Some(2));
        assert_eq!(h.quantile(0.0), Some(1));
        assert_eq!(h.quantile(1.0), Some(4));
        assert_eq!(h.quantile(2.0), Some(4), "past the end: the largest");
    }

    /// The definition both classes use: the first value whose cumulative count passes q*(n-1).
    fn exact_quantile(values: &[i64], q: f64) -> i64 {
        let mut ordered = values.to_vec();
        ordered.sort_unstable();
        ordered[(q * (ordered.len() - 1) as f64) as usize]
    }

    #[test]
    fn quantiles_within_a_bucket_of_the_exact_ones() {
        for seed in 0..6 {
            for spread in [200i64, 2000, 70_000, 5_000_000, 1 << 40] {
                let mut rng = Rng(seed + 100);
                // wide and skewed: a uniform value shifted right by a random amount
                let mut values: Vec<i64> = (0..5000)
                    .map(|_| (rng.below(spread as u64 + 1) >> rng.below(12)) as i64)
                    .collect();
                let run = rng.below(spread as u64 + 1) as i64;
                values.extend(std::iter::repeat_n(run, 300));
                for i in (1..values.len()).rev() {
                    let j = rng.below(i as u64 + 1) as usize;
                    values.swap(i, j);
                }
                let mut h = Quantiles::new();
                for &v in &values {
                    h.add(v);
                }
                let distinct = values
                    .iter()
                    .collect::<std::collections::HashSet<_>>()
                    .len();
                assert_eq!(h.n(), values.len() as u64);
                assert_eq!(h.hi(), values.iter().copied().max());
                assert_eq!(h.lo(), values.iter().copied().min());
                for q in [0.0, 0.05, 0.5, 0.9, 0.95, 0.99, 1.0] {
                    let want = exact_quantile(&values, q);
                    let got = h.quantile(q).unwrap();
                    assert!(values.contains(&got), "a quantile is a value that occurred");
                    if want < 256 || distinct <= EXACT_KEYS {
                        assert_eq!(got, want);
                    } else {
                        let w = want as f64;
                        assert!(
                            w * (1.0 - 1.0 / 128.0) < got as f64 && got <= want,
                            "{q} {want} {got}"
                        );
                    }
                }
                // memory: about 128 buckets per power of two of the largest value
                let bits = 64 - values.iter().max().unwrap().leading_zeros() as usize;
                assert!(h.bucket_slots() <= 256 + 128 * bits.saturating_sub(8));
            }
        }
    }

    #[test]
    fn quantiles_bucket_past_1024_distinct_values() {
        let mut h = Quantiles::new();
        for v in 0..EXACT_KEYS as i64 {
            h.add(1000 + v);
        }
        assert_eq!(h.bucket_slots(), 0, "1,024 distinct values: still exact");
        assert_eq!(h.median(), Some(1000 + 511));
        h.add(5000); // the 1,025th: into buckets
        assert!(h.bucket_slots() > 0);
        // 1000..1024 is cut into buckets 4 wide, 1024..2048 into buckets 8 wide: the median
        // (1512) falls in the bucket [1512, 1520), whose least value it is
        assert_eq!(h.median(), Some(1512));
        assert_eq!(h.quantile(1.0), Some(5000));
        assert_eq!(h.quantile(0.0), Some(1000));
        assert_eq!(h.n(), 1025);
        // a bucket's answer is the least value seen in it, never more than the exact one
        let mut q = Quantiles::new();
        for v in 0..2000i64 {
            q.add(300 + 3 * v);
        }
        let values: Vec<i64> = (0..2000).map(|v| 300 + 3 * v).collect();
        for p in [0.1, 0.5, 0.9] {
            let want = exact_quantile(&values, p);
            let got = q.quantile(p).unwrap();
            assert!(got <= want && got as f64 > want as f64 * (1.0 - 1.0 / 128.0));
        }
    }

    #[test]
    fn quantiles_exact_when_each_bucket_saw_one_value() {
        let mut few: Vec<i64> = Vec::new();
        for (v, k) in [(65160, 7), (1448, 5), (3, 2), (65160 * 3, 9)] {
            few.extend(std::iter::repeat_n(v, k));
        }
        let many: Vec<i64> = (0..EXACT_KEYS as i64).map(|i| (1 << 30) + 7 * i).collect();
        for values in [few.clone(), [few.clone(), many].concat()] {
            let mut h = Quantiles::new();
            for &v in &values {
                h.add(v);
            }
            for i in 0..few.len() {
                let q = i as f64 / (values.len() - 1) as f64;
                assert_eq!(
                    h.quantile(q),
                    Some(exact_quantile(&values, q)),
                    "{} {i}",
                    values.len()
                );
            }
        }
    }

    #[test]
    fn quantiles_read_mid_run_and_negative() {
        let mut h = Quantiles::new();
        for v in [500, 500, -2] {
            h.add(v);
        }
        assert_eq!(
            (h.n(), h.lo(), h.hi(), h.median()),
            (3, Some(-2), Some(500), Some(500))
        );
        h.add(-2);
        h.add(70);
        assert_eq!(
            (h.n(), h.lo(), h.quantile(0.0), h.quantile(0.25)),
            (5, Some(-2), Some(-2), Some(-2))
        );
        assert_eq!(h.quantile(0.5), Some(70));
    }

    #[test]
    fn quantiles_negative_values_stay_exact_in_buckets() {
        let mut h = Quantiles::new();
        for v in 0..1100i64 {
            h.add(v * 1000);
        }
        for v in [-5, -5, -9] {
            h.add(v);
        }
        assert_eq!(h.quantile(0.0), Some(-9));
        assert_eq!(h.lo(), Some(-9));
        assert_eq!(h.quantile(2.0 / 1102.0), Some(-5));
        assert_eq!(h.hi(), Some(1_099_000));
    }

    #[test]
    fn quantiles_empty() {
        let h = Quantiles::new();
        assert_eq!((h.n(), h.median(), h.lo(), h.hi()), (0, None, None, None));
    }

    #[test]
    fn quantiles_extreme_values_stay_bounded() {
        let mut h = Quantiles::new();
        for v in 0..1100i64 {
            h.add(i64::MAX - v);
            h.add(i64::MIN + v);
        }
        assert!(h.bucket_slots() < 8000);
        assert_eq!(h.hi(), Some(i64::MAX));
        assert_eq!(h.lo(), Some(i64::MIN));
    }

    #[test]
    fn bins_answer_as_a_map_of_counts() {
        for seed in 0..12 {
            let mut rng = Rng(seed + 7);
            let mut reference: BTreeMap<i64, i64> = BTreeMap::new();
            let mut bins = Bins::new();
            let mut i = rng.below(3) as i64;
            let gap = rng.pick(&[1u64, 2, 50, 400]); // 1: every index has a count
            for _ in 0..rng.pick(&[5, 40, 3000]) {
                let j = if rng.below(100) < 5 {
                    rng.below(i as u64 + 4) as i64 - 3 // back in time
                } else {
                    i += 1 + rng.below(gap) as i64;
                    i
                };
                let n = rng.pick(&[1, 1448, 7, 7, 7]); // equal counts: ties
                *reference.entry(j).or_insert(0) += n;
                bins.add(j, n);
                assert_eq!(bins.len(), reference.len());
            }
            let items: Vec<(i64, i64)> = reference.iter().map(|(&k, &v)| (k, v)).collect();
            assert_eq!(bins.items(), items);
            for k in -5..i + 5 {
                assert_eq!(bins.get(k), reference.get(&k).copied().unwrap_or(0));
            }
            let most = *reference.values().max().unwrap();
            let at = *reference.iter().find(|e| *e.1 == most).unwrap().0;
            assert_eq!(bins.most(), (at, most));
            for end in [0, 1, i / 2, i, i + 3] {
                let get = |k: i64| reference.get(&k).copied().unwrap_or(0);
                let missing = (0..end).find(|k| !reference.contains_key(k));
                let want = missing.unwrap_or_else(|| {
                    (0..end)
                        .fold((0, None), |b: (i64, Option<i64>), k| {
                            if b.1.is_none_or(|c| get(k) < c) {
                                (k, Some(get(k)))
                            } else {
                                b
                            }
                        })
                        .0
                });
                assert_eq!(bins.least(end), want, "{seed} {end}");
            }
        }
    }

    #[test]
    fn bins_of_a_busy_hour_are_dense() {
        let mut bins = Bins::new();
        for i in 0..36_000i64 {
            bins.add(i, 1448 * (1 + i % 3));
        }
        assert_eq!(bins.len(), 36_000);
        assert!(bins.dense.is_some() && bins.sparse.is_empty());
        assert_eq!(bins.most(), (2, 1448 * 3));
        assert_eq!(bins.least(36_000), 0);
        assert_eq!(
            bins.least(1 << 40),
            36_000,
            "past the counted: the first without a count"
        );
    }

    #[test]
    fn bins_far_indexes_stay_apart() {
        let mut bins = Bins::new();
        for i in 0..40i64 {
            bins.add(i, 5);
        }
        assert!(bins.dense.is_some());
        bins.add(i64::MAX, 9);
        bins.add(-3, 1);
        bins.add(40, 5);
        assert_eq!(bins.len(), 43);
        assert_eq!(bins.get(i64::MAX), 9);
        let items = bins.items();
        assert_eq!(items.first(), Some(&(-3, 1)));
        assert_eq!(items.last(), Some(&(i64::MAX, 9)));
        assert_eq!(bins.most(), (i64::MAX, 9));
        assert_eq!(bins.least(1000), 41);
        assert_eq!(bins.least(0), 0);
        assert_eq!(Bins::new().most(), (0, -1));
    }
}
