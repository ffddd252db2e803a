"""`pktflow flow`: the ladder diagram of a query, a relay or a time span; the selection's
arguments and the drawing `report` and `plot` share (report/commands.py)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # rich loads when a diagram is drawn, not when the parser is built
    from pathlib import Path

    from rich.console import Console

from pktflow import output
from pktflow.errors import UsageError

# The ladder's modules load when a ladder is drawn: every `pktflow analyze` builds this parser.

FORMATS = ("text", "json", "svg", "html", "mermaid", "plantuml")


def path_arg(arg: str) -> Path:
    """argparse type: pathlib loads only when a command takes a path (not for analyze)."""
    from pathlib import Path

    return Path(arg)


def selection_args(p: Any) -> None:
    p.add_argument("capture", metavar="CAPTURE")
    p.add_argument("--query", metavar="CONN#INDEX",
                   help="one query, e.g. c2#0 (as in the analyze report); a relayed query "
                        "brings its other leg")
    p.add_argument("--connection", action="append", metavar="CONN",
                   help="whole connections (repeatable)")
    p.add_argument("--from", dest="t_from", type=float, metavar="S",
                   help="start, seconds from the first packet")
    p.add_argument("--to", dest="t_to", type=float, metavar="S", help="end, seconds")
    p.add_argument("--all", action="store_true", help="every connection, whole capture")


def add_subparser(sub: Any) -> None:
    fl = sub.add_parser(
        "flow", help="ladder (sequence) diagram of a query, a relay's legs or a time span",
        description="Draw packets as arrows between client, pooler and server, labelled with "
                    "bytes, PostgreSQL messages and ACKs; repeated round trips fold into one "
                    "group. Default: the biggest query (through the relay, both legs, if any).")
    selection_args(fl)
    fl.add_argument("--detail", action="store_true",
                    help="fold each block of repeated round trips, not whole bulk transfers")
    fl.add_argument("--expand", action="store_true",
                    help="draw every packet: fold nothing")
    fl.add_argument("--explain", action="store_true",
                    help="teaching mode: one sentence on each message type and ACK pattern shown")
    fl.add_argument("--format", choices=FORMATS, default="text")
    fl.add_argument("-o", "--output", type=path_arg,
                    help="write to this file (default: stdout)")


def select_span(args: argparse.Namespace, analyze: Any) -> tuple[Any, Any, float, float]:
    """The analysis report (`analyze`: a pass that keeps the packets for a diagram), the
    selection the arguments ask for, and its span in capture times."""
    from pktflow.flow.select import select

    report = analyze(args.capture)
    try:
        sel = select(report, query=args.query, connections=args.connection, t_from=args.t_from,
                     t_to=args.t_to, whole=args.all)
        if sel.t1 < sel.t0:
            if args.t_to is None:
                raise UsageError(f"no packets in the selection ({sel.title}): the capture "
                                 f"ends at {sel.t1:.6g} s")
            raise UsageError(f"--from {sel.t0} is after --to {sel.t1}")
    except UsageError as exc:
        exc.file = exc.file or args.capture  # name the file, as every error does
        raise
    start = report["capture"]["first_ts"] or 0.0
    return report, sel, start + sel.t0 - 2e-6, start + sel.t1 + 2e-6


def nothing_drawn(args: argparse.Namespace, title: str) -> UsageError:
    """A diagram of nothing is a selection that missed: say which, as an error."""
    return UsageError(f"no packets in the selection ({title})", file=args.capture)


def prepare(args: argparse.Namespace, analyze: Any, side_lanes: int | None = None,
            plots: bool = False) -> tuple[Any, Any]:
    """The analysis report and the ladder of the selection, with up to `side_lanes` client (or
    server) lanes drawn apart (a drawing's default without); `plots`: what the plots show
    measured too."""
    from pktflow.flow.ladder import MAX_DRAWN_SIDE_LANES, build

    report, sel, t0, t1 = select_span(args, analyze)
    ladder = build(report, sel.conn_ids, t0, t1, sel.title,
                   MAX_DRAWN_SIDE_LANES if side_lanes is None else side_lanes, plots)
    if not ladder.rows:
        raise nothing_drawn(args, sel.title)
    return report, ladder


def _terminal_side_lanes(width: int) -> int:
    """Client (or server) lanes a terminal this wide draws apart: the lanes that fit at
    LANE_MIN columns each, less the pooler's and the server's."""
    from pktflow.flow.ladder import MAX_SIDE_LANES
    from pktflow.flow.text import GUTTER, LANE_MIN

    return max(MAX_SIDE_LANES, (width - GUTTER) // LANE_MIN + 1 - 2)


def run(args: argparse.Namespace, env: Any, analyze: Any) -> int:
    fmt = args.format
    side_lanes = None
    if fmt == "text":
        from rich.console import Console

        width = env.width or 120 if args.output else Console(file=env.stdout,
                                                             width=env.width).width
        side_lanes = _terminal_side_lanes(width)
    report, ladder = prepare(args, analyze, side_lanes)
    # one folding for every format
    ladder.fold = "expand" if args.expand else "detail" if args.detail else "bulk"
    if args.explain:
        from pktflow.flow.explain import teach

        # the conversation step by step, then a sentence on each symbol drawn
        teach(ladder, report)
    if fmt == "text":
        if args.output:
            import io

            text = io.StringIO()
            render_text(ladder, Console(file=text, width=width), args)
            output.write_text(args.output, text.getvalue())
        else:
            render_text(ladder, Console(file=env.stdout, width=width), args)
        return 0
    if fmt == "json":
        from pktflow.flow.ladder import to_json

        out = json.dumps(to_json(ladder), indent=2) + "\n"
    elif fmt in ("svg", "html"):
        from pktflow.report.page import html
        from pktflow.flow.svg import svg

        out = svg(ladder) if fmt == "svg" else html(ladder, report,
                                                                        ladder_open=True)
    else:
        from pktflow.flow.sequence import mermaid, plantuml

        out = mermaid(ladder) if fmt == "mermaid" else plantuml(ladder)
    if args.output:
        output.write_text(args.output, out)
    else:
        env.stdout.write(out)
    return 0


def render_text(ladder: Any, console: Console, args: argparse.Namespace) -> None:
    from pktflow.flow.text import render

    render(ladder, console)
