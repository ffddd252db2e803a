"""Findings the TCP engine's counters support, with the frames that prove them.

They read a connection's Judgement: each direction's counters, in the report's roles.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pktflow._core import MAX_BUFFERED_BYTES, MAX_BUFFERED_SEGMENTS, MAX_HOLES
from pktflow.findings import Finding

if TYPE_CHECKING:
    from pktflow._core import JudgedDirections, Judgement

# A zero window says the buffer was full of unread data, not whose fault that was: a small
# buffer fills as well as a slow reader's (issue 31 rule 6); the verdict tells them apart.
ZERO_WINDOW_WHY = ("its receive buffer was full of data its application had not read yet (a "
                   "small buffer or a slow reader: where the window held the sender, the "
                   "direction's verdict says which)")

Key = Literal["client_to_server", "server_to_client"]
# a direction of the report: (its key, who sends it, its name, the other direction's key)
Side = tuple[Key, str, str, Key]
C2S: Side = ("client_to_server", "client", "client->server", "server_to_client")
S2C: Side = ("server_to_client", "server", "server->client", "client_to_server")


def engine_order(j: Judgement) -> tuple[Side, Side]:
    """The report's directions in the engine's order (its first is the one it guessed was the
    client's), which is the order their findings are listed in."""
    return (S2C, C2S) if j["swapped"] else (C2S, S2C)


def connection_findings(j: Judgement) -> list[Finding]:
    out: list[Finding] = []
    cid = j["id"]
    dirs = j["directions"]
    cut_syns = [(syn, f) for (key, *_), syn in ((C2S, "SYN"), (S2C, "SYN-ACK"))
                if (f := dirs[key]["syn_options_cut_frame"]) is not None]
    for key, who, name, other in engine_order(j):
        m, peer = dirs[key], dirs[other]
        if m["gaps"]:
            out.append(Finding(
                "warning", "capture-gap",
                f"{name}: the capture missed {m['missing_bytes']:,} bytes in {m['gaps']} gap(s) "
                f"that the receiver acknowledged or that later data skipped over; protocol "
                f"decoding resynchronises after each", cid, list(m["ev_gap"] or ())))
        if m["bound_gaps"] or m["holes_forgotten"]:
            out.append(Finding(
                "warning", "reassembly-bound",
                f"{name}: reordering or loss exceeded pktflow's reassembly bounds "
                f"({MAX_BUFFERED_SEGMENTS:,} segments or {MAX_BUFFERED_BYTES >> 20} MiB waiting, "
                f"{MAX_HOLES} holes remembered): {m['bound_gaps']:,} hole(s) were declared "
                f"capture gaps before they could fill and {m['holes_forgotten']:,} were "
                f"forgotten, so late bytes there count as retransmissions", cid,
                list(m["ev_gap"] or ())))
        if m["retransmitted_segments"]:
            out.append(Finding(
                "warning", "retransmission",
                f"{name}: {m['retransmitted_segments']} retransmitted segment(s), "
                f"{m['retransmitted_bytes']:,} bytes", cid, list(m["ev_retrans"] or ())))
        if m["out_of_order_segments"]:
            out.append(Finding(
                "info", "out-of-order",
                f"{name}: {m['out_of_order_segments']} segment(s) arrived out of order at the "
                f"capture point (filled a hole within 3 ms)", cid, list(m["ev_ooo"] or ())))
        if m["truncated_bytes"]:
            out.append(Finding(
                "warning", "truncated-payload",
                f"{name}: snaplen cut {m['truncated_bytes']:,} payload bytes from "
                f"{m['truncated_segments']} segment(s); those bytes are counted, never invented",
                cid, list(m["ev_trunc"] or ())))
        if m["zero_window_events"]:
            out.append(Finding(
                "info", "zero-window",
                f"{who} advertised a zero receive window {m['zero_window_events']} time(s): "
                f"{ZERO_WINDOW_WHY}", cid, list(m["ev_zero"] or ())))
        mss = peer["mss"]
        if mss and m["max_segment"] > mss:
            out.append(Finding(
                "info", "segment-above-mss",
                f"{name}: segments up to {m['max_segment']:,} bytes exceed the MSS of {mss:,}: "
                f"TSO/GSO at the sender or GRO at the receiver merged wire packets before the "
                f"capture point, so captured segments are not wire packets", cid, []))
        if cut_syns:
            continue  # the handshake's options were cut: said once, below
        if not m["window_scale_known"] and (m["payload_bytes"] or peer["payload_bytes"]):
            lb = m["window_scale_lower_bound"]
            more = f"; the data in flight proves a scale of at least {lb}" if lb else ""
            out.append(Finding(
                "info", "window-scale-unknown",
                f"{who}'s window scale is unknown (no handshake in the capture): "
                f"its windows are shown raw{more}", cid, []))
    if cut_syns:
        out.append(_syn_options_cut(cid, cut_syns, dirs))
    return out


def _syn_options_cut(cid: str, cut: list[tuple[str, int]], dirs: JudgedDirections) -> Finding:
    """The handshake seen, its options cut by the snapshot length: one finding."""
    what = " and ".join(f"the {name} (frame {frame})" for name, frame in cut)
    proved = [f"at least {d['window_scale_lower_bound']} for the {who}"
              for key, who, _, _ in (C2S, S2C)
              if not (d := dirs[key])["window_scale_known"] and d["window_scale_lower_bound"]]
    more = (f"; the data in flight proves a window scale of {' and '.join(proved)}" if proved
            else "")
    return Finding(
        "info", "syn-options-cut",
        f"the snapshot length cut the TCP options of {what}: the handshake is seen, but the "
        f"MSS and window scale offered there are unknown, so windows are shown raw{more}",
        cid, [frame for _, frame in cut])
