"""`--format parquet`: the tables hold exactly what the JSON holds, for every shipped capture
(every field of the JSON has its column, and every value is the same), carry their units and
schema version, are replaced on a rerun, say a failed capture in `errors`, and answer the
README's DuckDB and pandas commands."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pktflow import _core

pa = pytest.importorskip("pyarrow", reason="the parquet extra: pip install -e '.[fleet]'")
pq = pytest.importorskip("pyarrow.parquet")

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = sorted((ROOT / "captures").glob("*.pcap"))
SCHEMA = {t: cols for t, cols in _core.table_schema()}


def pktflow(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pktflow", *args], cwd=cwd,
                          capture_output=True, text=True)


def read(out: Path, table: str) -> list[dict[str, Any]]:
    files = sorted((out / table).glob("*.parquet"))
    return [row for f in files for row in pq.read_table(f).to_pylist()]


def json_rows(doc: dict[str, Any]) -> dict[str, list[tuple[dict[str, Any], dict[str, Any]]]]:
    """Each table's rows as the JSON holds them: (keys, the part the row is)."""
    file = doc["capture"]["file"]
    rows: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {t: [] for t in SCHEMA}
    rows["captures"].append(({}, {"schema": doc["schema"], "tool": doc["tool"],
                                  **doc["capture"]}))
    for c in doc["connections"]:
        own = {k: v for k, v in c.items() if k not in ("directions", "queries")}
        rows["connections"].append(({"capture": file}, own))
        for name, d in c["directions"].items():
            rows["directions"].append(({"capture": file, "connection": c["id"],
                                        "direction": name}, d))
        for i, q in enumerate(c.get("queries", [])):
            rows["queries"].append(({"capture": file, "connection": c["id"],
                                     "query_index": i}, q))
    for n, r in enumerate(doc["relays"]):
        own = {k: v for k, v in r.items() if k != "queries"}
        rows["relays"].append(({"capture": file, "relay": n}, own))
        for p in r["queries"]:
            rows["relay_pairs"].append(({"capture": file, "relay": n}, p))
    for f in doc["findings"]:
        rows["findings"].append(({"capture": file}, f))
    return rows


def at(part: dict[str, Any], path: str) -> Any:
    for key in path.split("."):
        if not isinstance(part, dict) or key not in part:
            return None
        part = part[key]
    return part


def leaves(part: Any, path: str, out: list[str], stop: set[str]) -> None:
    """Every path in `part` that holds a value (maps and JSON columns are leaves)."""
    if path in stop:
        out.append(path)
    elif isinstance(part, dict):
        for k, v in part.items():
            leaves(v, f"{path}.{k}" if path else k, out, stop)
    elif part is not None:
        out.append(path)


def cell_of(kind: str, value: Any) -> Any:
    """A JSON value as its column holds it."""
    if value is None:
        return None
    if kind == "json":
        return json.dumps(value, separators=(",", ":"))
    if kind in ("intmap", "textmap"):
        return list(value.items())
    if kind == "float":
        return float(value)
    if kind == "int" and isinstance(value, str):
        return int(value)  # a count written as digits
    return value


def check_capture(out: Path, doc: dict[str, Any]) -> None:
    file = doc["capture"]["file"]
    for table, expected in json_rows(doc).items():
        if table == "errors":
            continue
        got = [r for r in read(out, table) if r.get("capture", r.get("file")) == file]
        assert len(got) == len(expected), f"{file}: {table} has {len(got)} rows, " \
                                          f"the JSON {len(expected)}"
        columns = SCHEMA[table]
        stop = {path for _, path, kind, _ in columns if kind in ("intmap", "textmap", "json")}
        declared = {path for _, path, _, _ in columns}
        for n, ((keys, part), row) in enumerate(zip(expected, got)):
            found: list[str] = []
            leaves(part, "", found, stop)
            missing = [p for p in found if p not in declared]
            assert not missing, f"{file}: {table} row {n}: no column for {missing}"
            for name, path, kind, _ in columns:
                want = keys[path] if path in keys else cell_of(kind, at(part, path))
                if isinstance(want, list) and not want and kind.endswith("map"):
                    want = []
                assert row[name] == want, f"{file}: {table} row {n} {name}: " \
                                          f"{row[name]!r} != {want!r}"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tables")
    res = pktflow("analyze", "--format", "parquet", "-o", str(out),
                  *[str(c.relative_to(ROOT)) for c in CAPTURES])
    assert res.returncode == 0, res.stderr
    return out


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.stem)
def test_the_tables_hold_exactly_what_the_json_holds(dataset: Path, capture: Path) -> None:
    res = pktflow("analyze", "--format", "json", str(capture.relative_to(ROOT)))
    assert res.returncode == 0, res.stderr
    check_capture(dataset, json.loads(res.stdout))


def test_a_tunnelled_capture_has_its_tunnels_in_the_tables(tmp_path: Path) -> None:
    """The tunnels a capture's connections came through (none in the shipped captures)."""
    from encap import encapsulate

    path = encapsulate(ROOT / "captures" / "error-direct-loopback.pcap", tmp_path / "in.pcap",
                       "vxlan", 42, also=("gre", 9))
    out = tmp_path / "fleet"
    assert pktflow("analyze", "--format", "parquet", "-o", str(out), str(path)).returncode == 0
    doc = json.loads(pktflow("analyze", "--format", "json", str(path)).stdout)
    assert doc["capture"]["tunnels"] and doc["connections"][0]["tunnel"] is not None
    check_capture(out, doc)


def test_the_comparison_can_fail(dataset: Path) -> None:
    """A changed value, a field no column declares, and a missing row are each caught."""
    capture = CAPTURES[0]
    doc = json.loads(pktflow("analyze", "--format", "json",
                             str(capture.relative_to(ROOT))).stdout)
    for spoil in (lambda d: d["connections"][0]["directions"]["server_to_client"]
                  .__setitem__("payload_bytes", -1),
                  lambda d: d["connections"][0].__setitem__("new_field", 1),
                  lambda d: d["connections"].append(d["connections"][0])):
        bad = json.loads(json.dumps(doc))
        spoil(bad)
        with pytest.raises(AssertionError):
            check_capture(dataset, bad)


def test_units_and_schema_version_are_in_the_files(dataset: Path) -> None:
    f = next((dataset / "directions").glob("*.parquet"))
    schema = pq.read_schema(f)
    assert schema.metadata[b"pktflow.schema"] == b"pktflow.tables/1"
    assert schema.metadata[b"pktflow.table"] == b"directions"
    assert schema.field("limits_transfer_s").metadata[b"unit"] == b"seconds"
    assert schema.field("goodput_bps").metadata[b"unit"] == b"bits per second"
    assert schema.field("window_max").metadata[b"unit"] == b"bytes"
    assert schema.field("idle_periods_first").metadata[b"encoding"] == b"json"


def test_a_rerun_replaces_and_a_failure_is_a_row_of_errors(tmp_path: Path) -> None:
    good = tmp_path / "a.pcap"
    good.write_bytes(CAPTURES[0].read_bytes())
    out = tmp_path / "ds"
    for _ in range(2):
        res = pktflow("analyze", "--format", "parquet", "-o", str(out), "a.pcap",
                      "missing.pcap", cwd=tmp_path)
        assert res.returncode == 3, res.stderr
        assert "missing.pcap: no such file" in res.stderr
    for table in SCHEMA:
        files = list((out / table).glob("*"))
        assert len(files) == (1 if table != "errors" else 1), (table, files)
    errors = read(out, "errors")
    assert [(e["file"], e["exit_code"], e["reason"]) for e in errors] == \
        [("missing.pcap", 3, "no such file")]
    # the capture turns bad: its rows go, its error comes; and back
    good.write_bytes(b"not a capture")
    assert pktflow("analyze", "--format", "parquet", "-o", str(out), "a.pcap",
                   cwd=tmp_path).returncode == 4
    assert not list((out / "connections").glob("*")) and len(read(out, "errors")) == 2
    good.write_bytes(CAPTURES[0].read_bytes())
    assert pktflow("analyze", "--format", "parquet", "-o", str(out), "a.pcap",
                   cwd=tmp_path).returncode == 0
    assert [e["file"] for e in read(out, "errors")] == ["missing.pcap"]
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]


def test_an_output_folder_that_cannot_be_made_is_said_before_the_analysis(tmp_path: Path) -> None:
    file = tmp_path / "a-file"
    file.write_text("")
    for out, said in ((file, "cannot be written: it is a file, not a folder"),
                      (file / "fleet", f"cannot be made: {file} is not a directory")):
        res = pktflow("analyze", "--format", "parquet", "-o", str(out), "missing.pcap",
                      cwd=tmp_path)
        # exit 9 and one line naming the folder: the missing capture is never read
        assert res.returncode == 9, res.stderr
        assert res.stderr.splitlines() == [f"pktflow: {out}: {said}"]


def readme_block(lang: str, after: str) -> str:
    text = (ROOT / "README.md").read_text()
    at_ = text.index(after)
    m = re.compile(rf"```{lang}\n(.*?)```", re.S).search(text, at_)
    assert m is not None
    return m.group(1)


def test_the_readme_finds_the_slowest_transfers_with_duckdb_and_pandas(
        dataset: Path, tmp_path: Path) -> None:
    # the DuckDB CLI and pandas come with the test extra: without them this fails, not skips
    duckdb = shutil.which("duckdb", path=str(Path(sys.executable).parent))
    assert duckdb, "the DuckDB CLI: pip install -e '.[test]' (duckdb-cli)"
    (tmp_path / "fleet").symlink_to(dataset)
    # the slowest transfer and its limit, as the JSON reports say
    slowest = []
    for capture in CAPTURES:
        doc = json.loads(pktflow("analyze", "--format", "json",
                                 str(capture.relative_to(ROOT))).stdout)
        for c in doc["connections"]:
            for d in c["directions"].values():
                if d["verdict"]["limit"] != "none":
                    slowest.append((d["limits"]["transfer_s"], c["id"], d["verdict"]["limit"]))
    want = max(slowest)
    sql = readme_block("sql", "<!-- fleet-duckdb -->")
    import os

    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        said = subprocess.run([duckdb, "-csv", "-c", sql], capture_output=True, text=True)
        assert said.returncode == 0, said.stderr
        rows = [(r[0], r[1], r[2], int(r[3]), float(r[4]), r[5])
                for r in list(csv.reader(io.StringIO(said.stdout)))[1:]]
        code = readme_block("python", "<!-- fleet-pandas -->")
        scope: dict[str, Any] = {}
        exec(compile(code, "README", "exec"), scope)
    finally:
        os.chdir(here)
    assert (rows[0][4], rows[0][1], rows[0][5]) == want, rows[0]
    top = scope["slowest"]
    assert (top.iloc[0]["limits_transfer_s"], top.iloc[0]["connection"],
            top.iloc[0]["verdict_limit"]) == want
    assert len(rows) == len(top) == min(10, len(slowest))
