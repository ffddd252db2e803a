"""The ladder in a terminal: one line per packet, lanes as vertical rules, repeated round trips
folded into one bracketed block ("× 38"). Fits the console width."""

from __future__ import annotations

import re
import textwrap

from rich.console import Console
from rich.text import Text

from pktflow.flow.ladder import MARKED_ROWS, Group, Ladder, Phase, Row, label

GUTTER = 20  # "  12.345 ms  #12345 " before the lanes
LANE_MIN = 24  # columns between two lanes at least: past it the diagram is wider than asked
_UNIT = re.compile(r"(\d) (B|ms|s)\b")


def _style(r: Row) -> str:
    if "retransmission" in r.marks or r.kind == "rst":
        return "bold red"
    if "zero window" in r.marks:
        return "red"
    if r.kind == "data":
        return "cyan"
    if r.kind in ("syn", "syn-ack", "fin"):
        return "magenta"
    return "green"


class _Canvas:
    def __init__(self, lanes: list[str], width: int) -> None:
        self.lanes = lanes
        area = max(width - GUTTER, LANE_MIN * max(1, len(lanes) - 1))
        self.width = area
        n = len(lanes)
        self.x = [round(i * (area - 1) / max(1, n - 1)) for i in range(n)] if n > 1 else [0]

    def header(self) -> Text:
        """The lanes' names over their rules: "role address:port" on one line when all fit,
        else the role above the address; an address too long loses its start, not its port."""
        line = self._place(self.lanes)
        if line is None:
            roles, _, ends = zip(*(name.partition(" ") for name in self.lanes))
            ends_line = self._place(list(ends))
            if ends_line is None:  # each keeps the room up to halfway to its neighbours
                ends_line = self._place([e if len(e) < room else "…" + e[-(room - 2):]
                                         for e, room in zip(ends, self._rooms())], crop=True)
            line = f"{self._place(list(roles), crop=True)}\n{' ' * GUTTER}{ends_line}"
        return Text(" " * GUTTER + line, "bold")

    def _rooms(self) -> list[int]:
        bounds = [0, *((a + b) // 2 for a, b in zip(self.x, self.x[1:])), self.width]
        return [max(4, hi - lo) for lo, hi in zip(bounds, bounds[1:])]

    def _place(self, names: list[str], crop: bool = False) -> str | None:
        """Names centred over their lanes, kept inside the canvas; None when two would touch
        (with `crop`, they are cut instead)."""
        line = [" "] * self.width
        end = 0  # first free column
        for name, x in zip(names, self.x):
            start = min(max(end, x - len(name) // 2), self.width - len(name))
            if start < end:
                if not crop:
                    return None
                start, name = end, name[:max(0, self.width - end)]
            line[start:start + len(name)] = name
            end = start + len(name) + 1
        return "".join(line)

    def rules(self) -> list[str]:
        line = [" "] * self.width
        for x in self.x:
            line[x] = "│"
        return line

    def arrow(self, r: Row, lead: str, dim: bool = False) -> Text:
        line = self.rules()
        a, b = self.x[r.src], self.x[r.dst]
        lo, hi = min(a, b), max(a, b)
        for i in range(lo + 1, hi):
            line[i] = "─"
        if b > a:
            line[hi - 1] = "▶"
        else:
            line[lo + 1] = "◀"
        text = f" {label(r)} "
        room = hi - lo - 4
        if room > 3:
            if len(text) > room:
                text = text[:room - 1] + "…"
            start = lo + 2 + (room - len(text)) // 2
            line[start:start + len(text)] = text
        out = Text(lead.ljust(GUTTER)[:GUTTER], "dim")
        out.append("".join(line[:lo + 1]))
        out.append("".join(line[lo + 1:hi]), _style(r) + (" dim" if dim else ""))
        out.append("".join(line[hi:]))
        return out

    def note(self, lead: str, text: str, style: str) -> Text:
        """A line of text beside the lanes; a long one wraps under itself, inside its block."""
        out = Text(lead.ljust(GUTTER)[:GUTTER], "dim")
        if len(text) <= self.width:
            out.append(text, style)
            return out
        indent = ("│     " if text[:1] in "╭│" else "   ")
        glued = _UNIT.sub("\\1\0\\2", text)  # a number keeps its unit on its line
        lines = textwrap.wrap(glued, self.width, subsequent_indent=indent,
                              break_on_hyphens=False)
        out.append(f"\n{' ' * GUTTER}".join(lines).replace("\0", " "), style)
        return out


class _Lines:
    """The diagram's lines, printed a batch at a time and never wrapped (they are as wide as
    the canvas): a console.print per line took 130 us, 25 s for a 200,000-packet diagram."""

    BATCH = 1024
    _SEP = Text("\n")

    def __init__(self, console: Console) -> None:
        self.console = console
        self.lines: list[Text] = []

    def add(self, line: Text) -> None:
        self.lines.append(line)
        if len(self.lines) >= self.BATCH:
            self.flush()

    def flush(self) -> None:
        if not self.lines:
            return
        console = self.console
        if console.color_system is None and not console.record:
            # no styles to write (not a terminal, or NO_COLOR): the text as rich would write
            # it, cropped to the width, at a tenth of the cost
            width = console.width
            console.file.write("".join(f"{part[:width]}\n" for line in self.lines
                                       for part in line.plain.split("\n")))
        else:
            # print's own options: it joins what it is given anew, losing the text's
            console.print(self._SEP.join(self.lines), no_wrap=True, overflow="crop")
        self.lines = []


def _lead(r: Row, t0: float) -> str:
    return f"{(r.t - t0) * 1000:9.3f} ms #{r.frame}"


def leg_messages(tot: dict, lanes: list[str]) -> str:  # type: ignore[type-arg]
    """A span's messages, per leg when it crosses more than one ("DataRow×10,000" on one,
    "server→pooler DataRow×10,000; pooler→client DataRow×10,000" on two): a relayed row is
    one row on each leg, never two."""
    shown = [leg for leg in tot["legs"] if leg["messages"]]
    if len(shown) == 1:
        return "  ".join(f"{c}×{n:,}" for c, n in shown[0]["messages"].items())
    return "; ".join(f"{lanes[leg['from']].split()[0]}→{lanes[leg['to']].split()[0]} "
                     + " ".join(f"{c}×{n:,}" for c, n in leg["messages"].items())
                     for leg in shown)


def _totals_line(tot: dict, prefix: str, lanes: list[str]) -> str:  # type: ignore[type-arg]
    msgs = leg_messages(tot, lanes)
    moved = f"{tot['segments']:,} segments, {tot['bytes']:,} B, " if tot["segments"] else ""
    return (f"{prefix}frames {tot['first_frame']}-{tot['last_frame']}, "
            f"{(tot['t1'] - tot['t0']) * 1000:,.3f} ms, {moved}{tot['acks']:,} ACKs"
            + (f", {msgs}" if msgs else ""))


def render(ladder: Ladder, console: Console) -> None:
    """The ladder folded as `ladder.fold` says (Ladder.shown)."""
    canvas = _Canvas(ladder.lanes, console.width)
    console.print(Text(ladder.title, "bold"))
    if GUTTER + canvas.width > console.width:
        console.print(Text(f"this diagram is {GUTTER + canvas.width} columns wide and the "
                           f"terminal {console.width}: the lanes past it are cut (widen it, or "
                           f"draw fewer connections with --connection)", "yellow"))
    out = _Lines(console)
    out.add(canvas.header())
    if not ladder.rows:
        out.add(Text("no packets in the selected span", "yellow"))
        out.flush()
        return
    rows, t0 = ladder.rows, ladder.rows[0].t
    for it in ladder.shown():
        if isinstance(it, Phase):
            _phase(out, canvas, ladder, it, t0)
        elif isinstance(it, Group):
            tot = ladder.group_totals(it)
            out.add(canvas.note(f"{(tot['t0'] - t0) * 1000:9.3f} ms",
                                _totals_line(tot, f"╭─ × {it.reps:,}: ", ladder.lanes),
                                "bold yellow"))
            for odd in ladder.odd_ones(it):
                out.add(canvas.note("", f"│  {odd}", "yellow"))
            for r in rows[it.start:it.start + it.period]:
                out.add(canvas.arrow(r, f"     ×{it.reps:,}"))
            out.add(canvas.note(f"{(tot['t1'] - t0) * 1000:9.3f} ms", "╰─",
                                "bold yellow"))
        else:
            out.add(canvas.arrow(it, _lead(it, t0)))
    out.flush()
    for n in ladder.notes:  # wrapped and indented as the legend, right of the margin
        console.print(Text("\n".join(textwrap.wrap(
            n, max(40, console.width), initial_indent="  ", subsequent_indent="    ",
            break_on_hyphens=False)), "yellow"))
    if ladder.legend:
        # indented and wrapped here, so that every line stays right of the margin
        width = max(40, console.width)
        console.print(Text("  Legend", "bold"))
        for line in ladder.legend:
            console.print(Text("\n".join(textwrap.wrap(
                line.strip(), width, initial_indent="    " if line.startswith(" ") else "  ",
                subsequent_indent="      ", break_on_hyphens=False)), "dim"))
    if ladder.explain:
        console.print(Text("\nWhat you see", "bold"))
        for line in ladder.explain:
            key, _, sentence = line.partition("  ")
            shown = Text(f"  {key:<12} ", "bold cyan")
            shown.append(sentence)
            console.print(shown)


def _phase(out: _Lines, canvas: _Canvas, ladder: Ladder, it: Phase, t0: float) -> None:
    rows, lanes = ladder.rows, ladder.lanes
    tot = ladder.totals(it.start, it.end)
    out.add(canvas.note(f"{(tot['t0'] - t0) * 1000:9.3f} ms",
                        _totals_line(tot, "╭─ bulk transfer: ", lanes), "bold yellow"))
    for b in ladder.breakdown(it.start, it.end):
        ack = (f"; {b['acks']:,} ACKs back, median {b['ack_median']:,} B"
               if b["acks"] else "; no ACKs back in this span")
        out.add(canvas.note("", f"│  {lanes[b['from']]} → {lanes[b['to']]}: "
                            f"{b['segments']:,} segments, median "
                            f"{b['segment_median']:,} B{ack}", "yellow"))
    marked, n = ladder.marked(it.start, it.end, MARKED_ROWS)
    for r in marked:
        out.add(canvas.arrow(r, f"  ! #{r.frame}"))
    if n > len(marked):
        out.add(canvas.note("", f"│  ... {n - len(marked):,} more marked packets "
                            f"(--detail)", "red"))
    g = it.dominant
    if g is not None:
        out.add(canvas.note("", f"│  most repeated: these {g.period} step(s) × "
                            f"{g.reps:,} in a row", "yellow"))
        for r in rows[g.start:g.start + g.period]:
            out.add(canvas.arrow(r, f"     ×{g.reps:,}"))
    out.add(canvas.note(f"{(tot['t1'] - t0) * 1000:9.3f} ms",
                        "╰─ (--detail: every repeated block; --expand: every packet)",
                        "yellow"))
