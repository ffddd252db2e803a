"""Plots of the drawn span (matplotlib): the time-sequence graph (Stevens/tcptrace style) per
direction of data, bytes in flight against the advertised window, throughput and round-trip
time over time (tcptrace's tput and rtt graphs), a relay's legs on one time axis, and bytes per
ACK. The time panels share one axis, spanning the data drawn (from the selection's first packet
to the ACK of its last data byte), not the teardown that may follow.

Works from the same selective pass as the ladder (flow.events), so a plot and a diagram of the
same selection show the same packets.
"""

from __future__ import annotations

import io
from typing import Any

from pktflow._core import ACK, PARTIAL_RETRANS, RETRANS
from pktflow.flow.events import Collected
from pktflow.report.connections import by_id


def _series(report: dict[str, Any], got: Collected) -> list[dict[str, Any]]:
    """Per (connection, data direction) with payload: segment, ACK and window series."""
    start = report["capture"]["first_ts"] or 0.0
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for ev in got.events:
        t = (ev.ts - start) * 1000
        if ev.end > ev.seq:
            s = out.setdefault((ev.conn, ev.d), {"seg": [], "retr": [], "ack": [], "win": [],
                                                  "zero": []})
            (s["retr"] if ev.kind & (RETRANS | PARTIAL_RETRANS) else s["seg"]).append(
                (t, ev.seq, ev.end))
        if ev.flags & ACK and ev.ack >= 0:
            acked = out.get((ev.conn, 1 - ev.d))
            if acked is not None:
                acked["ack"].append((t, ev.ack))
                acked["win"].append((t, ev.ack + ev.win))
                if ev.win == 0:
                    acked["zero"].append((t, ev.ack))
    # of each connection its endpoints and whether each direction's window scale is known
    # (a stored report's decoded one at a time, not all kept: a storm's are 600 MB as dicts)
    names = {c["id"]: (c["client"], c["server"],
                       {k: bool(v.get("window_scale_known")) for k, v in c["directions"].items()})
             for c in by_id(report["connections"], {cid for cid, _ in out})}
    series = []
    for (cid, d), s in out.items():
        if not s["seg"] and not s["retr"]:
            continue
        c = names.get(cid)
        from_client = (d == 0) != got.swapped.get(cid, False)
        raw = True
        if c is not None:
            client, server, known = c
            a, b = (client, server) if from_client else (server, client)
            title = f"{cid} {a['ip']}:{a['port']} → {b['ip']}:{b['port']}"
            # the window limiting this data is advertised by the receiver
            raw = not known["server_to_client" if from_client else "client_to_server"]
        else:
            title = cid
        base = min(x[1] for x in s["seg"] + s["retr"])
        series.append({"title": title, "base": base, "raw_window": raw, **s})
    series.sort(key=lambda s: -sum(e - q for _, q, e in s["seg"]))
    return series


# Throughput is averaged over this many segments (tcptrace's tput graph averages too): one
# segment's bytes over the gap to the next is a burst's rate, not the transfer's.
TPUT_SEGMENTS = 10


def data_span(got: Collected, series: list[dict[str, Any]], start: float
              ) -> tuple[float, float] | None:
    """ms from the capture's first packet: the selection's first packet to the ACK of the
    last data byte of the plotted directions (their last segment if never acknowledged)."""
    if not series or not got.events:
        return None
    lo = (got.events[0].ts - start) * 1000
    hi = lo
    for s in series:
        segs = s["seg"] + s["retr"]
        top = max(e for _, _, e in segs)
        last = max(t for t, _, _ in segs)
        acked = next((t for t, a in s["ack"] if a >= top), None)
        hi = max(hi, last if acked is None else acked)
    return lo, hi


def figure(report: dict[str, Any], got: Collected, title: str) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    every = _series(report, got)
    series = [s for s in every if len(s["seg"]) + len(s["retr"]) >= 4][:3] or every[:1]
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
    span = data_span(got, series, report["capture"]["first_ts"] or 0.0)
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
    for s, color in zip(series, ("#1f6fb2", "#c07000", "#2e8b57")):
        segs = sorted(s["seg"])
        xs, ys = [], []
        for i in range(TPUT_SEGMENTS, len(segs)):
            t0, t1 = segs[i - TPUT_SEGMENTS][0], segs[i][0]
            if t1 > t0:
                nbytes = sum(e - q for _, q, e in segs[i - TPUT_SEGMENTS + 1:i + 1])
                xs.append(t1)
                ys.append(nbytes * 8 / ((t1 - t0) / 1000) / 1e6)
        if xs:
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
    for s, color in zip(series, ("#1f6fb2", "#c07000", "#2e8b57")):
        resent = {e for _, _, e in s["retr"]}
        acks = s["ack"]
        xs, ys, j = [], [], 0
        for t, _, e in sorted(s["seg"], key=lambda x: x[2]):
            while j < len(acks) and (acks[j][1] < e or acks[j][0] < t):
                j += 1
            if j == len(acks):
                break
            if e not in resent:
                xs.append(acks[j][0])
                ys.append(acks[j][0] - t)
        if xs:
            ax.plot(xs, ys, ".", color=color, markersize=3, label=s["title"])
    ax.set_title("round-trip time over time, as seen at the capture point (segment -> its "
                 "ACK)", fontsize=9, loc="left")
    ax.set_ylabel("ms")
    if ax.lines:
        ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)


def _time_sequence(ax: Any, s: dict[str, Any]) -> None:
    base = s["base"]
    for key, color, lw in (("seg", "#1f6fb2", 1.2), ("retr", "#c0392b", 2.0)):
        if s[key]:
            ax.vlines([t for t, _, _ in s[key]], [(q - base) / 1024 for _, q, _ in s[key]],
                      [(e - base) / 1024 for _, _, e in s[key]], colors=color,
                      linewidth=lw, zorder=3)
            # a marker at each segment's end: at full zoom a segment is under a pixel tall
            ax.plot([t for t, _, _ in s[key]], [(e - base) / 1024 for _, _, e in s[key]],
                    ".", color=color, markersize=2.5, zorder=3,
                    label="data segment" if key == "seg" else "retransmission")
    if s["ack"]:
        ax.step([t for t, _ in s["ack"]], [(a - base) / 1024 for _, a in s["ack"]],
                where="post", color="#2e8b57", linewidth=1, label="ACK")
        if not s["raw_window"]:  # an unscaled raw window would draw a false limit
            ax.step([t for t, _ in s["win"]], [(w - base) / 1024 for _, w in s["win"]],
                    where="post", color="#c07000", linewidth=0.8, alpha=0.7,
                    label="ACK + window")
    if s["zero"]:
        ax.plot([t for t, _ in s["zero"]], [(a - base) / 1024 for _, a in s["zero"]], "x",
                color="#c0392b", label="zero window")
    note = " (window scale unknown: window line omitted)" if s["raw_window"] else ""
    ax.set_title(f"time-sequence: {s['title']}{note}", fontsize=9, loc="left")
    ax.set_ylabel("KiB in stream")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)


def _in_flight(ax: Any, s: dict[str, Any]) -> None:
    """Bytes in flight against the advertised window, over time (the biggest direction)."""
    events = sorted([(t, 0, e) for t, _, e in s["seg"]] + [(t, 1, a) for t, a in s["ack"]])
    hi = ack = s["base"]
    xs, ys = [], []
    for t, k, v in events:
        if k == 0:
            hi = max(hi, v)
        else:
            ack = max(ack, v)
        xs.append(t)
        ys.append(max(0, hi - ack) / 1024)
    ax.step(xs, ys, where="post", color="#1f6fb2", label="bytes in flight")
    if s["win"] and not s["raw_window"]:
        ax.step([t for t, _ in s["win"]],
                [(w - a) / 1024 for (t, w), (_, a) in zip(s["win"], s["ack"])],
                where="post", color="#c07000", linewidth=0.8, label="advertised window")
    ax.set_title(f"in flight and window: {s['title']}", fontsize=9, loc="left")
    ax.set_ylabel("KiB")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)


def _acks(ax: Any, s: dict[str, Any]) -> None:
    """How many bytes each advancing ACK acknowledged: 16,384 on loopback, 2 x MSS on a NIC."""
    sizes: dict[int, int] = {}
    last = s["base"]
    for _, a in s["ack"]:
        if a > last:
            sizes[a - last] = sizes.get(a - last, 0) + 1
            last = a
    top = sorted(sorted(sizes.items(), key=lambda kv: -kv[1])[:15])
    ax.bar([f"{k:,}" for k, _ in top], [v for _, v in top], color="#2e8b57")
    ax.set_title(f"bytes acknowledged per ACK (commonest 15): {s['title']}", fontsize=9,
                 loc="left")
    ax.set_ylabel("ACKs")
    ax.tick_params(axis="x", labelsize=7, rotation=30)


def _relay(ax: Any, series: list[dict[str, Any]]) -> None:
    """Both legs of a relay on one time axis: the server's data arriving at the pooler and the
    pooler's data leaving for the client, as bytes delivered so far."""
    for s, color in zip(series, ("#1f6fb2", "#c07000", "#2e8b57")):
        segs = sorted(s["seg"] + s["retr"])
        hi, xs, ys = s["base"], [], []
        for t, _, e in segs:
            hi = max(hi, e)
            xs.append(t)
            ys.append((hi - s["base"]) / 1024)
        ax.step(xs, ys, where="post", color=color, label=s["title"])
    ax.set_title("relay view: each leg's progress on one time axis", fontsize=9, loc="left")
    ax.set_ylabel("KiB sent")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)


def render(report: dict[str, Any], got: Collected, title: str, fmt: str) -> bytes:
    import matplotlib.pyplot as plt

    fig = figure(report, got, title)
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=110)
    plt.close(fig)
    return buf.getvalue()
