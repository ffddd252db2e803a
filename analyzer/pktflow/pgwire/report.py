"""What the PostgreSQL decoder's facts say in the report: a connection's pgwire keys and its
findings. The decoder (pktflow-core, pgwire/) measures; the sentences are written here, once.

Facts arrive as plain values (pythonize, or json.loads of serde_json: the same shapes):
dicts for structs and maps, a dict with "kind" for each event and stop reason, lists or
tuples for pairs.
"""

from __future__ import annotations

import sys
from typing import Any

from pktflow.findings import Finding
from pktflow.rates import bits_per_second

# Reasons a connection is not PostgreSQL (their decision's frame is None when it came at the
# end); the others are malformed framing.
_NOT_POSTGRES = frozenset({"not_startup", "tls_without_alpn", "no_framing"})
_DIRECT_TLS = 'the client started TLS directly (PostgreSQL 17 sslnegotiation=direct, ALPN "postgresql")'
_TIMES = (("sent_ts", "sent_s"), ("first_response_ts", "first_response_s"),
          ("last_response_ts", "last_response_s"))


def frontend_direction(facts: dict[str, Any]) -> int | None:
    """The engine direction (0 or 1) the frontend speaks on; None when not PostgreSQL."""
    d = facts["frontend_direction"]
    return None if d is None else int(d)


def conversation_json(facts: dict[str, Any], capture_start: float) -> dict[str, Any]:
    """The connection's pgwire keys, as the report shows them: query times relative to the
    capture's start, rounded to the microsecond."""
    protocol = facts["protocol"]
    startup = facts["startup"]
    if startup is not None:
        startup = {"user": startup["user"], "database": startup["database"],
                   "application_name": startup["application_name"],
                   "encryption": facts["encryption"]}
    lost, messages = facts["lost_bytes"], facts["messages"]
    return {
        "protocol": protocol,
        "startup": startup,
        "decode_started_at": facts["decode_started_at"] if protocol != "unknown" else None,
        "decode_stopped": _stopped(facts["decode_stopped"]),
        "lost_bytes": {"frontend": lost["frontend"], "backend": lost["backend"]},
        "backend_pid": facts["backend_pid"],
        "server_parameters": dict(facts["server_parameters"]),
        "messages": {"frontend": dict(messages["frontend"]), "backend": dict(messages["backend"])},
        "queries": [_query(q, capture_start) for q in facts["queries"]],
        "queries_total": facts["queries_total"],
    }


def _stopped(stopped: dict[str, Any] | None) -> dict[str, Any] | None:
    if stopped is None:
        return None
    reason = stopped["reason"]
    frame = stopped["frame"]
    return {"direction": stopped["direction"], "offset": stopped["offset"],
            "frame": (frame or None) if reason["kind"] in _NOT_POSTGRES else frame,
            "reason": _reason(reason)}


def _reason(r: dict[str, Any]) -> str:
    kind = r["kind"]
    if kind == "length_under_4":
        return f"length {r['length']} is under 4"
    if kind == "length_absurd":
        return f"length {r['length']:,} is absurd"
    if kind == "not_role_type":
        return f"type byte {r['type_byte']:#04x} is not a {r['role']} message"
    if kind == "not_startup":
        return "the first message is not a PostgreSQL startup, SSL or cancel request"
    if kind == "tls_without_alpn":
        offered = ", ".join(r["offered"]) if r["offered"] else "none"  # [""]: empty, not none
        return (f'the first message is a TLS ClientHello without ALPN "postgresql" (offered: '
                f"{offered}), which PostgreSQL's direct TLS requires")
    if kind == "no_framing":
        return f"no PostgreSQL message framing in {r['lost']:,} bytes"
    raise ValueError(f"unknown stop reason {kind!r}")


def _rows(rows: int | str | None) -> int | None:
    """A row count; past 64 bits the decoder gives its digits. Python will not convert (or
    write) an int of more digits than sys.get_int_max_str_digits(): no count then."""
    if not isinstance(rows, str):
        return rows
    limit = sys.get_int_max_str_digits()
    return int(rows) if not limit or len(rows) <= limit else None


def _query(q: dict[str, Any], start: float) -> dict[str, Any]:
    times = {key: (None if q[fact] is None else round(q[fact] - start, 6))
             for fact, key in _TIMES}
    err = q["error"]
    return {
        "sql": q["sql"], "sql_truncated": q["sql_truncated"], "kind": q["kind"],
        "command_tag": q["command_tag"], "rows": _rows(q["rows"]), "data_rows": q["data_rows"],
        "copy_data": q["copy_data"], "response_bytes": q["response_bytes"],
        "response_messages": q["response_messages"], "sent_s": times["sent_s"],
        "first_response_s": times["first_response_s"],
        "last_response_s": times["last_response_s"],
        "sent_frame": q["sent_frame"], "first_frame": q["first_frame"],
        "last_frame": q["last_frame"],
        "error": None if err is None else {
            "code": err["code"], "message": err["message"], "severity": err["severity"],
            "detail": err["detail"], "hint": err["hint"], "position": err["position"]},
        "incomplete": q["incomplete"],
        "response_segments": q["response_segments"],
        "response_segment_median": q["response_segment_median"],
        "response_segment_max": q["response_segment_max"],
        "response_segment_sizes": {str(v): c for v, c in q["response_segment_sizes"]},
        "goodput_bps": _goodput(q),
    }


def _goodput(q: dict[str, Any]) -> int | None:
    """Response bits per second from the first response byte to the last; None for a
    response too small to measure (rates.py)."""
    first, last = q["first_response_ts"], q["last_response_ts"]
    if first is None or last is None:
        return None
    return bits_per_second(q["response_bytes"], last - first, q["response_segments"])


def conversation_findings(facts: dict[str, Any], conn_id: str) -> list[Finding]:
    """The decoder's events as findings, in the order they happened; a stream's resyncs are
    one finding, where the first happened (a short snaplen cuts a message in every segment)."""
    events = facts["events"]
    resyncs: dict[str, list[dict[str, Any]]] = {}
    for ev in events:
        if ev["kind"] == "resync":
            resyncs.setdefault(ev["role"], []).append(ev)
    out = []
    for ev in events:
        if ev["kind"] != "resync":
            out.append(_finding(ev, conn_id))
        elif ev is resyncs[ev["role"]][0]:
            out.append(_resyncs(resyncs[ev["role"]], conn_id))
    return out


def _resyncs(evs: list[dict[str, Any]], conn_id: str) -> Finding:
    first = evs[0]
    if len(evs) == 1:
        what = (f"a capture gap of {first['length']:,} bytes at offset {first['offset']:,} cut "
                f"a message")
    else:
        what = (f"{len(evs):,} capture gaps ({sum(e['length'] for e in evs):,} bytes, the "
                f"first at offset {first['offset']:,}) cut messages")
    cost = ("responses count the missing bytes (their rows and tags there are unknown)"
            if first["role"] == "backend" else "requests inside the gaps are not listed")
    return Finding(
        "warning", "pgwire-resync",
        f"{first['role']} stream: {what}; decoding resumes at the next provable message "
        f"boundary, and {cost}", conn_id, [e["frame"] for e in evs[:10]])


def _finding(ev: dict[str, Any], conn_id: str) -> Finding:
    kind = ev["kind"]
    if kind == "mid_stream":
        return Finding(
            "info", "pgwire-mid-stream",
            f"the connection began before the capture: {ev['role']} decoding starts at stream "
            f"offset {ev['offset']:,} (frame {ev['frame']})", conn_id, [ev["frame"]])
    if kind == "encrypted":
        how = _DIRECT_TLS if ev["request"] is None else f"the server accepted {ev['request']}"
        return Finding(
            "info", "encrypted",
            f"{how}: the rest of the connection is {ev['encryption'].upper()}-encrypted, so only "
            f"its TCP transfer is analysed", conn_id, [ev["frame"]])
    if kind == "not_postgresql":
        frame = ev["frame"]
        return Finding(
            "warning", "not-postgresql",
            f"{ev['role']} stream at offset {ev['offset']:,}: {_reason(ev['reason'])}; the "
            f"connection is not PostgreSQL as far as the capture shows, so only its TCP transfer "
            f"is analysed", conn_id, [frame] if frame else [])
    if kind == "malformed":
        return Finding(
            "error", "pgwire-malformed",
            f"{ev['role']} stream at offset {ev['offset']:,}: {_reason(ev['reason'])}; this "
            f"direction is not decoded past that point", conn_id, [ev["frame"]])
    if kind == "server_error":
        return Finding(
            "warning", "server-error",
            f"server error {_text(ev['code'], '')}: {_text(ev['message'], '')}", conn_id,
            [ev["frame"]])
    if kind == "query_error":
        sql = " ".join(ev["sql"].split())
        return Finding(
            "info", "query-error",
            f"a query failed with {_text(ev['code'], '?')} ({_text(ev['message'], '')}): "
            f"{sql[:60]}{'…' if len(sql) > 60 else ''}", conn_id,
            [ev["sent_frame"], ev["frame"]])
    if kind == "query_errors_total":
        return Finding(
            "info", "query-error",
            f"{ev['count']:,} queries failed in all (the first {ev['listed']} are listed)",
            conn_id, [])
    if kind == "queries_capped":
        listed = ev["listed"]
        return Finding(
            "info", "queries-capped",
            f"more than {listed:,} queries on this connection: the first {listed:,} are listed, "
            f"the message counts cover all of them (from frame {ev['frame']})", conn_id,
            [ev["frame"]])
    raise ValueError(f"unknown pgwire event {kind!r}")


def _text(value: str | None, absent: str) -> str:
    return absent if value is None else value
