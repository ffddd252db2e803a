"""A predicted saving set against a measured one, on a pair of recordings of the same workload
with a condition and without it (the lab's pairs: bench/savings.py, tests/test_saving.py).

Measured: the client's time with the condition less its time without it. The client's time is
its wall time in the conversation: from its first request to the last byte of its last response
(`sent_s` of the client-facing connection's first query to `last_response_s` of its last), plus
the handshake's round trip where the capture sits beside the server, which sees the first
request only after its way there and the last byte before its way back. For a select that is
its response time; for pg_dump, its wall time, the waits between its queries included: a
response whose last segment was lost ends for the client only at its retransmission, a
timeout later, and the capture dates the response by the segment it saw first.

Predicted: what the model says each recording would save (the client-facing connection's
server -> client verdict's `saving_s`, or, when a relay had nothing more to send its client,
its bulk back leg's; plus the conversation's `round_trips.saving_s`, and through a relay the
round trips of the client's queries on the server leg too), with the condition less without
it: what the baseline itself would save is not the condition's doing.
"""

from __future__ import annotations

from typing import Any

SHARE, FLOOR_S = 0.25, 0.010  # within max(25% of the measured saving, 10 ms)


def client_connection(rep: dict[str, Any]) -> dict[str, Any] | None:
    """The client-facing connection that carried the most (direct, or a relay's front leg)."""
    conns = [c for c in rep["connections"] if c.get("role") in ("direct", "front")
             and c.get("queries")]
    return max(conns, key=lambda c: c["directions"]["server_to_client"]["payload_bytes"],
               default=None)


def client_time_s(conn: dict[str, Any]) -> float:
    """The client's wall time in its queries. A capture beside the server sees the first
    request arrive and the last response leave: the client waited a round trip more (the
    request's way there, the last byte's way back), the handshake's round trip."""
    timed = [q for q in conn["queries"] if q.get("last_response_s") is not None]
    if not timed:
        return 0.0
    rtt_s = 0.0
    hs = conn["directions"]["client_to_server"].get("handshake_ms")
    if (conn.get("capture_point") or {}).get("position") == "server" and hs:
        rtt_s = (hs["syn_to_synack"] + hs["synack_to_ack"]) / 1e3
    return float(max(q["last_response_s"] for q in timed) - timed[0]["sent_s"] + rtt_s)


def predicted_s(rep: dict[str, Any], conn: dict[str, Any]) -> float:
    """What the model says the client's time would save without every limit it names."""
    v = conn["directions"]["server_to_client"].get("verdict") or {}
    total = v.get("saving_s") or 0.0
    backs = back_legs(rep, conn)
    if conn.get("role") == "front" and v.get("limit") in ("sender", "none"):
        # the relay had nothing more to send: the server leg's limit is the client's, unless
        # the relay itself held the server (its window): then nothing outside the relay did
        back = max(backs, key=lambda c: c["directions"]["server_to_client"]["payload_bytes"],
                   default=None)
        if back is not None:
            bv = back["directions"]["server_to_client"].get("verdict") or {}
            if bv.get("limit") != "receiver_window":
                total = bv.get("saving_s") or 0.0
    return float(total + conversation_s(conn, backs))


def back_legs(rep: dict[str, Any], conn: dict[str, Any]) -> list[dict[str, Any]]:
    """The server connections of the relay whose client leg `conn` is (none when direct)."""
    ids = {b for r in rep.get("relays") or [] if conn["id"] in r["front_connections"]
           for b in r["back_connections"]}
    return [c for c in rep["connections"] if c["id"] in ids]


def conversation_s(conn: dict[str, Any], backs: list[dict[str, Any]]) -> float:
    """The conversation's saving with the client next to the server. Through a relay each of
    the client's queries crosses both legs, one after another: its round trip on the client
    leg (the client leg's `round_trips.saving_s`) and again on the server leg, whose round
    trip the server connection's `round_trips` gives (the server leg's own count would add
    the pooler's own statements, which the client does not wait for)."""
    rt = conn.get("round_trips") or {}
    total = rt.get("saving_s") or 0.0
    back_rtts = [b["round_trips"]["rtt_ms"] for b in backs
                 if (b.get("round_trips") or {}).get("rtt_ms") is not None]
    if rt and back_rtts:
        total += rt["queries"] * max(back_rtts) / 1e3
    return float(total)


def figures(rep: dict[str, Any]) -> tuple[float, float] | None:
    """(predicted saving, client time) of one recording's report."""
    conn = client_connection(rep)
    if conn is None:
        return None
    return predicted_s(rep, conn), client_time_s(conn)


def pair(condition: dict[str, Any], baseline: dict[str, Any]) -> tuple[float, float] | None:
    """(predicted, measured) saving of a condition, from its report and its baseline's."""
    c, b = figures(condition), figures(baseline)
    if c is None or b is None:
        return None
    return c[0] - b[0], c[1] - b[1]


def within(predicted: float, measured: float) -> bool:
    return abs(predicted - measured) <= max(SHARE * abs(measured), FLOOR_S)
