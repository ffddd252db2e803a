"""The shape of what the capture stage hands to the TCP engine.

A TCP packet is a plain tuple, not an object: the reader makes one per packet and the engine
unpacks it at once, so a class would only cost time. Field order is fixed by `TcpPacket`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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


@dataclass
class CaptureStats:
    """Counters about the file as a whole, filled in by the reader as it goes."""

    file: str = ""
    format: str = ""  # "pcap" | "pcapng"
    compressed: bool = False
    nanosecond: bool = False
    link_types: list[str] = field(default_factory=list)
    packets: int = 0  # every record, TCP or not
    tcp_packets: int = 0
    non_tcp_packets: int = 0
    truncated_packets: int = 0  # captured length < original length
    undecodable_packets: int = 0  # TCP over IP but headers cut by snaplen, or malformed
    ip_fragments: int = 0
    first_ts: float | None = None
    last_ts: float | None = None
    # tcpdump's own drop counter, where the format records it (pcapng Interface Statistics)
    if_drops: int | None = None
    # set when the file ended early or was corrupt: (frame, offset, reason)
    damage: tuple[int, int, str] | None = None
