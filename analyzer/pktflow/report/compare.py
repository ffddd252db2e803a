"""`pktflow compare` in the terminal: the difference decomposed first, then per query the
measures of A and B and how B differs, then the connections that served them."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from pktflow.compare import CONNECTION_METRICS, METRICS
from pktflow.rates import format_rate

MAX_QUERIES = 5  # the biggest responses; the JSON has all


def _v(value: Any, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "bit/s":
        return format_rate(value)
    if isinstance(value, float):
        return f"{value:,.2f}{' ' + unit if unit else ''}"
    if isinstance(value, int):
        return f"{value:,}{' ' + unit if unit else ''}"
    return str(value)


def headline(summary: dict[str, Any]) -> str:
    """'B is 12.3 ms slower in all (1 query): 10.1 ms server leg: ..., ...'."""
    diff = summary["difference_ms"]
    n = summary["queries"]
    if diff is None or not n:
        return "no query appears in both captures with its times known"
    how = "slower" if diff > 0 else "faster" if diff < 0 else "as fast"
    amount = f"{abs(diff):,.3f} ms {how}" if diff else "as fast"
    parts = ", ".join(f"{p['ms']:+,.3f} ms {p['where']}" for p in summary["parts"])
    return f"B is {amount} than A in all ({n} quer{'y' if n == 1 else 'ies'}): {parts}"


def render(doc: dict[str, Any], console: Console) -> None:
    console.print(Text(f"A: {doc['a']}{'  (through a relay)' if doc['a_has_relay'] else ''}",
                       "bold"))
    console.print(Text(f"B: {doc['b']}{'  (through a relay)' if doc['b_has_relay'] else ''}",
                       "bold"))
    summary = doc["summary"]
    console.print(Text(headline(summary), "bold"))
    for p in summary["parts"]:
        close = ("" if not p["ms"] or not p.get("saving_ms") else
                 f"; closed by {p['close_by']}: about {p['saving_ms']:,.3f} ms less")
        console.print(Text(f"  {p['ms']:+,.3f} ms {p['where']}: {p['why']}{close}"))
    if not doc["queries"]:
        console.print(Text("no query appears in both captures", "yellow"))
    for row in doc["queries"][:MAX_QUERIES]:
        sql = " ".join((row["sql"] or "").split())
        table = Table(title=sql[:100], title_justify="left", box=None, pad_edge=False)
        for col, just in (("", "left"), ("A", "right"), ("B", "right"), ("B / A", "right")):
            table.add_column(col, justify=just)  # type: ignore[arg-type]
        for key, name, unit, higher_better in METRICS:
            a, b, r = row["a"][key], row["b"][key], row["ratio_b_to_a"][key]
            style = ""
            if r is not None and higher_better is not None and abs(r - 1) >= 0.1:
                worse = (r < 1) if higher_better else (r > 1)
                style = "red" if worse else "green"
            table.add_row(name, _v(a, unit), _v(b, unit),
                          Text("-" if r is None else f"{r:.2f}x", style))
        console.print(table)
    rest = len(doc["queries"]) - MAX_QUERIES
    if rest > 0:
        console.print(Text(f"... {rest} smaller queries in both: see --format json", "dim"))
    for side in ("a", "b"):
        conns = doc["connections"][side]
        if not conns:
            continue
        table = Table(title=f"{side.upper()}: the connections that served them (server -> "
                      f"client, whole connection)", title_justify="left", box=None,
                      pad_edge=False)
        table.add_column("")
        for cid in list(conns)[:MAX_QUERIES]:
            table.add_column(cid, justify="right")
        for key, name, unit, _ in CONNECTION_METRICS:
            table.add_row(name, *[_v(c[key], unit) for c in list(conns.values())[:MAX_QUERIES]])
        console.print(table)
    for side in ("a", "b"):
        only = doc[f"only_in_{side}"]
        if only:
            console.print(Text(f"{len(only)} quer{'y' if len(only) == 1 else 'ies'} only in "
                               f"{side.upper()}", "dim"))
