"""The lab's libpq client for what psql and pgbench cannot send: a pipelined batch of extended
queries with an error in it, a Flush, a failed transaction block, a COPY FROM STDIN the client
aborts (CopyFail), a cancelled query, and a start-up that fails. Real libpq (Debian's libpq5)
called through ctypes: the messages are libpq's own, as an application's would be.

Run as `python3 -m pktflow.lab.pqclient CONNINFO TABLE`; standard library only, so the
system's Python runs it without the package installed (the lab puts it on PYTHONPATH)."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import time

# libpq's ExecStatusType (libpq-fe.h)
COMMAND_OK, TUPLES_OK, COPY_IN, FATAL_ERROR = 1, 2, 4, 7
PIPELINE_SYNC, PIPELINE_ABORTED = 10, 11
CONNECTION_OK = 0

_void = ctypes.c_void_p


def _libpq() -> ctypes.CDLL:
    name = ctypes.util.find_library("pq")
    if name is None:
        sys.exit("pqclient: libpq is not installed (apt-get install libpq5)")
    pq = ctypes.CDLL(name)
    sigs = {
        "PQconnectdb": ([ctypes.c_char_p], _void),
        "PQstatus": ([_void], ctypes.c_int),
        "PQerrorMessage": ([_void], ctypes.c_char_p),
        "PQfinish": ([_void], None),
        "PQexec": ([_void, ctypes.c_char_p], _void),
        "PQsendQuery": ([_void, ctypes.c_char_p], ctypes.c_int),
        "PQsendQueryParams": ([_void, ctypes.c_char_p, ctypes.c_int, _void, _void, _void,
                               _void, ctypes.c_int], ctypes.c_int),
        "PQgetResult": ([_void], _void),
        "PQresultStatus": ([_void], ctypes.c_int),
        "PQclear": ([_void], None),
        "PQenterPipelineMode": ([_void], ctypes.c_int),
        "PQexitPipelineMode": ([_void], ctypes.c_int),
        "PQpipelineSync": ([_void], ctypes.c_int),
        "PQsendFlushRequest": ([_void], ctypes.c_int),
        "PQflush": ([_void], ctypes.c_int),
        "PQputCopyData": ([_void, ctypes.c_char_p, ctypes.c_int], ctypes.c_int),
        "PQputCopyEnd": ([_void, ctypes.c_char_p], ctypes.c_int),
        "PQgetCancel": ([_void], _void),
        "PQcancel": ([_void, ctypes.c_char_p, ctypes.c_int], ctypes.c_int),
        "PQfreeCancel": ([_void], None),
    }
    for fn, (args, res) in sigs.items():
        f = getattr(pq, fn)
        f.argtypes, f.restype = args, res
    return pq


class Client:
    def __init__(self, pq: ctypes.CDLL, conninfo: str) -> None:
        self.pq = pq
        self.conn = pq.PQconnectdb(conninfo.encode())
        if pq.PQstatus(self.conn) != CONNECTION_OK:
            sys.exit(f"pqclient: {self.error()}")

    def error(self) -> str:
        return (self.pq.PQerrorMessage(self.conn) or b"").decode(errors="replace").strip()

    def check(self, ok: int, what: str) -> None:
        if not ok:
            sys.exit(f"pqclient: {what}: {self.error()}")

    def results(self, until: int | None = None, limit: int = 64) -> list[int]:
        """Statuses of the results that come, up to `until` (a pipeline's sync), else up to
        the end of one query's results (libpq's NULL)."""
        got: list[int] = []
        for _ in range(limit):
            res = self.pq.PQgetResult(self.conn)
            if not res:
                if until is None:
                    return got
                continue
            got.append(self.pq.PQresultStatus(res))
            self.pq.PQclear(res)
            if got[-1] == until:
                return got
        sys.exit(f"pqclient: no end of results after {limit}: {got}")

    def send(self, sql: str) -> None:
        """One extended query (Parse, Bind, Describe, Execute) queued in pipeline mode."""
        self.check(self.pq.PQsendQueryParams(self.conn, sql.encode(), 0, None, None, None,
                                             None, 0), sql)

    def exec(self, sql: str) -> int:
        res = self.pq.PQexec(self.conn, sql.encode())
        status = int(self.pq.PQresultStatus(res))
        self.pq.PQclear(res)
        return status

    def cancel_a_sleep(self, who: str) -> None:
        """A query cancelled from a second connection (CancelRequest with BackendKeyData's
        key): it must fail."""
        pq = self.pq
        self.check(pq.PQsendQuery(self.conn, b"SELECT pg_sleep(5)"), "pg_sleep")
        time.sleep(0.2)
        cancel = pq.PQgetCancel(self.conn)
        err = ctypes.create_string_buffer(256)
        self.check(pq.PQcancel(cancel, err, len(err)), f"cancel: {err.value.decode()}")
        pq.PQfreeCancel(cancel)
        if self.results() != [FATAL_ERROR]:
            sys.exit(f"{who}: the cancelled query did not fail")


def main(conninfo: str, table: str) -> int:
    pq = _libpq()
    # a start-up that fails: the database does not exist, the server closes the connection
    bad = pq.PQconnectdb(f"{conninfo} dbname={table}_no_such_db".encode())
    if pq.PQstatus(bad) == CONNECTION_OK:
        sys.exit("pqclient: a connection to a missing database succeeded")
    pq.PQfinish(bad)
    c = Client(pq, conninfo)
    # a pipelined batch with an error in it: the server skips the rest up to the Sync, and
    # the batch's implicit transaction (the first INSERT too) is rolled back
    c.check(pq.PQenterPipelineMode(c.conn), "pipeline mode")
    for sql in (f"INSERT INTO {table} VALUES (1)", "SELECT 1/0",
                f"INSERT INTO {table} VALUES (2)"):
        c.send(sql)
    c.check(pq.PQpipelineSync(c.conn), "sync")
    got = c.results(until=PIPELINE_SYNC)
    if FATAL_ERROR not in got or PIPELINE_ABORTED not in got:
        sys.exit(f"pqclient: the batch did not fail as planned: {got}")
    # a Flush: the replies so far come before the Sync; the DELETE finds nothing to delete
    c.send(f"SELECT count(*) FROM {table}")
    c.check(pq.PQsendFlushRequest(c.conn), "flush request")
    c.check(pq.PQflush(c.conn) == 0, "flush")
    if c.results() != [TUPLES_OK]:
        sys.exit("pqclient: no result before the Sync")
    c.send(f"DELETE FROM {table}")
    c.check(pq.PQpipelineSync(c.conn), "sync")
    c.results(until=PIPELINE_SYNC)
    c.check(pq.PQexitPipelineMode(c.conn), "leaving pipeline mode")
    # a transaction block: ReadyForQuery says T, then E after an error, then I
    for sql, want in (("BEGIN", COMMAND_OK), ("SELECT 1/0", FATAL_ERROR),
                      ("ROLLBACK", COMMAND_OK)):
        if c.exec(sql) != want:
            sys.exit(f"pqclient: {sql}: {c.error()}")
    # COPY FROM STDIN, aborted by the client: CopyFail, answered by an ErrorResponse
    if c.exec(f"COPY {table} FROM STDIN") != COPY_IN:
        sys.exit(f"pqclient: COPY: {c.error()}")
    c.check(pq.PQputCopyData(c.conn, b"1\n2\n", 4) == 1, "copy data")
    c.check(pq.PQputCopyEnd(c.conn, b"the client gave up") == 1, "copy fail")
    if c.results() != [FATAL_ERROR]:
        sys.exit("pqclient: the aborted COPY did not fail")
    c.cancel_a_sleep("pqclient")
    pq.PQfinish(c.conn)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python3 -m pktflow.lab.pqclient CONNINFO TABLE")
    sys.exit(main(sys.argv[1], sys.argv[2]))
