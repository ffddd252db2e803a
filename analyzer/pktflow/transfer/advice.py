"""The one thing to look at for each limit a transfer's verdict names: what a DBA or SRE can
change. Read by the answer that opens a report (report.answer)."""

from __future__ import annotations

from typing import Any

# verdict.limit (and for the receiver's window, verdict.receiver) -> what to look at
ADVICE = {
    ("receiver_window", "buffer"):
        "the receiver's socket buffer: it kept reading but held less than the path carries; "
        "raise net.ipv4.tcp_rmem (a pooler's tcp_socket_buffer) or leave it to autotuning",
    ("receiver_window", "application"):
        "the reading application: it stopped reading (psql printing, a slow client, a pooler "
        "waiting on its own client)",
    ("receiver_window", None):
        "the receiver: its window held the sender (a small buffer, or an application that "
        "stopped reading)",
    ("network", None):
        "the path's bandwidth: a link, shaper or rate limit between the hosts set the pace",
    ("loss", None):
        "packet loss on the path: each loss halves the sending rate; look for drops on "
        "interfaces, queues and shapers",
    ("latency", None):
        "round trips: the RTT times a congestion window still small; fewer round trips "
        "(bigger fetches, COPY) or a shorter path",
}
# a sender-limited direction, by who sent it (sender_of): what its application waited on; the
# relay's line (relay.measure) says the server's in these words too
SENDER = {
    "server": "the server producing the rows: the plan, CPU and I/O of the query",
    "pooler": "what the pooler's other leg brought it: the relay's line says who set that "
              "leg's pace",
    "client": "the client's application: how fast it sends (its batches, COPY FROM)",
}

# a conversation whose queries' round trips were most of its time (transfer.round_trips)
ROUND_TRIPS = ("fewer round trips: fewer statements, or statements sent together "
               "(pipelining, a batch, COPY), or a client nearer the server")

NAMES = {"receiver_window": "the receiver's window", "network": "the network's rate",
         "loss": "loss recovery", "latency": "round trips", "sender": "the sender"}


def sender_of(role: str | None, direction: str) -> str:
    """Who sent a direction of a connection with this relay role ("front", "back", else
    direct): the server, the pooler or the client."""
    if direction == "server_to_client":
        return "pooler" if role == "front" else "server"
    return "pooler" if role == "back" else "client"


def look_at(verdict: dict[str, Any], sender: str) -> str | None:
    """What to look at for `verdict` (a direction's, sent by `sender`: see sender_of), or None
    when nothing limited it."""
    limit = verdict.get("limit")
    if limit in (None, "none"):
        return None
    if limit == "sender":
        return SENDER.get(sender)
    return ADVICE.get((limit, verdict.get("receiver"))) or ADVICE.get((limit, None))
