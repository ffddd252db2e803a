"""Finding PostgreSQL exactly on real recordings of the lab (issue 36, marker `lab`: root and
the Debian packages, else skipped with the reason):

- precision: HTTP, TLS, SSH and BGP traffic, whole and picked up mid-stream (each connection's
  handshake and first exchanges cut away), is never called PostgreSQL, and each connection says
  why (the other protocol by name where a segment shows it);
- tunnels: psql to PostgreSQL through the kernel's own tunnel devices (those this kernel makes;
  the others skip with the kernel's reason) and through a tc mirror into VXLAN (AWS traffic
  mirroring's delivery) is analysed as if captured directly, each connection naming its
  tunnel, its queries those tshark finds inside;
- duplicates: the lab's bridge captured with tcpdump -i any shows every packet twice; each is
  counted once, none is a retransmission.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from detection import Tally, mid_stream, tshark_pgsql
from test_lab_record import skip_unless_lab

from pktflow.lab import corpus
from pktflow.pipeline import analyze

pytestmark = pytest.mark.lab

FOREIGN = {"http": "HTTP", "tls": "TLS", "ssh": "SSH", "bgp": "BGP"}
TUNNELS = {"vxlan": {"kind": "vxlan", "vni": corpus.VNI},
           "geneve": {"kind": "geneve", "vni": corpus.GENEVE_VNI},
           "gre": {"kind": "gre", "key": corpus.GRE_KEY},
           "gretap": {"kind": "gre", "key": corpus.GRE_KEY},
           "erspan": {"kind": "erspan", "version": 1, "session": corpus.ERSPAN_SESSION},
           "ipip": {"kind": "ipip", "inner": 4, "outer": 4},
           "sit": {"kind": "ipip", "inner": 6, "outer": 4},
           "mirror": {"kind": "vxlan", "vni": corpus.MIRROR_VNI}}


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    skip_unless_lab({"curl": "curl", "dropbear": "dropbear-bin", "ssh": "openssh-client"})
    tmp = tmp_path_factory.mktemp("foreign")
    out = {}
    for kind in FOREIGN:
        out[kind] = tmp / f"{kind}.pcap"
        meta = corpus.foreign(kind, out[kind])
        assert meta["tcpdump_dropped"] == 0
    return out


@pytest.mark.parametrize("cut", ["whole", "mid-stream"])
@pytest.mark.parametrize("kind", FOREIGN)
def test_other_protocols_are_never_postgresql(foreign: dict[str, Path], tmp_path: Path,
                                              kind: str, cut: str) -> None:
    path = foreign[kind] if cut == "whole" else mid_stream(foreign[kind], tmp_path / "m.pcap")
    report = analyze(str(path))
    t = Tally()
    port = corpus.FOREIGN_PORTS[kind]
    t.add(path.name, False, report, tshark_pgsql(path, [port]))
    assert t.truth_other >= 1 and t.false == 0, t.line(kind)
    said = {f["connection"]: f["message"] for f in report["findings"]
            if f["code"] == "not-postgresql"}
    carrying = [c["id"] for c in report["connections"]
                if any(d["payload_bytes"] for d in c["directions"].values())]
    assert carrying and set(said) == set(carrying)
    named = [m for m in said.values() if f"where a segment starts, {FOREIGN[kind]}" in m
             or kind == "tls" and "a TLS ClientHello without ALPN" in m]
    if cut == "whole" or kind in ("http", "tls", "bgp"):
        # SSH's banner is its start: mid-stream it is encrypted bytes, which prove nothing
        assert named, said


@pytest.mark.parametrize("kind", TUNNELS)
def test_tunnelled_postgresql_through_the_kernels_devices(tmp_path: Path, kind: str) -> None:
    skip_unless_lab()
    why = corpus.supported(kind)
    if why:
        pytest.skip(why)
    path = tmp_path / f"{kind}.pcap"
    meta = corpus.tunnelled(kind, path)
    assert meta["tcpdump_dropped"] == 0
    report = analyze(str(path))
    conns = report["connections"]
    assert len(conns) == len(corpus.QUERIES)
    for conn, sql in zip(conns, corpus.QUERIES):
        assert conn["tunnel"] == TUNNELS[kind]
        assert conn["protocol"] == "postgresql" and conn["handshake_seen"]
        assert [q["sql"] for q in conn["queries"]] == [sql]
        assert conn["queries"][0]["rows"] == (corpus.ROWS if sql.startswith("SELECT *") else 1)
        assert not any(d["retransmitted_segments"] or d["gaps"]
                       for d in conn["directions"].values())
    assert report["capture"]["tunnelled_packets"] == report["capture"]["tcp_packets"]
    if shutil.which("tshark"):
        t = Tally()
        t.add(path.name, True, report, tshark_pgsql(path, [corpus.PG_PORT]))
        assert t.recall_of_confirmed == 1.0 and t.tshark_confirmed == len(conns), t.missed


def test_packets_captured_twice_on_a_bridge_are_counted_once(tmp_path: Path) -> None:
    skip_unless_lab()
    path = tmp_path / "any.pcap"
    meta = corpus.bridged_any(path)
    assert meta["tcpdump_dropped"] == 0
    report = analyze(str(path))
    cap = report["capture"]
    # each packet on the client's port and on the server's
    assert cap["duplicates"]["packets"] == cap["tcp_packets"] == cap["packets"] // 2
    conns: list[dict[str, Any]] = report["connections"]
    assert [[q["sql"] for q in c["queries"]] for c in conns] == [[q] for q in corpus.QUERIES]
    assert not any(d["retransmitted_segments"] for c in conns for d in c["directions"].values())
    assert "duplicate-packets" in [f["code"] for f in report["findings"]]
    # tshark, which keeps both copies, calls the second ones retransmissions
    out = subprocess.run(["tshark", "-n", "-r", str(path), "-Y", "tcp.analysis.retransmission",
                          "-T", "fields", "-e", "frame.number"], capture_output=True, text=True)
    if out.returncode == 0:
        assert len(out.stdout.split()) > 0
