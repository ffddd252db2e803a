"""The plots: time panels on one axis spanning the data drawn (not the teardown after it),
throughput and round-trip time over time, and a figure title clear of the first panel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pktflow.cli import build_parser
from pktflow.flow.cli import prepare
from pktflow.pipeline import Options, analyze

pytest.importorskip("matplotlib", reason="plots need matplotlib")

ROOT = Path(__file__).resolve().parent.parent
DIRECT = ROOT / "captures" / "seqscan-10k-direct-loopback.pcap"
POOLED = ROOT / "captures" / "seqscan-10k-pgbouncer-loopback.pcap"


def figure(path: Path) -> tuple[Any, dict[str, Any]]:
    from pktflow.report.plots import figure as make

    report, ladder = prepare(build_parser().parse_args(["plot", str(path), "-o", "x.png"]),
                             lambda p: analyze(p, Options(record=True)), plots=True)
    return make(report, ladder.drawing.plot(), ladder.title), report


def test_time_axis_spans_the_query_not_the_teardown() -> None:
    """The direct query's data ends about 6.7 ms after it was sent; the selection goes on to
    the client's Terminate and FIN 65 ms later, which the axis leaves out."""
    fig, report = figure(DIRECT)
    (q,) = [q for q in report["connections"][0]["queries"] if q["rows"] == 10_000]
    lo, hi = fig.axes[0].get_xlim()
    sent, last = q["sent_s"] * 1000, q["last_response_s"] * 1000
    assert lo <= sent and sent - lo < 1.0
    assert last < hi < last + 1.0
    time_axes = [ax for ax in fig.axes if ax.get_shared_x_axes().joined(ax, fig.axes[0])]
    assert len(time_axes) == len(fig.axes) - 1  # all but the bar chart of ACK sizes


def test_throughput_and_rtt_over_time() -> None:
    fig, _ = figure(POOLED)
    titles = [ax.get_title(loc="left") for ax in fig.axes]
    (tput,) = [ax for ax, t in zip(fig.axes, titles) if t.startswith("throughput over time")]
    (rtt,) = [ax for ax, t in zip(fig.axes, titles) if t.startswith("round-trip time")]
    assert len(tput.lines) == 2 and len(rtt.lines) == 2  # both legs of the relay
    rates = sorted(y for line in tput.lines for y in line.get_ydata())
    assert 100 < rates[len(rates) // 2] < 100_000  # Mbit/s on loopback
    samples = [y for line in rtt.lines for y in line.get_ydata()]
    assert samples and min(samples) >= 0 and max(samples) < 50  # ms
    assert any(t.startswith("relay view") for t in titles)


def test_title_clear_of_the_first_panel() -> None:
    fig, _ = figure(POOLED)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    head = fig._suptitle.get_window_extent(renderer)
    first = fig.axes[0].title.get_window_extent(renderer)
    assert head.y0 >= first.y1  # display coordinates: y grows upward
