"""The README's examples run as written: every ```sh block that works on the shipped captures
is run by bash, each of its commands must succeed, and the blocks that cannot run here are
listed with the reason and the test that covers them. A new block fails until it is placed.

The placeholders the README uses for "your capture" are the shipped captures, as files of
those names in the directory the blocks run in."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "captures"
PLACEHOLDERS = {
    "capture.pcap": "seqscan-10k-pgbouncer-loopback.pcap",
    "a.pcap": "seqscan-10k-direct-loopback.pcap",
    "b.pcap": "seqscan-10k-pgbouncer-loopback.pcap",
    "direct.pcap": "seqscan-10k-direct-loopback.pcap",
    "pooled.pcap": "seqscan-10k-pgbouncer-loopback.pcap",
}
# A block is known by its first line's start: run, or not run and why
NOT_RUN = {
    "bash analyzer/bootstrap.sh && ":
        "sets up the environment this suite runs in; tests/test_bootstrap.py runs bootstrap.sh "
        "on a fresh copy and the pktflow analyze after it is the first block run here",
    "bash analyzer/bootstrap.sh --test && ":
        "the suite itself, as CI runs it on a fresh clone (.ci/run)",
    "pktflow lab record --scenario seqscan-10k --via pgbouncer --network loopback":
        "records with PostgreSQL, PgBouncer and tcpdump as root: tests/test_lab_record.py",
    "pktflow lab record --scenario seqscan-10k --via pgbouncer --network bridge --delay 10":
        "records in the lab's namespaces as root: tests/test_lab_conditions.py",
    "docker pull debian:bookworm-slim":
        "Docker Hub or debootstrap, as root: tests/test_lab_compose.py makes the base image",
    "SCENARIO=seqscan-10k VIA=pgbouncer docker-compose up":
        "a Docker engine: tests/test_lab_compose.py records these",
}
RUN = {
    "pktflow analyze capture.pcap ",
    "pktflow analyze --format jsonl captures/*.pcap > reports.jsonl",
    "pktflow flow capture.pcap ",
}
# every command of a block that exits non-zero, as bash reports it
TRAP = "trap 'echo \"FAILED $? $BASH_COMMAND\" >&2' ERR\n"


def blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return [m.group(1) for m in re.finditer(r"^```sh\n(.*?)^```", text, re.S | re.M)]


def _known(block: str) -> str:
    first = block.splitlines()[0]
    starts = [s for s in (*NOT_RUN, *RUN) if first.startswith(s)]
    assert len(starts) == 1, f"README block not placed in tests/test_readme.py: {first!r}"
    return starts[0]


def _place(tmp: Path, extra: dict[str, bytes] | None = None) -> Path:
    """A working directory: the placeholders and captures/ with the shipped captures (and
    `extra` files beside them)."""
    caps = tmp / "captures"
    caps.mkdir()
    for cap in sorted(CAPTURES.glob("*.pcap")):
        (caps / cap.name).symlink_to(cap)
    for name, data in (extra or {}).items():
        (caps / name).write_bytes(data)
    for name, target in PLACEHOLDERS.items():
        (tmp / name).symlink_to(CAPTURES / target)
    return tmp


def run_block(block: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    # pktflow, python3 (with pandas) and duckdb from the environment the tests run in
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(["bash", "-c", TRAP + block], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def failed(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("FAILED ")]


def test_every_block_is_run_or_says_why_not() -> None:
    found = [_known(b) for b in blocks()]
    assert set(found) == set(NOT_RUN) | RUN, "a placed block is gone from the README"


def test_the_tools_the_examples_use_are_installed() -> None:
    """pandas and the DuckDB CLI come with the test extra (pip install -e '.[test]', which
    bootstrap.sh --test runs): without them the fleet example is not tested, so it fails."""
    import pandas  # noqa: F401

    assert shutil.which("duckdb", path=str(Path(sys.executable).parent)), \
        "the DuckDB CLI: pip install -e '.[test]' (duckdb-cli)"


@pytest.mark.parametrize("start", sorted(RUN))
def test_block_runs_as_written(tmp_path: Path, start: str) -> None:
    (block,) = [b for b in blocks() if _known(b) == start]
    proc = run_block(block, _place(tmp_path))
    assert failed(proc) == [], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert proc.stdout.strip()


def _connections(jsonl: Path) -> tuple[int, int]:
    """(reports, connections) in a jsonl file."""
    lines = [json.loads(x) for x in jsonl.read_text().splitlines()]
    reports = [x for x in lines if x["schema"] == "pktflow.report/1"]
    return len(reports), sum(len(r["connections"]) for r in reports)


def test_the_fleet_example_reads_reports_and_the_error_lines_beside_them(tmp_path: Path) -> None:
    """The README promises an error line for an input that gives no report: pandas and DuckDB
    read the file with it (pandas' json_normalize crashed on it, a TypeError)."""
    (block,) = [b for b in blocks() if b.startswith("pktflow analyze --format jsonl")]
    cwd = _place(tmp_path, {"empty.pcap": b""})
    proc = run_block(block, cwd)
    (jsonl_failed, *others) = failed(proc)
    assert others == [], proc.stderr[-3000:]
    assert jsonl_failed.startswith("FAILED 4 pktflow analyze --format jsonl")  # not a capture
    reports, conns = _connections(cwd / "reports.jsonl")
    assert reports == len(list(CAPTURES.glob("*.pcap"))) and conns > reports
    # pandas: one row per connection; DuckDB: the same, as a table
    assert f"[{conns} rows x " in proc.stdout
    assert re.search(rf"^\s+{conns} rows\s+2 columns$", proc.stdout, re.M), proc.stdout[-2000:]
