"""Findings the TCP engine's counters support, with the frames that prove them."""

from __future__ import annotations

from pktflow.findings import Finding
from pktflow.tcp.connection import Connection
from pktflow.tcp.direction import MAX_BUFFERED_BYTES, MAX_BUFFERED_SEGMENTS, MAX_HOLES

_SIDES = ("client", "server")


def sender(conn: Connection, d: int) -> str:
    """Who sends direction d, after any role correction by the application protocol."""
    return _SIDES[(d + conn.swapped) % 2]


def direction_name(conn: Connection, d: int) -> str:
    return f"{sender(conn, d)}->{sender(conn, 1 - d)}"


def connection_findings(conn: Connection) -> list[Finding]:
    out: list[Finding] = []
    cid = conn.id
    for d in (0, 1):
        m = conn.dirs[d]
        peer = conn.dirs[1 - d]
        name = direction_name(conn, d)
        if m.gaps:
            out.append(Finding(
                "warning", "capture-gap",
                f"{name}: the capture missed {m.missing_bytes:,} bytes in {m.gaps} gap(s) that "
                f"the receiver acknowledged or that later data skipped over; protocol decoding "
                f"resynchronises after each", cid, list(m.ev_gap)))
        if m.bound_gaps or m.holes_forgotten:
            out.append(Finding(
                "warning", "reassembly-bound",
                f"{name}: reordering or loss exceeded pktflow's reassembly bounds "
                f"({MAX_BUFFERED_SEGMENTS:,} segments or {MAX_BUFFERED_BYTES >> 20} MiB waiting, "
                f"{MAX_HOLES} holes remembered): {m.bound_gaps:,} hole(s) were declared capture "
                f"gaps before they could fill and {m.holes_forgotten:,} were forgotten, so late "
                f"bytes there count as retransmissions", cid, list(m.ev_gap)))
        if m.retrans_segments:
            out.append(Finding(
                "warning", "retransmission",
                f"{name}: {m.retrans_segments} retransmitted segment(s), "
                f"{m.retrans_bytes:,} bytes", cid, list(m.ev_retrans)))
        if m.ooo_segments:
            out.append(Finding(
                "info", "out-of-order",
                f"{name}: {m.ooo_segments} segment(s) arrived out of order at the capture point "
                f"(filled a hole within 3 ms)", cid, list(m.ev_ooo)))
        if m.truncated_bytes:
            out.append(Finding(
                "warning", "truncated-payload",
                f"{name}: snaplen cut {m.truncated_bytes:,} payload bytes from "
                f"{m.truncated_segments} segment(s); those bytes are counted, never invented",
                cid, list(m.ev_trunc)))
        if m.zero_window_events:
            out.append(Finding(
                "info", "zero-window",
                f"{sender(conn, d)} advertised a zero receive window "
                f"{m.zero_window_events} time(s): its application was not reading fast enough",
                cid, list(m.ev_zero)))
        mss = peer.syn.mss if peer.syn else None
        if mss and m.max_segment > mss:
            out.append(Finding(
                "info", "segment-above-mss",
                f"{name}: segments up to {m.max_segment:,} bytes exceed the MSS of {mss:,}: "
                f"TSO/GSO at the sender or GRO at the receiver merged wire packets before the "
                f"capture point, so captured segments are not wire packets", cid, []))
        if not m.wscale_known and (m.payload_bytes or peer.payload_bytes):
            lb = f"; the data in flight proves a scale of at least {m.wscale_lb}" \
                if m.wscale_lb else ""
            out.append(Finding(
                "info", "window-scale-unknown",
                f"{sender(conn, d)}'s window scale is unknown (no handshake in the capture): its windows are "
                f"shown raw{lb}", cid, []))
    return out
