"""Find relays (PgBouncer, Pgpool-II, any pooler) from the capture alone, and pair queries.

A relay is an address that is the server of PostgreSQL connections on one port (front legs)
and the client of PostgreSQL connections to another endpoint (back legs), where the back legs
carry the same statements shortly after the front legs do. No port numbers or product names are
assumed: on loopback every address is 127.0.0.1, so only the matching content proves a relay.

Works after the single pass, on what it reads of the report's connection dicts
(pktflow.report/1), taken by relay_leg: a relay's legs are whole conversations, and matching
needs both legs' queries.
"""

from __future__ import annotations

import bisect
import sys
from collections import defaultdict
from collections.abc import Callable
from typing import Any

# How many same-SQL candidates to consider per front query (transaction pooling, pgbench).
SCAN_LIMIT = 64
BULK_SEGMENTS = 4  # a response in this many segments or more is a bulk one
# A leg of this many queries or more reads them again from its stored report, when it can, if
# matching needs them (fewer: a storm's 20,000 two-query front legs would pay 3% of the run
# for 450 bytes each).
REREAD_QUERIES = 16
Reread = Callable[[], list[dict[str, Any]]]


def sql_key(sql: str | None) -> str:
    return " ".join((sql or "").split()).rstrip(";").strip()


_NONE = -1  # an int field the report left out (null): counts and frames are never negative


def _int(v: int | None) -> int:
    return _NONE if v is None else v


def _opt(v: int) -> int | None:
    return None if v == _NONE else v


def _optf(v: float) -> float | None:
    return None if v != v else v  # NaN: left out


# The keys of a query's report that LegQuery reads, in the order it takes them.
LEG_QUERY_KEYS = ("sql", "rows", "response_bytes", "sent_s", "first_response_s",
                  "last_response_s", "sent_frame", "first_frame", "last_frame",
                  "response_segments", "response_segment_median", "response_segment_max",
                  "response_segment_sizes")


class LegQuery:
    """The fields of a query's report that matching and pair_json read (None: not in it). A
    class of slots, not a NamedTuple: compiled, it is made without a Python-level __new__, and
    its numbers are held unboxed (a float or large int as an object is 24-28 bytes more: a
    storm keeps two queries per connection until matching)."""

    __slots__ = ("sql", "_rows", "_response_bytes", "_sent_s", "_first_response_s",
                 "_last_response_s", "_sent_frame", "_first_frame", "_last_frame",
                 "_response_segments", "_response_segment_median", "_response_segment_max",
                 "response_segment_sizes")

    def __init__(self, sql: str | None, rows: int | None, response_bytes: int | None,
                 sent_s: float | None, first_response_s: float | None,
                 last_response_s: float | None, sent_frame: int | None, first_frame: int | None,
                 last_frame: int | None, response_segments: int | None,
                 response_segment_median: int | None, response_segment_max: int | None,
                 response_segment_sizes: dict[str, int] | None) -> None:
        """The fields in LEG_QUERY_KEYS' order."""
        self.sql: str | None = sys.intern(sql) if type(sql) is str else sql  # a storm's few
        self._rows = _int(rows)
        self._response_bytes = _int(response_bytes)
        nan = float("nan")
        self._sent_s: float = nan if sent_s is None else sent_s
        self._first_response_s: float = nan if first_response_s is None else first_response_s
        self._last_response_s: float = nan if last_response_s is None else last_response_s
        self._sent_frame = _int(sent_frame)
        self._first_frame = _int(first_frame)
        self._last_frame = _int(last_frame)
        self._response_segments = _int(response_segments)
        self._response_segment_median = _int(response_segment_median)
        self._response_segment_max = _int(response_segment_max)
        # kept for bulk responses, which forward_chunk reads: kept for every query, these
        # dicts were 30% of a storm's legs
        self.response_segment_sizes = (
            response_segment_sizes if (response_segments or 0) >= BULK_SEGMENTS else None)

    @property
    def rows(self) -> int | None:
        return _opt(self._rows)

    @property
    def response_bytes(self) -> int | None:
        return _opt(self._response_bytes)

    @property
    def sent_s(self) -> float | None:
        return _optf(self._sent_s)

    @property
    def first_response_s(self) -> float | None:
        return _optf(self._first_response_s)

    @property
    def last_response_s(self) -> float | None:
        return _optf(self._last_response_s)

    @property
    def sent_frame(self) -> int | None:
        return _opt(self._sent_frame)

    @property
    def first_frame(self) -> int | None:
        return _opt(self._first_frame)

    @property
    def last_frame(self) -> int | None:
        return _opt(self._last_frame)

    @property
    def response_segments(self) -> int | None:
        return _opt(self._response_segments)

    @property
    def response_segment_median(self) -> int | None:
        return _opt(self._response_segment_median)

    @property
    def response_segment_max(self) -> int | None:
        return _opt(self._response_segment_max)


class Leg:
    """What relay matching reads of a PostgreSQL connection's report: its own small object, not
    the report's dicts (a storm keeps one per connection until the end: 6.3 KB each as
    dicts, 1.1 KB as this). Given `reread` (the report's queries again, from where the report
    is kept), a busy leg holds none of its queries until matching reads them, which it does
    only for connections that can be a relay's legs (an address both server and client): a
    busy pool's 300 connections of 10,000 queries each held 265 MB of them."""

    __slots__ = ("id", "client", "server", "_queries", "_reread", "zero_window_periods",
                 "zero_window_total_s", "evidence_frames", "bytes_acked_median",
                 "flight_bytes_median", "write_sizes", "limit", "payload_bytes")

    def __init__(self, cid: str, client: tuple[str, int], server: tuple[str, int],
                 queries: list[LegQuery] | None, reread: Reread | None,
                 zero_window_periods: int, zero_window_total_s: float,
                 evidence_frames: tuple[int, ...], bytes_acked_median: int | None,
                 flight_bytes_median: int | None,
                 write_sizes: dict[str, int] | None = None, limit: str = "none",
                 payload_bytes: int = 0) -> None:
        """`queries`, or (None) `reread` to read them again when matching needs them; the
        rest is of the leg's server -> client direction, for coupling_json."""
        self.id = cid
        self.client = (sys.intern(client[0]), client[1])
        self.server = (sys.intern(server[0]), server[1])
        self._queries: tuple[LegQuery, ...] | None = (
            None if queries is None else tuple(queries))
        self._reread = reread if queries is None else None
        self.zero_window_periods = zero_window_periods
        self.zero_window_total_s = zero_window_total_s
        self.evidence_frames = evidence_frames
        self.bytes_acked_median = bytes_acked_median
        self.flight_bytes_median = flight_bytes_median
        # the server -> client sender's writes that carried the most bytes: {size: writes}
        # only sizes of 1 KiB or more are ever read (write_unit): a storm's legs, whose writes
        # are all smaller, keep none (80,000 dicts were 40 MB)
        self.write_sizes: tuple[tuple[int, int], ...] = tuple(
            (int(k), n) for k, n in (write_sizes or {}).items() if int(k) >= 1024)
        # what limited the server -> client direction (its verdict), and how much it carried:
        # a relay is judged as a component from both legs' limits
        self.limit = limit
        self.payload_bytes = payload_bytes

    def rereads(self) -> bool:
        """Whether its queries are still to be read again from where the report is kept."""
        return self._reread is not None

    @property
    def queries(self) -> tuple[LegQuery, ...]:
        queries = self._queries
        if queries is None:  # read again once, kept: matching reads them twice
            assert self._reread is not None
            queries = tuple([leg_query(q) for q in self._reread()])
            self._queries, self._reread = queries, None
        return queries


def leg_query(q: dict[str, Any]) -> LegQuery:
    """The LegQuery of a query's report."""
    return LegQuery(*[q.get(k) for k in LEG_QUERY_KEYS])


def relay_leg(conn: dict[str, Any], reread: Reread | None = None) -> Leg | None:
    """The Leg of a connection's report; None for one that cannot be a relay's leg."""
    if not is_postgres(conn):
        return None
    client, server = conn["client"], conn["server"]
    queries = conn.get("queries") or ()
    busy = reread is not None and len(queries) >= REREAD_QUERIES
    s2c = conn["directions"]["server_to_client"]
    window, verdict = s2c.get("window") or {}, s2c.get("verdict") or {}
    return Leg(conn["id"], (client["ip"], client["port"]), (server["ip"], server["port"]),
               None if busy else [leg_query(q) for q in queries], reread if busy else None,
               window.get("zero_window_periods") or 0, window.get("zero_window_total_s") or 0.0,
               tuple(verdict.get("evidence_frames") or ()),
               (s2c.get("acks") or {}).get("bytes_acked_median"),
               (s2c.get("flights") or {}).get("bytes_median"),
               (s2c.get("writes") or {}).get("sizes_by_bytes"),
               verdict.get("limit") or "none", s2c.get("payload_bytes") or 0)


class QueryRef:
    __slots__ = ("conn", "index", "q", "sent")

    def __init__(self, conn: str, index: int, q: LegQuery) -> None:
        self.conn = conn
        self.index = index
        self.q = q
        # When the request's last byte was seen; frame numbers order equal timestamps. Kept:
        # matching a storm's 20,000 front queries reads it about 200,000 times.
        self.sent = (float(q.sent_s or 0.0), int(q.sent_frame or 0))

    def __repr__(self) -> str:
        return f"QueryRef({self.conn}#{self.index})"


class Relay:
    def __init__(self, host: str, front_port: int) -> None:
        self.host = host
        self.front_port = front_port
        self.front: list[str] = []  # connection ids
        self.back: list[str] = []
        self.pairs: list[tuple[QueryRef, QueryRef]] = []
        self.unmatched_front: list[QueryRef] = []
        self.unmatched_back: list[QueryRef] = []
        self.own: list[QueryRef] = []  # the pooler's own statements
        self.back_ports: list[int] = []

    def __repr__(self) -> str:
        return f"Relay({self.host}:{self.front_port}, front={self.front}, back={self.back})"


def is_postgres(conn: dict[str, Any]) -> bool:
    return str(conn.get("protocol", "")).startswith("postgresql")


def find_relays(legs: list[Leg]) -> list[Relay]:
    by_server: dict[tuple[str, int], list[Leg]] = defaultdict(list)
    for c in legs:
        by_server[c.server].append(c)
    candidates = []
    for (ip, port), fronts in by_server.items():
        front_ids = {c.id for c in fronts}
        backs = [c for c in legs if c.client[0] == ip and c.id not in front_ids
                 and c.server != (ip, port)]
        if backs:
            relay = match(ip, port, fronts, backs)
            if relay.pairs:
                candidates.append(relay)
    # A connection plays one part. On one host every address is the same, so the mirror image
    # of a relay (its back legs as fronts) is a candidate too; statements that repeat verbatim
    # (BEGIN, END) can pair by chance there, but far fewer than in the real direction. Keep the
    # best-supported candidates first and drop those that reuse a connection.
    candidates.sort(key=lambda r: -len(r.pairs))
    taken: set[str] = set()
    relays = []
    for relay in candidates:
        ids = set(relay.front) | set(relay.back)
        if ids & taken:
            continue
        taken |= ids
        relays.append(relay)
    return relays


def _refs(legs: list[Leg]) -> list[QueryRef]:
    refs = [QueryRef(c.id, i, q) for c in legs for i, q in enumerate(c.queries)]
    refs.sort(key=lambda r: r.sent)
    return refs


def match(ip: str, port: int, fronts: list[Leg], backs: list[Leg]) -> Relay:
    """Pair each front query with the back-leg execution that served it.

    Same SQL text, sent on the back leg after it arrived on the front leg and before the front
    leg's first response byte (a relay cannot forward what it has not received; in one capture
    time and frame order are the same clock, so no slack is allowed: with slack, the mirror
    image of a loopback relay would match too). Among candidates: the back connection this
    front connection used last (session pooling keeps the pair for life), then equal response
    size, then the earliest.
    """
    relay = Relay(ip, port)
    back_q: dict[str, list[QueryRef]] = defaultdict(list)
    for r in _refs(backs):
        back_q[sql_key(r.q.sql)].append(r)
    sent_index = {k: [r.sent for r in v] for k, v in back_q.items()}
    used: set[tuple[str, int]] = set()
    bound: dict[str, str] = {}  # front conn -> back conn it was last served by
    front_keys: set[str] = set()
    for f in _refs(fronts):
        key = sql_key(f.q.sql)
        front_keys.add(key)
        cands = back_q.get(key)
        if not cands:
            relay.unmatched_front.append(f)
            continue
        start = bisect.bisect_right(sent_index[key], f.sent)
        first = f.q.first_response_s
        latest = ((float(first), int(f.q.first_frame or 0)) if first is not None
                  else (float("inf"), 0))
        best: QueryRef | None = None
        best_score: tuple[int, int, tuple[float, int]] | None = None
        for b in cands[start:start + SCAN_LIMIT]:
            if b.sent > latest:
                break
            if (b.conn, b.index) in used:
                continue
            score = (0 if bound.get(f.conn) == b.conn else 1,
                     0 if b.q.response_bytes == f.q.response_bytes else 1,
                     b.sent)
            if best_score is None or score < best_score:
                best, best_score = b, score
        if best is None:
            relay.unmatched_front.append(f)
            continue
        used.add((best.conn, best.index))
        bound[f.conn] = best.conn
        relay.pairs.append((f, best))
    served = {b.conn for _, b in relay.pairs}
    for c in backs:
        if c.id not in served:
            continue
        for i, q in enumerate(c.queries):
            if (c.id, i) in used:
                continue
            ref = QueryRef(c.id, i, q)
            (relay.unmatched_back if sql_key(q.sql) in front_keys else relay.own).append(ref)
    relay.front = sorted({c.id for c in fronts}, key=_conn_order)
    relay.back = sorted(served, key=_conn_order)
    relay.back_ports = sorted({c.server[1] for c in backs if c.id in served})
    return relay


def _conn_order(cid: str) -> tuple[int, str]:
    digits = "".join(ch for ch in cid if ch.isdigit())
    return (int(digits) if digits else 0, cid)
