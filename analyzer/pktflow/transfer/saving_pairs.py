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

Predicted: the same what-if in both recordings, the condition's less the baseline's: what the
model says the client's time would lose without the limit the condition's run names (its
client leg's verdict's, or, when a relay had nothing more to send its client, its bulk server
leg's), less what the baseline would lose without that same limit (what the baseline itself
would save is not the condition's doing; its own verdict may name another limit, as on a path
of microseconds, where the hosts' ACK pace books the same round trips to both runs and the
verdict flips between them and the sender); plus the conversation's round trips
(`round_trips.saving_s`; through a relay each query's round trip on both legs), the
condition's less the baseline's.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from pktflow.relay.measure import BIGGER_BUFFER
from pktflow.transfer.saving import MIN_TRANSFER_S, WITHOUT, removed_s

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


class Removed(NamedTuple):
    """What a recording's prediction removes: a limit (None: nothing) on the server ->
    client transfer of the client's leg ("client") or of the relay's server leg ("server"),
    or the relay's own small receive buffer ("relay"); with the other limit of a mixed
    verdict (two limits within a few percent of each other: which one it names is a toss),
    and, where a window held, whose it was: a stopped reader's stalls stay when the round
    trips go, a small buffer's do not, in both recordings alike."""
    leg: str
    limit: str | None
    mixed_with: str | None = None
    receiver: str | None = None


def removed(rep: dict[str, Any], conn: dict[str, Any]) -> Removed:
    """The limit the client's time would lose: the client leg's verdict's, or, when a relay
    had nothing more to send its client, its bulk server leg's; where the relay's own window
    held the server, what the relay's verdict says of its buffer when that was small (a window
    that never grew), else the client leg's round trips: the pooler stopped reading its server
    while it waited on its client, whose path then set the pace through the relay."""
    v = conn["directions"]["server_to_client"].get("verdict") or {}
    limit = v.get("limit")
    if conn.get("role") == "front" and limit in ("sender", "none") \
            and v.get("mixed_with") not in WITHOUT:
        back = server_leg(rep, conn)
        if back is None:
            return Removed("client", None)
        bv = back["directions"]["server_to_client"].get("verdict") or {}
        if bv.get("limit") == "receiver_window":
            if bv.get("receiver") == "application":
                # the pooler stopped reading its server while it waited on its client: the
                # client's path set the pace through the relay (issue rule 2)
                return Removed("client", "latency")
            return Removed("relay", "receiver_window")
        return of_verdict("server", bv)
    return of_verdict("client", v)


def of_verdict(leg: str, v: dict[str, Any]) -> Removed:
    """A leg's verdict's what-if: its limit, and the other one where it is mixed (a sender
    mixed with a removable limit: that limit alone)."""
    limit, mixed, receiver = v.get("limit"), v.get("mixed_with"), v.get("receiver")
    if mixed not in WITHOUT or mixed == limit:
        return Removed(leg, limit, receiver=receiver)
    if limit not in WITHOUT:
        return Removed(leg, mixed, receiver=receiver)
    return Removed(leg, limit, mixed, receiver)


def transfer_s(rep: dict[str, Any], conn: dict[str, Any], what: Removed) -> float:
    """What the transfer `what` names would take less without its limit (the model's what-if,
    pktflow.transfer.saving.removed_s), whatever this recording's own verdict names; for the
    relay's buffer, its verdict's saving where that names the buffer (nothing otherwise)."""
    if what.limit not in WITHOUT:
        return 0.0
    if what.leg == "relay":
        return float(sum(r["verdict"].get("saving_s") or 0.0 for r in rep.get("relays") or []
                         if conn["id"] in r["front_connections"]
                         and r["verdict"].get("without", "").startswith(BIGGER_BUFFER)))
    leg = conn if what.leg == "client" else server_leg(rep, conn)
    d = None if leg is None else leg["directions"]["server_to_client"]
    lim = None if d is None else d.get("limits")
    if d is None or not lim or lim["transfer_s"] < MIN_TRANSFER_S:
        return 0.0
    v = d.get("verdict") or {}
    if v.get("limit") == what.limit and what.mixed_with is None \
            and v.get("receiver") == what.receiver:
        return float(v.get("saving_s") or 0.0)  # its own verdict's (none where it gives none)
    limits = (what.limit,) if what.mixed_with is None else (what.limit, what.mixed_with)
    return removed_s(lim, limits, what.receiver)


def predicted_s(rep: dict[str, Any], conn: dict[str, Any]) -> float:
    """What the model says the client's time would save without every limit it names."""
    what = removed(rep, conn)
    return float(transfer_s(rep, conn, what) + conversation_s(conn, back_legs(rep, conn)))


def server_leg(rep: dict[str, Any], conn: dict[str, Any]) -> dict[str, Any] | None:
    """The relay's server connection that carried the most (None when direct)."""
    return max(back_legs(rep, conn),
               key=lambda c: c["directions"]["server_to_client"]["payload_bytes"], default=None)


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


def pair(condition: dict[str, Any], baseline: dict[str, Any]) -> tuple[float, float] | None:
    """(predicted, measured) saving of a condition, from its report and its baseline's. The
    predicted one is the same what-if in both: the limit the condition's run would lose, less
    what the baseline would save without that same limit (not the baseline's own verdict's,
    which on a path of microseconds flips between the sender and round trips that are the
    hosts' ACK pace, there in both runs alike)."""
    c, b = client_connection(condition), client_connection(baseline)
    if c is None or b is None:
        return None
    what = removed(condition, c)
    predicted = (transfer_s(condition, c, what) - transfer_s(baseline, b, what)
                 + conversation_s(c, back_legs(condition, c))
                 - conversation_s(b, back_legs(baseline, b)))
    return predicted, client_time_s(c) - client_time_s(b)


def within(predicted: float, measured: float) -> bool:
    return abs(predicted - measured) <= max(SHARE * abs(measured), FLOOR_S)
