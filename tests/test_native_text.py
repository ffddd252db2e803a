"""The native core's text and counting parts (native/jsonw.c, native/histogram.c) against what
they stand in for: json.dumps's text, Python's number formats (round, repr, format specs),
and the Histogram, Quantiles and Bins classes of pktflow.transfer.histogram."""

from __future__ import annotations

import json
import math
import random
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pktflow.report.jsontext import compact, indented
from pktflow.transfer.histogram import Bins, Histogram, Quantiles

core = pytest.importorskip("pktflow._core", reason="pktflow._core is not built (no C compiler "
                                                   "at install time)")

VALUES: list[Any] = [
    {"a": 1, "b": [1, 2.5, None, True, "x\u00e9\U0001f600\n\"\\\x00\x7f"], "c": {}, "d": [],
     "e": {"f": {"g": []}}, "k\u00e9y": -1},
    [], {}, 1.0, -0.0, float("nan"), float("inf"), -float("inf"), 1e300, 2**70, -2**63,
    "plain", [[[]]], {"k": [{"z": 0.1 + 0.2}]}, (1, (2,)), False]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_json_writer_writes_json_dumps_text(value: Any) -> None:
    for level in (0, 1, 2, 4):
        assert core.write_json(value, 2, level) == indented(value, level)
    assert core.write_json(value, -1, 0) == compact(value)


def _floats(rnd: random.Random, n: int) -> list[float]:
    """Floats of every kind a report holds and then some: random bit patterns, exact ties at
    every precision, values near the fast paths' bounds."""
    out = [0.5, 1.5, 2.5, -0.5, 0.125, 0.375, 2.675, 1.0000005, 5e-7, -5e-7, 1e-4, 9.99999e-5,
           2.0**32 - 0.5, 2.0**32, 2.0**52, 4503599627.3704, 0.1 + 0.2, 1 / 3, 1e-7, -0.0, 0.0]
    for _ in range(n):
        kind = rnd.randrange(6)
        if kind == 0:
            x = rnd.uniform(-1e4, 1e4)
        elif kind == 1:
            x = rnd.randint(-10**9, 10**9) / 10 ** rnd.randint(0, 9)
        elif kind == 2:
            x = struct.unpack("<d", rnd.getrandbits(64).to_bytes(8, "little"))[0]
        elif kind == 3:
            x = rnd.randint(0, 2**40) / 2 ** rnd.randint(0, 45)
        elif kind == 4:  # an exact tie at some precision
            x = (rnd.randint(-10**7, 10**7) + 0.5) / 10 ** rnd.randint(0, 7)
        else:
            x = rnd.uniform(0, 1e-3)
        out.append(x)
    return [x for x in out if math.isfinite(x)]


def check_number(x: float) -> None:
    for p in (0, 1, 2, 3, 6):
        try:
            expected = repr(round(x, p))
        except OverflowError:
            continue
        assert core.format("round", x, p) == expected, (x, p)
        assert core.format("fixed", x, p) == f"{x:.{p}f}", (x, p)
        assert core.format("fixed,", x, p) == f"{x:,.{p}f}", (x, p)
        assert core.format("pct", x, p) == f"{x:.{p}%}", (x, p)
    assert core.format("repr", x) == repr(x), x
    assert core.write_json(x) == json.dumps(x), x
    assert int(float(core.format("round0", x))) == round(x), x
    if abs(x) < 2**62:
        assert core.format("int,", x) == f"{int(x):,}", x


def test_number_formats_are_pythons() -> None:
    for x in _floats(random.Random(20261124), 20000):
        check_number(x)


@settings(max_examples=2000, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_number_formats_are_pythons_hypothesis(x: float) -> None:
    check_number(x)


def _value_lists(rnd: random.Random) -> list[list[int]]:
    out = []
    for trial in range(1200):
        n = rnd.randint(0, 300)
        kind = trial % 4
        if kind == 0:
            out.append([rnd.choice([8192, 4096, 87, 1448, 16384]) for _ in range(n)])
        elif kind == 1:
            out.append([rnd.randint(0, 5000) for _ in range(n)])
        elif kind == 2:  # past Quantiles' exact keys and Histogram's cap
            out.append([rnd.randint(-50, 10**7) for _ in range(n * 10)])
        else:
            out.append([rnd.randint(0, 3) for _ in range(n)])
    return out


def test_histograms_read_as_the_python_classes() -> None:
    rnd = random.Random(7)
    for values in _value_lists(rnd):
        cap = rnd.choice([4096, 256, 8, 3])
        h = Histogram(cap=cap)
        q = Quantiles()
        for v in values:
            h.add(v)
            q.add(v)
        assert core.histogram(values, cap, 12) == {
            "n": h.n, "median": h.median(), "hi": h.hi, "mode": h.mode(),
            "q95": h.quantile(0.95), "top": compact(h.top(12))}, (values[:20], cap)
        qs = [0.0, 0.5, 0.95, 1.0]
        assert core.quantiles(values, qs) == ([q.quantile(x) for x in qs], q.n, q.hi)


def test_bins_read_as_the_python_class() -> None:
    rnd = random.Random(11)
    for _ in range(1500):
        b = Bins()
        adds = []
        for _ in range(rnd.randint(0, 200)):
            i = rnd.choice([rnd.randint(0, 50), rnd.randint(0, 5000), rnd.randint(-3, 3)])
            k = rnd.randint(1, 1000)
            adds.append((i, k))
            b.add(i, k)
        end = rnd.randint(0, 300)
        assert core.bins(adds, end) == (len(b), b.most(), b.least(end), b.get(end // 2)), adds
