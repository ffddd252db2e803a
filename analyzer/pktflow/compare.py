"""`pktflow compare A B`: the same queries in two captures side by side (e.g. direct vs through
PgBouncer): time, throughput, segment sizes, bytes per ACK, bytes per exchange, flights, stalls.

Works on two analysis reports. A query is what the client saw: on a pooled capture, the front
leg's query, with the back leg (the server's side) measured through the relay pairing.
"""

from __future__ import annotations

from collections import deque
from typing import Any, NamedTuple

from pktflow.relay.measure import ms_between
from pktflow.relay.topology import sql_key

SCHEMA = "pktflow.compare/1"

# (key, label, unit, "higher is better") in display order
METRICS = [
    ("client_ms", "time at the client (request -> last byte)", "ms", False),
    ("throughput_bps", "throughput to the client", "bit/s", True),
    ("response_bytes", "response bytes", "B", None),
    ("client_segment_median", "segment size to the client (median)", "B", True),
    ("client_segments", "segments to the client", "", False),
    ("client_bytes_per_ack", "bytes per ACK from the client (median)", "B", True),
    ("server_segment_median", "segment size from the server (median)", "B", True),
    ("server_bytes_per_ack", "bytes per ACK to the server (median)", "B", True),
    ("server_bytes_per_flight", "bytes per exchange on the server leg (median)", "B", True),
    ("server_flights", "flights on the server leg", "", False),
    ("server_zero_windows", "zero windows toward the server", "", False),
    ("relay_cost_ms", "time added by the relay", "ms", False),
]


class _Served(NamedTuple):
    """What a query view reads of the connection that served it: its server -> client
    direction's medians and counts, and each query's segment median."""
    bytes_per_ack: Any
    bytes_per_flight: Any
    flights: Any
    zero_windows: Any
    segment_medians: list[Any]


def _served(conn: dict[str, Any]) -> _Served:
    d = conn["directions"]["server_to_client"]
    flights = d.get("flights") or {}
    return _Served((d.get("acks") or {}).get("bytes_acked_median"), flights.get("bytes_median"),
                   flights.get("count"), (d.get("window") or {}).get("zero_window_periods"),
                   [q.get("response_segment_median") for q in conn.get("queries") or []])


def query_views(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each client-visible query with the measures of both the client's and the server's leg.
    One pass over the connections, keeping of each only what the views read (a stored
    report's are decoded one at a time: a storm's, kept whole, were half a gigabyte)."""
    back_of: dict[tuple[str, int], dict[str, Any]] = {}
    for relay in report.get("relays") or []:
        for p in relay["queries"]:
            back_of[(p["front"]["connection"], p["front"]["query_index"])] = p
    servers: dict[str, _Served] = {}
    out: list[tuple[dict[str, Any], str, int]] = []  # view, connection that served it, query
    for c in report["connections"]:
        servers[c["id"]] = _served(c)
        if c.get("role") == "back":
            continue
        for i, q in enumerate(c.get("queries") or []):
            pair = back_of.get((c["id"], i))
            took = ms_between(q.get("sent_s"), q.get("last_response_s"))
            nbytes = q.get("response_bytes") or 0
            out.append(({
                "sql": q.get("sql"), "connection": c["id"], "query_index": i,
                "via_relay": pair is not None, "rows": q.get("rows"),
                "client_ms": took,
                # the query's own rate: bits per second, none for a response too small
                "throughput_bps": q.get("goodput_bps"),
                "response_bytes": nbytes,
                "client_segment_median": q.get("response_segment_median"),
                "client_segments": q.get("response_segments"),
                "client_bytes_per_ack": servers[c["id"]].bytes_per_ack,
                "server_segment_median": None, "server_bytes_per_ack": None,
                "server_bytes_per_flight": None, "server_flights": None,
                "server_zero_windows": None,
                "relay_cost_ms": pair["relay_cost_ms"] if pair else 0.0,
                "frames": [q.get("sent_frame"), q.get("last_frame")],
            }, pair["back"]["connection"] if pair else c["id"],
                pair["back"]["query_index"] if pair else i))
    for view, conn, index in out:  # the server's side, now that every connection is seen
        served = servers[conn]
        view.update(server_segment_median=served.segment_medians[index],
                    server_bytes_per_ack=served.bytes_per_ack,
                    server_bytes_per_flight=served.bytes_per_flight,
                    server_flights=served.flights, server_zero_windows=served.zero_windows)
    return [view for view, _, _ in out]


def _ratio(a: Any, b: Any) -> float | None:
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or not a:
        return None
    return round(b / a, 3)


class Side(NamedTuple):
    """What `compare` reads of one capture's report."""
    file: str
    has_relay: bool
    queries: list[dict[str, Any]]


def side(report: dict[str, Any]) -> Side:
    return Side(report["capture"]["file"], bool(report.get("relays")), query_views(report))


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
        rows.append({"sql": q["sql"], "a": q, "b": other,
                     "ratio_b_to_a": {k: _ratio(q[k], other[k]) for k, *_ in METRICS}})
    only_b = [q for qs in pending.values() for q in qs]
    rows.sort(key=lambda r: -(r["a"]["response_bytes"] or 0))
    return {"schema": SCHEMA, "a": a.file, "b": b.file,
            "a_has_relay": a.has_relay, "b_has_relay": b.has_relay,
            "queries": rows,
            "only_in_a": [{"sql": q["sql"], "connection": q["connection"]} for q in only_a],
            "only_in_b": [{"sql": q["sql"], "connection": q["connection"]} for q in only_b]}
