"""Counts of integer values in bounded memory, with exact quantiles while values are few.

Bytes per ACK or segment sizes take a handful of distinct values, so counts stay exact. Past
`cap` distinct values, new values are rounded to 4 significant bits (under 7 % error), which
bounds the number of keys whatever the capture's length.
"""

from __future__ import annotations


def _coarse(v: int) -> int:
    if v < 16:
        return v
    shift = v.bit_length() - 4
    return (v >> shift) << shift


class Histogram:
    __slots__ = ("counts", "cap", "n", "lo", "hi")

    def __init__(self, cap: int = 4096) -> None:
        self.counts: dict[int, int] = {}
        self.cap = cap
        self.n = 0
        self.lo: int | None = None
        self.hi: int | None = None

    def add(self, v: int, k: int = 1) -> None:
        counts = self.counts
        if v not in counts and len(counts) >= self.cap:
            v = _coarse(v)
        counts[v] = counts.get(v, 0) + k
        self.n += k
        if self.lo is None or v < self.lo:
            self.lo = v
        if self.hi is None or v > self.hi:
            self.hi = v

    def quantile(self, q: float) -> int | None:
        if not self.n:
            return None
        target = q * (self.n - 1)
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
