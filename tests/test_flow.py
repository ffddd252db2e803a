"""Ladder diagrams, plots and the HTML report, on the real captures.

Counts in the diagram are checked against the analysis report and against tshark; the HTML
report is opened in a real headless Chromium, a group is expanded by a click, and the DOM and a
screenshot are checked."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import time
import xml.etree.ElementTree as ET
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from tsharkcheck import TSHARK

from pktflow.cli import Env, main
from pktflow.errors import ExitCode
from pktflow.pipeline import Options, analyze

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "captures"
DIRECT = CAPTURES / "seqscan-10k-direct-loopback.pcap"
POOLED = CAPTURES / "seqscan-10k-pgbouncer-loopback.pcap"
POOLED_BRIDGE = CAPTURES / "seqscan-10k-pgbouncer-bridge.pcap"


def cli(*argv: str, width: int = 120) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Env(stdout=out, stderr=err, width=width))
    return code, out.getvalue(), err.getvalue()


def flow_json(*argv: str) -> dict[str, Any]:
    code, out, err = cli("flow", *argv, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "pktflow.flow/1"
    return doc


def rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows a diagram's JSON holds: alone, or every row of a group (a folded bulk
    transfer, a `phase`, holds its totals, not its rows: --detail or --expand for those)."""
    out = []
    for it in doc["items"]:
        if "group" in it:
            out += it["group"]["rows"]
        elif "phase" not in it:
            out.append(it)
    return out


def test_direct_seqscan_fits_one_screen_and_shows_the_study_pattern() -> None:
    code, out, err = cli("flow", str(DIRECT))
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert len(lines) <= 40, "\n".join(lines)
    # The PGECons figure: two 8,192-byte segments, then one ACK for 16,384 bytes, repeated.
    repeated = [ln for ln in lines if ln.lstrip().startswith("×")]
    assert sum("8,192 B" in ln for ln in repeated) == 2
    assert sum("ACK 16,384 B" in ln for ln in repeated) == 1
    assert any(" Q " in ln for ln in lines[:5])  # the request opens the diagram
    # CommandComplete with its tag as sent, and ReadyForQuery, close it
    assert any("D×18 C(SELECT 10000) Z" in ln for ln in lines)


@pytest.mark.parametrize("width", [80, 100, 120])
@pytest.mark.parametrize("capture", [DIRECT, POOLED, POOLED_BRIDGE], ids=lambda p: p.stem)
def test_ladder_fits_a_narrow_terminal(capture: Path, width: int) -> None:
    """At 80 columns every lane keeps its whole address and port in the header (the role above
    it when one line is too narrow), and long notes wrap inside their block: after the title,
    no line starts left of the lanes."""
    code, out, _ = cli("flow", str(capture), width=width)
    doc = flow_json(str(capture))
    lines = out.splitlines()
    assert code == 0 and all(len(line) <= width for line in lines)
    head = " ".join(lines[1:3]).split()
    for lane in doc["lanes"]:
        role, _, end = lane.partition(" ")
        assert role in head and end in head, (lane, lines[1:3])
    body = [ln for ln in lines[1:] if ln.strip()]
    body = body[:body.index("What you see")] if "What you see" in body else body
    assert all(ln.startswith(" ") for ln in body), [ln for ln in body if ln[:1] != " "]


@pytest.mark.parametrize("width", [60, 80, 120])
def test_plain_and_styled_ladders_read_the_same(width: int) -> None:
    """Without colours the lines are written as plain text (a tenth of rich's cost); through
    rich (recording, as on a terminal) the same characters, cropped at the same width."""
    from rich.console import Console

    from pktflow.cli import build_parser
    from pktflow.flow.cli import prepare
    from pktflow.flow.text import render

    for capture, argv in ((POOLED, []), (CAPTURES / "pgbench-txn-pgbouncer-loopback.pcap",
                                         ["--all"])):
        args = build_parser().parse_args(["flow", str(capture), *argv])
        _, ladder = prepare(args, lambda p: analyze(p, Options(record=True)))
        texts = []
        for record in (False, True):
            out = io.StringIO()
            render(ladder, Console(file=out, width=width, record=record))
            texts.append(out.getvalue())
        assert texts[0] == texts[1]
        assert all(len(line) <= width for line in texts[0].splitlines())


def test_transaction_pooled_clients_get_a_lane_each() -> None:
    """pgbench's five clients through PgBouncer in transaction mode: a lane each (drawings
    give up to MAX_DRAWN_SIDE_LANES), so which client's transaction rides which server leg
    reads off the diagram; every packet between its own client's lane and the pooler."""
    capture = str(CAPTURES / "pgbench-txn-pgbouncer-loopback.pcap")
    report = analyze(capture)
    doc = flow_json(capture, "--all")
    fronts = {c["id"]: f"client {c['client']['ip']}:{c['client']['port']}"
              for c in report["connections"] if c["role"] == "front"}
    assert len(set(fronts.values())) == 5
    lanes = doc["lanes"]
    assert lanes[:5] == sorted(set(fronts.values()), key=lanes.index)
    assert lanes[5].startswith("pooler") and lanes[6].startswith("server")
    assert not doc["notes"]
    pooler = 5
    for r in rows(doc):
        ends = {r["from"], r["to"]}
        if r["connection"] in fronts:
            assert ends == {lanes.index(fronts[r["connection"]]), pooler}, r
        else:
            assert ends == {pooler, 6}, r


def test_the_poolers_lane_shows_its_port() -> None:
    """The pooler's lane names the port it listens on, as a client's or a server's lane names
    its own: with the client's leg drawn, and with only its server legs drawn (the relay's
    port), in every format."""
    report = analyze(str(POOLED))
    (relay,) = report["relays"]
    pooler = f"pooler {relay['host']}:{relay['front_port']}"
    for legs in (relay["front_connections"], relay["back_connections"],
                 relay["front_connections"] + relay["back_connections"]):
        argv = [a for c in legs for a in ("--connection", c)]
        assert pooler in flow_json(str(POOLED), *argv)["lanes"], legs
        code, out, _ = cli("flow", str(POOLED), *argv, width=160)
        assert code == 0 and pooler in out.splitlines()[1]
    code, out, _ = cli("flow", str(CAPTURES / "pgbench-txn-pgbouncer-loopback.pcap"),
                       "--connection", "c2", "--connection", "c7", "--format", "mermaid")
    assert code == 0 and "participant L0 as pooler 127.0.0.1:6432" in out


def test_many_clients_share_one_lane(tmp_path: Path) -> None:
    """More client endpoints than a drawing gives lanes (a storm's 20,000; here 14) are drawn
    as one lane, with a note; every packet is still drawn, between the right lanes. A terminal
    gives as many as its width fits: pgbench's five share one at 120 columns."""
    from craft import LINKTYPE_ETHERNET, frame, tcp_segment, write_pcap

    from pktflow.flow.ladder import MAX_DRAWN_SIDE_LANES

    packets = []
    for i in range(MAX_DRAWN_SIDE_LANES + 2):
        packets.append(tcp_segment(b"x" * 100, sport=40000 + i, seq=1, ack=1, flags="PA"))
        packets.append(tcp_segment(src="10.0.0.2", dst="10.0.0.1", sport=5432, dport=40000 + i,
                                   seq=1, ack=101, flags="A"))
    path = write_pcap(tmp_path / "many.pcap", [frame(p, LINKTYPE_ETHERNET) for p in packets])
    doc = flow_json(str(path), "--all")
    assert doc["lanes"] == [f"clients ({MAX_DRAWN_SIDE_LANES + 2} endpoints)",
                            "server 10.0.0.2:5432"]
    assert any("drawn as one lane" in n for n in doc["notes"])
    drawn = rows(doc)
    assert len(drawn) == len(packets)
    assert {(r["from"], r["to"]) for r in drawn} == {(0, 1), (1, 0)}
    code, out, _ = cli("flow", str(CAPTURES / "pgbench-txn-pgbouncer-loopback.pcap"), "--all",
                       width=120)
    assert code == 0 and "clients (5 endpoints)" in out and "drawn as one lane" in out
    code, out, _ = cli("flow", str(CAPTURES / "pgbench-txn-pgbouncer-loopback.pcap"), "--all",
                       width=200)
    assert code == 0 and "clients (5 endpoints)" not in out and out.count("client") >= 5


def test_pooled_seqscan_has_three_lanes_and_shows_the_resplit() -> None:
    code, out, _ = cli("flow", str(POOLED), width=160)
    assert code == 0
    lines = out.splitlines()
    # one screen: the legend explains the pooler's marks ([for cN], [pooler's own]) and a note
    # says where the capture's timestamps go back
    assert len(lines) <= 50
    assert "client" in lines[1] and "pooler" in lines[1] and "server" in lines[1]
    assert any("→ client" in ln and "median 4,0" in ln for ln in lines)
    assert any("→ pooler" in ln and "median 8,192 B" in ln for ln in lines)
    assert any("zero window" in ln for ln in lines)


@pytest.mark.parametrize("path", [DIRECT, POOLED, POOLED_BRIDGE], ids=lambda p: p.name)
def test_every_row_counted_once_messages_and_bytes_add_up(path: Path) -> None:
    report = analyze(str(path))
    doc = flow_json(str(path), "--all", "--detail")
    rs = rows(doc)
    frames = [r["frame"] for r in rs]
    assert frames == sorted(frames) and len(frames) == len(set(frames))
    lanes = doc["lanes"]
    servers = [i for i, n in enumerate(lanes) if n.startswith("server")]
    for conn in report["connections"]:
        s2c = conn["directions"]["server_to_client"]
        data = [r for r in rs if r["connection"] == conn["id"] and r["kind"] == "data"
                and r["from"] > r["to"] and "retransmission" not in r["marks"]]
        assert sum(r["bytes"] for r in data) == s2c["payload_bytes"]
        datarows = sum(r["messages"].get("D", 0) for r in data)
        assert datarows == conn["messages"]["backend"].get("DataRow", 0)
    total_rows = sum(r["messages"].get("D", 0) for r in rs if r["from"] in servers)
    assert total_rows == 10_000  # the table, once on the server's leg


@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed (Debian package tshark)")
@pytest.mark.parametrize("path", [DIRECT, POOLED_BRIDGE], ids=lambda p: p.name)
def test_data_rows_are_tsharks_payload_frames(path: Path) -> None:
    doc = flow_json(str(path), "--all", "--expand")
    ours = sorted(r["frame"] for r in rows(doc) if r["kind"] == "data")
    out = subprocess.run([TSHARK or "tshark", "-n", "-r", str(path), "-Y", "tcp.len > 0",
                          "-T", "fields", "-e", "frame.number"],
                         capture_output=True, text=True, check=True).stdout
    assert ours == [int(x) for x in out.split()]


def test_query_selection_and_errors() -> None:
    doc = flow_json(str(POOLED), "--query", "c2#0")
    assert "via" in doc["title"] and len(doc["lanes"]) == 3
    code, out, err = cli("flow", str(POOLED), "--query", "c9#0")
    assert code == ExitCode.USAGE and out == "" and len(err.strip().splitlines()) == 1
    assert "c9" in err
    code, _, err = cli("flow", str(POOLED), "--query", "c2")
    assert code == ExitCode.USAGE and "CONNECTION#INDEX" in err and str(POOLED) in err


def test_mermaid_and_plantuml() -> None:
    code, out, _ = cli("flow", str(DIRECT), "--format", "mermaid")
    assert code == 0 and out.startswith("sequenceDiagram\n")
    body = out.splitlines()
    assert sum(ln.strip().startswith("loop") for ln in body) == \
        sum(ln.strip() == "end" for ln in body) >= 1
    assert any("ACK 16,384 B" in ln for ln in body)
    code, out, _ = cli("flow", str(POOLED), "--format", "plantuml")
    assert code == 0 and out.startswith("@startuml") and out.rstrip().endswith("@enduml")
    assert out.count('participant "') == 3


def test_svg_is_valid_and_draws_each_row(tmp_path: Path) -> None:
    out = tmp_path / "f.svg"
    code, _, err = cli("flow", str(DIRECT), "--format", "svg", "--expand", "-o", str(out))
    assert code == 0, err
    root = ET.parse(out).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    arrows = [e for e in root.iter(f"{ns}line") if e.get("marker-end")]
    assert len(arrows) == len(rows(flow_json(str(DIRECT), "--expand")))


def test_plots(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="plots need matplotlib")
    png, svgf = tmp_path / "p.png", tmp_path / "p.svg"
    assert cli("plot", str(POOLED), "-o", str(png))[0] == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert cli("plot", str(DIRECT), "-o", str(svgf))[0] == 0
    assert "time-sequence" in svgf.read_text()
    code, _, err = cli("plot", str(DIRECT), "-o", str(tmp_path / "p.gif"))
    assert code == ExitCode.USAGE and ".png or .svg" in err


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian package "
                                             "chromium)")
def test_html_report_in_a_real_browser(tmp_path: Path) -> None:
    from cdp import Browser

    page = tmp_path / "report.html"
    code, _, err = cli("report", str(POOLED), "-o", str(page))
    assert code == 0, err
    text = page.read_text()
    # self-contained: nothing is fetched (XML namespace names are not fetched)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)|url\(\s*["']?https?:|@import""",
                         text)
    with Browser(CHROMIUM or "chromium", tmp_path) as b:
        b.open(page.as_uri())
        # the ladder is drawn when its box is opened, not with the page
        assert b.eval("document.querySelectorAll('#ladder-svg .arrow').length") == 0
        b.eval("document.querySelector('#ladder-box summary').click()")
        for _ in range(100):  # the toggle event comes after the click returns
            n0 = b.eval("document.querySelectorAll('#ladder-svg .arrow').length")
            if n0:
                break
            time.sleep(0.05)
        groups = b.eval("document.querySelectorAll('#ladder-svg .group').length")
        assert n0 > 0 and groups > 0
        assert "Relay 127.0.0.1:6432" in b.eval("document.body.innerText")
        # Expand the biggest group with a click on its header.
        b.eval("""(() => { let best = null, n = 0;
            document.querySelectorAll('#ladder-svg .group').forEach(g => {
              const k = parseInt(g.querySelector('text.g').textContent.split('×')[1]
                .replace(/,/g, ''));
              if (k > n) { n = k; best = g; } });
            best.querySelector('text.g').dispatchEvent(new MouseEvent('click', {bubbles: true}));
            })()""")
        n1 = b.eval("document.querySelectorAll('#ladder-svg .arrow').length")
        assert n1 > n0
        assert b.eval("document.querySelectorAll('#ladder-svg .group.open').length") == 1
        tip = b.eval("document.querySelector('#ladder-svg .arrow title').textContent")
        assert tip.startswith("frame ")
        shot = b.screenshot(tmp_path / "report.png")
    assert shot.stat().st_size > 10_000


def test_explain_names_only_what_the_diagram_shows() -> None:
    direct = flow_json(str(DIRECT), "--explain")["explain"]
    keys = [line.split("  ")[0] for line in direct]
    assert {"Q", "T", "D", "C", "Z", "ACK 16,384 B"} <= set(keys)
    assert not any("pooler" in k for k in keys) and "zero window" not in keys
    pooled = [line.split("  ")[0] for line in flow_json(str(POOLED), "--explain")["explain"]]
    assert "~4 KiB segments from the pooler" in pooled and "zero window" in pooled
    assert flow_json(str(DIRECT))["explain"] == []


def test_the_diagram_numbers_connections_as_the_analysis_does(tmp_path: Path) -> None:
    """A connection closed and silent is reported mid-pass; a SYN-ACK on its 4-tuple 45 s
    later then opens a new connection (c3). The diagram's own pass must retire and number
    connections the same way: keeping every connection, it gave that SYN-ACK to c1 and drew
    nothing for c3."""
    from craft import LINKTYPE_ETHERNET, frame, tcp_segment, write_pcap

    c = {"src": "10.0.0.1", "dst": "10.0.0.2", "sport": 40000, "dport": 5432}
    s = {"src": "10.0.0.2", "dst": "10.0.0.1", "sport": 5432, "dport": 40000}
    first = [tcp_segment(seq=100, ack=0, flags="S", **c),
             tcp_segment(seq=900, ack=101, flags="SA", **s),
             tcp_segment(seq=101, ack=901, flags="A", **c),
             tcp_segment(seq=101, ack=901, flags="FA", **c),
             tcp_segment(seq=901, ack=102, flags="FA", **s),
             tcp_segment(seq=102, ack=902, flags="A", **c)]
    other = tcp_segment(b"x" * 1400, src="10.0.0.3", sport=41000, seq=5000)  # MBs: sweeps
    late = tcp_segment(seq=900, ack=101, flags="SA", **s)
    packets = [*first, *[other] * 1500, late]
    path = write_pcap(tmp_path / "reuse.pcap", [frame(p, LINKTYPE_ETHERNET) for p in packets],
                      dt=0.03)
    conns = analyze(str(path))["connections"]
    assert [(c["id"], c["first_frame"]) for c in conns] == [("c1", 1), ("c2", 7),
                                                          ("c3", len(packets))]
    drawn = flow_json(str(path), "--connection", "c3")
    assert [(r["connection"], r["frame"]) for r in rows(drawn)] == [("c3", len(packets))]
    drawn = flow_json(str(path), "--connection", "c1")
    assert max(r["frame"] for r in rows(drawn)) == 6


FOLD_CASES = [(CAPTURES / name, argv) for name, argv in (
    ("seqscan-10k-direct-loopback.pcap", ()),
    ("seqscan-10k-pgbouncer-bridge.pcap", ()),
    ("extended-direct-loopback.pcap", ("--all",)),
    ("pgbench-txn-pgbouncer-loopback.pcap", ("--all",)),
)]
FOLD_FLAGS = [(), ("--detail",), ("--expand",)]


def _units_json(doc: dict[str, Any]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for it in doc["items"]:
        if "phase" in it:
            out.append(("bulk", it["phase"]["first_frame"], it["phase"]["last_frame"]))
        elif "group" in it:
            g = it["group"]
            out.append(("group", g["first_frame"], g["last_frame"], g["repetitions"]))
        else:
            out.append(("row", it["frame"]))
    return out


def _units_text(out: str) -> list[tuple[Any, ...]]:
    units: list[tuple[Any, ...]] = []
    inside = False
    for line in out.splitlines():
        if "╭─" in line:
            inside = True
            m = re.search(r"╭─ (?:× ([\d,]+)|bulk transfer): frames (\d+)-(\d+)", line)
            assert m, line
            units.append(("group", int(m[2]), int(m[3]), int(m[1].replace(",", "")))
                         if m[1] else ("bulk", int(m[2]), int(m[3])))
        elif "╰─" in line:
            inside = False
        elif not inside and (m := re.match(r"\s*-?[\d.]+ ms #(\d+)", line)):
            units.append(("row", int(m[1])))
    return units


def _units_svg(text: str) -> list[tuple[Any, ...]]:
    units: list[tuple[Any, ...]] = []
    for m in re.finditer(r'class="(?:t|g|gn)"[^>]*>([^<]*)<', text):
        said = unescape(m[1])
        if (r := re.fullmatch(r"-?[\d.]+ ms  #(\d+)", said)):
            units.append(("row", int(r[1])))
        elif (g := re.match(r"× ([\d,]+): frames (\d+)-(\d+)", said)):
            units.append(("group", int(g[2]), int(g[3]), int(g[1].replace(",", ""))))
        elif (b := re.match(r"bulk transfer: frames (\d+)-(\d+)", said)):
            units.append(("bulk", int(b[1]), int(b[2])))
    return units


def _units_mermaid(text: str) -> list[tuple[Any, ...]]:
    units: list[tuple[Any, ...]] = []
    bulk = (0, -1)  # the frames of the latest transfer: its marked rows are inside it
    loop = False
    for line in text.splitlines():
        s = line.strip()
        if (b := re.match(r"Note over \S+: bulk: frames (\d+)-(\d+)", s)):
            bulk = (int(b[1]), int(b[2]))
            units.append(("bulk", *bulk))
        elif (g := re.match(r"loop x ([\d,]+) \((most repeated, )?frames (\d+)-(\d+)\)",
                            s)):
            loop = True
            if not g[2]:
                units.append(("group", int(g[3]), int(g[4]), int(g[1].replace(",", ""))))
        elif s == "end":
            loop = False
        elif (r := re.search(r"\(frame (\d+)\)$", s)) and not loop \
                and not bulk[0] <= int(r[1]) <= bulk[1]:
            units.append(("row", int(r[1])))
    return units


@pytest.mark.parametrize("flags", FOLD_FLAGS, ids=lambda f: f[0] if f else "default")
@pytest.mark.parametrize("case", FOLD_CASES, ids=lambda c: c[0].name)
def test_every_format_folds_the_same(case: tuple[Path, tuple[str, ...]], flags: tuple[str, ...],
                                     tmp_path: Path) -> None:
    """One folding rule (issue 39, item 3): by default bulk transfers fold whole, --detail
    folds each repeated block, --expand folds nothing, and text, JSON, SVG, the HTML page and
    Mermaid draw the same units: the same rows alone, the same groups, the same transfers."""
    path, argv = case
    doc = flow_json(str(path), *argv, *flags)
    want = _units_json(doc)
    assert doc["fold"] == {(): "bulk", ("--detail",): "detail", ("--expand",): "expand"}[flags]
    kinds = {u[0] for u in want}
    if flags == ("--expand",):
        assert kinds == {"row"}
    elif not flags and "seqscan" in path.name:
        assert "bulk" in kinds and len(want) < 30, want
    code, out, _ = cli("flow", str(path), *argv, *flags, width=400)
    assert code == 0 and _units_text(out) == want
    svg = tmp_path / "f.svg"
    assert cli("flow", str(path), *argv, *flags, "--format", "svg", "-o", str(svg))[0] == 0
    assert _units_svg(svg.read_text()) == want
    html = tmp_path / "f.html"
    assert cli("flow", str(path), *argv, *flags, "--format", "html", "-o", str(html))[0] == 0
    m = re.search(r"<script type='application/json' id='ladder'>(.*?)</script>",
                  html.read_text(), re.S)
    assert m and _units_json(json.loads(m[1])) == want
    code, mmd, _ = cli("flow", str(path), *argv, *flags, "--format", "mermaid")
    assert code == 0 and _units_mermaid(mmd) == want
