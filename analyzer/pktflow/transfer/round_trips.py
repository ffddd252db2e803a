"""Round trips of a conversation: how much of a connection's time its queries' round trips
cost, against the time its responses took to move.

A client that runs its statements one after another (pg_dump's dozens of catalogue queries)
pays a round trip per statement before the server can start the next answer, however fast
the data flow: at 10 ms, 65 queries cost 650 ms while the COPY behind them moves 11 MB in
0.17 s (mechanics.md). The core measures them (a connection's `round_trips`); here they are
said, and judged worth a finding or the answer's first line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pktflow.findings import Finding

if TYPE_CHECKING:
    from pktflow._core import ConversationSaving, RoundTrips

MIN_QUERIES = 10  # fewer: a round trip or two is no pattern
MOST = 0.5  # round trips this share of the conversation or more are worth a finding


def summary(rt: RoundTrips) -> str:
    """The round trips in a sentence, with their numbers."""
    n, rtt, cost, span = rt["queries"], rt["rtt_ms"], rt["round_trips_ms"], rt["span_ms"]
    queries = f"{n} quer{'y' if n == 1 else 'ies'}"
    if rtt is None or cost is None:
        return f"{queries} over {span:,.1f} ms; the round trip is unknown (no handshake, no RTT " \
               f"sample)"
    # no share when the capture's clock gives the conversation no time (a damaged or
    # reordered capture)
    share = "" if rt["share"] is None else f", {rt['share']:.0%} of the {span:,.1f} ms"
    return (f"{queries} one after another, each a round trip of {rtt:,.3f} ms "
            f"({rt['rtt_from']}): {cost:,.1f} ms{share} from the first query to the last "
            f"response; the responses moved for {rt['responses_ms']:,.1f} ms, the bulk ones (64 "
            f"KiB or more) for {rt['bulk_ms']:,.1f} ms")


def round_trips_set_the_time(rt: RoundTrips | dict[str, Any] | None) -> bool:
    """Whether a conversation's round trips (its "round_trips") were most of its time: worth
    a finding, and the first line of the answer."""
    return bool(rt and rt["queries"] >= MIN_QUERIES and rt["share"] is not None
                and rt["share"] >= MOST)


def round_trip_findings(rt: RoundTrips | None, conn_id: str,
                        frames: tuple[int, int] | None) -> list[Finding]:
    """A finding when the round trips were most of the conversation; `frames`: the first and
    the last query sent."""
    if not round_trips_set_the_time(rt):
        return []
    assert rt is not None and rt["rtt_ms"] is not None and rt["round_trips_ms"] is not None
    assert rt["share"] is not None
    return [Finding(
        "warning", "round-trips",
        f"{rt['queries']} queries ran one after another and their round trips "
        f"({rt['queries']} x {rt['rtt_ms']:,.3f} ms = {rt['round_trips_ms']:,.1f} ms) are "
        f"{rt['share']:.0%} of the conversation's {rt['span_ms']:,.1f} ms, while the bulk data "
        f"moved for {rt['bulk_ms']:,.1f} ms: the round trips, not the transfer, set the time "
        f"(fewer statements, pipelining, or a client nearer the server)",
        conn_id, list(frames) if frames else [])]


CONVERSATION_WITHOUT = ("the client next to the server (each query's round trip near zero); "
                        "pipelined: every query sent at once, one round trip for all")


def conversation_saving(rt: RoundTrips) -> ConversationSaving:
    """What the conversation would save: with the client next to the server its queries' round
    trips go (`saving_s`: queries x the path's round trip); with its queries pipelined or
    batched (where the protocol allows: extended-protocol statements that do not depend on
    each other's answers) all but one of them go (`pipelined_saving_s`). Unknown without a
    round trip."""
    n, rtt = rt["queries"], rt["rtt_ms"]
    if rtt is None or rt["round_trips_ms"] is None:
        return {"saving_s": None, "pipelined_saving_s": None,
                "without": "the round trip is unknown (no handshake, no RTT sample): no saving"}
    return {"saving_s": round(rt["round_trips_ms"] / 1e3, 6),
            "pipelined_saving_s": round(max(n - 1, 0) * rtt / 1e3, 6),
            "without": CONVERSATION_WITHOUT}
