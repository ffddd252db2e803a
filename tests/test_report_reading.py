"""The report as renderers read it from the core (Options(lazy=True), what the CLI uses):
connections and a relay's matched pairs decoded one at a time as they are asked for. They must
read and render exactly as the report made with every value at once, and hold far less
memory: the core spools the records."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from craft import write_pcap
from rich.console import Console
from tcpfeed import write_capture
from test_retire import report, storm

from pktflow.pipeline import Options, analyze
from pktflow.report.connections import (Connections, Pairs, busiest, by_id, connection_ids,
                                        ranked_pairs)
from pktflow.report.queries import MAX_QUERY_ROWS
from pktflow.report.text import render, render_connection

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = sorted([*(ROOT / "captures").glob("*.pcap"), *(ROOT / "tests" / "regressions").glob("*.pcap")])
LAZY = Options(lazy=True)


def _rest(rep: dict) -> dict:  # type: ignore[type-arg]
    """The report but its connections, relay pairs read whole."""
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


@pytest.mark.parametrize("capture", [*CAPTURES, "no-connections"],
                         ids=lambda p: getattr(p, "stem", p))
def test_read_lazily_the_report_reads_and_renders_as_the_whole(
        capture: Path | str, request: pytest.FixtureRequest) -> None:
    if capture == "no-connections":
        capture = request.getfixturevalue("no_connections")
    whole = analyze(str(capture))
    lazy = analyze(str(capture), LAZY)
    conns = lazy["connections"]
    assert isinstance(conns, Connections) and len(conns) == len(whole["connections"])
    assert list(conns) == whole["connections"] and conns[:2] == whole["connections"][:2]
    if conns:
        assert conns[-1] == whole["connections"][-1]
    for relay in lazy["relays"]:
        assert isinstance(relay["queries"], Pairs)
    assert _rest(lazy) == _rest(whole)
    assert _text(lazy) == _text(whole)


def test_roles_on_both_legs_of_a_relay() -> None:
    path = next(p for p in CAPTURES if p.name.startswith("pgbench-txn-pgbouncer"))
    roles = [c["role"] for c in analyze(str(path), LAZY)["connections"]]
    assert "front" in roles and "back" in roles


CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from pktflow.pipeline import Options, analyze

def peak():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))

start = peak()
rep = analyze(sys.argv[2], Options(linger_s=5.0, lazy=json.loads(sys.argv[3])))
print(json.dumps({"grew": peak() - start, "connections": len(rep["connections"])}))
"""


def test_a_lazy_report_holds_a_fraction_of_the_memory(tmp_path: Path) -> None:
    """2,000 short connections (a query and a 20 KB reply each), retired as they close: the
    pass ends with their records in the core's spool, or (not lazy) also every one as Python
    values. Measured as how much the peak resident size of a process grew while it ran
    analyze (the core's engine holds a few connections at once)."""
    path = write_capture(tmp_path / "storm.pcap", storm(2000, spacing=1.0))
    grew = {}
    for lazy in (True, False):
        out = subprocess.run([sys.executable, "-c", CHILD, str(ROOT / "analyzer"), str(path),
                              json.dumps(lazy)], capture_output=True, text=True, check=True)
        run = json.loads(out.stdout)
        assert run["connections"] == 2000
        grew[lazy] = run["grew"]
    assert grew[False] > 2000 * 5000, grew  # the records as dicts: several KB each
    assert grew[True] < 0.25 * grew[False], grew


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
    said = [line.split()[:2] for line in text.splitlines()]
    assert ["SELECT", "7"] in said and ["SELECT", "8"] not in said  # 8 % 7: a small response
    assert sum(words[:1] == ["SELECT"] for words in said) == MAX_QUERY_ROWS
    ids = [f"c{i}" for i in range(1, 1001)]
    assert _legs(ids) == ", ".join(ids[:MAX_LEGS]) + " ... (1,000 in all)"
    assert _legs(ids[:MAX_LEGS]) == ", ".join(ids[:MAX_LEGS])


def test_the_busiest_are_found_without_decoding_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    """The text overview ranks connections by the bytes the core keeps beside each: the same
    ranking as the whole report's (ties in capture order), decoding only those it lists."""
    whole = report(storm(300, spacing=1.0), 5.0)
    conns = Connections(whole.core)
    decoded = []
    get = Connections.__getitem__
    monkeypatch.setattr(Connections, "__getitem__",
                        lambda self, i: decoded.append(i) or get(self, i))
    top = busiest(conns, 20)
    assert top == busiest(whole["connections"], 20)
    assert sorted(decoded) == sorted(i for i, _ in top)


@pytest.mark.parametrize("keep", [1, 3, 10])
def test_ranked_pairs_read_lazily_rank_as_the_whole_list(keep: int) -> None:
    """A relay's first matched pairs in both orders (the biggest responses, the longest
    delays), ties in order: the same from the core's pairs as from the whole list."""
    path = next(p for p in CAPTURES if p.name.startswith("pgbench-txn-pgbouncer"))
    (relay,) = analyze(str(path))["relays"]
    (lazy,) = analyze(str(path), LAZY)["relays"]
    pairs, read = relay["queries"], lazy["queries"]
    assert len(pairs) > 3 * keep and isinstance(read, Pairs)
    assert ranked_pairs(read, keep) == ranked_pairs(pairs, keep)
    for bulk, key in ((True, "response_bytes"), (False, "relay_cost_ms")):
        want = sorted(range(len(pairs)), key=lambda i: (
            -((pairs[i][key]["front"] if bulk else pairs[i][key]) or 0), i))[:keep]
        if bulk == ranked_pairs(pairs, keep)[0]:
            assert ranked_pairs(read, keep)[1] == [pairs[i] for i in want]


def test_connections_picked_by_id_decode_only_those(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a diagram reads of a report: ids without decoding, and the connections it draws,
    decoded alone, equal to the whole report's."""
    path = next(p for p in CAPTURES if p.name.startswith("pgbench-txn-pgbouncer"))
    whole = analyze(str(path))["connections"]
    conns = analyze(str(path), LAZY)["connections"]
    assert isinstance(conns, Connections) and len(whole) > 3
    decoded: list[int] = []
    get = Connections.__getitem__
    monkeypatch.setattr(Connections, "__getitem__",
                        lambda self, i: (decoded.append(i), get(self, i))[1])
    assert connection_ids(conns) == [c["id"] for c in whole]
    assert not decoded
    want = {whole[1]["id"], whole[-1]["id"], "c999999"}
    picked = by_id(conns, want)
    assert next(picked) == whole[1] and decoded == [1]  # one at a time, as they are read
    assert list(picked) == [whole[-1]]
    assert sorted(decoded) == [1, len(whole) - 1]
    assert list(by_id(whole, want)) == [whole[1], whole[-1]]
    assert connection_ids(whole) == [c["id"] for c in whole]


def test_a_panel_decodes_only_the_queries_it_shows() -> None:
    """A connection panel ranks the queries by the response sizes the core hands over at
    once, and decodes only the MAX_QUERY_ROWS it shows (a pooler's back leg lists
    thousands): the same panel as from the whole list."""
    path = ROOT / "captures" / "pgdump-20k-pgbouncer-loopback.pcap"
    lazy = analyze(str(path), LAZY)
    conns = lazy["connections"]
    i = max(range(len(conns)), key=lambda k: conns.summary(k)["queries_total"] or 0)
    asked: list[list[int]] = []
    core = lazy.core

    class Counting:
        def __getattr__(self, name: str) -> object:
            return getattr(core, name)

        def queries(self, n: int, indexes: list[int]) -> list:  # type: ignore[type-arg]
            asked.append(indexes)
            return core.queries(n, indexes)

    shown = Connections(Counting()).panel(i)  # type: ignore[arg-type]
    assert len(shown["queries"]) > MAX_QUERY_ROWS
    out = io.StringIO()
    Console(file=out, width=120).print(render_connection(shown, 120))
    whole = io.StringIO()
    Console(file=whole, width=120).print(render_connection(conns[i], 120))
    assert out.getvalue() == whole.getvalue()
    assert [len(a) for a in asked] == [MAX_QUERY_ROWS]
