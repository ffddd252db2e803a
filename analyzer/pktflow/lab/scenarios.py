"""What the lab runs: tables, scenario commands and pooler settings, in one place.

The compose stack runs this same code in its containers (pktflow.lab.compose);
tests/test_lab_compose.py checks compose.yaml against it, and records with both.
"""

from __future__ import annotations

from typing import NamedTuple

POSTGRES_MAJOR = 15
PGBOUNCER_VERSION = "1.18"
DATABASE = "lab"
USER = "postgres"
POSTGRES_PORT = 5432
PGBOUNCER_PORT = 6432
PGPOOL_PORT = 9999

# The study's table: 10,000 rows read by a seq scan. ~100-byte rows: an int and 96 characters.
SEQSCAN_TABLE = "t10k"
SEQSCAN_ROWS = 10_000
DUMP_TABLE = "tdump"

PGBOUNCER_DEFAULTS = {"pool_mode": "session", "pkt_buf": 4096, "sbuf_loopcnt": 5}
PGPOOL_VERSION = "4.3"  # Debian bookworm's pgpool2
# Pgpool-II as a plain connection pooler in front of one server: no replication, no load
# balancing, no health checks (they would add their own connections to the capture).
PGPOOL_SETTINGS: dict[str, object] = {
    "backend_clustering_mode": "'raw'", "backend_weight0": 1,
    "backend_flag0": "'DISALLOW_TO_FAILOVER'", "enable_pool_hba": "off", "pool_passwd": "''",
    "num_init_children": 1, "max_pool": 1, "connection_cache": "on",
    "load_balance_mode": "off", "health_check_period": 0, "sr_check_period": 0,
    "failover_on_backend_error": "off", "memory_cache_enabled": "off",
    "log_destination": "'stderr'",
}


def create_table_sql(table: str, rows: int) -> str:
    return (f"CREATE TABLE {table} AS SELECT i AS id, repeat(md5(i::text), 3) AS payload "
            f"FROM generate_series(1, {rows}) AS i")


# The lab's throwaway password for the logins scenario's roles: it is in the capture (a
# cleartext login sends it as is), and tests check that no output of pktflow shows it.
LAB_PASSWORD = "pktflow-lab-Cleartext-Secret-7f3a"
# pg_hba.conf lines put first (the first line that matches decides): one role per method
LOGIN_HBA = ("host all lab_scram all scram-sha-256", "host all lab_md5 all md5",
             "host all lab_cleartext all password")


class Scenario(NamedTuple):
    name: str
    description: str
    table: str
    default_rows: int
    # argv template; {host} {port} {user} {db} {table} {rows} are filled in by the lab
    command: tuple[str, ...]
    # argv template that builds the scenario's tables; None: the lab's CREATE TABLE AS
    setup: tuple[str, ...] | None = None
    # environment for the client (e.g. PGSSLMODE), and whether the server offers TLS
    env: tuple[tuple[str, str], ...] = ()
    tls: bool = False
    # the client's exit codes that mean the scenario ran (psql exits 1 when a statement fails)
    ok_codes: tuple[int, ...] = (0,)
    # part of compose.yaml's scenarios (the reference experiments); the others are the lab's
    # protocol coverage
    compose: bool = True
    # pg_hba.conf lines before the lab's trust lines (authentication methods to record)
    hba: tuple[str, ...] = ()


SCENARIOS = {
    s.name: s for s in (
        Scenario("seqscan-10k", "psql reads a 10,000-row table by seq scan (PGECons CASE6)",
                 SEQSCAN_TABLE, SEQSCAN_ROWS,
                 ("psql", "-X", "-q", "-h", "{host}", "-p", "{port}", "-U", "{user}", "-d",
                  "{db}", "-c", "SELECT * FROM {table}")),
        Scenario("pgdump", "pg_dump --data-only of one table: COPY TO STDOUT",
                 DUMP_TABLE, 100_000,
                 ("pg_dump", "-h", "{host}", "-p", "{port}", "-U", "{user}", "--data-only",
                  "-t", "{table}", "{db}")),
        # Transaction pooling's case: several clients, short transactions, few server
        # connections. pgbench's TPC-B-like script: BEGIN, three UPDATEs, a SELECT, an INSERT,
        # END per transaction, every statement with its own random values.
        Scenario("pgbench", "pgbench TPC-B-like: 4 clients x 25 transactions of 7 statements",
                 "pgbench_accounts", 100_000,
                 ("pgbench", "-n", "-c", "4", "-j", "2", "-t", "25", "-h", "{host}", "-p",
                  "{port}", "-U", "{user}", "{db}"),
                 setup=("pgbench", "-i", "-q", "-s", "{scale}", "-h", "{host}", "-p", "{port}",
                        "-U", "{user}", "{db}")),
        # The decoder's other paths, each recorded for real (issue: every message, tshark agrees)
        Scenario("extended", "pgbench -M extended, select-only: Parse/Bind/Execute/Sync",
                 "pgbench_accounts", 100_000,
                 ("pgbench", "-n", "-M", "extended", "-S", "-c", "1", "-t", "20", "-h",
                  "{host}", "-p", "{port}", "-U", "{user}", "{db}"),
                 setup=("pgbench", "-i", "-q", "-s", "{scale}", "-h", "{host}", "-p", "{port}",
                        "-U", "{user}", "{db}"), compose=False),
        # A connection storm for the benchmark: a new connection per transaction (-C), as
        # applications without a pool make them; through a pooler, its client leg.
        Scenario("pgbench-connect", "pgbench -C -S: 4 clients x 5,000 connections of one SELECT",
                 "pgbench_accounts", 100_000,
                 ("pgbench", "-n", "-C", "-S", "-c", "4", "-j", "2", "-t", "5000", "-h",
                  "{host}", "-p", "{port}", "-U", "{user}", "{db}"),
                 setup=("pgbench", "-i", "-q", "-s", "{scale}", "-h", "{host}", "-p", "{port}",
                        "-U", "{user}", "{db}"), compose=False),
        Scenario("copy-in", "psql \\copy FROM a client-side program: COPY FROM STDIN",
                 "tcopy", 20_000,
                 ("psql", "-X", "-q", "-h", "{host}", "-p", "{port}", "-U", "{user}", "-d",
                  "{db}", "-c", "\\copy {table} from program 'seq 1 {rows}'"),
                 setup=("psql", "-X", "-q", "-h", "{host}", "-p", "{port}", "-U", "{user}", "-d",
                        "{db}", "-c", "CREATE TABLE {table} (id int)"), compose=False),
        Scenario("error", "a failing statement, then a good one: ErrorResponse and recovery",
                 SEQSCAN_TABLE, 100,
                 ("psql", "-X", "-q", "-h", "{host}", "-p", "{port}", "-U", "{user}", "-d",
                  "{db}", "-c", "SELECT 1/0", "-c", "SELECT count(*) FROM {table}"),
                 ok_codes=(0, 1), compose=False),
        # What psql and pgbench cannot send, through libpq itself (lab/pqclient.py): a
        # pipelined batch with an error, a Flush, a failed transaction block, CopyFail, a
        # cancelled query, and a start-up that fails
        Scenario("pipeline", "libpq: a pipelined extended batch with an error, Flush, "
                             "BEGIN/error/ROLLBACK, CopyFail, a cancel, a failed start-up",
                 "tpipe", 0,
                 ("python3", "-m", "pktflow.lab.pqclient", "host={host} port={port} "
                  "user={user} dbname={db} sslmode=disable", "{table}"),
                 setup=("psql", "-X", "-q", "-h", "{host}", "-p", "{port}", "-U", "{user}", "-d",
                        "{db}", "-c", "CREATE TABLE {table} (id int)"), compose=False),
        # How clients authenticate, each method a role of its own (LOGIN_HBA), through libpq
        # (lab/pqsession.py): SCRAM-SHA-256, MD5, a cleartext password, and an MD5 login
        # with the wrong password, refused
        Scenario("logins", "libpq: SCRAM-SHA-256, MD5 and cleartext logins, and a wrong "
                           "password refused", "tlogins", 0,
                 ("python3", "-m", "pktflow.lab.pqsession", "logins",
                  "host={host} port={port} dbname={db} sslmode=disable"),
                 setup=("psql", "-X", "-q", "-h", "{host}", "-p", "{port}", "-U", "{user}",
                        "-d", "{db}", "-c", f"CREATE ROLE lab_scram LOGIN PASSWORD "
                        f"'{LAB_PASSWORD}'", "-c", "SET password_encryption = 'md5'", "-c",
                        f"CREATE ROLE lab_md5 LOGIN PASSWORD '{LAB_PASSWORD}'", "-c",
                        f"CREATE ROLE lab_cleartext LOGIN PASSWORD '{LAB_PASSWORD}'"),
                 compose=False, hba=LOGIN_HBA),
        # What the server says beside results, through libpq (lab/pqsession.py): a notice, a
        # warning, a COMMIT in a failed transaction (answered ROLLBACK), a foreign key
        # violation's fields, a result's columns, a pg_sleep cancelled from another connection
        Scenario("session", "libpq: a notice, a warning, COMMIT in a failed transaction, a "
                            "foreign key violation, a cancelled pg_sleep", "tsession", 5,
                 ("python3", "-m", "pktflow.lab.pqsession", "session",
                  "host={host} port={port} user={user} dbname={db} sslmode=disable "
                  "application_name=pktflow-lab client_encoding=UTF8 "
                  "options='-c DateStyle=ISO,DMY -c TimeZone=UTC'", "{table}"),
                 setup=("psql", "-X", "-q", "-h", "{host}", "-p", "{port}", "-U", "{user}",
                        "-d", "{db}", "-c", "CREATE TABLE {table} (id int PRIMARY KEY, "
                        "payload text)", "-c", "INSERT INTO {table} SELECT i, md5(i::text) "
                        "FROM generate_series(1, {rows}) AS i", "-c", "CREATE TABLE "
                        "{table}_child (id int, parent int REFERENCES {table})"),
                 compose=False),
        Scenario("tls", "psql with sslmode=require: SSLRequest answered 'S', then TLS",
                 SEQSCAN_TABLE, 1_000,
                 ("psql", "-X", "-q", "-h", "{host}", "-p", "{port}", "-U", "{user}", "-d",
                  "{db}", "-c", "SELECT * FROM {table}"),
                 env=(("PGSSLMODE", "require"),), tls=True, compose=False),
    )
}

PGBENCH_ROWS_PER_SCALE = 100_000  # pgbench_accounts rows per scale unit


def _values(s: Scenario, host: str, port: int, rows: int | None) -> dict[str, str]:
    rows = rows or s.default_rows
    return {"host": host, "port": str(port), "user": USER, "db": DATABASE, "table": s.table,
            "rows": str(rows), "scale": str(max(1, rows // PGBENCH_ROWS_PER_SCALE))}


def render_command(s: Scenario, *, host: str, port: int, rows: int | None = None) -> list[str]:
    values = _values(s, host, port, rows)
    return [part.format(**values) for part in s.command]


def render_setup(s: Scenario, *, host: str, port: int, rows: int | None = None) -> list[str]:
    """The command that builds the scenario's tables (CREATE TABLE AS via psql by default)."""
    values = _values(s, host, port, rows)
    if s.setup is None:
        return ["psql", "-X", "-q", "-h", host, "-p", str(port), "-U", USER, "-d", DATABASE,
                "-c", create_table_sql(s.table, int(values["rows"]))]
    return [part.format(**values) for part in s.setup]
