"""The ladder as a static SVG (print quality) and as a self-contained interactive HTML page.

The SVG is drawn here; the HTML page embeds the ladder's JSON and a small script that draws the
same picture in the browser, so groups expand and collapse, arrows show their details on hover,
and rows can be spaced by real time. No network access is needed to open either file.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

from pktflow.flow.ladder import Group, Ladder, Row, group_totals, label, to_json
from pktflow.report.stored import busiest

# connections with a section of their own, the busiest (as the text report's overview)
MAX_SECTIONS = 50

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


def svg(ladder: Ladder, *, expand: bool = False) -> str:
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

    for it in ladder.items:
        if isinstance(it, Group) and not expand:
            tot = group_totals(ladder.rows, it)
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
        elif isinstance(it, Group):
            for r in ladder.rows[it.start:it.end]:
                arrow(r, f"{(r.t - t0) * 1000:.3f} ms  #{r.frame}")
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


# The page's script draws the ladder from the embedded JSON. Groups start collapsed; a click on
# a group's header expands or collapses it; "real time" spaces rows by their timestamps.
_SCRIPT = r"""
const L = JSON.parse(document.getElementById('ladder').textContent);
const open = new Set();
const NS = 'http://www.w3.org/2000/svg';
function el(tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
function draw() {
  const realTime = document.getElementById('realtime').checked;
  const scale = parseFloat(document.getElementById('zoom').value);
  const svg = document.getElementById('ladder-svg');
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const xs = L.lanes.map((_, i) => 190 + i * 330);
  const width = xs[xs.length - 1] + 180;
  let y = 50, lastT = null;
  const t0 = firstT();
  const body = el('g', {});
  function step(t) {
    if (realTime && lastT !== null) y += Math.max(14, Math.min(400, (t - lastT) * 1000 * 40 * scale));
    else y += 20 * (realTime ? 1 : scale);
    lastT = t;
  }
  function arrow(r, parent, lead) {
    step(r.t);
    const g = el('g', {class: 'arrow', 'data-frame': r.frame});
    g.appendChild(el('title', {}, `frame ${r.frame}, ${r.t.toFixed(6)} s, ${r.connection}: ${r.label}`));
    g.appendChild(el('text', {x: 8, y: y + 4, class: 't'}, lead));
    const col = r.marks.length ? '#c0392b' : (r.kind === 'data' ? '#1f6fb2' : '#2e8b57');
    const line = el('line', {x1: xs[r.from], y1: y, x2: xs[r.to], y2: y, stroke: col,
                             'stroke-width': 1.6, 'marker-end': 'url(#h)'});
    if (r.kind !== 'data') line.setAttribute('stroke-dasharray', '5,3');
    g.appendChild(line);
    g.appendChild(el('text', {x: (xs[r.from] + xs[r.to]) / 2, y: y - 4, class: 'l', fill: col}, r.label));
    parent.appendChild(g);
  }
  L.items.forEach((it, idx) => {
    if (!it.group) { arrow(it, body, `${((it.t - t0) * 1000).toFixed(3)} ms #${it.frame}`); return; }
    const grp = it.group, g = el('g', {class: 'group' + (open.has(idx) ? ' open' : ''), 'data-index': idx});
    y += 18;
    const msgs = Object.entries(grp.messages).map(([c, n]) => `${c}×${n.toLocaleString()}`).join(' ');
    const head = el('text', {x: 8, y: y, class: 'g'},
      `${open.has(idx) ? '▾' : '▸'} × ${grp.repetitions.toLocaleString()} of ${grp.period} step(s): frames ${grp.first_frame}-${grp.last_frame}, ${grp.bytes.toLocaleString()} B ${msgs}`);
    head.addEventListener('click', () => { open.has(idx) ? open.delete(idx) : open.add(idx); draw(); });
    g.appendChild(head);
    const rows = open.has(idx) ? grp.rows : grp.rows.slice(0, grp.period);
    rows.forEach(r => arrow(r, g, open.has(idx) ? `${((r.t - t0) * 1000).toFixed(3)} ms #${r.frame}` : ''));
    body.appendChild(g);
  });
  const height = y + 30;
  svg.setAttribute('width', width); svg.setAttribute('height', height);
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  const defs = el('defs', {});
  const m = el('marker', {id: 'h', viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 7,
                          markerHeight: 7, orient: 'auto-start-reverse'});
  m.appendChild(el('path', {d: 'M0,0L10,5L0,10z', fill: '#444'}));
  defs.appendChild(m); svg.appendChild(defs);
  L.lanes.forEach((n, i) => {
    svg.appendChild(el('text', {x: xs[i], y: 24, class: 'lane'}, n));
    svg.appendChild(el('line', {x1: xs[i], y1: 32, x2: xs[i], y2: height - 10, class: 'rule'}));
  });
  svg.appendChild(body);
  document.getElementById('status').textContent =
    `${document.querySelectorAll('#ladder-svg .arrow').length} arrows drawn`;
}
function firstT() {
  for (const it of L.items) return it.group ? it.group.rows[0].t : it.t;
  return 0;
}
document.getElementById('realtime').addEventListener('change', draw);
document.getElementById('zoom').addEventListener('input', draw);
draw();
"""

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.5em}
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ddd;padding:.2em .5em;
text-align:right}td.s,th.s{text-align:left}
.sev-error{color:#c0392b;font-weight:bold}.sev-warning{color:#b06000}.sev-info{color:#2573a7}
#ladder-svg text{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:11px}
#ladder-svg .t{fill:#666}#ladder-svg .l{text-anchor:middle}
#ladder-svg .lane{text-anchor:middle;font-weight:bold;font-size:12px}
#ladder-svg .rule{stroke:#999}#ladder-svg .g{fill:#a06000;font-weight:bold;cursor:pointer}
.verdict{background:#f4f8fc;border-left:4px solid #1f6fb2;padding:.4em .8em;margin:.4em 0}
.controls{margin:.5em 0}figure{margin:1em 0}
"""


def _table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f'<th class="{"s" if i == 0 else ""}">{escape(h)}</th>'
                 for i, h in enumerate(head))
    body = "".join("<tr>" + "".join(f'<td class="{"s" if i == 0 else ""}">{escape(c)}</td>'
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def _report_sections(report: dict[str, Any]) -> str:
    cap = report["capture"]
    out = [f"<p>{escape(cap['file'])}: {cap['packets']:,} packets, {cap['duration_s']:.3f} s, "
           f"{len(report['connections'])} TCP connection(s).</p>"]
    if report["findings"]:
        out.append("<h2>Findings</h2><ul>" + "".join(
            f'<li><span class="sev-{f["severity"]}">{f["severity"]}</span> '
            f'{escape(f["connection"] or "")} {escape(f["message"])} '
            + (f'<small>frames {", ".join(map(str, f["frames"][:6]))}</small>'
               if f["frames"] else "") + "</li>"
            for f in report["findings"]) + "</ul>")
    for relay in report.get("relays") or []:
        v = relay["verdict"]
        out.append(f"<h2>Relay {escape(relay['host'])}:{relay['front_port']}</h2>"
                   f'<div class="verdict">{escape(v["summary"])}'
                   + (f"<br><b>Setting:</b> {escape(v['setting'])}" if v.get("setting") else "")
                   + "</div>")
    conns = report["connections"]
    top = sorted(busiest(conns, MAX_SECTIONS), key=lambda ic: ic[0])  # in capture order
    for _, c in top:
        title = (f"{c['id']} {c['client']['ip']}:{c['client']['port']} → "
                 f"{c['server']['ip']}:{c['server']['port']} ({c.get('role', 'direct')})")
        out.append(f"<h2>{escape(title)}</h2>")
        qs = c.get("queries") or []
        if qs:
            out.append(_table(["sql", "rows", "bytes", "sent s", "frames"], [
                [" ".join((q.get("sql") or "").split())[:80],
                 "-" if q.get("rows") is None else f"{q['rows']:,}",
                 f"{q.get('response_bytes', 0):,}", f"{q.get('sent_s') or 0:.3f}",
                 f"{q.get('first_frame')}-{q.get('last_frame')}"] for q in qs[:50]]))
        for name, d in c["directions"].items():
            v = d.get("verdict")
            if v:
                out.append(f'<div class="verdict"><b>{escape(name.replace("_", " "))}: '
                           f'{escape(v["limit"])}</b> {escape(v["summary"])}</div>')
    if len(conns) > len(top):
        out.append(f"<p>{len(conns) - len(top):,} smaller connections are not listed: "
                   f"<code>pktflow analyze --format json</code> has every one.</p>")
    return "".join(out)


def html(ladder: Ladder, report: dict[str, Any] | None = None,
         figures: list[tuple[str, str]] | None = None) -> str:
    data = json.dumps(to_json(ladder)).replace("</", "<\\/")
    sections = _report_sections(report) if report is not None else ""
    figs = "".join(f"<figure>{svg_text}<figcaption>{escape(cap)}</figcaption></figure>"
                   for cap, svg_text in figures or [])
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>pktflow: {escape(ladder.title)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>pktflow: {escape(ladder.title)}</h1>{sections}"
        "<h2>Flow</h2><p>Click a group's header (▸) to expand it; hover an arrow for its frame "
        "and details.</p><div class='controls'><label><input type='checkbox' id='realtime'> "
        "space rows by real time</label> <label>zoom <input type='range' id='zoom' min='0.5' "
        "max='4' step='0.1' value='1'></label> <span id='status'></span></div>"
        "<svg id='ladder-svg' xmlns='http://www.w3.org/2000/svg'></svg>"
        + ("<h3>Legend</h3><ul class='legend'>" + "".join(
            f"<li>{escape(line.strip())}</li>" for line in ladder.legend) + "</ul>"
           if ladder.legend else "") +
        f"{('<h2>Plots</h2>' + figs) if figs else ''}"
        f"<script type='application/json' id='ladder'>{data}</script>"
        f"<script>{_SCRIPT}</script></body></html>\n")
