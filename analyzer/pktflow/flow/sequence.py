"""The ladder as Mermaid and PlantUML sequence-diagram text, for docs and wikis. Repeated blocks
become `loop` sections; bulk phases keep their most repeated block."""

from __future__ import annotations

from collections.abc import Callable

from pktflow.flow.ladder import MARKED_ROWS, Group, Ladder, Phase, Row, label


def _ids(ladder: Ladder) -> list[str]:
    return [f"L{i}" for i in range(len(ladder.lanes))]


def _clean(text: str) -> str:
    return text.replace(";", ",").replace("#", " q").replace("\n", " ")


def _walk(ladder: Ladder, arrow: Callable[[Row], str], note: Callable[[int, int, str], str],
          loop: str, end: str, indent: str) -> list[str]:
    """The body shared by both dialects: arrows, notes for bulk phases, loops for repeats."""
    rows, out = ladder.rows, []
    for it in ladder.shown():
        if isinstance(it, Phase):
            tot = ladder.totals(it.start, it.end)
            out.append(note(0, len(ladder.lanes) - 1,
                            f"bulk: frames {tot['first_frame']}-{tot['last_frame']}, "
                            f"{tot['segments']:,} segments, {tot['bytes']:,} B, "
                            f"{tot['acks']:,} ACKs"))
            for b in ladder.breakdown(it.start, it.end):
                out.append(note(min(b["from"], b["to"]), max(b["from"], b["to"]),
                                f"{b['segments']:,} segments, median {b['segment_median']:,} B"))
            marked, n = ladder.marked(it.start, it.end, MARKED_ROWS)
            out += [arrow(r) for r in marked]
            if n > len(marked):
                out.append(note(0, len(ladder.lanes) - 1,
                                f"{n - len(marked):,} more marked packets (--detail)"))
            block = it.dominant
            title = "most repeated, "
        elif isinstance(it, Group):
            block, title = it, ""
            out += [note(0, len(ladder.lanes) - 1, odd) for odd in ladder.odd_ones(it)]
        else:
            out.append(arrow(it))
            continue
        if block is not None:
            first, last = rows[block.start].frame, rows[block.end - 1].frame
            out.append(f"{loop} x {block.reps:,} ({title}frames {first}-{last})")
            out += [indent + arrow(r) for r in rows[block.start:block.start + block.period]]
            out.append(end)
    return out


# Per dialect: header lines, participant, data arrow, other arrow, arrow line, note, footer.
_DIALECTS = {
    "mermaid": ("sequenceDiagram\n    title {title}", "    participant {id} as {name}", "->>",
                "-->>", "{a}{kind}{b}: {text}", "Note over {a},{b}: {text}", None, "    ", "    "),
    "plantuml": ("@startuml\ntitle {title}", 'participant "{name}" as {id}', "->", "-->",
                 "{a} {kind} {b} : {text}", "note over {a}, {b} : {text}", "@enduml", "", "  "),
}


def _render(ladder: Ladder, dialect: str) -> str:
    head, part, data, other, arrow_fmt, note_fmt, foot, pad, indent = _DIALECTS[dialect]
    ids = _ids(ladder)
    out = head.format(title=_clean(ladder.title)).split("\n")
    out += [part.format(id=i, name=_clean(n)) for i, n in zip(ids, ladder.lanes)]

    def arrow(r: Row) -> str:
        return arrow_fmt.format(a=ids[r.src], b=ids[r.dst], kind=data if r.kind == "data"
                                else other, text=f"{_clean(label(r))} (frame {r.frame})")

    def note(a: int, b: int, text: str) -> str:
        return note_fmt.format(a=ids[a], b=ids[b], text=_clean(text))

    out += [pad + ln for ln in _walk(ladder, arrow, note, "loop", "end", indent)]
    if foot:
        out.append(foot)
    return "\n".join(out) + "\n"


def mermaid(ladder: Ladder) -> str:
    return _render(ladder, "mermaid")


def plantuml(ladder: Ladder) -> str:
    return _render(ladder, "plantuml")
