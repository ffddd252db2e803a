"""Record one scenario: start the servers, capture, run the client, stop, write metadata.

Topology `loopback` puts everything on 127.0.0.1, as the PGECons study did; `bridge` puts
client, pooler and server in network namespaces of their own on a Linux bridge (network.py).
The pooled server connection is opened before tcpdump starts (`warm_pool`), so the capture
shows the back leg without a handshake, as production captures do.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pktflow.errors import LabError
from pktflow.lab.scenarios import (DATABASE, PGBOUNCER_DEFAULTS, PGBOUNCER_PORT, PGPOOL_PORT,
                                   PGPOOL_SETTINGS, POSTGRES_PORT,
                                   SCENARIOS, USER,
                                   render_command, render_setup)
from pktflow.lab.network import Bridge, Loopback, make_network
from pktflow.lab.services import (TCPDUMP_OPTIONS, Services, free_port, need, require_root,
                                  version)


@dataclass
class Recording:
    scenario: str
    via: str = "direct"  # direct | pgbouncer | pgpool
    network: str = "loopback"  # loopback | bridge
    rows: int | None = None
    pgbouncer: dict[str, Any] = field(default_factory=lambda: dict(PGBOUNCER_DEFAULTS))
    warm_pool: bool = True
    offloads: bool | None = None  # bridge only; None: off
    rate: str | None = None  # bridge only: tc tbf rate per sender, e.g. "100mbit"


def record(rec: Recording, out: Path) -> dict[str, Any]:
    """Record `rec` into `out` (pcap) and `out` with suffix .json (metadata); return the
    metadata."""
    if rec.scenario not in SCENARIOS:
        raise LabError(f"unknown scenario {rec.scenario!r}; known: {', '.join(SCENARIOS)}")
    if rec.via not in ("direct", "pgbouncer", "pgpool"):
        raise LabError(f"--via {rec.via!r}: use direct, pgbouncer or pgpool")
    scen = SCENARIOS[rec.scenario]
    rows = rec.rows or scen.default_rows
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    require_root()
    with tempfile.TemporaryDirectory(prefix="pktflow-lab-") as tmp, _terminate_as_interrupt():
        net = make_network(rec.network, offloads=rec.offloads, rate=rec.rate)
        try:
            svc = Services(Path(tmp), net)
            try:
                meta = _record(rec, svc, net, rows, out)
            finally:
                svc.close()
        finally:
            net.close()
    out.with_suffix(".json").write_text(json.dumps(meta, indent=2) + "\n")
    if meta["tcpdump_dropped"]:
        raise LabError(f"tcpdump dropped {meta['tcpdump_dropped']} packets: the capture is "
                       "incomplete", file=str(out))
    return meta


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP unwind like Ctrl-C, so the servers and namespaces are cleaned up."""
    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def _record(rec: Recording, svc: Services, net: Loopback | Bridge, rows: int, out: Path
            ) -> dict[str, Any]:
    scen = SCENARIOS[rec.scenario]
    psql = need("psql", "postgresql-client-15")
    pg_host = net.host("server")
    # in namespaces of our own the usual ports are always free
    pg_port = free_port(POSTGRES_PORT) if rec.network == "loopback" else POSTGRES_PORT
    svc.postgres(pg_host, pg_port, tls=scen.tls)
    setup = render_setup(scen, host=pg_host, port=pg_port, rows=rows)
    svc.run([need(setup[0], "postgresql-client-15"), *setup[1:]])
    host, port, ports = pg_host, pg_port, [pg_port]
    if rec.via == "pgbouncer":
        host = net.host("pooler")
        port = free_port(PGBOUNCER_PORT) if rec.network == "loopback" else PGBOUNCER_PORT
        ports.append(port)
        svc.pgbouncer(host, port, pg_host, pg_port, rec.pgbouncer)
    elif rec.via == "pgpool":
        host = net.host("pooler")
        port = free_port(PGPOOL_PORT) if rec.network == "loopback" else PGPOOL_PORT
        ports.append(port)
        svc.pgpool(host, port, pg_host, pg_port)
    if rec.via != "direct":
        if rec.warm_pool:
            svc.run([psql, "-X", "-q", "-h", host, "-p", str(port), "-U", USER, "-d",
                     DATABASE, "-c", "SELECT 1"], role="client")
    argv = render_command(scen, host=host, port=port, rows=rows)
    bpf = " or ".join(f"tcp port {p}" for p in ports)
    where, iface = net.capture_point(rec.via)
    dump = svc.tcpdump(iface, out, bpf, where)
    t0 = time.time()
    svc.run([need(argv[0], "postgresql-client-15"), *argv[1:]], role="client",
            stdout=subprocess.DEVNULL, env=dict(scen.env), ok=scen.ok_codes)
    elapsed = time.time() - t0
    drops = svc.stop_tcpdump(dump)
    in_ns = " ".join(net.prefix(where)).replace(str(os.getpid()), "<pid>")
    return {
        "scenario": rec.scenario, "description": scen.description, "via": rec.via,
        "network": rec.network, **net.metadata(),
        "rows": rows, "row_layout": "id int, payload text of 96 characters (3 x md5)",
        "client_command": " ".join(f"{k}={v}" for k, v in scen.env) + (" " if scen.env
                                                                        else "") + " ".join(argv), "ports": {"postgres": pg_port} | (
            {rec.via: port} if rec.via != "direct" else {}),
        "pgbouncer_settings": rec.pgbouncer if rec.via == "pgbouncer" else None,
        "pgpool_settings": PGPOOL_SETTINGS if rec.via == "pgpool" else None,
        "pool_warmed_before_capture": rec.warm_pool if rec.via != "direct" else None,
        "client_seconds": round(elapsed, 3), "tcpdump_dropped": drops,
        "capture_point": f"{where} namespace, {iface}" if in_ns else iface,
        "tcpdump_command": (f"{in_ns} " if in_ns else "") +
        f"tcpdump -i {iface} {' '.join(TCPDUMP_OPTIONS)} -w {out.name} '{bpf}'",
        "versions": {"postgres": version([need("postgres", "postgresql-15"), "--version"]),
                     "pgbouncer": version(["pgbouncer", "--version"])
                     if rec.via == "pgbouncer" else None,
                     "pgpool": version([need("pgpool", "pgpool2"), "--version"])
                     if rec.via == "pgpool" else None,
                     "tcpdump": version(["tcpdump", "--version"]),
                     "kernel": platform.release()},
        "remake": remake_command(rec, out.name),
        "recording": asdict(rec),
    }


def remake_command(rec: Recording, name: str) -> str:
    cmd = (f"pktflow lab record --scenario {rec.scenario} --via {rec.via} "
           f"--network {rec.network}")
    if rec.rows:
        cmd += f" --rows {rec.rows}"
    if rec.network == "bridge":
        cmd += f" --offloads {'on' if rec.offloads else 'off'}"
    if rec.rate:
        cmd += f" --rate {rec.rate}"
    for k, v in rec.pgbouncer.items():
        if rec.via == "pgbouncer" and PGBOUNCER_DEFAULTS.get(k) != v:
            flag = {"default_pool_size": "pool-size"}.get(k, k.replace("_", "-"))
            cmd += f" --{flag} {v}"
    return f"{cmd} -o captures/{name}"
