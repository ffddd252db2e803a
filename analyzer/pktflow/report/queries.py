"""The PostgreSQL side of a connection in the terminal: who connected, what ran, how it was
carried. Renders from the connection's JSON (pktflow.report/1) only."""

from __future__ import annotations

import heapq
from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from pktflow.rates import format_rate
from pktflow.report.columns import fits, short_sql, table, widths

MAX_QUERY_ROWS = 30  # queries shown per connection: beyond, those with the largest responses


def _ms(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "-"
    return f"{(b - a) * 1000:,.1f}"


def protocol_line(conn: dict[str, Any]) -> Text | None:
    proto = conn.get("protocol")
    if proto is None:
        return None
    if proto == "unknown":
        return Text("not PostgreSQL (no valid wire-protocol framing)", "dim")
    if proto in ("postgresql-tls", "postgresql-gss"):
        kind = "TLS" if proto.endswith("tls") else "GSSAPI"
        asked = conn.get("messages", {}).get("frontend", {})
        when = ("after the startup request" if "SSLRequest" in asked or "GSSENCRequest" in asked
                else "from its first byte (direct TLS)")
        return Text(f"PostgreSQL, {kind}-encrypted {when}: only the TCP transfer can be "
                    f"analysed", "yellow")
    st = conn.get("startup")
    who = (f"user {st.get('user')!r} database {st.get('database')!r}"
           + (f" application {st['application_name']!r}" if st.get("application_name") else "")
           if st else "startup not in the capture")
    began = conn.get("decode_started_at")
    return Text(f"PostgreSQL: {who}" + ("; decoded from mid-stream" if began == "mid-stream"
                                         else ""), "bold")


_HEADS = ("at s", "sql", "rows", "bytes", "server ms", "transfer ms", "rate", "frames")


def query_table(conn: dict[str, Any], width: int = 120) -> RenderableType | None:
    """The connection's queries, in a panel `width` columns wide: one table when every number
    and 12 characters of SQL fit, else the SQL and the numbers as two tables numbered by the
    query's index (c1#0 in the relay table and `flow --query`)."""
    queries = conn.get("queries") or []
    if not queries:
        return None
    title = f"{len(queries)} quer{'y' if len(queries) == 1 else 'ies'}"
    shown: list[int] | range = range(len(queries))
    if len(queries) > MAX_QUERY_ROWS:  # a pooler's back leg, a long session: the big ones
        shown = sorted(heapq.nlargest(MAX_QUERY_ROWS, shown,
                                      key=lambda i: queries[i].get("response_bytes") or 0))
        title = (f"{len(queries):,} queries, the {MAX_QUERY_ROWS} with the largest responses "
                 f"shown in order (--format json has every one)")
    rows: list[list[str | Text]] = []
    for i in shown:
        q = queries[i]
        sent, first, last = q.get("sent_s"), q.get("first_response_s"), q.get("last_response_s")
        sql = Text(short_sql(q.get("sql")))
        if q.get("error"):
            sql.append(f"  ERROR {q['error'].get('code', '')}", "red")
        rows.append(["-" if sent is None else f"{sent:.3f}", sql,
                     "-" if q.get("rows") is None else f"{q['rows']:,}",
                     f"{q.get('response_bytes', 0):,}", _ms(sent, first), _ms(first, last),
                     format_rate(q.get("goodput_bps")),
                     f"{q.get('first_frame', '-')}-{q.get('last_frame', '-')}"])
    full = widths(_HEADS, rows)
    if fits(full, 1, width):
        return table(title, _HEADS, rows, full, range(len(_HEADS)))
    numbered: list[list[str | Text]] = [[f"#{i}", *r] for i, r in zip(shown, rows)]
    heads = ("#", *_HEADS)
    full = widths(heads, numbered)
    return Group(table(title, heads, numbered, full, range(3)),
                 table("the same queries: rows, bytes and timing", heads, numbered, full,
                       (0, *range(3, len(heads)))))


def message_counts(conn: dict[str, Any]) -> Text | None:
    msgs = conn.get("messages")
    if not msgs:
        return None
    parts = []
    for side in ("frontend", "backend"):
        counts = msgs.get(side) or {}
        if counts:
            body = ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
            parts.append(f"{side}: {body}")
    return Text("messages  " + " | ".join(parts), "dim") if parts else None
