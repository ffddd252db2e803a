"""`analyze` opens with the answer: for each bulk transfer what limited it and what to look
at, and what each relay added; every line agrees with the JSON report beside it."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from pktflow.cli import Env, main
from pktflow.transfer.advice import NAMES, look_at

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
    answer = " ".join(lines[1:])
    for c, name, d in sorted(judged, key=lambda cnd: -cnd[2]["payload_bytes"])[:6]:
        head = f"{c['id']}"
        assert head in answer
        said = answer.split(f"{name.replace('_to_', '->')}:", 1)
        assert len(said) == 2, (c["id"], name)
        assert NAMES[d["verdict"]["limit"]] in said[1]
        advice = look_at(d["verdict"])
        assert advice is not None and " ".join(advice.split()[:4]) in answer
    for relay in report["relays"]:
        assert f"relay {relay['host']}:{relay['front_port']}:" in answer
        v = relay["verdict"]
        if v.get("relay_ms") is not None and v["limit"] != "none":
            assert f"the relay itself added {v['relay_ms']:,.2f} ms" in answer
        elif v.get("relay_ms") is not None:  # no bulk transfer to judge: the cost as said
            assert f"the relay added {v['relay_ms']:,.2f} ms".lower() in answer.lower()
