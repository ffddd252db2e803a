"""The round trip of each TCP handshake in a lab capture, read straight from the pcap.

The lab checks the delay it set against the capture it made, without the analyzer: for each
connection, SYN -> SYN-ACK -> the client's first ACK. Their span is one round trip wherever the
capture point sits (beside the server, SYN to SYN-ACK is ~0 and SYN-ACK to ACK the whole round
trip; beside the client, the other way round). Classic pcap (what tcpdump writes), Ethernet or
Linux cooked (SLL) framing, IPv4; anything else is skipped.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path
from typing import Any

_LINK_OFFSETS = {1: 14, 113: 16}  # DLT_EN10MB, DLT_LINUX_SLL: bytes before the IPv4 header
SYN, ACK = 0x02, 0x10


def _packets(path: Path) -> tuple[int, list[tuple[float, bytes]]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        endian, nano = "<", magic == b"\x4d\x3c\xb2\xa1"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        endian, nano = ">", magic == b"\xa1\xb2\x3c\x4d"
    else:
        raise ValueError(f"{path}: not a classic pcap file")
    link = struct.unpack(endian + "I", data[20:24])[0]
    out, pos, scale = [], 24, 1e-9 if nano else 1e-6
    rec = struct.Struct(endian + "IIII")
    while pos + 16 <= len(data):
        sec, frac, caplen, _ = rec.unpack_from(data, pos)
        pos += 16
        out.append((sec + frac * scale, data[pos:pos + caplen]))
        pos += caplen
    return link, out


def handshakes(path: Path) -> list[dict[str, Any]]:
    """Each handshake seen in full: client, server, and its times in milliseconds."""
    link, packets = _packets(path)
    off = _LINK_OFFSETS.get(link)
    if off is None:
        return []
    syn: dict[tuple[str, str], float] = {}
    synack: dict[tuple[str, str], tuple[float, int]] = {}
    done: list[dict[str, Any]] = []
    for t, frame in packets:
        ip = frame[off:]
        if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:
            continue
        tcp = ip[(ip[0] & 0x0F) * 4:]
        if len(tcp) < 14:
            continue
        src = f"{'.'.join(map(str, ip[12:16]))}:{struct.unpack('!H', tcp[0:2])[0]}"
        dst = f"{'.'.join(map(str, ip[16:20]))}:{struct.unpack('!H', tcp[2:4])[0]}"
        seq, ack = struct.unpack("!II", tcp[4:12])
        flags = tcp[13]
        if flags & SYN and not flags & ACK:
            syn.setdefault((src, dst), t)
        elif flags & SYN and flags & ACK and (dst, src) in syn:
            synack.setdefault((dst, src), (t, seq))
        elif flags & ACK and (src, dst) in synack and not flags & SYN:
            t_synack, server_isn = synack.pop((src, dst))
            if ack != (server_isn + 1) & 0xFFFFFFFF:
                continue
            t_syn = syn.pop((src, dst))
            done.append({"client": src, "server": dst,
                         "rtt_ms": round((t - t_syn) * 1e3, 3),
                         "syn_to_synack_ms": round((t_synack - t_syn) * 1e3, 3),
                         "synack_to_ack_ms": round((t - t_synack) * 1e3, 3)})
    return done
