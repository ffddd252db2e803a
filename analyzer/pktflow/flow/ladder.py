"""The ladder (sequence) diagram as data: lanes, one row per packet, and repeated round trips
collapsed into groups. Every renderer (terminal, SVG/HTML, Mermaid, PlantUML) draws this model.

The core makes the rows from the packets its pass kept and folds them (drawing/rows.rs,
fold.rs); here they are named for Python: lanes, the pooler's marks, and the rows a renderer
reads, made Python values a slice at a time.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple, overload

from pktflow import _core
from pktflow.flow.legend import Detail, code, legend, tokens
from pktflow.report.connections import by_id

# Packets a diagram keeps (its rows are held by the core, about 100 bytes each); past it the
# diagram says it was cut.
MAX_ROWS = 500_000
# Client (or server) endpoints drawn on lanes of their own; more share one lane, with a note.
# A drawing (SVG, HTML, JSON, Mermaid) has room for a pooler's clients in transaction mode,
# each on its lane so that the multiplexing shows; a terminal fits what its width allows
# (flow/cli.py), at least MAX_SIDE_LANES.
MAX_SIDE_LANES = 3
MAX_DRAWN_SIDE_LANES = 12
MARKED_ROWS = 6  # retransmissions, zero windows... drawn of a folded bulk transfer
# How every format draws a ladder: bulk transfers folded to their most repeated step (the
# default), each repeated block folded (--detail), or every packet (--expand).
FOLDS = ("bulk", "detail", "expand")
ODD_LISTED = 6  # frames named of a folded group's rows that differ in size


class Row(NamedTuple):
    t: float  # seconds from the capture's first packet
    frame: int
    conn: str
    src: int  # lane index
    dst: int
    kind: str  # data | ack | window | dupack | keepalive | probe | syn | syn-ack | fin | rst
    nbytes: int  # payload bytes (data) or bytes newly acknowledged (ack; 0: ACK-only)
    win: int
    # PostgreSQL messages completed in the segment, by name, in wire order, repeats folded
    msgs: tuple[tuple[str, int], ...]
    partial: bool  # the segment ends inside a message
    marks: tuple[str, ...]  # "retransmission", "out-of-order", "zero-window", ...
    win_raw: bool = False  # the sender's window scale is unknown: `win` is the raw field
    details: tuple[Detail, ...] = ()  # command tags, errors' SQLSTATE and message
    to_server: bool = False  # sent toward the server: frontend messages
    acks: str = ""  # what an ACK-only acknowledges: "SYN-ACK", "FIN" (or nothing)
    push: bool = False  # PSH: Linux sets it on the last segment of each write
    seq: int = 0  # where the payload starts in its direction's stream (relative)
    ack: int = -1  # the next byte the sender expects of the other direction's stream


@dataclass
class Group:
    """`reps` consecutive repetitions of the block rows[start:start + period]."""

    start: int
    period: int
    reps: int

    @property
    def end(self) -> int:
        return self.start + self.period * self.reps


@dataclass
class Phase:
    """A bulk transfer: consecutive rows moving rows (DataRow/CopyData) one way, with the ACKs
    coming back; drawn as its most repeated step and totals, so a whole result fits a screen."""

    start: int
    end: int
    dominant: Group | None


class Rows(Sequence[Row]):
    """The core's rows, made Row values a chunk at a time as they are read; two chunks are
    kept (a renderer reads a folded drawing's rows here and there)."""

    CHUNK = 1024
    KEPT = 2

    def __init__(self, drawing: _core.Drawing) -> None:
        self._drawing = drawing
        self._n = len(drawing)
        self._chunks: dict[int, list[Row]] = {}

    def __len__(self) -> int:
        return self._n

    def _chunk(self, k: int) -> list[Row]:
        got = self._chunks.get(k)
        if got is None:
            got = [_row(t) for t in self._drawing.rows(k * self.CHUNK, (k + 1) * self.CHUNK)]
            if len(self._chunks) >= self.KEPT:
                del self._chunks[next(iter(self._chunks))]
            self._chunks[k] = got
        return got

    @overload
    def __getitem__(self, i: int) -> Row: ...

    @overload
    def __getitem__(self, i: slice) -> list[Row]: ...

    def __getitem__(self, i: int | slice) -> Row | list[Row]:
        if isinstance(i, slice):
            start, stop, step = i.indices(self._n)
            if step != 1:
                return [self[k] for k in range(start, stop, step)]
            if stop - start > self.CHUNK:
                return [_row(t) for t in self._drawing.rows(start, stop)]
            return [self[k] for k in range(start, stop)]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        return self._chunk(i // self.CHUNK)[i % self.CHUNK]

    def __iter__(self) -> Iterator[Row]:
        for k in range(0, self._n, self.CHUNK):
            yield from (_row(t) for t in self._drawing.rows(k, k + self.CHUNK))


def _row(t: tuple[Any, ...]) -> Row:
    """A core row (Row's fields in order, each detail a tuple) as a Row."""
    if t[12]:
        return Row._make((*t[:12], tuple(Detail(*d) for d in t[12]), *t[13:]))
    return Row._make(t)


class Run(NamedTuple):
    """Plain bulk segments of one connection one way (rows of DataRow, CopyData or TLS data
    and nothing else), past the first RUN_ROWS of their run, summed up: what teaching mode's
    walk reads of them."""

    conn: str
    src: int
    dst: int
    to_server: bool
    rows: int
    frames: list[int]  # the first (at most the cap asked for), and `last_frame`
    last_frame: int
    messages: dict[str, int]
    partial_datarow: bool  # one ends inside a DataRow
    partial_empty: bool  # one ends inside a message it completes none of

    @property
    def msgs(self) -> tuple[tuple[str, int], ...]:
        return tuple(self.messages.items())


# A run of plain bulk segments keeps this many rows before the rest are summed up: the walk
# names an exchange's first four arrows.
RUN_ROWS = 4


@dataclass
class Ladder:
    title: str
    lanes: list[str]
    rows: Sequence[Row]
    drawing: Any = None  # the core's (pktflow._core.Drawing): how the rows fold, their totals
    cut: bool = False
    notes: list[str] = field(default_factory=list)
    explain: list[str] = field(default_factory=list)  # teaching mode's sentences
    legend: list[str] = field(default_factory=list)  # every symbol drawn, explained
    # teaching mode's walk as steps: (title, sentence, frames), for the page's step-through
    steps: list[tuple[str, str, list[int]]] = field(default_factory=list)
    fold: str = "bulk"  # one of FOLDS: the same for text, SVG, HTML, JSON, Mermaid, PlantUML

    def shown(self) -> Iterator[Row | Group | Phase]:
        """What every format draws, in order, as `fold` says: a Row is one arrow, a Group
        its block once with the repetitions, a Phase its totals and most repeated step."""
        if self.fold == "expand":
            for i in range(len(self.rows)):
                yield self.rows[i]
        else:
            yield from (self.phases if self.fold == "bulk" else self.items)

    def _item(self, start: int, period: int, reps: int) -> Row | Group:
        return self.rows[start] if reps == 1 else Group(start, period, reps)

    @cached_property
    def items(self) -> list[Row | Group]:
        """Rows and groups of repeated blocks, in order."""
        return [self._item(*it) for it in self.drawing.items()]

    @cached_property
    def phases(self) -> list[Row | Group | Phase]:
        """The items with bulk transfers folded."""
        out: list[Row | Group | Phase] = []
        for kind, a, b, c in self.drawing.phases():
            if kind == "phase":
                out.append(Phase(a, b, None if c is None else Group(*c)))
            else:
                out.append(self._item(a, b, c))
        return out

    def walk(self, cap: int) -> list[Row | Run]:
        """The rows teaching mode's walk reads, in order: every row but ACKs with nothing of
        their own, runs of plain bulk segments past their first RUN_ROWS summed up (at most
        `cap` of their frames listed)."""
        out: list[Row | Run] = []
        for what, v in self.drawing.walk_view(RUN_ROWS, cap):
            if what == "row":
                out.append(_row(v))
            else:
                out.append(Run(f"c{v['conn']}", v["src"], v["dst"], v["to_server"], v["rows"],
                               v["frames"], v["last_frame"], v["messages"],
                               v["partial_datarow"], v["partial_empty"]))
        return out

    def totals(self, start: int, end: int) -> dict[str, Any]:
        """What rows[start:end] hold: rows, segments, bytes, ACKs, messages (per leg too),
        first and last frame and time."""
        return self.drawing.totals(start, end)  # type: ignore[no-any-return]

    def group_totals(self, g: Group) -> dict[str, Any]:
        return self.totals(g.start, g.end)

    def group_sizes(self, g: Group) -> list[_core.GroupSizes]:
        """The steps of a group whose repetitions differ in size (a request alike but for a
        parameter's digits): the size most have, and the odd ones out."""
        return self.drawing.group_sizes(g.start, g.period, g.reps,  # type: ignore[no-any-return]
                                        ODD_LISTED)

    def odd_ones(self, g: Group) -> list[str]:
        """What group_sizes says, a sentence per step: "step 1 (P B D E S): 108 B in 17 of
        20; 107 B at frames 47, 57, 59"."""
        out = []
        for s in self.group_sizes(g):
            r = self.rows[g.start + s["step"]]
            what = " ".join(tokens(r.msgs)) or r.kind
            sizes: dict[int, list[int]] = {}
            for frame, n in s["others"]:
                sizes.setdefault(n, []).append(frame)
            more = s["other_count"] - len(s["others"])
            listed = "; ".join(f"{n:,} B at frame{'s' if len(fs) > 1 else ''} "
                               f"{', '.join(map(str, fs))}" for n, fs in sizes.items())
            out.append(f"step {s['step'] + 1} ({what}): {s['bytes']:,} B in {s['alike']:,} of "
                       f"{g.reps:,}; {listed}" + (f" and {more:,} more" if more else ""))
        return out

    def marked(self, start: int, end: int, limit: int) -> tuple[list[Row], int]:
        """The rows of rows[start:end] with a mark: the first `limit`, and how many."""
        first, n = self.drawing.marked(start, end, limit)
        return [_row(t) for t in first], n

    def breakdown(self, start: int, end: int) -> list[dict[str, Any]]:
        """Per arrow direction in a span: segments and their median size, ACKs and their
        median bytes. On a relay this shows the re-split: 8,192 B in from the server, ~4 KB
        out."""
        return self.drawing.breakdown(start, end)  # type: ignore[no-any-return]


def label(row: Row, *, windows: bool = True) -> str:
    """The text on an arrow: "8,192 B  D×71…", "ACK 16,384 B  win 1,658", "SYN-ACK"."""
    win = f"  win {row.win:,}{' raw' if row.win_raw else ''}" if windows else ""
    if row.kind == "data":
        msgs = " ".join(tokens(row.msgs, row.details))
        text = f"{row.nbytes:,} B" + (f"  {msgs}" if msgs else "") + ("…" if row.partial else "")
    elif row.kind == "ack":
        text = (f"ACK {row.nbytes:,} B" if row.nbytes else "ACK") + \
            (f" of {row.acks}" if row.acks else "") + win
    elif row.kind == "window":
        text = f"window update {row.win:,}{' raw' if row.win_raw else ''}"
    elif row.kind == "dupack":
        text = "dup ACK"
    elif row.kind == "keepalive":
        text = "keep-alive"
    elif row.kind == "probe":
        text = "window probe"
    else:
        text = row.kind.upper()
    for m in row.marks:
        text += f"  [{m}]"
    return text


def _lane_names(sel: list[dict[str, Any]], side_lanes: int = MAX_SIDE_LANES,
                listening: dict[str, int] | None = None
                ) -> tuple[list[str], dict[str, tuple[int, int]], list[str]]:
    """Lanes in order client(s) | pooler | server(s); per connection, its (client, server) lanes;
    notes on lanes merged. `sel`: the connections drawn; `listening`: per relayed connection,
    the port its pooler listens on (the relay's, so that a server leg drawn alone names it)."""

    def endpoint(ep: dict[str, Any]) -> str:
        return f"{ep['ip']}:{ep['port']}"

    pooler = None
    if any(c.get("role") in ("front", "back") for c in sel):
        # one lane for the pooler, named by its address and the port(s) it listens on, as a
        # server's lane is
        ports = sorted({c["server"]["port"] for c in sel if c.get("role") == "front"}
                       | {(listening or {})[c["id"]] for c in sel
                          if c["id"] in (listening or {})})
        host = next(c["server"]["ip"] if c.get("role") == "front" else c["client"]["ip"]
                    for c in sel if c.get("role") in ("front", "back"))
        pooler = f"pooler {host}" + (f":{','.join(map(str, ports))}" if ports else "")
    ends: dict[str, tuple[str, str]] = {}
    for c in sel:
        role = c.get("role", "direct")
        client = f"client {endpoint(c['client'])}"
        server = f"server {endpoint(c['server'])}"
        ends[c["id"]] = (pooler if role == "back" and pooler else client,
                         pooler if role == "front" and pooler else server)
    clients = list(dict.fromkeys(a for a, _ in ends.values() if a != pooler))
    servers = list(dict.fromkeys(b for _, b in ends.values() if b != pooler))
    notes = []
    shared: dict[str, str] = {}  # endpoint -> the lane it shares
    for side, role in ((clients, "clients"), (servers, "servers")):
        if len(side) > side_lanes:  # a storm's 20,000 clients: one lane, not 20,000
            shared.update(dict.fromkeys(side, f"{role} ({len(side):,} endpoints)"))
            notes.append(f"the {len(side):,} {role} are drawn as one lane (this drawing gives "
                         f"a lane each to {side_lanes} at most); --connection draws chosen "
                         f"connections apart")
    lanes = list(dict.fromkeys(shared.get(name, name) for name in
                               clients + ([pooler] if pooler else []) + servers))
    index = {name: i for i, name in enumerate(lanes)}
    return lanes, {k: (index[shared.get(a, a)], index[shared.get(b, b)])
                   for k, (a, b) in ends.items()}, notes


def lanes_of(report: Any, conn_ids: set[str], side_lanes: int = MAX_SIDE_LANES
             ) -> tuple[list[str], list[tuple[int, int, int, bool, bool]], list[str]]:
    """The lanes' names, each connection's as the core draws it (number, client lane, server
    lane, whether the client's and the server's window scale is unknown: windows raw), and
    notes on lanes shared."""
    # what is drawn of each connection: the report's are read one at a time (a storm's
    # 20,000, read and kept, were 600 MB)
    drawn: list[dict[str, Any]] = []
    raw: set[tuple[str, bool]] = set()  # (conn, sender is client): windows raw, scale unknown
    for c in by_id(report["connections"], conn_ids):
        drawn.append({"id": c["id"], "role": c.get("role", "direct"), "client": c["client"],
                      "server": c["server"]})
        raw.update((c["id"], side == "client_to_server") for side, d in c["directions"].items()
                   if not d.get("window_scale_known"))
    listening = {cid: relay["front_port"] for relay in report.get("relays") or []
                 for cid in (*relay["front_connections"], *relay["back_connections"])}
    lanes, ends, notes = _lane_names(drawn, side_lanes, listening)
    return lanes, [(int(cid[1:]), a, b, (cid, True) in raw, (cid, False) in raw)
                   for cid, (a, b) in ends.items()], notes


def numbers(conn_ids: set[str]) -> list[int]:
    """The core's numbers of connections "c1", "c2"..."""
    return [int(c[1:]) for c in conn_ids if c[1:].isdigit()]


def build(report: Any, conn_ids: set[str], t0: float, t1: float, title: str,
          side_lanes: int = MAX_SIDE_LANES, plots: bool = False) -> Ladder:
    """The ladder of connections `conn_ids` within capture times [t0, t1], from the packets
    the report's pass kept (`report`: pipeline.Report, its core holding them); `plots`: what
    the plots show measured too (ladder.drawing.plot())."""
    lanes, drawn_as, lane_notes = lanes_of(report, conn_ids, side_lanes)
    owners = [(int(conn[1:]), frame, mark)
              for (conn, frame), marks in _owners(report, conn_ids).items() for mark in marks]
    # a repeated block starts with a request: a client's, or the pooler's when only its
    # server legs are drawn
    openers = [i for i, name in enumerate(lanes) if name.startswith("client")] or \
        [i for i, name in enumerate(lanes) if name.startswith("pooler")]
    drawing = report.core.drawing(numbers(conn_ids), t0, t1, MAX_ROWS, drawn_as, owners,
                                  openers, plots)
    rows = Rows(drawing)
    ladder = Ladder(title, lanes, rows, drawing, cut=drawing.cut,
                    notes=lane_notes + _time_notes(drawing.times_back()))
    used, kinds = drawing.symbols()
    ladder.legend = legend(used, kinds)
    if drawing.cut:
        ladder.notes.append("the diagram was cut: more packets than it keeps; select a query "
                            "or a time range")
    return ladder


# How a pooler's request is marked: sent for the client connection named, or its own.
POOLER_OWN = "pooler's own"


def _owners(report: dict[str, Any], conn_ids: set[str]) -> dict[tuple[str, int], list[str]]:
    """(back connection, frame) -> a mark per query the frame sent: "for c5" (a client's,
    forwarded) or the pooler's own statement, from the relay's pairing."""
    of: dict[tuple[str, int], str] = {}  # (back connection, query index) -> mark
    for relay in report.get("relays") or []:
        for p in relay["queries"]:
            if p["back"]["connection"] in conn_ids:
                of[(p["back"]["connection"], p["back"]["query_index"])] = \
                    f"for {p['front']['connection']}"
        for q in relay.get("pooler_own_queries") or []:
            if q["connection"] in conn_ids:
                of[(q["connection"], q["query_index"])] = POOLER_OWN
    out: dict[tuple[str, int], list[str]] = {}
    for c in by_id(report["connections"], {conn for conn, _ in of}):
        for i, q in enumerate(c.get("queries") or []):
            mark = of.get((c["id"], i))
            if mark is not None and q.get("sent_frame") is not None:
                marks = out.setdefault((c["id"], q["sent_frame"]), [])
                if mark not in marks:
                    marks.append(mark)
    return out


def _time_notes(back: list[tuple[int, int]]) -> list[str]:
    """Say where printed times go backwards (`back`: frame and microseconds of each row
    earlier than the one before it): rows keep the capture's order."""
    if not back:
        return []
    frames = ", ".join(str(f) for f, _ in back[:6]) + (" …" if len(back) > 6 else "")
    return [f"frame{'s' if len(back) > 1 else ''} {frames} carr{'y' if len(back) > 1 else 'ies'} "
            f"a timestamp up to {max(us for _, us in back)} µs earlier than the frame before: "
            f"the rows keep the capture's order (as tshark numbers the frames), so the "
            f"printed times go back there"]


def row_json(r: Row) -> dict[str, Any]:
    letters: dict[str, int] = {}
    for name, n in r.msgs:
        c = code(name)
        letters[c] = letters.get(c, 0) + n
    return {"t": r.t, "frame": r.frame, "connection": r.conn, "from": r.src, "to": r.dst,
            "kind": r.kind, "bytes": r.nbytes, "window": r.win,
            "messages": letters, "message_sequence": [list(m) for m in r.msgs],
            "details": [{"message": d.name, "severity": d.severity, "sqlstate": d.code,
                         "text": d.text} for d in r.details],
            "partial": r.partial, "marks": list(r.marks), "label": label(r)}


def phase_json(ladder: Ladder, it: Phase) -> dict[str, Any]:
    """A folded bulk transfer: its totals, per arrow direction its segments and ACKs, its
    marked rows (the first MARKED_ROWS) and its most repeated block."""
    marked, n = ladder.marked(it.start, it.end, MARKED_ROWS)
    g = it.dominant
    return {**ladder.totals(it.start, it.end),
            "breakdown": ladder.breakdown(it.start, it.end),
            "marked": [row_json(r) for r in marked], "marked_more": n - len(marked),
            "dominant": None if g is None else {
                "repetitions": g.reps, "period": g.period,
                "rows": [row_json(r) for r in ladder.rows[g.start:g.start + g.period]]}}


def to_json(ladder: Ladder) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for it in ladder.shown():
        if isinstance(it, Phase):
            items.append({"phase": phase_json(ladder, it)})
        elif isinstance(it, Group):
            items.append({"group": {"repetitions": it.reps, "period": it.period,
                                    **ladder.group_totals(it),
                                    "sizes": ladder.group_sizes(it),
                                    "rows": [row_json(r)
                                             for r in ladder.rows[it.start:it.end]]}})
        else:
            items.append(row_json(it))
    return {"schema": "pktflow.flow/1", "title": ladder.title, "lanes": ladder.lanes,
            "fold": ladder.fold, "items": items, "cut": ladder.cut, "notes": ladder.notes,
            "explain": ladder.explain, "legend": ladder.legend}
