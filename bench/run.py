#!/usr/bin/env python3
"""Time pktflow against tcptrace and tshark on the same captures, in one run, alternating.

    python3 bench/run.py [--generate | --reuse] [--rounds 3] [CAPTURE ...]

--generate records the benchmark inputs with the lab first (root), into bench/out/ (git-ignored):
a pg_dump of a 1,500,000-row table over the bridge (MTU 1500, offloads off), direct and through
PgBouncer, a connection storm (pgbench -C -S through PgBouncer in transaction mode: 20,000
client connections of one SELECT each), and for the scale checks four pooled dumps, and four
storms, concatenated (mergecap -a). Prints wall time, CPU time and peak RSS per tool,
packets/s and the ratios, pktflow's time per million packets and peak RSS on the 4x captures,
and writes bench/results.md. --reuse times the inputs an earlier --generate left in bench/out/
again (after a change to pktflow).
Run by hand, never by the test suite: timings belong in a benchmark, not in assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
# pktflow's dependencies (rich) live in the checkout's venv (analyzer/bootstrap.sh)
PYTHON = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv" / "bin" / "python").exists() \
    else sys.executable
ROWS = 1_500_000
SCALE = 4  # the scale capture: a dump SCALE times as large, through PgBouncer

RAW: dict[str, Any] = {}  # every measurement, written to bench/out/runs.json
BASELINE: str | None = None  # the Python of another pktflow install to time beside this one
Run = tuple[float, float, int] | None  # wall s, CPU s, peak RSS KiB; None: timed out


def measure(cmd: list[str], timeout: float) -> Run:
    """Run cmd; return wall seconds, CPU seconds (user+sys) and peak RSS in KiB of the child,
    or None when it ran longer than `timeout` seconds (it is killed)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        _, status, ru = os.wait4(proc.pid, 0)
    finally:
        timer.cancel()
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)  # so Popen does not wait again
    if wall >= timeout and proc.returncode < 0:
        return None
    if proc.returncode not in (0, 6):
        raise SystemExit(f"bench: {' '.join(cmd)} failed with status {proc.returncode}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss


def count_packets(path: Path) -> int:
    out = subprocess.run(["capinfos", "-c", "-M", str(path)], capture_output=True, text=True)
    for line in out.stdout.splitlines():
        if "Number of packets" in line:
            return int(line.split(":")[1].strip().replace(",", ""))
    return 0


def pooler_port(path: Path, default: int) -> int:
    meta = path.with_suffix(".json")
    if meta.exists():
        return int(json.loads(meta.read_text()).get("ports", {}).get("pgbouncer") or default)
    return default


def tools(path: Path, port: int, only_pktflow: bool = False) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {
        "pktflow": [PYTHON, "-m", "pktflow.cli", "analyze", "--format", "json", str(path)],
    }
    if only_pktflow:
        return out
    # the format for captures of many connections: no indentation to write
    out["pktflow --format jsonl"] = [*out["pktflow"][:-2], "jsonl", str(path)]
    # the tables of a fleet (a rerun replaces the capture's files)
    out["pktflow --format parquet"] = [*out["pktflow"][:-2], "parquet", "-o",
                                       str(OUT / "tables"), str(path)]
    # another install of pktflow (--baseline PYTHON), e.g. a checkout before a change: the
    # same run measures both, so the ratio holds whatever the machine's speed that hour
    if BASELINE:
        out["pktflow, baseline"] = [BASELINE, *out["pktflow"][1:]]
    # the Python pass (mypyc-compiled), the native core's twin, and the same analysis without
    # any native part (what a machine without a compiler gets)
    if shutil.which("tcptrace"):
        out["tcptrace -l"] = ["tcptrace", "-l", "-n", str(path)]
    if shutil.which("tshark"):
        out["tshark conv,tcp"] = ["tshark", "-n", "-r", str(path), "-q", "-z", "conv,tcp"]
        # Through a pooler nothing decodes port 6432 as PostgreSQL: tshark's SMPP heuristic
        # claims a CopyData segment there and its TCP reassembly turns superlinear. Without
        # that heuristic, what conv,tcp costs otherwise.
        out["tshark conv,tcp, no SMPP heuristic"] = [*out["tshark conv,tcp"],
                                                     "--disable-heuristic", "smpp_tcp"]
        # decode-as for the pooler's port; 5432 is PostgreSQL's already
        out["tshark pgsql.type"] = ["tshark", "-n", "-r", str(path), "-d",
                                    f"tcp.port=={port},pgsql", "-T", "fields",
                                    "-e", "pgsql.type"]
    return out


def record(dest: Path, via: str, rows: int, scenario: str = "pgdump", *extra: str) -> Path:
    if not dest.exists():
        subprocess.run([PYTHON, "-m", "pktflow.lab", "record", "--scenario", scenario,
                        "--rows", str(rows), "--via", via, "--network", "bridge",
                        "--offloads", "off", *extra, "-o", str(dest)], check=True)
    return dest


def generate(reuse: bool = False) -> tuple[list[Path], list[tuple[Path, Path]]]:
    """The benchmark inputs, and the scale pairs (a capture, one SCALE times as large): SCALE
    pooled dumps, and SCALE connection storms, recorded one after the other and concatenated
    (mergecap -a), so each is SCALE times as large and clean. (One dump of SCALE x ROWS rows,
    1.4 GB, made tcpdump drop a few packets.) With `reuse`, inputs an earlier run left in
    bench/out/ are timed again rather than recorded anew."""
    OUT.mkdir(parents=True, exist_ok=True)
    made = []
    for via in ("direct", "pgbouncer"):
        path = OUT / f"pgdump-{ROWS // 1000}k-{via}-bridge.pcap"
        made.append(path if reuse and path.exists() else record(path, via, ROWS))
    storm = OUT / "pgbench-connect-pgbouncer-bridge.pcap"
    made.append(storm if reuse and storm.exists() else
                record(storm, "pgbouncer", 100_000, "pgbench-connect", "--pool-mode",
                       "transaction"))
    scaled = []
    for small, args in ((made[1], ("pgbouncer", ROWS)),
                        (storm, ("pgbouncer", 100_000, "pgbench-connect", "--pool-mode",
                                 "transaction"))):
        big = small.with_name(f"{small.stem}-x{SCALE}.pcap")
        if not big.exists():
            parts = [small] + [record(small.with_name(f"{small.stem}-{i}.pcap"), *args)
                               for i in range(2, SCALE + 1)]
            subprocess.run(["mergecap", "-a", "-F", "pcap", "-w", str(big), *map(str, parts)],
                           check=True)
            for part in parts[1:]:
                part.unlink()
                part.with_suffix(".json").unlink()
        scaled.append((small, big))
    return made, scaled


def summary(path: Path) -> list[str]:
    """summary_lines, worked out in a child process: loading a large report here would grow
    this process, and the children it forks after would report its pages in their peak RSS."""
    out = subprocess.run([PYTHON, __file__, "--summary", str(path)], capture_output=True,
                         text=True, check=True).stdout
    return out.splitlines()


def summary_lines(path: Path) -> list[str]:
    """What pktflow finds in the capture: rows, segments and ACK cadence of each bulk leg."""
    rep = json.loads(subprocess.run(tools(path, 0, True)["pktflow"], capture_output=True,
                                    text=True, check=False).stdout)
    lines = []
    conns = rep["connections"]
    if len(conns) > 10:  # a storm: counts, not a line per connection
        roles = [c.get("role") for c in conns]
        queries = sum(c.get("queries_total") or 0 for c in conns)
        matched = sum(r["matched_queries"] for r in rep["relays"])
        return [f"- {len(conns):,} connections ({roles.count('front'):,} front legs, "
                f"{roles.count('back'):,} back legs), {queries:,} queries, {matched:,} matched "
                f"leg to leg"]
    for c in conns:
        d = c["directions"]["server_to_client"]
        bulk = max(c.get("queries") or [{}], key=lambda q: q.get("response_bytes", 0))
        lines.append(f"- {c['id']} -> port {c['server']['port']}: {bulk.get('command_tag')}, "
                     f"{bulk.get('copy_data', 0):,} CopyData; {d['data_segments']:,} data "
                     f"segments (median {d['segment_size_median']:,} B, max "
                     f"{d['max_segment']:,} B); ACK median {d['acks']['bytes_acked_median']:,} "
                     f"B = {d['acks']['segments_per_ack_median']} segments; verdict "
                     f"{d['verdict']['limit']}")
    return lines


def fmt(value: float | None, spec: str, timeout: float) -> str:
    return f"> {timeout:.0f}" if value is None else format(value, spec)


def compare(cap: Path, rounds: int, port: int, timeout: float) -> list[str]:
    size = cap.stat().st_size
    npk = count_packets(cap)
    cmds = tools(cap, pooler_port(cap, port))
    runs: dict[str, list[Run]] = {k: [] for k in cmds}
    for _ in range(rounds):
        for name, cmd in cmds.items():  # alternate tools so drift hits all alike
            if None in runs[name]:
                continue  # timed out once: do not spend the timeout again
            runs[name].append(measure(cmd, timeout))
            print(f"  {cap.name} {name}: {runs[name][-1]}", file=sys.stderr, flush=True)
    base = statistics.median(r[0] for r in runs["pktflow"] if r)
    base_cpu = statistics.median(r[1] for r in runs["pktflow"] if r)
    lines = [f"## {cap.name}: {size / 1e6:.0f} MB, {npk:,} packets", "",
             "| tool | wall s | CPU s | peak RSS MB | packets/s | wall vs pktflow | "
             "CPU vs pktflow |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, rs in runs.items():
        done = [r for r in rs if r]
        if len(done) < len(rs):
            lines.append(f"| {name} | > {timeout:.0f} (killed) | - | - | < {npk / timeout:,.0f} "
                         f"| > {timeout / base:.1f}x | - |")
            continue
        wall = statistics.median(r[0] for r in done)
        cpu = statistics.median(r[1] for r in done)
        rss = max(r[2] for r in done) / 1024
        lines.append(f"| {name} | {wall:.2f} | {cpu:.2f} | {rss:.0f} | "
                     f"{npk / wall:,.0f} | {wall / base:.2f}x | {cpu / base_cpu:.2f}x |")
    RAW.setdefault(cap.name, {})["tools"] = runs
    return lines + ["", "pktflow's reading:", "", *summary(cap), ""]


def scale(small: Path, big: Path, rounds: int, timeout: float) -> list[str]:
    """pktflow's time per million packets and peak RSS on a capture and one SCALE times larger:
    time must grow linearly; memory stay flat for a dump (it follows the connections open at
    once), and grow by what the report keeps of each connection for a storm."""
    rows = []
    for cap in (small, big):
        npk = count_packets(cap)
        rs = [measure(tools(cap, 0, True)["pktflow"], timeout) for _ in range(rounds)]
        done = [r for r in rs if r]
        if not done:
            return [f"## Scale: pktflow ran longer than {timeout:.0f} s on {cap.name}", ""]
        wall = statistics.median(r[0] for r in done)
        rows.append((cap, npk, cap.stat().st_size, wall, max(r[2] for r in done) / 1024))
        RAW.setdefault(cap.name, {})["scale"] = rs
    (_, n1, _, w1, m1), (_, n2, _, w2, m2) = rows
    lines = [f"## Scale: pktflow on {small.stem} and a capture {n2 / n1:.1f}x as large", "",
             "| capture | MB | packets | wall s | s per million packets | packets/s | "
             "peak RSS MB |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for cap, npk, size, wall, rss in rows:
        lines.append(f"| {cap.name} | {size / 1e6:.0f} | {npk:,} | {wall:.2f} | "
                     f"{wall / npk * 1e6:.2f} | {npk / wall:,.0f} | {rss:.0f} |")
    lines += ["", f"{n2 / n1:.2f}x the packets took {w2 / w1:.2f}x the time and "
              f"{m2 / m1:.2f}x the peak RSS.", ""]
    return lines


def fleet(n: int, rounds: int, timeout: float) -> list[str]:
    """N small captures (the shipped ones, copied round-robin) to Parquet: the local pool (a
    process per core), one process (pinned to one core), and a Dask cluster of two workers on
    127.0.0.1 (one thread each, each on a core of its own, started before the timing)."""
    shipped = sorted((ROOT / "captures").glob("*.pcap"))
    where = OUT / "fleet"
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True)
    caps = []
    for i in range(n):
        src = shipped[i % len(shipped)]
        dst = where / f"host{i:03d}-{src.name}"
        shutil.copy(src, dst)
        caps.append(str(dst))
    npk = sum(count_packets(Path(c)) for c in caps[:len(shipped)]) * n // len(shipped)
    base = [PYTHON, "-m", "pktflow.cli", "analyze", "--format", "parquet", "-o"]
    cluster = start_cluster()
    try:
        cmds = {"local pool (a process per core)": [*base, str(OUT / "fleet-local"), *caps],
                "one process (taskset -c 0)": ["taskset", "-c", "0", *base,
                                               str(OUT / "fleet-one"), *caps],
                "Dask, 2 workers on 127.0.0.1": [*base, str(OUT / "fleet-dask"), "--scheduler",
                                                 cluster[0], *caps]}
        runs: dict[str, list[Run]] = {k: [] for k in cmds}
        for _ in range(rounds):
            for name, cmd in cmds.items():
                runs[name].append(measure(cmd, timeout))
                print(f"  fleet {name}: {runs[name][-1]}", file=sys.stderr, flush=True)
    finally:
        for p in reversed(cluster[1]):
            p.terminate()
            p.wait(timeout=30)
    wall = {k: statistics.median(r[0] for r in v if r) for k, v in runs.items()}
    local, one, dask = (wall[k] for k in cmds)
    lines = [f"## {n} small captures to Parquet (the shipped ones, copied; {npk:,} packets)", "",
             "| run | wall s | captures/s | speed-up vs one process |", "| --- | --- | --- | --- |"]
    for name in cmds:
        lines.append(f"| {name} | {wall[name]:.2f} | {n / wall[name]:.1f} | "
                     f"{one / wall[name]:.2f}x |")
    lines += ["", f"The local pool is {one / local:.2f}x one process; Dask's two workers take "
              f"{dask / local:.2f}x the local pool's time.", ""]
    RAW["fleet"] = runs
    return lines


def start_cluster() -> tuple[str, list[subprocess.Popen[bytes]]]:
    """A Dask scheduler and two single-threaded workers on 127.0.0.1 (the fleet extra), each
    worker kept on a core of its own as the README starts them, and as the local pool keeps
    its processes: a pass's two threads hand batches to each other, and a worker free to move
    them across cores took 1.70x the local pool's time, pinned 1.51x (200 small captures)."""
    import socket

    dask = str(Path(PYTHON).parent / "dask")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                               "--no-dashboard"], **quiet)]  # type: ignore[call-overload]
    cpus = sorted(os.sched_getaffinity(0))
    for i in range(2):
        pin = ["taskset", "-c", str(cpus[i % len(cpus)])] if shutil.which("taskset") else []
        procs.append(subprocess.Popen([*pin, dask, "worker", address, "--host", "127.0.0.1",
                                       "--nthreads", "1", "--no-nanny", "--no-dashboard"],
                                      **quiet))  # type: ignore[call-overload]
    probe = ("from distributed import Client; import sys, time\n"
             "for _ in range(120):\n"
             "    try:\n"
             f"        c = Client('{address}', timeout='5s')\n"
             "        if len(c.scheduler_info()['workers']) == 2: sys.exit(0)\n"
             "        c.close()\n"
             "    except OSError: pass\n"
             "    time.sleep(0.5)\n"
             "sys.exit(1)\n")
    if subprocess.run([PYTHON, "-c", probe]).returncode != 0:
        raise SystemExit("bench: the Dask cluster did not come up")
    return address, procs


def follow(minutes: float) -> list[str]:
    """`analyze - --follow` on an endless stream (bench/stream.py): peak RSS, first ten
    minutes of capture time against the last ten."""
    cap = ROOT / "captures" / "pgbench-txn-pgbouncer-loopback.pcap"
    res = subprocess.run([PYTHON, str(ROOT / "bench" / "stream.py"), str(cap), str(minutes)],
                         capture_output=True, text=True, check=True)
    r = json.loads(res.stdout)
    RAW["follow"] = r
    return [f"## `analyze - --follow` over {minutes:g} minutes of a stream", "",
            f"{cap.name} replayed through a pipe {r['copies']:,} times, back to back (a copy "
            f"every {r['every_s']} s of capture time) with client ports of its own (each copy's connections are new; "
            f"what the capture leaves open is closed by a RST), {r['packets']:,} packets, "
            f"fed as fast as pktflow reads: {r['wall_s']} s wall, exit {r['exit']}. Peak RSS "
            f"while the stream ran, over the first ten minutes of capture time "
            f"{r['peak_rss_first_10min_mb']} MB, over the last ten "
            f"{r['peak_rss_last_10min_mb']} MB (each ten minutes: "
            f"{', '.join(map(str, r['rss_by_10min_mb']))} MB); once it ended (the relays "
            f"found over the legs kept, the report written) {r['peak_rss_at_end_mb']} MB.", ""]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("captures", nargs="*", type=Path)
    ap.add_argument("--generate", action="store_true")
    ap.add_argument("--reuse", action="store_true",
                    help="like --generate, but time the inputs already in bench/out/ again")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", metavar="PYTHON",
                    help="also time the pktflow installed for this Python (another checkout)")
    ap.add_argument("--pooler-port", type=int, default=6432,
                    help="for tshark's decode-as when a capture has no .json metadata")
    ap.add_argument("--timeout", type=float, default=600,
                    help="seconds one tool may take on one capture before it is killed")
    ap.add_argument("--summary", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--fleet", type=int, metavar="N",
                    help="also time N small captures to Parquet: local pool, one process, Dask")
    ap.add_argument("--follow-minutes", type=float, metavar="M",
                    help="also follow an M-minute stream through a pipe, sampling peak RSS")
    args = ap.parse_args()
    global BASELINE
    BASELINE = args.baseline
    if args.summary:
        print("\n".join(summary_lines(args.summary)))
        return 0
    os.environ["PYTHONPATH"] = str(ROOT / "analyzer") + os.pathsep + os.environ.get("PYTHONPATH", "")
    # Byte-compile the checkout as an install does: with PYTHONDONTWRITEBYTECODE set, every run
    # would otherwise compile each edited module again and be timed doing it.
    subprocess.run([PYTHON, "-m", "compileall", "-q", str(ROOT / "analyzer" / "pktflow")],
                   check=True, stdout=subprocess.DEVNULL)
    caps = list(args.captures)
    scaled: list[tuple[Path, Path]] = []
    if args.generate or args.reuse:
        made, scaled = generate(reuse=args.reuse)
        caps += made
    if not caps and not args.fleet and not args.follow_minutes:
        ap.error("give captures or --generate")
    lines = ["# Benchmark results", "",
             f"- machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, "
             f"Python {platform.python_version()}, kernel {platform.release()}",
             f"- {time.strftime('%Y-%m-%d %H:%M')}, {args.rounds} alternating rounds, "
             f"median of each; a tool killed after {args.timeout:.0f} s shows as > N; CPU "
             f"time (user+sys) is the steadier measure when the machine is shared; load "
             f"average at the start {os.getloadavg()[0]:.2f}",
             f"- tools: {'; '.join(tool_versions())}", ""]
    if args.generate or args.reuse:
        lines += ["Inputs: `pktflow lab record --scenario pgdump --rows N --network bridge "
                  "--offloads off` (namespaces on a Linux bridge, MTU 1500, no TSO/GSO/GRO), "
                  "direct and through PgBouncer, and `--scenario pgbench-connect --via "
                  "pgbouncer --pool-mode transaction` (a connection storm); metadata beside "
                  "each capture.", ""]
    for cap in caps:
        lines += compare(cap, args.rounds, args.pooler_port, args.timeout)
    for small, big in scaled:
        lines += scale(small, big, args.rounds, args.timeout)
    if args.fleet:
        lines += fleet(args.fleet, args.rounds, args.timeout)
    if args.follow_minutes:
        lines += follow(args.follow_minutes)
    text = "\n".join(lines)
    print(text)
    (ROOT / "bench" / "results.md").write_text(text + "\n")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "runs.json").write_text(json.dumps(RAW, indent=1) + "\n")
    return 0


def tool_versions() -> list[str]:
    out = [subprocess.run([PYTHON, "-m", "pktflow.cli", "--version"], capture_output=True,
                          text=True).stdout.strip()]
    for argv in (["tcptrace", "-v"], ["tshark", "--version"]):
        if shutil.which(argv[0]):
            p = subprocess.run(argv, capture_output=True, text=True)
            first = (p.stdout or p.stderr).strip().splitlines()
            if first:
                out.append(first[0].removeprefix("Version:").strip().rstrip("."))
    return out


if __name__ == "__main__":
    sys.exit(main())
