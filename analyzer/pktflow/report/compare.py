"""`pktflow compare A B`: the same queries in two captures (e.g. direct vs through PgBouncer),
the difference in time decomposed first, then each query side by side.

Works on two analysis reports. A query is what the client saw: on a pooled capture, the front
leg's query, with the back leg (the server's side) measured through the relay pairing. Each
matched query's time at the client (request to last response byte) is split into four parts
that add up to it exactly (in the reports' microseconds): the server leg's wait for the first
response byte (execution plus a round trip), the server leg's transfer of the response (first to
last byte), what the relay did itself, and the client leg's own time (its round trips and its
slower drain). The last two are the rest (zero on a direct connection), split as `analyze` splits
the relay's cost: the client leg's part only where the relay's verdict says the client leg set
the pace, so the relay part is what `analyze` gives as the relay's own cost. The summary's parts
are those sums, B minus A, so they add up to `summary.difference_ms`.

In the terminal: the difference decomposed first, then per query the measures of A and B and
how B differs, then the connections that served them; `--format json` has every query.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, NamedTuple

from pktflow._core import sql_key
from pktflow.transfer.saving_compare import closing
from pktflow.rates import format_rate

if TYPE_CHECKING:  # rich loads when the terminal view is drawn, not for JSON
    from rich.console import Console

SCHEMA = "pktflow.compare/1"
MAX_QUERIES = 5  # drawn in the terminal, the biggest responses; the JSON has all

# Per query: (key, label, unit, "higher is better") in display order
METRICS = [
    ("client_ms", "time at the client (request -> last byte)", "ms", False),
    ("server_wait_ms", "server leg: request -> first byte", "ms", False),
    ("server_transfer_ms", "server leg: first -> last byte", "ms", False),
    ("relay_cost_ms", "time added by the relay itself", "ms", False),
    ("client_leg_ms", "time on the client leg beyond the server leg", "ms", False),
    ("throughput_bps", "throughput to the client", "bit/s", True),
    ("response_bytes", "response bytes", "B", None),
    ("client_segment_median", "segment size to the client (median)", "B", True),
    ("client_segments", "segments to the client", "", False),
    ("server_segment_median", "segment size from the server (median)", "B", True),
]
# Per connection that served a query (whole-connection numbers of its server -> client side)
CONNECTION_METRICS = [
    ("bytes_per_ack", "bytes per ACK (median)", "B", True),
    ("bytes_per_flight", "bytes per exchange (median)", "B", True),
    ("flights", "flights", "", False),
    ("zero_windows", "zero windows", "", False),
    ("rtt_ms", "round trip (median)", "ms", False),
    ("limit", "what limited it", "", None),
]
# The summary's parts: (part key, where, the per-query key it sums)
PARTS = [
    ("server_wait", "server leg: waiting for the first byte", "server_wait_us"),
    ("server_transfer", "server leg: moving the response", "server_transfer_us"),
    ("relay", "inside the relay", "relay_us"),
    ("client_leg", "the client leg's round trips and drain", "client_leg_us"),
]
# the relay verdicts under which the client leg set the pace (pktflow.relay.measure)
CLIENT_PACED = ("client", "network")


def _us(seconds: Any) -> int | None:
    """A report time (seconds, 6 decimals) as whole microseconds: sums then add up exactly."""
    return None if seconds is None else round(float(seconds) * 1e6)


def _ms(us: int | None) -> float | None:
    return None if us is None else round(us / 1000, 3)


class _Query(NamedTuple):
    """A query's times in microseconds and what a view reads of it."""
    sent: int | None
    first: int | None
    last: int | None
    segment_median: Any


def _query(q: dict[str, Any]) -> _Query:
    return _Query(_us(q.get("sent_s")), _us(q.get("first_response_s")),
                  _us(q.get("last_response_s")), q.get("response_segment_median"))


def _connection(conn: dict[str, Any]) -> dict[str, Any]:
    """The whole-connection measures of a connection's server -> client side."""
    d = conn["directions"]["server_to_client"]
    flights = d.get("flights") or {}
    verdict = d.get("verdict") or {}
    return {"bytes_per_ack": (d.get("acks") or {}).get("bytes_acked_median"),
            "bytes_per_flight": flights.get("bytes_median"), "flights": flights.get("count"),
            "zero_windows": (d.get("window") or {}).get("zero_window_periods"),
            "rtt_ms": (d.get("rtt_ms") or {}).get("median"),
            "limit": verdict.get("limit"), "verdict": verdict.get("summary"),
            "saving_s": verdict.get("saving_s")}


class Side(NamedTuple):
    """What `compare` reads of one capture's report."""
    file: str
    has_relay: bool
    queries: list[dict[str, Any]]
    connections: dict[str, dict[str, Any]]  # those that served a query: id -> measures
    relay_verdicts: list[str]


def side(report: dict[str, Any]) -> Side:
    """Each client-visible query with its own measures and its server leg's. One pass over the
    connections, keeping of each only what the views read (the report's connections are read
    one at a time: a storm's, all kept as dicts, would be half a gigabyte)."""
    back_of: dict[tuple[str, int], tuple[dict[str, Any], bool]] = {}
    relay_verdicts = []
    for relay in report.get("relays") or []:
        v = relay.get("verdict") or {}
        said = (v.get("summary") or "").split("; ")[0].rstrip(".")
        relay_verdicts.append(said + (f" (setting: {v['setting']})" if v.get("setting") else ""))
        split = v.get("limit") in CLIENT_PACED
        for p in relay["queries"]:
            back_of[(p["front"]["connection"], p["front"]["query_index"])] = (p, split)
    served: dict[str, dict[str, Any]] = {}
    queries: dict[str, list[_Query]] = {}
    out: list[tuple[dict[str, Any], _Query, str, int, int | None]] = []
    for c in report["connections"]:
        served[c["id"]] = _connection(c)
        queries[c["id"]] = [_query(q) for q in c.get("queries") or []]
        if c.get("role") == "back":
            continue
        for i, q in enumerate(c.get("queries") or []):
            pair, split = back_of.get((c["id"], i)) or (None, False)
            own = _us((pair.get("relay_own_ms") or 0) / 1000) if pair and split else None
            front = queries[c["id"]][i]
            nbytes = q.get("response_bytes") or 0
            out.append(({
                "sql": q.get("sql"), "connection": c["id"], "query_index": i,
                "via_relay": pair is not None, "rows": q.get("rows"),
                "response_bytes": nbytes,
                "throughput_bps": q.get("goodput_bps"),
                "client_segment_median": q.get("response_segment_median"),
                "client_segments": q.get("response_segments"),
                "frames": [q.get("sent_frame"), q.get("last_frame")],
            }, front, pair["back"]["connection"] if pair else c["id"],
                pair["back"]["query_index"] if pair else i, own))
    views = []
    used: dict[str, dict[str, Any]] = {}
    for view, front, conn, index, own in out:  # the server's side, now every connection is seen
        legs = queries.get(conn) or []
        leg = legs[index] if index < len(legs) else _Query(None, None, None, None)
        view.update(_times(front, leg, own))
        view["server_connection"] = conn
        view["server_segment_median"] = leg.segment_median
        used[conn] = served[conn]
        views.append(view)
    return Side(report["capture"]["file"], bool(report.get("relays")), views, used,
                relay_verdicts)


def _times(front: _Query, leg: _Query, own: int | None) -> dict[str, Any]:
    """The client's time and its four parts, in microseconds (for sums) and milliseconds.
    `own`: the relay's own part of what it added, where the client leg set the pace."""
    client = None if front.sent is None or front.last is None else front.last - front.sent
    wait = None if leg.sent is None or leg.first is None else leg.first - leg.sent
    transfer = None if leg.first is None or leg.last is None else leg.last - leg.first
    added = (None if client is None or wait is None or transfer is None
             else client - wait - transfer)
    relay, client_leg = added, 0 if added is not None else None
    if added is not None and own is not None:
        relay, client_leg = own, added - own
    return {"client_ms": _ms(client), "server_wait_ms": _ms(wait),
            "server_transfer_ms": _ms(transfer), "relay_cost_ms": _ms(relay),
            "client_leg_ms": _ms(client_leg),
            "client_us": client, "server_wait_us": wait, "server_transfer_us": transfer,
            "relay_us": relay, "client_leg_us": client_leg}


def _ratio(a: Any, b: Any) -> float | None:
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or not a:
        return None
    return round(b / a, 3)


def compare(a: dict[str, Any] | Side, b: dict[str, Any] | Side) -> dict[str, Any]:
    """Pair queries by SQL text (in order of appearance when a statement repeats)."""
    a = a if isinstance(a, Side) else side(a)
    b = b if isinstance(b, Side) else side(b)
    pending: dict[str, deque[dict[str, Any]]] = {}
    for q in b.queries:
        pending.setdefault(sql_key(q["sql"]), deque()).append(q)
    rows, only_a = [], []
    for q in a.queries:
        cands = pending.get(sql_key(q["sql"]))
        if not cands:
            only_a.append(q)
            continue
        other = cands.popleft()
        rows.append({"sql": q["sql"], "a": _public(q), "b": _public(other),
                     "ratio_b_to_a": {k: _ratio(q[k], other[k]) for k, *_ in METRICS},
                     "_a": q, "_b": other})
    only_b = [q for qs in pending.values() for q in qs]
    summary = _summary(rows, a, b)
    rows.sort(key=lambda r: -(r["a"]["response_bytes"] or 0))
    for r in rows:
        del r["_a"], r["_b"]
    return {"schema": SCHEMA, "a": a.file, "b": b.file,
            "a_has_relay": a.has_relay, "b_has_relay": b.has_relay,
            "summary": summary,
            "queries": rows,
            "connections": {"a": a.connections, "b": b.connections},
            "only_in_a": [{"sql": q["sql"], "connection": q["connection"]} for q in only_a],
            "only_in_b": [{"sql": q["sql"], "connection": q["connection"]} for q in only_b]}


def _public(view: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in view.items() if not k.endswith("_us")}


def _summary(rows: list[dict[str, Any]], a: Side, b: Side) -> dict[str, Any]:
    """B's time minus A's over the queries matched with every time known, in parts."""
    timed = [r for r in rows if all(r[s][k] is not None for s in ("_a", "_b")
                                    for k in ("client_us", *[p[2] for p in PARTS]))]
    total = {s: sum(r[s]["client_us"] for r in timed) for s in ("_a", "_b")}
    parts = []
    for key, where, field in PARTS:
        sa, sb = (sum(r[s][field] for r in timed) for s in ("_a", "_b"))
        parts.append({"part": key, "where": where, "ms": _ms(sb - sa),
                      "a_ms": _ms(sa), "b_ms": _ms(sb),
                      "why": _why(key, sa, sb, timed, a, b)}
                     | closing(key, sa, sb, timed, a, b))
    return {"queries": len(timed), "unmatched": len(rows) - len(timed),
            "a_ms": _ms(total["_a"]), "b_ms": _ms(total["_b"]),
            "difference_ms": _ms(total["_b"] - total["_a"]), "parts": parts}


def _limits(side: Side, rows: list[dict[str, Any]], key: str) -> str:
    """The server legs' limits (or verdicts) of the connections that served `rows`."""
    seen: dict[str, None] = {}
    for r in rows:
        conn = side.connections.get(r[key]["server_connection"]) or {}
        said = conn.get("limit") or (conn.get("verdict") or "").split(":")[0].split(".")[0]
        if said:
            seen[said] = None
    return ", ".join(seen) or "unknown"


def _rtts(side: Side, rows: list[dict[str, Any]], key: str) -> str:
    rtts = sorted({c["rtt_ms"] for r in rows
                   if (c := side.connections.get(r[key]["server_connection"]))
                   and c.get("rtt_ms") is not None})
    if not rtts:
        return "unknown"
    return f"{rtts[0]:,.3f} ms" if len(rtts) == 1 else f"{rtts[0]:,.3f}-{rtts[-1]:,.3f} ms"


def _why(key: str, sa: int, sb: int, rows: list[dict[str, Any]], a: Side, b: Side) -> str:
    n = len(rows)
    if key == "server_wait":
        return (f"request to first response byte on the server leg, {n} quer"
                f"{'y' if n == 1 else 'ies'}: {sa / 1000:,.3f} ms in A, {sb / 1000:,.3f} ms in "
                f"B (query execution plus a round trip; server-leg round trip A "
                f"{_rtts(a, rows, '_a')}, B {_rtts(b, rows, '_b')})")
    if key == "server_transfer":
        return (f"first to last response byte on the server leg: {sa / 1000:,.3f} ms in A, "
                f"{sb / 1000:,.3f} ms in B; what limited it: A {_limits(a, rows, '_a')}, "
                f"B {_limits(b, rows, '_b')}")
    verdicts = [v for v in (*a.relay_verdicts, *b.relay_verdicts) if v]
    if not verdicts:
        return "neither capture went through a relay"
    if key == "client_leg":
        return (f"the client leg's own time beyond the server leg's (its round trips and its "
                f"slower drain, where the relay's verdict says the client leg set the pace): "
                f"{sa / 1000:,.3f} ms in A, {sb / 1000:,.3f} ms in B")
    return (f"what the relay did itself (forwarding each request and its response; all the "
            f"client's time beyond the server leg unless the client leg set the pace), as "
            f"`analyze` gives it: {sa / 1000:,.3f} ms in A, {sb / 1000:,.3f} ms in B; the "
            f"relay's verdict: {verdicts[0]}")


def _v(value: Any, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "bit/s":
        return format_rate(value)
    if isinstance(value, float):
        return f"{value:,.2f}{' ' + unit if unit else ''}"
    if isinstance(value, int):
        return f"{value:,}{' ' + unit if unit else ''}"
    return str(value)


def headline(summary: dict[str, Any]) -> str:
    """'B is 12.3 ms slower in all (1 query): 10.1 ms server leg: ..., ...'."""
    diff = summary["difference_ms"]
    n = summary["queries"]
    if diff is None or not n:
        return "no query appears in both captures with its times known"
    how = "slower" if diff > 0 else "faster" if diff < 0 else "as fast"
    amount = f"{abs(diff):,.3f} ms {how}" if diff else "as fast"
    parts = ", ".join(f"{p['ms']:+,.3f} ms {p['where']}" for p in summary["parts"])
    return f"B is {amount} than A in all ({n} quer{'y' if n == 1 else 'ies'}): {parts}"


def render(doc: dict[str, Any], console: Console) -> None:
    from rich.table import Table
    from rich.text import Text

    console.print(Text(f"A: {doc['a']}{'  (through a relay)' if doc['a_has_relay'] else ''}",
                       "bold"))
    console.print(Text(f"B: {doc['b']}{'  (through a relay)' if doc['b_has_relay'] else ''}",
                       "bold"))
    summary = doc["summary"]
    console.print(Text(headline(summary), "bold"))
    for p in summary["parts"]:
        close = ("" if not p["ms"] or not p.get("saving_ms") else
                 f"; closed by {p['close_by']}: about {p['saving_ms']:,.3f} ms less")
        console.print(Text(f"  {p['ms']:+,.3f} ms {p['where']}: {p['why']}{close}"))
    if not doc["queries"]:
        console.print(Text("no query appears in both captures", "yellow"))
    for row in doc["queries"][:MAX_QUERIES]:
        sql = " ".join((row["sql"] or "").split())
        table = Table(title=sql[:100], title_justify="left", box=None, pad_edge=False)
        for col, just in (("", "left"), ("A", "right"), ("B", "right"), ("B / A", "right")):
            table.add_column(col, justify=just)  # type: ignore[arg-type]
        for key, name, unit, higher_better in METRICS:
            a, b, r = row["a"][key], row["b"][key], row["ratio_b_to_a"][key]
            style = ""
            if r is not None and higher_better is not None and abs(r - 1) >= 0.1:
                worse = (r < 1) if higher_better else (r > 1)
                style = "red" if worse else "green"
            table.add_row(name, _v(a, unit), _v(b, unit),
                          Text("-" if r is None else f"{r:.2f}x", style))
        console.print(table)
    rest = len(doc["queries"]) - MAX_QUERIES
    if rest > 0:
        console.print(Text(f"... {rest} smaller queries in both: see --format json", "dim"))
    for side in ("a", "b"):
        conns = doc["connections"][side]
        if not conns:
            continue
        table = Table(title=f"{side.upper()}: the connections that served them (server -> "
                      f"client, whole connection)", title_justify="left", box=None,
                      pad_edge=False)
        table.add_column("")
        for cid in list(conns)[:MAX_QUERIES]:
            table.add_column(cid, justify="right")
        for key, name, unit, _ in CONNECTION_METRICS:
            table.add_row(name, *[_v(c[key], unit) for c in list(conns.values())[:MAX_QUERIES]])
        console.print(table)
    for side in ("a", "b"):
        only = doc[f"only_in_{side}"]
        if only:
            console.print(Text(f"{len(only)} quer{'y' if len(only) == 1 else 'ies'} only in "
                               f"{side.upper()}", "dim"))
