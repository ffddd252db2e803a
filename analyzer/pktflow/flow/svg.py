"""The ladder as a static SVG (print quality); the interactive HTML page is report/page.py."""

from __future__ import annotations

from html import escape

from pktflow.flow.ladder import MARKED_ROWS, Group, Ladder, Phase, Row, label

ROW_H = 20
TOP = 56
LEFT = 150  # time and frame column
LANE_GAP = 330
COLORS = {"data": "#1f6fb2", "ack": "#2e8b57", "window": "#2e8b57", "dupack": "#c07000",
          "keepalive": "#2e8b57", "probe": "#c07000", "syn": "#8a3ab9", "syn-ack": "#8a3ab9",
          "fin": "#8a3ab9", "rst": "#c0392b"}
LEGEND_H = 15  # a legend line's height


def _color(r: Row) -> str:
    if "retransmission" in r.marks or "zero window" in r.marks:
        return "#c0392b"
    return COLORS.get(r.kind, "#333")


def svg(ladder: Ladder) -> str:
    """The ladder folded as `ladder.fold` says (Ladder.shown), as every format draws it."""
    lanes = ladder.lanes
    xs = [LEFT + 40 + i * LANE_GAP for i in range(len(lanes))]
    width = xs[-1] + 180 if xs else 400
    lines: list[str] = []
    y = TOP
    t0 = ladder.rows[0].t if ladder.rows else 0.0

    def arrow(r: Row, lead: str) -> None:
        nonlocal y
        y += ROW_H
        a, b = xs[r.src], xs[r.dst]
        col = _color(r)
        dash = ' stroke-dasharray="5,3"' if r.kind != "data" else ""
        tip = escape(f"frame {r.frame}, {r.t:.6f} s, {r.conn}: {label(r)}")
        lines.append(
            f'<g><title>{tip}</title>'
            f'<text x="8" y="{y + 4}" class="t">{escape(lead)}</text>'
            f'<line x1="{a}" y1="{y}" x2="{b}" y2="{y}" stroke="{col}" stroke-width="1.6"'
            f'{dash} marker-end="url(#h)"/>'
            f'<text x="{(a + b) / 2}" y="{y - 4}" class="l" fill="{col}">{escape(label(r))}'
            f'</text></g>')

    def note(text: str) -> None:
        nonlocal y
        y += 14
        lines.append(f'<text x="{LEFT + 4}" y="{y}" class="g">{escape(text)}</text>')

    for it in ladder.shown():
        if isinstance(it, Phase):
            tot = ladder.totals(it.start, it.end)
            top = y + 6
            note(f"bulk transfer: frames {tot['first_frame']}-{tot['last_frame']}, "
                 f"{tot['segments']:,} segments, {tot['bytes']:,} B, {tot['acks']:,} ACKs")
            for b in ladder.breakdown(it.start, it.end):
                note(f"{lanes[b['from']]} → {lanes[b['to']]}: {b['segments']:,} segments, "
                     f"median {b['segment_median']:,} B; {b['acks']:,} ACKs back")
            marked, n = ladder.marked(it.start, it.end, MARKED_ROWS)
            for r in marked:
                arrow(r, f"! #{r.frame}")
            if n > len(marked):
                note(f"... {n - len(marked):,} more marked packets (--detail)")
            g = it.dominant
            if g is not None:
                note(f"most repeated: these {g.period} step(s) × {g.reps:,} in a row")
                for r in ladder.rows[g.start:g.start + g.period]:
                    arrow(r, f"×{g.reps:,}")
            y += 8
            lines.append(f'<rect x="{LEFT}" y="{top}" width="{width - LEFT - 10}" '
                         f'height="{y - top}" class="box"/>')
        elif isinstance(it, Group):
            tot = ladder.group_totals(it)
            top = y + 6
            lines.append(f'<text x="8" y="{top + 12}" class="g">× {it.reps:,}</text>')
            for r in ladder.rows[it.start:it.start + it.period]:
                arrow(r, "")
            y += 12
            msgs = ", ".join(f"{c}×{n:,}" for c, n in tot["messages"].items())
            lines.append(
                f'<rect x="{LEFT}" y="{top}" width="{width - LEFT - 10}" height="{y - top}" '
                f'class="box"/><text x="{width - 16}" y="{y - 2}" class="gn">× {it.reps:,}: '
                f'frames {tot["first_frame"]}-{tot["last_frame"]}, {tot["bytes"]:,} B'
                f'{", " + escape(msgs) if msgs else ""}</text>')
            for odd in ladder.odd_ones(it):
                note(odd)
        else:
            arrow(it, f"{(it.t - t0) * 1000:.3f} ms  #{it.frame}")
    y += 20
    for line in ladder.legend:
        y += LEGEND_H
        lines.append(f'<text x="8" y="{y}" class="lg">{escape(line)}</text>')
    height = y + 30
    head = [f'<text x="{x}" y="{TOP - 16}" class="lane">{escape(n)}</text>'
            f'<line x1="{x}" y1="{TOP - 8}" x2="{x}" y2="{height - 10}" class="rule"/>'
            for x, n in zip(xs, lanes)]
    style = ("text{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:11px}"
             ".t{fill:#666}.l{text-anchor:middle}.lane{text-anchor:middle;font-weight:bold;"
             "font-size:12px}.rule{stroke:#999;stroke-width:1}.g{fill:#a06000;font-weight:bold}"
             ".gn{fill:#a06000;text-anchor:end}.lg{fill:#444;font-size:10px}"
             ".box{fill:#fff8e0;fill-opacity:.5;"
             "stroke:#e0b040;stroke-dasharray:3,2}.title{font-weight:bold;font-size:13px}")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}"><style>{style}</style>'
            f'<defs><marker id="h" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
            f'markerHeight="7" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" '
            f'fill="#444"/></marker></defs><rect width="100%" height="100%" fill="white"/>'
            f'<text x="8" y="18" class="title">{escape(ladder.title)}</text>'
            + "".join(head) + "".join(lines) + "</svg>\n")
