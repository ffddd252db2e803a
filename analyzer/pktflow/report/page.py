"""The HTML report: one self-contained page a person reads from the top. The answer first
(what limited each transfer, the relay's verdict, the biggest query's timings), then the
queries' timings (server, transfer, rate, relay cost), the plots, the findings, the
connections, and last the ladder, folded as the terminal folds it and drawn when opened.

The ladder's JSON here holds what a folded drawing shows: a repeated block's rows once, a bulk
transfer's totals and its most repeated step. Its size follows the conversation's shape, not
its packet count (a 100,000-row pg_dump through PgBouncer made a 9.4 MB page holding every
row). `pktflow flow --format json` has every packet. No network access is needed to open it.
"""

from __future__ import annotations

import json
from html import escape
from collections.abc import Callable
from typing import Any

from pktflow.flow.explain import teach
from pktflow.flow.ladder import Group, Ladder, Phase, phase_json, row_json
from pktflow.flow.legend import MEANING, TCP_WORDS, code, family
from pktflow.rates import format_rate
from pktflow.report.answer import answer_lines
from pktflow.report.columns import short_sql
from pktflow.report.connections import busiest
from pktflow.report.queries import MAX_QUERY_ROWS
from pktflow.report.session import outcome, session_lines, sql_text, who

MAX_SECTIONS = 50  # connections with a section of their own, the busiest


def page_json(ladder: Ladder) -> dict[str, Any]:
    """The ladder as the page draws it, folded as every format is (Ladder.shown)."""
    rows = ladder.rows

    def block(g: Group) -> dict[str, Any]:
        return {"repetitions": g.reps, "period": g.period,
                "rows": [row_json(r) for r in rows[g.start:g.start + g.period]]}

    items: list[dict[str, Any]] = []
    for it in ladder.shown():
        if isinstance(it, Phase):
            items.append({"phase": phase_json(ladder, it)})
        elif isinstance(it, Group):
            items.append({"group": {**ladder.group_totals(it), **block(it),
                                    "odd": ladder.odd_ones(it)}})
        else:
            items.append(row_json(it))
    # what each message drawn is, for the reader's pane beside the ladder
    names = {n for _, n in ladder.drawing.symbols()[0]}
    kinds = set(ladder.drawing.kinds())
    return {"title": ladder.title, "lanes": ladder.lanes, "items": items,
            "packets": len(rows), "legend": ladder.legend, "notes": ladder.notes,
            # keyed by the name drawn (the legend's family() groups them: one rule, here)
            "meaning": {n: MEANING.get(family(n), "") for n in sorted(names)},
            # the server's single-byte answers have no documented name: shown by their byte
            "shown": {n: code(n) for n in sorted(names) if n.startswith("Encryption")},
            "kinds": {k: " ".join(TCP_WORDS[k]) for k in sorted(kinds) if k in TCP_WORDS},
            # the walk, step by step: the pane says which step a picked arrow belongs to
            "steps": [{"title": t, "sentence": said, "frames": frames}
                      for t, said, frames in ladder.steps]}


def _ms(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None else f"{(b - a) * 1000:,.2f}"


def _table(head: list[str], rows: list[list[str]], left: int = 1,
           prose: tuple[int, ...] = ()) -> str:
    """A table whose first `left` columns are text (left-aligned), columns `prose` wrapped
    text that keeps a readable width, in a box that scrolls sideways rather than the page; on
    a phone each row is a card of "column: value" lines (the style's media rule), each cell
    named by its column (data-h)."""
    def cell(tag: str, i: int, v: str) -> str:
        cls = ("s" if i < left else "") + (" w" if i in prose else "")
        return f'<{tag} class="{cls}" data-h="{escape(head[i])}">{escape(v)}</{tag}>'

    th = "".join(cell("th", i, h) for i, h in enumerate(head))
    body = "".join("<tr>" + "".join(cell("td", i, c) for i, c in enumerate(r)) + "</tr>"
                   for r in rows)
    return f"<div class='scroll'><table class='cards'><tr>{th}</tr>{body}</table></div>"


def _relay_costs(report: dict[str, Any], conns: set[str]
                 ) -> dict[tuple[str, int], float | None]:
    """(front connection, query index) -> what the relay added to it, ms, for the queries of
    `conns` (the page's: a storm's 80,000 pairs, all kept, were 45 MB)."""
    return {(p["front"]["connection"], p["front"]["query_index"]): p.get("relay_cost_ms")
            for r in report.get("relays") or [] for p in r["queries"]
            if p["front"]["connection"] in conns}


def _queries(top: list[tuple[int, dict[str, Any]]]) -> list[tuple[str, int, dict[str, Any]]]:
    """The largest responses of these connections (not a pooler's own back legs), in order of
    sending."""
    qs = [(c["id"], i, q) for _, c in top if c.get("role") != "back"
          for i, q in enumerate(c.get("queries") or [])]
    qs.sort(key=lambda x: -(x[2].get("response_bytes") or 0))
    return sorted(qs[:MAX_QUERY_ROWS], key=lambda x: x[2].get("sent_s") or 0.0)


def _answer(report: dict[str, Any], top: list[tuple[int, dict[str, Any]]],
            costs: dict[tuple[str, int], float | None]) -> str:
    """The page's first screen: the relay's verdict, what limited the biggest transfers, and
    the biggest query's timings."""
    # the lines that open the text report, and each relay's verdict in full
    out = ["<p class='verdict'>" + "".join(
        f"<b>{escape(p.text)}</b>" if p.style == "bold" else escape(p.text) for p in line)
        + "</p>" for line in answer_lines(report, [c for _, c in top])]
    for relay in report.get("relays") or []:
        v = relay["verdict"]
        out.append(f"<p><b>Relay {escape(relay['host'])}:{relay['front_port']}:</b> "
                   f"{escape(v['summary'])}</p>")
    qs = _queries(top)
    if qs:
        cid, i, q = max(qs, key=lambda x: x[2].get("response_bytes") or 0)
        cost = costs.get((cid, i))
        out.append(
            f"<p>The biggest response: <code>{escape(short_sql(q.get('sql'), 80))}</code> "
            f"({escape(cid)}#{i}): {q.get('response_bytes') or 0:,} B; server "
            f"{_ms(q.get('sent_s'), q.get('first_response_s'))} ms, transfer "
            f"{_ms(q.get('first_response_s'), q.get('last_response_s'))} ms, "
            + (f"{format_rate(q['goodput_bps'])}" if q.get("goodput_bps")
               else "too small for a rate")
            + ("" if cost is None else f"; the relay added {cost:,.2f} ms") + ".</p>")
    if not out:
        out.append("<p>Nothing here carried enough data to judge what limited it.</p>")
    return "<section id='answer'><h2>Answer</h2>" + "".join(out) + "</section>"


def _timings(top: list[tuple[int, dict[str, Any]]],
             costs: dict[tuple[str, int], float | None]) -> str:
    qs = _queries(top)
    if not qs:
        return ""
    rows = [[f"{cid}#{i}", sql_text(q.get("sql"), bool(q.get("sql_truncated"))),
             "; ".join(words for words, _ in outcome(q)),
             "-" if q.get("rows") is None else f"{q['rows']:,}",
             f"{q.get('response_bytes') or 0:,}",
             _ms(q.get("sent_s"), q.get("first_response_s")),
             _ms(q.get("first_response_s"), q.get("last_response_s")),
             format_rate(q.get("goodput_bps")),
             "-" if costs.get((cid, i)) is None else f"{costs[(cid, i)]:,.2f}",
             "-" if q.get("first_frame") is None
             else f"{q['first_frame']}-{q['last_frame']}"] for cid, i, q in qs]
    return ("<section id='queries'><h2>Queries</h2><p>Server: request sent to first response "
            "byte; transfer: first to last response byte; relay cost: what the pooler added "
            "to the query against its own server leg.</p>"
            + _table(["query", "sql", "answer", "rows", "bytes", "server ms", "transfer ms",
                      "rate", "relay cost ms", "frames"], rows, left=3, prose=(1, 2))
            + "</section>")


def _findings(report: dict[str, Any]) -> str:
    if not report["findings"]:
        return ""
    return ("<section id='findings'><h2>Findings</h2><ul>" + "".join(
        f'<li><span class="sev-{f["severity"]}">{f["severity"]}</span> '
        f'{escape(f["connection"] or "")} {escape(f["message"])} '
        + (f'<small>frames {", ".join(map(str, f["frames"][:6]))}</small>' if f["frames"]
           else "") + "</li>" for f in report["findings"]) + "</ul></section>")


def _connections(report: dict[str, Any], top: list[tuple[int, dict[str, Any]]]) -> str:
    conns = report["connections"]
    out = ["<section id='connections'>"]
    for _, c in sorted(top, key=lambda ic: ic[0]):  # in capture order
        title = (f"{c['id']} {c['client']['ip']}:{c['client']['port']} → "
                 f"{c['server']['ip']}:{c['server']['port']} ({c.get('role', 'direct')})")
        out.append(f"<h2>{escape(title)}</h2>")
        if c.get("protocol") in ("postgresql", "postgresql-tls", "postgresql-gss"):
            # who connected and how, a cancel request's target, what the server said outside
            # any query: the text report's words
            out.append("<ul class='session'>" + "".join(
                f"<li class='{style or ''}'>{escape(line)}</li>"
                for line, style in [(f"PostgreSQL: {who(c)}", None), *session_lines(c)])
                + "</ul>")
        for name, d in c["directions"].items():
            v = d.get("verdict")
            if v:
                out.append(f'<div class="verdict"><b>{escape(name.replace("_", " "))}: '
                           f'{escape(v["limit"])}</b> {escape(v["summary"])}</div>')
    if len(conns) > len(top):
        out.append(f"<p>{len(conns) - len(top):,} smaller connections are not listed: "
                   f"<code>pktflow analyze --format json</code> has every one.</p>")
    return "".join(out) + "</section>"


# The page's script draws the ladder from the embedded JSON when its box is opened. Folded
# items (a repeated block, a bulk transfer) start closed; a click on a header opens it.
_SCRIPT = r"""
const L = JSON.parse(document.getElementById('ladder').textContent);
const open = new Set();
const NS = 'http://www.w3.org/2000/svg';
let drawn = false;
function el(tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
function n(x) { return x.toLocaleString('en-US'); }
let picked = null, shown = [];
function family(name) {
  if (name.startsWith('Authentication')) return 'Authentication';
  if (name.startsWith('SASL') || name.startsWith('GSSResponse')) return 'PasswordMessage';
  return name;
}
function pick(r) {
  picked = r.frame;
  document.querySelectorAll('#ladder-svg .arrow.picked').forEach(a => a.classList.remove('picked'));
  const a = document.querySelector(`#ladder-svg .arrow[data-frame="${r.frame}"]`);
  if (a) { a.classList.add('picked'); a.scrollIntoView({block: 'nearest', inline: 'nearest'}); }
  const pane = document.getElementById('pane');
  const lines = [`<b>frame ${r.frame}</b>, ${r.t.toFixed(6)} s, ${r.connection}: ${L.lanes[r.from]} → ${L.lanes[r.to]}`,
                 `${r.kind}, ${n(r.bytes)} B, window ${n(r.window)}` + (r.marks.length ? `, ${r.marks.join(', ')}` : ''),
                 L.kinds[r.kind] ? esc(L.kinds[r.kind]) : ''];
  const details = r.details.slice();
  r.message_sequence.forEach(([name, k]) => {
    const mine = details.filter(d => d.message === name).slice(0, k);
    mine.forEach(d => details.splice(details.indexOf(d), 1));
    const extra = mine.map(d => (d.severity ? d.severity + ' ' : '') + (d.sqlstate ? d.sqlstate + ' ' : '') + d.text).join('; ');
    lines.push(`<b>${esc(L.shown[name] || name)}</b>${k > 1 ? ' ×' + n(k) : ''}${extra ? ' (' + esc(extra) + ')' : ''}: ${esc(L.meaning[name] || '')}`);
  });
  if (r.partial) lines.push('… the last message goes on in a later segment');
  const i = L.steps.findIndex(s => s.frames.includes(r.frame));
  if (i >= 0) lines.push(`<i>step ${i + 1}, ${esc(L.steps[i].title)}:</i> ${esc(L.steps[i].sentence)}`);
  pane.innerHTML = lines.filter(Boolean).map(x => `<div>${x}</div>`).join('');
}
function esc(t) { return t.replace(/[&<>]/g, c => ({'&': '&amp;', '<': '&lt;', '>': '&gt;'})[c]); }
function stepBy(d) {
  if (!shown.length) return;
  const i = shown.findIndex(r => r.frame === picked);
  pick(shown[Math.max(0, Math.min(shown.length - 1, i < 0 ? 0 : i + d))]);
}
function draw() {
  drawn = true;
  shown = [];
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
    const g = el('g', {class: 'arrow' + (picked === r.frame ? ' picked' : ''), 'data-frame': r.frame});
    g.addEventListener('click', () => pick(r));
    shown.push(r);
    g.appendChild(el('title', {}, `frame ${r.frame}, ${r.t.toFixed(6)} s, ${r.connection}: ${r.label}`));
    g.appendChild(el('text', {x: 8, y: y + 4, class: 't'}, lead));
    // red for what went wrong on the wire, not for whose request a pooler sent
    const trouble = r.marks.some(m => !m.startsWith('for ') && m !== "pooler's own");
    const col = trouble ? '#c0392b' : (r.kind === 'data' ? '#1f6fb2' : '#2e8b57');
    const line = el('line', {x1: xs[r.from], y1: y, x2: xs[r.to], y2: y, stroke: col,
                             'stroke-width': 1.6, 'marker-end': 'url(#h)'});
    if (r.kind !== 'data') line.setAttribute('stroke-dasharray', '5,3');
    g.appendChild(line);
    g.appendChild(el('text', {x: (xs[r.from] + xs[r.to]) / 2, y: y - 4, class: 'l', fill: col}, r.label));
    parent.appendChild(g);
  }
  function note(parent, text) { y += 16; parent.appendChild(el('text', {x: 24, y: y, class: 'n'}, text)); }
  function lead(r) { return `${((r.t - t0) * 1000).toFixed(3)} ms #${r.frame}`; }
  L.items.forEach((it, idx) => {
    const fold = it.group || it.phase;
    if (!fold) { arrow(it, body, lead(it)); return; }
    const isOpen = open.has(idx);
    const g = el('g', {class: 'group' + (isOpen ? ' open' : ''), 'data-index': idx});
    y += 18;
    // per leg: a relayed row is one row on each leg, never two
    const legs = fold.legs.filter(l => Object.keys(l.messages).length);
    const msgs = legs.map(l => (legs.length > 1 ? `${L.lanes[l.from].split(' ')[0]}→${L.lanes[l.to].split(' ')[0]} ` : '') +
      Object.entries(l.messages).map(([c, k]) => `${c}×${n(k)}`).join(' ')).join('; ');
    const head = it.group
      ? `× ${n(fold.repetitions)} of ${fold.period} step(s): frames ${fold.first_frame}-${fold.last_frame}, ${n(fold.bytes)} B ${msgs}`
      : `bulk transfer: frames ${fold.first_frame}-${fold.last_frame}, ${n(fold.segments)} segments, ${n(fold.bytes)} B, ${n(fold.acks)} ACKs ${msgs}`;
    const h = el('text', {x: 8, y: y, class: 'g'}, `${isOpen ? '▾' : '▸'} ${head}`);
    h.addEventListener('click', () => { isOpen ? open.delete(idx) : open.add(idx); draw(); });
    g.appendChild(h);
    if (isOpen && it.group) {
      fold.odd.forEach(t => note(g, t));
      fold.rows.forEach(r => arrow(r, g, `×${n(fold.repetitions)}`));
    } else if (isOpen) {
      fold.breakdown.forEach(b => note(g, `${L.lanes[b.from]} → ${L.lanes[b.to]}: ${n(b.segments)} segments, median ${n(b.segment_median)} B; ${n(b.acks)} ACKs back`));
      fold.marked.forEach(r => arrow(r, g, `! ${lead(r)}`));
      if (fold.marked_more) note(g, `... ${n(fold.marked_more)} more marked packets (pktflow flow --detail)`);
      if (fold.dominant) {
        note(g, `most repeated: these ${fold.dominant.period} step(s) × ${n(fold.dominant.repetitions)} in a row`);
        fold.dominant.rows.forEach(r => arrow(r, g, `×${n(fold.dominant.repetitions)}`));
      }
    }
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
  L.lanes.forEach((name, i) => {
    svg.appendChild(el('text', {x: xs[i], y: 24, class: 'lane'}, name));
    svg.appendChild(el('line', {x1: xs[i], y1: 32, x2: xs[i], y2: height - 10, class: 'rule'}));
  });
  svg.appendChild(body);
  document.getElementById('status').textContent =
    `${document.querySelectorAll('#ladder-svg .arrow').length} arrows drawn of ${n(L.packets)} packets`;
}
function firstT() {
  for (const it of L.items) {
    if (it.group) return it.group.rows[0].t;
    if (it.phase) return it.phase.t0;
    return it.t;
  }
  return 0;
}
const box = document.getElementById('ladder-box');
box.addEventListener('toggle', () => { if (box.open && !drawn) draw(); });
document.getElementById('prev').addEventListener('click', () => stepBy(-1));
document.getElementById('next').addEventListener('click', () => stepBy(1));
document.getElementById('realtime').addEventListener('change', () => { if (drawn) draw(); });
document.getElementById('zoom').addEventListener('input', () => { if (drawn) draw(); });
if (box.open) draw();
"""

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1em auto;padding:0 1em;max-width:72em;color:#222;
overflow-wrap:anywhere}
h1{font-size:1.3em;margin:.2em 0}h2{font-size:1.1em;margin-top:1.4em}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ddd;padding:.2em .5em;
text-align:right;white-space:nowrap}td.s,th.s{text-align:left;white-space:normal}
td:first-child,th:first-child{white-space:nowrap;overflow-wrap:normal}
td.w{min-width:16em;overflow-wrap:normal}
@media (max-width:40em){table.cards,table.cards tr,table.cards td{display:block}
table.cards tr:first-child{display:none}table.cards tr{border:1px solid #ddd;margin:.5em 0;
padding:.2em .5em}table.cards td{border:none;text-align:left;white-space:normal;min-width:0;
padding:.1em 0}table.cards td::before{content:attr(data-h) ": ";color:#666}}
.sev-error{color:#c0392b;font-weight:bold}.sev-warning{color:#b06000}.sev-info{color:#2573a7}
.session li.red{color:#c0392b}.session li.yellow{color:#b06000}
#ladder-svg text{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:11px}
#ladder-svg .t{fill:#666}#ladder-svg .l{text-anchor:middle}#ladder-svg .n{fill:#a06000}
#ladder-svg .lane{text-anchor:middle;font-weight:bold;font-size:12px}
#ladder-svg .rule{stroke:#999}#ladder-svg .g{fill:#a06000;font-weight:bold;cursor:pointer}
.verdict{background:#f4f8fc;border-left:4px solid #1f6fb2;padding:.4em .8em;margin:.4em 0}
.controls{margin:.5em 0}figure{margin:1em 0}figure svg,figure img{max-width:100%;height:auto}
summary{cursor:pointer;font-weight:bold}
#pane{position:sticky;top:0;z-index:1;background:#fffbe8;border:1px solid #e0c060;
padding:.4em .6em;margin:.4em 0;font-size:.9em;min-height:2.5em}
#ladder-svg .arrow{cursor:pointer}#ladder-svg .arrow.picked line{stroke-width:3.5}
#ladder-svg .arrow.picked text.l{font-weight:bold}
"""


def html(ladder: Ladder, report: dict[str, Any] | None = None,
         figures: list[tuple[str, str]] | None = None, *, ladder_open: bool = False) -> str:
    """The page; the ladder's box starts closed (drawn when opened) unless `ladder_open`
    (`pktflow flow --format html`, where the ladder is what was asked for)."""
    return page(ladder, report, ladder_open=ladder_open)(figures or [])


def page(ladder: Ladder, report: dict[str, Any] | None = None, *, ladder_open: bool = False
         ) -> Callable[[list[tuple[str, str]]], str]:
    """The page, all it reads of the ladder read now: what is left makes the page with its
    figures (caption, markup) once they are drawn, the ladder's rows gone by then."""
    if not ladder.steps:  # the walk, for the step-through and its list
        teach(ladder, report)
    data = json.dumps(page_json(ladder), separators=(",", ":")).replace("</", "<\\/")
    head: list[str] = []
    tail: list[str] = []
    top = [] if report is None else busiest(report["connections"], MAX_SECTIONS)
    if report is not None:
        cap = report["capture"]
        costs = _relay_costs(report, {c["id"] for _, c in top})
        head += [f"<p>{escape(cap['file'])}: {cap['packets']:,} packets, "
                 f"{cap['duration_s']:.3f} s, {len(report['connections']):,} TCP "
                 f"connection(s).</p>", _answer(report, top, costs), _timings(top, costs)]
        tail += [_findings(report), _connections(report, top)]
    legend = ("<h3>Legend</h3><ul class='legend'>" + "".join(
        f"<li>{escape(line.strip())}</li>" for line in ladder.legend) + "</ul>"
              if ladder.legend else "")
    walk = ("<h3>Step by step</h3><ol id='walk'>" + "".join(
        f"<li><b>{escape(t)}</b>: {escape(said)} <small>(frames "
        f"{escape(', '.join(map(str, frames[:8])))}{' …' if len(frames) > 8 else ''})"
        f"</small></li>" for t, said, frames in ladder.steps) + "</ol>"
            if ladder.steps else "")
    seen = [line for line in ladder.explain if not line.startswith(("step ", "…  "))]
    what = ("<h3>What you see</h3><ul id='what'>" + "".join(
        f"<li><b>{escape(k)}</b> {escape(v)}</li>"
        for k, _, v in (line.partition("  ") for line in seen)) + "</ul>" if seen else "")
    notes = "".join(f"<p>{escape(n)}</p>" for n in ladder.notes)
    title, packets = ladder.title, len(ladder.rows)

    def with_figures(figures: list[tuple[str, str]]) -> str:
        figs = "".join(f"<figure>{markup}<figcaption>{escape(caption)}</figcaption></figure>"
                       for caption, markup in figures)
        plots = [f"<section id='plots'><h2>Plots</h2>{figs}</section>"] if figs else []
        return (
            "<!doctype html><html><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>pktflow: {escape(title)}</title><style>{_STYLE}</style></head><body>"
            f"<h1>pktflow: {escape(title)}</h1>{''.join(head + plots + tail)}"
            f"<section id='flow'><details id='ladder-box'{' open' if ladder_open else ''}>"
            f"<summary>Ladder diagram: {packets:,} packets, folded (drawn when "
            "opened)</summary><p>Click a folded block's header (▸) to open it; click an arrow "
            "for what it carries. <code>pktflow flow --expand</code> draws every packet."
            "</p><div class='controls'><label><input type='checkbox' id='realtime'> space rows "
            "by real time</label> <label>zoom <input type='range' id='zoom' min='0.5' max='4' "
            "step='0.1' value='1'></label> <button id='prev' type='button'>◀ previous</button> "
            "<button id='next' type='button'>next ▶</button> <span id='status'></span></div>"
            "<div id='pane' aria-live='polite'>Click an arrow, or step with the buttons: its "
            "messages in the order sent, what each is, and the packet's TCP fields.</div>"
            f"<div class='scroll'><svg id='ladder-svg' xmlns='http://www.w3.org/2000/svg'>"
            f"</svg></div>{notes}{walk}{what}{legend}</details></section>"
            f"<script type='application/json' id='ladder'>{data}</script>"
            f"<script>{_SCRIPT}</script></body></html>\n")

    return with_figures
