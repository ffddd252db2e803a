"""TCP options as negotiated in SYN and SYN-ACK (RFC 9293, RFC 7323, RFC 2018)."""

from __future__ import annotations

from typing import NamedTuple

_EOL, _NOP, _MSS, _WSCALE, _SACK_OK, _TIMESTAMP = 0, 1, 2, 3, 4, 8

# RFC 7323: a shift above 14 is treated as 14.
MAX_WINDOW_SCALE = 14


class SynOptions(NamedTuple):
    mss: int | None = None
    window_scale: int | None = None
    sack_permitted: bool = False
    timestamps: bool = False


def parse_syn_options(raw: bytes) -> SynOptions:
    """Read the options a SYN or SYN-ACK offers; malformed tails are ignored, not fatal."""
    mss = wscale = None
    sack = ts = False
    i, n = 0, len(raw)
    while i < n:
        kind = raw[i]
        if kind == _EOL:
            break
        if kind == _NOP:
            i += 1
            continue
        if i + 1 >= n:
            break
        length = raw[i + 1]
        if length < 2 or i + length > n:
            break
        if kind == _MSS and length == 4:
            mss = int.from_bytes(raw[i + 2:i + 4], "big")
        elif kind == _WSCALE and length == 3:
            wscale = min(raw[i + 2], MAX_WINDOW_SCALE)
        elif kind == _SACK_OK and length == 2:
            sack = True
        elif kind == _TIMESTAMP and length == 10:
            ts = True
        i += length
    return SynOptions(mss, wscale, sack, ts)
