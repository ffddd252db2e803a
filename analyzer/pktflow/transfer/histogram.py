"""Counts of integer values in bounded memory.

Histogram: bytes per ACK or segment sizes take a handful of distinct values, so counts stay
exact and the most frequent values can be listed. Past `cap` distinct values, new values are
rounded to 4 significant bits (under 7 % error), which bounds the number of keys whatever the
capture's length.

Quantiles: for wide distributions read only through quantiles (bytes in flight, RTTs), exact
counts while values are few, then log-linear buckets: a few kilobytes where a Histogram would
hold thousands of keys.

Bins: counts by a small non-negative index (bytes per 100 ms of a flow), kept as a dict while
few indexes have counts and as an array once they are dense.
"""

from __future__ import annotations

from array import array
from typing import Any, Final


def _coarse(v: int) -> int:
    if v < 16:
        return v
    shift = v.bit_length() - 4
    return (v >> shift) << shift


class _Runs:
    """`add` is on the per-packet path. Values repeat in runs (segment sizes, bytes per ACK),
    so the current run is counted in two unboxed ints and reaches the counts (`_put`) when
    the value changes or the counts are read (`_flush`)."""

    __slots__ = ("_last", "_run")

    def __init__(self) -> None:
        self._last = -1  # the run not yet counted: its value and its length (which may be
        self._run = 0  # 0: an empty run of -1 is no run, and -1 added extends it correctly)

    def add(self, v: int) -> None:
        if v == self._last:
            self._run += 1
            return
        if self._run:
            self._put(self._last, self._run)
        self._last, self._run = v, 1

    def _put(self, v: int, k: int) -> None:
        raise NotImplementedError

    def _flush(self) -> None:
        if self._run:
            self._put(self._last, self._run)
            self._last, self._run = -1, 0

    def values(self) -> list[tuple[int, int]]:
        """(value, count) in increasing order of value."""
        raise NotImplementedError

    @property
    def lo(self) -> int | None:
        seen = self.values()
        return seen[0][0] if seen else None

    def quantile(self, q: float) -> int | None:
        """The first value whose cumulative count passes q * (n - 1)."""
        return _quantile(self.values(), q)

    def median(self) -> int | None:
        return self.quantile(0.5)


def _quantile(seen: list[tuple[int, int]], q: float) -> int | None:
    """The first value of `seen` ((value, count) in increasing order) whose cumulative count
    passes q * (n - 1)."""
    n = 0
    for _, c in seen:
        n += c
    target = q * (n - 1)
    total = 0
    for v, c in seen:
        total += c
        if total > target:
            return v
    return seen[-1][0] if seen else None


class Histogram(_Runs):
    """Counts by value, exact up to `cap` distinct values. The count, the smallest and the
    largest value are derived from the keys when asked."""

    __slots__ = ("_counts", "cap")

    def __init__(self, cap: int = 4096) -> None:
        super().__init__()
        self._counts: dict[int, int] = {}
        self.cap = cap

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
        self._flush()
        return self._counts

    @property
    def n(self) -> int:
        return sum(self.counts.values())

    def values(self) -> list[tuple[int, int]]:
        return sorted(self.counts.items())

    def quantile(self, q: float) -> int | None:
        counts = self.counts
        if len(counts) == 1:  # most of a short connection's histograms: no list to sort
            for v in counts:
                return v
        return _quantile(sorted(counts.items()), q)

    @property
    def hi(self) -> int | None:
        return max(self.counts) if self.counts else None

    def mode(self) -> int | None:
        """The most frequent value; the first counted among equals."""
        best, most = None, 0
        for v, c in self.counts.items():
            if c > most:
                best, most = v, c
        return best

    def top(self, k: int = 12) -> dict[str, int]:
        """The k most frequent values, keyed as strings for JSON, largest count first."""
        counts = self.counts
        if len(counts) > 1:
            best = sorted(counts.items(), key=_by_count)[:k]
            return {str(v): c for v, c in best}
        return {str(v): c for v, c in counts.items()} if k > 0 else {}


def _by_count(item: tuple[int, int]) -> tuple[int, int]:
    return -item[1], item[0]


# Quantiles: exact counts while there are at most EXACT_KEYS distinct values; then buckets:
# values below 2**EXACT_BITS are their own bucket, and above, each power of two is cut into
# HALF buckets, so that a bucket is under 1/HALF (0.8 %) of its values wide.
EXACT_KEYS: Final = 1024
EXACT_BITS: Final = 8
HALF: Final = 1 << (EXACT_BITS - 1)


def _bucket(v: int) -> int:
    if v < (1 << EXACT_BITS):
        return v
    shift = v.bit_length() - EXACT_BITS
    return shift * HALF + (v >> shift)  # v >> shift is in [HALF, 2 * HALF): buckets follow on


class Quantiles(_Runs):
    """Counts of integer values read only through quantiles, for wide distributions (bytes in
    flight, RTTs in microseconds) whose distinct values a Histogram would keep one key each.

    Quantiles are exact while the values take at most EXACT_KEYS distinct values (any short
    capture). Past that, the counts move to log-linear buckets, whose number grows with the
    logarithm of the largest value only, and a quantile is the smallest value seen in the
    bucket that holds it: a value that occurred, exact under 256 and for buckets that saw one
    value, otherwise at most 0.8 % below the exact quantile. Negative values (an RTT when the
    clock steps back) stay exact, apart."""

    __slots__ = ("_exact", "_counts", "_least", "_neg", "_n", "_hi")

    def __init__(self) -> None:
        super().__init__()
        self._exact: dict[int, int] | None = {}  # None once the counts are in buckets
        self._counts: list[int] = []  # by bucket, grown to the largest bucket seen
        self._least: list[int] = []  # the smallest value seen in each bucket
        self._neg: dict[int, int] = {}
        self._n = 0
        self._hi: int | None = None

    def _put(self, v: int, k: int) -> None:
        self._n += k
        hi = self._hi
        if hi is None or v > hi:
            self._hi = v
        exact = self._exact
        if exact is None:
            self._bucket_put(v, k)
            return
        key: Any = v  # boxed once for both dict operations
        exact[key] = exact.get(key, 0) + k
        if len(exact) > EXACT_KEYS:
            self._exact = None
            for value, count in exact.items():
                self._bucket_put(value, count)

    def _bucket_put(self, v: int, k: int) -> None:
        if v < 0:
            self._neg[v] = self._neg.get(v, 0) + k
            return
        b = _bucket(v)
        counts, least = self._counts, self._least
        if b >= len(counts):
            grow = b + 1 - len(counts)
            counts.extend([0] * grow)
            least.extend([0] * grow)
        c = counts[b]
        if c == 0 or v < least[b]:
            least[b] = v
        counts[b] = c + k

    def values(self) -> list[tuple[int, int]]:
        """(value, count) in increasing order: exact counts, or the exact negatives and then
        each bucket's least value."""
        self._flush()
        if self._exact is not None:
            return sorted(self._exact.items())
        out = sorted(self._neg.items())
        out += [(self._least[b], c) for b, c in enumerate(self._counts) if c]
        return out

    @property
    def n(self) -> int:
        self._flush()
        return self._n

    @property
    def hi(self) -> int | None:
        self._flush()
        return self._hi



# Bins go from a dict to an array once DENSE_AFTER indexes have counts and the array up to the
# largest would take no more than the dict (an entry is about 90 bytes, a slot 8).
DENSE_AFTER: Final = 32
DENSE_RATIO: Final = 11


class Bins:
    """Positive counts by index: a dict while sparse (a flow idle for hours between queries),
    an array indexed from 0 once dense (a busy flow's hour is 36,000 bins of 100 ms: 3 MB as a
    dict, 290 KB as this). Negative indexes (a timestamp before the first) stay in the dict."""

    __slots__ = ("_sparse", "_dense", "_size", "_count", "_hi")

    def __init__(self) -> None:
        self._sparse: dict[int, int] = {}
        self._dense: Any = None  # array("q") once dense
        self._size = 0  # its length
        self._count = 0  # indexes with a count
        self._hi = -1  # the largest index with a count

    def add(self, i: int, n: int) -> None:
        """Count n (> 0) at index i."""
        if i > self._hi:
            self._hi = i
        dense = self._dense
        if dense is not None and i >= 0:
            if i >= self._size:  # grown 4,096 bins at least: not a copy of it all per bin
                grow = max(i + 1 - self._size, 4096)
                dense.frombytes(bytes(8 * grow))
                self._size += grow
            c = dense[i]
            if not c:
                self._count += 1
            dense[i] = c + n
            return
        sparse = self._sparse
        key: Any = i  # boxed once for both dict operations
        c = sparse.get(key)
        if c is None:
            self._count += 1
            sparse[key] = n
        else:
            sparse[key] = c + n
        if dense is None and len(sparse) >= DENSE_AFTER and self._hi < DENSE_RATIO * len(sparse):
            dense = array("q", bytes(8 * (self._hi + 1)))
            for k, v in sparse.items():
                if k >= 0:
                    dense[k] = v
            self._dense, self._size = dense, self._hi + 1
            self._sparse = {k: v for k, v in sparse.items() if k < 0}

    def __len__(self) -> int:
        return self._count

    def get(self, i: int) -> int:
        dense = self._dense
        if dense is not None and i >= 0:
            return int(dense[i]) if i < self._size else 0
        return self._sparse.get(i, 0)

    def items(self) -> list[tuple[int, int]]:
        """(index, count) of the indexes with a count, in increasing order."""
        out = sorted(self._sparse.items())
        dense = self._dense
        if dense is not None:
            out += [(i, int(c)) for i, c in enumerate(dense) if c]
        return out

    def most(self) -> tuple[int, int]:
        """(index, count) of the largest count, the lowest index among equals (there is one)."""
        best_i, best = 0, -1
        for i, c in self.items():
            if c > best:
                best_i, best = i, c
        return best_i, best

    def least(self, end: int) -> int:
        """The index in [0, end) of the smallest count (0 where none), the lowest among
        equals; found without walking every index when one has no count (an index range that
        a corrupt or jumping timestamp can stretch to years)."""
        if self._count < end:  # some index in [0, end) has no count: the first
            dense = self._dense
            if dense is not None:
                for i in range(min(end, self._size)):
                    if not dense[i]:
                        return i
                return self._size
            sparse = self._sparse
            return next(i for i in range(end) if i not in sparse)
        return min(range(end), key=self.get, default=0)
