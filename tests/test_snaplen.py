"""Captures cut by a short snapshot length (the lab's snaplen-128 recordings in
captures/conditions/): every segment keeps its headers and a few payload bytes, so nearly every
message boundary is lost. The report still sizes responses from the sequence numbers, matches the
relay's queries, and says what the cut cost once per stream, not once per resync."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from pktflow.pipeline import analyze

ROOT = Path(__file__).resolve().parent.parent
CUT = sorted((ROOT / "captures" / "conditions").glob("*-snap128.pcap.gz"))


@pytest.mark.parametrize("capture", CUT, ids=lambda p: p.name.split(".")[0])
def test_a_short_snaplen_is_reported_once_per_stream(capture: Path) -> None:
    report = analyze(str(capture))
    resyncs = Counter((f["connection"], f["message"].split(" stream")[0])
                      for f in report["findings"] if f["code"] == "pgwire-resync")
    assert resyncs and max(resyncs.values()) == 1
    assert len(report["findings"]) < 30


@pytest.mark.parametrize("capture", CUT, ids=lambda p: p.name.split(".")[0])
def test_responses_are_sized_by_sequence_numbers(capture: Path) -> None:
    report = analyze(str(capture))
    for conn in report["connections"]:
        queries = conn.get("queries") or []
        carried = conn["directions"]["server_to_client"]["payload_bytes"]
        scans = [q for q in queries if q["sql"] == "SELECT * FROM t10k"]
        assert len(scans) == 1
        scan = scans[0]
        # the 10,000 rows are about 1.1 MB: the response holds nearly all the server sent
        assert 0.95 * carried <= scan["response_bytes"] <= carried
        assert scan["incomplete"] and scan["rows"] is None and scan["command_tag"] is None
        # what follows the scan keeps its own answer (PgBouncer's DISCARD ALL on the back leg)
        for q in queries:
            if q["sql"] == "DISCARD ALL":
                assert q["command_tag"] == "DISCARD ALL"


@pytest.mark.parametrize("capture", CUT, ids=lambda p: p.name.split(".")[0])
def test_the_relay_still_matches_and_costs_what_it_did(capture: Path) -> None:
    report = analyze(str(capture))
    (relay,) = report["relays"]
    assert relay["matched_queries"] == 1 and relay["unmatched_front_queries"] == 0
    (pair,) = relay["queries"]
    assert pair["response_bytes"]["front"] == pair["response_bytes"]["back"]
    assert "added -" not in relay["verdict"]["summary"]
