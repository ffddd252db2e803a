"""The packets of the connections a diagram shows, as compact tuples, with the PostgreSQL
messages each segment completes. A second, selective pass: the analysis pass keeps aggregates
only, so memory does not grow with the capture; a diagram needs its packets, so it records only
the connections and the time range it draws, up to a bound."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from pktflow import _core
from pktflow.capture.problems import open_error
from pktflow.pgwire.messages import BACKEND, FRONTEND
from pktflow.pgwire.report import frontend_direction
from pktflow.pipeline import LINGER_S, SETTLED_LINGER_S

MAX_EVENTS = 200_000  # packets kept for one diagram; past it the diagram says it was cut

_CODES = {name: chr(t) for t, name in FRONTEND.items()} | \
    {name: chr(t) for t, name in BACKEND.items()}


def short_code(name: str) -> str:
    """"DataRow" -> "D", as the protocol documentation's type bytes; untyped messages keep a
    short name."""
    if name in _CODES:
        return _CODES[name]
    if name.startswith("Authentication"):
        return "R"
    if name.startswith(("SASL", "GSS")) or name == "PasswordMessage":
        return "p"
    return {"StartupMessage": "Startup", "SSLRequest": "SSLRequest",
            "GSSENCRequest": "GSSENCRequest", "CancelRequest": "Cancel"}.get(name, name)


# The order messages take in a segment, per role, so labels read like the protocol flows.
_ORDER = {c: i for i, c in enumerate(
    ["Startup", "SSLRequest", "GSSENCRequest", "Cancel", "R", "p", "K", "v", "S", "Q", "P", "1",
     "B", "2", "t", "n", "T", "G", "H", "W", "D", "d", "c", "f", "s", "E", "I", "C", "N", "A",
     "F", "V", "3", "X", "Z"])}


def ordered(codes: dict[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(codes.items(), key=lambda kv: _ORDER.get(kv[0], 99)))


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


class Collected:
    def __init__(self, t0: float, t1: float) -> None:
        self.t0, self.t1 = t0, t1
        self.events: list[Event] = []
        self.labels: dict[tuple[str, int], tuple[tuple[str, int], ...]] = {}
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
        raise open_error(exc.args[0], path) from None
    out.events = [Event(f"c{e[0]}", *e[1:]) for e in got["events"]]
    out.cut = got["cut"]
    # Labels: the messages each segment completed, as short codes in the protocol's order.
    interned: dict[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]] = {}
    for number, frame, messages in got["labels"]:
        codes: dict[str, int] = {}
        for name, count in messages:
            c = short_code(name)
            codes[c] = codes.get(c, 0) + count
        label = ordered(codes)
        out.labels[(f"c{number}", frame)] = interned.setdefault(label, label)
    out.partial = {(f"c{number}", frame) for number, frame in got["partial"]}
    for number, tcp, postgres in got["connections"]:
        front = None if postgres is None else frontend_direction(postgres)
        out.swapped[f"c{number}"] = (front == 1 if front is not None
                                     and not tcp["handshake_seen"] else False)
    if progress is not None:
        progress(got["records"])
    return out
