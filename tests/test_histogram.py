"""The core's histograms as the report shows them, on crafted flows.

Histogram, Quantiles and Bins are Rust (analyzer/core/src/histogram.rs) with their unit tests
there (run-length counting against one update per value, reads mid-run, quantile error bounds,
bins sparse and dense, memory). Here: what each answers in a direction's report —
segment_size_histogram / segment_size_median and bytes_acked_histogram / pattern (Histogram:
counts, the cap and its rounding, top lists and the mode), in_flight and rtt_ms quantiles
(Quantiles: exact while few values, within a bucket past 1,024), best_100ms / worst_100ms
(Bins) — against the contract computed here from the values the flow was built with."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import pytest
from tcpfeed import Flow, write_capture

from pktflow.pipeline import analyze

CAPTURES = Path(__file__).resolve().parent.parent / "captures"

TOP_K = 12  # entries of a histogram's top list (pktflow_core::transfer::TOP_K)
CAP = 4096  # exact keys of a transfer Histogram, then 4 significant bits
EXACT_KEYS = 1024  # distinct values a Quantiles keeps exactly


def report_of(f: Flow, tmp_path: Path) -> dict[str, Any]:
    return analyze(str(write_capture(tmp_path / "flow.pcap", f.packets)))


def server_side(f: Flow, tmp_path: Path) -> dict[str, Any]:
    """The crafted flow's server->client direction in the report."""
    (conn,) = report_of(f, tmp_path)["connections"]
    return conn["directions"]["server_to_client"]


def send(f: Flow, size: int, **kw: Any) -> None:
    """A server segment of `size` bytes on the wire, its payload cut by the snapshot length
    (the file stays small; sequence accounting uses wire lengths)."""
    f.send(1, b"", plen=size, **kw)


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


def top(counts: dict[int, int]) -> dict[str, int]:
    """The report's top list: largest count first, smaller value first among equals."""
    best = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_K]
    return {str(v): c for v, c in best}


def exact_quantile(values: list[int], q: float) -> int:
    """The definition the core uses: the first value whose cumulative count passes q*(n-1)."""
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


def median_of(counts: dict[int, int]) -> int:
    return exact_quantile([v for v, c in counts.items() for _ in range(c)], 0.5)


def runs(rng: random.Random, n: int, distinct: int) -> list[int]:
    """Segment sizes in runs, as they come (never 0: that would be no data)."""
    out: list[int] = []
    while len(out) < n:
        out += [(rng.randrange(distinct) + 1) * 13] * rng.choice((1, 1, 2, 5, 40))
    return out[:n]


# -- Histogram: segment sizes, bytes per ACK ----------------------------------------------------

@pytest.mark.parametrize("seed,distinct", [(0, 3), (1, 50), (2, 2000), (3, 50)])
def test_segment_sizes_count_one_update_per_value(tmp_path: Path, seed: int,
                                                  distinct: int) -> None:
    rng = random.Random(seed)
    sizes = runs(rng, 3000, distinct)
    f = Flow()
    f.handshake()
    for i, size in enumerate(sizes):
        send(f, size)
        if i % 4 == 3:
            f.ack(0, win=65535)
    out = server_side(f, tmp_path)
    want = reference(sizes, CAP)
    assert out["segment_size_histogram"] == top(want)
    assert list(out["segment_size_histogram"]) == list(top(want)), "ordered as the top list"
    assert out["segment_size_median"] == median_of(want)
    assert out["max_segment"] == max(sizes)


def test_segment_sizes_past_the_cap_are_rounded(tmp_path: Path) -> None:
    """4,096 distinct sizes fill the exact keys; 5,000 and 5,100 bytes after them both count
    as 4,608 (4 significant bits), which tops the list though neither occurred."""
    sizes = list(range(1, CAP + 1))
    random.Random(7).shuffle(sizes)
    sizes += [5000] * 5 + [5100] * 7 + [17] * 3  # 17: an exact key already, counted exactly
    f = Flow()
    f.handshake()
    for i, size in enumerate(sizes):
        send(f, size, dt=0.00001)
        if i % 8 == 7:
            f.ack(0, win=65535)
    out = server_side(f, tmp_path)
    want = reference(sizes, CAP)
    assert want[4608] == 12 and 5000 not in want and want[17] == 4
    assert out["segment_size_histogram"] == top(want)
    assert list(out["segment_size_histogram"])[:2] == ["4608", "17"]
    assert out["segment_size_median"] == median_of(want)


def test_equal_counts_the_list_puts_the_smaller_value_first_the_pattern_the_median(
        tmp_path: Path) -> None:
    """Equal counts: the top list puts the smaller (1,000 B) first; as no size is most of the
    ACKs, the pattern gives the median ACK (2,000 B), not one of the tied sizes."""
    f = Flow()
    f.handshake()
    for size in [3000] * 6 + [1000] * 6 + [2000] * 2:
        send(f, size)
        f.ack(0, win=65535)
    out = server_side(f, tmp_path)
    assert out["acks"]["bytes_acked_histogram"] == {"1000": 6, "3000": 6, "2000": 2}
    assert list(out["acks"]["bytes_acked_histogram"]) == ["1000", "3000", "2000"]
    assert out["pattern"] == "ACKs vary: the median covers 1 segment, 2,000 B"
    assert out["acks"]["bytes_acked_median"] == 2000
    assert out["segment_size_histogram"] == {"1000": 6, "3000": 6, "2000": 2}


@pytest.mark.parametrize("sizes, said", [
    ([3000] * 8 + [1000] * 7, "1 ACK per 1 segment, 3,000 B (53% of ACKs)"),
    ([3000] * 7 + [1000] * 7 + [500], "ACKs vary: the median covers 1 segment, 1,000 B"),
])
def test_the_pattern_names_the_commonest_ack_only_when_it_is_most_of_them(
        tmp_path: Path, sizes: list[int], said: str) -> None:
    f = Flow()
    f.handshake()
    for size in sizes:
        send(f, size)
        f.ack(0, win=65535)
    assert server_side(f, tmp_path)["pattern"] == said


def test_every_ack_pattern_agrees_with_its_numbers() -> None:
    """On every shipped capture, each direction's pattern names the commonest ACK only where
    it is most ACKs, and then the median is that ACK; else it names the median. The pooled
    seqscan's server leg said "1 ACK per 2 segments, 8,192 B (11% of ACKs)" beside a median
    of 12,265 B over 3 segments."""
    checked = 0
    for capture in sorted(CAPTURES.glob("*.pcap")):
        for conn in analyze(str(capture))["connections"]:
            for d in conn["directions"].values():
                acks, said = d["acks"], d["pattern"]
                if not acks["count"]:
                    continue
                median = (acks["segments_per_ack_median"], acks["bytes_acked_median"])
                mode = re.fullmatch(r"1 ACK per (\d+) segments?, ([\d,]+) B \((\d+)% of ACKs\)",
                                    said)
                if mode:
                    share = acks["bytes_acked_histogram"][mode[2].replace(",", "")]
                    assert share * 2 > acks["count"], (capture.name, said)
                    assert int(mode[2].replace(",", "")) == median[1], (capture.name, said)
                else:
                    segs, nbytes = median
                    unit = "segment" if segs == 1 else "segments"
                    assert said == f"ACKs vary: the median covers {segs} {unit}, {nbytes:,} B"
                checked += 1
    assert checked > 50
    pooled = analyze(str(CAPTURES / "seqscan-10k-pgbouncer-loopback.pcap"))
    c2 = next(c for c in pooled["connections"] if c["id"] == "c2")
    assert c2["directions"]["server_to_client"]["pattern"] == \
        "ACKs vary: the median covers 3 segments, 12,265 B"


def test_a_direction_without_data_has_empty_histograms(tmp_path: Path) -> None:
    f = Flow()
    f.handshake()
    for _ in range(5):
        send(f, 1000)
        f.ack(0)
    (conn,) = report_of(f, tmp_path)["connections"]
    c2s = conn["directions"]["client_to_server"]
    assert c2s["segment_size_histogram"] == {} and c2s["segment_size_median"] is None
    assert c2s["acks"]["bytes_acked_histogram"] == {} and c2s["acks"]["count"] == 0
    assert c2s["acks"]["bytes_acked_median"] is None and c2s["pattern"] == "no ACKs advanced"
    assert c2s["in_flight"]["median"] is None and c2s["rtt_ms"] is None
    assert c2s["best_100ms"] is None and c2s["worst_100ms"] is None


# -- Quantiles: bytes in flight, RTTs ---------------------------------------------------------

def one_at_a_time(sizes: list[int]) -> Flow:
    """Each segment acknowledged before the next: the bytes in flight at each are its size."""
    f = Flow()
    f.handshake()
    for size in sizes:
        send(f, size)
        f.ack(0, win=65535)
    return f


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("spread", [200, 2000, 60_000])
def test_in_flight_median_within_a_bucket_of_the_exact_one(tmp_path: Path, seed: int,
                                                           spread: int) -> None:
    rng = random.Random(seed)
    sizes = [1 + int(rng.lognormvariate(0, 2) * spread) % spread for _ in range(3000)]
    sizes += [1 + rng.randrange(spread)] * 300  # a run
    rng.shuffle(sizes)
    out = server_side(one_at_a_time(sizes), tmp_path)
    want, got = exact_quantile(sizes, 0.5), out["in_flight"]["median"]
    assert out["in_flight"]["max"] == max(sizes)
    assert got in sizes, "a quantile is a value that occurred"
    if want < 256 or len(set(sizes)) <= EXACT_KEYS:
        assert got == want
    else:
        assert want * (1 - 1 / 128) < got <= want, (want, got)


def test_in_flight_median_exact_on_a_repeated_size_past_1024_values(tmp_path: Path) -> None:
    """Bulk transfers repeat a few sizes: the median on one of them stays exact once many
    distinct larger values have moved the counts into buckets."""
    many = [40_000 + 7 * i for i in range(EXACT_KEYS + 1)]  # distinct, several a bucket
    sizes = [1448] * 1200 + [536] * 300 + [3] * 10 + many
    random.Random(3).shuffle(sizes)
    out = server_side(one_at_a_time(sizes), tmp_path)
    assert exact_quantile(sizes, 0.5) == 1448 and out["in_flight"]["median"] == 1448


def test_rtt_quantiles_within_a_bucket(tmp_path: Path) -> None:
    """2,000 distinct round trips (microseconds): median and p95 are sampled values (to the
    microsecond the clock gives), at most a bucket (1/128) below the exact ones."""
    rng = random.Random(11)
    rtts = rng.sample(range(300, 80_000), 2000)
    f = Flow()
    f.handshake()
    for us in rtts:
        send(f, 1000, dt=0.001)
        f.ack(0, win=65535, dt=us * 1e-6)
    rtt = server_side(f, tmp_path)["rtt_ms"]
    assert rtt["samples"] == len(rtts)
    assert rtt["min"] == pytest.approx(min(rtts) / 1000, abs=0.002)
    for q, key in ((0.5, "median"), (0.95, "p95")):
        want, got = exact_quantile(rtts, q), round(rtt[key] * 1000)
        assert any(abs(got - v) <= 1 for v in rtts), (key, got)
        assert want * (1 - 1 / 128) - 1 <= got <= want + 1, (key, want, got)


def test_a_clock_stepping_back_gives_negative_rtts_that_count(tmp_path: Path) -> None:
    """An ACK stamped before its data (the clock stepped back): the sample is negative and
    counted, never lost."""
    f = Flow()
    f.handshake()
    for i in range(6):
        send(f, 1000, dt=0.01)
        f.ack(0, win=65535, dt=-0.002 if i < 4 else 0.003)
    rtt = server_side(f, tmp_path)["rtt_ms"]
    assert rtt["samples"] == 6
    assert rtt["min"] == pytest.approx(-2.0, abs=0.002)
    assert rtt["median"] == pytest.approx(-2.0, abs=0.002)
    assert rtt["p95"] == pytest.approx(3.0, abs=0.002)


# -- Bins: bytes per 100 ms ---------------------------------------------------------------------

def best_and_worst(ref: dict[int, int], end: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(index, bytes) of the busiest bin (the lowest index among equals) and of the quietest in
    [0, end): the first empty one if any, else the smallest count, the lowest among equals."""
    most = max(ref.values())
    best = min(k for k, v in ref.items() if v == most)
    missing = [k for k in range(end) if k not in ref]
    worst = missing[0] if missing else min(range(end), key=lambda k: ref[k], default=0)
    return (best, most), (worst, ref.get(worst, 0))


@pytest.mark.parametrize("seed", [*range(8), 14, 29])  # 14, 29: bins before the first
def test_best_and_worst_100ms_as_a_dict_of_counts(tmp_path: Path, seed: int) -> None:
    """Bytes per 100 ms bin of a flow against a plain dict: busy (every bin, past the switch to
    an array) and idle (sparse) flows, bins revisited by a clock stepping back, ties."""
    rng = random.Random(seed)
    f = Flow()
    f.handshake()
    f.t = first = 1_700_000_001.0  # the first data segment's time, on a bin boundary
    ref: dict[int, int] = {}
    i, gap = 0, rng.choice([1, 1, 3, 50])  # 1: every bin has bytes
    for _ in range(rng.choice([5, 40, 300])):
        if rng.random() < 0.05 and ref:
            j = rng.randrange(-3, i + 1)  # back in time, even before the first segment
        else:
            i += rng.randrange(1, gap + 1) if ref else 0
            j = i
        size = rng.choice([1448, 700, 700, 700])  # equal sizes: ties
        t = first + j / 10 + 0.05 if ref else first  # later ones mid-bin: in no other
        f.send(1, b"", plen=size, dt=t - f.t)
        k = int((t - first) * 10)  # truncated: -2.5 is bin -2, -0.5 bin 0
        ref[k] = ref.get(k, 0) + size
    f.ack(0, win=65535, dt=0.001)
    report = report_of(f, tmp_path)
    (conn,) = report["connections"]
    out = conn["directions"]["server_to_client"]
    last = f.packets[-2][1]  # the last data segment: its bin is not judged
    if last - first < 0.2:
        assert out["best_100ms"] is None and out["worst_100ms"] is None
        return
    (bi, bb), (wi, wb) = best_and_worst(ref, int((last - first) * 10))
    start = f.packets[0][1]
    assert out["best_100ms"]["bps"] == bb * 80  # bits per second
    assert out["best_100ms"]["start_s"] == pytest.approx(first + bi / 10 - start, abs=1e-5)
    assert out["worst_100ms"]["bps"] == wb * 80
    assert out["worst_100ms"]["start_s"] == pytest.approx(first + wi / 10 - start, abs=1e-5)
