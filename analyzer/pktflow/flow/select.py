"""Which connections and which time span a diagram shows, chosen from the analysis report.

Default: the conversation that teaches the capture's point. Where a response is a transfer
(BULK_BYTES or more), the biggest one: the relay's biggest matched query with both its legs,
else the biggest query of the capture. Where every response is small, the protocol is the
point: the first failed query with the exchange after it (the session goes on), else the
first explicit transaction (through a pooler, with the server legs that carried it), else the
first extended-protocol query, else the biggest query. Without queries, the busiest
connection."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pktflow.errors import UsageError
from pktflow.report.columns import short_sql
from pktflow.report.connections import by_id, connection_ids

# After a query's last response byte, keep drawing this long for the ACKs that follow it.
TAIL_S = 0.2
# A response at least this large makes the capture about a transfer: its default is the
# biggest query. Below it the capture's point is the protocol (an error, a transaction).
BULK_BYTES = 64 * 1024
BEGINS = ("BEGIN", "START TRANSACTION")
ENDS = ("END", "COMMIT", "ROLLBACK", "ABORT")
TITLE_SQL = 60  # SQL in a diagram's title


@dataclass
class Selection:
    conn_ids: set[str]
    t0: float  # seconds from the capture's first packet
    t1: float
    title: str


def _span_after(report: dict[str, Any], conn_ids: set[str], last: float) -> float:
    """The end of the drawing: the next query sent on these connections, or last + TAIL_S."""
    nxt = [q["sent_s"] for c in by_id(report["connections"], conn_ids)
           for q in c.get("queries") or [] if q.get("sent_s") is not None and q["sent_s"] > last]
    return min([last + TAIL_S, *[t - 1e-6 for t in nxt]])


def _order(conn: str) -> tuple[int, str]:
    """c2 before c10."""
    return (int(conn[1:]) if conn[1:].isdigit() else 0, conn)


def _span(t_from: float | None, t_to: float | None) -> str:
    """The time span asked for, as a title says it: ", 0.050 s to 0.070 s"."""
    if t_from is not None and t_to is not None:
        return f", {t_from:.6g} s to {t_to:.6g} s"
    if t_from is not None:
        return f", from {t_from:.6g} s"
    if t_to is not None:
        return f", up to {t_to:.6g} s"
    return ""


def _query(report: dict[str, Any], conn: str, index: int) -> dict[str, Any]:
    for c in by_id(report["connections"], {conn}):
        qs = c.get("queries") or []
        if 0 <= index < len(qs):
            return qs[index]
        raise UsageError(f"connection {conn} has {len(qs)} queries; no query #{index}")
    raise UsageError(f"no connection {conn!r} in the capture")


def _pair_for(report: dict[str, Any], conn: str, index: int) -> dict[str, Any] | None:
    for relay in report.get("relays") or []:
        for p in relay["queries"]:
            for leg in ("front", "back"):
                if p[leg]["connection"] == conn and p[leg]["query_index"] == index:
                    return p
    return None


def select(report: dict[str, Any], *, query: str | None = None,
           connections: list[str] | None = None, t_from: float | None = None,
           t_to: float | None = None, whole: bool = False) -> Selection:
    conns = report["connections"]
    known = set(connection_ids(conns))
    end = report["capture"]["duration_s"]
    if connections:
        unknown = [c for c in connections if c not in known]
        if unknown:
            raise UsageError(f"no connection {', '.join(unknown)} in the capture "
                             f"(it has {', '.join(sorted(known)) or 'none'})")
        ids = set(connections)
        which = f"connection{'s' if len(ids) > 1 else ''} {', '.join(sorted(ids, key=_order))}"
        return Selection(ids, t_from or 0.0, end if t_to is None else t_to,
                         which + _span(t_from, t_to))
    if t_from is not None or t_to is not None:
        return Selection(known, t_from or 0.0, end if t_to is None else t_to,
                         "every connection" + _span(t_from, t_to))
    if whole:
        return Selection(known, 0.0, end, "whole capture")
    if query:
        conn, _, idx = query.partition("#")
        if not idx.isdigit():
            raise UsageError(f"--query {query!r}: expected CONNECTION#INDEX, e.g. c2#0")
        idx_n = int(idx)
        q = _query(report, conn, idx_n)
        pair = _pair_for(report, conn, idx_n)
    else:
        lesson = _lesson(report)
        if lesson is not None:
            return lesson
        pair = max((p for r in report.get("relays") or [] for p in r["queries"]),
                   key=lambda p: p["response_bytes"]["front"] or 0, default=None)
        if pair is not None:
            conn, idx_n = pair["front"]["connection"], pair["front"]["query_index"]
            q = _query(report, conn, idx_n)
        else:
            # one pass, keeping the largest only (stored connections are decoded one by one)
            best = max(((c["id"], i, q) for c in conns
                        for i, q in enumerate(c.get("queries") or [])),
                       key=lambda t: t[2].get("response_bytes") or 0, default=None)
            if best is None:
                if not conns:
                    raise UsageError("the capture holds no TCP connection to draw")
                busiest = max(conns, key=lambda c: c["packets"])
                return Selection({busiest["id"]}, 0.0, end,
                                 f"connection {busiest['id']} (no PostgreSQL queries found)")
            conn, idx_n, q = best
    if pair is not None:
        f = _query(report, pair["front"]["connection"], pair["front"]["query_index"])
        b = _query(report, pair["back"]["connection"], pair["back"]["query_index"])
        ids = {pair["front"]["connection"], pair["back"]["connection"]}
        t0 = f["sent_s"]
        last = max(x for x in (f.get("last_response_s"), b.get("last_response_s"), t0)
                   if x is not None)
        title = (f"{short_sql(f.get('sql'), TITLE_SQL)}  ({pair['front']['connection']}#"
                 f"{pair['front']['query_index']} via {pair['back']['connection']}#"
                 f"{pair['back']['query_index']})")
        return Selection(ids, t0, _span_after(report, ids, last), title)
    ids = {conn}
    t0 = q["sent_s"]
    last = q.get("last_response_s") or t0
    return Selection(ids, t0, _span_after(report, ids, last),
                     f"{short_sql(q.get('sql'), TITLE_SQL)}  ({conn}#{idx_n})")


def _pairs(report: dict[str, Any]) -> dict[tuple[str, int], tuple[str, int]]:
    """(front connection, query index) -> the server leg's (connection, query index)."""
    return {(p["front"]["connection"], p["front"]["query_index"]):
            (p["back"]["connection"], p["back"]["query_index"])
            for r in report.get("relays") or [] for p in r["queries"]}


def _drawn(report: dict[str, Any], conn: str, first: int, last: int, title: str
           ) -> Selection:
    """Queries first..last of a connection, with the server legs that carried them through a
    relay, from the first one's sending to the last one's end."""
    pairs = _pairs(report)
    ids, ends = {conn}, []
    for i in range(first, last + 1):
        q = _query(report, conn, i)
        ends += [q.get("last_response_s"), q.get("sent_s")]
        back = pairs.get((conn, i))
        if back is not None:
            ids.add(back[0])
            b = _query(report, *back)
            ends += [b.get("last_response_s")]
    t0 = _query(report, conn, first)["sent_s"]
    last_s = max(t for t in ends if t is not None)
    return Selection(ids, t0, _span_after(report, ids, last_s), title)


def _lesson(report: dict[str, Any]) -> Selection | None:
    """Where no response is a transfer: the exchange that shows what the capture is about,
    or None (then the biggest query is drawn)."""
    # per test, the earliest query passing it (by its sending, then by its connection's first
    # sending): a place each, not every connection's queries (a storm's 80,000 were 80 MB)
    Found = tuple[float, float, int, str, int]  # sent, connection's first, order, id, index
    best: dict[str, Found] = {}

    def offer(test: str, found: Found) -> None:
        if test not in best or found < best[test]:
            best[test] = found

    for order, c in enumerate(report["connections"]):
        qs = c.get("queries") or []
        if any((q.get("response_bytes") or 0) >= BULK_BYTES for q in qs):
            return None
        if not qs or c.get("role") == "back":  # a client's own conversation, not a pooler's
            continue
        opened = min(q["sent_s"] for q in qs)
        for i, q in enumerate(qs):
            at: Found = (q["sent_s"], opened, order, c["id"], i)
            if q.get("error") is not None:
                offer("failed", at)
            if (q.get("sql") or "").lstrip().upper().startswith(BEGINS):
                offer("opened", at)
            if q.get("kind") == "extended":
                offer("extended", at)

    def queries(conn: str) -> list[dict[str, Any]]:
        return next((c.get("queries") or [] for c in by_id(report["connections"], {conn})), [])

    if "failed" in best:
        *_, conn, i = best["failed"]
        qs = queries(conn)
        # from the first query of its batch (sent in the same segment) to the answer of the
        # next one sent after it: the session goes on
        start = min(k for k in range(len(qs)) if qs[k]["sent_frame"] == qs[i]["sent_frame"])
        nxt = next((k for k in range(i + 1, len(qs))
                    if qs[k]["sent_frame"] != qs[i]["sent_frame"]), None)
        return _drawn(report, conn, start, i if nxt is None else nxt,
                      f"{short_sql(qs[i].get('sql'), TITLE_SQL)}  ({conn}#{i}, failed)"
                      + ("" if nxt is None else ", and the next query"))
    if "opened" in best:
        *_, conn, i = best["opened"]
        qs = queries(conn)
        end = next((k for k in range(i + 1, len(qs))
                    if (qs[k].get("sql") or "").lstrip().upper().startswith(ENDS)), None)
        if end is not None:
            return _drawn(report, conn, i, end,
                          f"a transaction: {conn}#{i}-{end} ("
                          f"{short_sql(qs[i].get('sql'), 20)} … "
                          f"{short_sql(qs[end].get('sql'), 20)})")
    if "extended" in best:
        *_, conn, i = best["extended"]
        qs = queries(conn)
        return _drawn(report, conn, i, i,
                      f"{short_sql(qs[i].get('sql'), TITLE_SQL)}  ({conn}#{i})")
    return None
