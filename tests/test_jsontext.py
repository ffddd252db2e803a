"""report.jsontext must write exactly what json.dumps writes."""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pktflow._core import json_text
from pktflow.pipeline import analyze
from pktflow.report.jsontext import PIECE_ITEMS, compact, indented, pieces

ROOT = Path(__file__).resolve().parent.parent
ODD = {
    "empty": {}, "none": [], "nested-empty": [[], {}, [[]]], "tuple": (1, (2, 3), ()),
    "keys": {1: "int", 2.5: "float", None: "none", False: "bool", "s": "str"},
    "text": "é \n \" \\ \u2028 \x00 \x7f \U0001f600 \udc80 \t\b\f\r", "floats":
    [0.1, -0.0, 1e300, 1e-7, 7.5e-05, 1e16, math.inf, -math.inf, 5e-324],
    "nan": math.nan, "big": 10 ** 30, "negative": [-1, -2 ** 63, -2 ** 64, 2 ** 63 - 1, 2 ** 64],
    "bools": [True, False, None], "deep": {"a": {"b": {"c": [1, {"d": []}, "e"]}}},
    "mixed": [1, [2], {"x": 3}, "y"], "subclasses": [OrderedDict(a=1), True],
}


def plain_dumps(value: Any, indent: int | None) -> str:
    return json.dumps(value, indent=indent) if indent is not None else json.dumps(
        value, separators=(",", ":"))


def write(value: Any, indent: int | None) -> str:
    return indented(value) if indent is not None else compact(value)


@pytest.mark.parametrize("indent", [None, 2], ids=["compact", "indent-2"])
@pytest.mark.parametrize("value", [ODD, [], {}, 1, "x", None, [ODD, ODD], ODD["text"]],
                         ids=["odd", "list", "dict", "int", "str", "none", "twice", "text"])
def test_text_is_json_dumps(value: object, indent: int | None) -> None:
    assert write(value, indent) == plain_dumps(value, indent)


JSONISH = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(
        st.text(max_size=8) | st.integers(), inner, max_size=5),
    max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(JSONISH)
def test_any_value_is_json_dumps(value: Any) -> None:
    assert compact(value) == plain_dumps(value, None)
    assert indented(value) == plain_dumps(value, 2)
    assert json_text(value) == plain_dumps(value, None)


# where two shortest forms are equally near (…640.25 as …640.2 or …640.3), repr picks the even
TIES = [1950615125965640.2, -165798328394856.12, 816440699808119.2, 225171648900783.12]


@settings(max_examples=2000, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(TIES))
def test_floats_are_repr(value: float) -> None:
    assert json_text(value) == repr(value)
    assert json_text([value], 3) == json.dumps([value], indent=2).replace("\n", "\n      ")


@pytest.mark.parametrize("value", [object(), {(1, 2): 1}, [1, {2}], b"bytes"])
def test_what_json_refuses_is_refused(value: Any) -> None:
    with pytest.raises(TypeError):
        json.dumps(value)
    with pytest.raises(TypeError):
        indented(value)


@pytest.mark.parametrize("capture", sorted((ROOT / "captures").glob("*.pcap")),
                         ids=lambda p: p.stem)
def test_reports_match_json_dumps(capture: Path) -> None:
    report = analyze(str(capture))
    assert indented(report) == json.dumps(report, indent=2)
    assert compact(report) == plain_dumps(report, None)
    conn = report["connections"][0]  # nested: lines after the first move right
    assert indented(conn, 2) == json.dumps(conn, indent=2).replace("\n", "\n    ")


def test_pieces_are_bounded() -> None:
    pairs = [{"front": {"connection": f"c{i}"}, "sql": "SELECT 1", "rows": 1}
             for i in range(5000)]
    value = {"queries": pairs, "verdict": {"summary": "x"}}
    out = list(pieces(value, 1))
    assert "".join(out) == json.dumps(value, indent=2).replace("\n", "\n  ")
    # no piece holds more than PIECE_ITEMS of the pairs
    assert len(out) > 5000 and max(map(len, out)) < 1000
    assert max(piece.count('"front"') for piece in out) <= PIECE_ITEMS
