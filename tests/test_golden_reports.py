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
# (golden names, JSON paths) as regular expressions (fullmatch; [n] indexes as written) -> why
# every value they match now differs: for a change that reaches many reports.
CHANGED: dict[tuple[str, str], str] = {
    (r".*", r"\.connections\[\d+\]\.queries\[\d+\]\.rows"):
        "a response cut by a capture gap or by the capture's end has unknown rows (null), not "
        "the DataRows seen so far (a lower bound, still in data_rows)",
    (r"regression-relay-cost-unknown-worst", r"\.findings\[\d+\]\.message"):
        "a stream's resyncs are one finding, whose words say that responses count the bytes "
        "a gap hid",
    (r"regression-relay-cost-unknown-worst",
     r"\.(connections\[\d+\]\.queries\[\d+\]\.(response_bytes|first_response_s|"
     r"first_frame|goodput_bps)|relays\[0\]\.queries\[1\]\.(response_bytes\.back|"
     r"frames\.back_first|first_byte_delay_ms))"):
        "bytes a backend gap hid count toward the response under way (as the sequence numbers "
        "say), and a simple query answered before a backend gap closes when the next Query "
        "comes: this crafted capture has gaps in both directions, so its responses are "
        "attributed anew",
}


def _explained(name: str, path: str) -> bool:
    return (name, path) in DIFFERENCES or any(
        re.fullmatch(names, name) and re.fullmatch(paths, path) for names, paths in CHANGED)


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
    unexplained = [d for d in found if not _explained(name, d.split(":")[0])]
    assert not unexplained, "\n".join(unexplained[:40])
