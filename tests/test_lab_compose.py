"""The compose stack (compose.yaml, compose/, pktflow.lab.compose) is the native lab in containers.

Always: compose.yaml names the native lab's image contents, addresses, settings and conditions,
and the agents turn compose's variables into the native lab's conditions, or refuse them with
one line naming the variable.

For real (marker `lab`, root): the test starts a Docker engine of its own (dockerd with a
private socket and data directory, no iptables rules, no IP forwarding, no default bridge, so
the host's firewall stays as it was; builds use the host's network for Debian's mirror), makes
the base image with compose/make-base-image.sh (Docker Hub is never asked), builds, records
seqscan-10k direct, through PgBouncer and with DELAY=10 by the README's commands, reads the
captures with pktflow beside a native recording, and stops the engine by its pid. It skips,
with the reason, only where dockerd cannot start.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from pktflow.errors import LabError
from pktflow.lab import compose as C
from pktflow.lab import scenarios as S
from pktflow.lab.conditions import tcp_rmem
from pktflow.lab.network import ADDRESSES, SUBNET

yaml = pytest.importorskip("yaml", reason="PyYAML is in the test extras: pip install -e '.[test]'")

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "compose.yaml"
DOCKERFILE = ROOT / "compose" / "lab" / "Dockerfile"
ROLES = {"postgres": "server", "pgbouncer": "pooler", "client": "client"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    doc = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(doc, dict) and "services" in doc
    return doc


# -- the image and the services ----------------------------------------------------------------

def test_one_debian_image_runs_the_native_lab_in_every_service(compose: dict[str, Any]) -> None:
    svc = compose["services"]
    assert set(svc) == set(ROLES) and C.SERVICES == {r: s for s, r in ROLES.items()}
    for name, role in ROLES.items():
        assert svc[name]["build"] == {"context": ".", "dockerfile": "compose/lab/Dockerfile",
                                      "network": "host"}, name
        assert svc[name]["image"] == svc["client"]["image"]
        assert svc[name]["command"] == [role], name
    docker = DOCKERFILE.read_text()
    assert re.findall(r"^FROM (\S+)", docker, re.M) == ["debian:bookworm-slim"]
    install = re.search(r"apt-get install -y --no-install-recommends([^&]+)&&", docker, re.S)
    assert install is not None
    packages = set(install.group(1).replace("\\", " ").split())
    # the native lab's versions (Debian bookworm's), and what its conditions and helpers use
    assert {f"postgresql-{S.POSTGRES_MAJOR}", f"postgresql-client-{S.POSTGRES_MAJOR}",
            "pgbouncer", "tcpdump", "iproute2", "iptables", "ethtool", "gcc",
            "libnetfilter-queue-dev", "python3"} <= packages
    assert "COPY analyzer/pktflow/lab/ /opt/pktflow/pktflow/lab/" in docker
    assert 'ENTRYPOINT ["python3", "-m", "pktflow.lab.compose"]' in docker
    # PostgreSQL's start-up is the lab's own (Services.postgres), not a cluster of the package's
    assert "create_main_cluster = false" in docker


def test_network_is_internal_with_the_native_addresses(compose: dict[str, Any]) -> None:
    nets = compose["networks"]
    assert all(n.get("internal") is True for n in nets.values()), nets
    assert nets["lab"]["ipam"]["config"] == [{"subnet": SUBNET}]
    for name, role in ROLES.items():
        s = compose["services"][name]
        assert s["networks"] == {"lab": {"ipv4_address": ADDRESSES[role]}}, name
        assert "ports" not in s and "network_mode" not in s, name


def test_healthchecks_wait_for_the_agents(compose: dict[str, Any]) -> None:
    svc = compose["services"]
    for name in ("postgres", "pgbouncer"):
        assert svc[name]["healthcheck"]["test"] == [
            "CMD", "test", "-e", f"{C.RUN}/{ROLES[name]}.ready"], name
        # nothing a healthcheck does reaches a socket, so captures hold the scenario alone
    assert svc["pgbouncer"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert svc["client"]["depends_on"] == {n: {"condition": "service_healthy"}
                                           for n in ("postgres", "pgbouncer")}
    for name in ROLES:
        assert f"run:{C.RUN}" in svc[name]["volumes"], name
    assert f"${{CAPTURES:-./captures}}:{C.CAPTURES}" in svc["client"]["volumes"]


def _included(path: str, rules: list[str]) -> bool:
    """Docker's .dockerignore, as far as these rules go: the last rule matching the path or
    one of its parent directories decides."""
    keep = True
    parts = path.split("/")
    for rule in rules:
        negate = rule.startswith("!")
        pattern = rule[1:] if negate else rule
        prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        if any(fnmatch.fnmatchcase(p, pattern.rstrip("/")) for p in prefixes):
            keep = negate
    return keep


def test_the_images_files_are_all_the_stack_imports(tmp_path: Path) -> None:
    """The image holds what the Dockerfile copies and nothing else of the package: the stack's
    entry point imports from those alone (a lab module importing another part of pktflow at
    its top broke every container)."""
    import sys

    for src in re.findall(r"^COPY (analyzer/\S+(?: analyzer/\S+)*) \S+$", DOCKERFILE.read_text(),
                          re.M):
        for part in src.split():
            dest = tmp_path / "pktflow" / Path(part).relative_to("analyzer/pktflow")
            if (ROOT / part).is_dir():
                shutil.copytree(ROOT / part, dest, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / part, dest)
    res = subprocess.run([sys.executable, "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                          "import pktflow.lab.compose", str(tmp_path)], capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stderr[-2000:]


def test_dockerignore_keeps_the_build_context_to_the_lab() -> None:
    rules = [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert rules[0] == "*"
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    sent = [f for f in files if _included(f, rules)]
    for src in re.findall(r"^COPY (.+) \S+$", DOCKERFILE.read_text(), re.M):
        for part in src.split():
            assert any(f == part or f.startswith(part) for f in sent), part
    assert all(f.startswith(("analyzer/pktflow/lab/", "analyzer/pktflow/__init__.py",
                             "analyzer/pktflow/errors.py")) for f in sent), sent
    assert sum((ROOT / f).stat().st_size for f in sent) < 1_000_000


def test_nothing_names_a_mirror() -> None:
    # the mirror is the host's apt configuration, read at run time
    for path in (COMPOSE, DOCKERFILE, ROOT / "compose" / "make-base-image.sh"):
        assert "://" not in path.read_text(), path


def test_base_image_sources_are_the_hosts_debian_mirrors() -> None:
    if shutil.which("apt-get") is None:
        pytest.skip("no apt here to read a mirror from")
    res = subprocess.run(["sh", str(ROOT / "compose" / "make-base-image.sh"), "--sources"],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"this host's apt names no Debian mirror: {res.stderr.strip()}")
    lines = [ln.split() for ln in res.stdout.splitlines()]
    assert [ln[2] for ln in lines][:2] == ["bookworm", "bookworm-updates"]
    hosts = subprocess.run(["apt-get", "indextargets", "--format", "$(REPO_URI)"],
                           capture_output=True, text=True).stdout.split()
    assert all(ln[0] == "deb" and ln[1] in hosts and ln[3:] == ["main"] for ln in lines), lines
    own = subprocess.run(["sh", str(ROOT / "compose" / "make-base-image.sh"), "--sources"],
                         capture_output=True, text=True,
                         env=os.environ | {"MIRROR": "http://mirror.invalid/debian"})
    assert own.stdout.splitlines()[0] == "deb http://mirror.invalid/debian bookworm main"


def test_compose_config_validates() -> None:
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.skip("docker-compose is not installed (Debian package docker-compose)")
    res = subprocess.run([exe, "-f", str(COMPOSE), "config", "-q"], capture_output=True,
                         text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr


# -- the conditions: compose's variables are the native flags ----------------------------------

def _record_parser() -> argparse.ArgumentParser:
    from pktflow.lab.cli import add_subparser

    parser = argparse.ArgumentParser()
    add_subparser(parser.add_subparsers())
    return parser


def _condition_flags() -> dict[str, str]:
    """The native lab's condition flags (and --rate), by the compose variable named for each:
    --delay-back is DELAY_BACK."""
    parser = _record_parser()
    lab = parser._subparsers._group_actions[0].choices["lab"]  # type: ignore[union-attr]
    rec = lab._subparsers._group_actions[0].choices["record"]
    groups = {g.title: g for g in rec._action_groups}
    flags = [a.option_strings[0] for a in groups["network conditions"]._group_actions]
    flags.append("--rate")
    return {f[2:].upper().replace("-", "_"): f for f in flags}


def test_every_native_condition_is_a_compose_variable(compose: dict[str, Any]) -> None:
    names = _condition_flags()
    assert set(names) == {*C.VARIABLES, "RATE"}
    env = compose["x-lab"]["environment"]
    for var in names:
        assert env[var] == "${" + var + ":-}", var
    for name in ROLES:  # every agent reads the same variables, so each refuses the same
        assert compose["services"][name]["environment"] == env, name


@pytest.mark.parametrize("var,value", [("DELAY", "10"), ("DELAY_BACK", "5"), ("LOSS", "2"),
                                       ("CLIENT_RCVBUF", "16384"),
                                       ("POOLER_RCVBUF", "65536"),
                                       ("SLOW_READER", "200000")])
def test_a_variable_sets_what_its_flag_sets(var: str, value: str) -> None:
    from pktflow.lab.cli import conditions_from

    flag = _condition_flags()[var]
    args = _record_parser().parse_args(["lab", "record", "--scenario", "seqscan-10k",
                                        "--network", "bridge", "--via", "pgbouncer",
                                        "-o", "x.pcap", flag, value])
    stack = C.stack_from({var: value})
    assert stack.conditions == conditions_from(args)
    assert stack.conditions != C.stack_from({}).conditions
    assert C.stack_from({"RATE": "20mbit"}).rate == "20mbit"


def test_each_condition_acts_in_the_container_it_acts_in_natively() -> None:
    stack = C.stack_from({"DELAY": "10", "DELAY_BACK": "5", "LOSS": "2", "LOSS_BACK": "1",
                          "SLOW_READER": "1000", "CLIENT_RCVBUF": "16384",
                          "POOLER_RCVBUF": "65536"})
    parts = {r: {k for k, v in asdict(stack.conditions_of(r)).items() if v is not None}
             for r in ("client", "pooler", "server")}
    # the delay lines sit in the receiving namespace, loss after the capture point, the
    # shim in the client (conditions.py); the buffers are compose's sysctls
    assert parts == {"client": {"delay_ms", "loss_pct", "slow_reader"},
                     "pooler": {"delay_back_ms", "loss_back_pct"}, "server": set()}


def test_receive_buffers_are_the_native_tcp_rmem(compose: dict[str, Any]) -> None:
    for service, var in (("client", "CLIENT_RCVBUF"), ("pgbouncer", "POOLER_RCVBUF")):
        value = compose["services"][service]["sysctls"]["net.ipv4.tcp_rmem"]
        for size in (4096, 16384, 65536):
            got = re.sub(r"\$\{" + var + r":-\d+\}", str(size), value)
            assert got == tcp_rmem(size), (service, got)
        # unset: Linux's own defaults (compose must give a value; the native lab's namespaces
        # inherit the host's)
        assert re.sub(r"\$\{" + var + r":-(\d+)\}", r"\1", value) == "4096 131072 6291456"


@pytest.mark.parametrize("env,words", [
    ({"DELAY": "abc"}, "DELAY=abc: give a number"),
    ({"DELAY": "0"}, "DELAY=0: give milliseconds"),
    ({"LOSS": "100"}, "LOSS=100: give a percentage"),
    ({"CLIENT_RCVBUF": "1000"}, "CLIENT_RCVBUF=1000: give bytes"),
    ({"VIA": "direct", "DELAY_BACK": "5"}, "DELAY_BACK=5 needs a pooler: set VIA=pgbouncer"),
    ({"VIA": "pgpool"}, "VIA=pgpool: use direct or pgbouncer"),
    ({"SCENARIO": "tls"}, "SCENARIO=tls: the stack records pgbench, pgdump, seqscan-10k"),
    ({"RATE": "fast"}, "RATE=fast: give a tc rate"),
    ({"OUTPUT": "../x.pcap"}, "OUTPUT=../x.pcap: give a file name"),
])
def test_what_the_stack_cannot_do_is_one_line_naming_the_variable(env: dict[str, str],
                                                                   words: str) -> None:
    with pytest.raises(LabError) as exc:
        C.stack_from(env)
    line = exc.value.one_line()
    assert line.startswith(words) and "\n" not in line, line


def test_capture_names_say_what_was_recorded() -> None:
    assert C.stack_from({}).output == "compose-seqscan-10k-via-pgbouncer.pcap"
    assert C.stack_from({"VIA": "direct", "SCENARIO": "pgdump", "LOSS": "2",
                         "RATE": "20mbit"}).output == \
        "compose-pgdump-via-direct-rate20mbit-loss2pct.pcap"
    assert C.stack_from({"OUTPUT": "mine.pcap.gz"}).output == "mine.pcap.gz"
    stack = C.stack_from({"DELAY": "10", "RATE": "1gbit"})
    assert stack.variables() == "SCENARIO=seqscan-10k VIA=pgbouncer DELAY=10 RATE=1gbit"
    assert C.stack_from({"VIA": "direct", "OUTPUT": "x.pcap"}).variables() == \
        "SCENARIO=seqscan-10k VIA=direct OUTPUT=x.pcap"


def test_an_agent_acts_in_its_own_namespace_only() -> None:
    net = C.DockerBridge("pooler", rate=None)
    assert net.prefix("pooler") == [] and net.host("server") == ADDRESSES["server"]
    with pytest.raises(LabError, match="the client's namespace is the client container"):
        net.prefix("client")


# -- the stack, for real ----------------------------------------------------------------------

NOBODY = 65534  # the captures directory's owner: the capture must come out owned by it
RECORD_TIMEOUT_S = 600


def _ping(sock: str) -> bool:
    """Docker's API answers on `sock`."""
    class Conn(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(2)
            self.sock.connect(sock)

    try:
        conn = Conn("docker")
        conn.request("GET", "/_ping")
        return conn.getresponse().read() == b"OK"
    except OSError:
        return False


def _running(sock: str) -> list[str]:
    out = subprocess.run(["docker", "-H", f"unix://{sock}", "ps", "-q"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def host_network_state() -> dict[str, str]:
    """What Docker could change on the host: every iptables and ip6tables table, IP
    forwarding and the bridge's netfilter switches, and links of Docker's naming."""
    state = {}
    for tool in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle", "raw"):
            res = subprocess.run([tool, "-t", table, "-S"], capture_output=True, text=True)
            state[f"{tool} {table}"] = res.stdout + res.stderr
    for name in ("net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding",
                 "net/bridge/bridge-nf-call-iptables", "net/bridge/bridge-nf-call-ip6tables"):
        with contextlib.suppress(OSError):
            state[name] = Path("/proc/sys", name).read_text()
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    state["links"] = " ".join(sorted(re.findall(r"^\d+: ((?:docker|br-)[^:@]+)", links, re.M)))
    return state


class Engine:
    """A dockerd of the test's own: private socket, data and exec directories; no iptables
    rules, IP forwarding, masquerading or default bridge, so the host stays as it was."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="pktflow-docker-"))
        self.sock = str(self.dir / "docker.sock")
        self.before = host_network_state()
        dockerd = shutil.which("dockerd") or "/usr/sbin/dockerd"
        self.log = self.dir / "dockerd.log"
        self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [dockerd, "--iptables=false", "--ip-forward=false", "--ip-masq=false",
             "--bridge=none", "--data-root", str(self.dir / "data"),
             "--exec-root", str(self.dir / "exec"), "--pidfile", str(self.dir / "dockerd.pid"),
             "--host", f"unix://{self.sock}"],
            stdout=open(self.log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)
        self.env = os.environ | {"DOCKER_HOST": f"unix://{self.sock}",
                                 "COMPOSE_PROJECT_NAME": "pktflow-test"}
        end = time.monotonic() + 60
        while not _ping(self.sock):
            if self.proc.poll() is not None or time.monotonic() > end:
                why = self.log.read_text(errors="replace").strip().splitlines()[-1:]
                self.stop()
                pytest.skip(f"dockerd cannot start here: {' '.join(why)}")
            time.sleep(0.2)

    def compose(self, *args: str, env: dict[str, str] | None = None,
                timeout: float = RECORD_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["docker-compose", *args], cwd=ROOT, capture_output=True,
                              text=True, env=self.env | (env or {}), timeout=timeout)

    def stop(self) -> None:
        """Stop the stack and the engine (its pid, then its containerd with it); delete its
        images and containers."""
        if self.proc is not None:
            if self.proc.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.compose("down", "-v", timeout=120)
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            self.proc = None
        # a clean shutdown unmounts its layers; an unclean one may not
        mounts = Path("/proc/self/mounts").read_text().split("\n")
        for m in sorted((ln.split()[1] for ln in mounts if len(ln.split()) > 1 and
                         ln.split()[1].startswith(str(self.dir))), reverse=True):
            subprocess.run(["umount", "-l", m], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "the compose stack's test starts dockerd, which needs root"
    for prog, pkg in (("dockerd", "docker.io"), ("docker", "docker.io"),
                      ("docker-compose", "docker-compose"), ("debootstrap", "debootstrap")):
        if shutil.which(prog) is None and not Path("/usr/sbin", prog).exists():
            return f"{prog} is not installed (Debian package {pkg}); dockerd cannot start"
    return None


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    eng = Engine()
    try:
        yield eng
    finally:
        eng.stop()


@pytest.fixture(scope="module")
def built(engine: Engine) -> dict[str, Any]:
    """The base image made from Debian's mirror, then the stack's image: the cold start a new
    user without a registry has, timed."""
    t0 = time.monotonic()
    base = subprocess.run(["sh", str(ROOT / "compose" / "make-base-image.sh")],
                          capture_output=True, text=True, env=engine.env, timeout=900)
    assert base.returncode == 0, base.stderr
    t1 = time.monotonic()
    build = engine.compose("build", timeout=1800)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    return {"base_s": t1 - t0, "build_s": time.monotonic() - t1, "log": build.stdout}


@pytest.fixture(scope="module")
def captures() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="pktflow-compose-captures-"))
    os.chown(d, NOBODY, NOBODY)
    yield d
    shutil.rmtree(d, ignore_errors=True)


Run = dict[str, Any]  # rc, output, still_running, capture, meta, seconds


def stack_run(engine: Engine, captures: Path, **variables: str) -> Run:
    """The README's run: `up --build --exit-code-from client`, then `down -v`."""
    env = {"CAPTURES": str(captures), **variables}
    t0 = time.monotonic()
    up = engine.compose("up", "--build", "--exit-code-from", "client", env=env)
    seconds = time.monotonic() - t0
    running = _running(engine.sock)  # before `down`: `up` alone must leave none running
    down = engine.compose("down", "-v", env=env, timeout=120)
    assert down.returncode == 0, down.stderr
    out = re.sub(r"\x1b\[[0-9;]*m", "", up.stdout + up.stderr)
    run: Run = {"rc": up.returncode, "output": out, "still_running": running,
                "seconds": seconds}
    m = re.search(r"client_1\s+\| recorded captures/(\S+)", out)
    if m:
        run["capture"] = captures / m.group(1)
        run["meta"] = json.loads(run["capture"].with_suffix(".json").read_text())
    return run


def recorded(engine: Engine, captures: Path, **variables: str) -> Run:
    run = stack_run(engine, captures, **variables)
    assert run["rc"] == 0 and "capture" in run, run["output"][-3000:]
    assert run["still_running"] == [], run["output"][-2000:]
    return run


@pytest.fixture(scope="module")
def direct(engine: Engine, built: dict[str, Any], captures: Path) -> Run:
    return recorded(engine, captures, SCENARIO="seqscan-10k", VIA="direct")


@pytest.fixture(scope="module")
def pooled(engine: Engine, built: dict[str, Any], captures: Path) -> Run:
    return recorded(engine, captures, SCENARIO="seqscan-10k", VIA="pgbouncer")


def _delay_off(run: Run) -> bool:
    return any(abs(h["rtt_ms"] - 10.0) > 1.0 for h in run["meta"]["handshakes"])


@pytest.fixture(scope="module")
def delayed(engine: Engine, built: dict[str, Any], captures: Path) -> Run:
    from test_lab_conditions import delay_line_was_late

    run = recorded(engine, captures, SCENARIO="seqscan-10k", VIA="pgbouncer", DELAY="10")
    # as the native tests: record again only when the delay line says it was held back
    for _ in range(2):
        if not (_delay_off(run) and delay_line_was_late(run["meta"])):
            break
        time.sleep(10)
        run = recorded(engine, captures, SCENARIO="seqscan-10k", VIA="pgbouncer", DELAY="10")
    return run


def _legs(run: Run) -> dict[str, dict[str, Any]]:
    from test_lab_record import legs

    from pktflow.pipeline import analyze

    report = analyze(str(run["capture"]))
    run["report"] = report
    assert report["capture"]["damage"] is None
    for conn in report["connections"]:
        for d in conn["directions"].values():
            assert d["gaps"] == 0, conn["id"]
    return legs(report)


def _data_rows(conn: dict[str, Any]) -> int:
    return max(q["data_rows"] for q in conn["queries"])


@pytest.mark.lab
def test_images_build_from_debian_alone(built: dict[str, Any]) -> None:
    sizes = re.findall(r"Sending build context to Docker daemon\s+([\d.]+)([kMG]?B)",
                       built["log"])
    assert sizes, built["log"][-2000:]
    scale = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}
    assert all(float(n) * scale[u] < 1e6 for n, u in sizes), sizes  # .dockerignore


@pytest.mark.lab
def test_direct_10000_rows_owned_by_the_captures_owner(direct: Run) -> None:
    meta = direct["meta"]
    assert meta["via"] == "direct" and meta["tcpdump_dropped"] == 0
    assert set(_legs(direct)) == {"front"}
    (conn,) = _legs(direct).values()
    assert _data_rows(conn) == S.SEQSCAN_ROWS
    # the only connection is the scenario's own: no readiness probe, no auth error
    assert [q["command_tag"] for q in conn["queries"]] == [f"SELECT {S.SEQSCAN_ROWS}"]
    assert [s["direction"] for s in meta["kernel"]["sockets"]] == ["server->client"]
    for f in (direct["capture"], direct["capture"].with_suffix(".json")):
        assert (f.stat().st_uid, f.stat().st_gid) == (NOBODY, NOBODY), f


@pytest.mark.lab
def test_pgbouncer_both_legs_10000_rows_each(pooled: Run) -> None:
    meta = pooled["meta"]
    assert meta["tcpdump_dropped"] == 0
    by_role = _legs(pooled)
    assert set(by_role) == {"front", "back"}
    assert by_role["front"]["server"]["ip"] == ADDRESSES["pooler"]
    assert by_role["back"]["server"]["ip"] == ADDRESSES["server"]
    for conn in by_role.values():
        assert _data_rows(conn) == S.SEQSCAN_ROWS, conn["id"]
    (relay,) = pooled["report"]["relays"]
    assert relay["matched_queries"] == 1
    assert sorted(s["direction"] for s in meta["kernel"]["sockets"]) == [
        "pooler->client", "server->pooler"]


@pytest.mark.lab
def test_delay_10_is_the_handshake_round_trip(delayed: Run) -> None:
    meta = delayed["meta"]
    (h,) = meta["handshakes"]  # the pooled server connection was opened before the capture
    assert abs(h["rtt_ms"] - 10.0) <= 1.0, (h, meta["conditions"])
    assert h["synack_to_ack_ms"] > 9.0 and h["syn_to_synack_ms"] < 1.0, h
    line = meta["conditions"]["delay_line_client"]
    assert line["packets"] > 30 and line["delay_ms"] == 10
    assert line["enobufs"] == line["queue_dropped"] == line["user_dropped"] == 0
    assert "NFQUEUE" in meta["conditions"]["how"]["delay"]
    assert meta["remake"].startswith("SCENARIO=seqscan-10k VIA=pgbouncer DELAY=10 ")
    for conn in _legs(delayed).values():
        assert _data_rows(conn) == S.SEQSCAN_ROWS, conn["id"]


@pytest.mark.lab
def test_every_other_condition_applies_in_one_run(engine: Engine, built: dict[str, Any],
                                                  captures: Path) -> None:
    run = recorded(engine, captures, VIA="pgbouncer", DELAY_BACK="5", LOSS="2", LOSS_BACK="2",
                   RATE="1gbit", CLIENT_RCVBUF="65536", POOLER_RCVBUF="65536",
                   SLOW_READER="2000000")
    meta = run["meta"]
    cond = meta["conditions"]
    assert set(cond["how"]) == {"delay_back", "loss", "loss_back", "client_rcvbuf",
                                "pooler_rcvbuf", "slow_reader"}
    back = cond["delay_line_pooler"]
    assert back["delay_ms"] == 5 and back["packets"] > 30
    assert back["enobufs"] == back["queue_dropped"] == back["user_dropped"] == 0
    socks = {s["direction"]: s for s in meta["kernel"]["sockets"]}
    # the pool is warmed under the conditions: its server connection's least round trip is
    # the back link's delay, as on a real network
    assert abs(socks["server->pooler"]["minrtt_ms"] - 5.0) <= 1.0, socks["server->pooler"]
    assert socks["server->pooler"]["srtt_ms"] >= 4.5, socks["server->pooler"]
    assert cond["loss"]["dropped"] > 0 and socks["pooler->client"]["retrans"] > 0
    assert cond["loss_back"]["dropped"] > 0 and socks["server->pooler"]["retrans"] > 0
    assert meta["tcp_rmem"]["client"] == meta["tcp_rmem"]["pooler"] == [
        int(x) for x in tcp_rmem(65536).split()]
    assert meta["rate"].startswith("1gbit ")
    assert meta["client_env"]["PKTFLOW_SLOW_READER"] == "2000000"
    assert meta["client_seconds"] >= 0.5  # 1.1 MB read at 2 MB/s
    for conn in _legs(run).values():
        assert _data_rows(conn) == S.SEQSCAN_ROWS, conn["id"]


@pytest.mark.lab
def test_a_condition_that_does_not_take_fails_the_run_in_one_line(
        engine: Engine, built: dict[str, Any], captures: Path) -> None:
    # 3000 bytes is a receive buffer the native lab sets (min 3000); compose.yaml's sysctl
    # keeps its minimum at 4096, so the pooler's agent finds it not applied
    run = stack_run(engine, captures, VIA="pgbouncer", POOLER_RCVBUF="3000")
    assert run["rc"] == int(LabError.exit_code), run["output"][-2000:]
    said = [ln for ln in run["output"].splitlines() if "pktflow compose" in ln]
    assert len(said) == 1 and "the pgbouncer container: net.ipv4.tcp_rmem is 4096 3000 " \
        "3000" in said[0], run["output"][-2000:]
    assert "capture" not in run and run["still_running"] == []


@pytest.mark.lab
def test_stack_and_native_lab_agree(pooled: Run, tmp_path: Path) -> None:
    from test_lab_record import recorded as native_recorded

    from pktflow.lab.record import Recording

    native, native_report = native_recorded(
        tmp_path, "native-bridge", Recording("seqscan-10k", via="pgbouncer", network="bridge"),
        {"ip": "iproute2", "ethtool": "ethtool", "setpriv": "util-linux"})
    ours = pooled["meta"]
    # the same record: every field the native metadata has, and no other
    assert set(ours) == set(native)
    assert set(ours["conditions"]) == set(native["conditions"])
    assert set(ours["kernel"]) == set(native["kernel"])
    assert [set(s) for s in ours["kernel"]["sockets"]] == \
        [set(s) for s in native["kernel"]["sockets"]]
    assert [s["direction"] for s in ours["kernel"]["sockets"]] == \
        [s["direction"] for s in native["kernel"]["sockets"]]
    assert [set(h) for h in ours["handshakes"]] == [set(h) for h in native["handshakes"]]
    # the same settings, addresses and command
    for key in ("scenario", "via", "mtu", "offloads", "addresses", "subnet", "rows",
                "row_layout", "client_command", "ports", "pgbouncer_settings",
                "pool_warmed_before_capture", "client_env"):
        assert ours[key] == native[key], key
    assert ours["congestion_control"].startswith("cubic") and \
        native["congestion_control"].startswith("cubic")
    assert all(s["congestion_control"] == "cubic" for s in ours["kernel"]["sockets"])
    # the same versions: PostgreSQL's major and PgBouncer's minor (the study's), from Debian
    for meta in (ours, native):
        pg = meta["versions"]["postgres"]
        assert re.match(rf"postgres \(PostgreSQL\) {S.POSTGRES_MAJOR}\.\d+ \(Debian ", pg), pg
        assert meta["versions"]["pgbouncer"].startswith(f"PgBouncer {S.PGBOUNCER_VERSION}."), \
            meta["versions"]
    assert ours["versions"]["tcpdump"].split()[:2] == native["versions"]["tcpdump"].split()[:2]
    # the same result: the same legs, queries and rows, and PgBouncer's re-split of the
    # server's 8 KB writes into its 4 KB buffer on both
    mine = _legs(pooled)
    from test_lab_record import legs

    theirs = legs(native_report)
    assert set(mine) == set(theirs)
    for role in mine:
        assert [(q["command_tag"], q["data_rows"]) for q in mine[role]["queries"]] == \
            [(q["command_tag"], q["data_rows"]) for q in theirs[role]["queries"]], role
    (r1,), (r2,) = pooled["report"]["relays"], native_report["relays"]
    assert r1["matched_queries"] == r2["matched_queries"]
    # Both measured the relay's write sizes. Their values are not compared: a write is what one
    # PSH closes, and when the client's socket backs up (a busy machine, the stack's extra
    # bridge) the kernel merges PgBouncer's 4 KB writes, so one run sees 4,096 and another
    # 16,384. The re-split itself is checked on the shipped captures (test_relay.py).
    for r in (r1, r2):
        assert r["forward_write"] and r["server_write"], r


@pytest.mark.lab
def test_engine_stops_and_leaves_the_host_as_it_found_it(engine: Engine,
                                                         built: dict[str, Any]) -> None:
    # after every run above (pytest runs a module's tests in order)
    engine.stop()
    assert not Path(engine.sock).exists()
    assert host_network_state() == engine.before
