"""Build TCP packets of two endpoints exchanging segments, and write them as a capture.

A packet is a tuple (frame, ts, src, dst, sport, dport, seq, ack, flags, win, wire payload
length, captured payload, options), the fields the core's engine reads; `write_capture` turns a
list of them into a raw-IP pcap (nanosecond timestamps, so times survive exactly enough), and a
payload shorter than its wire length into a record cut by the snapshot length."""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field
from pathlib import Path

from pktflow._core import ACK, FIN, PSH, RST, SYN

LINKTYPE_RAW = 101


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    return ~(s + (s >> 16)) & 0xFFFF


def tcp_header(sport: int, dport: int, seq: int, ack: int, flags: int, win: int,
               options: bytes = b"") -> bytes:
    """A TCP header (checksum left zero: pktflow does not check it), options padded."""
    options = options + b"\0" * (-len(options) % 4)
    return struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF,
                       (5 + len(options) // 4) << 4, flags, win, 0, 0) + options


def ip_header(src: bytes, dst: bytes, wire: int, ident: int = 0) -> bytes:
    """An IPv4 (4-byte addresses, identification `ident`) or IPv6 header for `wire` bytes of
    TCP."""
    if len(src) == 4:
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + wire, ident & 0xFFFF, 0x4000, 64, 6, 0,
                         src, dst)
        return ip[:10] + struct.pack("!H", _checksum(ip)) + ip[12:]
    return struct.pack("!IHBB16s16s", 6 << 28, wire, 6, 64, src, dst)


def ip_packet(pkt: tuple, ident: int = 0) -> tuple[bytes, int]:  # type: ignore[type-arg]
    """The packet's IP datagram as captured, and its length on the wire."""
    _, _, src, dst, sport, dport, seq, ack, flags, win, plen, payload, options = pkt
    tcp = tcp_header(sport, dport, seq, ack, flags, win, options)
    wire = len(tcp) + plen
    ip = ip_header(src, dst, wire, ident)
    return ip + tcp + payload, len(ip) + wire


def write_capture(path: Path, packets: list[tuple]) -> Path:  # type: ignore[type-arg]
    """The packets as a raw-IP, nanosecond pcap, each record at its packet's time. Each
    sender numbers its IPv4 packets one by one, as Linux does a connected socket's: a packet
    sent again (a duplicate ACK, a SYN retransmitted) is not a copy the capture saw twice."""
    out = [struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, LINKTYPE_RAW)]
    sent: dict[bytes, int] = {}
    for pkt in packets:
        ident = sent[pkt[2]] = sent.get(pkt[2], 0) + 1
        data, wire = ip_packet(pkt, ident)
        ns = round(pkt[1] * 1e9)
        out.append(struct.pack("<IIII", ns // 10**9, ns % 10**9, len(data), wire) + data)
    path.write_bytes(b"".join(out))
    return path

CLIENT = (socket.inet_aton("10.0.0.1"), 40000)
SERVER = (socket.inet_aton("10.0.0.2"), 5432)


def syn_options(mss: int | None = 1460, wscale: int | None = 7, sack: bool = True,
                ts: bool = True) -> bytes:
    out = b""
    if mss is not None:
        out += struct.pack("!BBH", 2, 4, mss)
    if sack:
        out += b"\x04\x02"
    if ts:
        out += struct.pack("!BBII", 8, 10, 1, 0)
    if wscale is not None:
        out += b"\x01" + struct.pack("!BBB", 3, 3, wscale)
    return out


@dataclass
class Flow:
    """A client and a server with their own sequence counters; methods append packets."""

    isn_c: int = 1000
    isn_s: int = 5000
    t: float = 1_700_000_000.0
    packets: list[tuple] = field(default_factory=list)  # type: ignore[type-arg]

    def __post_init__(self) -> None:
        self.seq = [self.isn_c, self.isn_s]  # next raw sequence number per side (0 client)

    def _emit(self, side: int, flags: int, payload: bytes = b"", *, seq: int | None = None,
              ack: int | None = None, win: int = 512, dt: float = 0.0001,
              options: bytes = b"", plen: int | None = None) -> tuple:  # type: ignore[type-arg]
        self.t += dt
        src, dst = (CLIENT, SERVER) if side == 0 else (SERVER, CLIENT)
        s = self.seq[side] if seq is None else seq
        a = self.seq[1 - side] if ack is None else ack
        wire = len(payload) if plen is None else plen
        pkt = (len(self.packets) + 1, self.t, src[0], dst[0], src[1], dst[1], s & 0xFFFFFFFF,
               a & 0xFFFFFFFF, flags, win, wire, payload, options)
        self.packets.append(pkt)
        return pkt

    def handshake(self, *, wscale_c: int | None = 7, wscale_s: int | None = 7) -> None:
        self._emit(0, SYN, options=syn_options(wscale=wscale_c), ack=0, win=64240)
        self.seq[0] += 1
        self._emit(1, SYN | ACK, options=syn_options(wscale=wscale_s), win=65160)
        self.seq[1] += 1
        self._emit(0, ACK)

    def send(self, side: int, payload: bytes, *, advance: bool = True, **kw: object) -> tuple:  # type: ignore[type-arg]
        pkt = self._emit(side, ACK | PSH, payload, **kw)  # type: ignore[arg-type]
        if advance:
            self.seq[side] = (pkt[6] + pkt[10]) & 0xFFFFFFFF
        return pkt

    def ack(self, side: int, **kw: object) -> tuple:  # type: ignore[type-arg]
        return self._emit(side, ACK, **kw)  # type: ignore[arg-type]

    def fin(self, side: int) -> None:
        self._emit(side, FIN | ACK)
        self.seq[side] += 1

    def rst(self, side: int) -> None:
        self._emit(side, RST | ACK)


class RecordingSink:
    """Stream consumer that checks contiguity and keeps what it was given."""

    def __init__(self) -> None:
        self.data = [bytearray(), bytearray()]
        self.gaps: list[tuple[int, int, int]] = []
        self.finished = False

    def feed(self, d: int, data: bytes, offset: int, frame: int, ts: float) -> None:
        assert offset == len(self.data[d]), (d, offset, len(self.data[d]))
        self.data[d] += data

    def gap(self, d: int, offset: int, length: int, frame: int, ts: float) -> None:
        assert offset == len(self.data[d])
        self.gaps.append((d, offset, length))
        self.data[d] += b"\x00" * length  # placeholder only to keep offsets in step here

    def finish(self) -> None:
        self.finished = True
