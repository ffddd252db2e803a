"""A fleet of captures: the local pool writes what one process writes, and a real Dask cluster
(a scheduler and two workers on 127.0.0.1, started here) writes the same dataset row for row,
even when one of its workers is killed mid-run; a failing capture is its row in `errors`, and
the exit code is the worst of the run. Also the text run's fleet summary."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow", reason="the fleet extra: pip install -e '.[fleet]'")
pq = pytest.importorskip("pyarrow.parquet")

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = sorted((ROOT / "captures").glob("*.pcap"))
TABLES = ("captures", "connections", "directions", "queries", "relays", "relay_pairs",
          "findings", "errors")
BIN = Path(sys.executable).parent


def pktflow(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pktflow", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def dataset(out: Path) -> dict[str, list[dict[str, Any]]]:
    """Every table's rows, in file order, and each table's file names."""
    got: dict[str, Any] = {}
    for table in TABLES:
        files = sorted((out / table).glob("*.parquet"))
        got[table + "/files"] = [f.name for f in files]
        got[table] = [row for f in files for row in pq.read_table(f).to_pylist()]
    return got


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """24 captures: the shipped ones, copies of the largest under other names (so that a
    worker is busy when one is killed), a capture cut mid-record and a file that is not one."""
    where = tmp_path_factory.mktemp("fleet")
    names = []
    for c in CAPTURES:
        shutil.copy(c, where / c.name)
        names.append(c.name)
    big = max(CAPTURES, key=lambda p: p.stat().st_size)
    for i in range(24 - len(CAPTURES) - 2):
        shutil.copy(big, where / f"host{i}-{big.name}")
        names.append(f"host{i}-{big.name}")
    (where / "cut.pcap").write_bytes(CAPTURES[0].read_bytes()[:30000])
    (where / "notes.txt").write_text("not a capture\n")
    names += ["cut.pcap", "notes.txt"]
    return where, names


@pytest.fixture(scope="module")
def local_run(fleet: tuple[Path, list[str]]) -> tuple[dict[str, Any], int]:
    where, names = fleet
    res = pktflow("analyze", "--format", "parquet", "-o", "local", *names, cwd=where)
    return dataset(where / "local"), res.returncode


def test_the_local_pool_writes_what_one_process_writes(fleet: tuple[Path, list[str]],
                                                       local_run: tuple[dict[str, Any], int],
                                                       tmp_path: Path) -> None:
    where, names = fleet
    got, code = local_run
    assert code == 6  # the worst of the run: the cut capture (4, not a capture, is less)
    assert len(got["captures"]) == len(names) - 1
    assert [e["file"] for e in got["errors"]] == ["notes.txt"]
    # one process: the same files, the same rows
    env = dict(os.environ)
    res = subprocess.run(["taskset", "-c", "0", sys.executable, "-m", "pktflow", "analyze",
                          "--format", "parquet", "-o", str(tmp_path / "one"), *names],
                         cwd=where, capture_output=True, text=True, env=env, timeout=600) \
        if shutil.which("taskset") else None
    if res is None:
        pytest.skip("taskset is not installed (util-linux): no way to run on one core")
    assert res.returncode == 6, res.stderr
    assert dataset(tmp_path / "one") == got


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[str, list[subprocess.Popen[bytes]]]]:
    """A Dask scheduler and two workers (no nanny: a worker is its own process) on
    127.0.0.1, stopped by their pids."""
    if not (BIN / "dask").exists():
        pytest.skip("dask is not installed: pip install -e '.[fleet]'")
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    logs = tmp_path / "dask-logs"
    logs.mkdir()
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> subprocess.Popen[bytes]:
        p = subprocess.Popen([str(BIN / "dask"), *args], cwd=tmp_path,
                             stdout=subprocess.DEVNULL,
                             stderr=(logs / f"{name}.log").open("wb"))
        procs.append(p)
        return p

    try:
        start("scheduler", "scheduler", "--host", "127.0.0.1", "--port", str(port),
              "--no-dashboard")
        for i in range(2):
            start(f"worker{i}", "worker", address, "--host", "127.0.0.1", "--nthreads", "1",
                  "--no-nanny", "--no-dashboard", "--name", f"w{i}")
        from distributed import Client

        deadline = time.monotonic() + 60
        while True:
            try:
                with Client(address, timeout="5s") as c:
                    if len(c.scheduler_info()["workers"]) == 2:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the cluster did not come up: " + \
                " ".join(f.read_text()[-500:] for f in logs.iterdir())
            time.sleep(0.5)
        yield address, procs
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def test_a_dask_cluster_writes_the_same_dataset_despite_a_killed_worker(
        fleet: tuple[Path, list[str]], local_run: tuple[dict[str, Any], int],
        cluster: tuple[str, list[subprocess.Popen[bytes]]]) -> None:
    where, names = fleet
    address, procs = cluster
    out = where / "dask"
    run = subprocess.Popen([sys.executable, "-m", "pktflow", "analyze", "--format", "parquet",
                            "-o", str(out), "--scheduler", address, *names], cwd=where,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # kill one worker once the run is under way (some captures written, not all)
    victim = procs[1]
    deadline = time.monotonic() + 120
    while len(list((out / "captures").glob("*.parquet"))) < 2 if out.exists() else True:
        assert run.poll() is None, run.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    written = len(list((out / "captures").glob("*.parquet")))
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    stdout, stderr = run.communicate(timeout=600)
    assert written < len(names) - 1, "the run was over before the worker was killed"
    assert run.returncode == local_run[1] == 6, stderr
    got = dataset(out)
    assert got == local_run[0]  # every table, every row, every file name: nothing lost
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    assert "notes.txt" in stderr and "cut.pcap" in stderr


def test_a_dask_cluster_runs_small_captures_a_few_to_a_task(
        cluster: tuple[str, list[subprocess.Popen[bytes]]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each task is a round trip through the scheduler: small captures go a few to a task, as
    in the local pool, and every one of them still comes back, in order, written once."""
    from distributed import Client

    from pktflow.fleet import TASKS_PER_WORKER, Job, run_dask
    from pktflow.tables import file_name

    small = min(CAPTURES, key=lambda p: p.stat().st_size)
    jobs = []
    for i in range(48):
        path = tmp_path / f"host{i:02d}-{small.name}"
        shutil.copy(small, path)
        jobs.append(Job(str(path), path.name, True, "parquet", None, False, str(tmp_path / "out")))
    tasks: list[int] = []
    real_map = Client.map

    def map_counted(self: Any, func: Any, *iterables: Any, **kwargs: Any) -> Any:
        tasks.append(len(iterables[0]))
        return real_map(self, func, *iterables, **kwargs)

    monkeypatch.setattr(Client, "map", map_counted)
    got = list(run_dask(jobs, cluster[0], None))
    assert len(tasks) == 1 and 2 * TASKS_PER_WORKER <= tasks[0] < len(jobs)
    assert [status for status, _ in got] == ["ok"] * len(jobs)
    assert sorted(f.name for f in (tmp_path / "out" / "captures").iterdir()) == \
        sorted(file_name(j.path) for j in jobs)


def test_a_text_fleet_ends_with_its_summary(fleet: tuple[Path, list[str]]) -> None:
    where, _ = fleet
    names = [c.name for c in CAPTURES if "seqscan" in c.name or "pgdump" in c.name]
    res = pktflow("analyze", *names, cwd=where)
    assert res.returncode == 0, res.stderr
    tail = res.stdout[res.stdout.index(f"Fleet: {len(names)} captures"):]
    for title in ("Transfers by what limited them", "slowest transfers", "slowest queries",
                  "Relays"):
        assert title in tail
    assert "\x1b[" not in res.stderr  # no progress bar: stderr is not a terminal


class Terminal:
    """A stderr that says it is a terminal, and keeps what was drawn on it."""

    def __init__(self) -> None:
        import io

        self.buf = io.StringIO()

    def write(self, s: str) -> int:
        return self.buf.write(s)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return True


def test_a_fleet_on_a_terminal_has_a_progress_bar(fleet: tuple[Path, list[str]],
                                                   tmp_path: Path) -> None:
    import io

    from pktflow.cli import Env, main

    where, names = fleet
    err = Terminal()
    out = io.StringIO()
    paths = [str(where / n) for n in names if n.endswith(".pcap") and n != "cut.pcap"][:6]
    code = main(["analyze", "--format", "parquet", "-o", str(tmp_path / "ds"), *paths],
                Env(stdout=out, stderr=err, width=100))  # type: ignore[arg-type]
    assert code == 0
    drawn = err.buf.getvalue()
    assert "captures" in drawn and "/6" in drawn and "packets/s" in drawn


def test_a_pool_task_runs_small_captures_together_and_a_big_one_alone(tmp_path: Path) -> None:
    from pktflow.fleet import TASK_BYTES, TASKS_PER_WORKER, Job, batches

    sizes = [1000] * 40 + [TASK_BYTES + 1] + [1000] * 40 + [TASK_BYTES // 2] * 3
    jobs = []
    for i, size in enumerate(sizes):
        path = tmp_path / f"{i}.pcap"
        with path.open("wb") as f:
            f.truncate(size)  # sparse: only its size matters
        jobs.append(Job(str(path), path.name, True, "parquet", None, False, "out"))
    jobs.append(Job(str(tmp_path / "missing.pcap"), "missing.pcap", True, "parquet", None,
                    False, "out"))
    got = batches(jobs, 2)
    assert [i for b in got for i in b] == list(range(len(jobs))), "every job once, in order"
    most = len(jobs) // (2 * TASKS_PER_WORKER)
    assert most > 1 and all(1 <= len(b) <= most for b in got)
    assert [40] in got, "a capture over the byte budget runs alone"
    halves = [b for b in got if b and b[0] >= 81 and b[-1] <= 83]
    assert all(len(b) <= 2 for b in halves), "two half-budget captures fill a task"
    assert len(got) >= 2 * TASKS_PER_WORKER


def test_the_core_objects_may_be_freed_on_another_thread(tmp_path: Path) -> None:
    """A Dask worker runs each task on a thread of its pool while its profiler samples the
    task's frames from another: a frame it held last freed the report (or the pass, or a
    table's batch) in it on the profiler's thread. The core's objects must be freed wherever
    their last reference goes, not refused there and leaked ("unsendable")."""
    import gc
    import threading

    from pktflow import _core
    from pktflow.pipeline import analyze

    cap = str(ROOT / "captures" / "seqscan-10k-pgbouncer-loopback.pcap")
    made: list[Any] = []

    def task() -> None:
        report = analyze(cap)
        batches: list[Any] = []
        report.core.write_tables(batches.append)
        made.extend([report, _core.Pass(cap), *batches])

    worker = threading.Thread(target=task)
    worker.start()
    worker.join()
    kinds = {type(o).__name__ for o in made}
    assert {"Pass", "ArrowBatch"} <= kinds and len(made) > 3
    refused: list[Any] = []
    hook, sys.unraisablehook = sys.unraisablehook, refused.append
    try:
        made.clear()  # the last references, freed on this thread
        gc.collect()
    finally:
        sys.unraisablehook = hook
    assert [str(r.exc_value) for r in refused] == []
