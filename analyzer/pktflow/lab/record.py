"""Record one scenario: start the servers, capture, run the client, stop, write metadata.

Topology `loopback` puts everything on 127.0.0.1, as the PGECons study did. The pooled server
connection is opened before tcpdump starts (`warm_pool`), so the capture shows the back leg
without a handshake, as production captures do.
"""

from __future__ import annotations

import json
import platform
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pktflow.errors import LabError
from pktflow.lab.scenarios import (DATABASE, PGBOUNCER_DEFAULTS, PGBOUNCER_PORT, POSTGRES_PORT,
                                   SCENARIOS, USER,
                                   create_table_sql, render_command)
from pktflow.lab.services import Services, free_port, need, version


@dataclass
class Recording:
    scenario: str
    via: str = "direct"  # direct | pgbouncer
    network: str = "loopback"
    rows: int | None = None
    pgbouncer: dict[str, Any] = field(default_factory=lambda: dict(PGBOUNCER_DEFAULTS))
    warm_pool: bool = True


def record(rec: Recording, out: Path) -> dict[str, Any]:
    """Record `rec` into `out` (pcap) and `out` with suffix .json (metadata); return the
    metadata."""
    if rec.scenario not in SCENARIOS:
        raise LabError(f"unknown scenario {rec.scenario!r}; known: {', '.join(SCENARIOS)}")
    if rec.network != "loopback":
        raise LabError(f"network {rec.network!r} is not built yet; use --network loopback")
    if rec.via not in ("direct", "pgbouncer"):
        raise LabError(f"--via {rec.via!r} is not built yet; use direct or pgbouncer")
    scen = SCENARIOS[rec.scenario]
    rows = rec.rows or scen.default_rows
    host = "127.0.0.1"
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pktflow-lab-") as tmp:
        svc = Services(Path(tmp))
        try:
            pg_port = free_port(POSTGRES_PORT)
            svc.postgres(host, pg_port)
            psql = need("psql", "postgresql-client-15")
            svc.run([psql, "-X", "-q", "-h", host, "-p", str(pg_port), "-U", USER, "-d",
                     DATABASE, "-c", create_table_sql(scen.table, rows)])
            port, ports = pg_port, [pg_port]
            if rec.via == "pgbouncer":
                port = free_port(PGBOUNCER_PORT)
                ports.append(port)
                svc.pgbouncer(host, port, pg_port, rec.pgbouncer)
                if rec.warm_pool:
                    svc.run([psql, "-X", "-q", "-h", host, "-p", str(port), "-U", USER, "-d",
                             DATABASE, "-c", "SELECT 1"])
            argv = render_command(scen, host=host, port=port)
            bpf = " or ".join(f"tcp port {p}" for p in ports)
            dump = svc.tcpdump("lo", out, bpf)
            t0 = time.time()
            svc.run([need(argv[0], "postgresql-client-15"), *argv[1:]], stdout=subprocess.DEVNULL)
            elapsed = time.time() - t0
            drops = svc.stop_tcpdump(dump)
        finally:
            svc.close()
    meta = {
        "scenario": rec.scenario, "description": scen.description, "via": rec.via,
        "network": rec.network, "mtu": 65536, "offloads": "loopback (no NIC offloads)",
        "rows": rows, "row_layout": "id int, payload text of 96 characters (3 x md5)",
        "client_command": " ".join(argv), "ports": {"postgres": pg_port} | (
            {"pgbouncer": port} if rec.via == "pgbouncer" else {}),
        "pgbouncer_settings": rec.pgbouncer if rec.via == "pgbouncer" else None,
        "pool_warmed_before_capture": rec.warm_pool if rec.via == "pgbouncer" else None,
        "client_seconds": round(elapsed, 3), "tcpdump_dropped": drops,
        "tcpdump_command": f"tcpdump -i lo -s 0 -B 32768 -U -w {out.name} '{bpf}'",
        "versions": {"postgres": version([need("postgres", "postgresql-15"), "--version"]),
                     "pgbouncer": version(["pgbouncer", "--version"])
                     if rec.via == "pgbouncer" else None,
                     "tcpdump": version(["tcpdump", "--version"]),
                     "kernel": platform.release()},
        "remake": remake_command(rec, out.name),
        "recording": asdict(rec),
    }
    out.with_suffix(".json").write_text(json.dumps(meta, indent=2) + "\n")
    if drops:
        raise LabError(f"tcpdump dropped {drops} packets: the capture is incomplete",
                       file=str(out))
    return meta


def remake_command(rec: Recording, name: str) -> str:
    cmd = (f"pktflow lab record --scenario {rec.scenario} --via {rec.via} "
           f"--network {rec.network}")
    if rec.rows:
        cmd += f" --rows {rec.rows}"
    for k, v in rec.pgbouncer.items():
        if rec.via == "pgbouncer" and PGBOUNCER_DEFAULTS.get(k) != v:
            cmd += f" --{k.replace('_', '-')} {v}"
    return f"{cmd} -o captures/{name}"
