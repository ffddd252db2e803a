"""The shape of what the capture stage hands to the TCP engine.

A TCP packet is a plain tuple, not an object: the reader makes one per packet and the engine
unpacks it at once, so a class would only cost time. Field order is fixed by `TcpPacket`.
"""

from __future__ import annotations

from typing import Final, NamedTuple

# TCP flag bits as they sit in the header's flags byte.
FIN: Final = 0x01
SYN: Final = 0x02
RST: Final = 0x04
PSH: Final = 0x08
ACK: Final = 0x10
URG: Final = 0x20
ECE: Final = 0x40
CWR: Final = 0x80


# The tuple the reader yields, typed for the compiled engine (mypyc unboxes its ints).
TcpTuple = tuple[int, float, bytes, bytes, int, int, int, int, int, int, int, bytes, bytes]


class TcpPacket(NamedTuple):
    """Documentation of the tuple layout; the reader yields plain tuples in this order."""

    frame: int  # 1-based, as Wireshark numbers frames
    ts: float  # epoch seconds
    src: bytes  # 4 bytes (IPv4) or 16 bytes (IPv6)
    dst: bytes
    sport: int
    dport: int
    seq: int  # raw 32-bit
    ack: int  # raw 32-bit (meaningful only with the ACK flag)
    flags: int  # the TCP flags byte
    win: int  # raw 16-bit window field
    plen: int  # TCP payload length from the IP header: what was on the wire
    payload: bytes  # the captured payload: shorter than plen when snaplen cut it
    options: bytes  # raw TCP options (b"" when none)


class CaptureStats:
    """Counters about the file as a whole, filled in by the reader as it goes. (A plain class:
    dataclasses would import inspect, a sixth of a small run's start-up.)"""

    def __init__(self, file: str = "", format: str = "", packets: int = 0, tcp_packets: int = 0,
                 first_ts: float | None = None, last_ts: float | None = None) -> None:
        self.file = file
        self.format = format  # "pcap" | "pcapng"
        self.compressed = False
        self.nanosecond = False
        self.link_types: list[str] = []
        self.packets = packets  # every record, TCP or not
        self.tcp_packets = tcp_packets
        self.non_tcp_packets = 0
        self.truncated_packets = 0  # captured length < original length
        self.undecodable_packets = 0  # TCP over IP but headers cut by snaplen, or malformed
        self.ip_fragments = 0
        self.first_ts = first_ts
        self.last_ts = last_ts
        # tcpdump's own drop counter, where the format records it (pcapng Interface Statistics)
        self.if_drops: int | None = None
        # set when the file ended early or was corrupt: (frame, offset, reason)
        self.damage: tuple[int, int, str] | None = None

    def __repr__(self) -> str:
        return f"CaptureStats({vars(self)})"
