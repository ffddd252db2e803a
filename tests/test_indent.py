"""report.indent.indented must write exactly what json.dumps(indent=2) writes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pktflow.pipeline import analyze
from pktflow.report.indent import indented

ROOT = Path(__file__).resolve().parent.parent
ODD = {
    "empty": {}, "none": [], "nested-empty": [[], {}, [[]]], "tuple": (1, (2, 3), ()),
    "keys": {1: "int", 2.5: "float", None: "none", False: "bool", "s": "str"},
    "text": "é \n \" \\ \u2028 \x00", "floats": [0.1, -0.0, 1e300, 1e-7, math.inf, -math.inf],
    "nan": math.nan, "big": 10 ** 30, "bools": [True, False, None],
    "deep": {"a": {"b": {"c": [1, {"d": []}, "e"]}}}, "mixed": [1, [2], {"x": 3}, "y"],
}


@pytest.mark.parametrize("value", [ODD, [], {}, 1, "x", None, [ODD, ODD]],
                         ids=["odd", "list", "dict", "int", "str", "none", "twice"])
def test_indented_is_json_dumps_indent_2(value: object) -> None:
    assert indented(value) == json.dumps(value, indent=2)


@pytest.mark.parametrize("capture", sorted((ROOT / "captures").glob("*.pcap")),
                         ids=lambda p: p.stem)
def test_indented_reports_match_json_dumps(capture: Path) -> None:
    report = analyze(str(capture))
    assert indented(report) == json.dumps(report, indent=2)
    conn = report["connections"][0]  # nested: lines after the first move right
    assert indented(conn, 2) == json.dumps(conn, indent=2).replace("\n", "\n    ")


def test_pieces_are_the_indented_text_a_container_of_plain_values_at_a_time() -> None:
    from pktflow.report.indent import pieces

    pairs = [{"front": {"connection": f"c{i}"}, "sql": "SELECT 1", "rows": 1}
             for i in range(1000)]
    value = {"queries": pairs, "verdict": {"summary": "x"}}
    out = list(pieces(value, 1))
    assert "".join(out) == json.dumps(value, indent=2).replace("\n", "\n  ")
    assert len(out) > 1000 and max(map(len, out)) < 100
