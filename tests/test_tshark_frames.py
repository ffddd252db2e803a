"""Frame by frame against tshark: the advertised window and the bytes in flight of every packet,
as pktflow's engine hands them to the analyses, equal tshark's tcp.window_size and
tcp.analysis.bytes_in_flight (its own definitions: the window scaled when the handshake proved
the factor, raw otherwise; in flight counted on data segments, from the highest byte sent to the
last acknowledgement seen at the capture point)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import NamedTuple

import pytest
from tsharkcheck import TSHARK

from pktflow._core import FILLS_HOLE, OUT_OF_ORDER, SYN
from pktflow.pipeline import Options, analyze

class Event(NamedTuple):
    """A packet as the engine handed it to the analyses (the core's kept packets)."""
    conn: int
    d: int
    frame: int
    ts: float
    seq: int
    end: int
    ack: int
    win: int
    flags: int
    kind: int
    sack: int


CAPTURES = sorted((Path(__file__).resolve().parent.parent / "captures").glob("*.pcap"))

pytestmark = pytest.mark.skipif(TSHARK is None,
                                reason="tshark is not installed (Debian package tshark)")


def tshark_frames(path: Path) -> dict[int, tuple[int, int | None]]:
    out = subprocess.run(
        [TSHARK or "tshark", "-n", "-r", str(path), "-Y", "tcp", "-T", "fields",
         "-e", "frame.number", "-e", "tcp.window_size", "-e", "tcp.analysis.bytes_in_flight",
         "-o", "tcp.analyze_sequence_numbers:TRUE"],
        capture_output=True, text=True, check=True).stdout
    frames = {}
    for line in out.splitlines():
        num, win, flight = (line.split("\t") + ["", ""])[:3]
        frames[int(num)] = (int(win), int(flight) if flight else None)
    return frames


def pktflow_frames(path: Path) -> tuple[dict[int, tuple[int, int | None]], set[int]]:
    """Per frame (window, bytes in flight); and the data frames sent while a reordering is not
    yet acknowledged, where tshark's bytes in flight follows rules of its own (none for the
    segment after a hole, the one filling it and the next; then a count from its own reordering
    state until the receiver acknowledges past it). pktflow keeps one definition throughout:
    highest byte sent minus last acknowledgement seen."""
    report = analyze(str(path), Options(record=True))
    numbers = [int(c["id"][1:]) for c in report["connections"]]
    got = report.core.packets(numbers, float("-inf"), float("inf"), 10_000_000)
    high: dict[tuple[str, int], int] = {}
    acked: dict[tuple[str, int], int] = {}
    frames = {}
    unsettled: dict[tuple[str, int], int] = {}  # direction -> ack that settles its reordering
    after: set[int] = set()
    for ev in (Event(*e) for e in got["events"]):
        mine, peer = (ev.conn, ev.d), (ev.conn, 1 - ev.d)
        if ev.ack >= 0 and not ev.flags & SYN:
            acked[peer] = max(acked.get(peer, ev.ack), ev.ack)
            if peer in unsettled and acked[peer] >= unsettled[peer]:
                del unsettled[peer]
        flight = None
        if ev.end > ev.seq:
            high[mine] = max(high.get(mine, 0), ev.end)
            flight = high[mine] - acked.get(mine, 0)
            if ev.kind & (OUT_OF_ORDER | FILLS_HOLE):
                unsettled[mine] = high[mine]
            if mine in unsettled:
                after.add(ev.frame)
        frames[ev.frame] = (ev.win, flight)
    return frames, after


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_window_and_bytes_in_flight_per_frame(path: Path) -> None:
    (ours, reordered), theirs = pktflow_frames(path), tshark_frames(path)
    assert ours.keys() == theirs.keys()
    wins = [f for f in ours if ours[f][0] != theirs[f][0]]
    assert not wins, [(f, ours[f][0], theirs[f][0]) for f in wins[:10]]
    flights = [f for f in ours if ours[f][1] != theirs[f][1] and f not in reordered]
    assert not flights, [(f, ours[f][1], theirs[f][1]) for f in flights[:10]]
    # the documented difference stays the exception
    assert len(reordered) <= 0.05 * sum(1 for v in ours.values() if v[1] is not None)
