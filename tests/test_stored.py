"""Reports whose connections are stored (Options(store=...), what the CLI's analyze uses) must
write and render exactly as the plain report does, and hold far less memory."""

from __future__ import annotations

import io
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from craft import write_pcap
from rich.console import Console
from tcpfeed import write_capture
from test_retire import conversation, report, storm

from pktflow.cli import write_json, write_jsonl
from pktflow.pipeline import Options, analyze
from pktflow.report import stored as stored_module
from pktflow.report.stored import (COMPACT, INDENTED, Connections, Spill, Texts, TopPairs,
                                   ranked_pairs)
from pktflow.report.text import MAX_OVERVIEW, render

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = sorted([*(ROOT / "captures").glob("*.pcap"), *(ROOT / "tests" / "regressions").glob("*.pcap")])


def _rest(rep: dict) -> dict:  # type: ignore[type-arg]
    """The report but its connections, stored relay queries decoded."""
    rest = {k: v for k, v in rep.items() if k != "connections"}
    rest["relays"] = [{**r, "queries": list(r["queries"])} for r in rep["relays"]]
    return rest


def _text(rep: dict) -> str:  # type: ignore[type-arg]
    out = io.StringIO()
    render(rep, Console(file=out, width=120))
    return out.getvalue()


@pytest.fixture(scope="module")
def no_connections(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_pcap(tmp_path_factory.mktemp("empty") / "header-only.pcap", [])


@pytest.mark.parametrize("raw", [0, stored_module.RAW], ids=["deflated", "first-as-text"])
@pytest.mark.parametrize("layout", [COMPACT, INDENTED])
@pytest.mark.parametrize("capture", [*CAPTURES, "no-connections"],
                         ids=lambda p: getattr(p, "stem", p))
def test_stored_connections_write_and_render_as_the_plain_report(
        capture: Path | str, layout: str, raw: int, request: pytest.FixtureRequest,
        monkeypatch: pytest.MonkeyPatch) -> None:
    if capture == "no-connections":
        capture = request.getfixturevalue("no_connections")
    monkeypatch.setattr(stored_module, "RAW", raw)
    plain = analyze(str(capture))
    stored = analyze(str(capture), Options(store=layout))
    conns = stored["connections"]
    assert isinstance(conns, Connections) and len(conns) == len(plain["connections"])
    assert list(conns) == plain["connections"] and conns[:2] == plain["connections"][:2]
    if conns:
        assert conns[-1] == plain["connections"][-1]
    for relay in stored["relays"]:  # a relay's matched queries are stored too
        assert isinstance(relay["queries"], Texts)
    assert _rest(stored) == _rest(plain)
    for write, expected in ((write_jsonl, json.dumps(plain, separators=(",", ":")) + "\n"),
                            (write_json, json.dumps(plain, indent=2) + "\n")):
        for rep in (plain, stored):
            out = io.StringIO()
            write(rep, out)
            assert out.getvalue() == expected, (write.__name__, rep is stored)
    assert _text(stored) == _text(plain)


@pytest.mark.parametrize("lib", ["zlib", "isal.isal_zlib"])
def test_either_deflate_stores_the_same_text(lib: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """isal when installed (a declared dependency), zlib without it: the same reports."""
    import importlib

    module = importlib.import_module(lib)
    monkeypatch.setattr(stored_module, "deflate_lib", lambda: module)
    monkeypatch.setattr(stored_module, "RAW", 1)
    path = next(p for p in CAPTURES if p.name.startswith("pgbench-txn-pgbouncer"))
    plain = analyze(str(path))
    for layout in (COMPACT, INDENTED):
        conns = analyze(str(path), Options(store=layout))["connections"]
        assert conns._lib is module  # type: ignore[attr-defined]
        assert list(conns) == plain["connections"]
        # a worker process hands its report over pickled (analyze --format jsonl a b ...)
        assert list(pickle.loads(pickle.dumps(conns))) == plain["connections"]


def test_roles_survive_storage_on_both_legs_of_a_relay() -> None:
    """Relay matching sets "role" after the connections are stored: front and back legs."""
    path = next(p for p in CAPTURES if p.name.startswith("pgbench-txn-pgbouncer"))
    for layout in (COMPACT, INDENTED):
        stored = analyze(str(path), Options(store=layout))["connections"]
        roles = [c["role"] for c in stored]
        assert "front" in roles and "back" in roles


CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from pktflow.pipeline import Options, analyze

def peak():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))

start = peak()
rep = analyze(sys.argv[2], Options(linger_s=5.0, store=json.loads(sys.argv[3])))
print(json.dumps({"grew": peak() - start, "connections": len(rep["connections"])}))
"""


def test_stored_reports_hold_a_fraction_of_the_memory(tmp_path: Path) -> None:
    """2,000 short connections (a query and a 20 KB reply each), retired as they close: the
    pass ends holding their reports, stored or as dicts. Measured as how much the peak
    resident size of a process grew while it ran analyze (the core's engine holds a few
    connections at once, the facts it hands out go as they are reported)."""
    path = write_capture(tmp_path / "storm.pcap", storm(2000, spacing=1.0))
    grew = {}
    for store in (COMPACT, INDENTED, None):
        out = subprocess.run([sys.executable, "-c", CHILD, str(ROOT / "analyzer"), str(path),
                              json.dumps(store)], capture_output=True, text=True, check=True)
        run = json.loads(out.stdout)
        assert run["connections"] == 2000
        grew[store] = run["grew"]
    assert grew[None] > 2000 * 5000, grew  # the reports as dicts: several KB each
    assert grew[COMPACT] < 0.35 * grew[None] and grew[INDENTED] < 0.35 * grew[None], grew


def test_text_report_of_a_storm_stays_readable() -> None:
    """Thousands of queries on a pooler's back leg and thousands of front legs: the text
    lists the largest responses and the first legs, and says how many there are."""
    from pktflow.report.queries import MAX_QUERY_ROWS, query_table
    from pktflow.report.relays import MAX_LEGS, _legs

    queries = [{"sql": f"SELECT {i}", "sent_s": i * 0.001, "response_bytes": 100 + i % 7,
                "rows": 1} for i in range(500)]
    queries[7]["response_bytes"] = 10_000
    out = io.StringIO()
    Console(file=out, width=200).print(query_table({"queries": queries}))
    text = out.getvalue()
    assert "500 queries, the 30 with the largest responses" in text
    assert "SELECT 7 " in text and "SELECT 8 " not in text  # 8 % 7 == 1: a small response
    assert sum(" SELECT " in line for line in text.splitlines()) == MAX_QUERY_ROWS
    ids = [f"c{i}" for i in range(1, 1001)]
    assert _legs(ids) == ", ".join(ids[:MAX_LEGS]) + " ... (1,000 in all)"
    assert _legs(ids[:MAX_LEGS]) == ", ".join(ids[:MAX_LEGS])


def test_the_busiest_are_found_without_decoding_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    """The text overview ranks stored connections by bytes kept beside them: the same ranking
    as the plain report's (ties in capture order), decoding only those it lists."""
    from pktflow.report.stored import busiest

    plain = report(storm(300, spacing=1.0), 5.0)
    conns = report(storm(300, spacing=1.0), 5.0, store=COMPACT)["connections"]
    decoded = []
    get = Connections.__getitem__
    monkeypatch.setattr(Connections, "__getitem__",
                        lambda self, i: decoded.append(i) or get(self, i))
    top = busiest(conns, 20)
    assert top == busiest(plain["connections"], 20)
    assert sorted(decoded) == sorted(i for i, _ in top)


def _uneven_storm(n: int) -> list[tuple]:  # type: ignore[type-arg]
    """n short connections whose replies differ (1-20 KB, with ties), in connection order."""
    pkts = [p for i in range(n)
            for p in conversation(20000 + i, 1000.0 + i, 1000 * (1 + (i * 7) % 20))]
    return [(i + 1, *p[1:]) for i, p in enumerate(pkts)]


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.stem)
def test_the_text_report_keeps_only_what_it_draws(capture: Path) -> None:
    """analyze's text output keeps the reports of the busiest connections and each relay's
    first matched queries only (Options.keep): it renders exactly as the whole report."""
    plain = analyze(str(capture))
    kept = analyze(str(capture), Options(store=COMPACT, keep=MAX_OVERVIEW))
    assert _text(kept) == _text(plain)


def test_kept_busiest_are_those_of_the_whole_report(tmp_path: Path) -> None:
    """With more connections than it keeps: the same busiest, ties in capture order, and a
    connection not kept says so when read."""
    path = write_capture(tmp_path / "uneven.pcap", _uneven_storm(120))
    plain = analyze(str(path), Options(linger_s=5.0))
    kept = analyze(str(path), Options(linger_s=5.0, store=COMPACT, keep=MAX_OVERVIEW))
    conns = kept["connections"]
    assert len(conns) == len(plain["connections"]) == 120
    assert stored_module.busiest(conns, MAX_OVERVIEW) == stored_module.busiest(
        plain["connections"], MAX_OVERVIEW)
    assert conns.ids() == [c["id"] for c in plain["connections"]]  # type: ignore[attr-defined]
    assert _text(kept) == _text(plain)
    # the 101st has the least reply (1 KB) and came once the busiest were all larger
    with pytest.raises(LookupError, match="c101's report was not kept"):
        conns[100]
    unread = 0
    for i in range(120):
        try:
            conns[i]
        except LookupError:
            unread += 1
    assert 0 < unread <= 120 - MAX_OVERVIEW  # some were kept a while, then outranked


@pytest.mark.parametrize("keep", [1, 3, 10])
def test_top_pairs_rank_as_the_whole_list(keep: int) -> None:
    """A relay's matched queries kept as TopPairs give the first ones in both orders exactly
    as the whole list (ties in order)."""
    path = next(p for p in CAPTURES if p.name.startswith("pgbench-txn-pgbouncer"))
    (relay,) = analyze(str(path))["relays"]
    pairs = relay["queries"]
    assert len(pairs) > 3 * keep
    top = TopPairs(keep)
    for p in pairs:
        top.append(p)
    assert len(top) == len(pairs)
    assert ranked_pairs(top, keep) == ranked_pairs(pairs, keep)
    for bulk, key in ((True, "response_bytes"), (False, "relay_cost_ms")):
        want = sorted(range(len(pairs)), key=lambda i: (
            -((pairs[i][key]["front"] if bulk else pairs[i][key]) or 0), i))[:keep]
        assert top.first(keep, bulk) == [pairs[i] for i in want]


def test_connections_picked_by_id_decode_only_those(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a diagram reads of a stored report: ids without decoding, and the connections it
    draws, decoded alone, equal to the plain report's."""
    path = next(p for p in CAPTURES if p.name.startswith("pgbench-txn-pgbouncer"))
    plain = analyze(str(path))["connections"]
    conns = analyze(str(path), Options(store=COMPACT))["connections"]
    assert isinstance(conns, Connections) and len(plain) > 3
    decoded: list[int] = []
    text = Connections._text
    monkeypatch.setattr(Connections, "_text",
                        lambda self, i: (decoded.append(i), text(self, i))[1])
    assert stored_module.connection_ids(conns) == [c["id"] for c in plain]
    assert not decoded
    want = {plain[1]["id"], plain[-1]["id"], "c999999"}
    picked = stored_module.by_id(conns, want)
    assert next(picked) == plain[1] and decoded == [1]  # one at a time, as they are read
    assert list(picked) == [plain[-1]]
    assert sorted(decoded) == [1, len(plain) - 1]
    assert list(stored_module.by_id(plain, want)) == [plain[1], plain[-1]]
    assert stored_module.connection_ids(plain) == [c["id"] for c in plain]


def test_spilled_items_read_back_in_memory_on_disk_and_pickled(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Past SPILL bytes the deflated items go to a temporary file: every one reads back, from
    the file or the buffer, and a pickled copy (a worker's report) holds them all."""
    monkeypatch.setattr(stored_module, "SPILL", 1000)
    spill = Spill()
    items = [bytes([i % 251]) * (37 * i % 400) for i in range(200)]
    for item in items:
        spill.append(item)
    assert spill._file is not None and 0 < spill._written < sum(map(len, items))
    assert len(spill) == 200 and [spill[i] for i in range(200)] == items
    copy = pickle.loads(pickle.dumps(spill))
    assert copy._file is None and [copy[i] for i in range(200)] == items
    monkeypatch.setattr(stored_module, "RAW", 2)
    dicts = [{"n": i, "sql": "SELECT " + "x" * (i % 50), "sizes": {"1448": i}} for i in range(300)]
    for deflate in (True, False):  # connections are deflated, a relay's pairs not
        texts = Texts(INDENTED, 3, deflate)
        for d in dicts:
            texts.append(d)
        assert texts._rest._file is not None and (texts._lib is not None) == deflate
        assert list(texts) == dicts and texts[-1] == dicts[-1] and texts[5:8] == dicts[5:8]
        assert list(pickle.loads(pickle.dumps(texts))) == dicts
        with pytest.raises(IndexError):
            texts[300]
    # large items are not kept as text, even the first (past RAW_BYTES in all)
    monkeypatch.setattr(stored_module, "RAW", 16)
    monkeypatch.setattr(stored_module, "RAW_BYTES", 100)
    texts = Texts(COMPACT)
    big = [{"sql": "x" * n} for n in (10, 20, 200, 10, 500)]
    for d in big:
        texts.append(d)
    assert len(texts._raw) == 2 and list(texts) == big
