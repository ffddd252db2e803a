"""Per-direction TCP state: sequence bookkeeping, counters and the reassembly buffer.

Sequence numbers are kept relative to the stream's first byte (SYN excluded) and unwrapped to
unbounded ints, so 32-bit wraparound is handled once, in `unwrap`, and nowhere else.
"""

from __future__ import annotations

from typing import Any, Final

from pktflow.tcp.options import SynOptions

MASK32: Final = 0xFFFFFFFF
HALF32: Final = 0x80000000

# Reassembly bounds per direction: beyond these, the oldest hole is declared a capture gap
# rather than buffering without limit (a stream whose hole never fills must not eat memory).
MAX_BUFFERED_BYTES: Final = 4 << 20
MAX_BUFFERED_SEGMENTS: Final = 2048
# Open holes remembered for classifying late arrivals (out-of-order vs retransmission).
MAX_HOLES: Final = 64
# tshark's default: a hole filled within this time of opening is reordering, not loss.
OOO_THRESHOLD_S: Final = 0.003
MAX_EVIDENCE: Final = 20


class Direction:
    """One direction of a connection: the sender's stream and what the capture saw of it."""

    __slots__ = (
        "base", "high", "next", "high_ts", "isn_seen", "syn", "fin_at", "rst",
        "buffer", "buffered_bytes", "holes", "holes_forgotten", "bound_gaps", "max_acked",
        "payload_bytes", "data_segments", "max_segment", "retrans_segments", "retrans_bytes",
        "ooo_segments", "gaps", "missing_bytes", "truncated_bytes", "truncated_segments",
        "zero_window_events", "window_updates", "above_mss_segments", "keepalives",
        "last_seq", "last_ack", "last_win", "wscale", "wscale_known", "wscale_lb",
        "ev_retrans", "ev_ooo", "ev_gap", "ev_zero", "ev_trunc",
    )

    def __init__(self) -> None:
        self.base = -1  # raw 32-bit sequence number of relative byte 0; -1 until known
        self.high = 0  # highest relative end seen (exclusive)
        self.next = 0  # next relative byte to hand to the stream consumer
        self.high_ts = 0.0
        self.isn_seen = False
        self.syn: SynOptions | None = None
        self.fin_at: int | None = None  # relative offset the FIN occupies
        self.rst = False
        # out-of-order segments waiting for `next`: start -> (end, payload, frame, ts)
        self.buffer: dict[int, tuple[int, bytes, int, float]] = {}
        self.buffered_bytes = 0
        self.holes: list[list[float]] = []  # [start, end, opened_ts], never-seen ranges below high
        self.holes_forgotten = 0  # holes not remembered past MAX_HOLES (late bytes: retransmits)
        self.bound_gaps = 0  # gaps declared because the reassembly buffer reached its bounds
        self.max_acked = -1  # highest relative ack the peer sent for this stream
        self.payload_bytes = 0  # unique bytes on the wire
        self.data_segments = 0
        self.max_segment = 0
        self.retrans_segments = 0
        self.retrans_bytes = 0
        self.ooo_segments = 0
        self.gaps = 0
        self.missing_bytes = 0
        self.truncated_bytes = 0
        self.truncated_segments = 0
        self.zero_window_events = 0
        self.window_updates = 0
        self.above_mss_segments = 0
        self.keepalives = 0
        self.last_seq = -1
        self.last_ack = -1
        self.last_win = -1
        self.wscale = 0  # shift applied to this side's windows (0 while unknown)
        self.wscale_known = False
        self.wscale_lb = 0  # smallest window scale consistent with observed bytes in flight
        self.ev_retrans: list[int] = []
        self.ev_ooo: list[int] = []
        self.ev_gap: list[int] = []
        self.ev_zero: list[int] = []
        self.ev_trunc: list[int] = []

    def unwrap(self, raw: int) -> int:
        """Relative offset of raw sequence number `raw`, the 2**32 cycle nearest `high`."""
        high = self.high
        delta = (raw - self.base - high) & MASK32
        return high + delta - (1 << 32 if delta >= HALF32 else 0)

    def window_scale(self, peer: Direction) -> tuple[int | None, bool]:
        """Shift this side applies to its windows, and whether the capture proves it."""
        mine, theirs = self.syn, peer.syn
        if mine is not None and theirs is not None:
            if mine.window_scale is not None and theirs.window_scale is not None:
                return mine.window_scale, True
            return 0, True  # scaling needs both SYNs to offer it
        # Only one SYN seen: a SYN-ACK without the option proves scaling is off both ways.
        for syn in (mine, theirs):
            if syn is not None and syn.window_scale is None:
                return 0, True
        return None, False

    def update_scale(self, peer: Direction) -> None:
        scale, known = self.window_scale(peer)
        self.wscale = scale or 0
        self.wscale_known = known

    def to_json(self, peer: Direction) -> dict[str, Any]:
        scale, known = self.window_scale(peer)
        return {
            "payload_bytes": self.payload_bytes,
            "data_segments": self.data_segments,
            "max_segment": self.max_segment,
            "mss": self.syn.mss if self.syn else None,
            "window_scale": scale,
            "window_scale_known": known,
            "window_scale_lower_bound": None if known else self.wscale_lb,
            "retransmitted_segments": self.retrans_segments,
            "retransmitted_bytes": self.retrans_bytes,
            "out_of_order_segments": self.ooo_segments,
            "gaps": self.gaps,
            "missing_bytes": self.missing_bytes,
            "truncated_bytes": self.truncated_bytes,
            "zero_window_events": self.zero_window_events,
            "window_updates": self.window_updates,
            "segments_above_mss": self.above_mss_segments,
            "keepalives": self.keepalives,
        }


def note(evidence: list[int], frame: int) -> None:
    if len(evidence) < MAX_EVIDENCE:
        evidence.append(frame)
