"""`pktflow compare A B`: the same queries in two captures side by side (e.g. direct vs through
PgBouncer): time, throughput, segment sizes, bytes per ACK, bytes per exchange, flights, stalls.

Works on two analysis reports. A query is what the client saw: on a pooled capture, the front
leg's query, with the back leg (the server's side) measured through the relay pairing.
"""

from __future__ import annotations

from typing import Any

from pktflow.relay.measure import ms_between
from pktflow.relay.topology import sql_key

SCHEMA = "pktflow.compare/1"

# (key, label, unit, "higher is better") in display order
METRICS = [
    ("client_ms", "time at the client (request -> last byte)", "ms", False),
    ("throughput_bps", "throughput to the client", "B/s", True),
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


def _s2c(conn: dict[str, Any]) -> dict[str, Any]:
    return conn["directions"]["server_to_client"]


def query_views(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each client-visible query with the measures of both the client's and the server's leg."""
    conns = {c["id"]: c for c in report["connections"]}
    back_of: dict[tuple[str, int], dict[str, Any]] = {}
    for relay in report.get("relays") or []:
        for p in relay["queries"]:
            back_of[(p["front"]["connection"], p["front"]["query_index"])] = p
    out = []
    for c in report["connections"]:
        if c.get("role") == "back":
            continue
        for i, q in enumerate(c.get("queries") or []):
            pair = back_of.get((c["id"], i))
            server_conn = conns[pair["back"]["connection"]] if pair else c
            server_q = (server_conn["queries"][pair["back"]["query_index"]] if pair else q)
            d_client, d_server = _s2c(c), _s2c(server_conn)
            took = ms_between(q.get("sent_s"), q.get("last_response_s"))
            transfer = ms_between(q.get("first_response_s"), q.get("last_response_s"))
            nbytes = q.get("response_bytes") or 0
            out.append({
                "sql": q.get("sql"), "connection": c["id"], "query_index": i,
                "via_relay": pair is not None, "rows": q.get("rows"),
                "client_ms": took,
                "throughput_bps": round(nbytes / (transfer / 1000)) if transfer else None,
                "response_bytes": nbytes,
                "client_segment_median": q.get("response_segment_median"),
                "client_segments": q.get("response_segments"),
                "client_bytes_per_ack": (d_client.get("acks") or {}).get("bytes_acked_median"),
                "server_segment_median": server_q.get("response_segment_median"),
                "server_bytes_per_ack": (d_server.get("acks") or {}).get("bytes_acked_median"),
                "server_bytes_per_flight": (d_server.get("flights") or {}).get("bytes_median"),
                "server_flights": (d_server.get("flights") or {}).get("count"),
                "server_zero_windows": (d_server.get("window") or {}).get("zero_window_periods"),
                "relay_cost_ms": pair["relay_cost_ms"] if pair else 0.0,
                "frames": [q.get("sent_frame"), q.get("last_frame")],
            })
    return out


def _ratio(a: Any, b: Any) -> float | None:
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or not a:
        return None
    return round(b / a, 3)


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Pair queries by SQL text (in order of appearance when a statement repeats)."""
    qa, qb = query_views(a), query_views(b)
    pending: dict[str, list[dict[str, Any]]] = {}
    for q in qb:
        pending.setdefault(sql_key(q["sql"]), []).append(q)
    rows, only_a = [], []
    for q in qa:
        cands = pending.get(sql_key(q["sql"]))
        if not cands:
            only_a.append(q)
            continue
        other = cands.pop(0)
        rows.append({"sql": q["sql"], "a": q, "b": other,
                     "ratio_b_to_a": {k: _ratio(q[k], other[k]) for k, *_ in METRICS}})
    only_b = [q for qs in pending.values() for q in qs]
    rows.sort(key=lambda r: -(r["a"]["response_bytes"] or 0))
    return {"schema": SCHEMA, "a": a["capture"]["file"], "b": b["capture"]["file"],
            "a_has_relay": bool(a.get("relays")), "b_has_relay": bool(b.get("relays")),
            "queries": rows,
            "only_in_a": [{"sql": q["sql"], "connection": q["connection"]} for q in only_a],
            "only_in_b": [{"sql": q["sql"], "connection": q["connection"]} for q in only_b]}
