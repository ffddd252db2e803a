"""`pktflow` command line. The only place besides the capture reader that does I/O.

`main(argv, env)` runs in-process for tests; `env` carries the output streams.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import IO, Any


from pktflow import __version__, _core, output
from pktflow.errors import ExitCode, PktflowError, UsageError
from pktflow.pipeline import STDIN, Options, Report, Stream, analyze

ERROR_SCHEMA = "pktflow.error/1"  # a jsonl line for an input that gave no report


class Env:
    """Where a run writes: the process's streams, or a test's."""

    def __init__(self, stdout: IO[str] | None = None, stderr: IO[str] | None = None,
                 width: int | None = None) -> None:
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr
        self.width = width  # terminal width override (tests)

    @property
    def stderr_isatty(self) -> bool:
        return bool(getattr(self.stderr, "isatty", lambda: False)())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pktflow",
        description="Rebuild PostgreSQL conversations and TCP transfer dynamics from captures.")
    parser.add_argument("--version", action="version", version=f"pktflow {__version__} (core {_core.__version__})")
    parser.add_argument("--debug", action="store_true",
                        help="show a traceback for internal errors")
    sub = parser.add_subparsers(dest="command", required=True)
    an = sub.add_parser("analyze", help="analyse capture files (pcap, pcapng, .gz)")
    an.add_argument("captures", nargs="+", metavar="CAPTURE")
    an.add_argument("--format", choices=("text", "json", "jsonl", "parquet"), default="text",
                    help="parquet: a dataset, a folder per table, in -o DIR")
    an.add_argument("-o", "--output", metavar="DIR",
                    help="--format parquet: the dataset's folder (created; a capture's files "
                    "are replaced when it is analysed again)")
    an.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                    help="analyse the captures on this Dask cluster, a task per capture or "
                    "per few small ones (workers read them by path: a filesystem they share)")
    an.add_argument("--strict", action="store_true",
                    help="exit non-zero when a finding of severity error is reported")
    an.add_argument("--no-postgres", action="store_true",
                    help="TCP analysis only: do not decode the PostgreSQL protocol")
    an.add_argument("--follow", action="store_true",
                    help="with CAPTURE '-' (a pipe): write each query once it is final and each "
                    "connection once it closes, as they come (text, or --format jsonl)")
    cmp_ = sub.add_parser("compare", help="the same queries in two captures side by side "
                          "(e.g. direct vs through PgBouncer)")
    cmp_.add_argument("a", metavar="A")
    cmp_.add_argument("b", metavar="B")
    cmp_.add_argument("--format", choices=("text", "json"), default="text")
    from pktflow.flow.cli import add_subparser as add_flow
    from pktflow.report.commands import add_subparser as add_report

    add_report(sub)
    add_flow(sub)
    _add_lab(sub)
    return parser


def _add_lab(sub: Any) -> None:
    try:
        from pktflow.lab.cli import add_subparser
    except ImportError:  # the lab is optional at import time: analysis never needs it
        return
    add_subparser(sub)


def _progress_bar(env: Env, label: str) -> Any:
    """A rich progress bar on stderr, only when stderr is a terminal."""
    if not env.stderr_isatty:
        return None
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    return Progress(SpinnerColumn(), TextColumn("{task.description}"),
                    TextColumn("{task.completed:,} packets"), TextColumn("{task.fields[rate]}"),
                    TimeElapsedColumn(), console=Console(file=env.stderr), transient=True)


def _analyze_one(path: str, args: argparse.Namespace, env: Env, own_bar: bool = True,
                 record: bool = False) -> Report:
    """`record`: the core keeps every connection's packets, for a diagram."""
    opts = Options(decode_postgres=not getattr(args, "no_postgres", False), lazy=True,
                   record=record)
    if path == STDIN:
        return _analyze_stdin(opts, args, env)
    bar = _progress_bar(env, path) if own_bar else None
    if bar is None:
        return analyze(path, opts)
    import time

    started = time.monotonic()
    with bar:
        task = bar.add_task(path, total=None, rate="")
        return analyze(path, opts, progress=lambda n: bar.update(
            task, completed=n,
            rate=f"{n / max(time.monotonic() - started, 1e-6):,.0f} packets/s"))


def _analyze_stdin(opts: Options, args: argparse.Namespace, env: Env) -> Report:
    """Standard input: SIGINT ends the stream where it stands (the report covers what came);
    with --follow each query and connection is written as it is said."""
    from pktflow.follow import Printer, stop_on_sigint, stopper

    stop = stopper()
    printer = Printer(env.stdout, getattr(args, "format", "text") == "jsonl") \
        if getattr(args, "follow", False) else None
    stream = Stream(stop=stop, live=printer is not None,
                    follow=printer.follow if printer is not None else None, said=printer)
    with stop_on_sigint(stop):
        return analyze(STDIN, opts, stream=stream)


def _fleet_progress(env: Env, total: int) -> Any:
    """A rich progress bar on stderr while captures are analysed: captures done of total and
    packets per second; None when stderr is not a terminal."""
    if not env.stderr_isatty:
        return None
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn)

    bar = Progress(TextColumn("captures"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[rate]}"), TimeElapsedColumn(),
                   console=Console(file=env.stderr), transient=True)
    bar.add_task("captures", total=total, rate="")
    return bar


def cmd_analyze(args: argparse.Namespace, env: Env) -> int:
    import time

    from pktflow.fleet import Job, run_dask, run_local

    worst = ExitCode.OK
    paths = args.captures
    if args.format == "json" and len(paths) > 1:
        raise UsageError("--format json writes one JSON document, for one capture; for "
                         "several, --format jsonl writes one line each")
    if STDIN in paths and len(paths) > 1:
        raise UsageError("'-' (standard input) is read alone, not among other captures")
    if args.follow and paths != [STDIN]:
        raise UsageError("--follow reads a pipe: give '-' as the capture")
    if args.follow and args.format not in ("text", "jsonl"):
        raise UsageError("--follow writes a line at a time: --format text or jsonl")
    parquet = args.format == "parquet"
    if parquet != (args.output is not None):
        raise UsageError("--format parquet writes a dataset to the folder -o DIR names (and "
                         "-o is for --format parquet only)")
    if args.scheduler is not None and STDIN in paths:
        raise UsageError("--scheduler sends captures by path: a pipe cannot be sent")
    if parquet:
        from pktflow.tables import pyarrow_modules

        pyarrow_modules()  # a missing extra is one usage line, before any work
        output.check_dir(Path(args.output))  # before the analysis, not after a long run
    summary = args.format == "text" and len(paths) > 1
    cluster = args.scheduler is not None
    jobs = [Job(p if p == STDIN else os.path.abspath(p), p, not args.no_postgres, args.format,
                env.width, args.debug, args.output, summary) for p in paths]
    # the cores this run may use (taskset pins it to fewer than the machine has)
    workers = min(len(paths), os.cpu_count() or 1, len(os.sched_getaffinity(0)))
    bar = _fleet_progress(env, len(paths)) if len(paths) > 1 else None
    started, packets = time.monotonic(), 0

    def done(_: int, result: tuple[str, Any]) -> None:
        nonlocal packets
        if bar is None:
            return
        if result[0] == "ok":
            packets += result[1][1].packets
        rate = packets / max(time.monotonic() - started, 1e-6)
        bar.update(bar.task_ids[0], advance=1, rate=f"{rate:,.0f} packets/s")

    if cluster:
        results = run_dask(jobs, args.scheduler, done)
    elif workers < 2:
        def one_by_one() -> Any:
            for i, job in enumerate(jobs):
                result = _one(job, args, env, bar is None)
                done(i, result)
                yield result

        results = one_by_one()
    else:
        results = run_local(jobs, workers, done)
    fleet = None
    if summary:  # rich comes with it: a run that writes JSON needs none
        from pktflow.report.fleet import Fleet

        fleet = Fleet()
    if bar is not None:
        bar.start()
    try:
        for path, (status, value) in zip(paths, results):
            if status == "error":
                _say(env, bar, f"pktflow: {value['message']}")
                worst = max(worst, ExitCode(value["exit_code"]))
                if args.format == "jsonl":  # a line for every input, in input order
                    env.stdout.write(json.dumps({"schema": ERROR_SCHEMA, "file": path, **value},
                                                separators=(",", ":")) + "\n")
                continue
            text, outcome, digest = value
            if text is not None:
                env.stdout.write(text)
            if digest is not None and fleet is not None:
                fleet.add(digest)
            if outcome.damage is not None:
                worst = max(worst, _say_damage(path, outcome.damage, env, bar))
            if args.strict and outcome.errors:
                worst = max(worst, ExitCode.FINDINGS)
    finally:
        if bar is not None:
            bar.stop()
    if parquet:
        from pktflow.tables import sweep

        sweep(Path(args.output))
    if fleet is not None and fleet.captures:
        from rich.console import Console

        from pktflow.report.fleet import render_fleet

        Console(file=env.stdout, width=env.width).print(render_fleet(fleet))
    return int(worst)


def _say(env: Env, bar: Any, line: str) -> None:
    """A line on stderr, above the progress bar when one is drawn."""
    if bar is not None:
        bar.console.print(line, markup=False, highlight=False)
    else:
        print(line, file=env.stderr)


def _say_damage(path: str, damage: dict[str, Any], env: Env, bar: Any = None) -> ExitCode:
    """Where a capture is cut short or corrupt, in the one line every command says."""
    _say(env, bar, f"pktflow: {path} (frame {damage['frame']}, byte offset "
         f"{damage['offset']}): {damage['reason']}; the report covers what precedes it")
    return ExitCode.DAMAGED


class Damages:
    """Analyses for a command that reads whole reports (flow, plot, report, compare), noting
    each damaged capture so that the command says so once it has written what it could."""

    def __init__(self, args: argparse.Namespace, env: Env, record: bool = False) -> None:
        """`record`: the core keeps every connection's packets, for a diagram."""
        self.args, self.env, self.record = args, env, record
        self.damaged: list[tuple[str, dict[str, Any]]] = []

    def analyze(self, path: str) -> Report:
        report = _analyze_one(path, self.args, self.env, record=self.record)
        damage = report["capture"]["damage"]
        if damage is not None:
            self.damaged.append((path, damage))
        return report

    def exit_code(self, code: int) -> int:
        for path, damage in self.damaged:
            code = max(code, _say_damage(path, damage, self.env))
        return code


def _one(job: Any, args: argparse.Namespace, env: Env, own_bar: bool = True) -> tuple[str, Any]:
    """One capture in this process (text and JSON written straight to stdout, with a packet
    progress bar on a terminal unless the fleet's is drawn)."""
    from pktflow.fleet import Outcome, failure, run_job, write_report

    if job.fmt == "parquet" or job.digest:
        return run_job(job)
    try:
        report = _analyze_one(job.name, args, env, own_bar)
    except PktflowError as exc:
        return "error", failure(job.name, exc)
    except Exception as exc:
        if args.debug or len(args.captures) == 1:
            raise  # one input: main's own one-line report of a bug
        return "error", failure(job.name, exc)
    write_report(report, args.format, env.stdout, env.width)
    return "ok", (None, Outcome(report), None)


def cmd_compare(args: argparse.Namespace, env: Env) -> int:
    from rich.console import Console

    from pktflow.report.compare import compare, render as render_compare, side

    # each report read once, then dropped: what compare reads of it stays
    reports = Damages(args, env)
    a = side(reports.analyze(args.a))
    doc = compare(a, side(reports.analyze(args.b)))
    if args.format == "json":
        json.dump(doc, env.stdout, indent=2)
        env.stdout.write("\n")
    else:
        render_compare(doc, Console(file=env.stdout, width=env.width))
    return reports.exit_code(0)


def main(argv: list[str] | None = None, env: Env | None = None) -> int:
    env = env or Env()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "analyze":
            return cmd_analyze(args, env)
        if args.command == "compare":
            return cmd_compare(args, env)
        if args.command in ("flow", "report", "plot"):
            from pktflow.flow import cli as flow_cli
            from pktflow.report import commands

            if args.output is not None:  # before the analysis, not after a long run
                output.check(args.output)
            cmd = {"flow": flow_cli.run, "report": commands.run_report,
                   "plot": commands.run_plot}[args.command]
            # one pass: the report, and the packets a diagram draws
            reports = Damages(args, env, record=True)
            return reports.exit_code(cmd(args, env, reports.analyze))
        from pktflow.lab.cli import run as run_lab

        return int(run_lab(args))
    except PktflowError as exc:
        print(f"pktflow: {exc.one_line()}", file=env.stderr)
        return int(exc.exit_code)
    except BrokenPipeError:  # `pktflow ... | head`: the reader left, nothing is wrong
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return int(ExitCode.OK)
    except KeyboardInterrupt:
        print("pktflow: interrupted", file=env.stderr)
        return 130
    except Exception as exc:  # a bug: one line, not a traceback, unless asked
        if args.debug:
            raise
        print(f"pktflow: internal error: {type(exc).__name__}: {exc}; rerun with --debug and "
              f"report it", file=env.stderr)
        return int(ExitCode.INTERNAL)


if __name__ == "__main__":
    sys.exit(main())
