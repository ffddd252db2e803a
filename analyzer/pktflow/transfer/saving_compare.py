"""`compare`'s parts, each with the change that would close it and how much that would save
(issue 35): the slower capture's part, from its own figures where the model has them (a server
leg's transfer: its verdict's `saving_s`), else the part's own time or the gap."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pktflow.report.compare import Side


def closing(part: str, sa_us: int, sb_us: int, rows: list[dict[str, Any]], a: Side,
            b: Side) -> dict[str, Any]:
    """{"close_by": the change, on the slower capture, "saving_ms": how much it would save
    there (None: the model cannot say)}, for one part of the difference."""
    gap = abs(sb_us - sa_us)
    if gap == 0:
        return {"close_by": "nothing: the part takes as long in both", "saving_ms": 0.0}
    name, side, own, key = ("B", b, sb_us, "_b") if sb_us > sa_us else ("A", a, sa_us, "_a")
    if part == "server_wait":
        return {"close_by": f"{name}'s server leg as near and as quick as the other's (its round "
                            f"trip to the server, the query's execution)",
                "saving_ms": _ms(gap)}
    if part == "server_transfer":
        conns = {r[key]["server_connection"] for r in rows}
        known: list[float | None] = [side.connections[c].get("saving_s") for c in conns
                                     if c in side.connections]
        limits = ", ".join(sorted({str(side.connections[c].get("limit")) for c in conns
                                   if c in side.connections})) or "unknown"
        model = (None if not known or any(k is None for k in known)
                 else sum(k or 0.0 for k in known) * 1e6)
        if model == 0:
            return {"close_by": f"nothing outside the server: {name}'s server leg went at the "
                                f"sender's pace (the query, the server's CPU and I/O)",
                    "saving_ms": 0.0}
        return {"close_by": f"{name}'s server leg without what limited it ({limits})",
                "saving_ms": None if model is None else _ms(round(min(gap, model)))}
    if part == "relay":
        return {"close_by": f"{name} going direct (no relay)",
                "saving_ms": _ms(own) if side.has_relay else None}
    return {"close_by": f"{name}'s client leg keeping up with its server leg (the client's "
                        f"receive buffer, its reading, its path)",
            "saving_ms": _ms(own)}


def _ms(us: int | float) -> float:
    return round(us / 1000, 3)
