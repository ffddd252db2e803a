"""Craft capture files for edge cases real runs cannot produce.

Packets are built with scapy; files are written here with struct so every format variant
(nanosecond pcap, big-endian, multi-interface pcapng with different link types) is in reach.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrHopByHop
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether

LINKTYPE_NULL, LINKTYPE_ETHERNET, LINKTYPE_RAW = 0, 1, 101
LINKTYPE_SLL, LINKTYPE_SLL2 = 113, 276


def tcp_segment(payload: bytes = b"", *, src: str = "10.0.0.1", dst: str = "10.0.0.2",
                sport: int = 40000, dport: int = 5432, seq: int = 1000, ack: int = 1,
                flags: str = "PA", v6: bool = False, ext: bool = False, window: int = 512,
                options: list | None = None) -> bytes:  # type: ignore[type-arg]
    """IP + TCP (+ payload) as bytes."""
    tcp = TCP(sport=sport, dport=dport, seq=seq, ack=ack, flags=flags, window=window,
              options=options or [])
    if v6:
        ip = IPv6(src=f"fd00::{src.split('.')[-1]}", dst=f"fd00::{dst.split('.')[-1]}")
        if ext:
            ip = ip / IPv6ExtHdrHopByHop() / IPv6ExtHdrDestOpt()
    else:
        ip = IP(src=src, dst=dst)
    return bytes(ip / tcp / payload)


def frame(ip_packet: bytes, linktype: int, *, vlan: int = 0, pad_to: int = 0) -> bytes:
    """Wrap an IP packet in the given link layer (vlan: 1 = 802.1Q, 2 = QinQ)."""
    v6 = ip_packet[0] >> 4 == 6
    etype = 0x86DD if v6 else 0x0800
    if linktype == LINKTYPE_ETHERNET:
        eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        if vlan == 2:
            eth = eth / Dot1AD(vlan=100) / Dot1Q(vlan=200, type=etype)
        elif vlan == 1:
            eth = eth / Dot1Q(vlan=100, type=etype)
        else:
            eth.type = etype
        out = bytes(eth) + ip_packet
        return out + b"\x00" * max(0, pad_to - len(out))
    if linktype == LINKTYPE_SLL:
        return struct.pack("!HHH8sH", 0, 772, 6, b"\x00" * 8, etype) + ip_packet
    if linktype == LINKTYPE_SLL2:
        return struct.pack("!HHIHBB8s", etype, 0, 1, 772, 0, 6, b"\x00" * 8) + ip_packet
    if linktype == LINKTYPE_NULL:
        return struct.pack("<I", 30 if v6 else 2) + ip_packet
    if linktype == LINKTYPE_RAW:
        return ip_packet
    raise ValueError(linktype)


def write_pcap(path: Path, frames: list[bytes], linktype: int = LINKTYPE_ETHERNET, *,
               nanosecond: bool = False, big_endian: bool = False, snaplen: int = 262144,
               t0: float = 1_700_000_000.0, dt: float = 0.001,
               orig_lens: list[int] | None = None, compress: bool = False) -> Path:
    e = ">" if big_endian else "<"
    magic = 0xA1B23C4D if nanosecond else 0xA1B2C3D4
    out = [struct.pack(e + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)]
    for i, data in enumerate(frames):
        ts = t0 + i * dt
        sec = int(ts)
        frac = round((ts - sec) * (1e9 if nanosecond else 1e6))
        orig = orig_lens[i] if orig_lens else len(data)
        cap = data[:snaplen]
        out.append(struct.pack(e + "IIII", sec, frac, len(cap), orig) + cap)
    blob = b"".join(out)
    path.write_bytes(gzip.compress(blob) if compress else blob)
    return path


def _block(btype: int, body: bytes) -> bytes:
    body += b"\x00" * (-len(body) % 4)
    n = len(body) + 12
    return struct.pack("<II", btype, n) + body + struct.pack("<I", n)


def write_pcapng(path: Path, packets: list[tuple[int, bytes]], linktypes: list[int], *,
                 t0: float = 1_700_000_000.0, dt: float = 0.001,
                 drops: int | None = None, tsresol: int | None = None) -> Path:
    """packets: (interface index, frame bytes). One IDB per entry of linktypes."""
    out = [_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))]
    for lt in linktypes:
        opts = b""
        if tsresol is not None:
            opts = struct.pack("<HHB3x", 9, 1, tsresol) + b"\x00\x00\x00\x00"
        out.append(_block(1, struct.pack("<HHI", lt, 0, 262144) + opts))
    units = 10 ** (tsresol if tsresol is not None else 6)
    for i, (iface, data) in enumerate(packets):
        ts = round((t0 + i * dt) * units)
        out.append(_block(6, struct.pack("<IIIII", iface, ts >> 32, ts & 0xFFFFFFFF,
                                         len(data), len(data)) + data))
    if drops is not None:
        ts = round(t0 * units)
        opts = struct.pack("<HHQ", 5, 8, drops) + b"\x00\x00\x00\x00"
        out.append(_block(5, struct.pack("<III", 0, ts >> 32, ts & 0xFFFFFFFF) + opts))
    path.write_bytes(b"".join(out))
    return path
