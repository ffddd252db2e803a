"""Sizes in words: one convention for text, HTML and plots.

A size is bytes. Exact where the number is the fact (8,192 B, with thousands separators);
rounded, in binary units with their IEC names, KiB, MiB and GiB (1,024-based), because the
sizes pktflow talks about are powers of two (PostgreSQL's 8 KiB send buffer, PgBouncer's
4 KiB pkt_buf, a 64 KiB loopback segment) and "KB" was read both ways. Rates stay bits per
second in decimal units (rates.py), as networks state them."""

from __future__ import annotations

_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def size(nbytes: int) -> str:
    """'2.7 MiB' for 2,840,387 bytes; under a KiB, the bytes: '512 B'."""
    for unit, div in _UNITS:
        if nbytes >= div:
            return f"{nbytes / div:,.1f} {unit}"
    return f"{nbytes:,} B"
