"""`analyze` opens with the answer: for each bulk transfer what limited it and what to look
at, and what each relay added; every line agrees with the JSON report beside it."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from pktflow.cli import Env, main
from pktflow.transfer.advice import NAMES, look_at, sender_of

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = sorted((ROOT / "captures").glob("*.pcap")) + sorted(
    (ROOT / "captures" / "conditions").glob("*-bridge-*.pcap.gz"))


def run(capture: Path, fmt: str) -> str:
    out = io.StringIO()
    code = main(["analyze", str(capture), "--format", fmt],
                Env(stdout=out, stderr=io.StringIO(), width=200))
    assert code == 0
    return out.getvalue()


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.name.split(".")[0])
def test_the_answer_opens_the_report_and_agrees_with_it(capture: Path) -> None:
    report = json.loads(run(capture, "json"))
    text = run(capture, "text")
    judged = [(c, name, d) for c in report["connections"]
              for name, d in c["directions"].items()
              if d["verdict"]["limit"] != "none"]
    if not judged and not report["relays"]:
        assert not text.startswith("What limited it")
        return
    lines = text.split("Findings")[0].split("No findings")[0].splitlines()
    assert lines[0] == "What limited it"
    answer = " ".join(" ".join(lines[1:]).split())  # lines wrap where they will
    for c, name, d in sorted(judged, key=lambda cnd: -cnd[2]["payload_bytes"])[:6]:
        head = f"{c['id']}"
        assert head in answer
        said = answer.split(f"{name.replace('_to_', '->')}:", 1)
        assert len(said) == 2, (c["id"], name)
        assert NAMES[d["verdict"]["limit"]] in said[1]
        advice = look_at(d["verdict"], sender_of(c.get("role"), name))
        assert advice is not None and " ".join(advice.split()[:4]) in answer
    for relay in report["relays"]:
        assert f"relay {relay['host']}:{relay['front_port']}:" in answer
        v = relay["verdict"]
        if v.get("relay_ms") is not None and v["limit"] != "none":
            assert f"the relay itself added {v['relay_ms']:,.2f} ms" in answer
        elif v.get("relay_ms") is not None:  # no bulk transfer to judge: the cost as said
            assert f"the relay added {v['relay_ms']:,.2f} ms".lower() in answer.lower()


@pytest.mark.parametrize("name", ["seqscan-10k-pgbouncer-bridge", "pgdump-20k-direct-loopback"])
def test_the_page_opens_with_the_same_answer(name: str, tmp_path: Path) -> None:
    """The HTML page's answer is the text report's, line for line (one function writes
    both), the limits in bold."""
    import html
    import re

    from pktflow.report.answer import answer_lines
    from pktflow.report.connections import busiest

    capture = ROOT / "captures" / f"{name}.pcap"
    out = tmp_path / "page.html"
    assert main(["report", str(capture), "-o", str(out)],
                Env(stdout=io.StringIO(), stderr=io.StringIO())) == 0
    section = re.search(r"<section id='answer'>(.*?)</section>", out.read_text(), re.S)
    assert section
    said = [html.unescape(re.sub(r"<[^>]+>", "", p)) for p in
            re.findall(r"<p class='verdict'>(.*?)</p>", section.group(1), re.S)]
    report = json.loads(run(capture, "json"))
    top = [c for _, c in busiest(report["connections"], 50)]
    lines = answer_lines(report, top)
    assert lines and said == ["".join(p.text for p in line) for line in lines]
    bold = re.findall(r"<b>(.*?)</b>", section.group(1))
    assert all(html.escape(p.text) in bold for line in lines for p in line if p.style == "bold")
    text = run(capture, "text")
    assert all(line[0].text.split(":")[0] in text for line in lines)


@pytest.mark.parametrize("name, conn, direction, sender", [
    ("seqscan-10k-direct-bridge.pcap", "c1", "server->client", "the server producing the rows"),
    ("seqscan-10k-pgbouncer-loopback.pcap", "c2", "server->client",
     "what the pooler's other leg brought it"),
])
def test_a_sender_limit_says_whose_application(name: str, conn: str, direction: str,
                                               sender: str) -> None:
    """'Limited by the sender' points at the server's query on a direct connection and at the
    pooler's server leg on its client leg, not at both in one sentence."""
    text = run(ROOT / "captures" / name, "text")
    answer = " ".join(text.split("Findings")[0].split("No findings")[0].split())
    said = answer.split(f"{conn}", 1)[1].split(f"{direction}:", 1)[1]
    assert "limited by the sender" in said.split("Look at")[0]
    assert said.split("Look at ", 1)[1].startswith(sender)
