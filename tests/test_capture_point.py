"""Where the capture was taken, from the handshake's timing. Real lab captures are all on one
host (no netem here to add delay), so the far-away cases are crafted: scapy packets with the
timestamps a capture at the client, at the server or in between would have."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from craft import tcp_segment

from pktflow.pipeline import analyze

CAPTURES = Path(__file__).resolve().parent.parent / "captures"
LINKTYPE_RAW = 101


def write(path: Path, packets: list[tuple[float, bytes]]) -> Path:
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, LINKTYPE_RAW)]
    for ts, data in packets:
        sec = int(ts)
        out.append(struct.pack("<IIII", sec, round((ts - sec) * 1e6), len(data), len(data)) + data)
    path.write_bytes(b"".join(out))
    return path


def handshake_then_query(syn_to_synack: float, synack_to_ack: float) -> list[tuple[float, bytes]]:
    c = {"src": "10.0.0.1", "dst": "10.0.0.2", "sport": 40000, "dport": 5432}
    s = {"src": "10.0.0.2", "dst": "10.0.0.1", "sport": 5432, "dport": 40000}
    t = 1000.0
    q = b"Q\x00\x00\x00\x0dSELECT 1\x00"
    pkts = [(t, tcp_segment(**c, seq=100, ack=0, flags="S")),
            (t + syn_to_synack, tcp_segment(**s, seq=500, ack=101, flags="SA")),
            (t + syn_to_synack + synack_to_ack, tcp_segment(**c, seq=101, ack=501, flags="A"))]
    t = pkts[-1][0] + 0.001
    pkts += [(t, tcp_segment(q, **c, seq=101, ack=501)),
             (t + 0.02, tcp_segment(**s, seq=501, ack=101 + len(q), flags="A"))]
    return pkts


@pytest.mark.parametrize("a,b,where", [(0.020, 0.00005, "client"), (0.00005, 0.020, "server"),
                                       (0.010, 0.012, "between"),
                                       (0.00002, 0.00003, "same host")])
def test_position_from_handshake(tmp_path: Path, a: float, b: float, where: str) -> None:
    report = analyze(str(write(tmp_path / "c.pcap", handshake_then_query(a, b))))
    (conn,) = report["connections"]
    cp = conn["capture_point"]
    assert cp["position"] == where, cp
    assert cp["link"] == "mtu 1500"
    assert any("SYN -> SYN-ACK" in e for e in cp["evidence"])


def test_real_captures_same_host_or_unknown() -> None:
    for meta in sorted(CAPTURES.glob("*.pcap")):
        report = analyze(str(meta))
        for conn in report["connections"]:
            cp = conn["capture_point"]
            expected = "same host" if conn["handshake_seen"] else "unknown"
            assert cp["position"] == expected, (meta.name, conn["id"], cp)
            net = "loopback" if "loopback" in meta.name else "mtu 1500"
            assert cp["link"] == net, (meta.name, cp)
