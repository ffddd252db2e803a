"""Relays in the terminal: each pooler, its legs, the matched queries and the verdict.
Renders from the report's "relays" list (pktflow.report/1) only."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.text import Text

from pktflow.report.columns import fits, short_sql, table, widths
from pktflow.report.connections import ranked_pairs

MAX_ROWS = 15  # matched queries shown; the biggest responses first, the rest counted
MAX_LEGS = 12  # connection ids listed per leg


def _f(v: float | None, unit: str = "") -> str:
    return "-" if v is None else f"{v:,.2f}{unit}"


def _n(v: int | None) -> str:
    return "-" if v is None else f"{v:,}"


def _legs(ids: list[str]) -> str:
    """Connection ids, the first MAX_LEGS of them when a storm of clients came through."""
    if len(ids) <= MAX_LEGS:
        return ", ".join(ids)
    return f"{', '.join(ids[:MAX_LEGS])} ... ({len(ids):,} in all)"


# Short headers, explained in the titles, so the SQL keeps its room in a narrow terminal.
_HEADS = ("front via back", "sql", "rows", "req", "first", "last", "cost", "segments",
          "median B")
_DELAYS = ("delays in ms: req = request in -> out, first/last = response byte in -> out, "
           "cost = added by the relay")
_SEGMENTS = "segments and median sizes in -> out"
_LEFT = ("front via back", "sql")


def render_relay(relay: dict[str, Any], width: int = 120) -> RenderableType:
    head = Text()
    head.append(f"{relay['host']}:{relay['front_port']}", "bold")
    head.append(" relays to port " + ", ".join(str(p) for p in relay["back_ports"]))
    head.append(f"  front legs {_legs(relay['front_connections'])}"
                f" | back legs {_legs(relay['back_connections'])}", "dim")
    own = relay["pooler_own_queries"]
    counts = Text(f"{relay['matched_queries']:,} queries matched leg to leg, "
                  f"{relay['unmatched_front_queries']:,} front-only, "
                  f"{relay['unmatched_back_queries']:,} back-only, {len(own):,} of the pooler's "
                  f"own" + (f" ({', '.join(sorted({short_sql(q['sql']) for q in own})[:3])})"
                            if own else ""), "dim")
    verdict = relay["verdict"]
    body: list[RenderableType] = [head, counts, Text(verdict["summary"], "bold")]
    if verdict.get("setting"):
        body.append(Text("setting: " + verdict["setting"], "cyan"))
    if verdict.get("evidence_frames"):
        body.append(Text("evidence frames " + ", ".join(map(str, verdict["evidence_frames"])),
                         "dim"))
    # Bulk results: the biggest responses tell the transfer's story. Many small statements
    # (transaction pooling): the ones the relay delayed most.
    bulk, pairs = ranked_pairs(relay["queries"], MAX_ROWS)
    order = "biggest responses first" if bulk else "most delayed by the relay first"
    rows = [[f"{p['front']['connection']}#{p['front']['query_index']} via "
             f"{p['back']['connection']}#{p['back']['query_index']}", short_sql(p["sql"]),
             _n(p["rows"]), _f(p["request_delay_ms"]), _f(p["first_byte_delay_ms"]),
             _f(p["last_byte_delay_ms"]), _f(p["relay_cost_ms"]),
             f"{_n(p['segments_in'])} -> {_n(p['segments_out'])}",
             f"{_n(p['segment_median_in'])} -> {_n(p['segment_median_out'])}"]
            for p in pairs]
    full = widths(_HEADS, rows)
    # one table when every number and some SQL fit, else the delays and the segmentation as
    # two tables (numbers are never cropped)
    if fits(full, 1, width):
        body.append(table(f"matched queries, {order}; {_DELAYS}; {_SEGMENTS}", _HEADS, rows,
                          full, range(len(_HEADS)), _LEFT))
    else:
        body.append(table(f"matched queries, {order}; {_DELAYS}", _HEADS, rows, full,
                          range(7), _LEFT))
        body.append(table(f"the same queries: {_SEGMENTS}", _HEADS, rows, full, (0, 1, 7, 8),
                          _LEFT))
    rest = len(relay["queries"]) - MAX_ROWS
    if rest > 0:
        body.append(Text(f"... {rest:,} smaller matched queries in the JSON report", "dim"))
    body.append(Text("coupling: " + relay["coupling"]["summary"], "dim"))
    return Panel(Group(*body), title="Relay", title_align="left")


def render_relays(report: dict[str, Any], width: int = 120) -> list[RenderableType]:
    return [render_relay(r, width) for r in report.get("relays") or []]
