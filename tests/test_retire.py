"""Closed connections leave the engine while the pass goes on (pipeline.LINGER_S): the report
must be the one an end-of-capture report gives, and memory must follow the connections open at
once, not all the connections a capture held (a pgbench -C run, a connection storm).

The pass sweeps its engine where the reader ends a batch; a capture written by
`write_swept_capture` makes every packet a batch of its own, so the engine is swept after
every packet, and `_core.Pass.step` hands out, packet by packet, the connections retired
meanwhile. Memory is measured as the peak resident size of a child process running the pass."""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from tcpfeed import LINKTYPE_RAW, Flow, ip_packet, write_capture

from pktflow import _core
from pktflow.judge import Judge
from pktflow._core import ACK, FIN, PSH, RST, SYN
from pktflow.pipeline import SETTLED_LINGER_S, Options, analyze

ROOT = Path(__file__).resolve().parent.parent
WHOLE = Options(linger_s=math.inf, settled_linger_s=math.inf)  # every report at the end
CAPTURES = sorted(p for p in (ROOT / "captures").iterdir() if ".pcap" in p.name)
MAX_GONE = 1 << 16  # 4-tuples of retired connections remembered (core/src/tcp/table.rs)
MAX_SETTLED = 2_000  # settled connections waiting out the settled linger (tcp/engine.rs)
CLIENT, SERVER = b"\x0a\x01\x00\x00", b"\x0a\x00\x00\x02"

# -- captures ----------------------------------------------------------------------------------

TICKS = 1 << 30  # a swept capture's time unit is 2^-30 s: whole seconds add exactly


def on_grid(ts: float) -> float:
    """The time as a swept capture records it."""
    return round(ts * TICKS) / TICKS


def _block(btype: int, body: bytes) -> bytes:
    body += b"\x00" * (-len(body) % 4)
    return struct.pack("<II", btype, len(body) + 12) + body + struct.pack("<I", len(body) + 12)


def write_swept_capture(path: Path, packets: list[tuple]) -> Path:  # type: ignore[type-arg]
    """The packets as a raw-IP pcapng whose packets are obsolete Packet Blocks: each is a
    batch of its own (core/src/capture/mod.rs), so the pass sweeps after every packet, at its
    time. Times on a 2^-30 s grid (if_tsresol 0x80 | 30)."""
    tsresol = struct.pack("<HHB3x", 9, 1, 0x80 | 30) + b"\0" * 4
    out = [_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)),
           _block(1, struct.pack("<HHI", LINKTYPE_RAW, 0, 0) + tsresol)]
    for pkt in packets:
        data, wire = ip_packet(pkt)
        units = round(pkt[1] * TICKS)
        out.append(_block(2, struct.pack("<HHIIII", 0, 0, units >> 32, units & 0xFFFFFFFF,
                                         len(data), wire) + data))
    path.write_bytes(b"".join(out))
    return path


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


def storm(n: int, spacing: float, reply: int = 20_000) -> list[tuple]:  # type: ignore[type-arg]
    pkts = [p for i in range(n) for p in conversation(20000 + i, 1000.0 + i * spacing, reply)]
    return [(i + 1, *p[1:]) for i, p in enumerate(pkts)]


def tick(frame: int, ts: float) -> tuple:  # type: ignore[type-arg]
    """A packet of a connection of its own (10.0.0.9:60000, never closed) at time ts: the
    pass sweeps there."""
    return (frame, ts, b"\x0a\x00\x00\x09", SERVER, 60000, 5432, 1, 1, ACK, 512, 0, b"", b"")


def _syn_rst(n: int, spacing: float) -> list[tuple]:  # type: ignore[type-arg]
    """n connection attempts refused with a RST (a port scan, a closed port), from
    client ports 30000 up (n <= 35,535)."""
    out = []
    for i in range(n):
        port, ts = 30000 + i, i * spacing
        out.append((2 * i + 1, ts, CLIENT, SERVER, port, 5432, 1000, 0, SYN, 64240, 0, b"",
                    b""))
        out.append((2 * i + 2, ts, SERVER, CLIENT, 5432, port, 0, 1001, RST | ACK, 0, 0, b"",
                    b""))
    return out


def report(packets: list[tuple], linger: float,  # type: ignore[type-arg]
           *, swept: bool = False, settled: float = SETTLED_LINGER_S,
           at: Path | None = None) -> Any:
    """The report of a capture of `packets`, as pipeline.analyze makes it (swept: the
    engine swept after every packet), the capture written in directory `at` (reports of
    the same directory name the same file) or a temporary one."""
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp) if at is None else at
        path = (write_swept_capture(where / "c.pcapng", packets) if swept
                else write_capture(where / "c.pcap", packets))
        return analyze(str(path), Options(linger_s=linger, settled_linger_s=settled))


def handed_out(path: Path, linger: float | None,
               settled: float | None = None, **kw: bool) -> list[list[int]]:
    """The numbers of the connections each step of the pass handed out; the last list is
    what the end of the capture handed out. (For a swept capture, step i is packet i.)"""
    core = _core.Pass(str(path), kw.get("decode_postgres", True), kw.get("transfer", True),
                      linger, settled)
    out = []
    while (done := core.step(Judge())) is not None:
        out.append(done)
    return out


def swept_steps(tmp: Path, packets: list[tuple], linger: float | None,  # type: ignore[type-arg]
                settled: float | None = None, **kw: bool) -> tuple[list[list[int]], list[int]]:
    """After each packet, the connections handed out so far (cumulative); and those the end
    of the capture handed out."""
    steps = handed_out(write_swept_capture(tmp / "swept.pcapng", packets), linger, settled,
                       **kw)
    assert len(steps) == len(packets) + 1  # one step a packet, then the end
    so_far: list[int] = []
    after = []
    for numbers in steps[:-1]:
        so_far = so_far + numbers
        after.append(so_far)
    return after, steps[-1]


# -- memory, measured in a child ---------------------------------------------------------------

CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from pktflow import _core
from pktflow.judge import Judge

def peak():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))

path, records = sys.argv[2], int(sys.argv[3])
linger, settled, decode_postgres, transfer = json.loads(sys.argv[4])
core = _core.Pass(path, decode_postgres, transfer, linger, settled)
words = Judge()

def judge(j):  # words only: the findings a report would keep are not the pass's memory
    said = words(j)
    words.findings_of.clear()
    return said

start, handed, most_open = peak(), 0, 0
# every record read and swept, the end not yet: what the pass held while it went on
while core.records < records:
    handed += len(core.step(judge))
    most_open = max(most_open, core.engine()["opened"] - handed)
print(json.dumps({"start": start, "peak": peak(), "handed": handed, "most_open": most_open}))
"""


def pass_memory(path: Path, records: int, linger: float | None, settled: float | None = None,
                decode_postgres: bool = True, transfer: bool = True) -> dict[str, int]:
    """Peak resident bytes of a process that ran the pass over every record of `path` (facts
    handed out dropped at once), before the end of the capture finished what was left; the
    connections handed out; the most opened and not handed out at once."""
    args = json.dumps([linger, settled, decode_postgres, transfer])
    out = subprocess.run([sys.executable, "-c", CHILD, str(ROOT / "analyzer"), str(path),
                          str(records), args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def growth(tmp: Path, make: Any, n: int, *args: Any, **kw: Any) -> tuple[int, list[dict[str, int]]]:
    """How much more the pass held on make(4n) packets than on make(n): peak bytes."""
    runs = []
    for size in (n, 4 * n):
        packets = make(size)
        path = write_swept_capture(tmp / f"m{size}.pcapng", packets)
        runs.append(pass_memory(path, len(packets), *args, **kw))
    return runs[1]["peak"] - runs[0]["peak"], runs


# -- tests -------------------------------------------------------------------------------------


def test_closed_connections_retire_once_silent_for_the_linger(tmp_path: Path) -> None:
    pkts = storm(3, spacing=2.0)
    late = list(pkts[-1])  # the last ACK of c3 again, 0.5 s later: c3 is not silent yet
    late[0], late[1] = len(pkts) + 1, on_grid(pkts[-1][1] + 0.5)
    # sweeps 0.99 s and 1 s after the late packet
    ticks = [tick(late[0] + 1, late[1] + 0.99), tick(late[0] + 2, late[1] + 1.0)]
    after, end = swept_steps(tmp_path, [*pkts, tuple(late), *ticks], 1.0)
    assert after[len(pkts)] == [1, 2]  # c1 and c2 closed more than a second before
    assert after[-2] == [1, 2], "silent since its late packet for less than the linger"
    assert after[-1] == [1, 2, 3]
    assert end == [4]  # the ticking connection
    rep = report([*pkts, tuple(late), *ticks], 1.0, swept=True, settled=1.0)
    c3 = rep["connections"][2]
    assert c3["packets"] == len(pkts) // 3 + 1 and c3["last_frame"] == late[0]
    assert not [f for f in rep["findings"] if f["code"] == "late-packets"]


def test_without_a_linger_every_connection_stays_to_the_end(tmp_path: Path) -> None:
    after, end = swept_steps(tmp_path, storm(3, spacing=2.0), None)
    assert after[-1] == [] and end == [1, 2, 3]


def test_storm_report_is_the_end_of_capture_report(tmp_path: Path) -> None:
    pkts = storm(40, spacing=0.5)
    after, end = swept_steps(tmp_path, pkts, 0.2, SETTLED_LINGER_S)
    assert after[-1] == list(range(1, 40)) and end == [40]  # c40 is lingering at the end
    early = report(pkts, 0.2, swept=True, at=tmp_path)
    assert early == report(pkts, math.inf, swept=True, settled=math.inf, at=tmp_path)
    assert [c["id"] for c in early["connections"]] == [f"c{i}" for i in range(1, 41)]


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_real_captures_report_the_same_with_a_short_linger(path: Path) -> None:
    """50 ms of silence after closing is far past these loopback round trips: connections
    retire mid-pass (pgbench-txn's c1 and c4 do) and the report must not change."""
    assert analyze(str(path), Options(linger_s=0.05)) == analyze(str(path), WHOLE)


def test_a_real_capture_retires_connections_mid_pass() -> None:
    """The premise of the test above, on the capture that has connections closing early."""
    path = next(p for p in CAPTURES if p.name.startswith("pgbench-txn-pgbouncer"))
    steps = handed_out(path, 0.05, SETTLED_LINGER_S)
    mid_pass = [n for numbers in steps[:-1] for n in numbers]
    assert {1, 4} <= set(mid_pass) and not {1, 4} & set(steps[-1])
    short, whole = analyze(str(path), Options(linger_s=0.05)), analyze(str(path), WHOLE)
    for key in ("connections", "relays", "findings"):
        assert short[key] == whole[key], key


def test_memory_follows_open_connections_not_all_connections(tmp_path: Path) -> None:
    """Short connections one after another, 1 s apart: with a 5 s linger the pass holds the
    analyses of a few open connections, without one those of every connection. Measured on
    2,000 connections against 500: the pass's peak grows by the 1,500 connections' analyses
    without a linger, hardly with one."""

    def make(n: int) -> list[tuple]:  # type: ignore[type-arg]
        return storm(n, spacing=1.0, reply=2000)

    grew = {}
    for linger in (5.0, None):
        grew[linger], runs = growth(tmp_path, make, 500, linger, SETTLED_LINGER_S)
        if linger is None:
            assert [r["most_open"] for r in runs] == [500, 2000]
            assert [r["handed"] for r in runs] == [0, 0]
        else:
            assert max(r["most_open"] for r in runs) <= 7  # 1 s apart, 5 s of linger
            assert [r["handed"] for r in runs] == [500 - 2, 2000 - 2]  # 2 s settled linger
    # without a linger, each connection's analyses stay: several KB each
    assert grew[None] > 1500 * 4000, grew
    assert grew[5.0] < 0.1 * grew[None], grew


def test_a_late_packet_is_counted_not_taken_for_a_new_connection() -> None:
    """c1 retired; its last ACK again 10 s later is late (no phantom connection, a finding with
    its frame); a SYN on the same 4-tuple after that is a new connection."""
    pkts = storm(2, spacing=2.0)
    c1 = [p for p in pkts if 20000 in (p[4], p[5])]
    late = (len(pkts) + 1, pkts[-1][1] + 10.0, *c1[-1][2:])
    reuse = [(len(pkts) + 2 + i, late[1] + 1.0 + i * 1e-4, *p[2:])
             for i, p in enumerate(conversation(20000, 0.0)[:3])]  # SYN, SYN-ACK, ACK again
    rep = report([*pkts, late, *reuse], 1.0, swept=True)
    assert [c["id"] for c in rep["connections"]] == ["c1", "c2", "c3"]
    assert rep["connections"][2]["roles_from"] == "handshake"
    assert rep["connections"][2]["first_frame"] == reuse[0][0]
    late_findings = [f for f in rep["findings"] if f["code"] == "late-packets"]
    assert len(late_findings) == 1 and late_findings[0]["frames"] == [late[0]], late_findings
    assert rep["connections"][0]["packets"] == len(c1)  # the late ACK is not counted in c1
    # without a linger nothing is late: the ACK is c1's, the SYN reuses the closed 4-tuple
    whole = report([*pkts, late, *reuse], math.inf, swept=True, settled=math.inf)
    assert whole["connections"][0]["packets"] == len(c1) + 1
    assert not [f for f in whole["findings"] if f["code"] == "late-packets"]


def test_the_oldest_retired_four_tuples_are_forgotten_first(tmp_path: Path) -> None:
    """The engine remembers the 4-tuples (both ways) of the last MAX_GONE / 2 connections it
    retired closed: one retired earlier is forgotten, and a packet on it opens a connection;
    the ones after it are still known, and a packet on them is late. (What they take is
    bounded.)"""
    n = MAX_GONE // 2 + 1
    pkts = _syn_rst(n, spacing=1e-3)
    for port in (30000, 30001):  # an ACK from the client of the first, then of the second
        pkts.append((len(pkts) + 1, n * 1e-3, CLIENT, SERVER, port, 5432, 1001, 1, ACK,
                     64240, 0, b"", b""))
    path = write_swept_capture(tmp_path / "gone.pcapng", pkts)  # each retired as it closes
    rep = analyze(str(path), Options(decode_postgres=False, transfer=False, linger_s=0.0,
                                     settled_linger_s=0.0))
    conns = [(c["id"], c["client"]["port"]) for c in rep["connections"]]
    assert conns[-1] == (f"c{n + 1}", 30000) and len(conns) == n + 1
    (late,) = [f for f in rep["findings"] if f["code"] == "late-packets"]
    assert late["message"].startswith("1 packets came after") and late["frames"] == [len(pkts)]


def test_a_close_both_sides_acknowledged_retires_after_the_settled_linger(
        tmp_path: Path) -> None:
    """Closed by FINs both acknowledged: retired once silent for settled_linger (2 s), not
    the full linger (30 s); without the last ACK, the full linger."""
    pkts = storm(4, spacing=5.0)  # each: ..., FIN, FIN, the last ACK
    last_ack = max(i for i, p in enumerate(pkts) if 20003 in (p[4], p[5]))
    pkts = pkts[:last_ack] + pkts[last_ack + 1:]  # c4's last ACK lost
    pkts = [(i + 1, *p[1:]) for i, p in enumerate(pkts)]
    end = on_grid(pkts[-1][1])
    ticks = [tick(len(pkts) + 1, end + 2.0), tick(len(pkts) + 2, end + 30.0)]
    after, last = swept_steps(tmp_path, pkts + ticks, 30.0, 2.0)
    assert after[len(pkts) - 1] == [1, 2, 3]
    assert after[-2] == [1, 2, 3]  # c4's close is not acknowledged
    assert after[-1] == [1, 2, 3, 4] and last == [5]


def test_a_reset_connection_retires_after_the_settled_linger(tmp_path: Path) -> None:
    pkts = _syn_rst(3, spacing=1.0)
    after, end = swept_steps(tmp_path, [*pkts, tick(7, 3.0)], 30.0, 2.0)
    assert after[-1] == [1, 2] and end == [3, 4]  # c3 reset at 2.0 s: silent for 1 s only


def test_settled_connections_waiting_are_bounded(tmp_path: Path) -> None:
    """A scan faster than the settled linger: past MAX_SETTLED waiting, the oldest go."""
    after, end = swept_steps(tmp_path, _syn_rst(MAX_SETTLED + 5, spacing=1e-5), 30.0, 2.0)
    assert after[-1] == [1, 2, 3, 4, 5]  # 0.02 s in all: silent for the linger, none
    assert len(end) == MAX_SETTLED


def test_settled_connections_waiting_hold_bounded_memory(tmp_path: Path) -> None:
    """The bound is what the pass holds: a refused scan of 10,000 connections in 0.1 s
    against one of 2,500 grows the pass's peak by hardly anything, when without a linger
    (every connection held) by the 7,500 connections. (Without analyses: a connection alone
    is several KB, and the conversion of its facts is then cheap.)"""

    def make(n: int) -> list[tuple]:  # type: ignore[type-arg]
        return _syn_rst(n, spacing=1e-5)

    grew = {}
    for linger in (30.0, None):
        grew[linger], runs = growth(tmp_path, make, 2500, linger, 2.0, decode_postgres=False,
                                    transfer=False)
        held = [r["most_open"] for r in runs]
        assert held == ([MAX_SETTLED + 1] * 2 if linger else [2500, 10000]), held
    assert grew[None] > 7500 * 2000, grew
    assert grew[30.0] < 0.1 * grew[None], grew


def test_settled_connections_retired_by_reuse_do_not_count_as_waiting(tmp_path: Path) -> None:
    """A settled connection whose 4-tuple a new SYN reuses is retired then, but stays in the
    queue until it reaches the head: it must not count toward MAX_SETTLED, or connections
    ahead of it would go before their time."""
    pkts: list[tuple] = []  # type: ignore[type-arg]

    def attempt(port: int, isn: int, refused: bool = True) -> None:
        ts = len(pkts) * 1e-6
        pkts.append((len(pkts) + 1, ts, CLIENT, SERVER, port, 5432, isn, 0, SYN, 64240, 0,
                     b"", b""))
        if refused:
            pkts.append((len(pkts) + 1, ts, SERVER, CLIENT, 5432, port, 0, isn + 1, RST | ACK,
                         0, 0, b"", b""))

    for port in range(20000, 20005):
        attempt(port, 1000)  # c1-c5: settled, waiting at the head
    for port in range(30000, 30010):
        attempt(port, 1000)  # c6-c15: settled
    for port in range(30000, 30010):
        attempt(port, 5000, refused=False)  # c16-c25 reuse their 4-tuples: c6-c15 retire
    for port in range(30010, 30000 + MAX_SETTLED):
        attempt(port, 1000)  # 5 fewer settled waiting than MAX_SETTLED, 5 more queued
    # all within 0.1 s: nothing is silent for the settled linger
    after, end = swept_steps(tmp_path, pkts, 30.0, 2.0, decode_postgres=False, transfer=False)
    assert after[-1] == list(range(6, 16))
    assert sorted(end) == [*range(1, 6), *range(16, MAX_SETTLED + 16)]  # the rest at the end


def _handshake_cases() -> list[tuple]:  # type: ignore[type-arg]
    """Connection attempts whose first packets are handshake segments, one per client port,
    interleaved packet by packet: what the engine keeps as packets before making them."""
    query = b"Q\x00\x00\x00\x0dSELECT 1\x00"

    Seg = tuple[bytes, bytes, int, int, int, int, int, bytes]

    def c(port: int, seq: int, ack: int, flags: int, payload: bytes = b"") -> Seg:
        return (CLIENT, SERVER, port, 5432, seq, ack, flags, payload)

    def s(port: int, seq: int, ack: int, flags: int, payload: bytes = b"") -> Seg:
        return (SERVER, CLIENT, 5432, port, seq, ack, flags, payload)

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


def test_connections_kept_as_handshake_segments_report_as_if_made_at_once(
        tmp_path: Path) -> None:
    """A connection of only SYNs and SYN-ACKs waits as its packets; made when another packet
    comes or at the end, it must report as a connection made at its first packet (its frame,
    its time, its roles), numbered as it opened, whether the pass sweeps or not."""
    pkts = _handshake_cases()
    kept = report(pkts, math.inf, settled=math.inf, swept=True, at=tmp_path)
    conns = kept["connections"]
    assert [c["client"]["port"] for c in conns] == [
        40001, 40002, 40003, 40004, 40005, 40006, 40007, 40008, 40009, 40004, 40009]
    assert [c["packets"] for c in conns] == [3, 7, 2, 1, 3, 5, 20, 1, 1, 1, 1]
    # each connection's first packet: the first on its port, or the new SYN
    first: dict[tuple[int, bool], tuple] = {}  # type: ignore[type-arg]
    for p in pkts:
        port = p[4] if p[2] == CLIENT else p[5]
        new_syn = (port, p[6]) in ((40004, 7000),) or (port == 40009 and p[8] == SYN)
        first.setdefault((port, new_syn), p)
    order = [(40000 + i, False) for i in range(1, 10)] + [(40004, True), (40009, True)]
    assert [c["first_frame"] for c in conns] == [first[k][0] for k in order]
    assert [c["start_s"] for c in conns] == [round(first[k][1] - pkts[0][1], 6) for k in order]
    assert [c["roles_from"] for c in conns] == [
        "handshake", "handshake", "handshake", "handshake", "syn-ack", "handshake",
        "handshake", "handshake", "syn-ack", "handshake", "handshake"]  # c5: TCP's roles
    assert conns[1]["handshake_seen"] and conns[1]["directions"]["client_to_server"][
        "payload_bytes"] == 14
    assert report(pkts, 30.0, swept=True, at=tmp_path) == kept


def test_a_scan_of_unanswered_syns_reports_every_attempt() -> None:
    """A scan of 3,000 ports that never answer, around one real connection: every attempt is
    reported, in opening order (what the scan holds meanwhile: the test below)."""
    real = conversation(20000, 1000.0 + 1500 * 1e-3)
    scan = [(0, 1000.0 + i * 1e-3, CLIENT, SERVER, 30000 + i, 5432, 100, 0, SYN, 64240, 0,
             b"", b"") for i in range(3000)]
    pkts = sorted(scan + real, key=lambda p: p[1])
    pkts = [(i + 1, *p[1:]) for i, p in enumerate(pkts)]
    rep = report(pkts, 30.0)
    conns = rep["connections"]
    assert len(conns) == 3001
    assert [c["first_frame"] for c in conns] == sorted(c["first_frame"] for c in conns)
    assert [c["id"] for c in conns] == [f"c{i}" for i in range(1, 3002)]
    assert [c["packets"] for c in conns].count(1) == 3000


def test_unanswered_syns_hold_a_packet_not_analyses(tmp_path: Path) -> None:
    """While the pass goes on, an unanswered SYN is held as its packet: 8,000 of them grow
    the pass's peak over 2,000 by a fraction of what 6,000 answered connections (made, with
    analyses, never closed) take. (A Connection with its analyses took 12 KB in the Python
    engine; 200,000 unanswered SYNs took 2.4 GB.)"""

    def scan(answered: bool) -> Any:
        def make(n: int) -> list[tuple]:  # type: ignore[type-arg]
            out = []
            for i in range(n):
                port, ts = 10000 + i, 1000.0 + i * 1e-3
                out.append((0, ts, CLIENT, SERVER, port, 5432, 100, 0, SYN, 64240, 0, b"",
                            b""))
                if answered:
                    out.append((0, ts, SERVER, CLIENT, 5432, port, 900, 101, SYN | ACK, 64240,
                                0, b"", b""))
                    out.append((0, ts, CLIENT, SERVER, port, 5432, 101, 901, ACK, 64240, 0,
                                b"", b""))
            return [(i + 1, *p[1:]) for i, p in enumerate(out)]
        return make

    grew = {}
    for answered in (False, True):
        grew[answered], runs = growth(tmp_path, scan(answered), 2000, 30.0, 2.0)
        assert [r["handed"] for r in runs] == [0, 0]
    assert grew[True] > 6000 * 4000, grew
    assert grew[False] < 0.1 * grew[True], grew
