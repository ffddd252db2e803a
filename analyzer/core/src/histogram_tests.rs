//! Histogram: the run-length fast path counts exactly what one map update per value does.
//! Quantiles: every quantile within its stated error of the exact one, in bounded memory.
//! Bins: what a map of counts by index says, sparse or dense.

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
            let mode = want.iter().fold(
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
