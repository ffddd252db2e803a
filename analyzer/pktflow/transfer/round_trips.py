"""Round trips of a conversation: how much of a connection's time its queries' round trips
cost, against the time its responses took to move.

A client that runs its statements one after another (pg_dump's dozens of catalogue queries)
pays a round trip per statement before the server can start the next answer, however fast
the data flow: at 10 ms, 65 queries cost 650 ms while the COPY behind them moves 11 MB in
0.17 s (mechanics.md). Works on a connection's report JSON (queries, handshake, RTT samples)
after the pass; nothing is measured here.
"""

from __future__ import annotations

from typing import Any

from pktflow.findings import Finding

MIN_QUERIES = 10  # fewer: a round trip or two is no pattern
MOST = 0.5  # round trips this share of the conversation or more are worth a finding
BULK_BYTES = 64 * 1024  # a response this large is bulk data


def path_rtt_ms(conn: dict[str, Any]) -> tuple[float | None, str | None]:
    """The round trip between the two ends, and where it came from: the handshake's (SYN to
    the ACK of the SYN-ACK: both halves, wherever the capture sits), else the larger of the two
    directions' least RTT samples (the one measured across the path from the capture point)."""
    dirs = conn["directions"]
    hs = dirs["client_to_server"].get("handshake_ms")
    if hs:
        return round(hs["syn_to_synack"] + hs["synack_to_ack"], 3), "handshake"
    mins = [r["min"] for d in dirs.values() if (r := d.get("rtt_ms")) and r.get("samples")]
    if mins:
        return max(mins), "rtt samples"
    return None, None


def round_trips_json(conn: dict[str, Any]) -> dict[str, Any] | None:
    """The connection's conversation: queries, the round trip, what they cost and what the
    responses took; None for fewer than two queries whose times are known (one is no
    conversation; most connections of a storm have one or two)."""
    queries = [q for q in conn.get("queries") or ()
               if q.get("sent_s") is not None and q.get("last_response_s") is not None]
    if len(queries) < 2:
        return None
    rtt, source = path_rtt_ms(conn)
    span = (max(q["last_response_s"] for q in queries) - queries[0]["sent_s"]) * 1e3
    moving = bulk = 0.0
    for q in queries:
        first = q.get("first_response_s")
        took = (q["last_response_s"] - first) * 1e3 if first is not None else 0.0
        moving += took
        if (q.get("response_bytes") or 0) >= BULK_BYTES:
            bulk += took
    n = len(queries)
    cost = None if rtt is None else round(n * rtt, 3)
    out: dict[str, Any] = {
        "queries": n, "rtt_ms": rtt, "rtt_from": source, "round_trips_ms": cost,
        "span_ms": round(span, 3), "responses_ms": round(moving, 3), "bulk_ms": round(bulk, 3),
        "share": round(cost / span, 3) if cost is not None and span > 0 else None,
    }
    if cost is None:
        out["summary"] = (f"{n} quer{'y' if n == 1 else 'ies'} over {span:,.1f} ms; the round "
                          f"trip is unknown (no handshake, no RTT sample)")
    else:
        # no share when the capture's clock gives the conversation no time (a damaged or
        # reordered capture)
        share = "" if out["share"] is None else f", {out['share']:.0%} of the {span:,.1f} ms"
        out["summary"] = (
            f"{n} quer{'y' if n == 1 else 'ies'} one after another, each a round trip of "
            f"{rtt:,.3f} ms ({source}): {cost:,.1f} ms{share} from the first query to the last "
            f"response; the responses moved for {moving:,.1f} ms, the bulk ones (64 KB or "
            f"more) for {bulk:,.1f} ms")
    return out


def round_trips_set_the_time(rt: dict[str, Any] | None) -> bool:
    """Whether a conversation's round trips (its "round_trips") were most of its time: worth
    a finding, and the first line of the answer."""
    return bool(rt and rt["queries"] >= MIN_QUERIES and rt["share"] is not None
                and rt["share"] >= MOST)


def round_trip_findings(conn: dict[str, Any]) -> list[Finding]:
    rt = conn.get("round_trips")
    if not rt or not round_trips_set_the_time(rt):
        return []
    q = [x for x in conn["queries"] if x.get("sent_frame")]
    return [Finding(
        "warning", "round-trips",
        f"{rt['queries']} queries ran one after another and their round trips "
        f"({rt['queries']} x {rt['rtt_ms']:,.3f} ms = {rt['round_trips_ms']:,.1f} ms) are "
        f"{rt['share']:.0%} of the conversation's {rt['span_ms']:,.1f} ms, while the bulk data "
        f"moved for {rt['bulk_ms']:,.1f} ms: the round trips, not the transfer, set the time "
        f"(fewer statements, pipelining, or a client nearer the server)",
        conn["id"], [q[0]["sent_frame"], q[-1]["sent_frame"]] if q else [])]
