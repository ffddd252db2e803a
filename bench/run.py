#!/usr/bin/env python3
"""Time pktflow against tcptrace and tshark on the same captures, in one run, alternating.

    python3 bench/run.py [--generate] [--rounds 3] [CAPTURE ...]

--generate records the benchmark inputs with the lab first (root): a pg_dump of a 1,500,000-row
table over the bridge (MTU 1500, offloads off), direct and through PgBouncer. Prints wall time,
CPU time and peak RSS per tool, packets/s and the ratios, and writes bench/results.md.
Run by hand, never by the test suite: timings belong in a benchmark, not in assertions.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"


def measure(cmd: list[str]) -> tuple[float, float, int]:
    """Run cmd; return wall seconds, CPU seconds (user+sys) and peak RSS in KiB of the child."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) not in (0, 6):
        raise SystemExit(f"bench: {' '.join(cmd)} failed with status {status}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss


def count_packets(path: Path) -> int:
    out = subprocess.run(["capinfos", "-c", "-M", str(path)], capture_output=True, text=True)
    for line in out.stdout.splitlines():
        if "Number of packets" in line:
            return int(line.split(":")[1].strip().replace(",", ""))
    return 0


def tools(path: Path, pooler_port: int) -> dict[str, list[str]]:
    py = sys.executable
    out: dict[str, list[str]] = {
        "pktflow": [py, "-m", "pktflow.cli", "analyze", "--format", "json", str(path)],
    }
    if shutil.which("tcptrace"):
        out["tcptrace -l"] = ["tcptrace", "-l", "-n", str(path)]
    if shutil.which("tshark"):
        out["tshark conv,tcp"] = ["tshark", "-n", "-r", str(path), "-q", "-z", "conv,tcp"]
        out["tshark pgsql.type"] = ["tshark", "-n", "-r", str(path), "-d",
                                    f"tcp.port=={pooler_port},pgsql", "-T", "fields",
                                    "-e", "pgsql.type"]
    return out


def generate() -> list[Path]:
    OUT.mkdir(parents=True, exist_ok=True)
    made = []
    for via in ("direct", "pgbouncer"):
        dest = OUT / f"pgdump-1500k-{via}-bridge.pcap"
        if not dest.exists():
            subprocess.run([sys.executable, "-m", "pktflow.lab", "record", "--scenario", "pgdump",
                            "--rows", "1500000", "--via", via, "--network", "bridge",
                            "--offloads", "off", "-o", str(dest)], check=True)
        made.append(dest)
    return made


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("captures", nargs="*", type=Path)
    ap.add_argument("--generate", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pooler-port", type=int, default=6432)
    args = ap.parse_args()
    os.environ["PYTHONPATH"] = str(ROOT / "analyzer") + os.pathsep + os.environ.get("PYTHONPATH", "")
    caps = list(args.captures) + (generate() if args.generate else [])
    if not caps:
        ap.error("give captures or --generate")
    lines = ["# Benchmark results", "",
             f"- machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, "
             f"Python {platform.python_version()}, kernel {platform.release()}",
             f"- {time.strftime('%Y-%m-%d %H:%M')}, {args.rounds} alternating rounds, "
             f"median of each", ""]
    for cap in caps:
        size = cap.stat().st_size
        npk = count_packets(cap)
        cmds = tools(cap, args.pooler_port)
        runs: dict[str, list[tuple[float, float, int]]] = {k: [] for k in cmds}
        for _ in range(args.rounds):
            for name, cmd in cmds.items():  # alternate tools so drift hits all alike
                runs[name].append(measure(cmd))
        base = statistics.median(r[0] for r in runs["pktflow"])
        lines += [f"## {cap.name}: {size / 1e6:.0f} MB, {npk:,} packets", "",
                  "| tool | wall s | CPU s | peak RSS MB | packets/s | wall vs pktflow |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for name, rs in runs.items():
            wall = statistics.median(r[0] for r in rs)
            cpu = statistics.median(r[1] for r in rs)
            rss = max(r[2] for r in rs) / 1024
            lines.append(f"| {name} | {wall:.2f} | {cpu:.2f} | {rss:.0f} | "
                         f"{npk / wall:,.0f} | {wall / base:.2f}x |")
        lines.append("")
    text = "\n".join(lines)
    print(text)
    (ROOT / "bench" / "results.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
