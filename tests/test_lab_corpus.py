"""The conditions corpus (captures/conditions/): each capture shows its condition, read by
tshark, and its kernel figures agree with the capture.

Static checks over committed files: no root needed, tshark for the capture side. They pin what
captures/README.md says about each file, and keep the ground truth honest: the kernel's
retransmission count for every sending socket equals the segments tshark sees that socket send
again, in every capture.
"""

from __future__ import annotations

import gzip
import json
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest
from test_lab_conditions import assert_sane, initial_rtts_ms, tshark

from pktflow.lab.record import kernel_sockets

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "captures" / "conditions"
CONDITIONS = ("unshaped", "rtt2ms", "rtt10ms", "loss2pct", "20mbit", "rcvbuf16384",
              "slowreader200000")
FULL = [f"seqscan-10k-{via}-bridge-{c}" for via in ("direct", "pgbouncer") for c in CONDITIONS]
FULL += ["seqscan-10k-pgbouncer-bridge-server20mbit",
         "seqscan-10k-pgbouncer-bridge-poolerrcvbuf16384",
         "seqscan-10k-pgbouncer-pktbuf65536-bridge-rtt10ms",
         "pgdump-2k-pgbouncer-bridge-backloss5pct"]
CUT = [f"{n}-snap128" for n in ("seqscan-10k-pgbouncer-bridge-rtt10ms",
                                "seqscan-10k-pgbouncer-pktbuf65536-bridge-rtt10ms",
                                "seqscan-10k-pgbouncer-bridge-loss2pct")]

needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None,
                                  reason="tshark is not installed (Debian package tshark)")


def meta(name: str) -> dict[str, Any]:
    """The metadata, its sockets' kernel summaries judged from the samples kept beside it by
    the rule as it is now."""
    m: dict[str, Any] = json.loads((CORPUS / f"{name}.pcap.json").read_text())
    m["kernel"]["sockets"] = kernel_sockets(cap(name))
    return m


def cap(name: str) -> Path:
    return CORPUS / f"{name}.pcap.gz"


def sockets(m: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["direction"]: s for s in m["kernel"]["sockets"]}


def facing_client(m: dict[str, Any]) -> dict[str, Any]:
    """The sending socket on the client's link: the server's direct, the pooler's pooled."""
    return sockets(m)["server->client" if m["via"] == "direct" else "pooler->client"]


def test_corpus_complete_gzipped_and_within_budget() -> None:
    names = {p.name for p in CORPUS.iterdir()}
    assert names == {f"{n}.pcap{s}" for n in FULL + CUT
                     for s in (".gz", ".json", ".samples.json.gz")}
    for n in FULL + CUT:
        assert cap(n).read_bytes()[:2] == b"\x1f\x8b", n
    total = sum(p.stat().st_size for p in (ROOT / "captures").rglob("*") if p.is_file())
    assert total < 40 * 2**20, f"captures/ holds {total / 2**20:.1f} MiB"


@pytest.mark.parametrize("name", FULL)
def test_metadata_says_how_to_remake_it_and_kernel_figures_are_sane(name: str) -> None:
    m = meta(name)
    assert m["remake"].endswith(f"-o captures/conditions/{name}.pcap.gz")
    assert m["tcpdump_dropped"] == 0
    assert m["network"] == "bridge" and m["congestion_control"].startswith("cubic")
    socks = sockets(m)
    assert set(socks) == ({"server->client"} if m["via"] == "direct"
                          else {"server->pooler", "pooler->client"})
    # the seq scan's result is 1.15 MB; pg_dump's of 2,000 rows 0.9 MB
    result_bytes = 1_100_000 if m["scenario"] == "seqscan-10k" else m["rows"] * 440
    for s in socks.values():
        assert_sane(s, result_bytes)
    (h,) = m["handshakes"]  # the client's; the pooled server connection was warmed
    assert h["server"].endswith(":5432" if m["via"] == "direct" else ":6432")


@needs_tshark
@pytest.mark.parametrize("name", FULL)
def test_kernel_retransmissions_are_the_segments_tshark_sees_sent_again(name: str) -> None:
    # at these round trips tshark calls a quick retransmission "out of order": count both
    for s in meta(name)["kernel"]["sockets"]:
        ip, port = s["local"].rsplit(":", 1)
        pip, pport = s["peer"].rsplit(":", 1)
        again = tshark(cap(name), "-Y", f"ip.src == {ip} && tcp.srcport == {port} && "
                       f"ip.dst == {pip} && tcp.dstport == {pport} && tcp.len > 0 && "
                       "(tcp.analysis.retransmission || tcp.analysis.out_of_order)")
        assert len(again) == s["retrans"], (s["direction"], len(again), s["retrans"])


@needs_tshark
@pytest.mark.parametrize("name", [n for n in FULL if n.endswith("rtt10ms")])
def test_rtt10ms_handshake_and_kernel_rtt(name: str) -> None:
    m = meta(name)
    (h,) = m["handshakes"]
    rtt = initial_rtts_ms(cap(name))[h["client"]]
    assert abs(rtt - 10.0) <= 1.0 and rtt == pytest.approx(h["rtt_ms"], abs=0.002)
    assert abs(facing_client(m)["minrtt_ms"] - 10.0) <= 1.0
    if m["via"] == "pgbouncer":
        assert sockets(m)["server->pooler"]["minrtt_ms"] < 2.0  # the back link is not delayed


@pytest.mark.parametrize("name", [n for n in FULL if "rtt" not in n])
def test_undelayed_round_trips_stay_under_a_millisecond(name: str) -> None:
    (h,) = meta(name)["handshakes"]
    assert h["rtt_ms"] < 1.0, h


@needs_tshark
@pytest.mark.parametrize("name", [n for n in FULL if n.endswith("loss2pct")])
def test_loss2pct_drops_and_the_client_facing_sender_is_loss_limited(name: str) -> None:
    m = meta(name)
    loss = m["conditions"]["loss"]
    assert 0.5 <= loss["achieved_pct"] <= 5.0, loss
    sender = facing_client(m)
    # every drop was resent, none reported a duplicate: at least 1% of the bytes were lost
    assert sender["retrans"] >= loss["dropped"] > 0
    assert sender["bytes_retrans_lost"] >= 0.01 * sender["bytes_sent"], sender
    assert tshark(cap(name), "-Y", "tcp.analysis.retransmission")


@needs_tshark
@pytest.mark.parametrize("name", [n for n in FULL if n.endswith("slowreader200000")])
def test_slow_reader_zero_windows_and_receiver_window_limit(name: str) -> None:
    m = meta(name)
    client = m["addresses"]["client"]
    assert tshark(cap(name), "-Y", f"ip.src == {client} && tcp.analysis.zero_window")
    assert tshark(cap(name), "-Y", f"ip.src == {client} && tcp.analysis.window_update")
    assert m["client_seconds"] >= 1_100_000 / 200_000  # read at 200,000 bytes/s
    assert facing_client(m)["dominant_limit"] == "receiver_window"
    if m["via"] == "pgbouncer":  # PgBouncer stopped reading in turn
        assert sockets(m)["server->pooler"]["dominant_limit"] == "receiver_window"


@needs_tshark
@pytest.mark.parametrize("name", [n for n in FULL if n.endswith("-rcvbuf16384")])
def test_small_client_buffer_caps_its_window_without_zero_windows(name: str) -> None:
    m = meta(name)
    client = m["addresses"]["client"]
    wins = [int(w) for w in tshark(cap(name), "-Y", f"ip.src == {client} && "
                                   "tcp.flags.syn == 0", "-T", "fields", "-e",
                                   "tcp.window_size")]
    assert wins and max(wins) <= 16384
    assert m["tcp_rmem"]["client"] == [4096, 16384, 16384]
    # what tells it from a slow reader on the wire: the sender fills the window, but the
    # client keeps up, so the window never shuts and never needs reopening
    assert tshark(cap(name), "-Y", "tcp.analysis.window_full")
    assert not tshark(cap(name), "-Y", f"ip.src == {client} && (tcp.analysis.zero_window || "
                      "tcp.analysis.window_update)")
    assert facing_client(m)["dominant_limit"] == "receiver_window"


@needs_tshark
@pytest.mark.parametrize("name", [n for n in FULL if n.endswith("20mbit")])
def test_rate_20mbit_paces_the_server_and_the_kernel_says_network(name: str) -> None:
    m = meta(name)
    server = m["addresses"]["server"]
    times = [float(t) for t in tshark(cap(name), "-Y", f"ip.src == {server} && tcp.len > 0",
                                      "-T", "fields", "-e", "frame.time_relative")]
    # ~1.15 MB at 20 Mbit/s, less the bucket's 64 KB burst
    assert times[-1] - times[0] >= 0.9 * (1_149_000 - 65536) * 8 / 20e6
    first_leg = sockets(m)["server->client" if m["via"] == "direct" else "server->pooler"]
    assert first_leg["dominant_limit"] == "network"


@pytest.mark.parametrize("name", CUT)
def test_snaplen_cut_variants(name: str) -> None:
    with gzip.open(cap(name)) as f:
        data = f.read()
    assert struct.unpack("<I", data[16:20])[0] == 128  # the header's snaplen
    pos, frames = 24, 0
    while pos < len(data):
        caplen, wirelen = struct.unpack("<II", data[pos + 8:pos + 16])
        assert caplen <= 128 and wirelen >= caplen
        pos += 16 + caplen
        frames += 1
    m = meta(name)
    full = cap(m["cut_from"].removesuffix(".pcap.gz"))
    with gzip.open(full) as f:
        whole = f.read()
    pos, whole_frames = 24, 0
    while pos < len(whole):
        pos += 16 + struct.unpack("<I", whole[pos + 8:pos + 12])[0]
        whole_frames += 1
    assert frames == whole_frames and m["snaplen"] == 128
