"""Where the lab's processes run: loopback, or three network namespaces on a Linux bridge.

`loopback` puts client, pooler and server on 127.0.0.1 (MTU 65,536), as the PGECons study did.

`bridge` builds, per run, four namespaces named `pktflow-<pid>-{bridge,client,pooler,server}`:
the bridge namespace holds a Linux bridge and one veth per role; the peer of each veth is
`eth0` in that role's namespace, with a private address. MTU 1500, TSO/GSO/GRO switched on or
off with ethtool on every interface, receive packet steering on every veth (see `_steer`), an
optional token-bucket rate (tc tbf) on each role's `eth0` egress, congestion control pinned to
cubic on every namespace's route (`ip route change ... congctl cubic`: the host default may be
bbr, and a namespace cannot change its default by sysctl), and optionally a small receive
buffer (net.ipv4.tcp_rmem) in the client's or the pooler's namespace. Nothing is created in the
host's namespace, so its networking stays untouched and parallel runs never collide; `close()`
deletes the namespaces, and with them every interface, route, qdisc, iptables rule and sysctl.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

from pktflow.errors import LabError, UsageError
from pktflow.lab.conditions import tcp_rmem

ROLES = ("client", "pooler", "server")
SUBNET = "10.213.0.0/24"
ADDRESSES = {"client": "10.213.0.10", "pooler": "10.213.0.20", "server": "10.213.0.30"}
MTU = 1500
OFFLOAD_FEATURES = ("tso", "gso", "gro")
RATE = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit)$")
CONGESTION_CONTROL = "cubic"


def tbf_argv(dev: str, rate: str) -> list[str]:
    """The rate limit on one interface (the compose stack's containers apply the same)."""
    return ["tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", "64kb",
            "latency", "100ms"]


def cubic_route_argv(role: str) -> list[str]:
    """The connected route carries every connection of the lab: pin its congestion control
    there (a route metric overrides the namespace's default, which a namespace cannot set)."""
    return ["ip", "route", "change", SUBNET, "dev", "eth0", "proto", "kernel", "scope", "link",
            "src", ADDRESSES[role], "congctl", CONGESTION_CONTROL]


def host_congestion_control() -> str:
    try:
        return Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    except OSError:
        return "unknown"


def _ip(*argv: str, ns: str | None = None) -> str:
    cmd = ["ip", *(("-n", ns) if ns else ()), *argv]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise LabError(f"{' '.join(cmd)} failed: {out.stderr.strip()[-300:]}",
                       hint="the bridge network needs root and iproute2")
    return out.stdout


class Loopback:
    name = "loopback"
    mtu = 65536

    def host(self, role: str) -> str:
        return "127.0.0.1"

    def prefix(self, role: str) -> list[str]:
        """argv prefix that runs a program in `role`'s network namespace (none here)."""
        return []

    def capture_point(self, via: str) -> tuple[str, str]:
        """(role whose namespace tcpdump runs in, interface)"""
        return "server", "lo"

    def metadata(self) -> dict[str, Any]:
        return {"mtu": self.mtu, "offloads": "loopback (no NIC offloads)",
                "addresses": {r: self.host(r) for r in ROLES},
                "congestion_control": f"{host_congestion_control()} (the host's default: "
                                      "loopback uses the host's routes, which the lab leaves "
                                      "alone)"}

    def close(self) -> None:
        pass


class Bridge:
    name = "bridge"
    mtu = MTU

    def __init__(self, *, offloads: bool = False, rate: str | None = None,
                 rate_at: str | None = None, rcvbuf: dict[str, int] | None = None) -> None:
        self.offloads = offloads
        self.rate = rate
        self.rate_at = rate_at
        self.rcvbuf = rcvbuf or {}
        stem = f"pktflow-{os.getpid()}-"
        self.ns = {r: stem + r for r in (*ROLES, "bridge")}
        self.created: list[str] = []
        self.features: dict[str, str] = {}
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        br = self.ns["bridge"]
        for ns in self.ns.values():
            _ip("netns", "add", ns)
            self.created.append(ns)
            _ip("link", "set", "lo", "up", ns=ns)
        _ip("link", "add", "br0", "mtu", str(MTU), "type", "bridge", ns=br)
        for role in ROLES:
            port = f"to-{role}"
            _ip("link", "add", port, "mtu", str(MTU), "type", "veth", "peer", "name", "eth0",
                "netns", self.ns[role], ns=br)
            _ip("link", "set", port, "master", "br0", "up", ns=br)
            _ip("link", "set", "eth0", "mtu", str(MTU), "up", ns=self.ns[role])
            _ip("addr", "add", f"{ADDRESSES[role]}/24", "dev", "eth0", ns=self.ns[role])
            _ip(*cubic_route_argv(role)[1:], ns=self.ns[role])
            if role in self.rcvbuf:
                self.run(["sysctl", "-q", "-w",
                          f"net.ipv4.tcp_rmem={tcp_rmem(self.rcvbuf[role])}"], role)
        _ip("link", "set", "br0", "up", ns=br)
        state = "on" if self.offloads else "off"
        for role, dev in [("bridge", "br0"), *((("bridge", f"to-{r}") for r in ROLES)),
                          *(((r, "eth0") for r in ROLES))]:
            self._ethtool(role, dev, state)
            if dev != "br0":
                self._steer(role, dev)
            if self.rate and role != "bridge" and self.rate_at in (None, role):
                # shape where the sender is, as a NIC's line rate does: the sending socket
                # feels the full queue (TCP small queues) instead of packets being dropped
                self._run(tbf_argv(dev, self.rate), role)

    def run(self, argv: list[str], role: str) -> str:
        """Run `argv` in `role`'s namespace (as root) and return its output."""
        return self._run(argv, role)

    def _run(self, argv: list[str], role: str) -> str:
        cmd = [*self.prefix(role), *argv]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        if out.returncode != 0:
            raise LabError(f"{' '.join(argv)} in {self.ns[role]} failed: "
                           f"{out.stderr.strip()[-300:]}")
        return out.stdout

    def _steer(self, role: str, dev: str) -> None:
        """Receive packet steering by flow hash on a veth. Without it a veth delivers on the
        CPU the sender runs on, so a sender moving between CPUs reorders its own segments
        (SACKs, DSACKs and spurious retransmissions on long transfers, none of them loss)."""
        cpus = os.sched_getaffinity(0)
        mask = f"{sum(1 << c for c in cpus):x}"
        groups = [mask[max(0, i - 8):i] for i in range(len(mask), 0, -8)][::-1]
        self._run(["sh", "-c", f"for q in /sys/class/net/{dev}/queues/rx-*; do "
                   f"echo {','.join(groups)} > $q/rps_cpus; done"], role)

    def _ethtool(self, role: str, dev: str, state: str) -> None:
        self._run(["ethtool", "-K", dev, *(x for f in OFFLOAD_FEATURES for x in (f, state))],
                  role)
        shown = self._run(["ethtool", "-k", dev], role)
        names = {"tso": "tcp-segmentation-offload", "gso": "generic-segmentation-offload",
                 "gro": "generic-receive-offload"}
        got = {}
        for short, long in names.items():
            m = re.search(rf"^{long}: (\w+)", shown, re.M)
            got[short] = m.group(1) if m else "unknown"
        self.features[f"{role}/{dev}"] = ", ".join(f"{k} {v}" for k, v in got.items())
        if state == "off" and any(v == "on" for v in got.values()):
            raise LabError(f"could not switch offloads off on {dev} in {self.ns[role]}: {got}")

    def host(self, role: str) -> str:
        return ADDRESSES[role]

    def prefix(self, role: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns[role]]

    def capture_point(self, via: str) -> tuple[str, str]:
        # the pooler's one interface carries both legs; direct, the server's carries the one
        return ("pooler" if via in ("pgbouncer", "pgpool") else "server"), "eth0"

    def metadata(self) -> dict[str, Any]:
        return {"mtu": MTU, "offloads": {f: "on" if self.offloads else "off"
                                         for f in OFFLOAD_FEATURES},
                "offloads_seen": self.features,
                "rate": (f"{self.rate} (tc tbf on each namespace's eth0 egress)"
                         if self.rate_at is None else
                         f"{self.rate} (tc tbf on the {self.rate_at}'s eth0 egress only)")
                if self.rate else None,
                "receive_steering": "RPS by flow hash on every veth, all CPUs",
                "addresses": {r: ADDRESSES[r] for r in ROLES}, "subnet": SUBNET,
                "congestion_control": f"{CONGESTION_CONTROL} (ip route change {SUBNET} ... "
                                      f"congctl {CONGESTION_CONTROL} in each namespace; host "
                                      f"default {host_congestion_control()})",
                "tcp_rmem": {r: [int(x) for x in self.run(["sysctl", "-n", "net.ipv4.tcp_rmem"],
                                                          r).split()] for r in ROLES} if self.created else None,
                "namespaces": "pktflow-<pid>-{" + ",".join(self.ns) + "}"}

    def close(self) -> None:
        # deleting a namespace deletes its interfaces; veth peers and the bridge go with them
        while self.created:
            ns = self.created.pop()
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def check_options(name: str, offloads: bool | None, rate: str | None,
                  rate_at: str | None = None) -> None:
    """The network's flags: a mistake is a usage error naming the flag (the receive buffers
    are conditions, checked with them)."""
    if name not in ("loopback", "bridge"):
        raise UsageError(f"--network {name}: use loopback or bridge")
    if rate is not None and not RATE.match(rate):
        raise UsageError(f"--rate {rate}: give a tc rate such as 100mbit or 1gbit")
    if rate_at is not None and rate_at not in ROLES:
        raise UsageError(f"--rate-at {rate_at}: give one of {', '.join(ROLES)}")
    if rate_at is not None and rate is None:
        raise UsageError(f"--rate-at {rate_at} needs --rate (the rate to shape with)")
    given = " ".join(flag for flag, v in ((f"--offloads {'on' if offloads else 'off'}",
                                           offloads is not None), (f"--rate {rate}", rate),
                                          (f"--rate-at {rate_at}", rate_at))
                     if v)
    if name == "loopback" and given:
        raise UsageError(f"{given} {'need' if given.count('--') > 1 else 'needs'} --network "
                         "bridge (loopback has no NIC to shape or offload)")


def make_network(name: str, *, offloads: bool | None = None, rate: str | None = None,
                 rate_at: str | None = None, rcvbuf: dict[str, int] | None = None
                 ) -> Loopback | Bridge:
    """The lab's network, from options check_options (and the conditions' check) passed."""
    if name == "loopback":
        return Loopback()
    return Bridge(offloads=bool(offloads), rate=rate, rate_at=rate_at, rcvbuf=rcvbuf)
