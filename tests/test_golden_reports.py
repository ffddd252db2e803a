"""The one engine reproduces every value of the reports pktflow wrote before it.

tests/golden/reports/ holds `pktflow analyze --format json` of every capture in captures/ and
tests/regressions/, of the crafted inputs other tests build (tests/golden/crafted/), and of
cuts of two real captures, each with its exit code and stderr, as written by the last release of
the previous engines (Python and C). A deliberate change of a value is made here, listed in
DIFFERENCES with its reason, never by rewriting the golden file.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from pktflow.cli import Env, main

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "reports"
CUT = re.compile(r"cut-(?P<capture>.+)-(?P<offset>\d+)")

# (golden name, JSON path) -> why the engine now differs from the golden value. Empty: none.
DIFFERENCES: dict[tuple[str, str], str] = {}


def _input(name: str, tmp_path: Path) -> Path:
    cut = CUT.fullmatch(name)
    if cut:
        data = (ROOT / "captures" / f"{cut['capture']}.pcap").read_bytes()
        path = tmp_path / "cut.pcap"
        path.write_bytes(data[:int(cut["offset"])])
        return path
    if name.startswith("crafted-"):
        return next((ROOT / "tests" / "golden" / "crafted").glob(name[8:] + ".*"))
    if name.startswith("regression-"):
        return ROOT / "tests" / "regressions" / f"{name[11:]}.pcap"
    return ROOT / "captures" / f"{name}.pcap"


def _diff(a: Any, b: Any, path: str, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in a.keys() | b.keys():
            if k not in a or k not in b:
                out.append(f"{path}.{k}: {'missing' if k not in a else 'added'}")
            else:
                _diff(a[k], b[k], f"{path}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{path}: {len(b)} items, golden {len(a)}")
        for i, (x, y) in enumerate(zip(a, b)):
            _diff(x, y, f"{path}[{i}]", out)
    elif a != b or type(a) is not type(b) and not {type(a), type(b)} <= {int, float}:
        out.append(f"{path}: {b!r}, golden {a!r}")


@pytest.mark.parametrize("name", sorted(p.stem for p in GOLDEN.glob("*.json")))
def test_report_equals_the_golden_one(name: str, tmp_path: Path) -> None:
    golden = json.loads((GOLDEN / f"{name}.json").read_text())
    path = _input(name, tmp_path)
    out, err = io.StringIO(), io.StringIO()
    code = main(["analyze", str(path), "--format", "json"], Env(stdout=out, stderr=err))
    assert code == golden["exit"]
    stderr = re.sub(r"^pktflow: \S+?(?=[ :])", "pktflow: <file>", err.getvalue().strip(),
                    flags=re.M)
    assert stderr == golden["stderr"]
    if "report" not in golden:
        assert not out.getvalue().strip()
        return
    report = json.loads(out.getvalue())
    report["capture"]["file"] = None
    report["tool"] = None
    found: list[str] = []
    _diff(golden["report"], report, "", found)
    unexplained = [d for d in found if (name, d.split(":")[0]) not in DIFFERENCES]
    assert not unexplained, "\n".join(unexplained[:40])
