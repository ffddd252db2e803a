"""A capture's frames put inside a tunnel, as a tunnel endpoint or a traffic mirror would
send them: VXLAN, Geneve, GRE (IP or Ethernet inside, with or without a key), ERSPAN types I,
II and III, IP in IP and IPv6 in IPv4. The frames inside are a real capture's; the outer
headers are written here, each as its RFC lays it out (tshark reads them back in the tests).
Used where this machine's kernel has no such tunnel device (only VXLAN is built in here)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

OUTER_SRC = bytes([192, 0, 2, 1])
OUTER_DST = bytes([192, 0, 2, 2])
OUTER_MACS = bytes.fromhex("020000000002020000000001")


def records(path: Path) -> Iterator[tuple[bytes, bytes]]:
    """(record header's timestamp bytes, frame) of a little-endian microsecond pcap of
    Ethernet frames (the lab's captures)."""
    data = path.read_bytes()
    magic, _, _, _, _, _, link = struct.unpack("<IHHiIII", data[:24])
    assert magic == 0xA1B2C3D4 and link == 1, path
    pos = 24
    while pos + 16 <= len(data):
        incl = struct.unpack("<I", data[pos + 8:pos + 12])[0]
        yield data[pos:pos + 8], data[pos + 16:pos + 16 + incl]
        pos += 16 + incl


def _checksum(header: bytes) -> int:
    total = sum(struct.unpack(f">{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def ipv4(proto: int, payload: bytes, ident: int) -> bytes:
    head = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), ident & 0xFFFF, 0x4000, 64,
                       proto, 0, OUTER_SRC, OUTER_DST)
    head = head[:10] + struct.pack(">H", _checksum(head)) + head[12:]
    return head + payload


def udp(dport: int, payload: bytes, sport: int) -> bytes:
    return struct.pack(">HHHH", sport, dport, 8 + len(payload), 0) + payload


def as_ipv6(ip4: bytes) -> bytes:
    """An IPv4 packet's payload re-addressed as IPv6 (fd00::<last byte>): the same TCP
    segment in the other IP version, for 6in4 (the lab's captures are IPv4)."""
    ihl = (ip4[0] & 0x0F) * 4
    total = struct.unpack(">H", ip4[2:4])[0]
    payload = ip4[ihl:total]
    src = b"\xfd" + bytes(14) + ip4[15:16]
    dst = b"\xfd" + bytes(14) + ip4[19:20]
    return struct.pack(">IHBB", 6 << 28, len(payload), ip4[9], 64) + src + dst + payload


def tunnelled(frame: bytes, kind: str, ident: int, n: int) -> bytes:
    """One Ethernet frame inside a tunnel of `kind` identified by `ident`, as the outer
    Ethernet frame a capture on the underlay would hold (`n`: the packet's number, for the
    outer IP ID, GRE sequence numbers and UDP source ports)."""
    ip = frame[14:]
    if kind == "vxlan":
        outer = ipv4(17, udp(4789, struct.pack(">BxxxI", 0x08, ident << 8) + frame,
                             49152 + n % 16000), n)
    elif kind == "geneve":  # protocol type 0x6558: an Ethernet frame
        outer = ipv4(17, udp(6081, struct.pack(">BBHI", 0, 0, 0x6558, ident << 8) + frame,
                             49152 + n % 16000), n)
    elif kind == "gre":  # key present, IPv4 inside
        outer = ipv4(47, struct.pack(">HHI", 0x2000, 0x0800, ident) + ip, n)
    elif kind == "gretap":  # Ethernet inside, key present
        outer = ipv4(47, struct.pack(">HHI", 0x2000, 0x6558, ident) + frame, n)
    elif kind == "erspan1":  # GRE without sequence number, the frame right after
        outer = ipv4(47, struct.pack(">HH", 0, 0x88BE) + frame, n)
    elif kind == "erspan2":  # sequenced GRE, 8-byte header: version 1, session
        head = struct.pack(">HHI", 0x1000, 0x88BE, n) + struct.pack(">HHI", 1 << 12, ident, 0)
        outer = ipv4(47, head + frame, n)
    elif kind == "erspan3":  # 12-byte header: version 2, session, timestamp, no subheader
        head = struct.pack(">HHI", 0x1000, 0x22EB, n) + struct.pack(">HHIHH", 2 << 12, ident,
                                                                    n * 100, 0, 0)
        outer = ipv4(47, head + frame, n)
    elif kind == "ipip":
        outer = ipv4(4, ip, n)
    elif kind == "sit":
        outer = ipv4(41, as_ipv6(ip), n)
    else:
        raise ValueError(kind)
    return OUTER_MACS + b"\x08\x00" + outer


def encapsulate(src: Path, dst: Path, kind: str, ident: int = 0,
                also: tuple[str, int] | None = None) -> Path:
    """`src`'s frames inside a tunnel; with `also`, each frame a second time right after,
    inside another tunnel (two networks reusing the same inner addresses)."""
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1)]
    for n, (ts, frame) in enumerate(records(src)):
        for k, i in [(kind, ident)] + ([also] if also else []):
            wrapped = tunnelled(frame, k, i, n)
            out.append(ts + struct.pack("<II", len(wrapped), len(wrapped)) + wrapped)
    dst.write_bytes(b"".join(out))
    return dst
