"""Findings the TCP engine's counters support, with the frames that prove them.

They read a connection's facts (pktflow-core's ConnectionFacts as a dict, see tcp.report) and
whether the report swapped the engine's client and server.
"""

from __future__ import annotations

from typing import Any

from pktflow.findings import Finding

# The core's reassembly bounds (pktflow-core tcp::direction), named in a finding's sentence.
MAX_BUFFERED_BYTES = 4 << 20
MAX_BUFFERED_SEGMENTS = 2048
MAX_HOLES = 64

_SIDES = ("client", "server")


def sender(d: int, swapped: bool = False) -> str:
    """Who sends the engine's direction d, after any role correction by the protocol."""
    return _SIDES[(d + swapped) % 2]


def direction_name(d: int, swapped: bool = False) -> str:
    return f"{sender(d, swapped)}->{sender(1 - d, swapped)}"


def connection_findings(facts: dict[str, Any], swapped: bool = False) -> list[Finding]:
    out: list[Finding] = []
    cid = f"c{facts['number']}"
    dirs = facts["directions"]
    for d in (0, 1):
        m, peer = dirs[d], dirs[1 - d]
        name = direction_name(d, swapped)
        if m["gaps"]:
            out.append(Finding(
                "warning", "capture-gap",
                f"{name}: the capture missed {m['missing_bytes']:,} bytes in {m['gaps']} gap(s) "
                f"that the receiver acknowledged or that later data skipped over; protocol "
                f"decoding resynchronises after each", cid, list(m["ev_gap"])))
        if m["bound_gaps"] or m["holes_forgotten"]:
            out.append(Finding(
                "warning", "reassembly-bound",
                f"{name}: reordering or loss exceeded pktflow's reassembly bounds "
                f"({MAX_BUFFERED_SEGMENTS:,} segments or {MAX_BUFFERED_BYTES >> 20} MiB waiting, "
                f"{MAX_HOLES} holes remembered): {m['bound_gaps']:,} hole(s) were declared "
                f"capture gaps before they could fill and {m['holes_forgotten']:,} were "
                f"forgotten, so late bytes there count as retransmissions", cid,
                list(m["ev_gap"])))
        if m["retransmitted_segments"]:
            out.append(Finding(
                "warning", "retransmission",
                f"{name}: {m['retransmitted_segments']} retransmitted segment(s), "
                f"{m['retransmitted_bytes']:,} bytes", cid, list(m["ev_retrans"])))
        if m["out_of_order_segments"]:
            out.append(Finding(
                "info", "out-of-order",
                f"{name}: {m['out_of_order_segments']} segment(s) arrived out of order at the "
                f"capture point (filled a hole within 3 ms)", cid, list(m["ev_ooo"])))
        if m["truncated_bytes"]:
            out.append(Finding(
                "warning", "truncated-payload",
                f"{name}: snaplen cut {m['truncated_bytes']:,} payload bytes from "
                f"{m['truncated_segments']} segment(s); those bytes are counted, never invented",
                cid, list(m["ev_trunc"])))
        if m["zero_window_events"]:
            out.append(Finding(
                "info", "zero-window",
                f"{sender(d, swapped)} advertised a zero receive window "
                f"{m['zero_window_events']} time(s): its application was not reading fast "
                f"enough", cid, list(m["ev_zero"])))
        mss = peer["mss"]
        if mss and m["max_segment"] > mss:
            out.append(Finding(
                "info", "segment-above-mss",
                f"{name}: segments up to {m['max_segment']:,} bytes exceed the MSS of {mss:,}: "
                f"TSO/GSO at the sender or GRO at the receiver merged wire packets before the "
                f"capture point, so captured segments are not wire packets", cid, []))
        if not m["window_scale_known"] and (m["payload_bytes"] or peer["payload_bytes"]):
            lb = m["window_scale_lower_bound"]
            more = f"; the data in flight proves a scale of at least {lb}" if lb else ""
            out.append(Finding(
                "info", "window-scale-unknown",
                f"{sender(d, swapped)}'s window scale is unknown (no handshake in the capture): "
                f"its windows are shown raw{more}", cid, []))
    return out
