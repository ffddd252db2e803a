"""The end of `pktflow analyze` over many captures (text): the fleet at a glance. Transfers by
what limited them, the ten slowest transfers and the ten slowest queries (each with its capture
and connection), and each relay's verdict.

Each capture's report is boiled down where it was analysed (`digest`: a worker process or a
Dask worker hands back a few hundred bytes, not the report), then the digests are merged
(`Fleet`) and drawn (`render_fleet`). A transfer is a direction the verdict judged, as in the
answer (report/answer.py's bulk_transfers).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from pktflow.rates import format_rate
from pktflow.report.answer import bulk_transfers
from pktflow.transfer.advice import NAMES

TOP = 10


def digest(report: Any) -> dict[str, Any]:
    """What the fleet summary reads of one capture's report."""
    file = report["capture"]["file"]
    limits: Counter[str] = Counter()
    transfers = []
    queries = []
    for c in report["connections"]:
        for _, name, d in bulk_transfers([c]):
            limit = d["verdict"]["limit"]
            limits[limit] += 1
            transfers.append({"capture": file, "connection": c["id"], "direction": name,
                              "bytes": d["payload_bytes"],
                              "transfer_s": (d.get("limits") or {}).get("transfer_s"),
                              "goodput_bps": d.get("goodput_bps"), "limit": limit,
                              "share": ((d["verdict"].get("shares") or {}).get(limit))})
        for i, q in enumerate(c.get("queries") or []):
            if q["last_response_s"] is None:
                continue
            queries.append({"capture": file, "connection": c["id"], "query": i,
                            "sql": " ".join(q["sql"].split())[:120],
                            "ms": (q["last_response_s"] - q["sent_s"]) * 1e3,
                            "bytes": q["response_bytes"]})
    transfers.sort(key=lambda t: -(t["transfer_s"] or 0.0))
    queries.sort(key=lambda q: -q["ms"])
    relays = [{"capture": file, "relay": f"{r['host']}:{r['front_port']}",
               "limit": r["verdict"]["limit"], "relay_ms": r["verdict"].get("relay_ms"),
               "setting": r["verdict"].get("setting")} for r in report["relays"]]
    return {"limits": dict(limits), "transfers": transfers[:TOP], "queries": queries[:TOP],
            "relays": relays}


class Fleet:
    """The digests of the captures analysed so far, merged."""

    def __init__(self) -> None:
        self.captures = 0
        self.limits: Counter[str] = Counter()
        self.transfers: list[dict[str, Any]] = []
        self.queries: list[dict[str, Any]] = []
        self.relays: list[dict[str, Any]] = []

    def add(self, d: dict[str, Any]) -> None:
        self.captures += 1
        self.limits.update(d["limits"])
        self.transfers = sorted(self.transfers + d["transfers"],
                                key=lambda t: -(t["transfer_s"] or 0.0))[:TOP]
        self.queries = sorted(self.queries + d["queries"], key=lambda q: -q["ms"])[:TOP]
        self.relays.extend(d["relays"])


def _size(n: int) -> str:
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= div:
            return f"{n / div:,.1f} {unit}"
    return f"{n:,} B"


def render_fleet(fleet: Fleet) -> RenderableType:
    parts: list[RenderableType] = [
        Text(f"Fleet: {fleet.captures:,} captures, {sum(fleet.limits.values()):,} transfers",
             "bold")]
    if fleet.limits:
        by = Table(title="Transfers by what limited them", title_justify="left")
        by.add_column("limit")
        by.add_column("transfers", justify="right")
        for limit, n in fleet.limits.most_common():
            by.add_row(NAMES.get(limit, limit), f"{n:,}")
        parts.append(by)
    if fleet.transfers:
        t = Table(title=f"The {len(fleet.transfers)} slowest transfers", title_justify="left")
        for col in ("capture", "conn", "direction", "bytes", "time", "rate", "limited by"):
            t.add_column(col, justify="right" if col in ("bytes", "time", "rate") else "left",
                         overflow="fold")
        for x in fleet.transfers:
            took = "-" if x["transfer_s"] is None else f"{x['transfer_s'] * 1e3:,.1f} ms"
            share = "" if x["share"] is None else f" ({x['share']:.0%})"
            t.add_row(x["capture"], x["connection"], x["direction"].replace("_to_", "->"),
                      _size(x["bytes"]), took, format_rate(x["goodput_bps"]),
                      NAMES.get(x["limit"], x["limit"]) + share)
        parts.append(t)
    if fleet.queries:
        q = Table(title=f"The {len(fleet.queries)} slowest queries", title_justify="left")
        for col in ("capture", "query", "time", "bytes", "sql"):
            q.add_column(col, justify="right" if col in ("time", "bytes") else "left",
                         overflow="fold")
        for x in fleet.queries:
            q.add_row(x["capture"], f"{x['connection']}#{x['query']}", f"{x['ms']:,.3f} ms",
                      _size(x["bytes"]), x["sql"])
        parts.append(q)
    if fleet.relays:
        r = Table(title="Relays: who set the pace, what the relay added, what to change",
                  title_justify="left")
        for col in ("capture", "relay", "limit", "added", "setting"):
            r.add_column(col, justify="right" if col == "added" else "left", overflow="fold")
        for x in fleet.relays:
            added = "-" if x["relay_ms"] is None else f"{x['relay_ms']:,.2f} ms"
            r.add_row(x["capture"], x["relay"], x["limit"], added, x["setting"] or "-")
        parts.append(r)
    return Group(*parts)
