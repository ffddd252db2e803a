"""The PostgreSQL conversation on one TCP connection, rebuilt from both byte streams (sans-IO).

Fed in-order bytes per direction (and gap markers) by the TCP engine. Each side moves through:
  start -> typed             the stream's beginning was seen: untyped startup, then typed
  start/sync -> typed        mid-stream: decoding begins at the first provable boundary
  typed -> sync              after a capture gap that cut a message: resynchronise
  any -> stopped             TLS/GSS took over, malformed framing, or not PostgreSQL
DataRow and CopyData are counted in the hot loop, never turned into objects.
Queries are answered in order, so backend messages are charged to the oldest unfinished query.
"""

from __future__ import annotations

import marshal
from array import array
from collections import deque
from collections.abc import Callable
from typing import Any, Final

from pktflow import accel
from pktflow.findings import Finding
from pktflow.pgwire import messages as M
from pktflow.pgwire.framing import MAX_MESSAGE, BoundaryScan, find_boundary, message_run
from pktflow.pgwire.query import Query
from pktflow.pgwire.tls import NEED_MORE, client_hello_alpn
from pktflow.tcp.connection import CompiledSink

START: Final = "start"
TYPED: Final = "typed"
SYNC: Final = "sync"
STOPPED: Final = "stopped"
MAX_QUERIES: Final = 10_000  # queries listed per connection; the rest are counted
MAX_NAMES: Final = 10_000  # prepared statements and portals remembered per connection
MAX_ERROR_FINDINGS: Final = 20  # failed queries listed one by one per connection, then counted
# With an archive, answered queries leave memory once this many are listed in it: a pooler's
# back leg lists up to MAX_QUERIES, 550 bytes each as objects (a busy pool of 300 server
# connections: 1.6 GB), 8 in the list of where each went
ARCHIVE_AT: Final = 128
SYNC_WINDOW: Final = 256 * 1024  # bytes searched for a provable boundary before settling for less
KEEP_CAP: Final = 1 << 20  # larger control messages are read up to here and the rest skipped
_D: Final = 0x44  # "D": DataRow from the backend, Describe from the frontend
# Type byte -> message name, bound here: compiled, a Final is a C static, M.BACKEND a lookup
# in the other module's dict at every use.
_BACKEND_TYPES: Final = M.BACKEND
_FRONTEND_TYPES: Final = M.FRONTEND
_d: Final = 0x64  # "d": CopyData, either way
MAX_CLIENT_HELLO: Final = 1 << 15  # a TLS record is at most 16 KiB + 2 KiB: beyond, stop waiting
# ParameterStatus bodies decoded: every connection of a storm gets the same dozen or so (the
# strings are shared too). Bounded: a server that sends changing values only fills it.
_PARAMETER_TEXT: dict[bytes, tuple[str, str]] = {}
MAX_PARAMETER_TEXT: Final = 4096


class _Side:
    __slots__ = ("role", "state", "buf", "base", "skip", "_counts", "rows", "copies", "named",
                 "lost", "decoded", "scan")

    def __init__(self, role: str) -> None:
        self.role = role
        self.state = START
        self.buf = b""  # bytes not consumed yet; base is the stream offset of buf[0]
        self.base = 0
        self.skip = 0  # body bytes of a counted (bulk or oversized) message still to pass
        self._counts: dict[str, int] = {}  # by message name, in first-seen order, but for:
        self.rows = 0  # DataRow and CopyData: counted natively, a segment at a time
        self.copies = 0
        self.named = 0  # all other messages (in _counts), for who watches counts change
        self.lost = 0
        self.decoded = False
        self.scan: BoundaryScan | None = None  # the boundary search while in SYNC

    @property
    def counts(self) -> dict[str, int]:
        """Messages by name, in the order first seen."""
        if self.rows:
            self._counts["DataRow"] = self.rows
        if self.copies:
            self._counts["CopyData"] = self.copies
        return self._counts


def _bounded_put(names: dict[str, str], key: str, value: str) -> None:
    """Remember a statement or portal name; past MAX_NAMES, forget the oldest (a client that
    never closes its named statements must not grow memory without bound)."""
    names.pop(key, None)
    if len(names) >= MAX_NAMES:
        del names[next(iter(names))]
    names[key] = value


class Conversation(CompiledSink):
    def __init__(self, conn_id: str, start_seen: Callable[[int], bool] | None = None,
                 archive: Any = None) -> None:
        """`archive`, if given, keeps answered queries (as marshalled bytes) out of memory:
        anything with append(bytes), len() and [i] -> bytes (report.stored.Spill, a list)."""
        self.conn_id = conn_id
        self._start_seen = start_seen or (lambda d: False)
        self.sides = (_Side("frontend"), _Side("backend"))
        self.roles_known = False
        self.protocol = "unknown"
        self.encryption = "none"
        self.startup: dict[str, str | None] | None = None
        self.decode_started_at: str | None = None
        self.decode_stopped: dict[str, Any] | None = None
        self.findings: list[Finding] = []
        self.queries: list[Query] = []  # the first MAX_QUERIES, but those archived
        self.queries_total = 0
        self._archive = archive
        self._archived = array("q")  # where the first queries went in the archive, in order
        self.last_query: Query | None = None
        self.pending: deque[Query] = deque()  # sent, not finished
        self.last_done: Query | None = None
        self.statements: dict[str, str] = {}
        self.portals: dict[str, str] = {}
        self.parameters: dict[str, str] = {}
        self.backend_pid: int | None = None
        self.auth = 0  # last authentication request, names the frontend's 'p' reply
        self.encryption_asked: str | None = None
        self.batch_error = False  # an ErrorResponse since the last ReadyForQuery
        self.query_errors = 0
        # bound once per connection, not looked up in other modules per segment
        self._header = M.HEADER.unpack_from
        self._message_run: Callable[[bytes, int, int], tuple[int, int, int]] = (
            accel.native.message_run if accel.native is not None else message_run)

    # -- public API ----------------------------------------------------------------------

    @property
    def frontend_direction(self) -> int | None:
        if self.protocol == "unknown":
            return None
        return 0 if self.sides[0].role == "frontend" else 1

    def feed(self, d: int, data: bytes, offset: int, frame: int, ts: float) -> None:
        s = self.sides[d]
        if s.state == STOPPED:
            return
        if self.pending and s.role == "backend":
            q = self._head()
            if q is not None:
                q.segments.add(len(data))
        start = 0  # where the next message starts in data (not sliced: a copy per segment)
        if s.skip:
            start = min(s.skip, len(data))
            s.skip -= start
            if start == len(data):
                return
        if s.buf:
            data, offset, start = s.buf + data[start:], s.base, 0
        if s.state == TYPED:  # the steady state: straight to the message walk
            pos = self._typed(d, s, data, start, offset, frame, ts)
        else:
            if start:
                data, offset = data[start:], offset + start
            pos = self._consume(d, s, data, offset, frame, ts)
        s.buf = data[pos:] if pos < len(data) else b""
        s.base = offset + pos
        if s.state == SYNC and len(s.buf) > SYNC_WINDOW:
            self._settle_sync(d, s, frame, ts)

    def gap(self, d: int, offset: int, length: int, frame: int, ts: float) -> None:
        s = self.sides[d]
        if s.state == STOPPED:
            return
        if s.skip >= length and not s.buf:
            s.skip -= length  # inside a counted body: no boundary was lost
            return
        s.lost += length + len(s.buf) + s.skip
        s.buf, s.skip, s.base, s.scan = b"", 0, offset + length, None
        if s.state != START:
            s.state = SYNC
        for q in self.pending:
            q.incomplete = True
        self.findings.append(Finding(
            "warning", "pgwire-resync",
            f"{s.role} stream: a capture gap of {length:,} bytes at offset {offset:,} cut a "
            f"message; decoding resumes at the next provable message boundary",
            self.conn_id, [frame]))

    def finish(self) -> None:
        if self.query_errors > MAX_ERROR_FINDINGS:
            self.findings.append(Finding(
                "info", "query-error", f"{self.query_errors:,} queries failed in all (the first "
                f"{MAX_ERROR_FINDINGS} are listed)", self.conn_id, []))
        for d, s in enumerate(self.sides):
            if s.state == SYNC and s.buf:
                self._settle_sync(d, s, 0, 0.0)
        for q in self.pending:
            q.incomplete = True

    # -- consuming bytes -------------------------------------------------------------------

    def _consume(self, d: int, s: _Side, buf: bytes, off: int, frame: int, ts: float) -> int:
        pos = 0
        while s.state == START:  # SSLRequest, its answer and StartupMessage may share a buffer
            used = self._start(d, s, buf[pos:], off + pos, frame, ts)
            pos += used
            if s.state == STOPPED or s.state == START and not used:
                return pos
        if s.state == STOPPED:
            return pos
        if s.state == SYNC:
            key = ((s.role,) if self.roles_known else ("frontend", "backend"),
                   not self.roles_known)
            if s.scan is None or s.scan.key != key:
                s.scan = BoundaryScan(*key)
            hit = s.scan.find(buf[pos:], off + pos)
            if hit is None:
                return pos  # keep buffering (bounded by SYNC_WINDOW)
            s.scan = None
            pos, side = pos + hit[0], hit[1]
            self._synced(d, s, side, off, pos, frame)
        return self._typed(d, s, buf, pos, off, frame, ts)

    def _start(self, d: int, s: _Side, buf: bytes, off: int, frame: int, ts: float) -> int:
        """The first bytes of a direction: untyped startup messages, or an SSL answer."""
        if s.role == "backend":
            if self.encryption_asked:
                if not buf:
                    return 0
                answer = buf[:1]
                if answer in (b"S", b"G"):
                    self._encrypted("tls" if answer == b"S" else "gss", frame)
                    return len(buf)
                if answer == b"N":  # refused: plaintext goes on, startup follows
                    self.encryption_asked = None
                    self._count(s, "EncryptionRefused")
                    return 1
            # The frontend speaks first; with its start seen, the backend's is typed framing.
            s.state = TYPED if self.startup is not None or self._start_seen(d) else SYNC
            return 0
        if buf[:1] == b"\x16":  # a TLS record, where a startup length would be >= 369 MB
            return self._direct_tls(d, s, buf, off, frame)
        if len(buf) < 8:
            return 0
        ln, code = M.INT32.unpack_from(buf, 0)[0], M.INT32.unpack_from(buf, 4)[0]
        known = code in M.UNTYPED or code >> 16 == 3
        if not known or not 8 <= ln <= 10_000:
            if self._start_seen(d):
                self._not_postgres(d, off, frame, "the first message is not a PostgreSQL "
                                                 "startup, SSL or cancel request")
            else:
                s.state = SYNC
            return 0
        if len(buf) < ln:
            return 0
        body = buf[8:ln]
        self.roles_known = True
        s.decoded = True
        self.decode_started_at = self.decode_started_at or "startup"
        if self.protocol == "unknown":
            self.protocol = "postgresql"
        if code == M.SSL_REQUEST or code == M.GSSENC_REQUEST:
            self._count(s, M.UNTYPED[code])
            self.encryption_asked = M.UNTYPED[code]
            return ln
        if code == M.CANCEL_REQUEST:
            self._count(s, "CancelRequest")
            s.state = TYPED
            return ln
        self._count(s, "StartupMessage")
        params = M.startup_params(body)
        self.startup = {"user": params.get("user"), "database": params.get("database"),
                        "application_name": params.get("application_name"),
                        "encryption": self.encryption}
        s.state = TYPED
        other = self.sides[1 - d]
        if other.state == START and not self.encryption_asked:
            other.state = TYPED
        return ln

    def _typed(self, d: int, s: _Side, buf: bytes, pos: int, off: int, frame: int,
               ts: float) -> int:
        backend = s.role == "backend"
        types = _BACKEND_TYPES if backend else _FRONTEND_TYPES
        big_d = _D if backend else -1  # 'D' is DataRow from the backend, Describe from the front
        hdr = self._header
        run = self._message_run
        n = len(buf)
        rows = copies = nbytes = 0  # bulk messages since the last control message
        while n - pos >= 5:
            t = buf[pos]
            if t == _d or t == big_d:
                # The hot path: a run of DataRow or CopyData, counted, never parsed.
                start = pos
                count, pos, bad = run(buf, pos, MAX_MESSAGE)
                nbytes += pos - start
                if t == _D:
                    rows += count
                else:
                    copies += count
                if bad >= 0:  # a length PostgreSQL never sends (it caps messages near 1 GiB)
                    if rows or copies:
                        self._bulk(s, rows, copies, nbytes, frame, ts)
                    self._malformed(d, s, t, bad, off + pos, frame)
                    return n
                if pos > n:  # the last one continues in the next segment
                    s.skip = pos - n
                    pos = n
                    break
                continue
            ln = hdr(buf, pos)[1]
            if rows or copies:
                self._bulk(s, rows, copies, nbytes, frame, ts)
                rows = copies = nbytes = 0
            end = pos + 1 + ln
            if t not in types or ln < 4 or ln > MAX_MESSAGE:
                self._malformed(d, s, t, ln, off + pos, frame)
                return n
            if end > n:
                if ln <= KEEP_CAP:
                    break
                self._message(d, s, t, buf[pos + 5:pos + 5 + KEEP_CAP], ln, frame, ts)
                s.skip = end - n
                pos = n
                break
            self._message(d, s, t, buf[pos + 5:end], ln, frame, ts)
            pos = end
            if s.state == STOPPED:
                return n
        if rows or copies:
            self._bulk(s, rows, copies, nbytes, frame, ts)
        return pos

    # -- state changes ---------------------------------------------------------------------

    def _synced(self, d: int, s: _Side, side: str, off: int, pos: int, frame: int) -> None:
        if not self.roles_known:
            if side != s.role:
                a, b = self.sides
                a.role, b.role = b.role, a.role
            self.roles_known = True
        s.lost += pos
        s.state = TYPED
        if self.protocol == "unknown":
            self.protocol = "postgresql"
        if self.decode_started_at is None:
            self.decode_started_at = "mid-stream"
            self.findings.append(Finding(
                "info", "pgwire-mid-stream",
                f"the connection began before the capture: {s.role} decoding starts at stream "
                f"offset {off + pos:,} (frame {frame})", self.conn_id, [frame]))
        other = self.sides[1 - d]
        if other.state == START:
            other.state = SYNC

    def _settle_sync(self, d: int, s: _Side, frame: int, ts: float) -> None:
        """No boundary with proof in a full window: accept one without, or give the side up."""
        s.scan = None
        hit = find_boundary(s.buf, (s.role,), need_proof=False)
        if hit is None:
            s.lost += len(s.buf)
            s.buf = b""
            if not any(x.decoded for x in self.sides) and self.protocol == "unknown":
                s.state = STOPPED
                if self.decode_stopped is None:
                    self._not_postgres(d, s.base, frame, f"no PostgreSQL message framing in "
                                                         f"{s.lost:,} bytes", stop=False)
            return
        pos, side = hit
        self._synced(d, s, side, s.base, pos, frame)
        buf, base = s.buf, s.base
        s.buf = b""
        done = self._typed(d, s, buf, pos, base, frame, ts)
        s.buf, s.base = buf[done:], base + done

    def _direct_tls(self, d: int, s: _Side, buf: bytes, off: int, frame: int) -> int:
        """PostgreSQL 17's direct TLS: a ClientHello offering ALPN "postgresql"."""
        alpn = client_hello_alpn(buf)
        if alpn == NEED_MORE and len(buf) <= MAX_CLIENT_HELLO:
            return 0
        if isinstance(alpn, list) and "postgresql" in alpn:
            self.roles_known = True
            s.decoded = True
            self.decode_started_at = self.decode_started_at or "startup"
            self._encrypted("tls", frame, "the client started TLS directly (PostgreSQL 17 "
                                          "sslnegotiation=direct, ALPN \"postgresql\")")
            return len(buf)
        if self._start_seen(d):
            offered = ", ".join(alpn) if isinstance(alpn, list) and alpn else "none"
            self._not_postgres(d, off, frame, "the first message is a TLS ClientHello without "
                                              f"ALPN \"postgresql\" (offered: {offered}), which "
                                              "PostgreSQL's direct TLS requires")
        else:
            s.state = SYNC
        return 0

    def _encrypted(self, kind: str, frame: int, how: str | None = None) -> None:
        self.protocol = "postgresql-tls" if kind == "tls" else "postgresql-gss"
        self.encryption = kind
        for s in self.sides:
            s.state = STOPPED
        self.findings.append(Finding(
            "info", "encrypted", f"{how or 'the server accepted ' + str(self.encryption_asked)}: "
            f"the rest of the connection is {kind.upper()}-encrypted, so only its TCP transfer "
            f"is analysed", self.conn_id, [frame]))

    def _not_postgres(self, d: int, off: int, frame: int, reason: str,
                      stop: bool = True) -> None:
        self.protocol = "unknown"
        role = self.sides[d].role
        self.decode_stopped = {"direction": role, "offset": off, "frame": frame or None,
                               "reason": reason}
        if stop:
            for s in self.sides:
                s.state = STOPPED
        self.findings.append(Finding(
            "warning", "not-postgresql", f"{role} stream at offset {off:,}: {reason}; the "
            f"connection is not PostgreSQL as far as the capture shows, so only its TCP transfer "
            f"is analysed", self.conn_id, [frame] if frame else []))

    def _malformed(self, d: int, s: _Side, t: int, ln: int, at: int, frame: int) -> None:
        reason = (f"length {ln} is under 4" if ln < 4 else
                  f"length {ln:,} is absurd" if ln > MAX_MESSAGE else
                  f"type byte {t:#04x} is not a {s.role} message")
        s.state = STOPPED
        self.decode_stopped = {"direction": s.role, "offset": at, "frame": frame,
                               "reason": reason}
        if not any(x.decoded for x in self.sides) and not self.queries_total:
            self.protocol = "unknown"
            return
        self.findings.append(Finding(
            "error", "pgwire-malformed",
            f"{s.role} stream at offset {at:,}: {reason}; this direction is not decoded past "
            f"that point", self.conn_id, [frame]))

    # -- messages ---------------------------------------------------------------------------

    @staticmethod
    def _count(s: _Side, name: str) -> None:
        s._counts[name] = s._counts.get(name, 0) + 1
        s.named += 1

    def _head(self) -> Query | None:
        pending = self.pending
        if pending:  # per segment of a bulk response: the first is nearly always the one
            q = pending[0]
            if not q.done:
                return q
            for q in pending:
                if not q.done:
                    return q
        return None

    def _bulk(self, s: _Side, rows: int, copies: int, nbytes: int, frame: int,
              ts: float) -> None:
        s.decoded = True
        if rows:
            if not s.rows:
                s._counts["DataRow"] = 0  # takes its place among the names seen
            s.rows += rows
        if copies:
            if not s.copies:
                s._counts["CopyData"] = 0
            s.copies += copies
        if s.role == "frontend":  # COPY FROM STDIN: rows follow the query that asked for them
            if self.last_query is not None:
                self.last_query.copy_data += copies
            return
        q = self._head()
        if q is None:
            return
        q.data_rows += rows
        q.copy_data += copies
        q.respond(nbytes, rows + copies, ts, frame)

    def _message(self, d: int, s: _Side, t: int, body: bytes, ln: int, frame: int,
                 ts: float) -> None:
        s.decoded = True
        if s.role == "frontend":
            self._frontend(s, t, body, frame, ts)
        else:
            self._backend(s, t, body, ln, frame, ts)

    def _frontend(self, s: _Side, t: int, body: bytes, frame: int, ts: float) -> None:
        name = _FRONTEND_TYPES[t]
        if t == 0x70:  # 'p': what it is depends on the authentication request it answers
            name = M.PASSWORD_REPLY.get(self.auth, "PasswordMessage")
        self._count(s, name)
        if t == 0x51:  # Query
            self._add_query(Query(body.rstrip(b"\x00").decode("utf-8", "replace"), "simple",
                                  ts, frame), frame)
        elif t == 0x50:  # Parse: statement name, SQL
            parts = M.cstrings(body, 2)
            if len(parts) >= 2:
                _bounded_put(self.statements, parts[0], parts[1])
        elif t == 0x42:  # Bind: portal, statement
            parts = M.cstrings(body, 2)
            if len(parts) >= 2:
                _bounded_put(self.portals, parts[0], self.statements.get(parts[1], ""))
        elif t == 0x45:  # Execute: portal
            portal = M.cstrings(body, 1)[0]
            self._add_query(Query(self.portals.get(portal, ""), "extended", ts, frame), frame)
        elif t == 0x46 and len(body) >= 4:  # FunctionCall: the fast-path call of a function OID
            oid = M.INT32.unpack_from(body)[0]
            self._add_query(Query(f"FunctionCall oid {oid}", "function", ts, frame), frame)

    def _add_query(self, q: Query, frame: int) -> None:
        """Every query is tracked until answered; the first MAX_QUERIES are kept for the report,
        so a connection captured for hours does not grow without bound."""
        self.queries_total += 1
        self.last_query = q
        self.pending.append(q)
        if len(self.queries) + len(self._archived) < MAX_QUERIES:
            self.queries.append(q)
            if len(self.queries) >= ARCHIVE_AT and self._archive is not None:
                self._archive_answered()
        elif self.queries_total == MAX_QUERIES + 1:
            self.findings.append(Finding(
                "info", "queries-capped", f"more than {MAX_QUERIES:,} queries on this "
                f"connection: the first {MAX_QUERIES:,} are listed, the message counts cover "
                f"all of them (from frame {frame})", self.conn_id, [frame]))

    def _archive_answered(self) -> None:
        """Archive the queries at the head of the list that nothing can change any more: out
        of `pending` and not the last answered (a ReadyForQuery for a lone Sync is charged to
        it). Called as a query is added: the last sent, which COPY data is charged to, is the
        new one."""
        archive, pending, n = self._archive, self.pending, 0
        for q in self.queries:
            if q is self.last_done or any(p is q for p in pending):
                break
            self._archived.append(len(archive))
            # format 2: no table of the objects written (format 4's costs a third more)
            archive.append(marshal.dumps(tuple(q.to_json().values()), 2))
            n += 1
        del self.queries[:n]

    def _backend(self, s: _Side, t: int, body: bytes, ln: int, frame: int, ts: float) -> None:
        name = _BACKEND_TYPES[t]
        if t == 0x52 and len(body) >= 4:  # Authentication*
            self.auth = M.INT32.unpack_from(body)[0]
            name = M.AUTH_NAMES.get(self.auth, f"Authentication{self.auth}")
        self._count(s, name)
        if t == 0x52:  # authentication belongs to the session, not to a query
            return
        q = self._head()
        if t == 0x5A:  # ReadyForQuery: the end of a simple query or of a Sync'd batch
            target = q if q is not None and q.first_ts is not None else self.last_done
            if target is not None:
                target.respond(ln + 1, 1, ts, frame)
            # Close what was answered, and after an error the Executes the server skipped;
            # a query not answered yet may be one whose bytes the capture showed early.
            keep: deque[Query] = deque()
            for p in self.pending:
                if p.first_ts is not None or (self.batch_error and p.kind == "extended"):
                    p.done = True
                    self.last_done = p
                else:
                    keep.append(p)
            self.pending = keep
            self.batch_error = False
            return
        if t == 0x53 and body:  # ParameterStatus
            pair = _PARAMETER_TEXT.get(body)
            if pair is None:
                parts = M.cstrings(body, 2)
                if len(parts) < 2:
                    return
                pair = (parts[0], parts[1])
                if len(_PARAMETER_TEXT) < MAX_PARAMETER_TEXT:
                    _PARAMETER_TEXT[body] = pair
            if len(self.parameters) < 64:
                self.parameters[pair[0]] = pair[1]
            return
        if t == 0x4B and len(body) >= 4:  # BackendKeyData
            self.backend_pid = M.INT32.unpack_from(body)[0]
            return
        if q is None:
            if t == 0x45:  # an error outside any query: authentication, startup
                err = M.error_fields(body)
                self.findings.append(Finding(
                    "warning", "server-error", f"server error {err.get('code', '')}: "
                    f"{err.get('message', '')}", self.conn_id, [frame]))
            return
        q.respond(ln + 1, 1, ts, frame)
        if t == 0x43 or t == 0x49:  # CommandComplete, EmptyQueryResponse
            q.command_complete(body.rstrip(b"\x00").decode("utf-8", "replace") if t == 0x43
                               else "")
            if q.kind != "simple":
                q.done = True  # extended: each Execute ends with its own CommandComplete
                self.last_done = q
        elif t == 0x45:  # ErrorResponse
            err = M.error_fields(body)
            q.error = {"code": err.get("code"), "message": err.get("message"),
                       "severity": err.get("severity"), "detail": err.get("detail"),
                       "hint": err.get("hint"), "position": err.get("position")}
            q.done = True
            self.last_done = q
            self.query_errors += 1
            if self.query_errors <= MAX_ERROR_FINDINGS:
                sql = " ".join(q.sql.split())
                self.findings.append(Finding(
                    "info", "query-error", f"a query failed with {err.get('code', '?')} "
                    f"({err.get('message', '')}): {sql[:60]}{'…' if len(sql) > 60 else ''}",
                    self.conn_id, [q.sent_frame, frame]))
            self.batch_error = True
        elif t == 0x73:  # PortalSuspended: row limit reached
            q.tag = q.tag or "PortalSuspended"
            q.done = True
            self.last_done = q
        elif t in (0x47, 0x48, 0x57):  # CopyIn/CopyOut/CopyBothResponse
            q.kind = "copy"

    # -- report -------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        front, back = (self.sides[0], self.sides[1]) if self.sides[0].role == "frontend" \
            else (self.sides[1], self.sides[0])
        startup = dict(self.startup) if self.startup else None
        if startup is not None:
            startup["encryption"] = self.encryption
        return {
            "protocol": self.protocol,
            "startup": startup,
            "decode_started_at": self.decode_started_at if self.protocol != "unknown" else None,
            "decode_stopped": self.decode_stopped,
            "lost_bytes": {"frontend": front.lost, "backend": back.lost},
            "backend_pid": self.backend_pid,
            "server_parameters": self.parameters,
            "messages": {"frontend": dict(front.counts), "backend": dict(back.counts)},
            "queries": self._listed(),
            "queries_total": self.queries_total,
        }

    def _listed(self) -> list[dict[str, Any]]:
        """The listed queries' reports: those archived, then the rest."""
        archive = self._archive
        out = [dict(zip(_QUERY_KEYS, marshal.loads(archive[i]))) for i in self._archived]
        out += [q.to_json() for q in self.queries]
        return out


_QUERY_KEYS: Final = tuple(Query("", "simple", 0.0, 0).to_json())  # an archived query's fields
