"""compose.yaml cannot run here (no Docker engine), so check it statically against the native
lab's single source of truth (pktflow.lab.scenarios): same versions, ports, pooler settings,
tables and client commands. A change on one side without the other fails here."""

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
    assert svc["postgres"]["image"] == f"postgres:{S.POSTGRES_MAJOR}"
    assert svc["client"]["image"] == f"postgres:{S.POSTGRES_MAJOR}"
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
