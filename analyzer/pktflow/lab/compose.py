"""The lab inside the compose stack: one agent per container, running the native lab's code.

compose.yaml starts `python3 -m pktflow.lab.compose ROLE` in each container of one image:
`server` (service postgres), `pooler` (service pgbouncer) and `client`. Each container is one
of the native bridge's namespaces (network.py: the same addresses, MTU 1500, offloads off,
cubic pinned on the route, tbf for RATE), and each agent does there what `pktflow lab record`
does in that namespace, with the same code: `Services` starts PostgreSQL (initdb, trust for
the lab's subnet, the scenario's setup), PgBouncer with the lab's settings, tcpdump and the
`ss` samplers; `Shaper` applies the conditions that act in its namespace (the client's delay
line, loss and slow reader; the pooler's delay line and loss from the server); the kernel's
figures and the handshakes are read as natively, and the metadata file beside the capture has
the native one's fields.

The client conducts; the agents follow files in the run directory every container mounts:

    server.ready, pooler.ready   set up and listening, or failed (compose's healthchecks
                                 wait on them)
    server.failed, pooler.failed why: the client says it, and ends the run
    shape                        the client applied its conditions: apply yours
    server.shaped, pooler.shaped done so
    go                           the client warmed the pool, under every condition (its
                                 server connection carries them from its first packet, as
                                 on a real network): start sampling and capturing
    server.armed, pooler.armed   done so (the capture point's agent also runs tcpdump)
    ss-ROLE.txt, ss-ROLE.tick    a sender's samples, and its round tick (the client's shim
                                 holds its Terminate until each ticked twice)
    done                         the client program finished: stop, and report
    server.json, pooler.json     each agent's facts: its conditions' results, tcpdump's drops

The client then writes the capture and its metadata into /captures, owned by the owner of
that directory (the user who ran the stack), and exits: `--exit-code-from client` makes its
status the run's, and stops the rest. Any condition that cannot be applied ends the run with
one line saying why.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pktflow.errors import LabError, PktflowError, UsageError
from pktflow.lab.cli import summary
from pktflow.lab.conditions import Conditions, Shaper, build, tcp_rmem
from pktflow.lab.handshakes import handshakes
from pktflow.lab.kernel import Sampler, sampler_argv
from pktflow.lab.network import (ADDRESSES, CONGESTION_CONTROL, MTU, RATE, SUBNET, Bridge,
                                 cubic_route_argv, host_congestion_control, tbf_argv)
from pktflow.lab.record import (LINGER_CLIENTS, LINGER_MS, Recording, kernel_account,
                                metadata_path, require_complete, samples_path,
                                sending_sockets, write_metadata)
from pktflow.lab.scenarios import (DATABASE, PGBOUNCER_DEFAULTS, PGBOUNCER_PORT, POSTGRES_PORT,
                                   SCENARIOS, USER, render_command, render_setup)
from pktflow.lab.services import TCPDUMP_OPTIONS, Services, need, version

RUN = Path("/run/pktflow")  # the volume every container of the stack shares
CAPTURES = Path("/captures")  # the host's captures directory
WORK = Path("/var/lib/pktflow")  # this container's own: data directory, logs, helpers
SERVICES = {"server": "postgres", "pooler": "pgbouncer", "client": "client"}
WAIT_S = 120.0  # for another container's step (the longest: setting up pgdump's table)
COMPOSE_RUN = "docker-compose up --build --exit-code-from client; docker-compose down -v"


# -- what to record: compose's variables, named as `pktflow lab record`'s flags --------------

VARIABLES = {"DELAY": ("delay_ms", float), "DELAY_BACK": ("delay_back_ms", float),
             "LOSS": ("loss_pct", float), "LOSS_BACK": ("loss_back_pct", float),
             "CLIENT_RCVBUF": ("client_rcvbuf", int),
             "POOLER_RCVBUF": ("pooler_rcvbuf", int), "SLOW_READER": ("slow_reader", int)}
# which conditions act in which container
ROLE_CONDITIONS = {"client": ("delay_ms", "loss_pct", "slow_reader"),
                   "pooler": ("delay_back_ms", "loss_back_pct"), "server": ()}


@dataclass(frozen=True)
class Stack:
    scenario: str
    via: str  # direct | pgbouncer
    rate: str | None
    conditions: Conditions
    output: str  # the capture's file name in /captures

    @property
    def capture_role(self) -> str:
        """Where tcpdump runs: as natively, the pooler's one interface carries both legs."""
        return "server" if self.via == "direct" else "pooler"

    def conditions_of(self, role: str) -> Conditions:
        """The part of the conditions that acts in `role`'s container."""
        keep = ROLE_CONDITIONS[role]
        return Conditions(**{k: v for k, v in asdict(self.conditions).items() if k in keep})

    def recording(self) -> Recording:
        return Recording(self.scenario, via=self.via, network="compose",
                         pgbouncer=dict(PGBOUNCER_DEFAULTS), offloads=False, rate=self.rate,
                         conditions=self.conditions)

    def variables(self) -> str:
        """The compose variables that make this recording again."""
        out = [f"SCENARIO={self.scenario}", f"VIA={self.via}"]
        values = asdict(self.conditions)
        for var, (field, _) in VARIABLES.items():
            if values[field] is not None:
                out.append(f"{var}={values[field]:g}")
        if self.rate:
            out.append(f"RATE={self.rate}")
        if self.output != default_output(self.scenario, self.via, self.rate, self.conditions):
            out.append(f"OUTPUT={self.output}")
        return " ".join(out)


def default_output(scenario: str, via: str, rate: str | None, cond: Conditions) -> str:
    """compose-SCENARIO-via-VIA, and the conditions as the native lab tags them."""
    tag = "-".join(t for t in (f"rate{rate}" if rate else "", cond.tag()) if t)
    return f"compose-{scenario}-via-{via}{'-' + tag if tag else ''}.pcap"


def _flags_as_variables(text: str) -> str:
    """The native lab's messages name its flags (`--delay-back 5`); here they are compose's
    variables (`DELAY_BACK=5`)."""
    text = text.replace("add --via pgbouncer or --via pgpool", "set VIA=pgbouncer")

    def variable(m: re.Match[str]) -> str:
        name = m.group(1).upper().replace("-", "_")
        return f"{name}={m.group(2)}" if m.group(2) else name
    return re.sub(r"--([a-z][a-z-]*)(?: ([0-9][0-9.]*))?", variable, text)


def stack_from(env: dict[str, str]) -> Stack:
    scenario = env.get("SCENARIO") or "seqscan-10k"
    composed = sorted(s.name for s in SCENARIOS.values() if s.compose)
    if scenario not in composed:
        raise LabError(f"SCENARIO={scenario}: the stack records {', '.join(composed)}")
    via = env.get("VIA") or "pgbouncer"
    if via not in ("direct", "pgbouncer"):
        raise LabError(f"VIA={via}: use direct or pgbouncer (Pgpool-II is the native lab's)")
    values: dict[str, Any] = {}
    for var, (field, kind) in VARIABLES.items():
        raw = env.get(var, "").strip()
        if raw:
            try:
                values[field] = kind(raw)
            except ValueError:
                raise LabError(f"{var}={raw}: give a number") from None
    cond = Conditions(**values)
    try:
        cond.check("bridge", via)
    except UsageError as exc:  # a bad value here is the run's failure: the client's exit 7
        raise LabError(_flags_as_variables(exc.reason)) from None
    rate = env.get("RATE", "").strip() or None
    if rate is not None and not RATE.match(rate):
        raise LabError(f"RATE={rate}: give a tc rate such as 20mbit or 1gbit")
    output = env.get("OUTPUT", "").strip() or default_output(scenario, via, rate, cond)
    if "/" in output or not re.search(r"\.pcap(\.gz)?$", output):
        raise LabError(f"OUTPUT={output}: give a file name ending in .pcap or .pcap.gz "
                       "(it is written in the captures directory)")
    return Stack(scenario, via, rate, cond, output)


# -- the network: Docker's bridge, seen from one of its containers ---------------------------

class DockerBridge(Bridge):
    """The bridge network compose.yaml asks Docker for, laid out as the native lab's (the same
    subnet and addresses, MTU 1500), seen from the container of `role`: this process acts on
    its own namespace only. Docker made the namespaces, veths and bridge, and deletes them
    with the stack; the host-side veths and the bridge are the host's, left alone."""

    name = "compose"

    def __init__(self, role: str, *, rate: str | None) -> None:
        # Bridge.__init__ would build namespaces; Docker did
        self.role = role
        self.offloads = False
        self.rate = rate
        self.rcvbuf = {}
        self.ns = {r: f"the {SERVICES[r]} container" for r in SERVICES}
        self.created = []
        self.features = {}

    def configure(self) -> None:
        """What the native bridge does in each role's namespace: check the address, offloads
        off, cubic on the route, the rate. Receive steering (RPS) needs /sys, read-only in a
        container: it is left as Docker set it, and the metadata says so."""
        addr = self.run(["ip", "-4", "-o", "addr", "show", "dev", "eth0"], self.role)
        if f" {ADDRESSES[self.role]}/" not in addr or f" mtu {MTU} " not in self.run(
                ["ip", "-o", "link", "show", "dev", "eth0"], self.role):
            raise LabError(f"eth0 of {self.ns[self.role]} is not {ADDRESSES[self.role]} with "
                           f"MTU {MTU} (compose.yaml's network): {addr.strip()}")
        self._ethtool(self.role, "eth0", "off")
        self.run(cubic_route_argv(self.role), self.role)
        if self.rate:
            self.run(tbf_argv("eth0", self.rate), self.role)

    def prefix(self, role: str) -> list[str]:
        if role != self.role:
            raise LabError(f"the {role}'s namespace is {self.ns[role]}, not this one "
                           f"({self.ns[self.role]})")
        return []

    def facts(self) -> dict[str, Any]:
        """This container's part of the metadata; the client merges the three."""
        return {"offloads_seen": self.features,
                "tcp_rmem": [int(x) for x in
                             Path("/proc/sys/net/ipv4/tcp_rmem").read_text().split()]}

    def close(self) -> None:
        pass


def network_metadata(rate: str | None, facts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The native bridge's network fields (Bridge.metadata), from each container's facts."""
    return {"mtu": MTU, "offloads": {f: "off" for f in ("tso", "gso", "gro")},
            "offloads_seen": {k: v for f in facts.values() for k, v in
                              f["offloads_seen"].items()},
            "rate": f"{rate} (tc tbf on each container's eth0 egress)" if rate else None,
            "receive_steering": "as Docker set it: /sys is read-only in a container",
            "addresses": dict(ADDRESSES), "subnet": SUBNET,
            "congestion_control": f"{CONGESTION_CONTROL} (ip route change {SUBNET} ... "
                                  f"congctl {CONGESTION_CONTROL} in each container; host "
                                  f"default {host_congestion_control()})",
            "tcp_rmem": {r: f["tcp_rmem"] for r, f in facts.items()},
            "namespaces": "the compose stack's containers: " + ", ".join(
                SERVICES[r] for r in facts)}


# -- the run directory ---------------------------------------------------------------------

def mark(name: str, text: str = "") -> None:
    tmp = RUN / f".{name}.tmp"
    tmp.write_text(text)
    tmp.rename(RUN / name)  # whole or absent: another container may be reading


def wait_for(*names: str, timeout: float = WAIT_S, why: str = "",
             watch: tuple[str, ...] = ()) -> None:
    """Until every file named exists. An agent of `watch` that failed ends the wait with its
    reason (ROLE.failed): the client watches the others, and says it for them."""
    end = time.monotonic() + timeout
    while True:
        for role in watch:
            failed = RUN / f"{role}.failed"
            if failed.exists():
                raise LabError(f"the {SERVICES[role]} container: {failed.read_text()}")
        if all((RUN / n).exists() for n in names):
            return
        if time.monotonic() > end:
            missing = [n for n in names if not (RUN / n).exists()]
            raise LabError(f"no {', '.join(missing)} after {timeout:.0f} s{why}")
        time.sleep(0.01)


class Follow:
    """A growing file's lines, as `tail -f` gives them, until `until` exists and the file is
    read to its end: a sampler's output, written in another container."""

    def __init__(self, path: Path, until: Path) -> None:
        self.path, self.until = path, until

    def __iter__(self) -> Iterator[bytes]:
        wait_for(self.path.name)
        with open(self.path, "rb") as f:
            part = b""
            while True:
                line = f.readline()
                if line.endswith(b"\n"):
                    yield part + line
                    part = b""
                    continue
                part += line
                if self.until.exists():
                    rest = part + f.read()
                    yield from (ln + b"\n" for ln in rest.splitlines())
                    return
                time.sleep(0.005)


# -- the agents ----------------------------------------------------------------------------

def _sampler(svc: Services, role: str, port: int) -> subprocess.Popen[bytes]:
    """The native kernel sampler (kernel.sampler_argv) with its output in the run directory."""
    out = open(RUN / f"ss-{role}.txt", "wb")
    binary = str(build("tcpinfo.c", svc.workdir))
    proc = subprocess.Popen(sampler_argv(binary, [port], os.getpid(),
                                         str(RUN / f"ss-{role}.tick")),
                            stdout=out, stderr=subprocess.DEVNULL, start_new_session=True)
    svc.helpers.append(proc)  # Services.close ends its process group
    return proc


def follow(stack: Stack, net: DockerBridge, svc: Services) -> None:
    """The server's and the pooler's part, once their program listens: on `shape` apply this
    container's conditions; on `go` (the pool is warm) sample the sending sockets and, at the
    capture point, capture; on `done` stop and report."""
    role = net.role
    mark(f"{role}.ready")
    wait_for("shape", timeout=10 * WAIT_S, why=" (the client did not start)")
    pooled = stack.via != "direct"
    ports = {"postgres": POSTGRES_PORT} | ({stack.via: PGBOUNCER_PORT} if pooled else {})
    shaper = Shaper(stack.conditions_of(role), net, svc, svc.workdir, via=stack.via,
                    ports=ports)
    try:
        shaper.start()
        mark(f"{role}.shaped")
        wait_for("go", timeout=WAIT_S, why=" (the client did not warm the pool)")
        sends = {"server": POSTGRES_PORT, "pooler": PGBOUNCER_PORT if pooled else None}[role]
        sampler = _sampler(svc, role, sends) if sends else None
        dump = None
        if role == stack.capture_role:
            bpf = " or ".join(f"tcp port {p}" for p in ports.values())
            dump = svc.tcpdump("eth0", RUN / "capture.pcap", bpf, role)
        mark(f"{role}.armed")
        wait_for("done", timeout=100 * WAIT_S, why=" (the client did not finish)")
        facts: dict[str, Any] = {"network": net.facts()}
        if dump is not None:
            facts["tcpdump_dropped"] = svc.stop_tcpdump(dump)
        if sampler is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(sampler.pid, signal.SIGKILL)
            sampler.wait()
        facts["conditions"] = shaper.finish()
        mark(f"{role}.json", json.dumps(facts))
    finally:
        shaper.close()


def serve(stack: Stack, net: DockerBridge, svc: Services) -> None:
    if net.role == "server":
        host = net.host("server")
        svc.postgres(host, POSTGRES_PORT)
        setup = render_setup(SCENARIOS[stack.scenario], host=host, port=POSTGRES_PORT)
        svc.run([need(setup[0], "postgresql-client-15"), *setup[1:]])
    elif stack.via == "pgbouncer":
        svc.pgbouncer(net.host("pooler"), PGBOUNCER_PORT, net.host("server"), POSTGRES_PORT,
                      dict(PGBOUNCER_DEFAULTS))
    follow(stack, net, svc)
    signal.pause()  # serve until compose stops the stack (SIGTERM)


def conduct(stack: Stack, net: DockerBridge, svc: Services) -> dict[str, Any]:
    """The client's part: what `record` does around the client program, with the servers'
    steps done by their containers' agents. Returns the metadata."""
    scen = SCENARIOS[stack.scenario]
    others = ("server", "pooler")
    wait_for("server.ready", "pooler.ready", watch=others)
    psql = need("psql", "postgresql-client-15")
    pooled = stack.via != "direct"
    host, port = ((net.host("pooler"), PGBOUNCER_PORT) if pooled
                  else (net.host("server"), POSTGRES_PORT))
    ports = {"postgres": POSTGRES_PORT} | ({stack.via: port} if pooled else {})
    shaper = Shaper(stack.conditions_of("client"), net, svc, svc.workdir, via=stack.via,
                    ports=ports)
    try:
        # every condition in force before the pool is warmed, as natively (record.py)
        shaper.start()
        mark("shape")
        wait_for("server.shaped", "pooler.shaped", watch=others)
        if pooled:  # the pooled server connection exists before the capture, as natively
            svc.run([psql, "-X", "-q", "-h", host, "-p", str(port), "-U", USER, "-d",
                     DATABASE, "-c", "SELECT 1"], role="client")
        mark("go")
        wait_for("server.armed", "pooler.armed", watch=others)
        senders = ["server", "pooler"] if pooled else ["server"]
        samplers = [Sampler(Follow(RUN / f"ss-{r}.txt", RUN / f"{r}.json"), r) for r in senders]
        for s in samplers:  # as natively: a round with every open socket idle, then start
            s.idle_round.wait(5.0)
            s.freeze()
        argv = render_command(scen, host=host, port=port)
        env = dict(scen.env) | shaper.client_env()
        linger = argv[0] in LINGER_CLIENTS and not scen.tls
        if linger:
            env |= {"LD_PRELOAD": str(shaper.shim or build("clientshim.c", svc.workdir,
                                                            shared=True)),
                    "PKTFLOW_LINGER_MS": str(LINGER_MS),
                    "PKTFLOW_LINGER_TICKS": ":".join(str(RUN / f"ss-{r}.tick")
                                                     for r in senders)}
        t0 = time.time()
        svc.run([need(argv[0], "postgresql-client-15"), *argv[1:]], role="client",
                stdout=subprocess.DEVNULL, env=env, ok=scen.ok_codes)
        elapsed = time.time() - t0
        mark("done")
        wait_for("server.json", "pooler.json", watch=others)
        facts = {r: json.loads((RUN / f"{r}.json").read_text()) for r in ("server", "pooler")}
        sockets, seen = sending_sockets(samplers, stack.via, POSTGRES_PORT, port)
        results = shaper.finish()
    finally:
        shaper.close()
    # the native record of every condition, with what the client's and the pooler's did
    whole = Shaper(stack.conditions, net, svc, svc.workdir, via=stack.via, ports=ports)
    conditions = whole.metadata() | results | facts["pooler"]["conditions"]
    bpf = " or ".join(f"tcp port {p}" for p in ports.values())
    where = SERVICES[stack.capture_role]
    return {
        "scenario": stack.scenario, "description": scen.description, "via": stack.via,
        "network": net.name,
        **network_metadata(stack.rate, {"client": net.facts(),
                                        "pooler": facts["pooler"]["network"],
                                        "server": facts["server"]["network"]}),
        "rows": scen.default_rows,
        "row_layout": "id int, payload text of 96 characters (3 x md5)",
        "client_command": " ".join(f"{k}={v}" for k, v in scen.env)
        + (" " if scen.env else "") + " ".join(argv),
        "ports": ports,
        "pgbouncer_settings": dict(PGBOUNCER_DEFAULTS) if pooled else None,
        "pgpool_settings": None,
        "pool_warmed_before_capture": True if pooled else None,
        "conditions": conditions,
        "client_env": {k: v for k, v in env.items()
                       if k.startswith("PKTFLOW_") and k != "PKTFLOW_LINGER_TICKS"} or None,
        "client_seconds": round(elapsed, 3),
        "tcpdump_dropped": facts[stack.capture_role]["tcpdump_dropped"],
        "capture_point": f"{where} container, eth0",
        "tcpdump_command": f"tcpdump -i eth0 {' '.join(TCPDUMP_OPTIONS)} -w {stack.output} "
                           f"'{bpf}' (in the {where} container)",
        "versions": {"postgres": version([need("postgres", "postgresql-15"), "--version"]),
                     "pgbouncer": version(["pgbouncer", "--version"]) if pooled else None,
                     "pgpool": None,
                     "tcpdump": version(["tcpdump", "--version"]),
                     "kernel": platform.release()},
        "remake": f"{stack.variables()} {COMPOSE_RUN}",
        "recording": asdict(stack.recording()),
        "kernel": kernel_account(linger, sockets, seen),
    }


def deliver(stack: Stack, meta: dict[str, Any]) -> Path:
    """The capture and its metadata into /captures, owned as that directory is."""
    pcap = RUN / "capture.pcap"
    meta["handshakes"] = handshakes(pcap)
    out = CAPTURES / stack.output
    if out.suffix == ".gz":
        with open(pcap, "rb") as src, gzip.open(out, "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    else:
        shutil.copyfile(pcap, out)
    write_metadata(meta, out)
    owner = CAPTURES.stat()
    for f in (out, metadata_path(out), samples_path(out)):
        os.chown(f, owner.st_uid, owner.st_gid)
    return out


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str]) -> int:
    role = argv[0] if argv else ""
    if role not in SERVICES:
        print(f"usage: python3 -m pktflow.lab.compose {'|'.join(SERVICES)}", file=sys.stderr)
        return 2
    # compose stops the stack with SIGTERM: unwind, so that Services stops what it started.
    # The servers' end is their normal one; the client's is an interrupted run (Ctrl-C on
    # `up`), which must not pass for a recording.
    signal.signal(signal.SIGTERM, _interrupted if role == "client" else lambda *_: sys.exit(0))
    if role == "server":
        # a container started again keeps its files: each run is a fresh one, as natively
        # (the server's container starts first, the others once it is ready)
        for old in RUN.iterdir():
            if old.is_file():
                old.unlink()
    if role == "client":
        return run(role)
    # The server and the pooler report a failure to the client, which says it and ends the
    # run with its status (`--exit-code-from client`): they mark themselves ready, so that
    # compose starts it, and wait to be stopped.
    try:
        stack_from(dict(os.environ))
    except PktflowError as exc:  # the client reads the same variables, and says so
        mark(f"{role}.failed", exc.one_line())
    else:
        try:
            run(role)
        except Exception as exc:  # a bug: its traceback in this container's log
            traceback.print_exc()
            mark(f"{role}.failed", f"internal error: {exc!r}")
    mark(f"{role}.ready")
    signal.pause()
    return 0


def run(role: str) -> int:
    svc: Services | None = None
    try:
        stack = stack_from(dict(os.environ))
        net = DockerBridge(role, rate=stack.rate)
        net.configure()
        rcvbuf = {"client": stack.conditions.client_rcvbuf,
                  "pooler": stack.conditions.pooler_rcvbuf}.get(role)
        if rcvbuf is not None:  # compose.yaml's sysctls: check that they took
            got = Path("/proc/sys/net/ipv4/tcp_rmem").read_text().split()
            if got != tcp_rmem(rcvbuf).split():
                raise LabError(f"net.ipv4.tcp_rmem is {' '.join(got)} in {net.ns[role]}, not "
                               f"{tcp_rmem(rcvbuf)}: compose.yaml's sysctls did not apply")
        if WORK.exists():
            shutil.rmtree(WORK)
        WORK.mkdir(parents=True)
        svc = Services(WORK, net)
        if role != "client":
            serve(stack, net, svc)
            return 0
        meta = conduct(stack, net, svc)
        out = deliver(stack, meta)
        print("\n".join(summary(meta, f"captures/{out.name}",
                                f"captures/{metadata_path(out).name}")))
        require_complete(meta, out)
        return 0
    except PktflowError as exc:
        if role == "client":
            print(f"pktflow compose: {exc.one_line()}", file=sys.stderr)
        else:  # the client says it, once
            mark(f"{role}.failed", exc.one_line())
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print("pktflow compose: interrupted; nothing recorded", file=sys.stderr)
        return 130
    finally:
        if svc is not None:
            svc.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
