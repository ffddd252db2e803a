"""The TCP engine end to end: packets built with tcpfeed.Flow, written as a capture, analysed
by the core. What the engine counts is read from the report; what it told each packet's
analyses (payload class, scaled window, stream offset) from the packets the core kept; the
reassembled streams from what the PostgreSQL decoder made of them (queries, messages, lost
bytes).
The engine's internals are the Rust tests' (analyzer/core/src/tcp/tests)."""

from __future__ import annotations

import random
import socket
import struct
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tcpfeed import Flow, write_capture

from pktflow import _core
from pktflow._core import ACK, FILLS_HOLE, KEEPALIVE, NEW, OUT_OF_ORDER, RETRANS
from pktflow.pipeline import Options, analyze

# -- PostgreSQL messages: the decoder shows what stream the engine delivered ------------------


def msg(t: str, body: bytes = b"") -> bytes:
    return t.encode() + struct.pack(">I", len(body) + 4) + body


def startup() -> bytes:
    body = struct.pack(">I", 196608) + b"user\0alice\0database\0shop\0\0"
    return struct.pack(">I", len(body) + 4) + body


def query(sql: str) -> bytes:
    return msg("Q", sql.encode() + b"\0")


def datarow(size: int, fill: bytes = b"x") -> bytes:
    """A DataRow message of `size` bytes in all."""
    return msg("D", (fill * size)[:size - 5])


OPENING = msg("R", struct.pack(">I", 0)) + msg("Z", b"I")  # AuthenticationOk, ReadyForQuery


def session(f: Flow) -> None:
    """The handshake, then the startup and the server's answer: the streams decode from here."""
    f.handshake()
    f.send(0, startup())
    f.send(1, OPENING)


# -- the capture, its report, its events -------------------------------------------------------

Event = tuple[int, int, int, float, int, int, int, int, int, int]


def run(tmp: Path,
        packets: list[tuple]) -> tuple[dict[str, Any], list[Event]]:  # type: ignore[type-arg]
    """The report of a capture of `packets`, and every packet as the engine told the
    analyses of its connection: (connection, direction, frame, ts, seq, end, ack, win,
    flags, kind), offsets relative to the direction's first byte, windows scaled."""
    path = write_capture(tmp / "flow.pcap", packets)
    rep = analyze(str(path), Options(record=True))
    numbers = list(range(1, len(rep["connections"]) + 1))
    events = rep.core.packets(numbers, 0.0, float("inf"), 1_000_000)["events"]
    return rep, [tuple(e) for e in events]


def d(rep: dict[str, Any], i: int = 0,  # type: ignore[type-arg]
      side: str = "server_to_client") -> dict[str, Any]:
    return rep["connections"][i]["directions"][side]


def kinds(events: list[Event], direction: int) -> list[int]:
    """Payload classes of the data packets sent in `direction` (0: client to server)."""
    return [e[9] for e in events if e[1] == direction and e[5] > e[4]]


def sqls(rep: dict[str, Any], i: int = 0) -> list[str]:  # type: ignore[type-arg]
    return [q["sql"] for q in rep["connections"][i]["queries"]]


def backend(rep: dict[str, Any], i: int = 0) -> dict[str, int]:  # type: ignore[type-arg]
    return rep["connections"][i]["messages"]["backend"]


def clean(rep: dict[str, Any], i: int = 0) -> bool:  # type: ignore[type-arg]
    """The decoder read both streams to the end without losing or skipping a byte."""
    c = rep["connections"][i]
    return c["protocol"] == "postgresql" and c["decode_stopped"] is None \
        and c["lost_bytes"] == {"frontend": 0, "backend": 0}


def codes(rep: dict[str, Any]) -> dict[str, list[int]]:  # type: ignore[type-arg]
    """Each finding's code and evidence frames."""
    return {f["code"]: f["frames"] for f in rep["findings"]}


# -- tests ---------------------------------------------------------------------------------------


def test_handshake_options_and_scaled_window(tmp_path: Path) -> None:
    f = Flow()
    f.handshake(wscale_c=7, wscale_s=9)
    f.send(0, startup(), win=100)
    f.send(1, OPENING + datarow(3000 - len(OPENING)), win=50)
    f.fin(0)
    f.fin(1)
    rep, events = run(tmp_path, f.packets)
    conn = rep["connections"][0]
    assert conn["handshake_seen"] and conn["closed_by"] == "fin"
    assert conn["roles_from"] == "handshake"
    c2s = conn["directions"]["client_to_server"]
    assert (c2s["mss"], c2s["window_scale"], c2s["window_scale_known"]) == (1460, 7, True)
    assert conn["directions"]["server_to_client"]["window_scale"] == 9
    # the data packets' windows reach the analyses scaled by the sender's own shift
    assert [e[7] for e in events if e[5] > e[4]] == [100 << 7, 50 << 9]
    # a direction's window is the one its receiver advertises
    assert (c2s["window"]["min"], d(rep)["window"]["min"]) == (50 << 9, 100 << 7)
    # both streams delivered whole to the decoder, the packets to the transfer analysis
    assert clean(rep) and backend(rep) == {"AuthenticationOk": 1, "ReadyForQuery": 1,
                                           "DataRow": 1}
    assert (c2s["payload_bytes"], d(rep)["payload_bytes"]) == (len(startup()), 3000)
    assert d(rep)["segment_size_histogram"] == {"3000": 1}


def test_retransmission_counted_once_delivered_once(tmp_path: Path) -> None:
    f = Flow()
    session(f)
    p = f.send(1, datarow(100, b"a"))
    again = f.send(1, datarow(100, b"a"), seq=p[6], advance=False, dt=0.3)
    f.send(1, datarow(50, b"b"))
    rep, events = run(tmp_path, f.packets)
    s2c = d(rep)
    assert s2c["retransmitted_segments"] == 1 and s2c["retransmitted_bytes"] == 100
    assert s2c["payload_bytes"] == len(OPENING) + 150 and s2c["data_segments"] == 3
    # delivered once: two DataRows, not three
    assert clean(rep) and backend(rep)["DataRow"] == 2
    assert kinds(events, 1) == [NEW, NEW, RETRANS, NEW]
    assert codes(rep)["retransmission"] == [again[0]]


def test_reordering_within_3ms_is_out_of_order_and_reassembled(tmp_path: Path) -> None:
    f = Flow()
    session(f)
    first, second, third = query("SELECT 1111"), query("SELECT 2222"), query("SELECT 3333")
    base = f.seq[0]
    f.send(0, second, seq=base + len(first), advance=False)
    filler = f.send(0, first, seq=base, advance=False, dt=0.001)
    f.seq[0] = base + len(first) + len(second)
    f.send(0, third)
    rep, events = run(tmp_path, f.packets)
    c2s = d(rep, side="client_to_server")
    assert c2s["out_of_order_segments"] == 1 and c2s["retransmitted_segments"] == 0
    assert c2s["gaps"] == 0 and c2s["payload_bytes"] == len(startup()) + 3 * len(first)
    assert clean(rep) and sqls(rep) == ["SELECT 1111", "SELECT 2222", "SELECT 3333"]
    assert kinds(events, 0) == [NEW, NEW | OUT_OF_ORDER, FILLS_HOLE, NEW]
    assert codes(rep)["out-of-order"] == [filler[0]]  # the segment that came late


def test_capture_gap_acked_by_receiver(tmp_path: Path) -> None:
    f = Flow()
    session(f)
    f.send(1, datarow(100))
    f.seq[1] += 200  # 200 bytes the capture never saw: a DataRow
    f.send(1, datarow(100, b"c"))
    acked = f.ack(0)
    rep, events = run(tmp_path, f.packets)
    s2c = d(rep)
    assert (s2c["gaps"], s2c["missing_bytes"]) == (1, 200)
    assert codes(rep)["capture-gap"] == [acked[0]]  # the receiver acknowledged the gap
    # the decoder was told of the 200 bytes, and reads the message after them at its place
    conn = rep["connections"][0]
    assert conn["lost_bytes"] == {"frontend": 0, "backend": 200}
    assert backend(rep)["DataRow"] == 2
    # offsets in the server's stream: the segment after the gap starts 300 bytes on
    data = [(e[4], e[5]) for e in events if e[1] == 1 and e[5] > e[4]]
    n = len(OPENING)
    assert data == [(0, n), (n, n + 100), (n + 300, n + 400)]


def test_tail_gap_at_end_of_capture(tmp_path: Path) -> None:
    f = Flow()
    session(f)
    f.send(1, datarow(100))
    f.ack(0, ack=f.seq[1] + 400)
    rep, _ = run(tmp_path, f.packets)
    assert (d(rep)["gaps"], d(rep)["missing_bytes"]) == (1, 400)
    assert rep["connections"][0]["lost_bytes"]["backend"] == 400


def test_sequence_wraparound(tmp_path: Path) -> None:
    f = Flow(isn_s=0xFFFFFFFF - 150)
    session(f)
    for i in range(5):
        f.send(1, datarow(100, bytes([65 + i])))
        f.ack(0)
    rep, events = run(tmp_path, f.packets)
    s2c = d(rep)
    assert s2c["payload_bytes"] == len(OPENING) + 500 and s2c["retransmitted_segments"] == 0
    assert s2c["gaps"] == 0
    assert clean(rep) and backend(rep)["DataRow"] == 5
    n = len(OPENING)
    assert [e[4] for e in events if e[1] == 1 and e[5] > e[4]] == [0] + [
        n + 100 * i for i in range(5)]


def test_port_reuse_after_close_starts_new_connection(tmp_path: Path) -> None:
    f = Flow()
    f.handshake()
    f.send(0, b"x")
    f.fin(0)
    f.fin(1)
    g = Flow(isn_c=9_000_000, isn_s=77, t=f.t + 1)
    g.handshake()
    g.send(0, b"yy")
    packets = f.packets + [(len(f.packets) + i + 1, *p[1:]) for i, p in enumerate(g.packets)]
    rep, _ = run(tmp_path, packets)
    conns = rep["connections"]
    assert [c["id"] for c in conns] == ["c1", "c2"]
    assert [c["directions"]["client_to_server"]["payload_bytes"] for c in conns] == [1, 2]
    assert [(c["first_frame"], c["last_frame"]) for c in conns] == [
        (1, len(f.packets)), (len(f.packets) + 1, len(packets))]


def test_retransmitted_syn_stays_in_connection(tmp_path: Path) -> None:
    f = Flow()
    f.handshake()
    syn = f.packets[0]
    f.packets.insert(1, (2, syn[1] + 1e-6, *syn[2:]))
    packets = [(i + 1, *p[1:]) for i, p in enumerate(f.packets)]
    rep, _ = run(tmp_path, packets)
    assert len(rep["connections"]) == 1
    assert rep["connections"][0]["packets"] == 4 and rep["connections"][0]["handshake_seen"]


def test_missing_handshake_lower_port_server_and_scale_lower_bound(tmp_path: Path) -> None:
    f = Flow()
    # no handshake: the server sends 4 x 1000 bytes while the client advertises raw window 10
    f.ack(0, win=10)
    for _ in range(4):
        f.send(1, b"z" * 1000)
    rep, _ = run(tmp_path, f.packets)
    conn = rep["connections"][0]
    assert not conn["handshake_seen"] and conn["server"]["port"] == 5432
    assert conn["roles_from"] == "port"
    c2s = conn["directions"]["client_to_server"]
    assert c2s["window_scale_known"] is False and c2s["window_scale"] is None
    # 4000 bytes in flight against a raw window of 10: scale >= 9 (10 << 9 = 5120)
    assert c2s["window_scale_lower_bound"] == 9
    assert "window-scale-unknown" in codes(rep)


def test_snaplen_truncated_payload_is_counted_not_invented(tmp_path: Path) -> None:
    f = Flow()
    session(f)
    cut = f.send(1, datarow(1000, b"t")[:60], plen=1000)  # a DataRow cut after 60 bytes
    f.send(1, datarow(10, b"u"))
    rep, _ = run(tmp_path, f.packets)
    s2c = d(rep)
    assert s2c["truncated_bytes"] == 940 and s2c["payload_bytes"] == len(OPENING) + 1010
    # said once for the capture (capture/snaplen.py), with the cut frame as evidence
    assert codes(rep)["snaplen"] == [cut[0]] and "truncated-payload" not in codes(rep)
    assert rep["capture"]["truncated_packets"] == 1
    # the decoder was told of the 940 bytes inside the DataRow (nothing lost: its length is
    # known) and read the message after them at its place
    assert clean(rep) and backend(rep)["DataRow"] == 2


def test_zero_window_window_update_keepalive_rst(tmp_path: Path) -> None:
    f = Flow()
    f.handshake()
    f.send(1, b"d" * 100)
    zero = f.ack(0, win=0)
    f.ack(0, win=300)  # same ack, bigger window: a window update
    probe = f.send(1, b"k", seq=f.seq[1] - 1, advance=False, dt=5)  # keep-alive probe
    f.rst(0)
    rep, events = run(tmp_path, f.packets)
    conn = rep["connections"][0]
    c2s = conn["directions"]["client_to_server"]
    assert c2s["zero_window_events"] == 1 and c2s["window_updates"] == 1
    assert conn["directions"]["server_to_client"]["keepalives"] == 1
    assert conn["directions"]["server_to_client"]["retransmitted_segments"] == 0
    assert conn["closed_by"] == "rst"
    assert codes(rep)["zero-window"] == [zero[0]] and "retransmission" not in codes(rep)
    assert [e[9] for e in events if e[2] == probe[0]] == [KEEPALIVE]


def test_random_reordering_always_reassembles_exactly(tmp_path: Path) -> None:
    """Both streams cut at random places, each direction's segments shuffled: the decoder
    reads every query's text and every message as sent."""
    rnd = random.Random(7)
    for trial in range(30):
        f = Flow(isn_c=rnd.randrange(1 << 32), isn_s=rnd.randrange(1 << 32))
        f.handshake()
        sql = ["SELECT '" + "".join(rnd.choice("abcdefghij ,;()") for _ in range(
            rnd.randrange(1, 400))) + "'" for _ in range(8)]
        front = startup() + b"".join(map(query, sql))
        rows = [rnd.randbytes(rnd.randrange(5, 600)) for _ in range(12)]
        back = OPENING + b"".join(msg("D", r) for r in rows)
        for side, stream in ((0, front), (1, back)):
            at = 0
            while at < len(stream):
                n = rnd.randrange(1, 300)
                f.send(side, stream[at:at + n])
                at += n
        # each direction's segments shuffled, the client's before the server's (whose ACKs
        # cover them all: sent before one of them, they would prove a capture gap)
        body, data = f.packets[:3], f.packets[3:]
        front_data = [p for p in data if p[4] == 40000]
        back_data = [p for p in data if p[4] == 5432]
        rnd.shuffle(front_data)
        rnd.shuffle(back_data)
        data = front_data + back_data
        rep, _ = run(tmp_path, body + [(i + 4, *p[1:]) for i, p in enumerate(data)])
        assert clean(rep), trial
        assert sqls(rep) == sql, trial
        assert backend(rep) == {"AuthenticationOk": 1, "ReadyForQuery": 1,
                                "DataRow": len(rows)}, trial
        assert d(rep, side="client_to_server")["payload_bytes"] == len(front)
        assert d(rep)["payload_bytes"] == len(back)


def test_interleaved_connections_reuse_and_a_syn_again_are_kept_apart(tmp_path: Path) -> None:
    """Three connections interleaved, one 4-tuple reused after close, a retransmitted SYN:
    each connection has exactly its own packets and bytes."""
    rng = random.Random(7)
    flows, sent = [], []
    for port, isn in ((40000, 1000), (40001, 50_000), (40000, 9_000_000)):
        f = Flow(isn_c=isn, t=1_700_000_000.0 + (1 if isn == 9_000_000 else 0))
        f.handshake()
        if isn == 50_000:
            f.packets.insert(1, (0, f.packets[0][1] + 1e-6, *f.packets[0][2:]))  # SYN again
        totals = [0, 0]
        for _ in range(20):
            side, n = rng.choice((0, 1)), rng.randrange(1, 300)
            f.send(side, bytes(n))
            totals[side] += n
        f.fin(0)
        f.fin(1)
        sent.append((len(f.packets), totals))
        flows.append([p[:4] + (port if p[4] == 40000 else p[4],
                               port if p[5] == 40000 else p[5]) + p[6:] for p in f.packets])
    # interleave the first two, the third (same 4-tuple as the first) after both
    mixed = sorted(flows[0] + flows[1], key=lambda p: p[1]) + flows[2]
    rep, _ = run(tmp_path, [(i + 1, *p[1:]) for i, p in enumerate(mixed)])
    conns = rep["connections"]
    assert [c["client"]["port"] for c in conns] == [40000, 40001, 40000]
    for c, (packets, (up, down)) in zip(conns, sent):
        dirs = c["directions"]
        assert c["packets"] == packets and c["closed_by"] == "fin"
        assert (dirs["client_to_server"]["payload_bytes"],
                dirs["server_to_client"]["payload_bytes"]) == (up, down)
        assert dirs["client_to_server"]["retransmitted_segments"] == 0


ADDRESS = (st.binary(min_size=4, max_size=4) | st.binary(min_size=16, max_size=16)
           | st.binary(min_size=4, max_size=4).map(lambda v4: bytes(10) + b"\xff\xff" + v4))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(ADDRESS, ADDRESS), min_size=1, max_size=40))
def test_addresses_are_written_as_inet_ntop_writes_them(
        tmp_path: Path, pairs: list[tuple[bytes, bytes]]) -> None:
    """One connection a pair of addresses (a packet from client port 40000+i to 5432; a
    pair of different families is two IPv6 addresses, the IPv4 one mapped)."""
    packets = []
    for i, (a, b) in enumerate(pairs):
        if len(a) != len(b):
            a, b = (bytes(10) + b"\xff\xff" + x if len(x) == 4 else x for x in (a, b))
        packets.append((i + 1, 1000.0 + i, a, b, 40000 + i, 5432, 1, 1, ACK, 512, 0, b"",
                        b""))
    path = write_capture(tmp_path / "addresses.pcap", packets)
    conns = analyze(str(path))["connections"]

    def ntop(raw: bytes) -> str:
        return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw)

    assert [(c["client"]["ip"], c["server"]["ip"]) for c in conns] == [
        (ntop(p[2]), ntop(p[3])) for p in packets]
