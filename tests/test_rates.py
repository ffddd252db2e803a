"""Rates are bits per second, as `*_bps` says; a transfer too small to measure has none; text
writes every rate in one family (bit/s, kbit/s, Mbit/s, Gbit/s)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from pktflow.cli import Env, main
from pktflow.pipeline import analyze
from pktflow.rates import MIN_SEGMENTS, MIN_SPAN_S, bits_per_second, format_rate

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "captures"
BYTE_RATES = re.compile(r"\d\s*[kMG]?B/s")


def test_bits_and_the_threshold() -> None:
    assert bits_per_second(1_000_000, 0.01, 100) == 800_000_000
    assert bits_per_second(3_000, 0.01, MIN_SEGMENTS - 1) is None
    assert bits_per_second(3_000_000, MIN_SPAN_S / 2, 100) is None
    assert bits_per_second(3_000_000, MIN_SPAN_S, MIN_SEGMENTS) == 240_000_000_000


@pytest.mark.parametrize(("bps", "text"), [(None, "-"), (999, "999 bit/s"),
                                           (1_500, "1.5 kbit/s"), (806_647_432, "806.6 Mbit/s"),
                                           (1.2e9, "1.2 Gbit/s")])
def test_one_unit_family(bps: float | None, text: str) -> None:
    assert format_rate(bps) == text


def test_query_and_direction_rates_on_a_real_capture() -> None:
    report = analyze(str(CAPTURES / "seqscan-10k-direct-loopback.pcap"))
    (conn,) = report["connections"]
    (q,) = [q for q in conn["queries"] if q["rows"] == 10_000]
    span = q["last_response_s"] - q["first_response_s"]
    assert q["goodput_bps"] == pytest.approx(8 * q["response_bytes"] / span, rel=1e-3)
    assert 1e9 < q["goodput_bps"] < 2e9  # 1.15 MB in 7.6 ms on loopback: bits, not bytes
    s2c = conn["directions"]["server_to_client"]
    assert s2c["goodput_bps"] > 8 * s2c["payload_bytes"]  # over less than a second
    # a direction of one to three segments has no rate either
    dirs = [d for p in ("seqscan-10k-pgbouncer-loopback.pcap", "tls-direct-loopback.pcap",
                        "extended-direct-loopback.pcap")
            for c in analyze(str(CAPTURES / p))["connections"] for d in c["directions"].values()]
    few = [d for d in dirs if 0 < d["data_segments"] < MIN_SEGMENTS]
    assert few and all(d["goodput_bps"] is None for d in few)
    assert all(d["goodput_bps"] for d in dirs if d["data_segments"] >= 20)


def test_small_responses_have_no_rate() -> None:
    """pg_dump's catalogue queries: a response in one to three segments gets no rate (it was
    "1.5 GB/s" for 3 KB); the COPY has one."""
    report = analyze(str(CAPTURES / "pgdump-20k-direct-loopback.pcap"))
    queries = [q for c in report["connections"] for q in c["queries"]]
    small = [q for q in queries if q["response_segments"] < MIN_SEGMENTS]
    assert small and all(q["goodput_bps"] is None for q in small)
    (copy,) = [q for q in queries if q["kind"] == "copy"]
    assert copy["goodput_bps"] and copy["goodput_bps"] > 1e8


@pytest.mark.parametrize("name", ["seqscan-10k-pgbouncer-loopback.pcap",
                                  "pgdump-20k-pgbouncer-loopback.pcap",
                                  "seqscan-10k-direct-bridge.pcap"])
def test_text_writes_rates_in_bits(name: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert main(["analyze", str(CAPTURES / name)], Env(stdout=out, stderr=err, width=160)) == 0
    text = out.getvalue()
    assert not BYTE_RATES.search(text), BYTE_RATES.search(text)
    assert re.search(r"\d (k|M|G)bit/s", text)


def test_compare_writes_rates_in_bits() -> None:
    out, err = io.StringIO(), io.StringIO()
    code = main(["compare", str(CAPTURES / "seqscan-10k-direct-loopback.pcap"),
                 str(CAPTURES / "seqscan-10k-pgbouncer-loopback.pcap")],
                Env(stdout=out, stderr=err, width=160))
    assert code == 0, err.getvalue()
    assert not BYTE_RATES.search(out.getvalue()) and "bit/s" in out.getvalue()
