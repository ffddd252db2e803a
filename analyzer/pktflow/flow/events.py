"""The packets of the connections a diagram shows, as compact tuples, with the PostgreSQL
messages each segment completes. A second, selective pass: the analysis pass keeps aggregates
only, so memory does not grow with the capture; a diagram needs its packets, so it records only
the connections and the time range it draws, up to a bound."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from pktflow.capture.reader import open_capture
from pktflow.pgwire.conversation import Conversation
from pktflow.pgwire.messages import BACKEND, FRONTEND
from pktflow.pipeline import LINGER_S, SETTLED_LINGER_S, feed_capture
from pktflow.tcp.connection import Connection
from pktflow.tcp.engine import TcpEngine
from pktflow.tcp.observe import DirectionInfo, PacketObserver

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


class Labels:
    """Wraps a Conversation; remembers per frame which messages completed in it and whether the
    segment ended inside a message."""

    def __init__(self, conv: Conversation, out: dict[tuple[str, int], tuple[tuple[str, int], ...]],
                 partial: set[tuple[str, int]]) -> None:
        self.conv, self.out, self.partial = conv, out, partial
        # the counts of each side as last seen, and their named-message total
        self.seen: list[dict[str, int]] = [{}, {}]
        self.named = [0, 0]
        self.interned: dict[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]] = {}

    def feed(self, d: int, data: bytes, offset: int, frame: int, ts: float) -> None:
        side = self.conv.sides[d]
        rows, copies = side.rows, side.copies
        self.conv.feed(d, data, offset, frame, ts)
        key = (self.conv.conn_id, frame)
        codes = dict(self.out.get(key, ()))
        if side.named != self.named[d]:  # a control message: compare all counts
            seen = self.seen[d]
            for k, v in side.counts.items():
                if k not in ("DataRow", "CopyData") and v != seen.get(k, 0):
                    c = short_code(k)
                    codes[c] = codes.get(c, 0) + v - seen.get(k, 0)
            self.seen[d] = dict(side.counts)
            self.named[d] = side.named
        # DataRow and CopyData, most segments' only messages, from two ints
        for c, n in (("D", side.rows - rows), ("d", side.copies - copies)):
            if n:
                codes[c] = codes.get(c, 0) + n
        if codes:
            label = ordered(codes)  # bulk segments repeat a few labels: one tuple each
            self.out[key] = self.interned.setdefault(label, label)
        if side.buf or side.skip:
            self.partial.add(key)
        else:
            self.partial.discard(key)

    def gap(self, d: int, offset: int, length: int, frame: int, ts: float) -> None:
        self.conv.gap(d, offset, length, frame, ts)

    def finish(self) -> None:
        self.conv.finish()


class _Recorder:
    def __init__(self, conn_id: str, sink: "Collected") -> None:
        self.conn_id, self.sink = conn_id, sink

    def on_packet(self, d: int, frame: int, ts: float, seq: int, end: int, ack: int,
                  win: int, flags: int, kind: int) -> None:
        sink = self.sink
        if not sink.t0 <= ts <= sink.t1:
            return
        if len(sink.events) >= MAX_EVENTS:
            sink.cut = True
            return
        sink.events.append(Event(self.conn_id, d, frame, ts, seq, end, ack, win, flags, kind))

    def finish(self, info: tuple[DirectionInfo, DirectionInfo]) -> None:
        pass


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
    """Packets of `conn_ids` with capture-absolute times in [t0, t1]."""
    out = Collected(t0, t1)
    convs: dict[str, Conversation] = {}

    def sink(conn: Connection) -> Labels | None:
        if conn.id not in conn_ids:
            return None
        dirs = conn.dirs
        conv = Conversation(conn.id, start_seen=lambda d: dirs[d].isn_seen)
        convs[conn.id] = conv
        return Labels(conv, out.labels, out.partial)

    def observers(conn: Connection) -> list[PacketObserver]:
        return [_Recorder(conn.id, out)] if conn.id in conn_ids else []

    def settled(conn: Connection) -> None:
        """A finished connection: whether the report swapped its roles (the wire protocol
        corrects the engine's guess, as in the analysis pass)."""
        conv = convs.pop(conn.id, None)
        if conv is not None:
            out.swapped[conn.id] = (conn.swapped if conn.handshake_seen or
                                    conv.frontend_direction is None
                                    else conv.frontend_direction == 1)

    # The analysis pass's engine, retiring connections as it does: the same connections and
    # numbers by construction, and memory that follows the connections open at once (kept to
    # the end, a scan's 200,000 unanswered SYNs held 2.5 GB).
    engine = TcpEngine(sink_factory=sink, observer_factory=observers,  # type: ignore[arg-type]
                       retired=settled, linger=LINGER_S, settled_linger=SETTLED_LINGER_S)
    with open_capture(path) as cap:
        feed_capture(cap, engine, progress)
    engine.finish()
    for conn in engine.connections:
        settled(conn)
    return out
