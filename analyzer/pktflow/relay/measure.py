"""What a relay does to each query and to the transfer: delays, re-segmentation, coupling of the
back leg to the front leg's drain, and a verdict in words with the setting that would change it.

Input: what relay_leg takes of the report's connection dicts (pktflow.report/1); output:
the report's "relays" list and each leg's role, so text, JSON and `compare` agree.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any

from pktflow.findings import Finding
from pktflow.relay.topology import BULK_SEGMENTS, Leg, LegQuery, QueryRef, Relay, find_relays
from pktflow.transfer.advice import SENDER


def ms_between(a: Any, b: Any) -> float | None:
    """b - a in milliseconds, for report times in seconds; None when either is unknown."""
    if a is None or b is None:
        return None
    return round((float(b) - float(a)) * 1000, 3)


def pair_json(f: QueryRef, b: QueryRef) -> dict[str, Any]:
    fq, bq = f.q, b.q
    through = ms_between(fq.sent_s, fq.last_response_s)
    own = ms_between(bq.sent_s, bq.last_response_s)
    seg_in, seg_out = bq.response_segments or 0, fq.response_segments or 0
    return {
        "front": {"connection": f.conn, "query_index": f.index},
        "back": {"connection": b.conn, "query_index": b.index},
        "sql": fq.sql, "rows": fq.rows,
        "response_bytes": {"front": fq.response_bytes, "back": bq.response_bytes},
        "request_delay_ms": ms_between(fq.sent_s, bq.sent_s),
        "first_byte_delay_ms": ms_between(bq.first_response_s, fq.first_response_s),
        "last_byte_delay_ms": ms_between(bq.last_response_s, fq.last_response_s),
        "through_relay_ms": through, "back_leg_ms": own,
        "relay_cost_ms": None if through is None or own is None else round(through - own, 3),
        "segments_in": seg_in, "segments_out": seg_out,
        "segments_out_per_in": round(seg_out / seg_in, 2) if seg_in else None,
        "segment_median_in": bq.response_segment_median,
        "segment_median_out": fq.response_segment_median,
        "segment_max_in": bq.response_segment_max,
        "segment_max_out": fq.response_segment_max,
        "frames": {"front_sent": fq.sent_frame, "back_sent": bq.sent_frame,
                   "back_first": bq.first_frame, "front_first": fq.first_frame,
                   "back_last": bq.last_frame, "front_last": fq.last_frame},
    }


def coupling_json(backs: list[Leg], fronts: list[Leg]) -> dict[str, Any]:
    """Did the server wait for the relay? The relay's receive window on the back leg (advertised
    to the server) shrinking to zero while it forwards to the client is the sign."""
    zero_events = zero_s = 0.0
    frames: list[int] = []
    back_ack = front_ack = None
    back_flight = None
    for c in backs:
        zero_events += c.zero_window_periods
        zero_s += c.zero_window_total_s
        frames += c.evidence_frames
        back_ack = back_ack or c.bytes_acked_median
        back_flight = back_flight or c.flight_bytes_median
    for c in fronts:
        front_ack = front_ack or c.bytes_acked_median
    if zero_events:
        summary = (f"the relay's receive window on the back leg reached zero {int(zero_events)} "
                   f"time(s), {zero_s * 1000:,.2f} ms in all: the server waited for the relay "
                   f"to drain its buffer to the client")
    else:
        summary = ("the back leg's window never reached zero: the server did not wait for the "
                   "relay's drain to the client")
    return {"back_window_zero_events": int(zero_events),
            "back_window_zero_s": round(zero_s, 6),
            "back_bytes_per_ack_median": back_ack, "front_bytes_per_ack_median": front_ack,
            "back_bytes_per_flight_median": back_flight,
            "summary": summary, "evidence_frames": sorted(set(frames))[:10]}


def _median(values: list[Any]) -> Any:
    """The median of the numbers among `values` (ints or floats, None for unknown), as is."""
    vals = sorted(v for v in values if v is not None)
    return vals[len(vals) // 2] if vals else None


class PairStats:
    """What the verdict reads of a relay's matched queries, gathered as they are made (a storm's
    are not all kept as dicts: report.stored keeps them as text)."""

    def __init__(self) -> None:
        self.bulk: list[dict[str, Any]] = []  # the pairs with bulk responses
        self.waits = array("d")  # request delays, ms, where known
        self.costs = array("d")  # relay costs, ms, where known
        self.worst_wait: dict[str, Any] | None = None  # the last of the longest waits
        self.worst_cost: dict[str, Any] | None = None  # the first of the largest known costs
        # of each known cost, what the relay did itself: forward the request and the first
        # response byte (the rest is the front leg draining slower than the back leg)
        self.own = array("d")

    def add(self, p: dict[str, Any]) -> None:
        if (p["segments_in"] or 0) >= BULK_SEGMENTS:
            self.bulk.append(p)
        delay = p["request_delay_ms"]
        if delay is not None:
            if self.worst_wait is None or delay >= self.worst_wait["request_delay_ms"]:
                self.worst_wait = p
            self.waits.append(delay)
        cost = p["relay_cost_ms"]
        if cost is not None:  # the worst among the known: the verdict quotes its numbers
            self.costs.append(cost)
            first = p["first_byte_delay_ms"]
            own = cost if delay is None or first is None else min(cost, max(delay + first, 0.0))
            self.own.append(own)
            if self.worst_cost is None or cost > self.worst_cost["relay_cost_ms"]:
                self.worst_cost = p


def write_unit(legs: list[Leg]) -> int | None:
    """The write size a leg's sender habitually uses: of the sizes of at least 1 KiB among
    those that carried the most bytes, the one written most often (the larger among equals).
    Writes, not segments: on an MTU-1500 path every segment is cut at the MSS, the writes are
    the programs' own (an 8,192-byte PostgreSQL write, PgBouncer's 4 KB forwarding:
    mechanics.md). Counted, not weighed: under back-pressure a socket takes several writes as
    one, and those few large ones carry many bytes but are no program's habit."""
    counts: dict[int, int] = {}
    for leg in legs:
        for k, n in leg.write_sizes:
            counts[k] = counts.get(k, 0) + n
    if not counts:
        return None
    return max(counts, key=lambda k: (counts[k], k))


# A relay judged as a component, from what limited each leg's server -> client direction (the
# bulk legs: those that carried the most). The front leg is read first: a client that reads
# slowly or a lossy, slow or distant client path holds the relay's output and, through its full
# buffers, the back leg too (the back leg then looks window-limited by the relay, though the
# relay is not the cause). Only when the relay had nothing to send to the client does the back
# leg say why: the relay not reading (its window held the server: the pooler is the limit),
# the server's path, or the server producing the rows.
CLIENT_PATH = ("network", "loss", "latency")
SETTINGS = {
    "client": "the client reads more slowly than the relay forwards: look at the client (its "
              "receive buffer, or an application that stops reading), not at pooler settings",
    "network": "the path between the client and the relay (its rate, loss or round trips) set "
               "the pace, not the pooler",
    "server": f"{SENDER['server']} (the relay kept up with it)",
    "server_network": "the path between the relay and the server (its rate, loss or round "
                      "trips) set the pace",
    "pooler": "the pooler's own pace: its read and write buffers (PgBouncer pkt_buf, "
              "tcp_socket_buffer) or its CPU",
}
# what each limit means on a leg's server -> client direction
FRONT_WORDS = {"receiver_window": "the client's receive window", "network": "the network's rate",
               "loss": "loss recovery", "latency": "round trips",
               "sender": "the relay having nothing more to send", "none": "nothing"}
BACK_WORDS = {"receiver_window": "the relay's receive window", "network": "the network's rate",
              "loss": "loss recovery", "latency": "round trips",
              "sender": "the server's own pace (producing the rows)", "none": "nothing"}


def bulk_limit(legs: list[Leg]) -> str:
    """The limit of the legs' server -> client direction that carried the most."""
    judged = [c for c in legs if c.limit != "none"]
    return max(judged, key=lambda c: c.payload_bytes).limit if judged else "none"


def component(front: str, back: str) -> str:
    """The relay's limit from its legs': client, network, pooler, server_network, server or
    none."""
    if front == "receiver_window":
        return "client"
    if front in CLIENT_PATH:
        return "network"
    if front == "sender" or front == "none" and back != "none":
        if back == "receiver_window":
            return "pooler"
        if back in CLIENT_PATH:
            return "server_network"
        if back == "sender":
            return "server"
    return "none"


def verdict_json(relay: Relay, stats: PairStats, coupling: dict[str, Any],
                 writes: tuple[int | None, int | None],
                 legs: tuple[str, str] = ("none", "none")) -> dict[str, Any]:
    """One paragraph: how the relay re-splits the data, whether the server waited on it, what
    limited the relay as a component, what it cost, and the setting the evidence points at.
    `writes`: the server's and the relay's habitual write sizes (write_unit of the back and
    front legs); `legs`: what limited the front and the back leg (bulk_limit)."""
    limit = component(*legs)
    bulk = stats.bulk
    parts: list[str] = []
    setting: str | None = None
    frames: list[int] = []
    server_unit, relay_unit = writes
    if bulk:
        med_in = _median([p["segment_median_in"] for p in bulk])
        med_out = _median([p["segment_median_out"] for p in bulk])
        ratio = _median([p["segments_out_per_in"] for p in bulk])
        if med_in is not None and med_out is not None:  # unknown when a leg's response is lost
            parts.append(f"the server sent bulk responses in {med_in:,.0f}-byte segments "
                         f"(median) and the relay forwarded them in {med_out:,.0f}-byte "
                         f"segments" + (f", {ratio:.2f} out per segment in" if ratio else ""))
        if server_unit and relay_unit and relay_unit < server_unit:
            parts.append(f"the server wrote {server_unit:,} bytes at a time and the relay "
                         f"wrote them on in {relay_unit:,}-byte writes (PSH-delimited; larger "
                         f"ones are queued writes taken as one): it reads and forwards about "
                         f"that much at a time")
            if limit != "pooler":
                pass  # a forwarding unit named only where it is what limits
            elif 4000 <= relay_unit <= 4096 + 128:
                setting = ("consistent with PgBouncer's pkt_buf (default 4096), which splits each "
                           "8 KB server write into about 4 KB + 4 KB + a small tail; pkt_buf >= "
                           "8256 (8,192 + 64) forwards it whole")
            elif 7000 <= relay_unit <= 8192:
                setting = ("consistent with Pgpool-II, which writes to the client through an "
                           "8,192-byte buffer and flushes before a message that would not fit "
                           "(a fixed buffer in its code, not a configuration setting)")
        for p in bulk[:3]:
            frames += [x for x in (p["frames"]["front_sent"], p["frames"]["back_first"],
                                   p["frames"]["front_last"]) if x]
    if coupling["back_window_zero_events"]:
        parts.append(coupling["summary"])
        frames += coupling["evidence_frames"][:3]
    waits = sorted(stats.waits)
    worst = stats.worst_wait
    if len(waits) >= 10 and len(relay.front) > len(relay.back) and worst is not None:
        median = waits[len(waits) // 2]
        p90 = waits[int(len(waits) * 0.9)]
        if p90 >= 1.0 and p90 >= 10 * max(median, 0.01):
            parts.append(
                f"clients waited for a server connection: {len(relay.front)} client "
                f"connections shared {len(relay.back)} server connection(s), and one request "
                f"in ten waited {p90:,.2f} ms or more before the relay could forward it "
                f"(median {median:,.3f} ms, worst {worst['request_delay_ms']:,.2f} ms)")
            frames += [x for x in (worst["frames"]["front_sent"], worst["frames"]["back_sent"])
                       if x]
            setting = setting or ("the pool is smaller than the number of clients that are "
                                  "busy at once: PgBouncer's default_pool_size (or Pgpool-II's "
                                  "num_init_children) sets how many server connections serve "
                                  "them")
    front, back = legs
    if limit == "pooler":
        parts.append(f"the relay set the pace: on the front leg {FRONT_WORDS[front]} limited "
                     f"it, while on the back leg {BACK_WORDS[back]} held the server: it read "
                     f"no faster than it wrote")
    elif limit in ("client", "network"):
        parts.append(f"the client leg set the pace ({FRONT_WORDS[front]} limited it), and the "
                     f"relay passed that back to the server")
    elif limit != "none":
        parts.append(f"the relay kept up: it waited on the server leg, limited by "
                     f"{BACK_WORDS[back]}")
    costs = stats.costs
    worst = stats.worst_cost
    total = sum(costs)
    own = sum(stats.own) if limit in ("client", "network") else total
    n = f"{len(costs):,} matched quer{'y' if len(costs) == 1 else 'ies'}"
    if costs and worst is not None:
        if limit in ("client", "network"):
            parts.append(f"of the {total:,.2f} ms the client waited beyond the server leg over "
                         f"{n}, the relay itself added {own:,.2f} ms (forwarding each request "
                         f"and its first byte) and the client leg's slower drain "
                         f"{total - own:,.2f} ms")
        else:
            parts.append(f"the relay added {total:,.2f} ms over {n} (most: "
                         f"{worst['relay_cost_ms']:,.2f} ms, {worst['through_relay_ms']:,.2f} ms "
                         f"through the relay vs {worst['back_leg_ms']:,.2f} ms on the back leg)")
    if setting is None and limit != "none":
        setting = SETTINGS[limit]
    summary = "; ".join(parts) + "." if parts else "no bulk response went through the relay."
    return {"summary": summary[0].upper() + summary[1:], "setting": setting, "limit": limit,
            "legs": {"front": front, "back": back},
            "relay_ms": round(own, 3) if costs else None,
            "front_leg_ms": round(total - own, 3) if costs else None,
            "evidence_frames": sorted(set(frames))[:12]}


def forward_chunk(front_queries: list[LegQuery]) -> int | None:
    """The largest chunk the relay forwards as a habit. Large (>= 1 KiB) segment sizes that
    make up at least 15% of them qualify; coalesced segments (the kernel merging queued writes
    when the client's window reopens, up to 65,483 bytes on loopback) are sums of several
    writes, so sizes beyond twice the smallest qualifying one are left out. Measured: 4,096 for
    PgBouncer's default pkt_buf, 8,099 for Pgpool-II, 1,448 (the MSS) over a bridge."""
    sizes: dict[int, int] = {}
    for q in front_queries:
        if (q.response_segments or 0) < BULK_SEGMENTS:
            continue
        for k, v in (q.response_segment_sizes or {}).items():
            if int(k) >= 1024:
                sizes[int(k)] = sizes.get(int(k), 0) + v
    total = sum(sizes.values())
    common = sorted(k for k, v in sizes.items() if v >= 0.15 * total)
    if not common:
        return None
    return max(k for k in common if k <= 2 * common[0])


def relays_of(legs: list[Leg], kept: Callable[[], Any] = list
              ) -> tuple[list[dict[str, Any]], list[Finding], dict[str, str]]:
    """Find relays among these legs: the report's "relays" list, its findings, and the role
    ("front" or "back") of each connection that is a relay's leg. Each relay's matched queries
    are appended to a new kept() (a list, or report.stored's Texts)."""
    by_id = {c.id: c for c in legs}
    roles: dict[str, str] = {}
    out, findings = [], []
    for relay in find_relays(legs):
        fronts = [by_id[i] for i in relay.front]
        backs = [by_id[i] for i in relay.back]
        roles.update((c.id, "front") for c in fronts)
        roles.update((c.id, "back") for c in backs)
        pairs, stats = kept(), PairStats()
        for f, b in relay.pairs:
            pair = pair_json(f, b)
            stats.add(pair)
            pairs.append(pair)
        max_chunk = forward_chunk([f.q for f, _ in relay.pairs])
        coupling = coupling_json(backs, fronts)
        writes = write_unit(backs), write_unit(fronts)
        verdict = verdict_json(relay, stats, coupling, writes,
                               (bulk_limit(fronts), bulk_limit(backs)))
        out.append({
            "host": relay.host, "front_port": relay.front_port,
            "back_ports": relay.back_ports,
            "front_connections": relay.front, "back_connections": relay.back,
            "matched_queries": len(relay.pairs),
            "unmatched_front_queries": len(relay.unmatched_front),
            "unmatched_back_queries": len(relay.unmatched_back),
            "pooler_own_queries": [{"connection": r.conn, "query_index": r.index,
                                    "sql": r.q.sql} for r in relay.own][:100],
            "max_forward_chunk": max_chunk,
            "server_write": writes[0], "forward_write": writes[1],
            "queries": pairs, "coupling": coupling, "verdict": verdict,
        })
        if relay.unmatched_front:
            r = relay.unmatched_front[0]
            findings.append(Finding(
                "info", "relay-unmatched",
                f"{len(relay.unmatched_front)} front-leg quer"
                f"{'y' if len(relay.unmatched_front) == 1 else 'ies'} through "
                f"{relay.host}:{relay.front_port} had no back-leg execution in the capture "
                f"(answered by the pooler itself, or its back leg was not captured); first: "
                f"{r.conn} query {r.index}", r.conn, [r.q.sent_frame or 0]))
    return out, findings, roles
