"""The report as a person reads it in a terminal: the answer first (what limited each bulk
transfer), findings, then each connection.

Renders from the report dict only, so text and JSON can never disagree about a number.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from pktflow.report.answer import render_answer
from pktflow.report.queries import message_counts, protocol_line, query_table, session_text
from pktflow.report.relays import render_relays
from pktflow.report.connections import busiest_summaries, panel
from pktflow.report.transfer import transfer_views

_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _n(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def render_findings(findings: list[dict[str, Any]]) -> RenderableType:
    if not findings:
        return Text("No findings: nothing went wrong on the wire or in the capture.", "green")
    table = Table(title="Findings", title_justify="left", show_lines=False, expand=True)
    table.add_column("", no_wrap=True)
    table.add_column("conn", no_wrap=True)
    table.add_column("finding", ratio=1)
    table.add_column("frames", no_wrap=True)
    for f in findings:
        frames = f["frames"]
        ev = ", ".join(str(x) for x in frames[:4]) + (", ..." if len(frames) > 4 else "")
        table.add_row(Text(f["severity"], _SEVERITY_STYLE[f["severity"]]),
                      f["connection"] or "-", f["message"], ev)
    return table


def render_capture(cap: dict[str, Any]) -> RenderableType:
    parts = [f"{cap['file']}", f"{cap['format']}{' (gzip)' if cap['compressed'] else ''}",
             ", ".join(cap["link_types"]) or "no interfaces",
             f"{_n(cap['packets'])} packets ({_n(cap['tcp_packets'])} TCP)",
             f"{cap['duration_s']:.3f} s"]
    if cap["truncated_packets"]:
        parts.append(f"{_n(cap['truncated_packets'])} truncated")
    return Text(" | ".join(parts), "bold")


def _endpoint(ep: dict[str, Any]) -> str:
    ip = ep["ip"]
    return f"[{ip}]:{ep['port']}" if ":" in ip else f"{ip}:{ep['port']}"


def _handshake(conn: dict[str, Any]) -> str:
    c2s, s2c = conn["directions"]["client_to_server"], conn["directions"]["server_to_client"]
    if not conn["handshake_seen"]:
        return "no handshake in the capture (began earlier)"
    bits = []
    if c2s["mss"] or s2c["mss"]:
        bits.append(f"MSS {_n(c2s['mss'])}/{_n(s2c['mss'])}")
    if c2s["window_scale_known"]:
        bits.append(f"wscale {c2s['window_scale']}/{s2c['window_scale']}")
    return "handshake: " + ", ".join(bits) if bits else "handshake seen"


_ROWS = [
    ("payload bytes", "payload_bytes"),
    ("data segments", "data_segments"),
    ("largest segment", "max_segment"),
    ("retransmitted segments", "retransmitted_segments"),
    ("out-of-order segments", "out_of_order_segments"),
    ("capture gaps (bytes)", None),
    ("snaplen-cut bytes", "truncated_bytes"),
    ("zero windows", "zero_window_events"),
    ("window updates", "window_updates"),
]


def render_connection(conn: dict[str, Any], width: int = 120) -> RenderableType:
    c2s, s2c = conn["directions"]["client_to_server"], conn["directions"]["server_to_client"]
    table = Table(show_header=True, box=None, pad_edge=False)
    table.add_column("")
    table.add_column("client -> server", justify="right")
    table.add_column("server -> client", justify="right")
    for label, key in _ROWS:
        if key is None:
            cells = [f"{d['gaps']} ({_n(d['missing_bytes'])})" for d in (c2s, s2c)]
        else:
            cells = [_n(d[key]) for d in (c2s, s2c)]
        table.add_row(label, *cells)
    end = conn["closed_by"] or "open at capture end"
    title = f"{conn['id']}  {_endpoint(conn['client'])} -> {_endpoint(conn['server'])}"
    role = conn.get("role")
    if role in ("front", "back"):
        title += f"  ({role} leg of a relay)"
    span = (f"{conn['start_s']:.3f}-{conn['end_s']:.3f} s, frames {conn['first_frame']}-"
            f"{conn['last_frame']} ({conn['packets']:,} packets), closed: {end}")
    body: list[RenderableType] = [Text(span, "dim")]
    proto = protocol_line(conn)
    if proto is not None:
        body.append(proto)
        body += session_text(conn)
    body.append(Text(_handshake(conn), "dim"))
    cp = conn.get("capture_point")
    if cp is not None:
        body.append(Text(cp["summary"] + (f" ({'; '.join(cp['evidence'][:1])})"
                                          if cp["evidence"] else ""), "dim"))
    body.append(table)
    for extra in (message_counts(conn), query_table(conn, width)):
        if extra is not None:
            body.append(extra)
    body += transfer_views(conn)
    return Panel(Group(*body), title=title, title_align="left")


MAX_PANELS = 10  # connections drawn in full
MAX_OVERVIEW = 50  # connections listed in the overview; --format json has every one


_OVERVIEW = (("conn", "left"), ("client -> server", "left"), ("role", "left"),
             ("packets", "right"), ("bytes c->s", "right"), ("bytes s->c", "right"),
             ("queries", "right"), ("limit", "left"))


def render_overview(top: list[dict[str, Any]], total: int,
                    width: int = 120) -> RenderableType:
    """One line per connection of `top` (the busiest, of `total`): who, role, bytes each way,
    queries, the bulk direction's verdict. When one line is wider than `width`, the endpoints
    and the verdict take two lines; numbers always keep their full width."""
    rows = []
    for c in top:
        c2s, s2c = c["directions"]["client_to_server"], c["directions"]["server_to_client"]
        bulk = max((c2s, s2c), key=lambda d: d["payload_bytes"])
        rows.append([c["id"], f"{_endpoint(c['client'])} -> {_endpoint(c['server'])}",
                     c.get("role", "-"), f"{c['packets']:,}", f"{c2s['payload_bytes']:,}",
                     f"{s2c['payload_bytes']:,}",
                     f"{c.get('queries_total', len(c.get('queries') or [])):,}",
                     (bulk.get("verdict") or {}).get("limit", "-")])

    def widths() -> list[int]:
        return [max(len(line) for text in [head] + [r[i] for r in rows]
                    for line in text.split("\n"))
                for i, (head, _) in enumerate(_OVERVIEW)]

    gaps = len(_OVERVIEW) - 1
    narrow = sum(widths()) + 2 * gaps > width  # then one space between columns
    if narrow and sum(widths()) + gaps > width:
        for r in rows:
            r[1] = r[1].replace(" -> ", " ->\n")
            r[7] = r[7].replace("_", "\n")
    table = Table(title=f"{total:,} connections, busiest first", title_justify="left",
                  box=None, pad_edge=False, collapse_padding=narrow)
    for (head, just), w in zip(_OVERVIEW, widths()):
        table.add_column(head, justify=just, no_wrap=True, min_width=w)  # type: ignore[arg-type]
    for r in rows:
        table.add_row(*r)
    if total <= len(top):
        return table
    return Group(table, Text(f"... and {total - len(top):,} smaller connections: "
                             f"--format json lists every one", "dim"))


def render(report: dict[str, Any], console: Console) -> None:
    conns = report["connections"]
    top = busiest_summaries(conns, MAX_OVERVIEW)
    answer = render_answer(report, [c for _, c in top])
    if answer is not None:  # the answer first: what limited each bulk transfer
        console.print(answer)
    console.print(render_findings(report["findings"]))
    console.print(render_capture(report["capture"]))
    if not conns:
        console.print("No TCP connections.")
    if len(conns) > 1:
        console.print(render_overview([c for _, c in top], len(conns), console.width))
    for relay in render_relays(report, console.width):
        console.print(relay)
    for i, _ in sorted(top[:MAX_PANELS], key=lambda ic: ic[0]):  # in capture order
        # whole, with its queries, one at a time
        console.print(render_connection(panel(conns, i), console.width))
    if len(conns) > MAX_PANELS:
        where = ("are in the overview above" if len(conns) <= MAX_OVERVIEW else
                 f"are not drawn (the overview lists the busiest {MAX_OVERVIEW})")
        console.print(Text(f"{len(conns) - MAX_PANELS:,} smaller connections {where}; "
                           f"--format json has every one in full", "dim"))
