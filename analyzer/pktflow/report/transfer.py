"""Transfer dynamics of one direction in the terminal: the verdict first, then the numbers
behind it. Renders from the direction's JSON (pktflow.report/1) only."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from pktflow.rates import format_rate

_LIMIT_STYLE = {"receiver_window": "yellow", "sender": "cyan", "loss": "red",
                "latency": "yellow", "network": "magenta", "none": "dim"}


def _ms(v: float | None) -> str:
    """Milliseconds; under one, in microseconds (loopback round trips are tens of them)."""
    if v is None:
        return "-"
    return f"{v * 1000:,.0f} µs" if v < 1 else f"{v:,.1f} ms"


def _n(v: float | int | None, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and not v.is_integer():
        return f"{v:,.1f}{unit}"
    return f"{int(v):,}{unit}"


def direction_view(name: str, d: dict[str, Any]) -> RenderableType | None:
    """None when the direction carried too little to say anything about."""
    verdict = d.get("verdict")
    if verdict is None or verdict["limit"] == "none":
        return None  # too little data: the TCP table above says all there is
    head = Text(f"{name}: ", "bold")
    head.append(f"{verdict['limit']}", _LIMIT_STYLE.get(verdict["limit"], ""))
    head.append(f"  {verdict['summary']}")
    if verdict.get("evidence_frames"):
        head.append(f"  (frames {', '.join(map(str, verdict['evidence_frames'][:6]))})", "dim")
    acks, win = d.get("acks") or {}, d.get("window") or {}
    flight, rtt = d.get("flights") or {}, d.get("rtt_ms")
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="dim")
    table.add_column()
    shares, lim = verdict.get("shares") or {}, d.get("limits") or {}
    if shares:
        table.add_row("time", f"{lim.get('transfer_s', 0) * 1e3:,.1f} ms: " + ", ".join(
            f"{k.replace('_', ' ')} {v:.0%}" for k, v in shares.items() if v >= 0.01))
    writes = d.get("writes") or {}
    if writes.get("count"):
        table.add_row("writes", f"{writes['count']:,}; by bytes: median "
                                f"{_n(writes.get('size_median_by_bytes'))} B (10%-90%: "
                                f"{_n(writes.get('size_p10_by_bytes'))}-"
                                f"{_n(writes.get('size_p90_by_bytes'))} B)")
    # the pattern names the commonest ACK only when it is most of them (then it is the
    # median too), else the median: either way the median is said once
    table.add_row("ACK cadence", f"{d.get('pattern') or ''}; {_n(acks.get('count'))} ACKs")
    causes = acks.get("causes") or {}
    if causes:
        table.add_row("ACK causes", ", ".join(f"{k.replace('_', ' ')} {v:,}"
                                              for k, v in causes.items() if v) or "-")
    scaled = "" if win.get("scaled", True) else " (raw: window scale unknown)"
    zw = win.get("zero_window_periods") or 0
    table.add_row("receive window", f"{_n(win.get('min'))} - {_n(win.get('max'))} B{scaled}"
                  + (f", zero {zw} time(s) for {win['zero_window_total_s'] * 1e3:,.2f} ms"
                     if zw else ""))
    inf = d.get("in_flight") or {}
    table.add_row("in flight", f"max {_n(inf.get('max'))} B, median {_n(inf.get('median'))} B")
    if flight:
        ends = ", ".join(f"{k.replace('_', ' ')} {v:,}"
                         for k, v in (flight.get("end_reasons") or {}).items() if v)
        table.add_row("flights", f"{_n(flight.get('count'))}: median "
                                 f"{_n(flight.get('bytes_median'))} B in "
                                 f"{_n(flight.get('segments_median'))} segments; ended: {ends}")
    if rtt:
        table.add_row("RTT", f"min {_ms(rtt.get('min'))}, median {_ms(rtt.get('median'))}, "
                             f"p95 {_ms(rtt.get('p95'))} ({rtt.get('samples', 0):,} samples)")
    # not a query's rate: that is one response's bytes over its own time
    rate = d.get("goodput_bps")
    table.add_row("goodput", format_rate(rate) + (
        " over the whole connection: its first data segment to its last, the waits between "
        "queries included (a query's rate counts its own response alone)" if rate else ""))
    return Group(head, table)


def transfer_views(conn: dict[str, Any]) -> list[RenderableType]:
    out = []
    for key, name in (("server_to_client", "server -> client"),
                      ("client_to_server", "client -> server")):
        view = direction_view(name, conn["directions"][key])
        if view is not None:
            out.append(view)
    return out
