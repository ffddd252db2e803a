"""What the TCP engine tells per-connection analyses, packet by packet.

The engine owns sequence arithmetic (wraparound, relative offsets, window scaling); observers
get plain ints and never see raw 32-bit sequence numbers. Calls are positional and flat because
they happen once per packet.
"""

from __future__ import annotations

from typing import Final, NamedTuple, Protocol

# Classification of a packet's payload in its own direction's stream (bits of `kind`).
NEW: Final = 0x01  # carries bytes beyond the highest byte seen so far
RETRANS: Final = 0x02  # carries only bytes already seen (a retransmission, or a duplicate on the capture)
PARTIAL_RETRANS: Final = 0x04  # overlaps seen bytes and also carries new ones
OUT_OF_ORDER: Final = 0x08  # starts beyond the next expected byte: a hole precedes it
FILLS_HOLE: Final = 0x10  # carries bytes below the highest seen that the capture had not seen
KEEPALIVE: Final = 0x20  # one byte (or none) just below the next expected byte, on an idle stream


class DirectionInfo(NamedTuple):
    """Facts about one direction known at the end, for an observer's `finish`."""

    mss: int | None  # from this side's SYN
    window_scale: int | None  # shift this side applies to its advertised windows; None unknown
    window_scale_known: bool
    window_scale_lower_bound: int | None


class PacketObserver(Protocol):
    """Receives every TCP packet of one connection, in capture order."""

    def on_packet(self, d: int, frame: int, ts: float, seq: int, end: int, ack: int,
                  win: int, flags: int, kind: int) -> None:
        """One packet.

        d: 0 for the client->server direction, 1 for server->client (the engine's view;
           see `Connection.swapped` for a later correction by the application protocol).
        seq, end: the payload's place in direction d's stream, relative to its first byte
           (SYN excluded); end - seq is the payload length on the wire. seq == end: no payload.
        ack: next byte expected of direction 1-d's stream, same relative numbering;
           -1 when the packet has no ACK flag or the peer's stream base is not known yet.
        win: advertised receive window in bytes, scaled by the sender's window scale when known,
           otherwise the raw 16-bit field.
        flags: the TCP flags byte (see pktflow.capture.packet).
        kind: bits above, 0 for a packet without payload.
        """

    def finish(self, info: tuple[DirectionInfo, DirectionInfo]) -> None:
        """The capture ended; info[d] describes direction d."""


class CompiledObserver:
    """Base of pktflow's own observers (the transfer analysis). When the per-packet modules are
    compiled, the engine calls these directly, its ints unboxed, where a PacketObserver costs a
    Python-level call per packet; without compilation it is an ordinary base class. Only
    compiled-together classes may derive from it (tests and plugins implement PacketObserver)."""

    def on_packet(self, d: int, frame: int, ts: float, seq: int, end: int, ack: int,
                  win: int, flags: int, kind: int) -> None:
        raise NotImplementedError

    def finish(self, info: tuple[DirectionInfo, DirectionInfo]) -> None:
        raise NotImplementedError
