"""Captures cut by a short snapshot length (the lab's snaplen-128 recordings in
captures/conditions/): every segment keeps its headers and a few payload bytes, so nearly every
message boundary is lost. The report still sizes responses from the sequence numbers, matches the
relay's queries, and says what the cut cost once for the capture, not once per stream or resync."""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pktflow.pipeline import analyze

ROOT = Path(__file__).resolve().parent.parent
CUT = sorted((ROOT / "captures" / "conditions").glob("*-snap128.pcap.gz"))


@pytest.mark.parametrize("capture", CUT, ids=lambda p: p.name.split(".")[0])
def test_a_short_snaplen_is_one_finding(capture: Path) -> None:
    report = analyze(str(capture))
    codes = Counter(f["code"] for f in report["findings"])
    assert codes["snaplen"] == 1
    assert not codes["truncated-payload"] and not codes["pgwire-resync"]
    (cut,) = [f for f in report["findings"] if f["code"] == "snaplen"]
    cap = report["capture"]
    nbytes = sum(d["truncated_bytes"] for c in report["connections"]
                 for d in c["directions"].values())
    assert f"{cap['truncated_packets']:,} packets were cut" in cut["message"]
    assert f"{nbytes:,} payload bytes" in cut["message"] and cut["frames"]


def _cut_to(src: Path, dst: Path, snaplen: int) -> Path:
    """src (a little-endian microsecond pcap) as tcpdump -s snaplen would have written it."""
    data = src.read_bytes()
    header = bytearray(data[:24])
    header[16:20] = snaplen.to_bytes(4, "little")
    out, pos = [bytes(header)], 24
    while pos + 16 <= len(data):
        ts, incl, orig = data[pos:pos + 8], int.from_bytes(data[pos + 8:pos + 12], "little"), \
            data[pos + 12:pos + 16]
        keep = min(incl, snaplen)
        out += [ts, keep.to_bytes(4, "little"), orig, data[pos + 16:pos + 16 + keep]]
        pos += 16 + incl
    dst.write_bytes(b"".join(out))
    return dst


def test_a_pooled_pg_dump_cut_to_200_bytes_matches_every_query(tmp_path: Path) -> None:
    """The issue's case: pg_dump through PgBouncer, 200 bytes per packet. Its catalogue
    queries are longer than what a packet keeps; they still pair, by the start of their SQL."""
    whole = ROOT / "captures" / "pgdump-20k-pgbouncer-loopback.pcap"
    full = analyze(str(whole))
    cut = analyze(str(_cut_to(whole, tmp_path / "cut.pcap", 200)))
    assert cut["capture"]["truncated_packets"] > 1000
    (a,), (b,) = full["relays"], cut["relays"]
    assert b["matched_queries"] == a["matched_queries"] == 65
    assert b["unmatched_front_queries"] == b["unmatched_back_queries"] == 0
    assert b["verdict"]["relay_ms"] == pytest.approx(a["verdict"]["relay_ms"], abs=0.01)
    assert all(p["relay_cost_ms"] is None or p["relay_cost_ms"] >= 0 for p in b["queries"])
    copy = max(b["queries"], key=lambda p: p["response_bytes"]["back"] or 0)
    whole_copy = max(a["queries"], key=lambda p: p["response_bytes"]["back"] or 0)
    assert copy["response_bytes"] == whole_copy["response_bytes"]  # 2 MB, not 859 MB
    assert [f["code"] for f in cut["findings"]].count("snaplen") == 1
    assert len(cut["findings"]) < 10


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


WHOLE = sorted((ROOT / "captures").glob("*.pcap"))


def _connections(report: dict[str, Any]) -> list[Any]:
    return [(c["client"], c["server"], c["handshake_seen"], c["packets"],
             [(d["payload_bytes"], d["data_segments"]) for d in c["directions"].values()])
            for c in report["connections"]]


@pytest.mark.parametrize("snaplen", [54, 68])
@pytest.mark.parametrize("capture", WHOLE, ids=lambda p: p.stem)
def test_a_header_whose_options_were_cut_still_counts(tmp_path: Path, capture: Path,
                                                      snaplen: int) -> None:
    """At -s 54 an Ethernet frame keeps IP and TCP's first 20 bytes; at -s 68 a SYN keeps 14
    of its 20 option bytes. Each is still its packet: the connections, their handshakes and
    their bytes (from sequence numbers) are those of the whole capture, and the SYNs whose
    options were cut are named, the frames tshark shows as SYNs."""
    whole = analyze(str(capture))
    cut = analyze(str(_cut_to(capture, tmp_path / "cut.pcap", snaplen)))
    assert cut["capture"]["tcp_packets"] == whole["capture"]["tcp_packets"]
    assert cut["capture"]["undecodable_packets"] == 0
    assert _connections(cut) == _connections(whole)
    named = sorted(f for x in cut["findings"] if x["code"] == "syn-options-cut"
                   for f in x["frames"])
    for a, b in zip(cut["connections"], whole["connections"]):
        for key, d in a["directions"].items():
            # an option read before the cut stands (the MSS comes first), the rest is unknown
            assert d["mss"] in (None, b["directions"][key]["mss"])
            assert d["window_scale"] in (None, b["directions"][key]["window_scale"])
    if shutil.which("tshark"):
        out = subprocess.run(["tshark", "-n", "-r", str(capture), "-Y", "tcp.flags.syn==1",
                              "-T", "fields", "-e", "frame.number"], check=True,
                             capture_output=True, text=True).stdout
        assert named == [int(f) for f in out.split()]
    assert not [f for f in cut["findings"] if f["code"] == "window-scale-unknown"
                and f["connection"] in {c["id"] for c in cut["connections"]
                                        if c["handshake_seen"]}]
