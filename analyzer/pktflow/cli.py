"""`pktflow` command line. The only place besides the capture reader that does I/O.

`main(argv, env)` runs in-process for tests; `env` carries the output streams.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import IO, Any


from pktflow import __version__, _core, output
from pktflow.errors import ExitCode, PktflowError, UsageError
from pktflow.pipeline import Options, Report, analyze

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
    an.add_argument("--format", choices=("text", "json", "jsonl"), default="text")
    an.add_argument("--strict", action="store_true",
                    help="exit non-zero when a finding of severity error is reported")
    an.add_argument("--no-postgres", action="store_true",
                    help="TCP analysis only: do not decode the PostgreSQL protocol")
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
                    TextColumn("{task.completed:,} packets"), TimeElapsedColumn(),
                    console=Console(file=env.stderr), transient=True)


def _analyze_one(path: str, args: argparse.Namespace, env: Env, record: bool = False) -> Report:
    """`record`: the core keeps every connection's packets, for a diagram."""
    opts = Options(decode_postgres=not getattr(args, "no_postgres", False), lazy=True,
                   record=record)
    bar = _progress_bar(env, path)
    if bar is None:
        return analyze(path, opts)
    with bar:
        task = bar.add_task(path, total=None)
        return analyze(path, opts, progress=lambda n: bar.update(task, completed=n))


def _failure(path: str, exc: BaseException) -> dict[str, Any]:
    """A capture that gave no report: what stderr says, and the same as fields (a jsonl line
    of its own, so that output lines match inputs)."""
    if isinstance(exc, PktflowError):
        exc.file = exc.file or path  # named, when what failed was not the file
        return {"message": exc.one_line(), "reason": exc.reason, "frame": exc.frame,
                "offset": exc.offset, "exit_code": int(exc.exit_code)}
    reason = f"internal error: {type(exc).__name__}: {exc}"
    return {"message": f"{path}: {reason}; rerun with --debug and report it", "reason": reason,
            "frame": None, "offset": None, "exit_code": int(ExitCode.INTERNAL)}


class Outcome:
    """What a capture's report says beyond its text: where it was damaged, whether it has a
    finding of severity error. (A worker process hands back these and the text.)"""

    def __init__(self, report: Report) -> None:
        self.damage: dict[str, Any] | None = report["capture"]["damage"]
        self.errors = any(f["severity"] == "error" for f in report["findings"])


def write_report(report: Report, fmt: str, out: IO[str], width: int | None) -> None:
    """The report in `fmt` to `out`: JSON and jsonl written by the core, text by rich."""
    if fmt == "json":
        report.core.write_json(out, True)
    elif fmt == "jsonl":
        report.core.write_json(out, False)
    else:  # rich only here: JSON runs skip importing it (a tenth of a small run)
        from rich.console import Console

        from pktflow.report.text import render
        render(report, Console(file=out, width=width))


def _worker(job: tuple[str, bool, str, int | None, bool]) -> tuple[str, Any]:
    """One capture in a worker process: its output and Outcome, or its failure's fields (an
    exception object would lose its fields crossing the process boundary)."""
    import io

    path, postgres, fmt, width, debug = job
    try:
        report = analyze(path, Options(decode_postgres=postgres, lazy=True))
        text = io.StringIO()
        write_report(report, fmt, text, width)
        return "ok", (text.getvalue(), Outcome(report))
    except PktflowError as exc:
        return "error", _failure(path, exc)
    except Exception as exc:  # a bug on one input must not lose the others' lines
        if debug:
            raise
        return "error", _failure(path, exc)


def cmd_analyze(args: argparse.Namespace, env: Env) -> int:
    worst = ExitCode.OK
    paths = args.captures
    if args.format == "json" and len(paths) > 1:
        raise UsageError("--format json writes one JSON document, for one capture; for "
                         "several, --format jsonl writes one line each")
    workers = min(len(paths), os.cpu_count() or 1)
    if workers < 2:
        done = (_one(path, args, env) for path in paths)
    else:
        from concurrent.futures import ProcessPoolExecutor

        pool = ProcessPoolExecutor(max_workers=workers)
        jobs = [(p, not args.no_postgres, args.format, env.width, args.debug) for p in paths]
        done = ((path, status, value) for path, (status, value)
                in zip(paths, pool.map(_worker, jobs)))
    for path, status, value in done:
        if status == "error":
            print(f"pktflow: {value['message']}", file=env.stderr)
            worst = max(worst, ExitCode(value["exit_code"]))
            if args.format == "jsonl":  # a line for every input, in input order
                env.stdout.write(json.dumps({"schema": ERROR_SCHEMA, "file": path, **value},
                                            separators=(",", ":")) + "\n")
            continue
        text, outcome = value
        if text is not None:
            env.stdout.write(text)
        if outcome.damage is not None:
            worst = max(worst, _say_damage(path, outcome.damage, env))
        if args.strict and outcome.errors:
            worst = max(worst, ExitCode.FINDINGS)
    if workers >= 2:
        pool.shutdown()
    return int(worst)


def _say_damage(path: str, damage: dict[str, Any], env: Env) -> ExitCode:
    """Where a capture is cut short or corrupt, in the one line every command says."""
    print(f"pktflow: {path} (frame {damage['frame']}, byte offset {damage['offset']}): "
          f"{damage['reason']}; the report covers what precedes it", file=env.stderr)
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


def _one(path: str, args: argparse.Namespace, env: Env) -> tuple[str, str, Any]:
    """One capture in this process, its report written straight to stdout."""
    try:
        report = _analyze_one(path, args, env)
    except PktflowError as exc:
        return path, "error", _failure(path, exc)
    except Exception as exc:
        if args.debug or len(args.captures) == 1:
            raise  # one input: main's own one-line report of a bug
        return path, "error", _failure(path, exc)
    write_report(report, args.format, env.stdout, env.width)
    return path, "ok", (None, Outcome(report))


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
