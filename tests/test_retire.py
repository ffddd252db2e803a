"""Closed connections leave the engine while the pass goes on (pipeline.LINGER_S): the report
must be the one an end-of-capture report gives, and memory must follow the connections open at
once, not all the connections a capture held (a pgbench -C run, a connection storm)."""

from __future__ import annotations

import math
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from tcpfeed import Flow

from pktflow.capture.packet import CaptureStats
from pktflow.capture.reader import open_capture
from pktflow.pipeline import Options, Run, analyze, build_report
from pktflow.tcp.connection import Connection
from pktflow.tcp.engine import TcpEngine

WHOLE = Options(linger_s=math.inf, settled_linger_s=math.inf)  # every report at the end
CAPTURES = sorted(p for p in (Path(__file__).resolve().parent.parent / "captures").iterdir()
                  if ".pcap" in p.name)


def conversation(port: int, t: float,
                 reply: int = 20_000) -> list[tuple]:  # type: ignore[type-arg]
    """One short connection from client port `port` at time t: handshake, a query, a reply of
    `reply` bytes in 1,000-byte segments, both FINs and the last ACK."""
    f = Flow(t=t)
    f.handshake()
    f.send(0, b"Q\x00\x00\x00\x0dSELECT 1\x00")
    f.ack(1)
    for _ in range(reply // 1000):
        f.send(1, b"D" + b"\x00" * 999)
    f.ack(0)
    f.fin(0)
    f.fin(1)
    f.ack(0)
    return [(p[0], p[1], p[2], p[3], port if p[4] == 40000 else p[4],
             port if p[5] == 40000 else p[5], *p[6:]) for p in f.packets]


def storm(n: int, spacing: float) -> list[tuple]:  # type: ignore[type-arg]
    pkts = [p for i in range(n) for p in conversation(20000 + i, 1000.0 + i * spacing)]
    return [(i + 1, *p[1:]) for i, p in enumerate(pkts)]


def report(packets: list[tuple], linger: float,  # type: ignore[type-arg]
           retired: list[str] | None = None, live: list[int] | None = None,
           store: str | None = None) -> dict[str, Any]:
    """A pass as pipeline.analyze makes it, swept after every packet; `live` gets the number of
    connections with analyses held after each packet."""
    stats = CaptureStats(file="crafted", format="pcap", packets=len(packets),
                         tcp_packets=len(packets), first_ts=packets[0][1], last_ts=packets[-1][1])
    run = Run(Options(linger_s=linger, store=store), stats)

    def done(conn: Connection) -> None:
        if retired is not None:
            retired.append(conn.id)
        run.report(conn)

    engine = TcpEngine(run.sink, run.observers, retired=done, linger=linger)
    for p in packets:
        engine.feed(p)
        engine.sweep(p[1])
        if live is not None:
            live.append(len(run.transfers))
    engine.finish()
    return build_report(stats, engine, run)


def test_closed_connections_retire_once_silent_for_the_linger() -> None:
    retired: list[str] = []
    pkts = storm(3, spacing=2.0)
    late = list(pkts[-1])  # the last ACK of c3 again, 0.5 s later: c3 is not silent yet
    late[0], late[1] = len(pkts) + 1, pkts[-1][1] + 0.5
    stats = CaptureStats(file="crafted", format="pcap", first_ts=pkts[0][1])
    run = Run(Options(), stats)
    engine = TcpEngine(run.sink, run.observers,
                       retired=lambda c: (retired.append(c.id), run.report(c)), linger=1.0)
    for p in [*pkts, tuple(late)]:
        engine.feed(p)
        engine.sweep(p[1])
    assert retired == ["c1", "c2"]  # c1 and c2 closed more than a second before the end
    assert [c.id for c in engine.connections] == ["c3"]
    engine.sweep(late[1] + 0.99)
    assert retired == ["c1", "c2"], "silent since its late packet for less than the linger"
    engine.sweep(late[1] + 1.0)
    assert retired == ["c1", "c2", "c3"] and engine.connections == []


def test_without_a_retired_callback_every_connection_stays() -> None:
    engine = TcpEngine(linger=0.0)
    for p in storm(3, spacing=2.0):
        engine.feed(p)
        engine.sweep(p[1])
    assert [c.id for c in engine.connections] == ["c1", "c2", "c3"]


def test_storm_report_is_the_end_of_capture_report() -> None:
    retired: list[str] = []
    pkts = storm(40, spacing=0.5)
    early = report(pkts, 0.2, retired)
    assert retired == [f"c{i}" for i in range(1, 40)]  # c40 is still lingering at the end
    assert early == report(pkts, math.inf)
    assert [c["id"] for c in early["connections"]] == [f"c{i}" for i in range(1, 41)]


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_real_captures_report_the_same_with_a_short_linger(path: Path) -> None:
    """50 ms of silence after closing is far past these loopback round trips: connections
    retire mid-pass (pgbench-txn's c1 and c4 do) and the report must not change."""
    assert analyze(str(path), Options(linger_s=0.05)) == analyze(str(path), WHOLE)


def test_a_real_capture_retires_connections_mid_pass() -> None:
    """The premise of the test above, on the capture that has connections closing early."""
    retired: list[str] = []
    path = next(p for p in CAPTURES if p.name.startswith("pgbench-txn-pgbouncer"))
    with open_capture(str(path)) as cap:
        packets = [p for batch in cap.batches() for p in batch]
    mid_pass = report(packets, 0.05, retired)
    whole = analyze(str(path), WHOLE)
    assert {"c1", "c4"} <= set(retired)
    for key in ("connections", "relays", "findings"):
        assert mid_pass[key] == whole[key], key


def test_memory_follows_open_connections_not_all_connections() -> None:
    """2,000 short connections one after another: with the linger, the analyses of a few open
    connections are held besides the reports; without, those of all 2,000. (The reports
    themselves, about as large, are what the pass returns.)"""
    pkts = storm(2000, spacing=1.0)
    peaks, live = {}, {}
    for linger in (5.0, math.inf):
        live[linger] = []
        tracemalloc.start()
        report(pkts, linger, live=live[linger])
        peaks[linger] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert max(live[5.0]) <= 7 and max(live[math.inf]) == 2000  # 1 s apart, 5 s of linger
    assert peaks[5.0] < 0.9 * peaks[math.inf], peaks  # about 0.7 as source, 0.8 compiled


def test_a_late_packet_is_counted_not_taken_for_a_new_connection() -> None:
    """c1 retired; its last ACK again 10 s later is late (no phantom connection, a finding with
    its frame); a SYN on the same 4-tuple after that is a new connection."""
    pkts = storm(2, spacing=2.0)
    c1 = [p for p in pkts if 20000 in (p[4], p[5])]
    late = (len(pkts) + 1, pkts[-1][1] + 10.0, *c1[-1][2:])
    reuse = [(len(pkts) + 2 + i, late[1] + 1.0 + i * 1e-4, *p[2:])
             for i, p in enumerate(conversation(20000, 0.0)[:3])]  # SYN, SYN-ACK, ACK again
    retired: list[str] = []
    rep = report([*pkts, late, *reuse], 1.0, retired)
    assert [c["id"] for c in rep["connections"]] == ["c1", "c2", "c3"]
    assert rep["connections"][2]["roles_from"] == "handshake"
    late_findings = [f for f in rep["findings"] if f["code"] == "late-packets"]
    assert len(late_findings) == 1 and late_findings[0]["frames"] == [late[0]], late_findings
    assert rep["connections"][0]["packets"] == len(c1)  # the late ACK is not counted in c1


def _syn_rst(n: int, spacing: float) -> list[tuple]:  # type: ignore[type-arg]
    """n connection attempts refused with a RST (a port scan, a closed port), from
    client ports 30000 up (n <= 35,535)."""
    from pktflow.capture.packet import ACK, RST, SYN

    client, server = b"\x0a\x01\x00\x00", b"\x0a\x00\x00\x02"
    out = []
    for i in range(n):
        port, ts = 30000 + i, i * spacing
        out.append((2 * i + 1, ts, client, server, port, 5432, 1000, 0, SYN, 64240, 0, b"",
                    b""))
        out.append((2 * i + 2, ts, server, client, 5432, port, 0, 1001, RST | ACK, 0, 0, b"",
                    b""))
    return out


def test_the_oldest_retired_four_tuples_are_forgotten_first() -> None:
    """The engine remembers the 4-tuples (both ways) of the last MAX_GONE / 2 connections it
    retired closed: one retired earlier is forgotten, and a packet on it opens a connection;
    the ones after it are still known, and a packet on them is late. (Forgetting the oldest
    was a scan past every key deleted before it: a storm of 100,000 connections took 40 %
    longer.)"""
    from pktflow.capture.packet import ACK
    from pktflow.tcp.engine import MAX_GONE

    retired: list[str] = []
    engine = TcpEngine(retired=lambda conn: retired.append(conn.id), linger=0.0)
    n = MAX_GONE // 2 + 1
    for p in _syn_rst(n, spacing=1e-3):
        engine.feed(p)
        engine.sweep(p[1])
    client, server, frame = b"\x0a\x01\x00\x00", b"\x0a\x00\x00\x02", 2 * n
    assert len(retired) == n and not engine.connections
    for port in (30000, 30001):  # an ACK from the client of the first, then of the second
        frame += 1
        engine.feed((frame, n * 1e-3, client, server, port, 5432, 1001, 1, ACK, 64240, 0, b"",
                     b""))
    assert [c.client[1] for c in engine.connections] == [30000]
    assert engine.late_packets == 1 and engine.late_frames == [frame]


def test_a_close_both_sides_acknowledged_retires_after_the_settled_linger() -> None:
    """Closed by FINs both acknowledged: retired once silent for settled_linger (2 s), not
    the full linger (30 s); without the last ACK, the full linger."""
    pkts = storm(4, spacing=5.0)  # each: ..., FIN, FIN, the last ACK
    last_ack = max(i for i, p in enumerate(pkts) if 20003 in (p[4], p[5]))
    pkts = pkts[:last_ack] + pkts[last_ack + 1:]  # c4's last ACK lost
    retired: list[str] = []
    engine = TcpEngine(retired=lambda conn: retired.append(conn.id), linger=30.0,
                       settled_linger=2.0)
    for p in pkts:
        engine.feed(p)
        engine.sweep(p[1])
    assert retired == ["c1", "c2", "c3"]
    end = pkts[-1][1]
    engine.sweep(end + 2.0)
    assert retired == ["c1", "c2", "c3"]  # c4's close is not acknowledged
    engine.sweep(end + 30.0)
    assert retired == ["c1", "c2", "c3", "c4"]


def test_a_reset_connection_retires_after_the_settled_linger() -> None:
    retired: list[str] = []
    engine = TcpEngine(retired=lambda conn: retired.append(conn.id), linger=30.0,
                       settled_linger=2.0)
    for p in _syn_rst(3, spacing=1.0):
        engine.feed(p)
        engine.sweep(p[1])
    engine.sweep(3.0)
    assert retired == ["c1", "c2"]  # c3 reset at 2.0 s: silent for 1 s only


def test_settled_connections_waiting_are_bounded() -> None:
    """A scan faster than the settled linger: past MAX_SETTLED waiting, the oldest go."""
    from pktflow.tcp.engine import MAX_SETTLED

    retired: list[str] = []
    engine = TcpEngine(retired=lambda conn: retired.append(conn.id), linger=30.0,
                       settled_linger=2.0)
    for p in _syn_rst(MAX_SETTLED + 5, spacing=1e-5):  # 0.1 s in all
        engine.feed(p)
        engine.sweep(p[1])
    assert retired == [f"c{i}" for i in range(1, 6)]
    assert len(engine.connections) == MAX_SETTLED


def test_settled_connections_retired_by_reuse_do_not_count_as_waiting() -> None:
    """A settled connection whose 4-tuple a new SYN reuses is retired then, but stays in the
    queue until it reaches the head: it must not count toward MAX_SETTLED, or connections
    ahead of it would go before their time."""
    from pktflow.capture.packet import ACK, RST, SYN
    from pktflow.tcp.engine import MAX_SETTLED

    client, server = b"\x0a\x01\x00\x00", b"\x0a\x00\x00\x02"
    pkts: list[tuple] = []  # type: ignore[type-arg]

    def attempt(port: int, isn: int, refused: bool = True) -> None:
        ts = len(pkts) * 1e-6
        pkts.append((len(pkts) + 1, ts, client, server, port, 5432, isn, 0, SYN, 64240, 0,
                     b"", b""))
        if refused:
            pkts.append((len(pkts) + 1, ts, server, client, 5432, port, 0, isn + 1, RST | ACK,
                         0, 0, b"", b""))

    for port in range(20000, 20005):
        attempt(port, 1000)  # c1-c5: settled, waiting at the head
    for port in range(30000, 30010):
        attempt(port, 1000)  # c6-c15: settled
    for port in range(30000, 30010):
        attempt(port, 5000, refused=False)  # c16-c25 reuse their 4-tuples: c6-c15 retire
    for port in range(30010, 30000 + MAX_SETTLED):
        attempt(port, 1000)  # 5 fewer settled waiting than MAX_SETTLED, 5 more queued
    retired: list[str] = []
    engine = TcpEngine(retired=lambda conn: retired.append(conn.id), linger=30.0,
                       settled_linger=2.0)
    for p in pkts:  # all within 0.1 s: nothing is silent for the settled linger
        engine.feed(p)
        engine.sweep(p[1])
    assert retired == [f"c{i}" for i in range(6, 16)]


def _handshake_cases() -> list[tuple]:  # type: ignore[type-arg]
    """Connection attempts whose first packets are handshake segments, one per client port,
    interleaved packet by packet: what the engine keeps as packets before making them."""
    from pktflow.capture.packet import ACK, FIN, PSH, RST, SYN

    client, server = b"\x0a\x01\x00\x00", b"\x0a\x00\x00\x02"
    query = b"Q\x00\x00\x00\x0dSELECT 1\x00"

    Seg = tuple[bytes, bytes, int, int, int, int, int, bytes]

    def c(port: int, seq: int, ack: int, flags: int, payload: bytes = b"") -> Seg:
        return (client, server, port, 5432, seq, ack, flags, payload)

    def s(port: int, seq: int, ack: int, flags: int, payload: bytes = b"") -> Seg:
        return (server, client, 5432, port, seq, ack, flags, payload)

    cases = [
        [c(40001, 100, 0, SYN)] * 3,  # unanswered, retransmitted
        [c(40002, 100, 0, SYN), s(40002, 900, 101, SYN | ACK), s(40002, 900, 101, SYN | ACK),
         c(40002, 101, 901, ACK), c(40002, 101, 901, ACK | PSH, query),
         s(40002, 901, 115, ACK), c(40002, 115, 901, FIN | ACK)],  # answered, late ACK
        [c(40003, 100, 0, SYN), s(40003, 0, 101, RST | ACK)],  # refused
        [c(40004, 100, 0, SYN), c(40004, 7000, 0, SYN)],  # the 4-tuple reused: two
        [s(40005, 900, 101, SYN | ACK), c(40005, 101, 901, ACK),
         c(40005, 101, 901, ACK | PSH, query)],  # the capture began after the SYN
        [c(40006, 100, 0, SYN)] + [s(40006, 900, 101, SYN | ACK)] * 4,  # no final ACK
        [c(40007, 100, 0, SYN)] * 20,  # more than MAX_WAITING
        [c(40008, 100, 0, SYN, query)],  # data on the SYN
        [s(40009, 900, 101, SYN | ACK), c(40009, 100, 0, SYN)],  # a SYN after the SYN-ACK
    ]
    out: list[tuple] = []  # type: ignore[type-arg]
    for step in range(max(map(len, cases))):
        for case in cases:
            if step < len(case):
                src, dst, sport, dport, seq, ack, flags, payload = case[step]
                out.append((len(out) + 1, 1000.0 + len(out) * 0.01, src, dst, sport, dport,
                            seq, ack, flags, 64240, len(payload), payload, b""))
    return out


def test_connections_kept_as_handshake_segments_report_as_if_made_at_once() -> None:
    """With a retired callback, a connection of only SYNs and SYN-ACKs waits as its packets;
    made when another packet comes or at the end, it must report exactly as a connection the
    engine made at its first packet (the engine without a callback), numbered as it opened."""
    pkts = _handshake_cases()
    kept = report(pkts, math.inf)
    stats = CaptureStats(file="crafted", format="pcap", packets=len(pkts),
                         tcp_packets=len(pkts), first_ts=pkts[0][1], last_ts=pkts[-1][1])
    run = Run(Options(linger_s=math.inf), stats)
    engine = TcpEngine(run.sink, run.observers)  # no callback: every connection made at once
    for p in pkts:
        engine.feed(p)
    engine.finish()
    assert kept == build_report(stats, engine, run)
    conns = kept["connections"]
    assert [c["client"]["port"] for c in conns] == [
        40001, 40002, 40003, 40004, 40005, 40006, 40007, 40008, 40009, 40004, 40009]
    assert [c["packets"] for c in conns] == [3, 7, 2, 1, 3, 5, 20, 1, 1, 1, 1]


def test_unanswered_syns_hold_no_analyses() -> None:
    """A scan of 3,000 ports that never answer, around one real connection: only that one
    has analyses while the pass goes on (a Connection with its analyses took 12 KB; 200,000
    unanswered SYNs took 2.4 GB), and every attempt is still reported, in opening order."""
    from pktflow.capture.packet import SYN

    client, server = b"\x0a\x01\x00\x00", b"\x0a\x00\x00\x02"
    real = conversation(20000, 1000.0 + 1500 * 1e-3)
    scan = [(0, 1000.0 + i * 1e-3, client, server, 30000 + i, 5432, 100, 0, SYN, 64240, 0, b"",
             b"") for i in range(3000)]
    pkts = sorted(scan + real, key=lambda p: p[1])
    pkts = [(i + 1, *p[1:]) for i, p in enumerate(pkts)]
    live: list[int] = []
    rep = report(pkts, 30.0, live=live)
    assert max(live) == 1
    conns = rep["connections"]
    assert len(conns) == 3001
    assert [c["first_frame"] for c in conns] == sorted(c["first_frame"] for c in conns)
    assert [c["id"] for c in conns] == [f"c{i}" for i in range(1, 3002)]
