"""A pcap whose link-type field carries the frame-check-sequence bits (LT_FCS_LENGTH_PRESENT,
0x04000000, and the FCS length in 16-bit units above it): libpcap and tshark read the low 16
bits as the link type, and so does pktflow. The frames are a real capture's, each given the
Ethernet CRC-32 a NIC keeping the FCS would have captured."""

from __future__ import annotations

import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest

from pktflow.pipeline import analyze

ROOT = Path(__file__).resolve().parent.parent
CAPTURE = ROOT / "captures" / "seqscan-10k-direct-bridge.pcap"


def with_fcs(src: Path, dst: Path, field: int) -> Path:
    """`src` (little-endian pcap, Ethernet) with its link-type field set to `field` and each
    frame followed by its 4-byte FCS (the Ethernet CRC-32, least significant byte first)."""
    data = src.read_bytes()
    magic, major, minor, zone, sigfigs, snaplen, link = struct.unpack("<IHHiIII", data[:24])
    assert magic == 0xA1B2C3D4 and link == 1
    out = [struct.pack("<IHHiIII", magic, major, minor, zone, sigfigs, snaplen + 4, field)]
    pos = 24
    while pos + 16 <= len(data):
        sec, usec, incl, orig = struct.unpack("<IIII", data[pos:pos + 16])
        body = data[pos + 16:pos + 16 + incl]
        out += [struct.pack("<IIII", sec, usec, incl + 4, orig + 4), body,
                struct.pack("<I", zlib.crc32(body))]
        pos += 16 + incl
    dst.write_bytes(b"".join(out))
    return dst


def essentials(report: dict[str, Any]) -> list[Any]:
    """What must not change when frames carry an FCS: each connection's bytes, segments and
    queries."""
    return [(c["client"], c["server"], c["protocol"],
             [(d["payload_bytes"], d["data_segments"], d["max_segment"])
              for d in c["directions"].values()],
             [(q["sql"], q["rows"], q["response_bytes"]) for q in c["queries"]])
            for c in report["connections"]]


@pytest.mark.parametrize("field", [0x0400_0001, 0x2400_0001])
def test_fcs_flagged_pcap_reads_as_ethernet(tmp_path: Path, field: int) -> None:
    path = with_fcs(CAPTURE, tmp_path / "fcs.pcap", field)
    plain, flagged = analyze(str(CAPTURE)), analyze(str(path))
    assert flagged["capture"]["link_types"] == ["EN10MB"]
    assert flagged["capture"]["tcp_packets"] == plain["capture"]["tcp_packets"] > 1000
    assert essentials(flagged) == essentials(plain)
    assert [f["code"] for f in flagged["findings"]] == [f["code"] for f in plain["findings"]]


@pytest.mark.skipif(subprocess.run(["which", "tshark"], capture_output=True).returncode,
                    reason="tshark is not installed")
def test_tshark_reads_the_same_frames_as_ethernet(tmp_path: Path) -> None:
    """The witness: tshark takes 0x24000001 for Ethernet with a 4-byte FCS and finds the
    same TCP payload pktflow does."""
    path = with_fcs(CAPTURE, tmp_path / "fcs.pcap", 0x2400_0001)
    out = subprocess.run(["tshark", "-n", "-r", str(path), "-T", "fields", "-e", "frame.protocols",
                          "-e", "tcp.len"], check=True, capture_output=True, text=True).stdout
    rows = [line.split("\t") for line in out.splitlines()]
    assert rows and all(r[0].startswith("eth:ethertype:ip:tcp") for r in rows)
    report = analyze(str(path))
    carried = sum(d["payload_bytes"] for c in report["connections"]
                  for d in c["directions"].values())
    assert carried == sum(int(r[1] or 0) for r in rows)
