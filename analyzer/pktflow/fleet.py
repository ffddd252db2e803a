"""Many captures at once: analysed locally (a process per core, each kept on its core) or on a
Dask distributed cluster (`--scheduler tcp://HOST:PORT`), small captures a few to a task and a
big one alone (`batches`).

A task (`run_job`) opens its capture by path, analyses it and hands back only what the
command line prints: its text or JSON line (or, for `--format parquet`, nothing: the task
writes the capture's files itself, each replaced whole, so a task retried after its worker
died writes the same files again rather than second ones), what its report says beyond
that (`Outcome`: damage, findings of severity error, packets), the fleet summary's digest, or
for a capture that gave no report the "pktflow.error/1" fields. Results come back in any
order; the command line writes them in the order given.

Dask (`dask[distributed]`, the `fleet` extra) is imported only with `--scheduler`. Its workers
read the captures by path from a filesystem they share with the client (local disk, NFS), and
write the dataset to the output folder the same way: the client sends absolute paths.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from pktflow.errors import ExitCode, PktflowError, UsageError
from pktflow.pipeline import Options, Report, analyze

FLEET_HINT = "install the fleet extra: pip install 'pktflow[fleet]'"


class Outcome:
    """What a capture's report says beyond its text: where it was damaged, whether it has a
    finding of severity error, how many packets it read."""

    def __init__(self, report: Report) -> None:
        self.damage: dict[str, Any] | None = report["capture"]["damage"]
        self.errors = any(f["severity"] == "error" for f in report["findings"])
        self.packets: int = report["capture"]["packets"]


class Job(NamedTuple):
    path: str  # what the task opens: absolute, as the command's directory resolved it
    name: str  # the capture as the user named it: the report's `file`
    postgres: bool
    fmt: str
    width: int | None
    debug: bool
    out: str | None = None  # the dataset's folder (--format parquet)
    digest: bool = False  # hand back the fleet summary's digest


def failure(path: str, exc: BaseException) -> dict[str, Any]:
    """A capture that gave no report: what stderr says, and the same as fields (a jsonl line,
    or a row of `errors`)."""
    if isinstance(exc, PktflowError):
        exc.file = exc.file or path  # named, when what failed was not the file
        return {"message": exc.one_line(), "reason": exc.reason, "frame": exc.frame,
                "offset": exc.offset, "exit_code": int(exc.exit_code)}
    reason = f"internal error: {type(exc).__name__}: {exc}"
    return {"message": f"{path}: {reason}; rerun with --debug and report it", "reason": reason,
            "frame": None, "offset": None, "exit_code": int(ExitCode.INTERNAL)}


def write_report(report: Report, fmt: str, out: Any, width: int | None) -> None:
    """The report in `fmt` to `out`: JSON and jsonl written by the core, text by rich."""
    if fmt == "json":
        report.core.write_json(out, True)
    elif fmt == "jsonl":
        report.core.write_json(out, False)
    else:  # rich only here: JSON runs skip importing it (a tenth of a small run)
        from rich.console import Console

        from pktflow.report.text import render
        render(report, Console(file=out, width=width))


def run_job(job: Job) -> tuple[str, Any]:
    """One capture, in whichever process runs it: ("ok", (text, Outcome, digest)) or
    ("error", failure fields). An exception object would lose its fields crossing a process
    boundary, so none leaves."""
    import io

    try:
        report = analyze(job.path, Options(decode_postgres=job.postgres, lazy=True),
                         name=job.name)
        text = None
        if job.fmt == "parquet":
            from pktflow.tables import write_report as write_tables

            write_tables(Path(job.out or "."), report, job.path)
        else:
            buf = io.StringIO()
            write_report(report, job.fmt, buf, job.width)
            text = buf.getvalue()
        digest = None
        if job.digest:
            from pktflow.report.fleet import digest as digest_of

            digest = digest_of(report)
        return "ok", (text, Outcome(report), digest)
    except Exception as exc:  # a bug on one input must not lose the others' results
        if job.debug and not isinstance(exc, PktflowError):
            raise
        fields = failure(job.name, exc)
        if job.fmt == "parquet":
            from pktflow.tables import write_error

            write_error(Path(job.out or "."), job.path, job.name, fields)
        return "error", fields


Done = Callable[[int, tuple[str, Any]], None]


def in_order(results: Iterator[tuple[int, tuple[str, Any]]], n: int,
             done: Done | None) -> Iterator[tuple[str, Any]]:
    """Results as they complete (index, result), handed on in index order; `done` sees each
    as it completes (a progress bar)."""
    waiting: dict[int, tuple[str, Any]] = {}
    nxt = 0
    for i, result in results:
        if done is not None:
            done(i, result)
        waiting[i] = result
        while nxt in waiting:
            yield waiting.pop(nxt)
            nxt += 1
    while nxt < n:  # unreachable unless a backend lost a result: say so as a failure
        yield waiting.pop(nxt, ("error", {"message": "no result", "reason": "no result",
                                          "frame": None, "offset": None,
                                          "exit_code": int(ExitCode.INTERNAL)}))
        nxt += 1


# A local task runs captures one after the other until it has read about this many bytes of
# them (at least one): each task costs a round trip between processes and a wake-up of the
# parent, which shares the cores with its workers; a fleet of small captures spent a tenth of
# its time on them. Big captures still go one per task, and a pool keeps TASKS_PER_WORKER
# tasks or more per worker, so none waits long on another's last task.
TASK_BYTES = 4 << 20
TASKS_PER_WORKER = 8


def batches(jobs: list[Job], workers: int) -> list[list[int]]:
    """The jobs' indices in order, cut into tasks of about TASK_BYTES of capture each, and
    at most len(jobs) / (workers * TASKS_PER_WORKER) captures each."""
    most = max(1, len(jobs) // (workers * TASKS_PER_WORKER))
    out: list[list[int]] = []
    size = 0
    for i, job in enumerate(jobs):
        try:
            n = os.path.getsize(job.path)
        except OSError:
            n = 0  # its task says why it cannot be read
        if not out or len(out[-1]) >= most or size + n > TASK_BYTES:
            out.append([])
            size = 0
        out[-1].append(i)
        size += n
    return out


def run_jobs(jobs: list[Job]) -> list[tuple[str, Any]]:
    """Several jobs in one task, one after the other."""
    return [run_job(job) for job in jobs]


def _pin(counter: Any, cpus: list[int]) -> None:
    """A pool worker kept on a core of its own, the next of `cpus` (counted by `counter`). A
    pass runs on two threads, the core's and Python's, handing batches to each other; with
    two workers' threads free to move over two cores, each handoff crossed cores and the
    workers' captures took a third longer than one process's (200 small captures to Parquet:
    1.42 s, 1.24 s pinned)."""
    with counter.get_lock():
        i = counter.value
        counter.value += 1
    os.sched_setaffinity(0, {cpus[i % len(cpus)]})


def run_local(jobs: list[Job], workers: int, done: Done | None) -> Iterator[tuple[str, Any]]:
    """The jobs in tasks of a local pool (`workers` processes), a few small captures each."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    counter = multiprocessing.Value("i", 0)
    cpus = sorted(os.sched_getaffinity(0))
    with ProcessPoolExecutor(max_workers=workers, initializer=_pin,
                             initargs=(counter, cpus)) as pool:
        futures = {pool.submit(run_jobs, [jobs[i] for i in batch]): batch
                   for batch in batches(jobs, workers)}

        def results() -> Iterator[tuple[int, tuple[str, Any]]]:
            for f in as_completed(futures):
                yield from zip(futures[f], f.result())

        yield from in_order(results(), len(jobs), done)


def run_dask(jobs: list[Job], scheduler: str, done: Done | None) -> Iterator[tuple[str, Any]]:
    """The jobs as tasks on the Dask cluster at `scheduler`, cut as the local pool cuts them
    (`batches`: a few small captures to a task, a big one alone, at least TASKS_PER_WORKER
    tasks a worker thread): each task is a round trip through the scheduler, which a fleet
    of small captures paid per capture (200 on two pinned workers: 1.42x the local pool's
    time, 1.30x so). A task whose worker dies is run again on another (the scheduler's own
    rule); its files are replaced, not added."""
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise UsageError("--scheduler needs Dask's distributed scheduler",
                         hint=FLEET_HINT) from None
    try:
        client = Client(scheduler, timeout="30s")
    except OSError as exc:
        raise UsageError(f"no Dask scheduler at {scheduler}: {exc}") from None
    with client:
        # the tasks the cluster runs at once: its workers' threads
        slots = max(1, sum(client.nthreads().values()))
        tasks = batches(jobs, slots)
        # named for this run: pure=False so that two runs of the same captures in one
        # session are two sets of tasks
        futures = client.map(run_jobs, [[jobs[i] for i in task] for task in tasks],
                             pure=False,
                             key=[f"pktflow-{n}-{os.getpid()}" for n in range(len(tasks))])
        task_of = {f.key: task for f, task in zip(futures, tasks)}

        def results() -> Iterator[tuple[int, tuple[str, Any]]]:
            for f in as_completed(futures):
                yield from zip(task_of[f.key], f.result())

        yield from in_order(results(), len(jobs), done)
