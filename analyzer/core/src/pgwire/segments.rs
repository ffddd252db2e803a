//! The sizes of the backend segments that carried a query's response, counted in a few
//! bytes: most responses come in segments of one to three sizes, so those are kept inline and
//! only a response of more sizes takes a Histogram (its exact counts up to 256 sizes, then
//! coarsened, as the reference counts them).
//!
//! The reads are the Histogram's: for up to 256 distinct values its counts are exact and the
//! order values were first counted does not change n, the largest, the median or the most
//! frequent ones, so the inline form answers them from its own counts.

use crate::histogram::Histogram;

/// Distinct segment sizes a query's response keeps exactly.
pub const SEGMENT_SIZES_CAP: usize = 256;
const INLINE: usize = 3;

#[derive(Clone, Debug)]
pub enum SegmentSizes {
    /// Up to INLINE (size, count), in the order first seen.
    Few {
        len: u8,
        keys: [(u32, u32); INLINE],
    },
    Many(Box<Histogram>),
}

impl Default for SegmentSizes {
    fn default() -> Self {
        SegmentSizes::Few {
            len: 0,
            keys: [(0, 0); INLINE],
        }
    }
}

impl SegmentSizes {
    pub fn add(&mut self, size: usize) {
        if let SegmentSizes::Few { len, keys } = self {
            let n = usize::from(*len).min(INLINE);
            let small = u32::try_from(size).ok();
            if let Some(e) = keys
                .get_mut(..n)
                .and_then(|k| k.iter_mut().find(|e| Some(e.0) == small))
            {
                if let Some(c) = e.1.checked_add(1) {
                    e.1 = c;
                    return;
                }
            } else if let (Some(v), Some(slot)) = (small, keys.get_mut(n)) {
                *slot = (v, 1);
                *len += 1;
                return;
            }
            // a fourth size (or a count past 32 bits): the counts go to a Histogram, in the
            // order first seen, exact (well under its cap)
            let mut h = Histogram::new(SEGMENT_SIZES_CAP);
            for &(v, c) in keys.get(..n).unwrap_or(&[]) {
                for _ in 0..c {
                    h.add(i64::from(v));
                }
            }
            *self = SegmentSizes::Many(Box::new(h));
        }
        if let SegmentSizes::Many(h) = self {
            h.add(i64::try_from(size).unwrap_or(i64::MAX));
        }
    }

    /// (size, count) in increasing order of size.
    fn values(&self) -> Vec<(i64, u64)> {
        match self {
            SegmentSizes::Few { len, keys } => {
                let mut v: Vec<(i64, u64)> = keys
                    .get(..usize::from(*len))
                    .unwrap_or(&[])
                    .iter()
                    .map(|&(s, c)| (i64::from(s), u64::from(c)))
                    .collect();
                v.sort_unstable();
                v
            }
            SegmentSizes::Many(h) => h.values(),
        }
    }

    pub fn n(&self) -> u64 {
        match self {
            SegmentSizes::Many(h) => h.n(),
            few => few.values().iter().map(|e| e.1).sum(),
        }
    }

    pub fn hi(&self) -> Option<i64> {
        match self {
            SegmentSizes::Many(h) => h.hi(),
            few => few.values().last().map(|e| e.0),
        }
    }

    /// The first size whose cumulative count passes (n - 1) / 2.
    pub fn median(&self) -> Option<i64> {
        match self {
            SegmentSizes::Many(h) => h.median(),
            few => {
                let seen = few.values();
                let n: u64 = seen.iter().map(|e| e.1).sum();
                let target = 0.5 * (n as f64 - 1.0);
                let mut total = 0u64;
                for &(v, c) in &seen {
                    total += c;
                    if total as f64 > target {
                        return Some(v);
                    }
                }
                seen.last().map(|e| e.0)
            }
        }
    }

    /// The k most frequent (size, count), largest count first, smaller size among equals.
    pub fn top(&self, k: usize) -> Vec<(i64, u64)> {
        match self {
            SegmentSizes::Many(h) => h.top(k),
            few => {
                let mut v = few.values();
                v.sort_unstable_by_key(|&(value, count)| (std::cmp::Reverse(count), value));
                v.truncate(k);
                v
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Inline or not, the reads are the Histogram's.
    #[test]
    fn reads_equal_the_histograms() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        for case in 0..2000 {
            let mut s = SegmentSizes::default();
            let mut h = Histogram::new(SEGMENT_SIZES_CAP);
            let spread = [1, 2, 3, 4, 8, 400][case % 6];
            for _ in 0..(case % 50) {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let v =
                    [1460usize, 8192, 65483, 7][(rng % 4) as usize] + (rng >> 8) as usize % spread;
                s.add(v);
                h.add(v as i64);
            }
            assert_eq!(s.n(), h.n());
            assert_eq!(s.hi(), h.hi());
            assert_eq!(s.median(), h.median(), "{s:?}");
            assert_eq!(s.top(6), h.top(6));
        }
    }

    #[test]
    fn past_the_cap_sizes_are_coarsened_as_the_reference_does() {
        let mut s = SegmentSizes::default();
        let mut h = Histogram::new(SEGMENT_SIZES_CAP);
        for v in 0..1000usize {
            s.add(v * 7);
            h.add(v as i64 * 7);
        }
        assert!(matches!(s, SegmentSizes::Many(_)));
        assert_eq!(
            (s.top(6), s.median(), s.hi()),
            (h.top(6), h.median(), h.hi())
        );
    }
}
