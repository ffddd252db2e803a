"""Throwaway PostgreSQL, PgBouncer and tcpdump processes for one recording.

Every process started here is tracked and stopped by `Services.close()`, also on failure or
Ctrl-C; nothing is ever stopped by name.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pktflow.errors import LabError
from pktflow.lab.network import Bridge, Loopback
from pktflow.lab.scenarios import DATABASE, PGPOOL_SETTINGS, POSTGRES_MAJOR, USER

PG_BIN = Path(f"/usr/lib/postgresql/{POSTGRES_MAJOR}/bin")
# Full packets, a 256 MiB kernel buffer (KiB), buffered writes (no -U: a write per packet
# makes tcpdump drop packets on a 1 GB dump; SIGINT flushes the buffer).
TCPDUMP_OPTIONS = ["-s", "0", "-B", "262144"]
# The unprivileged account the servers run as: PostgreSQL and PgBouncer refuse root.
RUN_AS = "postgres"


def need(program: str, package: str) -> str:
    # PostgreSQL's servers live outside PATH; pgpool and tcpdump in /usr/sbin, which a
    # non-login root shell may not have on PATH
    path = shutil.which(program) or next(
        (str(d / program) for d in (PG_BIN, Path("/usr/sbin")) if (d / program).exists()), None)
    if path is None:
        raise LabError(f"{program} is not installed", hint=f"apt-get install {package}")
    return path


def free_port(preferred: int = 0) -> int:
    """`preferred` if nothing listens there (captures then show the usual ports), else any."""
    for port in (preferred, 0) if preferred else (0,):
        with socket.socket() as s:
            # as the servers do: connections of an earlier run in TIME_WAIT must not count
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise LabError("no free TCP port on 127.0.0.1")


def version(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except OSError:
        return "unknown"
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) \
        else "unknown"


def require_root() -> None:
    if os.geteuid() != 0:
        raise LabError("the lab must run as root (it starts tcpdump and servers as "
                       f"the {RUN_AS} user)", hint="run it with sudo")


class Services:
    def __init__(self, workdir: Path, net: Loopback | Bridge | None = None) -> None:
        require_root()
        try:
            self.account = pwd.getpwnam(RUN_AS)
        except KeyError:
            raise LabError(f"no '{RUN_AS}' user", hint="apt-get install postgresql-15") from None
        self.workdir = workdir
        self.net = net or Loopback()
        os.chown(workdir, self.account.pw_uid, self.account.pw_gid)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.helpers: list[subprocess.Popen[bytes]] = []
        self.log = workdir / "lab.log"

    def _wrap(self, argv: list[str], as_user: bool, role: str
              ) -> tuple[list[str], dict[str, Any]]:
        """argv run in `role`'s network namespace, as the unprivileged account if `as_user`."""
        prefix = self.net.prefix(role)
        if not as_user:
            return prefix + argv, {}
        if prefix:
            # `ip netns exec` needs root: drop privileges after entering the namespace
            # (setpriv execs, so the pid stays the server's own)
            return prefix + ["setpriv", f"--reuid={self.account.pw_uid}",
                             f"--regid={self.account.pw_gid}", "--clear-groups", "--",
                             *argv], {}
        return argv, {"user": self.account.pw_uid, "group": self.account.pw_gid,
                      "extra_groups": []}

    def _spawn(self, argv: list[str], *, as_user: bool, role: str = "server", **kw: object
               ) -> subprocess.Popen[bytes]:
        logf = open(self.log, "ab")
        argv, user = self._wrap(argv, as_user, role)
        proc = subprocess.Popen(argv, stdout=logf, stderr=kw.pop("stderr", logf),  # type: ignore[call-overload]
                                cwd=self.workdir, start_new_session=True, **user, **kw)
        self.procs.append(proc)
        return proc

    def helper(self, argv: list[str], role: str) -> subprocess.Popen[bytes]:
        """A helper of the lab's own (delay line, sampler) as root in `role`'s namespace, its
        stdout a pipe for the caller. It leads a process group of its own, and `close` ends
        that group (a shell loop and whatever it is running)."""
        logf = open(self.log, "ab")
        proc = subprocess.Popen([*self.net.prefix(role), *argv], stdout=subprocess.PIPE,
                                stderr=logf, cwd=self.workdir, start_new_session=True)
        self.helpers.append(proc)
        return proc

    def run(self, argv: list[str], *, as_user: bool = True, role: str = "server",
            stdout: int | None = None, env: dict[str, str] | None = None,
            ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[bytes]:
        argv, user = self._wrap(argv, as_user, role)
        out = subprocess.run(argv, cwd=self.workdir, stdout=stdout or subprocess.PIPE,  # type: ignore[call-overload]
                             stderr=subprocess.PIPE, timeout=600,
                             # HOME: libpq looks for client certificates there, and the
                             # unprivileged user cannot read root's
                             env=os.environ | {"HOME": str(self.workdir)} | env if env else None,
                             **user)
        if out.returncode not in ok:
            shown = argv[len(self.net.prefix(role)):]
            raise LabError(f"{' '.join(shown[:3])} ... failed (exit status {out.returncode}): "
                           f"{out.stderr.decode(errors='replace').strip()[-300:]}")
        return out  # type: ignore[no-any-return]

    # -- servers -----------------------------------------------------------------------

    def postgres(self, host: str, port: int, tls: bool = False,
                 hba: tuple[str, ...] = ()) -> None:
        """A cluster of its own; `hba`: pg_hba.conf lines that come before initdb's trust
        lines (the first line that matches a connection decides its method)."""
        data = self.workdir / "pgdata"
        self.run([need("initdb", "postgresql-15"), "-D", str(data), "-A", "trust", "-U", USER,
                  "--no-sync", "-E", "UTF8"])
        ssl: list[str] = []
        if tls:  # a throwaway self-signed certificate, made as the server's own user
            self.run([need("openssl", "openssl"), "req", "-new", "-x509", "-nodes", "-days", "2",
                      "-subj", "/CN=pktflow-lab", "-keyout", str(data / "server.key"),
                      "-out", str(data / "server.crt")])
            ssl = ["-c", "ssl=on"]
        conf = data / "pg_hba.conf"
        conf.write_text("".join(f"{line}\n" for line in hba) + conf.read_text()
                        # the pooler and client namespaces
                        + "host all all samenet trust\n")
        self._spawn([need("postgres", "postgresql-15"), "-D", str(data), "-p", str(port),
                     "-k", str(self.workdir), "-c", f"listen_addresses={host}",
                     "-c", "fsync=off", "-c", "synchronous_commit=off", *ssl], as_user=True)
        self.wait_ready(host, port, "server")
        self.run([need("psql", "postgresql-client-15"), "-X", "-q", "-h", host, "-p", str(port),
                  "-U", USER, "-d", "postgres", "-c", f"CREATE DATABASE {DATABASE}"])

    def _listening(self, host: str, port: int, role: str) -> bool:
        if not self.net.prefix(role):
            try:
                with socket.create_connection((host, port), timeout=1):
                    return True
            except OSError:
                return False
        probe = (f"import socket; socket.create_connection(({host!r}, {port}), timeout=1)")
        return subprocess.run([*self.net.prefix(role), sys.executable, "-c", probe],
                              capture_output=True, timeout=15).returncode == 0

    def wait_ready(self, host: str, port: int, role: str, timeout: float = 30.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for p in self.procs:
                if p.poll() is not None:
                    name = p.args[0] if isinstance(p.args, list) else p.args  # type: ignore[index]
                    raise LabError(f"{name!s} exited early; see {self.log}")
            if self._listening(host, port, role):
                return
            time.sleep(0.1)
        raise LabError(f"nothing listens on {host}:{port} after {timeout:.0f} s; see {self.log}")

    def pgbouncer(self, host: str, port: int, pg_host: str, pg_port: int,
                  settings: dict[str, object]) -> None:
        ini = self.workdir / "pgbouncer.ini"
        users = self.workdir / "userlist.txt"
        users.write_text(f'"{USER}" ""\n')
        lines = ["[databases]", f"{DATABASE} = host={pg_host} port={pg_port} dbname={DATABASE}", "",
                 "[pgbouncer]", f"listen_addr = {host}", f"listen_port = {port}",
                 "unix_socket_dir =", "auth_type = trust", f"auth_file = {users}",
                 f"logfile = {self.workdir / 'pgbouncer.log'}", "server_reset_query = DISCARD ALL"]
        lines += [f"{k} = {v}" for k, v in settings.items()]
        ini.write_text("\n".join(lines) + "\n")
        os.chown(ini, self.account.pw_uid, self.account.pw_gid)
        self._spawn([need("pgbouncer", "pgbouncer"), str(ini)], as_user=True, role="pooler")
        self.wait_ready(host, port, "pooler")

    def pgpool(self, host: str, port: int, pg_host: str, pg_port: int) -> None:
        """Pgpool-II in raw mode in front of one server: one child process with its connection
        cache, so the warmed server connection is the one every client gets."""
        work = self.workdir
        conf = work / "pgpool.conf"
        pcp = work / "pcp.conf"
        pcp.write_text("")
        settings = PGPOOL_SETTINGS | {
            "listen_addresses": f"'{host}'", "port": port,
            "unix_socket_directories": f"'{work}'", "pcp_socket_dir": f"'{work}'",
            "pcp_listen_addresses": "''", "pcp_port": free_port(0) if not self.net.prefix(
                "pooler") else 9898,
            "backend_hostname0": f"'{pg_host}'", "backend_port0": pg_port,
            "logdir": f"'{work}'", "pid_file_name": f"'{work / 'pgpool.pid'}'",
        }
        conf.write_text("".join(f"{k} = {v}\n" for k, v in settings.items()))
        for f in (conf, pcp):
            os.chown(f, self.account.pw_uid, self.account.pw_gid)
        self._spawn([need("pgpool", "pgpool2"), "-n", "-f", str(conf), "-F", str(pcp)],
                    as_user=True, role="pooler")
        self.wait_ready(host, port, "pooler")

    # -- capture -----------------------------------------------------------------------

    def tcpdump(self, iface: str, out: Path, bpf: str, role: str) -> subprocess.Popen[bytes]:
        err = self.workdir / "tcpdump.err"
        proc = self._spawn([need("tcpdump", "tcpdump"), "-i", iface, *TCPDUMP_OPTIONS,
                            "-Z", "root", "-n", "-w", str(out), bpf], as_user=False,
                           role=role, stderr=open(err, "wb"))
        end = time.monotonic() + 15
        while "listening on" not in err.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > end:
                raise LabError(f"tcpdump did not start: {err.read_text().strip()[-300:]}")
            time.sleep(0.05)
        return proc

    def stop_tcpdump(self, proc: subprocess.Popen[bytes]) -> int | None:
        """Stop tcpdump cleanly and return the kernel drop count it reports."""
        # libpcap hands packets over in ring blocks retired after a 1 s timeout: stopping
        # sooner loses the tail (the last rows, the FINs) of the capture.
        time.sleep(1.5)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        text = (self.workdir / "tcpdump.err").read_text(errors="replace")
        m = re.search(r"(\d+) packets? dropped by kernel", text)
        return int(m.group(1)) if m else None

    def close(self) -> None:
        for proc in self.helpers:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.wait()
            if proc.stdout:
                proc.stdout.close()
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT if "postgres" in str(proc.args) else signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
