"""The lab's libpq client for what a session carries beside results: how clients log in, and
what the server says outside rows (a notice, a warning, an error's fields, a COMMIT answered
ROLLBACK, a cancel). Real libpq through ctypes (lab/pqclient.py), so the messages are libpq's
own, as an application's would be.

    python3 -m pktflow.lab.pqsession logins CONNINFO
        SCRAM-SHA-256, MD5 and cleartext logins (a role each, scenarios.LOGIN_HBA), then an
        MD5 login with the wrong password, refused (28P01)
    python3 -m pktflow.lab.pqsession session CONNINFO TABLE
        DROP TABLE IF EXISTS of a missing table (NOTICE 00000), COMMIT outside a transaction
        (WARNING 25P01), BEGIN / a failing statement / COMMIT (answered ROLLBACK), a foreign
        key violation (23503 with its detail, schema, table and constraint), a SELECT of named
        columns, and a pg_sleep cancelled from a second connection (57014)

Standard library only: the system's Python runs it with the lab's checkout on PYTHONPATH.
The password is the lab's throwaway one (scenarios.LAB_PASSWORD), never on a command line."""

from __future__ import annotations

import ctypes
import sys

from pktflow.lab.pqclient import (COMMAND_OK, CONNECTION_OK, FATAL_ERROR, TUPLES_OK, Client,
                                  _libpq)
from pktflow.lab.scenarios import LAB_PASSWORD


def _connect(pq: ctypes.CDLL, conninfo: str) -> ctypes.c_void_p:
    return pq.PQconnectdb(conninfo.encode())  # type: ignore[no-any-return]


def logins(conninfo: str) -> int:
    pq = _libpq()
    for user in ("lab_scram", "lab_md5", "lab_cleartext"):
        conn = _connect(pq, f"{conninfo} user={user} password={LAB_PASSWORD}")
        if pq.PQstatus(conn) != CONNECTION_OK:
            sys.exit(f"pqsession: {user} could not log in: "
                     f"{(pq.PQerrorMessage(conn) or b'').decode(errors='replace').strip()}")
        res = pq.PQexec(conn, b"SELECT current_user")
        if pq.PQresultStatus(res) != TUPLES_OK:
            sys.exit(f"pqsession: {user}: SELECT current_user failed")
        pq.PQclear(res)
        pq.PQfinish(conn)
    bad = _connect(pq, f"{conninfo} user=lab_md5 password=not-the-password")
    if pq.PQstatus(bad) == CONNECTION_OK:
        sys.exit("pqsession: a wrong password was accepted")
    pq.PQfinish(bad)
    return 0


def session(conninfo: str, table: str) -> int:
    pq = _libpq()
    c = Client(pq, conninfo)
    for sql, want in ((f"DROP TABLE IF EXISTS {table}_no_such_table", COMMAND_OK),  # a notice
                      ("COMMIT", COMMAND_OK),  # a warning: no transaction in progress
                      ("BEGIN", COMMAND_OK), ("SELECT 1/0", FATAL_ERROR),
                      ("COMMIT", COMMAND_OK),  # in a failed transaction: ROLLBACK
                      (f"INSERT INTO {table}_child VALUES (1, 42)", FATAL_ERROR),  # no parent 42
                      (f"SELECT id, payload AS digest FROM {table} ORDER BY id", TUPLES_OK)):
        got = c.exec(sql)
        if got != want:
            sys.exit(f"pqsession: {sql}: status {got}, not {want}: {c.error()}")
    c.cancel_a_sleep("pqsession")
    pq.PQfinish(c.conn)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "logins":
        sys.exit(logins(sys.argv[2]))
    if len(sys.argv) == 4 and sys.argv[1] == "session":
        sys.exit(session(sys.argv[2], sys.argv[3]))
    sys.exit("usage: python3 -m pktflow.lab.pqsession logins CONNINFO | session CONNINFO TABLE")
