"""Histogram: the run-length fast path must count exactly what one dict update per value does."""

from __future__ import annotations

import random

import pytest

from pktflow.transfer.histogram import Histogram


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
