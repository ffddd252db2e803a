"""compose.yaml cannot run here (no Docker engine), so check it statically against the native
lab's single source of truth (pktflow.lab.scenarios, conditions, network): same versions,
ports, pooler settings, tables, client commands and network conditions. A change on one side
without the other fails here."""

from __future__ import annotations

import configparser
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from pktflow.lab import scenarios as S
from pktflow.lab.conditions import loss_rules, tcp_rmem
from pktflow.lab.network import tbf_argv

yaml = pytest.importorskip("yaml", reason="PyYAML is in the test extras: pip install -e '.[test]'")

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "compose.yaml"
COMPOSED = [s for s in S.SCENARIOS.values() if s.compose]


@pytest.fixture(scope="module")
def compose() -> dict:
    doc = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(doc, dict) and "services" in doc
    return doc


def _ini() -> configparser.ConfigParser:
    ini = configparser.ConfigParser()
    ini.read(ROOT / "compose" / "pgbouncer" / "pgbouncer.ini")
    return ini


def test_services_and_images(compose: dict) -> None:
    svc = compose["services"]
    assert set(svc) >= {"postgres", "pgbouncer", "tcpdump", "client"}
    # server and client: PostgreSQL's own image plus tc, iptables and the slow-reader shim
    for name in ("postgres", "client"):
        assert svc[name]["build"] == {"context": ".", "dockerfile": "compose/lab/Dockerfile"}, name
    lab = (ROOT / "compose" / "lab" / "Dockerfile").read_text()
    assert re.search(rf"^FROM postgres:{S.POSTGRES_MAJOR}$", lab, re.M)
    assert svc["postgres"]["environment"]["POSTGRES_DB"] == S.DATABASE
    assert svc["postgres"]["environment"]["POSTGRES_HOST_AUTH_METHOD"] == "trust"
    # tcpdump must see every leg: it joins the namespace of the service the client talks to.
    assert svc["tcpdump"]["network_mode"] == "service:${VIA:-pgbouncer}"
    assert svc["client"]["environment"]["VIA"] == "${VIA:-pgbouncer}"
    script = svc["client"]["command"][-1]
    assert "host=$$VIA" in script
    assert f'"$$VIA" = postgres ]; then port={S.POSTGRES_PORT}; else port={S.PGBOUNCER_PORT}' in script


def test_pgbouncer_image_is_the_studys_version() -> None:
    docker = (ROOT / "compose" / "pgbouncer" / "Dockerfile").read_text()
    # Debian bookworm ships PgBouncer 1.18, the version the PGECons study measured.
    assert S.PGBOUNCER_VERSION == "1.18"
    assert re.search(r"^FROM debian:bookworm", docker, re.M)
    assert re.search(r"apt-get install .*\bpgbouncer\b", docker)


def test_pgbouncer_settings_match_native_lab(compose: dict) -> None:
    ini = _ini()
    bouncer = ini["pgbouncer"]
    for key, value in S.PGBOUNCER_DEFAULTS.items():
        assert bouncer[key] == str(value), key
    assert int(bouncer["listen_port"]) == S.PGBOUNCER_PORT
    assert bouncer["auth_type"] == "trust"
    target = dict(kv.split("=", 1) for kv in ini["databases"][S.DATABASE].split())
    assert target == {"host": "postgres", "port": str(S.POSTGRES_PORT), "dbname": S.DATABASE}
    ports = compose["services"]["pgbouncer"]["ports"]
    assert f"{S.PGBOUNCER_PORT}:{S.PGBOUNCER_PORT}" in ports


def test_init_sql_creates_the_scenario_tables() -> None:
    sql = (ROOT / "compose" / "initdb" / "10-tables.sql").read_text()
    statements = [s.strip() for s in sql.split(";") if s.strip()]
    expected = {S.create_table_sql(s.table, s.default_rows) for s in COMPOSED
                if s.setup is None}
    assert set(statements) == expected


def _without_host_and_port(argv: list[str]) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in ("-h", "-p"):
            skip = True
        else:
            out.append(a)
    return out


def test_init_scripts_run_the_scenario_setups() -> None:
    # Inside the image's init phase the server listens on its socket only: no -h, no -p.
    scripts = {p.name: p.read_text() for p in (ROOT / "compose" / "initdb").glob("*.sh")}
    lines = [shlex.split(ln) for text in scripts.values() for ln in text.splitlines()
             if ln.strip() and not ln.startswith("#") and ln.strip() != "set -e"]
    for scen in COMPOSED:
        if scen.setup is not None:
            expected = S.render_setup(scen, host="h", port=1)
            assert _without_host_and_port(expected) in lines, scen.name
    assert all(os.access(p, os.X_OK) for p in (ROOT / "compose" / "initdb").glob("*.sh"))


def test_capture_filter_covers_both_legs(compose: dict) -> None:
    cmd = compose["services"]["tcpdump"]["command"]
    assert "-s 0" in cmd and "-w /captures/" in cmd
    for port in (S.POSTGRES_PORT, S.PGBOUNCER_PORT):
        assert f"tcp port {port}" in cmd


def test_client_runs_each_scenario_as_the_native_lab_does(compose: dict) -> None:
    script = compose["services"]["client"]["command"][-1]
    # Each `case` arm: `NAME) COMMAND > /dev/null ;;`
    arms = dict(re.findall(r"^\s*([\w-]+)\)\s*(.+?)\s*>\s*/dev/null\s*;;", script, re.M))
    assert set(arms) == {s.name for s in COMPOSED}
    for scen in COMPOSED:
        name = scen.name
        # $$ is compose's escape for a literal $; the shell then expands $host and $port.
        argv = shlex.split(arms[name].replace("$$", "$"))
        expected = S.render_command(scen, host="$host", port="$port")  # type: ignore[arg-type]
        assert argv == expected, name


def _compose_cli() -> list[str] | None:
    if exe := shutil.which("docker-compose"):
        return [exe]
    if shutil.which("docker") and subprocess.run(
            ["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    return None


@pytest.mark.skipif(_compose_cli() is None,
                    reason="no docker-compose here to run `config`; the static checks above ran")
def test_compose_config_validates() -> None:
    argv = _compose_cli() or []
    res = subprocess.run([*argv, "-f", str(COMPOSE), "config", "-q"],
                         capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr


# -- network conditions ----------------------------------------------------------------------

def _condition_flags() -> dict[str, str]:
    """The native lab's condition flags (and --rate), by the compose variable that names them:
    --delay-back is DELAY_BACK."""
    import argparse

    from pktflow.lab.cli import add_subparser

    parser = argparse.ArgumentParser()
    add_subparser(parser.add_subparsers())
    lab = parser._subparsers._group_actions[0].choices["lab"]  # type: ignore[union-attr]
    rec = lab._subparsers._group_actions[0].choices["record"]
    groups = {g.title: g for g in rec._action_groups}
    flags = [a.option_strings[0] for a in groups["network conditions"]._group_actions]
    flags.append("--rate")
    return {f[2:].upper().replace("-", "_"): f for f in flags}


def test_every_native_condition_has_a_compose_variable_of_the_same_name(compose: dict) -> None:
    names = _condition_flags()
    assert set(names) == {"DELAY", "DELAY_BACK", "LOSS", "RATE", "CLIENT_RCVBUF",
                          "POOLER_RCVBUF", "SLOW_READER"}
    text = COMPOSE.read_text()
    for var in names:
        assert "${" + var + ":-" in text, var
    svc = compose["services"]
    env = {name: set(s.get("environment", {})) for name, s in svc.items()}
    assert {"DELAY", "LOSS", "RATE", "SLOW_READER"} <= env["client"]
    assert {"DELAY_BACK", "RATE"} <= env["pgbouncer"]
    assert "RATE" in env["postgres"]
    for name in ("postgres", "pgbouncer", "client"):
        assert "NET_ADMIN" in svc[name]["cap_add"], name
        assert "./compose/netem.sh:/netem.sh:ro" in svc[name]["volumes"], name
    role = {"postgres": "server", "pgbouncer": "pooler", "client": "client"}
    for name, r in role.items():
        started = " ".join([*svc[name].get("entrypoint", []), *svc[name].get("command", [])])
        assert f"/netem.sh {r}" in started, name


def _netem(role: str, **env: str) -> list[list[str]]:
    if shutil.which("sh") is None or shutil.which("awk") is None:
        pytest.skip("no sh or awk to dry-run compose/netem.sh")
    res = subprocess.run(["sh", str(ROOT / "compose" / "netem.sh"), role], capture_output=True,
                         text=True, env={"PATH": os.environ["PATH"], "DRY_RUN": "1",
                                         "ROUTES": "10.1.0.0/16 dev eth0 proto kernel scope "
                                                   "link src 10.1.0.5", **env})
    assert res.returncode == 0, res.stderr
    return [shlex.split(ln) for ln in res.stdout.splitlines()]


def test_netem_script_pins_cubic_and_does_nothing_else_unasked() -> None:
    for role in ("client", "pooler", "server"):
        assert _netem(role) == [["ip", "route", "change", "10.1.0.0/16", "dev", "eth0", "proto",
                                 "kernel", "scope", "link", "src", "10.1.0.5", "congctl",
                                 "cubic"]]


def test_netem_script_applies_the_native_loss_and_rate() -> None:
    cmds = _netem("client", LOSS="2", PEER="10.1.0.9", PORT="6432", RATE="20mbit",
                  DELAY="10")[1:]
    # loss: the native lab's own iptables rules, in the client's INPUT
    assert cmds[-2:] == loss_rules(0.02, "10.1.0.9", 6432)
    # rate: the native tbf, as the root (it has a handle here for the netem below it)
    native = tbf_argv("eth0", "20mbit")
    assert [a for a in cmds[0] if a not in ("handle", "1:")] == native
    assert cmds[1] == ["tc", "qdisc", "add", "dev", "eth0", "parent", "1:1", "handle", "10:",
                       "netem", "delay", "10ms", "limit", "100000"]
    assert _netem("server", RATE="20mbit")[1] == ["tc", "qdisc", "add", "dev", "eth0", "root",
                                                  "handle", "1:", "tbf", "rate", "20mbit",
                                                  "burst", "64kb", "latency", "100ms"]


def test_netem_script_delays_only_the_poolers_link_to_postgres() -> None:
    cmds = _netem("pooler", DELAY_BACK="5")[1:]
    assert cmds[1][-6:] == ["30:", "netem", "delay", "5ms", "limit", "100000"]
    assert cmds[0] == ["tc", "qdisc", "add", "dev", "eth0", "root", "handle", "10:", "prio"]
    assert cmds[2][-8:] == ["u32", "match", "ip", "dport", str(S.POSTGRES_PORT), "0xffff",
                            "flowid", "10:3"]
    # the client's own delay is not the pooler's business
    assert _netem("pooler", DELAY="10")[1:] == []


def test_receive_buffers_are_the_native_tcp_rmem(compose: dict) -> None:
    for service, var in (("client", "CLIENT_RCVBUF"), ("pgbouncer", "POOLER_RCVBUF")):
        value = compose["services"][service]["sysctls"]["net.ipv4.tcp_rmem"]
        for size in (16384, 65536):
            got = re.sub(r"\$\{" + var + r":-\d+\}", str(size), value)
            assert got == tcp_rmem(size), (service, got)
        # unset: Linux's own defaults
        assert re.sub(r"\$\{" + var + r":-(\d+)\}", r"\1", value) == "4096 131072 6291456"


def test_slow_reader_preloads_the_native_shim(compose: dict) -> None:
    # one source: the image builds the native lab's shim, from the repository as its context
    for service in ("postgres", "client"):
        assert compose["services"][service]["build"] == {
            "context": ".", "dockerfile": "compose/lab/Dockerfile"}, service
    script = compose["services"]["client"]["command"][-1]
    assert "LD_PRELOAD=/usr/local/lib/clientshim.so PKTFLOW_SLOW_READER=$$SLOW_READER" in script
    docker = (ROOT / "compose" / "lab" / "Dockerfile").read_text()
    assert "COPY analyzer/pktflow/lab/clientshim.c " in docker
    assert (ROOT / "analyzer" / "pktflow" / "lab" / "clientshim.c").exists()
    assert "-o /usr/local/lib/clientshim.so" in docker
    assert re.search(r"apt-get install .*\biproute2\b.*\biptables\b", docker)
