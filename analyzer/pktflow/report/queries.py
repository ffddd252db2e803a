"""The PostgreSQL side of a connection in the terminal: who connected and how, what ran and
what answered it, how it was carried. Renders from the connection's JSON (pktflow.report/1)
only; the words are report/session.py's, which the HTML page shares."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.text import Text

from pktflow.rates import format_rate
from pktflow.report.columns import PANEL, widths
from pktflow.report.connections import queries_at, response_sizes
from pktflow.report.session import outcome, session_lines, sql_text, who

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
    began = conn.get("decode_started_at")
    return Text(f"PostgreSQL: {who(conn)}" + ("; decoded from mid-stream"
                                             if began == "mid-stream" else ""), "bold")


def session_text(conn: dict[str, Any]) -> list[Text]:
    """The session's own lines: cancel request, authentication, start-up, what the server
    said outside any query."""
    return [Text(line, style or "") for line, style in session_lines(conn)]


_HEADS = ("#", "at s", "rows", "bytes", "server ms", "transfer ms", "rate", "frames")
INDENT = 4  # a query's SQL and outcome, under its numbers


def _said(q: dict[str, Any]) -> Text:
    """The query's SQL, then what answered it."""
    out = Text(sql_text(q.get("sql"), bool(q.get("sql_truncated"))))
    for i, (words, style) in enumerate(outcome(q)):
        out.append("  -> " if i == 0 else "; ")
        out.append(words, style or "")
    return out


def query_table(conn: dict[str, Any], width: int = 120) -> RenderableType | None:
    """The connection's queries in a panel `width` columns wide: a line of numbers each
    (numbered as c1#0 in the relay table and `flow --query`), and under it its SQL, whole up
    to SQL_SHOWN characters and wrapped, with its command tag, error and notices. Where even
    the numbers do not fit in a line, each goes with its name."""
    queries = conn.get("queries") or []
    sizes = response_sizes(queries)
    if not sizes:
        return None
    title = f"{len(sizes)} quer{'y' if len(sizes) == 1 else 'ies'}"
    shown: list[int] = list(range(len(sizes)))
    if len(sizes) > MAX_QUERY_ROWS:  # a pooler's back leg, a long session: the big ones
        shown = sorted(heapq.nlargest(MAX_QUERY_ROWS, shown, key=sizes.__getitem__))
        title = (f"{len(sizes):,} queries, the {MAX_QUERY_ROWS} with the largest responses "
                 f"shown in order (--format json has every one)")
    chosen = queries_at(queries, shown)
    cells = []
    for i, q in zip(shown, chosen):
        sent, first, last = q.get("sent_s"), q.get("first_response_s"), q.get("last_response_s")
        cells.append([f"#{i}", "-" if sent is None else f"{sent:.3f}",
                      "-" if q.get("rows") is None else f"{q['rows']:,}",
                      f"{q.get('response_bytes', 0):,}", _ms(sent, first), _ms(first, last),
                      format_rate(q.get("goodput_bps")),
                      "-" if q.get("first_frame") is None
                      else f"{q['first_frame']}-{q['last_frame']}"])
    full = widths(_HEADS, cells)
    room = width - PANEL
    gap = 2 if sum(full) + 2 * (len(full) - 1) <= room else 1

    def line(row: Sequence[str]) -> str:
        return (" " * gap).join(c.ljust(w) if k == 0 else c.rjust(w)
                                for k, (c, w) in enumerate(zip(row, full)))

    body: list[RenderableType] = [Text(title)]
    tabular = sum(full) + gap * (len(full) - 1) <= room
    if tabular:
        body.append(Text(line(_HEADS), "bold"))
    for row, q in zip(cells, chosen):
        if tabular:
            body.append(Text(line(row)))
        else:  # narrower than the numbers: each with its name
            body.append(Text("  ".join([row[0]] + [f"{h} {c}" for h, c in
                                                   zip(_HEADS[1:], row[1:])])))
        body.append(Padding(_said(q), (0, 0, 0, INDENT)))
    return Group(*body)


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
