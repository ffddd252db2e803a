"""Histogram: the run-length fast path must count exactly what one dict update per value does.
Quantiles: every quantile within its stated error of the exact one, in bounded memory.
Bins: what a dict of counts by index says, sparse or dense."""

from __future__ import annotations

import random

import pytest

from pktflow.transfer.histogram import EXACT_KEYS, Bins, Histogram, Quantiles


def reference(values: list[int], cap: int) -> dict[int, int]:
    """The histogram's contract, one value at a time: exact keys until `cap` distinct values,
    then new values rounded to 4 significant bits."""
    counts: dict[int, int] = {}
    for v in values:
        if v in counts:
            counts[v] += 1
        elif len(counts) < cap:
            counts[v] = 1
        else:
            if v >= 16:
                shift = v.bit_length() - 4
                v = (v >> shift) << shift
            counts[v] = counts.get(v, 0) + 1
    return counts


def runs(rng: random.Random, n: int, distinct: int) -> list[int]:
    """Values in runs, as segment sizes and bytes per ACK come."""
    out: list[int] = []
    while len(out) < n:
        out += [rng.randrange(distinct) * 37] * rng.choice((1, 1, 2, 5, 40))
    return out[:n]


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("cap", [4, 64, 4096])
def test_counts_match_one_update_per_value(seed: int, cap: int) -> None:
    rng = random.Random(seed)
    values = runs(rng, 3000, rng.choice((3, 50, 2000)))
    h = Histogram(cap=cap)
    for v in values:
        h.add(v)
    want = reference(values, cap)
    assert h.counts == want
    assert list(h.counts) == list(want), "keys in first-seen order, as JSON lists them"
    assert h.n == len(values)
    assert (h.lo, h.hi) == (min(want), max(want))


def test_reading_mid_run_then_adding_more() -> None:
    """Reading flushes the pending run; adds after a read continue the same counts."""
    h = Histogram()
    for v in (1448, 1448, 1448):
        h.add(v)
    assert h.counts == {1448: 3}
    assert h.median() == 1448
    for v in (1448, 0, 0, 1448):
        h.add(v)
    assert h.counts == {1448: 5, 0: 2}
    assert h.top() == {"1448": 5, "0": 2}


def test_negative_values_count_too() -> None:
    """A clock stepping back can make an RTT negative: it is counted, never lost."""
    h = Histogram()
    for v in (-1, -1, 5, -1):
        h.add(v)
    assert h.counts == {-1: 3, 5: 1}


def test_empty() -> None:
    h = Histogram()
    assert h.counts == {} and h.n == 0 and h.median() is None and h.lo is None


def exact_quantile(values: list[int], q: float) -> int:
    """The definition both classes use: the first value whose cumulative count passes q*(n-1)."""
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("spread", [200, 2000, 70_000, 5_000_000, 1 << 40])
def test_quantiles_within_a_bucket_of_the_exact_ones(seed: int, spread: int) -> None:
    rng = random.Random(seed)
    values = [int(rng.lognormvariate(0, 2) * spread) % (spread + 1) for _ in range(5000)]
    values += [rng.randrange(spread + 1)] * 300  # a run
    rng.shuffle(values)
    h = Quantiles()
    for v in values:
        h.add(v)
    assert h.n == len(values) and h.hi == max(values) and h.lo == min(values)
    for q in (0.0, 0.05, 0.5, 0.9, 0.95, 0.99, 1.0):
        want, got = exact_quantile(values, q), h.quantile(q)
        assert got is not None and got in values, "a quantile is a value that occurred"
        if want < 256 or len(set(values)) <= EXACT_KEYS:
            assert got == want
        else:
            assert want * (1 - 1 / 128) < got <= want, (q, want, got)
    # memory: two slots per bucket, about 128 buckets per power of two of the largest value
    assert len(h._counts) <= 256 + 128 * max(0, max(values).bit_length() - 8)


def test_quantiles_exact_when_each_bucket_saw_one_value() -> None:
    """Bulk transfers repeat a few sizes (65,160 in flight, 1,448 per segment): those exactly,
    also once many other values have moved the counts into buckets."""
    few = [65160] * 7 + [1448] * 5 + [3] * 2 + [65160 * 3] * 9
    many = [(1 << 30) + 7 * i for i in range(EXACT_KEYS)]  # distinct, above the rest
    for values in (few, few + many):
        h = Quantiles()
        for v in values:
            h.add(v)
        for i in range(len(few)):  # the quantiles that fall on the repeated sizes
            q = i / (len(values) - 1)
            assert h.quantile(q) == exact_quantile(values, q), (len(values), i)


def test_quantiles_read_mid_run_and_negative() -> None:
    h = Quantiles()
    for v in (500, 500, -2):
        h.add(v)
    assert (h.n, h.lo, h.hi, h.median()) == (3, -2, 500, 500)
    h.add(-2)  # the pending run was flushed by the read: counting goes on
    h.add(70)
    assert (h.n, h.lo, h.quantile(0.0), h.quantile(0.25)) == (5, -2, -2, -2)
    assert h.quantile(0.5) == 70


def test_quantiles_empty() -> None:
    h = Quantiles()
    assert h.n == 0 and h.median() is None and h.lo is None and h.hi is None


@pytest.mark.parametrize("seed", range(12))
def test_bins_answer_as_a_dict_of_counts(seed: int) -> None:
    """Bins against a plain dict: busy (dense) and idle (sparse) flows, timestamps that step
    back (negative indexes, earlier indexes after later ones), empty and full ranges."""
    rng = random.Random(seed)
    ref: dict[int, int] = {}
    bins = Bins()
    i = rng.randrange(3)
    gap = rng.choice([1, 2, 50, 400])  # 1: every index has a count
    for _ in range(rng.choice([5, 40, 3000])):
        if rng.random() < 0.05:
            j = rng.randrange(-3, i + 1)  # back in time
        else:
            i += rng.randrange(1, gap + 1)
            j = i
        n = rng.choice([1, 1448, 7, 7, 7])  # equal counts: ties
        ref[j] = ref.get(j, 0) + n
        bins.add(j, n)
        assert len(bins) == len(ref)
    assert bins.items() == sorted(ref.items())
    assert all(bins.get(k) == ref.get(k, 0) for k in range(-5, i + 5))
    most = max(ref.values())
    assert bins.most() == (min(k for k, v in ref.items() if v == most), most)
    for end in (0, 1, i // 2, i, i + 3):
        missing = [k for k in range(end) if k not in ref]
        want = missing[0] if missing else min(range(end), key=lambda k: ref[k], default=0)
        assert bins.least(end) == want, end


def test_bins_of_a_busy_hour_are_small() -> None:
    """36,000 100 ms bins (a busy flow's hour) in about 8 bytes each, not a dict's 90."""
    import tracemalloc

    tracemalloc.start()
    bins = Bins()
    for i in range(36_000):
        bins.add(i, 1448 * (1 + i % 3))
    size = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert size < 400_000 and len(bins) == 36_000
