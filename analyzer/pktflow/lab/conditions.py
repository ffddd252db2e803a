"""Network conditions for a recording: delay, loss, rate, small receive buffers, a slow reader.

All but the slow reader act inside the lab's own namespaces (`--network bridge`), so the host's
networking is never touched and deleting the namespaces removes every rule, qdisc, sysctl and
route with them.

- delay (`--delay MS` on the client's link, `--delay-back MS` on the pooler's link to the
  server): this kernel has neither netem nor fq, so the lab runs its own delay line:
  `iptables -A OUTPUT -p tcp -d PEER -j NFQUEUE --queue-num N --queue-bypass` in the
  receiving namespace (the client's; the pooler's for the back link) feeds `delayline.c`,
  which holds each packet MS milliseconds and accepts them in order. It holds the receiver's
  ACKs and requests, not the sender's data: TCP small queues would count held data as unsent
  and cap the sender's rate. The round trip gains MS; the handshake in the capture shows it.
- loss (`--loss PCT`): `iptables -A INPUT -p tcp -s PEER --sport PORT -m statistic --mode random
  --probability P -j DROP` in the client's namespace: after the capture point (the server's or
  the pooler's interface), so the capture holds the lost segments and their retransmissions.
  A counting rule after it gives the loss achieved. `--loss-back PCT` does the same in the
  pooler's namespace to what the server sends it (the capture, on the pooler's interface, sees
  each segment before its INPUT rules drop it).
- rate (`--rate`): tc tbf on each namespace's eth0 egress (network.py).
- receive buffers (`--client-rcvbuf`, `--pooler-rcvbuf`): net.ipv4.tcp_rmem in that namespace,
  min(4096, BYTES) BYTES BYTES: autotuning capped at BYTES.
- slow reader (`--slow-reader BYTES_PER_S`): the client runs with `clientshim.c` preloaded,
  which paces its reads from the socket (psql gathers a whole result before printing, so
  slowing its output would not slow the transfer).
- congestion control: cubic, pinned per route in every namespace (network.py); the host default
  may be bbr, and a namespace cannot change it by sysctl.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pktflow.errors import LabError, UsageError

if TYPE_CHECKING:
    from pktflow.lab.network import Bridge, Loopback
    from pktflow.lab.services import Services

HERE = Path(__file__).resolve().parent
QUEUE = {"client": 1, "pooler": 2}  # NFQUEUE numbers (queues are per namespace anyway)


@dataclass(frozen=True)
class Conditions:
    delay_ms: float | None = None  # added round trip, client's link
    delay_back_ms: float | None = None  # added round trip, pooler -> server link
    loss_pct: float | None = None  # random loss of the client's incoming segments
    loss_back_pct: float | None = None  # random loss of the pooler's segments from the server
    client_rcvbuf: int | None = None  # bytes: tcp_rmem max in the client's namespace
    pooler_rcvbuf: int | None = None  # bytes: tcp_rmem max in the pooler's namespace
    slow_reader: int | None = None  # bytes per second the client reads its socket at

    def shaped(self) -> bool:
        """Anything that needs the lab's namespaces (all but the slow reader)."""
        return any(v is not None for v in (self.delay_ms, self.delay_back_ms, self.loss_pct,
                                            self.loss_back_pct, self.client_rcvbuf,
                                            self.pooler_rcvbuf))

    def check(self, network: str, via: str) -> None:
        """The flags' values and the flags they need: a mistake is a usage error (exit 2)
        naming the flag, said before anything runs."""
        for name, v in (("--delay", self.delay_ms), ("--delay-back", self.delay_back_ms)):
            if v is not None and not 0 < v <= 10_000:
                raise UsageError(f"{name} {v:g}: give milliseconds, more than 0 and at most "
                                 "10000")
        for name, pct in (("--loss", self.loss_pct), ("--loss-back", self.loss_back_pct)):
            if pct is not None and not 0 < pct < 100:
                raise UsageError(f"{name} {pct:g}: give a percentage between 0 and 100")
        for name, b in (("--client-rcvbuf", self.client_rcvbuf),
                        ("--pooler-rcvbuf", self.pooler_rcvbuf)):
            if b is not None and b < 2048:
                raise UsageError(f"{name} {b}: give bytes, at least 2048")
        if self.slow_reader is not None and self.slow_reader < 100:
            raise UsageError(f"--slow-reader {self.slow_reader}: give bytes per second, >= 100")
        if network != "bridge" and self.shaped():
            given = self.flags(shaped_only=True)
            raise UsageError(f"{given} {_need(given)} --network bridge (acting inside the "
                             "lab's own namespaces)")
        if via == "direct":
            given = " ".join(f"{flag} {v:g}" for flag, v in (
                ("--delay-back", self.delay_back_ms), ("--loss-back", self.loss_back_pct),
                ("--pooler-rcvbuf", self.pooler_rcvbuf)) if v is not None)
            if given:
                raise UsageError(f"{given} {_need(given)} a pooler: add --via pgbouncer or "
                                 "--via pgpool")

    def tag(self) -> str:
        """A file-name part naming the conditions, e.g. rtt10ms-loss2pct."""
        def num(v: float) -> str:
            return f"{v:g}"
        parts = []
        if self.delay_ms is not None:
            parts.append(f"rtt{num(self.delay_ms)}ms")
        if self.delay_back_ms is not None:
            parts.append(f"backrtt{num(self.delay_back_ms)}ms")
        if self.loss_pct is not None:
            parts.append(f"loss{num(self.loss_pct)}pct")
        if self.loss_back_pct is not None:
            parts.append(f"backloss{num(self.loss_back_pct)}pct")
        if self.client_rcvbuf is not None:
            parts.append(f"rcvbuf{self.client_rcvbuf}")
        if self.pooler_rcvbuf is not None:
            parts.append(f"poolerrcvbuf{self.pooler_rcvbuf}")
        if self.slow_reader is not None:
            parts.append(f"slowreader{self.slow_reader}")
        return "-".join(parts)

    def flags(self, shaped_only: bool = False) -> str:
        """The command-line flags that set these conditions (those that need the lab's
        namespaces only, when asked)."""
        out = []
        for flag, v in (("--delay", self.delay_ms), ("--delay-back", self.delay_back_ms),
                        ("--loss", self.loss_pct), ("--loss-back", self.loss_back_pct),
                        ("--client-rcvbuf", self.client_rcvbuf),
                        ("--pooler-rcvbuf", self.pooler_rcvbuf),
                        ("--slow-reader", None if shaped_only else self.slow_reader)):
            if v is not None:
                out.append(f"{flag} {v:g}" if isinstance(v, float) else f"{flag} {v}")
        return " ".join(out)


def _need(flags: str) -> str:
    return "need" if flags.count("--") > 1 else "needs"


def tcp_rmem(limit: int) -> str:
    """net.ipv4.tcp_rmem for a receive buffer capped at `limit` bytes."""
    return f"{min(4096, limit)} {limit} {limit}"


def loss_rules(probability: float, peer: str, port: int) -> list[list[str]]:
    """iptables argv (without the namespace prefix): drop, then count what passed."""
    match = ["-p", "tcp", "-s", peer, "--sport", str(port)]
    return [["iptables", "-A", "INPUT", *match, "-m", "statistic", "--mode", "random",
             "--probability", f"{probability:.6f}", "-j", "DROP"],
            ["iptables", "-A", "INPUT", *match]]


def delay_rule(peer: str, queue: int) -> list[str]:
    return ["iptables", "-A", "OUTPUT", "-p", "tcp", "-d", peer, "-j", "NFQUEUE",
            "--queue-num", str(queue), "--queue-bypass"]


# the libraries each of the lab's C helpers links with
LIBS = {"delayline.c": ["-lnetfilter_queue"], "clientshim.c": ["-ldl"], "tcpinfo.c": []}


def build(source: str, out_dir: Path, *, shared: bool = False) -> Path:
    """Compile one of the lab's C helpers into `out_dir` (each run builds its own)."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise LabError("the lab's delay line, slow reader and kernel sampler are C: no "
                       "compiler found",
                       hint="apt-get install gcc")
    src = HERE / source
    out = out_dir / (src.stem + (".so" if shared else ""))
    argv = [gcc, "-O2", "-Wall", "-o", str(out), str(src)]
    argv += (["-shared", "-fPIC"] if shared else []) + LIBS[source]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if res.returncode != 0:
        raise LabError(f"could not build {source}: {res.stderr.strip()[-300:]}",
                       hint="apt-get install gcc libnetfilter-queue-dev")
    out.chmod(0o755)
    return out


class Shaper:
    """Applies `Conditions` to a running lab and reads back what they did.

    `start` after the servers are up and before the capture; `finish` once the client is done
    (stops the delay lines and collects their figures); `close` in any case (kills what is
    left). The rules themselves go with the namespaces."""

    def __init__(self, cond: Conditions, net: Loopback | Bridge, svc: Services, workdir: Path,
                 *, via: str, ports: dict[str, int]) -> None:
        self.cond, self.net, self.svc, self.workdir = cond, net, svc, workdir
        self.via, self.ports = via, ports
        self.delaylines: dict[str, tuple[subprocess.Popen[bytes], float]] = {}
        self.results: dict[str, Any] = {}
        self.shim: Path | None = None

    # the client's peer: the pooler when there is one
    def _peer(self) -> tuple[str, int]:
        if self.via == "direct":
            return self.net.host("server"), self.ports["postgres"]
        return self.net.host("pooler"), self.ports[self.via]

    def start(self) -> None:
        c = self.cond
        if c.slow_reader is not None:
            self.shim = build("clientshim.c", self.workdir, shared=True)
        links = []
        if c.delay_ms is not None:
            links.append(("client", self._peer()[0], c.delay_ms))
        if c.delay_back_ms is not None:
            links.append(("pooler", self.net.host("server"), c.delay_back_ms))
        if links:
            binary = build("delayline.c", self.workdir)
            for role, peer, ms in links:
                self._delayline(binary, role, peer, ms)
        for role, pct, (peer, port) in self._losses():
            for rule in loss_rules(pct / 100, peer, port):
                self._in(rule, role)

    def _losses(self) -> list[tuple[str, float, tuple[str, int]]]:
        """Where segments are dropped: (the receiving role, percent, the sender)."""
        c, out = self.cond, []
        if c.loss_pct is not None:
            out.append(("client", c.loss_pct, self._peer()))
        if c.loss_back_pct is not None:
            out.append(("pooler", c.loss_back_pct,
                        (self.net.host("server"), self.ports["postgres"])))
        return out

    def _in(self, argv: list[str], role: str) -> str:
        """`argv` in `role`'s namespace; conditions that need one imply the bridge."""
        from pktflow.lab.network import Bridge

        assert isinstance(self.net, Bridge)
        return self.net.run(argv, role)

    def _delayline(self, binary: Path, role: str, peer: str, ms: float) -> None:
        proc = self.svc.helper([str(binary), str(QUEUE[role]), str(round(ms * 1000))], role)
        assert proc.stdout is not None
        line = proc.stdout.readline().decode(errors="replace").strip()
        if line != "ready":
            proc.wait(timeout=5)
            raise LabError(f"the delay line did not start in {role}'s namespace: "
                           f"{(self.svc.workdir / 'lab.log').read_text()[-300:]}")
        self.delaylines[role] = (proc, ms)
        self._in(delay_rule(peer, QUEUE[role]), role)

    def client_env(self) -> dict[str, str]:
        if self.shim is None:
            return {}
        return {"LD_PRELOAD": str(self.shim), "PKTFLOW_SLOW_READER": str(self.cond.slow_reader)}

    def finish(self) -> dict[str, Any]:
        """Stop the delay lines and gather what the conditions did: packets held and how
        late, the kernel's queue counters, the loss achieved."""
        c, out = self.cond, {}
        for role, (proc, ms) in self.delaylines.items():
            queue = self._nfqueue_stats(role)
            proc.terminate()
            try:
                stdout, _ = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                stdout, _ = proc.communicate()
            lines = stdout.decode(errors="replace").strip().splitlines()
            stats = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
            out[f"delay_line_{role}"] = {"delay_ms": ms, **stats, **queue}
        self.delaylines.clear()
        for role, pct, _ in self._losses():
            text = self._in(["iptables", "-L", "INPUT", "-v", "-x", "-n"], role)
            counts = [int(m.group(1)) for m in re.finditer(r"^\s*(\d+)\s+\d+\s", text, re.M)]
            if len(counts) == 2:
                dropped, passed = counts
                out["loss" if role == "client" else "loss_back"] = {
                    "target_pct": pct, "dropped": dropped, "passed": passed,
                    "achieved_pct": round(100 * dropped / (dropped + passed), 3)
                    if dropped + passed else None}
        self.results = out
        return out

    def _nfqueue_stats(self, role: str) -> dict[str, Any]:
        """The kernel's view of the queue: packets it dropped (queue full) or could not hand
        over (user_dropped); both must be 0 for an honest delay."""
        try:
            text = self._in(["cat", "/proc/net/netfilter/nfnetlink_queue"], role)
        except LabError:
            return {}
        for line in text.splitlines():
            f = line.split()
            if len(f) >= 8 and int(f[0]) == QUEUE[role]:
                return {"queue_dropped": int(f[5]), "user_dropped": int(f[6])}
        return {}

    def close(self) -> None:
        for proc, _ in self.delaylines.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        self.delaylines.clear()

    def metadata(self) -> dict[str, Any]:
        c = self.cond
        peer, port = self._peer()
        how: dict[str, str] = {}
        if c.delay_ms is not None:
            how["delay"] = (f"NFQUEUE delay line (delayline.c) holding the client's outgoing "
                            f"TCP to {peer} {c.delay_ms:g} ms: "
                            + " ".join(delay_rule(peer, QUEUE['client'])))
        if c.delay_back_ms is not None:
            server = self.net.host("server")
            how["delay_back"] = (f"NFQUEUE delay line holding the pooler's outgoing TCP to "
                                 f"{server} {c.delay_back_ms:g} ms: "
                                 + " ".join(delay_rule(server, QUEUE['pooler'])))
        for role, pct, (sender, sport) in self._losses():
            how["loss" if role == "client" else "loss_back"] = (
                f"in the {role}'s namespace, after the capture point: " + "; ".join(
                    " ".join(r) for r in loss_rules(pct / 100, sender, sport)))
        if c.client_rcvbuf is not None:
            how["client_rcvbuf"] = f"net.ipv4.tcp_rmem = {tcp_rmem(c.client_rcvbuf)} (client)"
        if c.pooler_rcvbuf is not None:
            how["pooler_rcvbuf"] = f"net.ipv4.tcp_rmem = {tcp_rmem(c.pooler_rcvbuf)} (pooler)"
        if c.slow_reader is not None:
            how["slow_reader"] = (f"client run with LD_PRELOAD=clientshim.so "
                                  f"PKTFLOW_SLOW_READER={c.slow_reader}: its recv() calls paced "
                                  f"to {c.slow_reader:,} bytes/s, at most 0.1 s of bytes each")
        return {**asdict(c), "how": how, **self.results}

