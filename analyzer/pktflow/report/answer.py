"""The answer first: a few lines that open `analyze`'s text report and the HTML page: one per
conversation whose queries' round trips were most of its time, one per bulk transfer (what
limited it, for how much of its time, and the one thing to look at), and one per relay (who set
the pace, what it added). Built once, as plain parts (`answer_lines`), from the report dict
only; the terminal (rich) and the page (HTML) each draw them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from pktflow.transfer.advice import NAMES, ROUND_TRIPS, look_at, sender_of
from pktflow.transfer.round_trips import round_trips_set_the_time
from pktflow.transfer.saving import sentence
from pktflow.units import size

if TYPE_CHECKING:
    from rich.console import RenderableType

MAX_LINES = 6  # transfers named; the rest are in the overview and the JSON
TITLE = "What limited it"


class Part(NamedTuple):
    text: str
    style: str = ""  # "bold" (the limit, who set the pace), "dim" (a count of the rest)


Line = list[Part]


def bulk_transfers(conns: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str,
                                                                 dict[str, Any]]]:
    """(connection, direction name, direction) of every direction judged, largest first."""
    out = []
    for c in conns:
        for name, d in c["directions"].items():
            if (d.get("verdict") or {}).get("limit", "none") != "none":
                out.append((c, name, d))
    out.sort(key=lambda cnd: -cnd[2]["payload_bytes"])
    return out


def _line(conn: dict[str, Any], name: str, d: dict[str, Any]) -> Line:
    v = d["verdict"]
    limit = v["limit"]
    share = (v.get("shares") or {}).get(limit)
    took = (d.get("limits") or {}).get("transfer_s")
    who = name.replace("_to_", "->")
    role = conn.get("role")
    leg = f" ({role} leg)" if role in ("front", "back") else ""
    head = f"{conn['id']}{leg} {who}: {size(d['payload_bytes'])}"
    if took:
        head += f" in {took * 1e3:,.1f} ms"
    what = NAMES.get(limit, limit)
    if limit == "receiver_window" and v.get("receiver"):
        what += f" ({v['receiver']})"
    if share is not None:
        what += f", {share:.0%} of the time"
    line = [Part(f"{head}, limited by "), Part(what, "bold")]
    saved = sentence(limit, took, v)
    if saved:
        line.append(Part(f"; {saved}"))
    advice = look_at(v, sender_of(role, name))
    if advice:
        line.append(Part(f". Look at {advice}."))
    return line


def answer_lines(report: dict[str, Any], conns: list[dict[str, Any]]) -> list[Line]:
    """The answer's lines for the connections `conns` (the busiest); none when nothing moved
    enough data to judge."""
    lines = [_round_trips_line(c) for c in conns
             if round_trips_set_the_time(c.get("round_trips"))]
    transfers = bulk_transfers(conns)
    lines += [_line(conn, name, d) for conn, name, d in transfers[:MAX_LINES]]
    if len(transfers) > MAX_LINES:
        lines.append([Part(f"... and {len(transfers) - MAX_LINES} smaller transfers", "dim")])
    lines += [_relay_line(relay) for relay in report.get("relays") or []]
    return lines


def render_answer(report: dict[str, Any],
                  conns: list[dict[str, Any]]) -> RenderableType | None:
    """The answer in the terminal, or None when nothing moved enough data to judge."""
    from rich.console import Group
    from rich.text import Text

    lines = answer_lines(report, conns)
    if not lines:
        return None
    return Group(Text(TITLE, "bold underline"),
                 *(Text.assemble(*((p.text, p.style) for p in line)) for line in lines))


def _round_trips_line(conn: dict[str, Any]) -> Line:
    """A conversation the round trips of its queries set the time of (pg_dump over a WAN)."""
    rt = conn["round_trips"]
    return [Part(f"{conn['id']}: {rt['queries']:,} queries one after another, "),
            Part(f"round trips {rt['share']:.0%} of the time", "bold"),
            Part(f" ({rt['queries']:,} x {rt['rtt_ms']:,.3f} ms = {rt['round_trips_ms']:,.1f} "
                 f"ms of {rt['span_ms']:,.1f} ms; the bulk data moved for {rt['bulk_ms']:,.1f} "
                 f"ms)" + _conversation_saving(rt) + f". Look at {ROUND_TRIPS}.")]


def _conversation_saving(rt: dict[str, Any]) -> str:
    saved, pipelined = rt.get("saving_s"), rt.get("pipelined_saving_s")
    if saved is None:
        return ""
    out = f"; with the client next to the server it would take about {saved * 1e3:,.0f} ms less"
    if pipelined is not None:
        out += f", with its queries pipelined about {pipelined * 1e3:,.0f} ms less"
    return out


# the relay's verdict.limit -> who set the pace, as the answer says it
COMPONENT = {"client": "the client", "network": "the client's network path",
             "pooler": "the pooler itself", "server_network": "the server's network path",
             "server": "the server"}


def _relay_line(relay: dict[str, Any]) -> Line:
    v = relay.get("verdict") or {}
    line = [Part(f"relay {relay['host']}:{relay['front_port']}: ")]
    who = COMPONENT.get(v.get("limit") or "")
    if who is None:
        line.append(Part(_first_sentence(v.get("summary") or "")))
    else:
        line += [Part(who[0].upper() + who[1:], "bold"), Part(" set the pace")]
        own, drain = v.get("relay_ms"), v.get("front_leg_ms")
        if own is not None:
            line.append(Part(f"; the relay itself added {own:,.2f} ms"))
            if drain:
                line.append(Part(f", the client leg {drain:,.2f} ms"))
        saved = v.get("saving_s")
        if saved and drain:  # else it is the relay's own time, just said
            line.append(Part(f"; going direct would save about {saved * 1e3:,.2f} ms"))
        line.append(Part("."))
    setting = v.get("setting")
    if setting:
        line.append(Part(f" {setting[0].upper()}{setting[1:]}."))
    return line


def _first_sentence(summary: str) -> str:
    """The relay verdict's part on its cost ("the relay added ..."), else its first clause."""
    for part in summary.split("; "):
        if part.startswith("the relay added"):
            return part[0].upper() + part[1:].rstrip(".") + "."
    return summary.split("; ")[0].rstrip(".") + "."
