"""Recordings for the detection corpus (issue 36): real traffic of other protocols, real
PostgreSQL through the kernel's own tunnel devices and through a VXLAN traffic mirror, and the
same packets captured twice by `tcpdump -i any` on a bridge. Everything runs in network
namespaces made here and deleted at the end (nothing touches the host's networking).

- `foreign(kind, out)`: HTTP (Python's http.server, curl), TLS (an HTTPS server on Python's ssl
  with a throwaway certificate, curl), SSH (dropbear, ssh: the banners, the key exchange and
  refused authentication, all real), BGP (two speakers of the lab's own: OPEN, KEEPALIVE,
  UPDATEs, NOTIFICATION, framed as RFC 4271 says), between a client and a server namespace.
- `tunnelled(kind, out)`: psql to PostgreSQL across a tunnel device of `kind` (vxlan, geneve,
  gre, gretap, erspan, ipip, sit), captured on the underlay; `kind` "mirror": PostgreSQL on a
  plain link whose server side is mirrored by tc into a VXLAN device, as AWS traffic mirroring
  delivers it, captured where the mirror arrives.
- `bridged_any(out)`: psql to PostgreSQL across the lab's bridge, captured with -i any in the
  bridge's namespace (each packet on the port it came in by and on the one it left by).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pktflow.errors import LabError
from pktflow.lab.network import Bridge
from pktflow.lab.scenarios import DATABASE, USER
from pktflow.lab.services import Services, need, require_root

UNDERLAY = {"client": "10.214.0.1", "server": "10.214.0.2", "collector": "10.214.1.2"}
MIRROR_LINK = "10.214.1.1"  # the server's end of its link to the collector
OVERLAY = {"client": "10.215.0.1", "server": "10.215.0.2"}
OVERLAY6 = {"client": "fd15::1", "server": "fd15::2"}
VNI, GENEVE_VNI, GRE_KEY, ERSPAN_SESSION, MIRROR_VNI = 42, 7, 9, 123, 3
PG_PORT = 5432
ROWS = 2000
QUERIES = ("SELECT * FROM t2k", "SELECT count(*) FROM t2k", "SELECT 1")


def tunnel_argv(kind: str, local: str, remote: str) -> list[str]:
    """`ip link add tun0 ...` for a tunnel of `kind` between two underlay addresses."""
    ends = ["local", local, "remote", remote]
    return ["ip", "link", "add", "tun0", "type", *{
        "vxlan": ["vxlan", "id", str(VNI), "dstport", "4789", *ends, "dev", "eth0"],
        "geneve": ["geneve", "id", str(GENEVE_VNI), "remote", remote],
        "gre": ["gre", "key", str(GRE_KEY), *ends],
        "gretap": ["gretap", "key", str(GRE_KEY), *ends],
        "erspan": ["erspan", "seq", "key", str(GRE_KEY), "erspan_ver", "1", "erspan",
                   str(ERSPAN_SESSION), *ends],
        "ipip": ["ipip", *ends],
        "sit": ["sit", *ends],
    }[kind]]


def supported(kind: str) -> str | None:
    """None when this kernel makes tunnel devices of `kind`, else why not."""
    if kind == "mirror":
        kind = "vxlan"
    ns = f"pktflow-{os.getpid()}-probe"
    subprocess.run(["ip", "netns", "add", ns], capture_output=True, timeout=30)
    try:
        argv = tunnel_argv(kind, "10.9.0.1", "10.9.0.2")[1:]
        if argv[-2:] == ["dev", "eth0"]:
            argv = argv[:-2]  # the probe's namespace has no underlay
        out = subprocess.run(["ip", "-n", ns, *argv], capture_output=True, text=True,
                             timeout=30)
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
    if out.returncode == 0:
        return None
    return f"this kernel makes no {kind} device ({out.stderr.strip() or out.returncode})"


class Pair(Bridge):
    """A client and a server namespace on a veth pair (the underlay), with a tunnel device
    between them (`kind`), or the server's link mirrored into VXLAN toward a collector
    namespace ("mirror"), or nothing (None). It is a Bridge to the lab's services (the same
    prefix, run and close), with its own addresses and capture point."""

    name = "pair"
    mtu = 1500

    def __init__(self, kind: str | None) -> None:
        self.kind = kind
        self.offloads, self.rate, self.rcvbuf = False, None, {}
        roles = ["client", "server"] + (["collector"] if kind == "mirror" else [])
        self.ns = {r: f"pktflow-{os.getpid()}-{r}" for r in roles}
        self.created: list[str] = []
        self.features: dict[str, str] = {}
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _ip(self, role: str, *argv: str) -> None:
        self._run(["ip", *argv], role)

    def _build(self) -> None:
        for role, ns in self.ns.items():
            subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True,
                           timeout=30)
            self.created.append(ns)
            self._ip(role, "link", "set", "lo", "up")
        self._run(["ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0",
                   "netns", self.ns["server"]], "client")
        for role in ("client", "server"):
            self._ip(role, "addr", "add", f"{UNDERLAY[role]}/24", "dev", "eth0")
            self._ip(role, "link", "set", "eth0", "up")
            self._ethtool(role, "eth0", "off")
        if self.kind == "mirror":
            self._mirror()
        elif self.kind is not None:
            self._tunnel(self.kind)

    def _tunnel(self, kind: str) -> None:
        for role, peer in (("client", "server"), ("server", "client")):
            self._run(tunnel_argv(kind, UNDERLAY[role], UNDERLAY[peer]), role)
            if kind == "sit":
                self._ip(role, "addr", "add", f"{OVERLAY6[role]}/64", "dev", "tun0")
            else:
                self._ip(role, "addr", "add", f"{OVERLAY[role]}/24", "dev", "tun0")
            self._ip(role, "link", "set", "tun0", "up")

    def _mirror(self) -> None:
        """The server's eth0, both ways, copied by tc into a VXLAN device whose far end is the
        collector (AWS traffic mirroring's delivery: VXLAN to UDP 4789, a VNI per session)."""
        self._run(["ip", "link", "add", "eth1", "type", "veth", "peer", "name", "eth0",
                   "netns", self.ns["collector"]], "server")
        # a jumbo link to the collector, as a mirror target has: a mirrored 1,500-byte frame
        # and its VXLAN headers fit whole
        self._ip("server", "addr", "add", f"{MIRROR_LINK}/24", "dev", "eth1")
        self._ip("server", "link", "set", "eth1", "mtu", "9000", "up")
        self._ip("collector", "addr", "add", f"{UNDERLAY['collector']}/24", "dev", "eth0")
        self._ip("collector", "link", "set", "eth0", "mtu", "9000", "up")
        self._run(["ip", "link", "add", "vxm", "type", "vxlan", "id", str(MIRROR_VNI),
                   "dstport", "4789", "local", MIRROR_LINK, "remote", UNDERLAY["collector"],
                   "dev", "eth1"], "server")
        self._ip("server", "link", "set", "vxm", "mtu", "8950", "up")
        mirror = ["protocol", "all", "u32", "match", "u32", "0", "0", "action", "mirred",
                  "egress", "mirror", "dev", "vxm"]
        self._run(["tc", "qdisc", "add", "dev", "eth0", "clsact"], "server")
        for way in ("ingress", "egress"):
            self._run(["tc", "filter", "add", "dev", "eth0", way, *mirror], "server")

    def host(self, role: str) -> str:
        if self.kind in (None, "mirror"):
            return UNDERLAY[role]
        return (OVERLAY6 if self.kind == "sit" else OVERLAY)[role]

    def capture_point(self, via: str) -> tuple[str, str]:
        return ("collector" if self.kind == "mirror" else "server"), "eth0"

    def metadata(self) -> dict[str, Any]:
        return {"kind": self.kind, "underlay": UNDERLAY, "namespaces": list(self.ns)}


def _postgres(svc: Services, host: str) -> None:
    svc.postgres(host, PG_PORT)
    psql = need("psql", "postgresql-client-15")
    svc.run([psql, "-X", "-q", "-h", host, "-p", str(PG_PORT), "-U", USER, "-d", DATABASE,
             "-c", f"CREATE TABLE t2k AS SELECT i AS id, repeat(md5(i::text), 3) AS payload "
                   f"FROM generate_series(1, {ROWS}) AS i"])


def _psql_queries(svc: Services, host: str) -> None:
    psql = need("psql", "postgresql-client-15")
    for sql in QUERIES:
        svc.run([psql, "-X", "-q", "-h", host, "-p", str(PG_PORT), "-U", USER, "-d", DATABASE,
                 "-c", sql], role="client", stdout=subprocess.DEVNULL)


def tunnelled(kind: str, out: Path) -> dict[str, Any]:
    """PostgreSQL through a tunnel of `kind` (or the VXLAN mirror), captured on the underlay
    (or where the mirror arrives) into `out`."""
    require_root()
    why = supported(kind)
    if why:
        raise LabError(why)
    with tempfile.TemporaryDirectory(prefix="pktflow-lab-") as tmp:
        net = Pair(kind)
        svc = Services(Path(tmp), net)
        try:
            server = net.host("server")
            _postgres(svc, server)
            where, iface = net.capture_point("direct")
            dump = svc.tcpdump(iface, out, "", where)
            _psql_queries(svc, server)
            drops = svc.stop_tcpdump(dump)
        finally:
            svc.close()
            net.close()
    return {"kind": kind, "server": server, "port": PG_PORT, "queries": list(QUERIES),
            "tcpdump_dropped": drops}


def bridged_any(out: Path) -> dict[str, Any]:
    """PostgreSQL across the lab's bridge, captured with -i any in the bridge's namespace."""
    require_root()
    with tempfile.TemporaryDirectory(prefix="pktflow-lab-") as tmp:
        net = Bridge()
        svc = Services(Path(tmp), net)
        try:
            server = net.host("server")
            _postgres(svc, server)
            dump = svc.tcpdump("any", out, f"tcp port {PG_PORT}", "bridge")
            _psql_queries(svc, server)
            drops = svc.stop_tcpdump(dump)
        finally:
            svc.close()
            net.close()
    return {"server": server, "port": PG_PORT, "queries": list(QUERIES),
            "tcpdump_dropped": drops}


FOREIGN_PORTS = {"http": 8080, "tls": 8443, "ssh": 2222, "bgp": 179}

_HTTPS = """
import http.server, ssl, sys
class H(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
srv = http.server.ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), H)
if len(sys.argv) > 3:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[3], sys.argv[4])
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
"""


def foreign(kind: str, out: Path) -> dict[str, Any]:
    """Another protocol's real traffic between two namespaces, captured on the server's link."""
    require_root()
    port = FOREIGN_PORTS[kind]
    with tempfile.TemporaryDirectory(prefix="pktflow-lab-") as tmp:
        work = Path(tmp)
        net = Pair(None)
        svc = Services(work, net)
        try:
            server = net.host("server")
            client_argv = _serve(kind, svc, work, server, port)
            dump = svc.tcpdump("eth0", out, f"tcp port {port}", "server")
            for argv in client_argv:
                svc.run(argv, as_user=False, role="client", stdout=subprocess.DEVNULL,
                        ok=(0, 255))
            drops = svc.stop_tcpdump(dump)
        finally:
            svc.close()
            net.close()
    return {"kind": kind, "server": server, "port": port, "tcpdump_dropped": drops}


def _serve(kind: str, svc: Services, work: Path, host: str, port: int) -> list[list[str]]:
    """Start `kind`'s server in the server namespace; the client commands to run."""
    py = sys.executable
    if kind in ("http", "tls"):
        for i, size in enumerate((20_000, 150_000, 400_000, 5_000)):
            (work / f"f{i}.bin").write_bytes(os.urandom(size))
        os.chmod(work, 0o755)
        argv = [py, "-c", _HTTPS, host, str(port)]
        scheme = "http"
        if kind == "tls":
            cert, key = work / "c.pem", work / "k.pem"
            svc.run([need("openssl", "openssl"), "req", "-new", "-x509", "-nodes", "-days",
                     "2", "-subj", "/CN=pktflow-lab", "-keyout", str(key), "-out", str(cert)],
                    as_user=False)
            argv += [str(cert), str(key)]
            scheme = "https"
        svc.procs.append(subprocess.Popen([*svc.net.prefix("server"), *argv], cwd=work,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True))
        svc.wait_ready(host, port, "server")
        urls = [f"{scheme}://{host}:{port}/f{i}.bin" for i in (0, 1, 2, 3, 1, 0)]
        return [[need("curl", "curl"), "-s", "-k", "-o", "/dev/null", *urls]] * 3
    if kind == "ssh":
        key = work / "host_key"
        svc.run([need("dropbearkey", "dropbear-bin"), "-t", "ed25519", "-f", str(key)],
                as_user=False)
        svc.procs.append(subprocess.Popen(
            [*svc.net.prefix("server"), need("dropbear", "dropbear-bin"), "-F", "-E", "-s",
             "-r", str(key), "-p", f"{host}:{port}"], cwd=work, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True))
        svc.wait_ready(host, port, "server")
        # the banners, the key exchange, then public-key authentication refused: real SSH,
        # encrypted after the key exchange
        return [[need("ssh", "openssh-client"), "-o", "BatchMode=yes", "-o",
                 "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o",
                 f"IdentityFile={work / 'none'}", "-p", str(port), f"lab@{host}", "true"]] * 3
    if kind == "bgp":
        speaker = Path(__file__).with_name("bgp.py")
        svc.procs.append(subprocess.Popen([*svc.net.prefix("server"), py, str(speaker),
                                           "listen", host, str(port)], cwd=work,
                                          start_new_session=True))
        svc.wait_ready(host, port, "server")
        time.sleep(0.2)
        return [[py, str(speaker), "connect", host, str(port)]]
    raise LabError(f"unknown protocol {kind!r}")
