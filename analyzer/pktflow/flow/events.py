"""The packets of the connections a diagram shows, as compact tuples, with the PostgreSQL
messages each segment completes. A second, selective pass: the analysis pass keeps aggregates
only, so memory does not grow with the capture; a diagram needs its packets, so it records only
the connections and the time range it draws, up to a bound."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from pktflow import _core
from pktflow.capture.problems import open_error
from pktflow.flow.legend import Detail
from pktflow.pipeline import LINGER_S, SETTLED_LINGER_S

MAX_EVENTS = 200_000  # packets kept for one diagram; past it the diagram says it was cut

class Event(NamedTuple):
    conn: str
    d: int  # engine direction: 0 client->server as first guessed, see Connection.swapped
    frame: int
    ts: float
    seq: int
    end: int
    ack: int
    win: int
    flags: int
    kind: int
    sack: int  # the first SACK block: 1 above the ACK (data past a hole), 2 below (D-SACK)


class Collected:
    def __init__(self, t0: float, t1: float) -> None:
        self.t0, self.t1 = t0, t1
        self.events: list[Event] = []
        # per (connection, frame): the messages it completed, in wire order, repeats folded
        self.labels: dict[tuple[str, int], tuple[tuple[str, int], ...]] = {}
        self.details: dict[tuple[str, int], tuple[Detail, ...]] = {}
        self.partial: set[tuple[str, int]] = set()
        self.swapped: dict[str, bool] = {}
        self.cut = False


def collect(path: str, conn_ids: set[str], t0: float, t1: float,
            progress: Callable[[int], None] | None = None) -> Collected:
    """Packets of `conn_ids` with capture-absolute times in [t0, t1], from the core's engine
    run as the analysis pass runs it: the same connections and numbers by construction."""
    out = Collected(t0, t1)
    numbers = sorted(int(c[1:]) for c in conn_ids if c[1:].isdigit())
    try:
        got = _core.collect(path, numbers, t0, t1, MAX_EVENTS, LINGER_S, SETTLED_LINGER_S)
    except _core.OpenError as exc:
        raise open_error(exc, path) from None
    out.events = [Event(f"c{e[0]}", *e[1:]) for e in got["events"]]
    out.cut = got["cut"]
    # Labels: the messages each segment completed, as the core ordered them (wire order).
    interned: dict[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]] = {}
    for number, frame, messages in got["labels"]:
        label = tuple((name, count) for name, count in messages)
        out.labels[(f"c{number}", frame)] = interned.setdefault(label, label)
    for number, frame, details in got["details"]:
        out.details[(f"c{number}", frame)] = tuple(
            Detail(d["name"], d["code"], d["text"], d["severity"]) for d in details)
    out.partial = {(f"c{number}", frame) for number, frame in got["partial"]}
    out.swapped = {f"c{number}": swapped for number, swapped in got["swapped"]}
    if progress is not None:
        progress(got["records"])
    return out
