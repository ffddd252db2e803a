"""`pktflow report` (one self-contained HTML page) and `pktflow plot` (PNG or SVG): the
renderers of a selection drawn as `pktflow flow` selects it (flow/cli.py)."""

from __future__ import annotations

import argparse
from typing import Any

from pktflow import output
from pktflow.errors import UsageError
from pktflow.flow.cli import nothing_drawn, path_arg, prepare, select_span, selection_args


def add_subparser(sub: Any) -> None:
    rep = sub.add_parser("report", help="one self-contained HTML report: summary, findings, "
                         "queries, verdicts, the ladder and plots")
    selection_args(rep)
    rep.add_argument("-o", "--output", type=path_arg, required=True,
                     help="the .html file to write")
    pl = sub.add_parser("plot", help="time-sequence and in-flight plots (PNG or SVG)")
    selection_args(pl)
    pl.add_argument("-o", "--output", type=path_arg, required=True,
                    help="file to write; its suffix (.png or .svg) picks the format")


def _plots_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def run_report(args: argparse.Namespace, env: Any, analyze: Any) -> int:
    from pktflow.report.page import page

    plots = _plots_available()
    report, ladder = prepare(args, analyze, plots=plots)
    plot, title = ladder.drawing.plot(), ladder.title
    if not plots:
        ladder.notes.append("plots need matplotlib (pip install matplotlib)")
    made = page(ladder, report)
    del ladder  # its rows are read: the plots are drawn without them in memory
    figures = []
    if plot is not None:
        import base64

        from pktflow.report.plots import render

        # a picture, not SVG: an SVG's size grows with what is drawn, a PNG's with the
        # figure's size only
        png = base64.b64encode(render(report, plot, title, "png")).decode()
        alt = ("time-sequence graphs, bytes in flight, throughput and round-trip time over "
               "time of the drawn span")
        figures.append((alt, f"<img src='data:image/png;base64,{png}' alt='{alt}'>"))
    output.write_text(args.output, made(figures))
    print(f"wrote {args.output}", file=env.stderr)
    return 0


def run_plot(args: argparse.Namespace, env: Any, analyze: Any) -> int:
    fmt = args.output.suffix.lstrip(".").lower()
    if fmt not in ("png", "svg"):
        raise UsageError(f"{args.output}: the plot's file name must end in .png or .svg")
    if not _plots_available():
        raise UsageError("plots need matplotlib", hint="pip install matplotlib")
    from pktflow.flow.ladder import MAX_ROWS, lanes_of, numbers
    from pktflow.report.plots import render

    # the plots only: the packets' series, not the ladder's rows
    report, sel, t0, t1 = select_span(args, analyze)
    _, drawn_as, _ = lanes_of(report, sel.conn_ids)
    plot = report.core.plot(numbers(sel.conn_ids), t0, t1, MAX_ROWS, drawn_as)
    if not plot["packets"]:
        raise nothing_drawn(args, sel.title)
    output.write_bytes(args.output, render(report, plot, sel.title, fmt))
    print(f"wrote {args.output}", file=env.stderr)
    return 0
