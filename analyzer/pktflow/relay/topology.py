"""Find relays (PgBouncer, Pgpool-II, any pooler) from the capture alone, and pair queries.

A relay is an address that is the server of PostgreSQL connections on one port (front legs)
and the client of PostgreSQL connections to another endpoint (back legs), where the back legs
carry the same statements shortly after the front legs do. No port numbers or product names are
assumed: on loopback every address is 127.0.0.1, so only the matching content proves a relay.

Works on the report's connection dicts (pktflow.report/1), after the single pass: a relay's
legs are whole conversations, and matching needs both legs' queries.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import Any

# How many same-SQL candidates to consider per front query (transaction pooling, pgbench).
SCAN_LIMIT = 64


def sql_key(sql: str | None) -> str:
    return " ".join((sql or "").split()).rstrip(";").strip()


class QueryRef:
    __slots__ = ("conn", "index", "q", "sent")

    def __init__(self, conn: str, index: int, q: dict[str, Any]) -> None:
        self.conn = conn
        self.index = index
        self.q = q
        # When the request's last byte was seen; frame numbers order equal timestamps. Kept:
        # matching a storm's 20,000 front queries reads it about 200,000 times.
        self.sent = (float(q.get("sent_s") or 0.0), int(q.get("sent_frame") or 0))

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


def find_relays(conns: list[dict[str, Any]]) -> list[Relay]:
    pg = [c for c in conns if is_postgres(c)]
    by_server: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for c in pg:
        by_server[(c["server"]["ip"], c["server"]["port"])].append(c)
    candidates = []
    for (ip, port), fronts in by_server.items():
        front_ids = {c["id"] for c in fronts}
        backs = [c for c in pg if c["client"]["ip"] == ip and c["id"] not in front_ids
                 and (c["server"]["ip"], c["server"]["port"]) != (ip, port)]
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
        legs = set(relay.front) | set(relay.back)
        if legs & taken:
            continue
        taken |= legs
        relays.append(relay)
    return relays


def _refs(conns: list[dict[str, Any]]) -> list[QueryRef]:
    refs = [QueryRef(c["id"], i, q) for c in conns for i, q in enumerate(c.get("queries") or [])]
    refs.sort(key=lambda r: r.sent)
    return refs


def match(ip: str, port: int, fronts: list[dict[str, Any]],
          backs: list[dict[str, Any]]) -> Relay:
    """Pair each front query with the back-leg execution that served it.

    Same SQL text, sent on the back leg after it arrived on the front leg and before the front
    leg's first response byte (a relay cannot forward what it has not received; in one capture
    time and frame order are the same clock, so no slack is allowed: with slack, the mirror image
    of a loopback relay would match too). Among candidates: the back connection this front connection used
    last (session pooling keeps the pair for life), then equal response size, then the earliest.
    """
    relay = Relay(ip, port)
    back_q: dict[str, list[QueryRef]] = defaultdict(list)
    for r in _refs(backs):
        back_q[sql_key(r.q.get("sql"))].append(r)
    sent_index = {k: [r.sent for r in v] for k, v in back_q.items()}
    used: set[tuple[str, int]] = set()
    bound: dict[str, str] = {}  # front conn -> back conn it was last served by
    front_keys: set[str] = set()
    for f in _refs(fronts):
        key = sql_key(f.q.get("sql"))
        front_keys.add(key)
        cands = back_q.get(key)
        if not cands:
            relay.unmatched_front.append(f)
            continue
        start = bisect.bisect_right(sent_index[key], f.sent)
        first = f.q.get("first_response_s")
        latest = ((float(first), int(f.q.get("first_frame") or 0)) if first is not None
                  else (float("inf"), 0))
        best: QueryRef | None = None
        best_score: tuple[int, int, tuple[float, int]] | None = None
        for b in cands[start:start + SCAN_LIMIT]:
            if b.sent > latest:
                break
            if (b.conn, b.index) in used:
                continue
            score = (0 if bound.get(f.conn) == b.conn else 1,
                     0 if b.q.get("response_bytes") == f.q.get("response_bytes") else 1,
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
        if c["id"] not in served:
            continue
        for i, q in enumerate(c.get("queries") or []):
            if (c["id"], i) in used:
                continue
            ref = QueryRef(c["id"], i, q)
            (relay.unmatched_back if sql_key(q.get("sql")) in front_keys else relay.own).append(ref)
    relay.front = sorted({c["id"] for c in fronts}, key=_conn_order)
    relay.back = sorted(served, key=_conn_order)
    relay.back_ports = sorted({c["server"]["port"] for c in backs if c["id"] in served})
    return relay


def _conn_order(cid: str) -> tuple[int, str]:
    digits = "".join(ch for ch in cid if ch.isdigit())
    return (int(digits) if digits else 0, cid)
