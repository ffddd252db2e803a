"""Tunnelled PostgreSQL is analysed as if captured directly (issue 36): VXLAN (AWS traffic
mirroring's delivery), Geneve, GRE (IP or Ethernet inside, keyed), ERSPAN types I, II and III,
IP in IP and IPv6 in IPv4. Each connection says which tunnel carried it, and the same inner
addresses in two tunnels are two connections.

Here the tunnels carry a real capture's frames, their outer headers written by tests/encap.py
(this machine's kernel builds only VXLAN devices; test_lab_tunnels.py records through the
kernel's own devices where it has them). tshark reads the same files: it must find the same TCP
payload and the same queries inside."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from encap import encapsulate

from pktflow.pipeline import analyze

ROOT = Path(__file__).resolve().parent.parent
DIRECT = ROOT / "captures" / "seqscan-10k-direct-bridge.pcap"
POOLED = ROOT / "captures" / "pgbench-txn-pgbouncer-loopback.pcap"
KINDS = {"vxlan": 42, "geneve": 7, "gre": 9, "gretap": 11, "erspan1": 0, "erspan2": 5,
         "erspan3": 1023, "ipip": 0, "sit": 0}
# what the report says of each
NAMED = {"vxlan": {"kind": "vxlan", "vni": 42}, "geneve": {"kind": "geneve", "vni": 7},
         "gre": {"kind": "gre", "key": 9}, "gretap": {"kind": "gre", "key": 11},
         "erspan1": {"kind": "erspan", "version": 1},
         "erspan2": {"kind": "erspan", "version": 1, "session": 5},
         "erspan3": {"kind": "erspan", "version": 2, "session": 1023},
         "ipip": {"kind": "ipip", "inner": 4, "outer": 4},
         "sit": {"kind": "ipip", "inner": 6, "outer": 4}}


def essentials(report: dict[str, Any], v6: bool = False) -> list[Any]:
    """What must not change when the packets come through a tunnel."""
    return [((c["client"]["port"], c["server"]["port"]) if v6 else (c["client"], c["server"]),
             c["handshake_seen"], c["protocol"], c["packets"],
             [(d["payload_bytes"], d["data_segments"], d["retransmitted_segments"])
              for d in c["directions"].values()],
             [(q["sql"], q["rows"], q["response_bytes"], q["command_tag"]) for q in c["queries"]])
            for c in report["connections"]]


@pytest.fixture(scope="module")
def plain() -> dict[Path, dict[str, Any]]:
    return {p: analyze(str(p)) for p in (DIRECT, POOLED)}


@pytest.mark.parametrize("capture", [DIRECT, POOLED], ids=["direct", "pgbouncer"])
@pytest.mark.parametrize("kind", KINDS)
def test_tunnelled_postgres_is_analysed_as_if_captured_directly(
        tmp_path: Path, plain: dict[Path, dict[str, Any]], capture: Path, kind: str) -> None:
    path = encapsulate(capture, tmp_path / f"{kind}.pcap", kind, KINDS[kind])
    report = analyze(str(path))
    direct = plain[capture]
    assert essentials(report, v6=kind == "sit") == essentials(direct, v6=kind == "sit")
    assert report["relays"] == direct["relays"] or kind == "sit"  # sit's addresses are v6
    for conn in report["connections"]:
        assert conn["tunnel"] == NAMED[kind]
    cap = report["capture"]
    assert cap["tunnelled_packets"] == cap["tcp_packets"] == direct["capture"]["tcp_packets"]
    (count,) = cap["tunnels"]
    assert count["packets"] == cap["tcp_packets"]
    (found,) = [f for f in report["findings"] if f["code"] == "tunnelled"]
    assert f"{cap['tcp_packets']:,} TCP packets came inside tunnels" in found["message"]


def test_the_same_addresses_in_two_tunnels_are_two_connections(
        tmp_path: Path, plain: dict[Path, dict[str, Any]]) -> None:
    """Two VXLAN networks (VNI 1 and 2) reusing the inner addresses: each packet twice,
    once per network. Not duplicates, not retransmissions: two connections each."""
    path = encapsulate(DIRECT, tmp_path / "two.pcap", "vxlan", 1, also=("vxlan", 2))
    report = analyze(str(path))
    direct = plain[DIRECT]
    conns = report["connections"]
    assert len(conns) == 2 * len(direct["connections"])
    assert sorted(c["tunnel"]["vni"] for c in conns) == [1, 2] * len(direct["connections"])
    for vni in (1, 2):
        mine = {**report, "connections": [c for c in conns if c["tunnel"]["vni"] == vni]}
        assert essentials(mine) == essentials(direct)
    assert not any(d["retransmitted_segments"] for c in conns for d in c["directions"].values())


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
@pytest.mark.parametrize("kind", KINDS)
def test_tshark_finds_the_same_inside(tmp_path: Path, kind: str) -> None:
    """The witness: tshark takes the same tunnels off (erspan3's version 2 and IPv6 in IPv4
    included) and finds the same TCP payload and the same queries."""
    path = encapsulate(DIRECT, tmp_path / f"{kind}.pcap", kind, KINDS[kind])
    out = subprocess.run(["tshark", "-n", "-r", str(path), "-Y", "tcp", "-T", "fields",
                          "-e", "tcp.len", "-e", "pgsql.query"], check=True,
                         capture_output=True, text=True).stdout
    rows = [line.split("\t") for line in out.splitlines()]
    report = analyze(str(path))
    carried = sum(d["payload_bytes"] for c in report["connections"]
                  for d in c["directions"].values())
    assert carried == sum(int(r[0] or 0) for r in rows) > 1_000_000
    queries = [q for r in rows for q in r[1:] if q]
    assert queries == [q["sql"] for c in report["connections"] for q in c["queries"]]
