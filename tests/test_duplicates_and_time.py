"""Two capture faults on real captures (issue 36): the same packets captured twice (tcpdump -i
any on a host with a bridge; test_lab_capture_faults.py records one for real), and timestamps
that go back or jump by years. Copies are counted once, with a finding of how many were
dropped; a jump is a finding naming its frame, and durations and rates keep sane spans."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
from encap import records

from pktflow.pipeline import analyze

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = [ROOT / "captures" / n for n in ("seqscan-10k-pgbouncer-bridge.pcap",
                                          "pgbench-txn-pgbouncer-loopback.pcap")]
LINKTYPE_SLL2 = 276


def _header(link: int) -> bytes:
    return struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, link)


def _rec(sec: int, usec: int, frame: bytes) -> bytes:
    return struct.pack("<IIII", sec, usec, len(frame), len(frame)) + frame


def _sll2(frame: bytes, ifindex: int, pkttype: int) -> bytes:
    """An Ethernet frame as tcpdump -i any writes it: the SLL2 header, then the IP packet."""
    return struct.pack(">HHIHBB", 0x0800, 0, ifindex, 1, pkttype, 6) + frame[:6] + b"\0\0" \
        + frame[14:]


def twice_on_a_bridge(src: Path, dst: Path) -> Path:
    """Every packet twice, as tcpdump -i any shows a bridged packet: coming in on one port
    (incoming) and leaving by another (outgoing) 12 us later."""
    out = [_header(LINKTYPE_SLL2)]
    for ts, frame in records(src):
        sec, usec = struct.unpack("<II", ts)
        out.append(_rec(sec, usec, _sll2(frame, 3, 0)))
        later = usec + 12
        out.append(_rec(sec + later // 1_000_000, later % 1_000_000, _sll2(frame, 5, 4)))
    dst.write_bytes(b"".join(out))
    return dst


def once_as_sll2(src: Path, dst: Path) -> Path:
    out = [_header(LINKTYPE_SLL2)]
    out += [_rec(*struct.unpack("<II", ts), _sll2(frame, 3, 0)) for ts, frame in records(src)]
    dst.write_bytes(b"".join(out))
    return dst


def essentials(report: dict[str, Any]) -> list[Any]:
    return [(c["client"], c["server"], c["packets"],
             [(d["payload_bytes"], d["data_segments"], d["retransmitted_segments"],
               d["out_of_order_segments"]) for d in c["directions"].values()],
             [(q["sql"], q["rows"], q["response_bytes"]) for q in c["queries"]])
            for c in report["connections"]]


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.stem)
def test_packets_captured_twice_are_counted_once(tmp_path: Path, capture: Path) -> None:
    once = analyze(str(once_as_sll2(capture, tmp_path / "once.pcap")))
    twice = analyze(str(twice_on_a_bridge(capture, tmp_path / "twice.pcap")))
    assert essentials(twice) == essentials(once)
    cap = twice["capture"]
    assert cap["duplicates"]["packets"] == cap["tcp_packets"] == once["capture"]["tcp_packets"]
    assert cap["packets"] == 2 * once["capture"]["packets"]
    copy, original = cap["duplicates"]["frames"][0]
    assert (copy, original) == (2, 1)
    (found,) = [f for f in twice["findings"] if f["code"] == "duplicate-packets"]
    assert f"{cap['tcp_packets']:,} TCP packets were captured twice" in found["message"]
    assert found["frames"][:3] == [2, 4, 6]
    assert not [f for f in twice["findings"] if f["code"] == "retransmission"]


@pytest.mark.skipif(shutil.which("editcap") is None, reason="editcap is not installed")
def test_editcap_drops_as_many(tmp_path: Path) -> None:
    """The witness: editcap -d (identical frames within 5 packets) drops as many copies of a
    capture whose every Ethernet frame was captured twice, 12 us apart."""
    src = CAPTURES[0]
    out = [_header(1)]
    for ts, frame in records(src):
        sec, usec = struct.unpack("<II", ts)
        out += [_rec(sec, usec, frame), _rec(sec, usec + 12, frame)]
    twice = tmp_path / "twice.pcap"
    twice.write_bytes(b"".join(out))
    said = subprocess.run(["editcap", "-d", str(twice), str(tmp_path / "d.pcap")], check=True,
                          capture_output=True, text=True)
    skipped = int(re.search(r"(\d+) packets skipped", said.stdout + said.stderr).group(1))
    report = analyze(str(twice))
    assert report["capture"]["duplicates"]["packets"] == skipped > 1000


def with_times(src: Path, dst: Path, stamp: dict[int, tuple[int, int]]) -> Path:
    """`src` with the timestamps of some frames (1-based) replaced by (seconds, fraction)."""
    out = [src.read_bytes()[:24]]
    for n, (ts, frame) in enumerate(records(src), 1):
        sec, frac = stamp.get(n, struct.unpack("<II", ts))
        out.append(_rec(sec, frac, frame))
    dst.write_bytes(b"".join(out))
    return dst


def test_a_timestamp_thirty_years_back_is_a_finding_and_spans_stay_sane(tmp_path: Path) -> None:
    src = CAPTURES[0]
    whole = analyze(str(src))
    stamps = {n: struct.unpack("<II", ts) for n, (ts, _) in enumerate(records(src), 1)}
    bad = {40: (stamps[40][0] - 946_728_000, stamps[40][1]),  # 30 years early
           900: (stamps[900][0], 2_566_914_091)}  # microseconds no clock gives
    report = analyze(str(with_times(src, tmp_path / "jumps.pcap", bad)))
    (found,) = [f for f in report["findings"] if f["code"] == "time-jump"]
    assert found["frames"] == [40, 41, 900, 901]
    assert "frame 40 jumps 30.0 years back" in found["message"]
    # one timeline: every span is the capture's, to the frame a jump stands for
    assert report["capture"]["duration_s"] == whole["capture"]["duration_s"]
    for a, b in zip(report["connections"], whole["connections"]):
        assert abs(a["end_s"] - b["end_s"]) < 0.01 and a["start_s"] == b["start_s"]
        for key in ("client_to_server", "server_to_client"):
            da, db = a["directions"][key], b["directions"][key]
            assert (da["goodput_bps"] is None) == (db["goodput_bps"] is None)
            if da["goodput_bps"]:
                assert abs(da["goodput_bps"] / db["goodput_bps"] - 1) < 0.05


def test_steps_back_are_a_finding_and_kept(tmp_path: Path) -> None:
    """Packets merged out of order by 0.4 s: counted and named, their times kept."""
    src = CAPTURES[1]
    stamps = {n: struct.unpack("<II", ts) for n, (ts, _) in enumerate(records(src), 1)}
    sec, usec = stamps[100]
    earlier = (sec, usec - 400_000) if usec >= 400_000 else (sec - 1, usec + 600_000)
    report = analyze(str(with_times(src, tmp_path / "back.pcap", {100: earlier})))
    (found,) = [f for f in report["findings"] if f["code"] == "time-backward"]
    assert found["frames"] == [100] and "1 time(s), by at most 399." in found["message"]
    assert not [f for f in report["findings"] if f["code"] == "time-jump"]
    tl = report["capture"]["timeline"]
    assert (tl["backward_steps"], tl["jumps_total"]) == (1, 0)
