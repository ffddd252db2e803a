"""One convention for units everywhere pktflow writes: sizes in bytes, rounded in binary units
(KiB, MiB, GiB of 1,024), rates in bits per second (decimal); and a direction's goodput is
not left to read as a query's rate."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from pktflow.cli import Env, main

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "captures"
POOLED = [CAPTURES / "pgdump-20k-pgbouncer-loopback.pcap",
          CAPTURES / "seqscan-10k-pgbouncer-loopback.pcap"]
# a size in decimal or ambiguous units ("1.1 MB", "8 KB", "64 kB"); rates are "Mbit/s"
DECIMAL_SIZE = re.compile(r"(?<![\w.,])\d[\d,.]*\s?(kB|KB|MB|GB)\b(?!/s)")  # not EN10MB


def run(*argv: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Env(stdout=out, stderr=err, width=200))
    assert code == 0, err.getvalue()
    return out.getvalue()


@pytest.mark.parametrize("capture", POOLED, ids=lambda p: p.stem)
def test_text_html_and_plots_write_sizes_in_binary_units(tmp_path: Path, capture: Path) -> None:
    text = run("analyze", str(capture))
    flow = run("flow", str(capture), "--explain")
    run("report", str(capture), "-o", str(tmp_path / "r.html"))
    run("plot", str(capture), "-o", str(tmp_path / "p.svg"))
    page = (tmp_path / "r.html").read_text()
    plot = (tmp_path / "p.svg").read_text()
    for name, said in (("text", text), ("flow", flow), ("html", page), ("plot", plot)):
        assert not DECIMAL_SIZE.findall(said), (name, DECIMAL_SIZE.findall(said))
    # the answer's sizes are rounded in MiB; the plots' byte axes are KiB
    biggest = max(d["payload_bytes"] for c in json.loads(run("analyze", "--format", "json",
                                                               str(capture)))["connections"]
                  for d in c["directions"].values())
    assert f"{biggest / 2**20:,.1f} MiB" in text and f"{biggest / 2**20:,.1f} MiB" in page
    assert "KiB" in plot and "Mbit/s" in plot


@pytest.mark.parametrize("capture", sorted(CAPTURES.glob("*.pcap")) + sorted(
    (CAPTURES / "conditions").glob("*.pcap.gz")), ids=lambda p: p.name)
def test_every_sentence_of_every_report_writes_sizes_in_binary_units(capture: Path) -> None:
    """The JSON report holds every sentence pktflow words (verdicts, relay settings, findings,
    round trips): none says "KB", "kB" or "MB" ("8 KB" meant 8,192 where "1.1 MB" meant
    1,100,000)."""
    report = run("analyze", "--format", "json", str(capture))
    assert not DECIMAL_SIZE.findall(report), DECIMAL_SIZE.findall(report)


def _keys(value: Any, path: str = "") -> list[str]:
    if isinstance(value, dict):
        return [k for key, v in value.items() for k in [key, *_keys(v, key)]]
    if isinstance(value, list):
        return [k for v in value for k in _keys(v, path)]
    return []


def test_json_names_say_bytes_and_bits_per_second() -> None:
    """No size in JSON in another unit than bytes, and every rate is `*_bps` or `bps`."""
    for capture in POOLED:
        keys = set(_keys(json.loads(run("analyze", "--format", "json", str(capture)))))
        assert not [k for k in keys if re.search(r"(^|_)(kb|kib|mb|mib|kbit|mbit)(_|$)", k,
                                                 re.I)]
        assert {k for k in keys if "rate" in k or "goodput" in k or "throughput" in k} <= {
            "goodput_bps", "delivery_rate_bps"}
        assert "goodput_bps" in keys


def test_a_directions_goodput_is_not_read_as_a_querys_rate() -> None:
    """pg_dump through PgBouncer: the COPY moves at 1.5 Gbit/s, while the server leg's data from
    first segment to last, the pauses between 66 queries included, is 332.5 Mbit/s. The text
    says which is which where the direction's figure stands."""
    from pktflow.rates import format_rate

    report = json.loads(run("analyze", "--format", "json", str(POOLED[0])))
    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", run("analyze", str(POOLED[0]))).split())
    for conn in report["connections"]:
        d = conn["directions"]["server_to_client"]
        fastest = max(q["goodput_bps"] or 0 for q in conn["queries"])
        assert d["goodput_bps"] < fastest / 3  # the two figures differ this much
        assert (f"goodput {format_rate(d['goodput_bps'])} over the whole connection: its first "
                f"data segment to its last, the waits between queries included (a query's rate "
                f"counts its own response alone)") in text
        assert format_rate(fastest) in text
