"""The HTML report as a person meets it, in a real headless Chromium: the answer on the first
screen, sections in reading order without overlap, no sideways scrolling at desktop or phone
width, the ladder folded and drawn only when opened; and a page whose size follows the
conversation's shape, not its packet count."""

from __future__ import annotations

import io
import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from pktflow.cli import Env, main

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "captures"
PGDUMP_POOLED = CAPTURES / "pgdump-20k-pgbouncer-loopback.pcap"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ORDER = ["answer", "queries", "plots", "findings", "connections", "flow"]


def report(path: Path, out: Path, *argv: str) -> str:
    err = io.StringIO()
    code = main(["report", str(path), *argv, "-o", str(out)], Env(stdout=io.StringIO(),
                                                                  stderr=err))
    assert code == 0, err.getvalue()
    return out.read_text()


def ladder_json(page: str) -> dict[str, Any]:
    m = re.search(r"<script type='application/json' id='ladder'>(.*?)</script>", page, re.S)
    assert m
    return json.loads(m.group(1).replace("<\\/", "</"))  # type: ignore[no-any-return]


def test_the_page_follows_the_conversation_not_the_packets(tmp_path: Path) -> None:
    """pg_dump through PgBouncer, every packet selected: the ladder's JSON holds a folded
    block's rows once (at most 12), a bulk transfer's most repeated step and 6 marked rows; the
    plots are one picture. Measured: 1.05 MB before, with every row and an SVG of every
    segment."""
    page = report(PGDUMP_POOLED, tmp_path / "r.html", "--all")
    assert len(page) < 600_000
    doc = ladder_json(page)
    assert doc["packets"] == 1641
    shown = 0
    for it in doc["items"]:
        fold = it.get("group") or it.get("phase")
        if fold is None:
            shown += 1
        elif "phase" in it:
            assert len(fold["marked"]) <= 6
            shown += len(fold["marked"]) + len((fold["dominant"] or {"rows": []})["rows"])
        else:
            assert len(fold["rows"]) == fold["period"] <= 12
            shown += len(fold["rows"])
    assert shown < doc["packets"] / 2
    assert "<img src='data:image/png;base64," in page


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian package "
                                             "chromium)")
def test_the_answer_first_at_desktop_and_phone_widths(tmp_path: Path) -> None:
    from cdp import Browser

    page = tmp_path / "r.html"
    report(PGDUMP_POOLED, page)
    geometry = ("JSON.stringify(" + json.dumps(ORDER) + ".map(id => { const e = "
                "document.getElementById(id); if (!e) return null; const r = "
                "e.getBoundingClientRect(); return [r.top, r.bottom, r.left, r.right]; }))")
    with Browser(CHROMIUM or "chromium", tmp_path) as b:
        b.open(page.as_uri())
        for width, height in ((1400, 1000), (390, 844)):
            b.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                   deviceScaleFactor=1, mobile=width < 500)
            time.sleep(0.3)
            boxes = json.loads(b.eval(geometry))
            assert all(boxes), dict(zip(ORDER, boxes))
            answer = boxes[0]
            assert answer[0] < height / 2, (width, answer)  # it starts on the first screen
            text = b.eval("document.getElementById('answer').innerText")
            assert "Relay 127.0.0.1:6432" in text and "limited by" in text
            for (_, bottom, _, _), (top, _, _, _) in zip(boxes, boxes[1:]):
                assert bottom <= top + 0.5  # in reading order, no overlap
            assert all(left >= 0 and right <= width + 0.5 for _, _, left, right in boxes)
            assert b.eval("document.documentElement.scrollWidth") <= width  # no sideways
            b.screenshot(tmp_path / f"report-{width}.png")
            assert b.eval("document.querySelectorAll('#ladder-svg .arrow').length") == 0
        b.eval("document.querySelector('#ladder-box summary').click()")
        for _ in range(100):
            if b.eval("document.querySelectorAll('#ladder-svg .arrow').length"):
                break
            time.sleep(0.05)
        assert b.eval("document.querySelectorAll('#ladder-svg .arrow').length") > 0
        assert b.eval("document.documentElement.scrollWidth") <= 390  # the ladder scrolls
    assert (tmp_path / "report-1400.png").stat().st_size > 10_000


# Each table cell's content width against the width its text takes on one line (canvas
# measureText in the cell's own font) and 10 ems: a cell squeezed below both wraps its text a
# few characters to a line.
SQUEEZED = """JSON.stringify((() => {
  const ctx = document.createElement('canvas').getContext('2d');
  return [...document.querySelectorAll('td, th')].filter(c => c.offsetParent).map(c => {
    const st = getComputedStyle(c);
    ctx.font = st.font;
    const before = getComputedStyle(c, '::before').content;
    const label = before && before !== 'none' ? before.replace(/^"|"$/g, '') : '';
    const natural = ctx.measureText(label + c.textContent).width;
    const width = c.clientWidth - parseFloat(st.paddingLeft) - parseFloat(st.paddingRight);
    const em = parseFloat(st.fontSize);
    return [c.textContent.slice(0, 30), Math.round(width), Math.round(natural), em];
  }).filter(([, width, natural, em]) => width + 1 < Math.min(natural, 10 * em));
})())"""


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian package "
                                             "chromium)")
def test_tables_stay_readable_at_desktop_tablet_and_phone_widths(tmp_path: Path) -> None:
    """The queries' table at 1400, 700 and 390 px: no cell squeezed (at 400 px the SQL column
    shrank to a character per line), no sideways scrolling of the page; on a phone each query
    is a card, its SQL on lines of their own width."""
    from cdp import Browser

    page = tmp_path / "r.html"
    report(PGDUMP_POOLED, page)
    with Browser(CHROMIUM or "chromium", tmp_path) as b:
        b.open(page.as_uri())
        for width, height in ((1400, 1000), (700, 900), (390, 844)):
            b.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                   deviceScaleFactor=1, mobile=width < 500)
            time.sleep(0.3)
            assert b.eval("document.querySelectorAll('#queries td').length") > 30
            assert json.loads(b.eval(SQUEEZED)) == [], width
            assert b.eval("document.documentElement.scrollWidth") <= width
            sql = json.loads(b.eval("JSON.stringify([...document.querySelectorAll("
                                    "'#queries td:nth-child(2)')].map(c => c.getBoundingClientRect()"
                                    ".width))"))
            assert min(sql) >= min(width - 60, 200), (width, min(sql))
            b.screenshot(tmp_path / f"queries-{width}.png")


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian package "
                                             "chromium)")
def test_step_through_and_read_what_each_arrow_carries(tmp_path: Path) -> None:
    """`flow --format html`: the ladder open; "next" steps arrow by arrow; a click on an arrow
    shows its messages in the order sent, each named in full with what it is and its tag."""
    from cdp import Browser

    page = tmp_path / "f.html"
    err = io.StringIO()
    assert main(["flow", str(CAPTURES / "extended-direct-loopback.pcap"), "--all", "--format",
                 "html", "-o", str(page)], Env(stdout=io.StringIO(), stderr=err)) == 0
    with Browser(CHROMIUM or "chromium", tmp_path) as b:
        b.open(page.as_uri())
        for _ in range(100):
            if b.eval("document.querySelectorAll('#ladder-svg .arrow').length"):
                break
            time.sleep(0.05)
        pane = "document.getElementById('pane').innerText"
        b.eval("document.getElementById('next').click()")
        assert b.eval(pane).startswith("frame 1,") and "SYN" in b.eval(pane)
        b.eval("document.getElementById('next').click()")
        assert b.eval(pane).startswith("frame 2,") and "SYN-ACK" in b.eval(pane)
        b.eval("document.querySelector('#ladder-svg .arrow[data-frame=\"11\"]')"
               ".dispatchEvent(new MouseEvent('click', {bubbles: true}))")
        text = b.eval(pane)
        assert text.startswith("frame 11,")
        order = [text.index(name) for name in ("RowDescription", "DataRow", "CommandComplete",
                                               "ReadyForQuery")]
        assert order == sorted(order)
        assert "CommandComplete (SELECT 1)" in text and "one row of a result" in text
        assert b.eval("document.querySelectorAll('#ladder-svg .arrow.picked').length") == 1
        b.eval("document.getElementById('next').click()")
        assert b.eval(pane).startswith("frame 12,")
