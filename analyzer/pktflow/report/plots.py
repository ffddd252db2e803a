"""Plots of the drawn span (matplotlib): the time-sequence graph (Stevens/tcptrace style) per
direction of data, bytes in flight against the advertised window, throughput and round-trip
time over time (tcptrace's tput and rtt graphs), a relay's legs on one time axis, and bytes per
ACK. The time panels share one axis, spanning the data drawn (from the selection's first packet
to the ACK of its last data byte), not the teardown that may follow.

The core measures the series from the packets the ladder draws (drawing/plot.rs), each cut to
what a pixel column shows: a plot and a diagram of the same selection show the same packets.
"""

from __future__ import annotations

import io
from typing import Any

from pktflow import _core
from pktflow.report.connections import by_id

TPUT_SEGMENTS = 10  # the core's (drawing/plot.rs): throughput over this many segments
COLORS = ("#1f6fb2", "#c07000", "#2e8b57")


def _series(report: dict[str, Any], plot: _core.Plot) -> list[dict[str, Any]]:
    """The directions plotted, each titled by its connection's endpoints."""
    series: list[dict[str, Any]] = [dict(s) for s in plot["series"]]
    names = {c["id"]: (c["client"], c["server"])
             for c in by_id(report["connections"], {f"c{s['conn']}" for s in series})}
    for s in series:
        cid = f"c{s['conn']}"
        ends = names.get(cid)
        if ends is None:
            s["title"] = cid
            continue
        a, b = ends if s["from_client"] else ends[::-1]
        s["title"] = f"{cid} {a['ip']}:{a['port']} → {b['ip']}:{b['port']}"
    return series


def figure(report: dict[str, Any], plot: _core.Plot, title: str) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series, span = _series(report, plot), plot["span"]
    relay_view = len({s["title"].split()[0] for s in series}) > 1
    n = max(1, len(series))
    timed = n + 3 + (1 if relay_view else 0)  # panels on the shared time axis
    rows = timed + 1
    # constrained layout keeps the figure's title above the first panel's
    fig, axes = plt.subplots(rows, 1, figsize=(11, 2.8 * rows), squeeze=False,
                             layout="constrained")
    time_axes = [axes[i, 0] for i in range(timed)]
    for ax in time_axes[1:]:
        ax.sharex(time_axes[0])
    for ax, s in zip(time_axes, series):
        _time_sequence(ax, s)
    if series:
        _in_flight(time_axes[n], series[0])
        _throughput(time_axes[n + 1], series)
        _rtt(time_axes[n + 2], series)
        _acks(axes[timed, 0], series[0])
    if relay_view:
        _relay(time_axes[n + 3], series)
    if span is not None:
        lo, hi = span
        pad = max((hi - lo) * 0.02, 0.005)
        time_axes[0].set_xlim(lo - pad, hi + pad)
    time_axes[-1].set_xlabel("ms from the first packet of the capture")
    fig.suptitle(title, fontsize=10)
    return fig


def _throughput(ax: Any, series: list[dict[str, Any]]) -> None:
    """Each direction's rate over time in Mbit/s: new bytes over the last TPUT_SEGMENTS
    segments, as tcptrace's throughput graph averages them."""
    for s, color in zip(series, COLORS):
        if s["throughput"]:
            xs, ys = zip(*s["throughput"])
            ax.plot(xs, ys, ".-", color=color, markersize=2, linewidth=0.8, label=s["title"])
    ax.set_title(f"throughput over time (Mbit/s, each point over the last {TPUT_SEGMENTS} "
                 f"segments)", fontsize=9, loc="left")
    ax.set_ylabel("Mbit/s")
    if ax.lines:
        ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)


def _rtt(ax: Any, series: list[dict[str, Any]]) -> None:
    """Round-trip time over time, as seen at the capture point: from a segment to the first
    ACK covering its end; retransmitted bytes give no sample (Karn)."""
    for s, color in zip(series, COLORS):
        if s["rtt"]:
            xs, ys = zip(*s["rtt"])
            ax.plot(xs, ys, ".", color=color, markersize=3, label=s["title"])
    ax.set_title("round-trip time over time, as seen at the capture point (segment -> its "
                 "ACK)", fontsize=9, loc="left")
    ax.set_ylabel("ms")
    if ax.lines:
        ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)


def _time_sequence(ax: Any, s: dict[str, Any]) -> None:
    base = s["base"]
    for lines, ends, color, lw, name in (
            (s["segments"], s["seg_ends"], COLORS[0], 1.2, "data segment"),
            (s["retransmissions"], s["retrans_ends"], "#c0392b", 2.0, "retransmission")):
        if lines:
            ax.vlines([t for t, _, _ in lines], [(q - base) / 1024 for _, q, _ in lines],
                      [(e - base) / 1024 for _, _, e in lines], colors=color, linewidth=lw,
                      zorder=3)
            # a marker at each segment's end: at full zoom a segment is under a pixel tall
            ax.plot([t for t, _ in ends], [(e - base) / 1024 for _, e in ends], ".",
                    color=color, markersize=2.5, zorder=3, label=name)
    if s["acks"]:
        ax.step([t for t, _ in s["acks"]], [(a - base) / 1024 for _, a in s["acks"]],
                where="post", color=COLORS[2], linewidth=1, label="ACK")
        if not s["raw_window"]:  # an unscaled raw window would draw a false limit
            ax.step([t for t, _ in s["windows"]], [(w - base) / 1024 for _, w in s["windows"]],
                    where="post", color=COLORS[1], linewidth=0.8, alpha=0.7,
                    label="ACK + window")
    if s["zero_windows"]:
        ax.plot([t for t, _ in s["zero_windows"]],
                [(a - base) / 1024 for _, a in s["zero_windows"]], "x", color="#c0392b",
                label="zero window")
    note = " (window scale unknown: window line omitted)" if s["raw_window"] else ""
    ax.set_title(f"time-sequence: {s['title']}{note}", fontsize=9, loc="left")
    ax.set_ylabel("KiB in stream")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)


def _in_flight(ax: Any, s: dict[str, Any]) -> None:
    """Bytes in flight against the advertised window, over time (the biggest direction)."""
    if s["in_flight"]:
        ax.step([t for t, _ in s["in_flight"]], [v / 1024 for _, v in s["in_flight"]],
                where="post", color=COLORS[0], label="bytes in flight")
    if s["advertised"] and not s["raw_window"]:
        ax.step([t for t, _ in s["advertised"]], [w / 1024 for _, w in s["advertised"]],
                where="post", color=COLORS[1], linewidth=0.8, label="advertised window")
    ax.set_title(f"in flight and window: {s['title']}", fontsize=9, loc="left")
    ax.set_ylabel("KiB")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)


def _acks(ax: Any, s: dict[str, Any]) -> None:
    """How many bytes each advancing ACK acknowledged: 16,384 on loopback, 2 x MSS on a NIC."""
    top = s["ack_sizes"]
    ax.bar([f"{k:,}" for k, _ in top], [v for _, v in top], color=COLORS[2])
    ax.set_title(f"bytes acknowledged per ACK (commonest 15): {s['title']}", fontsize=9,
                 loc="left")
    ax.set_ylabel("ACKs")
    ax.tick_params(axis="x", labelsize=7, rotation=30)


def _relay(ax: Any, series: list[dict[str, Any]]) -> None:
    """Both legs of a relay on one time axis: the server's data arriving at the pooler and the
    pooler's data leaving for the client, as bytes delivered so far."""
    for s, color in zip(series, COLORS):
        ax.step([t for t, _ in s["progress"]], [v / 1024 for _, v in s["progress"]],
                where="post", color=color, label=s["title"])
    ax.set_title("relay view: each leg's progress on one time axis", fontsize=9, loc="left")
    ax.set_ylabel("KiB sent")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)


def render(report: dict[str, Any], plot: _core.Plot, title: str, fmt: str) -> bytes:
    import matplotlib.pyplot as plt

    fig = figure(report, plot, title)
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=110)
    plt.close(fig)
    return buf.getvalue()
