"""The native transfer analysis (pktflow._core, native/transfer.c) against its Python twin.

Both are driven from the same events: per packet, an observer forwards the engine's on_packet
to a TransferAnalyzer and to a TransferProbe (its view of the engine's directions synced
first), and at the end the report texts (compact and indented), the findings and what relay
matching reads must be identical. On the captures in captures/ and tests/regressions/, on
crafted flows through the real engine, and on random event streams fed to both directly
(implausible values the engine would not send: they reach the branches captures do not).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tcpfeed import Flow

from pktflow.capture.packet import ACK, FIN, PSH, RST, SYN
from pktflow.capture.reader import open_capture
from pktflow.pipeline import SETTLED_LINGER_S, LINGER_S, feed_capture
from pktflow.report.jsontext import compact, indented
from pktflow.tcp.engine import TcpEngine
from pktflow.tcp.observe import DirectionInfo
from pktflow.transfer.analyzer import MAX_OUTSTANDING, TransferAnalyzer

core = pytest.importorskip("pktflow._core", reason="the native core (pktflow._core) is not built")

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = sorted((ROOT / "captures").glob("*.pcap")) + sorted(
    (ROOT / "tests" / "regressions").glob("*.pcap"))
NAMES = ("client->server", "server->client")
SEG = 8192
# Bounded and derandomized in the normal run; PKTFLOW_FUZZ_EXAMPLES=20000 searches longer with
# fresh randomness (as test_fuzz.py).
_LONG = os.environ.get("PKTFLOW_FUZZ_EXAMPLES")


def fuzz(examples: int) -> settings:
    return settings(max_examples=int(_LONG or examples), deadline=None, derandomize=not _LONG,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def leg_view_of(r: dict[str, Any]) -> dict[str, Any]:
    """What TransferProbe.leg_view(d) must give, read from result(d)'s dict."""
    rtt, hs = r["rtt_ms"], r.get("handshake_ms")
    return {
        "zero_window_periods": r["window"]["zero_window_periods"],
        "zero_window_total_s": r["window"]["zero_window_total_s"],
        "evidence_frames": r["verdict"]["evidence_frames"],
        "bytes_acked_median": r["acks"]["bytes_acked_median"],
        "flight_bytes_median": r["flights"]["bytes_median"],
        "rtt_median_ms": None if rtt is None else rtt["median"],
        "syn_to_synack_ms": None if hs is None else hs["syn_to_synack"],
        "synack_to_ack_ms": None if hs is None else hs["synack_to_ack"],
    }


def new_probe(known: tuple[bool, bool] | list[bool], isn: bool = False) -> Any:
    """A TransferProbe whose view is set before its analysis is made, which reads it (as the
    Python analyzer calls scale_known when it is made)."""
    probe = core.TransferProbe.__new__(core.TransferProbe)
    for side in (0, 1):
        probe.set_view(side, isn, known[side])
    probe.__init__()
    return probe


def assert_same(ta: TransferAnalyzer, probe: Any, start: float, conn_id: str = "c1") -> None:
    for d in (0, 1):
        r = ta.result(d, start)
        assert probe.result(d, start, -1, 0) == compact(r), (conn_id, d)
        assert probe.result(d, start, 2, 5) == indented(r, 5), (conn_id, d)
        # compared as text: a -0.0 is not 0.0 there
        assert compact(probe.leg_view(d)) == compact(leg_view_of(r)), (conn_id, d)
    want = ta.direction_findings(lambda d: NAMES[d])
    assert probe.findings(conn_id, *NAMES) == want, conn_id


class Twin:
    """An observer of the engine feeding both analyses; the probe sees what the Python
    analyzer's scale_known reads, as the engine has it at each packet."""

    def __init__(self, conn: Any) -> None:
        dirs = self.dirs = conn.dirs
        self.id = conn.id
        self.ta = TransferAnalyzer(conn.id, scale_known=lambda side: dirs[side].wscale_known)
        self.probe = new_probe([d.wscale_known for d in dirs], False)

    def sync(self) -> None:
        for side in (0, 1):
            self.probe.set_view(side, self.dirs[side].isn_seen, self.dirs[side].wscale_known)

    def on_packet(self, d: int, frame: int, ts: float, seq: int, end: int, ack: int, win: int,
                  flags: int, kind: int) -> None:
        self.sync()
        self.ta.on_packet(d, frame, ts, seq, end, ack, win, flags, kind)
        self.probe.on_packet(d, frame, ts, seq, end, ack, win, flags, kind)

    def finish(self, info: tuple[DirectionInfo, DirectionInfo]) -> None:
        self.ta.finish(info)
        self.probe.finish(info)


class Harness:
    """A TCP engine whose connections each get a Twin, compared once finished (retired on the
    way as the pipeline does, so a capture of many connections holds few)."""

    def __init__(self, start: Callable[[], float]) -> None:
        self.twins: dict[str, Twin] = {}
        self.start = start
        self.compared = 0
        self.engine = TcpEngine(observer_factory=self.observers, retired=self.retired,
                                linger=LINGER_S, settled_linger=SETTLED_LINGER_S)

    def observers(self, conn: Any) -> list[Twin]:
        twin = Twin(conn)
        self.twins[conn.id] = twin
        return [twin]

    def retired(self, conn: Any) -> None:
        twin = self.twins.pop(conn.id, None)
        if twin is not None:
            assert_same(twin.ta, twin.probe, self.start(), conn.id)
            self.compared += 1

    def finish(self) -> int:
        self.engine.finish()
        for conn in self.engine.connections:
            self.retired(conn)
        return self.compared


def run_capture(path: Path) -> int:
    with open_capture(str(path)) as cap:
        h = Harness(lambda: cap.stats.first_ts or 0.0)
        feed_capture(cap, h.engine)
        return h.finish()


def run_flow(f: Flow) -> int:
    h = Harness(lambda: f.packets[0][1] if f.packets else 0.0)
    for p in f.packets:
        h.engine.feed(p)
    return h.finish()


# ---- real captures ---------------------------------------------------------------------------

@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_captures(path: Path) -> None:
    assert run_capture(path) > 0


# ---- crafted flows through the engine -----------------------------------------------------------

def bulk(f: Flow, rounds: int, *, per_ack: int = 2, gap: float = 0.00002, win: int = 4096,
         ack_delay: float = 0.00005, size: int = SEG) -> None:
    for _ in range(rounds):
        for _ in range(per_ack):
            f.send(1, b"x" * size, dt=gap)
        f.ack(0, win=win, dt=ack_delay)


def flow_two_per_ack() -> Flow:
    f = Flow()
    f.handshake()
    bulk(f, 40)
    return f


def flow_delayed_timer() -> Flow:
    f = Flow()
    f.handshake()
    for _ in range(12):
        f.send(1, b"z" * 100)
        f.ack(0, dt=0.041)
    for _ in range(3):
        f.send(1, b"z" * 100, dt=0.1)
        f.ack(0, dt=0.0001)
    return f


def flow_window_updates() -> Flow:
    f = Flow()
    f.handshake()
    f.send(1, b"a" * 1000)
    f.ack(0, win=100)
    f.send(1, b"b" * 1000)
    f.ack(0, ack=f.seq[1] - 1000, win=100)
    f.ack(0, ack=f.seq[1] - 1000, win=100)
    f.ack(0, ack=f.seq[1] - 1000, win=900)
    return f


def flow_zero_window(wscale: int | None = 0) -> Flow:
    f = Flow()
    f.handshake(wscale_c=wscale, wscale_s=wscale)
    for _ in range(30):
        f.send(1, b"w" * SEG)
        f.send(1, b"w" * SEG)
        f.ack(0, win=0)
        f.ack(0, win=2 * SEG, dt=0.002)
    f.ack(0, win=0, dt=0.01)  # shut at the end: the period runs to the last data
    return f


def flow_window_full() -> Flow:
    f = Flow()
    f.handshake(wscale_c=0, wscale_s=0)
    f.ack(0, win=2 * SEG)
    for _ in range(30):
        f.send(1, b"w" * SEG)
        f.send(1, b"w" * SEG)
        f.ack(0, win=2 * SEG, dt=0.002)
    return f


def flow_ack_clocked() -> Flow:
    f = Flow()
    f.handshake()
    for _ in range(30):
        for _ in range(10):
            f.send(1, b"c" * 1448, dt=0.00001)
        f.ack(0, dt=0.005)
        f.send(1, b"c" * 1448, dt=0.0001)  # resumed at once: waiting for that ACK
        f.ack(0, dt=0.005)
    return f


def flow_loss() -> Flow:
    f = Flow()
    f.handshake()
    for i in range(60):
        f.send(1, b"l" * 1448)
        if i % 5 == 0:
            f.send(1, b"l" * 1448, seq=f.seq[1] - 1448, advance=False)  # retransmitted
        f.ack(0)
    return f


def flow_idle_stalls() -> Flow:
    f = Flow()
    f.handshake()
    for i in range(40):
        f.send(1, b"s" * 3000, dt=0.03 if i % 3 == 0 else 0.0001)
        if i % 2:
            f.ack(0, dt=0.02)
    f.ack(0, win=0, dt=0.01)
    f.send(1, b"s" * 10, dt=0.5)  # idle behind a zero window
    f.ack(0, win=4096)
    f.send(1, b"s" * 10, dt=0.5)  # idle with everything acknowledged
    return f


def flow_no_handshake() -> Flow:
    f = Flow()
    f.send(0, b"Q" * 40)
    f.ack(1)
    bulk(f, 30, per_ack=3, size=1448)
    f.fin(1)
    f.fin(0)
    return f


def flow_unknown_scale() -> Flow:
    f = Flow()
    f.handshake(wscale_c=None, wscale_s=7)
    bulk(f, 30, win=200)
    f.rst(0)
    return f


def flow_outstanding_overflow() -> Flow:
    """More unacknowledged segments than MAX_OUTSTANDING, then ACKs in steps."""
    f = Flow()
    f.handshake()
    f.ack(0)
    for _ in range(MAX_OUTSTANDING + 300):
        f.send(1, b"o" * 100, dt=0.000001)
    first = f.seq[1] - (MAX_OUTSTANDING + 300) * 100
    for k in (50, 400, 3000, MAX_OUTSTANDING + 300):
        f.ack(0, ack=first + k * 100, dt=0.001)
    return f


def flow_many_values() -> Flow:
    """Distinct sizes past the histograms' exact caps; in-flight values past the exact
    quantiles; goodput bins past the dense switch; clock steps back and forth."""
    f = Flow()
    f.handshake()
    t0 = f.t
    for i in range(5000):
        f.send(1, b"", plen=1 + (i * 7919) % 9000, dt=0.0003)
        if i % 3 == 0:
            f.ack(0, dt=0.0001 * (i % 7))
        if i == 2500:
            f.t = t0 - 3.0  # the clock stepped back
        if i == 3500:
            f.t += 1e5  # and far forward
    return f


def flow_handshake_repeats() -> Flow:
    f = Flow()
    f.handshake()
    f.send(1, b"d" * 100)
    f.ack(0)
    f._emit(0, SYN, ack=0, win=64240, seq=f.isn_c)  # a SYN again
    f._emit(1, SYN | ACK, seq=f.isn_s, win=65160)
    bulk(f, 5)
    f._emit(0, FIN | PSH | ACK, b"bye", win=0)
    f._emit(1, RST, win=0)
    return f


FLOWS = [flow_two_per_ack, flow_delayed_timer, flow_window_updates, flow_zero_window,
         lambda: flow_zero_window(None), flow_window_full, flow_ack_clocked, flow_loss,
         flow_idle_stalls, flow_no_handshake, flow_unknown_scale, flow_outstanding_overflow,
         flow_many_values, flow_handshake_repeats]


@pytest.mark.parametrize("make", FLOWS, ids=lambda m: getattr(m, "__name__", "flow"))
def test_crafted_flows(make: Callable[[], Flow]) -> None:
    assert run_flow(make()) == 1


# ---- random packets through the engine --------------------------------------------------------

OPS = st.lists(st.tuples(
    st.sampled_from(["send0", "send1", "ack0", "ack1", "retrans1", "zero0", "gap1", "fin",
                     "rst", "old_ack0", "syn"]),
    st.integers(0, 20000),  # size
    st.sampled_from([0.0, 0.00001, 0.0003, 0.002, 0.02, 0.045, 0.3, 2.0, -0.5])),
    max_size=120)


@fuzz(400)
@given(handshake=st.sampled_from([None, (7, 7), (None, 7), (0, 0)]), ops=OPS)
def test_random_flows_through_engine(handshake: Any, ops: list[Any]) -> None:
    f = Flow()
    if handshake is not None:
        f.handshake(wscale_c=handshake[0], wscale_s=handshake[1])
    for op, size, dt in ops:
        if op == "send0":
            f.send(0, b"", plen=size % 2000 + 1, dt=dt)
        elif op == "send1":
            f.send(1, b"", plen=size + 1, dt=dt)
        elif op == "ack0":
            f.ack(0, dt=dt, win=size)
        elif op == "ack1":
            f.ack(1, dt=dt, win=size * 3)
        elif op == "retrans1":
            f.send(1, b"", plen=min(size + 1, 1448), seq=f.seq[1] - min(size + 1, 1448),
                   advance=False, dt=dt)
        elif op == "zero0":
            f.ack(0, win=0, dt=dt)
        elif op == "gap1":
            f.seq[1] += size + 1  # bytes the capture missed
        elif op == "fin":
            f.fin(size % 2)
        elif op == "rst":
            f.rst(size % 2)
        elif op == "old_ack0":
            f.ack(0, ack=f.seq[1] - size, dt=dt, win=size)
        else:
            f._emit(size % 2, SYN | (ACK if size % 3 else 0), seq=f.isn_s if size % 2 else
                    f.isn_c, win=1000, dt=dt)
    if f.packets:
        assert run_flow(f) >= 1


# ---- random event streams, fed directly --------------------------------------------------------

DT = st.one_of(
    # thresholds exactly (from a base of 0.0, sums hit them): 0.5 ms, 1 ms, 10 ms, 40 ms
    st.sampled_from([0.0, 1e-6, 0.0004, 0.0005, 0.0006, 0.001, 0.002, 0.01, 0.011, 0.039,
                     0.04, 0.041, 0.25, -0.0001, -2.0, 1e4, -1e4, 3e8]),
    # no steps under 1e-12 s: a span of 1e-300 s makes the Python twin's round(rate) raise
    # (rate is infinite), and no capture format has such a resolution
    st.floats(-1.0, 1.0, allow_nan=False).filter(lambda x: x == 0.0 or abs(x) >= 1e-12))
EVENT = st.one_of(
    st.tuples(st.just("view"), st.integers(0, 1), st.booleans(), st.booleans()),
    st.tuples(st.just("pkt"), st.integers(0, 1), DT,
              st.sampled_from(["new", "new", "new", "retrans", "overlap", "behind", "any"]),
              st.sampled_from([0, 0, 1, 100, 1448, 8192, 65536, 70000]),
              st.sampled_from(["none", "next", "next", "part", "back", "far", "any"]),
              st.one_of(st.sampled_from([0, 0, 1, 1000, 65535, 65535 << 7, 1 << 30, -1, -5]),
                        st.integers(-5, 1 << 31)),
              st.sampled_from([ACK, ACK, ACK | PSH, 0, FIN | ACK, RST, RST | ACK, SYN,
                               SYN | ACK]),
              st.one_of(st.just(None), st.integers(0, 63))),
    st.tuples(st.just("read"), st.floats(-1e3, 1e3, allow_nan=False)))
INFO = st.tuples(st.one_of(st.none(), st.integers(0, 65535)),
                 st.one_of(st.none(), st.integers(0, 14)), st.booleans(),
                 st.one_of(st.none(), st.integers(0, 14)))


def replay(events: list[Any], base_ts: float, big: int) -> Iterator[tuple[Any, ...]]:
    """Events -> ('view', side, isn, known) | ('pkt', on_packet args) | ('read', start): the
    packets' numbers from running counters, so most are plausible and some are not."""
    ts = base_ts
    high = [0, 0]
    frame = 0
    for ev in events:
        if ev[0] != "pkt":
            yield ev
            continue
        _, d, dt, where, n, acking, win, flags, kind = ev
        frame += 1
        ts += dt
        if where == "new":
            seq = high[d]
        elif where == "retrans":
            seq = max(0, high[d] - n)
        elif where == "overlap":
            seq = max(0, high[d] - n // 2)
        elif where == "behind":
            seq = high[d] // 2
        else:
            seq = (frame * 7919 * big) % (1 << 33)
        end = seq + n
        if kind is None:  # as the engine classifies it
            kind = 0 if n == 0 else 0x01 if seq >= high[d] else 0x04 if end > high[d] else 0x02
        if end > high[d]:
            high[d] = end
        other = high[1 - d]
        ack = {"none": -1, "next": other, "part": other // 2 + 1, "back": max(0, other - 3000),
               "far": other + 5000, "any": (frame * 104729 * big) % (1 << 34)}[acking]
        yield ("pkt", d, frame, ts, seq, end, ack, win, flags, kind)


@fuzz(2000)
@given(events=st.lists(EVENT, max_size=150),
       base_ts=st.sampled_from([0.0, 0.0, 1e-7, 1.0, 1_700_000_000.0, -50.0]),
       big=st.sampled_from([1, 1 << 20]),
       views=st.tuples(st.booleans(), st.booleans()),
       info=st.one_of(st.none(), st.tuples(INFO, INFO)))
def test_random_events(events: list[Any], base_ts: float, big: int, views: tuple[bool, bool],
                       info: Any) -> None:
    known = list(views)
    ta = TransferAnalyzer("c9", scale_known=lambda side: known[side])
    probe = new_probe(known)
    start = base_ts
    for ev in replay(events, base_ts, big):
        if ev[0] == "view":
            known[ev[1]] = ev[3]
            probe.set_view(ev[1], ev[2], ev[3])
        elif ev[0] == "read":  # reading mid-stream flushes the counting runs: in both
            start = base_ts + ev[1]
            assert_same(ta, probe, start, "c9")
        else:
            ta.on_packet(*ev[1:])
            probe.on_packet(*ev[1:])
    assert_same(ta, probe, start, "c9")  # before finish: no DirectionInfo
    if info is not None:
        infos = (DirectionInfo(*info[0]), DirectionInfo(*info[1]))
        ta.finish(infos)
        probe.finish(infos)
        assert_same(ta, probe, start, "c9")


# ---- the branches random streams reach rarely --------------------------------------------------

def feed_both(packets: list[tuple[Any, ...]], known: tuple[bool, bool] = (True, True),
              info: Any = ((1460, 7, True, None), (1460, 7, True, None)),
              start: float = 0.0) -> tuple[TransferAnalyzer, Any]:
    ta = TransferAnalyzer("c2", scale_known=lambda side: known[side])
    probe = new_probe(known, True)
    for p in packets:
        ta.on_packet(*p)
        probe.on_packet(*p)
    infos = (DirectionInfo(*info[0]), DirectionInfo(*info[1]))
    ta.finish(infos)
    probe.finish(infos)
    assert_same(ta, probe, start, "c2")
    return ta, probe


def bulk_events(rounds: int, *, seg: int = 1448, per_ack: int = 2, t: float = 100.0,
                win: int = 1 << 20, gap: float = 0.0001, ack_dt: float = 0.0002,
                zero_every: int = 0) -> list[tuple[Any, ...]]:
    out = []
    off = 0
    frame = 0
    for r in range(rounds):
        for _ in range(per_ack):
            frame += 1
            t += gap
            out.append((1, frame, t, off, off + seg, 0, 65535, ACK, 1))
            off += seg
        frame += 1
        t += ack_dt
        w = 0 if zero_every and r % zero_every == 0 else win
        out.append((0, frame, t, 0, 0, off, w, ACK, 0))
    return out


@pytest.mark.parametrize("zero_every", [0, 1, 3, 50])
@pytest.mark.parametrize("known", [(True, True), (False, False)])
def test_verdict_branches(zero_every: int, known: tuple[bool, bool]) -> None:
    for per_ack, ack_dt, gap in ((2, 0.0002, 0.0001), (10, 0.005, 0.00001), (1, 0.05, 0.002)):
        feed_both(bulk_events(60, per_ack=per_ack, ack_dt=ack_dt, gap=gap,
                              zero_every=zero_every), known,
                  info=((1460, None, known[0], 3), (None, None, known[1], None)))


def test_every_limit_and_finding_reached() -> None:
    """Cases like those above reach every verdict and both findings: checked, so the
    comparison never silently passes over a branch."""
    limits: set[str] = set()
    codes: set[str] = set()
    for zero_every in (0, 1, 3):
        for per_ack, ack_dt, gap in ((2, 0.0002, 0.0001), (10, 0.005, 0.00001),
                                     (1, 0.05, 0.002), (1, 0.0002, 0.02)):
            ta, probe = feed_both(bulk_events(60, per_ack=per_ack, ack_dt=ack_dt, gap=gap,
                                              zero_every=zero_every))
            limits.add(ta.result(1)["verdict"]["limit"])
            codes.update(f.code for f in probe.findings("c2", *NAMES))
    run = feed_both([(1, i + 1, 1.0 + i * 0.001, i * 1000, i * 1000 + 1000, 0, 1000, ACK,
                      0x02 if i % 3 == 0 else 0x01) for i in range(100)])
    limits.add(run[0].result(0)["verdict"]["limit"])
    limits.add(run[0].result(1)["verdict"]["limit"])
    assert limits == {"none", "loss", "receiver_window", "latency", "sender"}
    assert codes == {"delayed-ack-stalls", "stalls"}


@pytest.mark.parametrize("resume", [0.0004, 0.0005, 0.0015, 0.0019, 0.0021, 0.0024, 0.0026,
                                    0.003])
def test_ack_clock_threshold(resume: float) -> None:
    """Flights ended by an ACK, the sender resuming `resume` after it: cwnd_wait while within
    max(0.5 ms, a quarter of the least RTT (10 ms here)), else sender_idle."""
    packets = []
    t, off, frame = 10.0, 0, 0
    for _ in range(40):
        for _ in range(3):
            frame += 1
            t += 0.00001
            packets.append((1, frame, t, off, off + 1448, 0, 65535, ACK, 1))
            off += 1448
        frame += 1
        t += 0.01
        packets.append((0, frame, t, 0, 0, off, 1 << 20, ACK, 0))
        t += resume - 0.00001
    ta, _ = feed_both(packets)
    reasons = ta.result(1)["flights"]["end_reasons"]
    assert reasons["cwnd_wait" if resume <= 0.0025 else "sender_idle"] >= 38


def test_huge_numbers() -> None:
    """Offsets and windows past 2**53 (int / int then is not float division), negative and
    far-off timestamps: still the same text."""
    big = 1 << 60
    packets = [(0, 1, 5.0, 0, 0, 0, 1000, ACK, 0)]
    for i in range(40):
        step = big // 64 + 12345  # not a double: int / int is not float division
        packets.append((1, 2 + 2 * i, 5.0 + i * 0.02, i * step, (i + 1) * step, -1, 1000, ACK,
                        1))
        packets.append((0, 3 + 2 * i, 5.0 + i * 0.02 + 0.001, 0, 0, (i + 1) * step // 2 + 1,
                        3 + i * 7, ACK, 0))
    packets.append((0, 200, -1e9, 0, 0, big, 0, ACK, 0))
    # a bin index past int64 (Python's int is exact, C's saturates: not the largest bin)
    packets.append((1, 199, -1e19, 45 * step, 45 * step + 1, -1, 1000, ACK, 1))
    packets.append((1, 201, 1e11, big, big + 3, big, 1, ACK, 1))
    feed_both(packets)
    feed_both(packets, (False, True), info=((None, None, False, 2), (None, 0, False, 14)))


def test_rare_verdict_texts() -> None:
    """A window shut only by FIN segments, its scale unknown (no zero-window period and no
    full-window frame: the receiver_window evidence falls back to the first frame), and
    ACK-clocked flights without one RTT sample (Karn's rule after a far retransmission: 'RTT
    median None')."""
    fin_acks = [p if p[0] == 1 else p[:6] + (0, FIN | ACK, 0)
                for p in bulk_events(60, per_ack=2, ack_dt=0.002, gap=0.0001)]
    ta, _ = feed_both(fin_acks, (False, False), info=((None, None, False, None),) * 2)
    v = ta.result(1)["verdict"]
    assert v["limit"] == "receiver_window" and v["evidence_frames"] == [1]
    clocked = [(1, 1, 99.0, (1 << 40) - 100, 1 << 40, 0, 65535, ACK, 0x02)]
    t, off = 100.0, 0
    for _ in range(150):
        t += 0.0002  # resumed at once after the ACK: waiting for it
        for _ in range(3):
            clocked.append((1, len(clocked) + 1, t, off, off + 1448, 0, 65535, ACK, 1))
            off += 1448
            t += 0.00001
        t += 0.005
        clocked.append((0, len(clocked) + 1, t, 0, 0, off, 1 << 20, ACK, 0))
    ta, _ = feed_both(clocked)
    r = ta.result(1)
    assert r["verdict"]["limit"] == "latency" and r["rtt_ms"] is None
    assert "RTT median None ms" in r["verdict"]["summary"]


def test_goodput_past_int64() -> None:
    """round(rate) of a rate past int64 is a Python int of 20+ digits: the same digits."""
    for n, dt in ((1 << 40, 1e-9), (1 << 50, 1e-12), (12345, 0.3)):
        feed_both([(1, 1, 7.0, 0, n, -1, 0, ACK, 1), (1, 2, 7.0 + dt, n, 2 * n, -1, 0, ACK, 1)])


def test_exact_thresholds() -> None:
    """Each comparison at its boundary, with timestamps whose differences are the constants
    exactly: 1 ms (ack_arrived), 0.5 ms (cwnd_wait), 40 ms (delayed_timer), 10 ms (idle),
    64 KiB and 20 segments (enough to judge), a window update after a negative window."""
    d, a = ACK, 1 << 20
    cases = [
        # data at 0.0, its ACK at 0.0005, more data at 0.001: within 1 ms of the last data
        [(1, 1, 0.0, 0, 100, 0, 9, d, 1), (0, 2, 0.0005, 0, 0, 100, a, d, 0),
         (1, 3, 0.001, 100, 200, 0, 9, d, 1)],
        # the last data 2.5 ms before, the ACK 0.5 ms before: waiting for the ACK
        [(1, 1, -0.002, 0, 100, 0, 9, d, 1), (0, 2, 0.0, 0, 0, 100, a, d, 0),
         (1, 3, 0.0005, 100, 200, 0, 9, d, 1)],
        # an ACK 40 ms after the one segment it covers; data again 10 ms after the last
        [(1, 1, 0.0, 0, 100, 0, 9, d, 1), (0, 2, 0.04, 0, 0, 100, a, d, 0),
         (1, 3, 0.01, 100, 200, 0, 9, d, 1), (1, 4, 0.02, 200, 300, 0, 9, d, 1)],
        # a negative window (not from the engine), then a larger one: no window update
        [(0, 1, 0.0, 0, 0, 0, -5, d, 0), (0, 2, 0.1, 0, 0, 0, 10, d, 0),
         (0, 3, 0.2, 0, 0, 0, 20, d, 0)],
    ]
    for last in (5, 4):  # 65,536 bytes in 20 segments, then one byte fewer
        seg = [(1, i + 1, i * 0.01, i * 3449, i * 3449 + (3449 if i < 19 else last), -1, 9, d,
                1) for i in range(20)]
        cases.append(seg)
    for packets in cases:
        # an ACK before: the data's flow has an acknowledged base, so the next ACK advances
        feed_both([(0, 0, -1.0, 0, 0, 0, a, d, 0)] + packets)


def test_rtt_zero_and_negative() -> None:
    """An RTT of -0.0 or 0.0 reports min 0.0 (rtt_min or 0); negative RTTs stay negative."""
    for t0, t1 in ((0.0, -0.0), (-0.0, 0.0), (1.0, 1.0), (1.0, 0.5)):
        feed_both([(0, 1, t0, 0, 0, 0, 1000, ACK, 0), (1, 2, t0, 0, 100, 0, 1000, ACK, 1),
                   (0, 3, t1, 0, 0, 100, 1000, ACK, 0)])


def test_not_finished_and_bad_direction() -> None:
    probe = new_probe((True, True))
    ta = TransferAnalyzer("c3")
    assert_same(ta, probe, 0.0, "c3")
    with pytest.raises(ValueError):
        probe.on_packet(2, 1, 0.0, 0, 0, 0, 0, 0, 0)
    with pytest.raises(ValueError):
        probe.result(-1)


def test_result_is_json() -> None:
    """A sanity check of the harness itself: the text is the report's."""
    ta, probe = feed_both(bulk_events(30))
    for d in (0, 1):
        assert json.loads(probe.result(d, 0.0)) == ta.result(d)
        assert not math.isnan(json.loads(probe.result(d, 0.0))["window"]["zero_window_total_s"])
