"""IPv4 / IPv6 / TCP header decoding into the engine's packet tuple.

Payload lengths come from the IP header (what was on the wire), never from the captured length:
a snaplen cut shortens `payload` but not `plen`, and Ethernet padding is not payload.
"""

from __future__ import annotations

import struct

# Results other than a tuple: why the packet was not handed on.
NOT_TCP, FRAGMENT, UNDECODABLE = 1, 2, 3

_TCP = struct.Struct("!HHIIBBH")  # ports, seq, ack, data offset byte, flags, window
_V6_EXT = (0, 43, 60, 51)  # hop-by-hop, routing, destination options, AH (fragment: 44)


def decode(frame: bytes, version: int, off: int, frame_no: int, ts: float
           ) -> tuple | int:  # type: ignore[type-arg]
    n = len(frame)
    if version == 4:
        if n < off + 20:
            return UNDECODABLE
        vihl = frame[off]
        ihl = (vihl & 0x0F) * 4
        if vihl >> 4 != 4 or ihl < 20:
            return UNDECODABLE
        if frame[off + 9] != 6:
            return NOT_TCP
        if (frame[off + 6] & 0x3F) or frame[off + 7]:  # MF set or a fragment offset
            return FRAGMENT
        total = frame[off + 2] << 8 | frame[off + 3]
        if total == 0:  # TSO on the capturing host: the length is not filled in yet
            total = n - off
        src = frame[off + 12:off + 16]
        dst = frame[off + 16:off + 20]
        t = off + ihl
        ip_end = off + total
    elif version == 6:
        if n < off + 40:
            return UNDECODABLE
        if frame[off + 6] != 6:
            return _v6_walk(frame, off, frame_no, ts)
        ip_end = off + 40 + (frame[off + 4] << 8 | frame[off + 5])
        src = frame[off + 8:off + 24]
        dst = frame[off + 24:off + 40]
        t = off + 40
    else:
        return NOT_TCP
    return _tcp(frame, t, ip_end, src, dst, frame_no, ts)


def _tcp(frame: bytes, t: int, ip_end: int, src: bytes, dst: bytes, frame_no: int, ts: float
         ) -> tuple | int:  # type: ignore[type-arg]
    n = len(frame)
    if n < t + 20:
        return UNDECODABLE
    sport, dport, seq, ack, doff, flags, win = _TCP.unpack_from(frame, t)
    thl = (doff >> 4) * 4
    if thl < 20 or n < t + thl:
        return UNDECODABLE
    plen = ip_end - t - thl
    if plen < 0:
        return UNDECODABLE
    p0 = t + thl
    return (frame_no, ts, src, dst, sport, dport, seq, ack, flags, win, plen,
            frame[p0:min(n, p0 + plen)], frame[t + 20:p0] if thl > 20 else b"")


def _v6_walk(frame: bytes, off: int, frame_no: int, ts: float) -> tuple | int:  # type: ignore[type-arg]
    """IPv6 with extension headers before TCP: walk them, then decode TCP."""
    n = len(frame)
    nxt = frame[off + 6]
    ip_end = off + 40 + (frame[off + 4] << 8 | frame[off + 5])
    t = off + 40
    while nxt != 6:
        if nxt == 44:
            return FRAGMENT
        if nxt not in _V6_EXT:
            return NOT_TCP
        if n < t + 2:
            return UNDECODABLE
        hlen = frame[t + 1]
        nxt_hdr = frame[t]
        # AH counts its length in 4-byte units minus 2; the others in 8-byte units minus 1.
        t += (hlen + 2) * 4 if nxt == 51 else (hlen + 1) * 8
        nxt = nxt_hdr
    return _tcp(frame, t, ip_end, frame[off + 8:off + 24], frame[off + 24:off + 40], frame_no, ts)
