"""pktflow on the real captures in captures/, cross-checked against tshark's own analysis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tsharkcheck import TSHARK, pktflow_directions, tshark_directions

from pktflow.pipeline import analyze

CAPTURES = sorted(p for p in (Path(__file__).resolve().parent.parent / "captures").iterdir()
                  if p.suffix in (".pcap", ".pcapng", ".gz"))


def test_corpus_is_present() -> None:
    assert CAPTURES, "captures/ must hold at least one real capture"


@pytest.fixture(scope="module", params=CAPTURES, ids=[p.name for p in CAPTURES])
def analysed(request: pytest.FixtureRequest) -> tuple[Path, dict]:  # type: ignore[type-arg]
    path: Path = request.param
    return path, analyze(str(path))


def test_report_is_json_and_complete(analysed: tuple[Path, dict]) -> None:  # type: ignore[type-arg]
    path, report = analysed
    assert report["schema"] == "pktflow.report/1"
    json.dumps(report)
    cap = report["capture"]
    assert cap["damage"] is None and cap["tcp_packets"] > 0
    assert cap["packets"] == cap["tcp_packets"] + cap["non_tcp_packets"] + \
        cap["undecodable_packets"] + cap["ip_fragments"]
    for conn in report["connections"]:
        for d in conn["directions"].values():
            assert d["gaps"] == 0, f"{path.name} {conn['id']}: a clean lab capture has no gaps"


@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed (Debian package tshark)")
def test_tcp_counts_agree_with_tshark(analysed: tuple[Path, dict]) -> None:  # type: ignore[type-arg]
    path, report = analysed
    assert pktflow_directions(report) == tshark_directions(path)
