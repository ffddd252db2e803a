"""Rates: bits per second (as `*_bps` says), one rule for a transfer too small to have a
rate, and one way to write a rate in text.

A rate is bytes over the time from the first byte's segment to the last one's. The first
segment's bytes are in the numerator though they arrived at the start of that time, so with
few segments the number says little: a 3 KB response in two segments 2 us apart came out as
"1.5 GB/s". Fewer than MIN_SEGMENTS segments, or a span under MIN_SPAN_S (where timestamp
granularity and scheduling are the measurement), give no rate at all."""

from __future__ import annotations

MIN_SEGMENTS = 4
MIN_SPAN_S = 100e-6


def bits_per_second(nbytes: int, span_s: float, segments: int) -> int | None:
    """`nbytes` carried in `segments` over `span_s` seconds as bits per second; None when too
    small to measure."""
    if segments < MIN_SEGMENTS or span_s < MIN_SPAN_S:
        return None
    return round(nbytes * 8 / span_s)


def format_rate(bps: float | None) -> str:
    """One unit family in text: "806.6 Mbit/s", "-" for no rate."""
    if bps is None:
        return "-"
    for unit, div in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= div:
            return f"{bps / div:,.1f} {unit}"
    return f"{bps:,.0f} bit/s"
