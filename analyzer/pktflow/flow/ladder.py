"""The ladder (sequence) diagram as data: lanes, one row per packet, and repeated round trips
collapsed into groups. Every renderer (terminal, SVG/HTML, Mermaid, PlantUML) draws this model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pktflow._core import (ACK, FILLS_HOLE, FIN, KEEPALIVE, OUT_OF_ORDER, PARTIAL_RETRANS,
                           PSH, RETRANS, RST, SACK_ABOVE, SYN)
from pktflow.flow.events import Collected
from pktflow.flow.legend import Detail, code, legend, tokens
from pktflow.report.connections import by_id

MAX_PERIOD = 12  # longest repeating block (rows) looked for when collapsing
# Client (or server) endpoints drawn on lanes of their own; more share one lane, with a note.
# A drawing (SVG, HTML, JSON, Mermaid) has room for a pooler's clients in transaction mode,
# each on its lane so that the multiplexing shows; a terminal fits what its width allows
# (flow/cli.py), at least MAX_SIDE_LANES.
MAX_SIDE_LANES = 3
MAX_DRAWN_SIDE_LANES = 12


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

    @property
    def signature(self) -> tuple[Any, ...]:
        """What makes two rows "the same step": counts of messages and windows may differ."""
        return (self.src, self.dst, self.kind, self.nbytes, tuple(c for c, _ in self.msgs),
                self.partial, self.marks)


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


@dataclass
class Ladder:
    title: str
    lanes: list[str]
    rows: list[Row]
    items: list[Row | Group] = field(default_factory=list)  # rows and collapsed groups, in order
    phases: list[Row | Group | Phase] = field(default_factory=list)  # items with bulk folded
    cut: bool = False
    notes: list[str] = field(default_factory=list)
    explain: list[str] = field(default_factory=list)  # teaching mode's sentences
    legend: list[str] = field(default_factory=list)  # every symbol drawn, explained
    # teaching mode's walk as steps: (title, sentence, frames), for the page's step-through
    steps: list[tuple[str, str, list[int]]] = field(default_factory=list)


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


def build(report: dict[str, Any], got: Collected, conn_ids: set[str], title: str,
          side_lanes: int = MAX_SIDE_LANES) -> Ladder:
    # what is drawn of each connection: a stored report's are decoded one at a time (a
    # storm's 20,000, decoded and kept, were 600 MB)
    drawn: list[dict[str, Any]] = []
    raw: set[tuple[str, bool]] = set()  # (conn, sender is client): windows raw, scale unknown
    for c in by_id(report["connections"], conn_ids):
        drawn.append({"id": c["id"], "role": c.get("role", "direct"), "client": c["client"],
                      "server": c["server"]})
        raw.update((c["id"], side == "client_to_server") for side, d in c["directions"].items()
                   if not d.get("window_scale_known"))
    listening = {cid: relay["front_port"] for relay in report.get("relays") or []
                 for cid in (*relay["front_connections"], *relay["back_connections"])}
    lanes, ends, lane_notes = _lane_names(drawn, side_lanes, listening)
    owners = _owners(report, conn_ids)
    start = report["capture"]["first_ts"] or 0.0
    rows: list[Row] = []
    last_ack: dict[tuple[str, int], int] = {}  # (conn, data direction) -> highest ack seen
    sent_end: dict[tuple[str, int], int] = {}
    last_win: dict[tuple[str, int], int] = {}
    first_seq: dict[tuple[str, int], int] = {}  # where the drawn data of a direction begins
    fin_acked: set[tuple[str, int]] = set()
    syn_acked: set[tuple[str, int]] = set()
    syn_seen: set[tuple[str, int]] = set()  # (conn, direction) whose SYN was drawn
    fin_at: dict[tuple[str, int], int] = {}  # (conn, direction) -> its FIN's sequence number
    for ev in got.events:
        if ev.conn not in ends:
            continue
        client_lane, server_lane = ends[ev.conn]
        from_client = (ev.d == 0) != got.swapped.get(ev.conn, False)
        src, dst = (client_lane, server_lane) if from_client else (server_lane, client_lane)
        t = round(ev.ts - start, 6)
        marks: list[str] = []
        win_raw = (ev.conn, from_client) in raw
        here, peer = (ev.conn, ev.d), (ev.conn, 1 - ev.d)

        def row(kind: str, nbytes: int = 0, **kw: Any) -> None:
            rows.append(Row(t, ev.frame, ev.conn, src, dst, kind, nbytes, ev.win,
                            kw.pop("msgs", ()), kw.pop("partial", False), tuple(marks),
                            win_raw, to_server=from_client, seq=ev.seq, ack=ev.ack, **kw))

        if ev.win == 0 and not ev.flags & (SYN | RST):
            marks.append("zero window")
        if ev.sack:
            marks.append("SACK" if ev.sack == SACK_ABOVE else "D-SACK")
        if ev.flags & SYN:
            syn_seen.add(here)
            row("syn-ack" if ev.flags & ACK else "syn")
            continue
        if ev.flags & RST:
            marks.clear()
            row("rst")
            continue
        # what an ACK acknowledges: bytes of data, the peer's SYN-ACK (the handshake's last
        # step) or its FIN (one sequence number each, not bytes)
        acked, of = 0, ""
        if ev.flags & ACK and ev.ack >= 0:
            fin = fin_at.get(peer)
            data_ack = ev.ack - 1 if fin is not None and ev.ack > fin else ev.ack
            prev = last_ack.get(peer, first_seq.get(peer))
            if prev is not None and data_ack > prev:
                acked = data_ack - prev
            if prev is None or data_ack > prev:
                last_ack[peer] = data_ack
            if fin is not None and ev.ack == fin + 1 and here not in fin_acked:
                fin_acked.add(here)
                of = "FIN"
            elif ev.ack == 0 and peer in syn_seen and here not in syn_acked:
                syn_acked.add(here)
                of = "SYN-ACK" if from_client else "SYN"
        if ev.end > ev.seq and not ev.kind & KEEPALIVE:
            if ev.kind & (RETRANS | PARTIAL_RETRANS):
                marks.append("retransmission")
            if ev.kind & FILLS_HOLE:
                marks.append("out of order")
            elif ev.kind & OUT_OF_ORDER:
                marks.append("after a hole")
            if ev.flags & FIN:
                marks.append("FIN")
                fin_at[here] = ev.end
            key = (ev.conn, ev.frame)
            # a pooler's request: on whose behalf it went to the server
            marks += owners.get(key, ())
            first_seq.setdefault(here, ev.seq)
            sent_end[here] = max(sent_end.get(here, 0), ev.end)
            row("data", ev.end - ev.seq, msgs=got.labels.get(key, ()),
                partial=key in got.partial, details=got.details.get(key, ()),
                push=bool(ev.flags & PSH))
        elif ev.kind & KEEPALIVE or (ev.end == ev.seq and ev.seq == sent_end.get(here, 0) - 1
                                     and not ev.flags & FIN):
            # one sequence number back, empty or one byte: a keep-alive (tshark's rule), or
            # while the peer's window is zero the sender's window probe
            row("probe" if last_win.get(peer) == 0 else "keepalive")
        elif ev.flags & FIN:
            fin_at[here] = ev.seq
            row("fin")
        elif acked or of:
            row("ack", acked, acks=of)
        else:
            wkey = here
            if last_win.get(wkey) is not None and ev.win != last_win[wkey]:
                row("window")
            elif sent_end.get(peer, 0) > last_ack.get(peer, 0):
                row("dupack")
            else:
                row("ack")  # ACK-only: nothing new acknowledged, the same window
        last_win[here] = ev.win
    ladder = Ladder(title, lanes, rows, cut=got.cut, notes=lane_notes + _time_notes(rows))
    ladder.legend = symbols(rows)
    ladder.items = collapse(rows)
    ladder.phases = phases(rows, ladder.items)
    if got.cut:
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


def _time_notes(rows: list[Row]) -> list[str]:
    """Say where printed times go backwards: rows keep the capture's order."""
    back = [(r.frame, round((p.t - r.t) * 1e6)) for p, r in zip(rows, rows[1:]) if r.t < p.t]
    if not back:
        return []
    frames = ", ".join(str(f) for f, _ in back[:6]) + (" …" if len(back) > 6 else "")
    return [f"frame{'s' if len(back) > 1 else ''} {frames} carr{'y' if len(back) > 1 else 'ies'} "
            f"a timestamp up to {max(us for _, us in back)} µs earlier than the frame before: "
            f"the rows keep the capture's order (as tshark numbers the frames), so the "
            f"printed times go back there"]


def ack_key(r: Row) -> str:
    """The legend's key of an ACK without data: of a SYN-ACK, of a FIN, bare, or of bytes."""
    if r.nbytes:
        return "ack"
    return {"SYN-ACK": "ack-syn", "SYN": "ack-syn", "FIN": "ack-fin"}.get(r.acks, "ack-only")


def symbols(rows: list[Row]) -> list[str]:
    """The legend of these rows: each message letter by sender, each kind of packet, each
    mark, in the order first drawn."""
    used: dict[tuple[bool, str], None] = {}
    kinds: dict[str, None] = {}
    for r in rows:
        for name, _ in r.msgs:
            used.setdefault((r.to_server, name))
        kinds.setdefault(ack_key(r) if r.kind == "ack" else r.kind)
        for m in r.marks:
            kinds.setdefault("for" if m.startswith("for ") else m)
        if r.win_raw and r.kind in ("ack", "window"):
            kinds.setdefault("raw")
    return legend(used, kinds)


def collapse(rows: list[Row]) -> list[Row | Group]:
    """Replace runs of a repeating block of rows (period 1..MAX_PERIOD, at least 3 repetitions)
    with a Group; greedy from the top, preferring the block that covers the most rows."""
    sigs = [r.signature for r in rows]
    n = len(sigs)
    items: list[Row | Group] = []
    i = 0
    while i < n:
        best: tuple[int, int] | None = None  # (covered rows, period)
        for k in range(1, MAX_PERIOD + 1):
            if i + 2 * k > n:
                break
            block, reps = sigs[i:i + k], 1
            while i + (reps + 1) * k <= n and sigs[i + reps * k:i + (reps + 1) * k] == block:
                reps += 1
            if reps >= 3 or (reps == 2 and k >= 2):
                covered = reps * k
                if best is None or covered > best[0]:
                    best = (covered, k)
        if best is None:
            items.append(rows[i])
            i += 1
            continue
        covered, k = best
        items.append(Group(i, k, covered // k))
        i += covered
    return items


BULK = frozenset({"DataRow", "CopyData", "TLSApplicationData"})
MIN_PHASE_ROWS = 8


def _bulk_direction(r: Row) -> bool | None:
    """For a row that can be part of a bulk phase: the direction of its data (True: toward a
    lower lane, as responses flow) or None for an ACK; raises KeyError if it cannot."""
    if r.kind == "data":
        if any(c not in BULK for c, _ in r.msgs):
            raise KeyError(r.frame)
        return r.dst < r.src
    if r.kind in ("ack", "window", "dupack", "keepalive", "probe"):
        return None
    raise KeyError(r.frame)


def phases(rows: list[Row], items: list[Row | Group]) -> list[Row | Group | Phase]:
    out: list[Row | Group | Phase] = []
    run: list[Row | Group] = []
    run_start = 0
    way: bool | None = None
    pos = 0  # items cover the rows in order: the index of the current item's first row

    def flush(end: int) -> None:
        nonlocal run, way
        # a transfer moves data: a run of ACKs alone (a round trip late) is not one
        if run and end - run_start >= MIN_PHASE_ROWS and len(run) >= 2 and way is not None:
            groups = [g for g in run if isinstance(g, Group)]
            dom = max(groups, key=lambda g: g.reps * g.period) if groups else None
            out.append(Phase(run_start, end, dom))
        else:
            out.extend(run)
        run, way = [], None

    for it in items:
        size = it.end - it.start if isinstance(it, Group) else 1
        span = rows[pos:pos + size]
        try:
            dirs = {d for d in (_bulk_direction(r) for r in span) if d is not None}
        except KeyError:
            flush(pos)
            out.append(it)
            pos += size
            continue
        if len(dirs) > 1 or (dirs and way is not None and dirs != {way}):
            flush(pos)
        if not run:
            run_start = pos
        if dirs:
            way = next(iter(dirs))
        run.append(it)
        pos += size
    flush(pos)
    return out


def breakdown(rows: list[Row], start: int, end: int) -> list[dict[str, Any]]:
    """Per arrow direction in a span: segments and their median size, ACKs and their median
    bytes. On a relay this shows the re-split: 8,192 B in from the server, ~4 KB out."""
    data: dict[tuple[int, int], list[int]] = {}
    acks: dict[tuple[int, int], list[int]] = {}
    for r in rows[start:end]:
        if r.kind == "data":
            data.setdefault((r.src, r.dst), []).append(r.nbytes)
        elif r.kind == "ack":
            acks.setdefault((r.dst, r.src), []).append(r.nbytes)  # keyed by the data's way
    msgs = {(leg["from"], leg["to"]): leg["messages"] for leg in legs(rows, start, end)}
    out = []
    for (src, dst), sizes in data.items():
        sizes.sort()
        back = sorted(acks.get((src, dst), []))
        out.append({"from": src, "to": dst, "segments": len(sizes), "bytes": sum(sizes),
                    "segment_median": sizes[len(sizes) // 2],
                    "acks": len(back), "ack_median": back[len(back) // 2] if back else None,
                    "messages": msgs.get((src, dst), {})})
    return out


def legs(rows: list[Row], start: int, end: int) -> list[dict[str, Any]]:
    """The messages of a span per arrow direction (a leg of a relay, one way), by name: a
    relayed result crosses two legs, and its rows are counted on each, never added up."""
    out: dict[tuple[int, int], dict[str, int]] = {}
    for r in rows[start:end]:
        if r.kind == "data" and r.msgs:
            leg = out.setdefault((r.src, r.dst), {})
            for name, k in r.msgs:
                leg[name] = leg.get(name, 0) + k
    return [{"from": a, "to": b, "messages": m} for (a, b), m in out.items()]


def span_totals(rows: list[Row], start: int, end: int) -> dict[str, Any]:
    return group_totals(rows, Group(start, end - start, 1))


def group_totals(rows: list[Row], g: Group) -> dict[str, Any]:
    span = rows[g.start:g.end]
    data = [r for r in span if r.kind == "data"]
    msgs: dict[str, int] = {}
    for r in data:
        for c, k in r.msgs:
            msgs[c] = msgs.get(c, 0) + k
    return {"rows": len(span), "segments": len(data), "bytes": sum(r.nbytes for r in data),
            "acks": sum(1 for r in span if r.kind == "ack"), "messages": msgs,
            "legs": legs(rows, g.start, g.end),
            "first_frame": span[0].frame, "last_frame": span[-1].frame,
            "t0": span[0].t, "t1": span[-1].t}


def row_json(r: Row) -> dict[str, Any]:
    letters: dict[str, int] = {}
    for name, n in r.msgs:
        c = code(name)
        letters[c] = letters.get(c, 0) + n
    return {"t": r.t, "frame": r.frame, "connection": r.conn, "from": r.src, "to": r.dst,
            "kind": r.kind, "bytes": r.nbytes, "window": r.win,
            "messages": letters, "message_sequence": [list(m) for m in r.msgs],
            "details": [{"message": d.name, "sqlstate": d.code, "text": d.text}
                        for d in r.details],
            "partial": r.partial, "marks": list(r.marks), "label": label(r)}


def to_json(ladder: Ladder) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for it in ladder.items:
        if isinstance(it, Group):
            items.append({"group": {"repetitions": it.reps, "period": it.period,
                                    **group_totals(ladder.rows, it),
                                    "rows": [row_json(r)
                                             for r in ladder.rows[it.start:it.end]]}})
        else:
            items.append(row_json(it))
    return {"schema": "pktflow.flow/1", "title": ladder.title, "lanes": ladder.lanes,
            "items": items, "cut": ladder.cut, "notes": ladder.notes,
            "explain": ladder.explain, "legend": ladder.legend}
