"""Record one scenario: start the servers, capture, run the client, stop, write metadata.

Topology `loopback` puts everything on 127.0.0.1, as the PGECons study did; `bridge` puts
client, pooler and server in network namespaces of their own on a Linux bridge (network.py).
The pooled server connection is opened before tcpdump starts (`warm_pool`), so the capture
shows the back leg without a handshake, as production captures do.

Network conditions (delay, loss, small buffers, a slow reader: conditions.py) are applied
after the servers are up and before the pool is warmed and the capture starts: the pooled
server connection carries them from its first packet, as a real network's would. While the client runs, the kernel's own
account of each sending socket is sampled (kernel.py); after it, the handshakes in the capture
are timed (handshakes.py) to check the delay asked for against the one recorded. A name ending
in .gz is written gzipped.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import platform
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pktflow.errors import LabError, UsageError
from pktflow.lab import kernel
from pktflow.lab.conditions import Conditions, Shaper, build
from pktflow.lab.handshakes import handshakes
from pktflow.lab.scenarios import (DATABASE, PGBOUNCER_DEFAULTS, PGBOUNCER_PORT, PGPOOL_PORT,
                                   PGPOOL_SETTINGS, POSTGRES_PORT,
                                   SCENARIOS, USER,
                                   render_command, render_setup)
from pktflow.lab.network import Bridge, Loopback, check_options, make_network
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
    rate_at: str | None = None  # the one role whose egress the rate shapes; None: every role
    conditions: Conditions = field(default_factory=Conditions)


# How long the client holds its Terminate after the last result (clientshim.c), before it
# waits for two more rounds of every sampler: the last ACKs reach the senders (delayed ACKs,
# a delay line), then the samplers see each sending socket idle with its final counters.
LINGER_MS = 200
LINGER_CLIENTS = ("psql", "pg_dump")  # one connection each; pgbench's many would each wait
MAX_SOCKETS = 20  # sending sockets described in the metadata, the busiest first


def metadata_path(out: Path) -> Path:
    """X.pcap -> X.json, X.pcap.gz -> X.pcap.json: the capture's name with its last suffix
    replaced, as every reader of captures/ looks for it."""
    return out.with_suffix(".json")


def samples_path(out: Path) -> Path:
    """Beside the metadata: the kernel's samples of each sending socket (pktflow.lab.kernel,
    SERIES_FIELDS), gzipped JSON, so its account can be judged again."""
    return out.with_suffix(".samples.json.gz")


@contextlib.contextmanager
def _shielded() -> Iterator[None]:
    """Cleanup runs to its end: a second Ctrl-C (or SIGTERM) during it is ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    old = {s: signal.signal(s, signal.SIG_IGN) for s in sigs}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def record(rec: Recording, out: Path) -> dict[str, Any]:
    """Record `rec` into `out` (pcap, gzipped if the name ends in .gz) and its metadata file
    (`metadata_path`); return the metadata."""
    # here, not at the top: the compose image holds errors.py and lab/ only, and never records
    # through this function
    from pktflow import output

    check(rec)
    scen = SCENARIOS[rec.scenario]
    rows = rec.rows or scen.default_rows
    out = out.resolve()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise output.error(out, exc) from None
    output.check(out)  # not a directory, writable: before a recording, not after it
    require_root()
    cond = rec.conditions
    rcvbuf = {r: b for r, b in (("client", cond.client_rcvbuf),
                                ("pooler", cond.pooler_rcvbuf)) if b is not None}
    with tempfile.TemporaryDirectory(prefix="pktflow-lab-") as tmp, _terminate_as_interrupt():
        pcap = Path(tmp) / (out.with_suffix("").name if out.suffix == ".gz" else out.name)
        net: Loopback | Bridge | None = None
        svc: Services | None = None
        shaper: list[Shaper] = []  # _record puts its Shaper here, for the cleanup
        try:
            net = make_network(rec.network, offloads=rec.offloads, rate=rec.rate,
                               rate_at=rec.rate_at, rcvbuf=rcvbuf)
            svc = Services(Path(tmp), net)
            meta = _record(rec, svc, net, rows, pcap, out, shaper)
        finally:
            # helpers first (they run inside the namespaces), then servers, then the
            # namespaces, which take every rule, qdisc, route and sysctl with them
            with _shielded():
                for sh in shaper:
                    sh.close()
                if svc is not None:
                    svc.close()
                if net is not None:
                    net.close()
        meta["handshakes"] = handshakes(pcap)
        if out.suffix == ".gz":
            with open(pcap, "rb") as src, gzip.open(out, "wb", compresslevel=9) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        else:
            shutil.move(pcap, out)
    write_metadata(meta, out)
    require_complete(meta, out)
    return meta


def write_metadata(meta: dict[str, Any], out: Path) -> None:
    """The metadata beside the capture, and the kernel's samples beside that (taken out of
    the sockets' summaries)."""
    series = {f"{s['local']} {s['peer']}": s.pop("series")
              for s in meta["kernel"]["sockets"] if "series" in s}
    with gzip.open(samples_path(out), "wt", compresslevel=9) as f:
        json.dump(series, f, separators=(",", ":"))
    metadata_path(out).write_text(json.dumps(meta, indent=2) + "\n")


def check(rec: Recording) -> None:
    """What was asked, before anything runs: a mistake is a usage error (exit 2) naming the
    flag; what the machine cannot do (root, a program) is the lab's (exit 7)."""
    if rec.scenario not in SCENARIOS:
        raise UsageError(f"--scenario {rec.scenario}: known: {', '.join(SCENARIOS)}")
    if rec.via not in ("direct", "pgbouncer", "pgpool"):
        raise UsageError(f"--via {rec.via}: use direct, pgbouncer or pgpool")
    check_options(rec.network, rec.offloads, rec.rate, rec.rate_at)
    rec.conditions.check(rec.network, rec.via)


def require_complete(meta: dict[str, Any], out: Path) -> None:
    """A recording whose capture or delay line lost packets is not what was asked: say so."""
    if meta["tcpdump_dropped"]:
        raise LabError(f"tcpdump dropped {meta['tcpdump_dropped']} packets: the capture is "
                       "incomplete", file=str(out))
    for role in ("client", "pooler"):
        line = meta["conditions"].get(f"delay_line_{role}")
        if line and (line.get("enobufs") or line.get("queue_dropped") or
                     line.get("user_dropped")):
            raise LabError(f"the delay line in the {role}'s namespace lost packets ({line}): "
                           "the delay is not what was asked", file=str(out))


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


def _record(rec: Recording, svc: Services, net: Loopback | Bridge, rows: int, pcap: Path,
            out: Path, shaper_box: list[Shaper]) -> dict[str, Any]:
    scen = SCENARIOS[rec.scenario]
    psql = need("psql", "postgresql-client-15")
    pg_host = net.host("server")
    # in namespaces of our own the usual ports are always free
    pg_port = free_port(POSTGRES_PORT) if rec.network == "loopback" else POSTGRES_PORT
    svc.postgres(pg_host, pg_port, tls=scen.tls, hba=scen.hba)
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
    port_of = {"postgres": pg_port} | ({rec.via: port} if rec.via != "direct" else {})
    shaper = Shaper(rec.conditions, net, svc, svc.workdir, via=rec.via, ports=port_of)
    shaper_box.append(shaper)
    # the conditions before the pool is warmed: its server connection then carries them from
    # its first packet, as on a real network (warmed first, its kernel keeps the least round
    # trip of a path without the delay, and reads the delay as a queue)
    shaper.start()
    if rec.via != "direct" and rec.warm_pool:
        svc.run([psql, "-X", "-q", "-h", host, "-p", str(port), "-U", USER, "-d",
                 DATABASE, "-c", "SELECT 1"], role="client")
    argv = render_command(scen, host=host, port=port, rows=rows)
    env = dict(scen.env) | shaper.client_env()
    program = need(argv[0], "postgresql-client-15")
    if argv[0] == "python3":
        # the lab's own client (lab/pqclient.py), from this checkout, by Debian's python3:
        # the client runs as the lab's unprivileged user, who may not reach another one
        program = need("/usr/bin/python3", "python3")
        env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    samplers = _start_samplers(rec, svc, net, pg_port, port)
    linger = argv[0] in LINGER_CLIENTS and not scen.tls
    if linger:
        env |= {"LD_PRELOAD": str(shaper.shim or build("clientshim.c", svc.workdir,
                                                        shared=True)),
                "PKTFLOW_LINGER_MS": str(LINGER_MS),
                "PKTFLOW_LINGER_TICKS": ":".join(tick for _, _, tick in samplers)}
    bpf = " or ".join(f"tcp port {p}" for p in ports)
    where, iface = net.capture_point(rec.via)
    dump = svc.tcpdump(iface, pcap, bpf, where)
    t0 = time.time()
    svc.run([program, *argv[1:]], role="client",
            stdout=subprocess.DEVNULL, env=env, ok=scen.ok_codes)
    elapsed = time.time() - t0
    drops = svc.stop_tcpdump(dump)
    sockets, seen = _stop_samplers(svc, samplers, rec.via, pg_port, port)
    shaper.finish()
    conditions = shaper.metadata()
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
        "conditions": conditions,
        "client_env": {k: v for k, v in env.items()  # the tick files' paths are throwaway
                       if k.startswith("PKTFLOW_") and k != "PKTFLOW_LINGER_TICKS"} or None,
        "client_seconds": round(elapsed, 3), "tcpdump_dropped": drops,
        "capture_point": f"{where} namespace, {iface}" if in_ns else iface,
        "tcpdump_command": (f"{in_ns} " if in_ns else "") +
        f"tcpdump -i {iface} {' '.join(TCPDUMP_OPTIONS)} -w {pcap.name} '{bpf}'"
        + (f" && gzip -9 {pcap.name}" if out.suffix == ".gz" else ""),
        "versions": {"postgres": version([need("postgres", "postgresql-15"), "--version"]),
                     "pgbouncer": version(["pgbouncer", "--version"])
                     if rec.via == "pgbouncer" else None,
                     "pgpool": version([need("pgpool", "pgpool2"), "--version"])
                     if rec.via == "pgpool" else None,
                     "tcpdump": version(["tcpdump", "--version"]),
                     "kernel": platform.release()},
        "remake": remake_command(rec, _in_captures(out)),
        "recording": asdict(rec),
        "kernel": kernel_account(linger, sockets, seen),
    }


def kernel_account(linger: bool, sockets: list[dict[str, Any]], seen: int) -> dict[str, Any]:
    """The metadata's `kernel` part: how the sending sockets were sampled, the rule that
    names each one's limit, and the sockets."""
    return {"sampler": f"tcp_info of each sending socket (tcpinfo.c, sock_diag) every "
                       f"{kernel.SAMPLE_INTERVAL_S * 1000:g} ms in each sending namespace; "
                       "per socket the last sample before it "
                       "closed" + (f" (the client holds its Terminate {LINGER_MS} ms "
                                   "and two more sampler rounds, so that one comes "
                                   "after the transfer)" if linger else "")
                       + "; a socket open before the client started (a warm pool's) "
                         "counted from the last sampler round before it, once idle",
            "rule": kernel.RULE, "sockets_seen": seen, "sockets": sockets}


def _start_samplers(rec: Recording, svc: Services, net: Loopback | Bridge, pg_port: int,
                    pool_port: int
                    ) -> list[tuple[subprocess.Popen[bytes], kernel.Sampler, str]]:
    """One kernel sampler (tcpinfo.c) per sending namespace: the server's (port pg_port) and the pooler's
    (its listening port); on loopback both are the host's."""
    where = {"server": [pg_port]}
    if rec.via != "direct":
        if rec.network == "loopback":
            where["server"].append(pool_port)
        else:
            where["pooler"] = [pool_port]
    out = []
    binary = str(build("tcpinfo.c", svc.workdir))
    for role, ports in where.items():
        tick = str(svc.workdir / f"ss-{role}.tick")
        proc = svc.helper(kernel.sampler_argv(binary, ports, os.getpid(), tick), role)
        assert proc.stdout is not None
        out.append((proc, kernel.Sampler(proc.stdout, role), tick))
    for _, sampler, _ in out:
        # a round with every open socket idle before the client starts: the baseline of
        # sockets already open (a delayed ACK of the warm-up is 40 ms; a sampler's first
        # round comes at once)
        sampler.idle_round.wait(5.0)
        sampler.freeze()
    return out


def _stop_samplers(svc: Services, samplers: list[tuple[subprocess.Popen[bytes],
                                                       kernel.Sampler, str]],
                   via: str, pg_port: int, pool_port: int
                   ) -> tuple[list[dict[str, Any]], int]:
    for proc, _, _ in samplers:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return sending_sockets([sampler for _, sampler, _ in samplers], via, pg_port, pool_port)


def sending_sockets(samplers: list[kernel.Sampler], via: str, pg_port: int, pool_port: int
                    ) -> tuple[list[dict[str, Any]], int]:
    """The lab's sending sockets, each summarised with its direction, from samplers whose
    streams have ended (or end now); and how many there were before the busiest were kept."""
    sockets = []
    for sampler in samplers:
        sampler.join()
        for (local, peer), series in sampler.samples.items():
            lport = int(local.rsplit(":", 1)[1])
            if peer.rsplit(":", 1)[0] == local.rsplit(":", 1)[0] != "127.0.0.1":
                continue  # the server's own setup connection, not the lab's conversation
            if all(smp["state"] == "CLOSE-WAIT" for smp in series):
                continue  # a connection of the setup, closing when sampling began
            if lport == pg_port:
                direction = "server->client" if via == "direct" else "server->pooler"
            elif lport == pool_port and via != "direct":
                direction = "pooler->client"
            else:
                continue
            sockets.append(kernel.summarize(series, direction,
                                            sampler.baseline.get((local, peer))))
    # a connection storm (pgbench -C) has thousands of sockets: keep the ones that sent most
    kept = sorted(sockets, key=lambda s: -(s["bytes_sent"] or 0))[:MAX_SOCKETS]
    order = {"server->client": 0, "server->pooler": 1, "pooler->client": 2}
    return sorted(kept, key=lambda s: (order[s["direction"]], s["peer"])), len(sockets)


def _in_captures(out: Path) -> str:
    """`out`'s path below the nearest directory called captures (conditions/x.pcap.gz), or
    its bare name: the remake command writes it there."""
    parts = out.parts
    if "captures" in parts[:-1]:
        i = len(parts) - 1 - parts[:-1][::-1].index("captures") - 1
        return "/".join(parts[i + 1:])
    return out.name


def remake_command(rec: Recording, name: str) -> str:
    cmd = (f"pktflow lab record --scenario {rec.scenario} --via {rec.via} "
           f"--network {rec.network}")
    if rec.rows:
        cmd += f" --rows {rec.rows}"
    if rec.network == "bridge":
        cmd += f" --offloads {'on' if rec.offloads else 'off'}"
    if rec.rate:
        cmd += f" --rate {rec.rate}"
    if rec.rate_at:
        cmd += f" --rate-at {rec.rate_at}"
    if rec.conditions.flags():
        cmd += f" {rec.conditions.flags()}"
    for k, v in rec.pgbouncer.items():
        if rec.via == "pgbouncer" and PGBOUNCER_DEFAULTS.get(k) != v:
            flag = {"default_pool_size": "pool-size"}.get(k, k.replace("_", "-"))
            cmd += f" --{flag} {v}"
    return f"{cmd} -o captures/{name}"


# the condition that gives each sending socket's path its delay
PATH_DELAY = {"server->client": "delay_ms", "pooler->client": "delay_ms",
              "server->pooler": "delay_back_ms"}


def shaped(meta: dict[str, Any], direction: str) -> bool:
    """Whether the recording put a shaper (tc tbf, the lab's one queue) on the egress of
    this direction's sender."""
    rec = meta.get("recording") or {}
    return bool(rec.get("rate")) and rec.get("rate_at") in (None, direction.split("->")[0])


def kernel_sockets(out: Path) -> list[dict[str, Any]]:
    """The metadata's sending sockets for the capture `out`, each judged again from the
    samples kept beside it (samples_path) by the kernel module's rule as it is now, read
    with what the recording built; a recording without them keeps its summaries.
    - The least RTT no lower than the delay the socket's path was given: a pool warmed
      before the lab applied its conditions (as it did before) kept a path of microseconds'
      min_rtt (Linux keeps it for minutes), and the rule read the delay itself as a queue.
    - No queue where no shaper was: the lab's only queue is tbf (a delay line holds every
      packet the same time, whatever the flight). Elsewhere a smoothed RTT well above the
      least is the receiver's ACK delays (its delayed ACKs; a pooler that reads, and so
      ACKs, only as its client drains), which the rule would call network; issue 31: network
      needs a queue. The srtt is read as the least, and those samples go by the rest of the
      rule."""
    meta = json.loads(metadata_path(out).read_text())
    socks: list[dict[str, Any]] = meta["kernel"]["sockets"]
    side = samples_path(out)
    if not side.exists():
        return socks
    with gzip.open(side, "rt") as f:
        series = json.load(f)
    read = []
    for s in socks:
        ser = series.get(f"{s['local']} {s['peer']}")
        if ser is None:
            read.append(s)
            continue
        delay = (meta.get("conditions") or {}).get(PATH_DELAY.get(s["direction"], "")) or 0.0
        least = [None if m is None else max(m, delay) for m in ser.get("minrtt_ms", [])]
        ser = ser | {"minrtt_ms": least}
        if not shaped(meta, s["direction"]):
            ser["srtt_ms"] = least
        read.append(kernel.resummarized(s, ser))
    return read
