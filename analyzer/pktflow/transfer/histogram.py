"""Counts of integer values in bounded memory, with exact quantiles while values are few.

Bytes per ACK or segment sizes take a handful of distinct values, so counts stay exact. Past
`cap` distinct values, new values are rounded to 4 significant bits (under 7 % error), which
bounds the number of keys whatever the capture's length.
"""

from __future__ import annotations

from typing import Any


def _coarse(v: int) -> int:
    if v < 16:
        return v
    shift = v.bit_length() - 4
    return (v >> shift) << shift


class Histogram:
    """`add` is on the per-packet path. Values repeat in runs (segment sizes, bytes per ACK),
    so the current run is counted in two unboxed ints and reaches the dict when the value
    changes or the counts are read. The count, the smallest and the largest value are derived
    from the keys when asked."""

    __slots__ = ("_counts", "cap", "_last", "_run")

    def __init__(self, cap: int = 4096) -> None:
        self._counts: dict[int, int] = {}
        self.cap = cap
        self._last = -1  # the value of the run not yet in _counts (values are >= 0)
        self._run = 0  # its count

    def add(self, v: int) -> None:
        if v == self._last:
            self._run += 1
            return
        if self._run:
            self._put(self._last, self._run)
        self._last, self._run = v, 1

    def _put(self, v: int, k: int) -> None:
        counts = self._counts
        key: Any = v  # boxed once for both dict operations (compiled, each would box anew)
        c = counts.get(key)
        if c is not None:
            counts[key] = c + k
        elif len(counts) < self.cap:
            counts[key] = k
        else:
            v = _coarse(v)
            counts[v] = counts.get(v, 0) + k

    @property
    def counts(self) -> dict[int, int]:
        """Value -> count (read-only: add() is how counts change)."""
        if self._run:
            self._put(self._last, self._run)
            self._last, self._run = -1, 0
        return self._counts

    @property
    def n(self) -> int:
        return sum(self.counts.values())

    @property
    def lo(self) -> int | None:
        return min(self.counts) if self.counts else None

    @property
    def hi(self) -> int | None:
        return max(self.counts) if self.counts else None

    def quantile(self, q: float) -> int | None:
        n = self.n
        if not n:
            return None
        target = q * (n - 1)
        seen = 0
        for v in sorted(self.counts):
            seen += self.counts[v]
            if seen > target:
                return v
        return self.hi

    def median(self) -> int | None:
        return self.quantile(0.5)

    def mode(self) -> int | None:
        return max(self.counts, key=self.counts.__getitem__) if self.counts else None

    def top(self, k: int = 12) -> dict[str, int]:
        """The k most frequent values, keyed as strings for JSON, largest count first."""
        best = sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        return {str(v): c for v, c in best}
