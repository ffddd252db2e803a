"""Finding PostgreSQL exactly (issue 36), measured per connection on a corpus built at run
time from the project's own captures: each cut to snaplens 54, 68, 96, 128 and 200 (as tcpdump
-s writes them), and each picked up mid-stream (every connection's handshake and first
exchanges cut away), against how the capture was made (every connection in them is
PostgreSQL) and against tshark's pgsql dissector told the ports with -d. The other protocols'
side of the corpus (precision) needs the lab: test_lab_detection.py.

Done when: every tshark-confirmed PostgreSQL connection is found at snaplen 96 and above with
its queries matched, and nothing is called PostgreSQL that is not."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from detection import Tally, mid_stream, snaplen, tshark_pgsql

from pktflow.pipeline import analyze

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = sorted((ROOT / "captures").glob("*.pcap"))
pytestmark = pytest.mark.skipif(shutil.which("tshark") is None,
                                reason="tshark is not installed (Debian package tshark)")


def ports(capture: Path) -> list[int]:
    return list(json.loads(capture.with_suffix(".json").read_text())["ports"].values())


def tally(tmp: Path, variant: str) -> Tally:
    t = Tally()
    for capture in CAPTURES:
        if variant == "whole":
            path = capture
        elif variant == "mid-stream":
            path = mid_stream(capture, tmp / f"{capture.stem}-mid.pcap")
        else:
            path = snaplen(capture, tmp / f"{capture.stem}-{variant}.pcap", int(variant[1:]))
        t.add(path.name, True, analyze(str(path)), tshark_pgsql(path, ports(capture)))
    return t


@pytest.mark.parametrize("variant", ["whole", "s96", "s128", "s200"])
def test_every_confirmed_connection_is_found_with_its_queries(tmp_path: Path,
                                                              variant: str) -> None:
    t = tally(tmp_path, variant)
    assert t.tshark_confirmed == t.truth_pg == 36
    assert t.recall_of_confirmed == 1.0, "\n".join(t.missed)
    assert t.precision == 1.0


@pytest.mark.parametrize("variant", ["s54", "s68"])
def test_below_96_nothing_is_guessed_and_each_connection_says_why(tmp_path: Path,
                                                                  variant: str) -> None:
    """At -s 54 no payload byte is captured, at -s 68 two of each segment: neither pktflow
    nor tshark can find PostgreSQL. pktflow guesses nothing, keeps every handshake, and says
    why each connection with payload is not taken as PostgreSQL."""
    t = tally(tmp_path, variant)
    assert (t.tshark_pg, t.found, t.false) == (0, 0, 0)
    for capture in CAPTURES[:4]:
        report = analyze(str(snaplen(capture, tmp_path / "c.pcap", int(variant[1:]))))
        said = {f["connection"] for f in report["findings"] if f["code"] == "not-postgresql"}
        carrying = {c["id"] for c in report["connections"]
                    if any(d["payload_bytes"] for d in c["directions"].values())}
        assert said == carrying


def test_mid_stream_is_proven_or_not_taken(tmp_path: Path) -> None:
    """Picked up mid-stream, a connection is PostgreSQL only with proof: nothing else is
    called PostgreSQL, and most are proven (a connection whose rest is one COPY has no
    request answered in what remains)."""
    t = tally(tmp_path, "mid-stream")
    assert t.false == 0 and t.found >= 0.9 * t.truth_pg, t.line("mid-stream")
