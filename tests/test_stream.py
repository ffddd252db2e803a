"""`pktflow analyze -`: a capture from a pipe, gzipped or not, reported as the same file is; a
stream cut mid-record is damage (exit 6); --follow says every query once final and every
connection once closed, nothing lost and nothing twice, as text or JSON lines, and SIGINT on
a silent pipe ends the stream with the capture's own parts (exit 0)."""

from __future__ import annotations

import gzip
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pktflow import _core
from pktflow.judge import Judge
from pktflow.pipeline import Options, Stream, open_pass

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = sorted((ROOT / "captures").glob("*.pcap"))
PGBENCH = ROOT / "captures" / "pgbench-txn-pgbouncer-loopback.pcap"


def pktflow(*args: str, data: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "pktflow", *args], input=data,
                          capture_output=True, timeout=300)


def report_of(path: Path) -> dict[str, Any]:
    res = subprocess.run([sys.executable, "-m", "pktflow", "analyze", "--format", "json",
                          str(path)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.stem)
def test_a_pipe_is_reported_as_its_file(capture: Path) -> None:
    want = report_of(capture)
    want["capture"].pop("file")
    want["capture"].pop("compressed")
    for data in (capture.read_bytes(), gzip.compress(capture.read_bytes())):
        res = pktflow("analyze", "-", "--format", "json", data=data)
        assert res.returncode == 0, res.stderr
        got = json.loads(res.stdout)
        assert got["capture"].pop("file") == "-"
        assert got["capture"].pop("compressed") == (data[:2] == b"\x1f\x8b")
        assert got == want


def test_a_stream_cut_mid_record_is_damage() -> None:
    res = pktflow("analyze", "-", data=PGBENCH.read_bytes()[:100_000])
    assert res.returncode == 6
    assert b"pktflow: - (frame" in res.stderr and b"the file ends inside frame" in res.stderr
    res = pktflow("analyze", "-", "--follow", "--format", "jsonl",
                  data=gzip.compress(PGBENCH.read_bytes())[:50_000])
    assert res.returncode == 6, res.stderr


def lines(out: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.decode().splitlines()]


@pytest.mark.parametrize("capture", [PGBENCH, ROOT / "captures" / "pgdump-20k-pgbouncer-loopback.pcap",
                                     ROOT / "captures" / "error-direct-loopback.pcap"],
                         ids=lambda p: p.stem)
def test_follow_says_every_query_and_connection_once(capture: Path) -> None:
    want = report_of(capture)
    res = pktflow("analyze", "-", "--follow", "--format", "jsonl", data=capture.read_bytes())
    assert res.returncode == 0, res.stderr
    said = lines(res.stdout)
    end = said.pop()
    assert end["schema"] == "pktflow.report/1" and end["connections"] == []
    assert end["relays"] == want["relays"]
    assert {x["schema"] for x in said} == {"pktflow.follow/1"}
    # every finding once: each connection's after its line, the rest at the end
    found = [{k: v for k, v in x.items() if k not in ("schema", "event")}
             for x in said if x["event"] == "finding"]
    key = json.dumps
    assert sorted(map(key, found + end["findings"])) == sorted(map(key, want["findings"]))
    said = [x for x in said if x["event"] != "finding"]
    # a relay's front leg was said before its relay was found: its verdict judged again as
    # the relay's comes at the end, after every connection
    again = [x for x in said if x["event"] == "verdict"]
    assert said[len(said) - len(again):] == again
    said = said[:len(said) - len(again)]
    queries = [(x["connection"], x["query"]) for x in said if x["event"] == "query"]
    conns = [x["connection"] for x in said if x["event"] == "connection"]
    # each connection once, as the report has it (its relay role is known only at the end)
    assert sorted(c["id"] for c in conns) == sorted(c["id"] for c in want["connections"])
    by_id = {c["id"]: c for c in want["connections"]}
    by_conn = {c["id"]: c for c in conns}
    for v in again:
        by_conn[v["connection"]]["directions"][v["direction"]]["verdict"] = v["verdict"]
    for c in conns:
        expected = dict(by_id[c["id"]])
        expected.pop("role")
        assert c == expected
    # each query once, as the report lists it, and before its connection's line
    expected_q = sorted((c["id"], q["sent_frame"]) for c in want["connections"]
                        for q in c.get("queries", []) if q["last_response_s"] is not None
                        and not q["incomplete"])
    got_q = sorted((cid, q["sent_frame"]) for cid, q in queries)
    assert set(expected_q) <= set(got_q) and len(set(got_q)) == len(got_q)
    listed = {(c["id"], q["sent_frame"]): q for c in want["connections"]
              for q in c.get("queries", [])}
    for cid, q in queries:
        assert q == listed[(cid, q["sent_frame"])]
    order = [(x["event"], x["connection"] if x["event"] == "query" else x["connection"]["id"])
             for x in said]
    for i, (event, cid) in enumerate(order):
        if event == "query":
            assert ("connection", cid) in order[i:]


def test_follow_in_text_is_a_line_each() -> None:
    want = report_of(PGBENCH)
    res = pktflow("analyze", "-", "--follow", data=PGBENCH.read_bytes())
    assert res.returncode == 0, res.stderr
    text = res.stdout.decode().splitlines()
    n_queries = sum(1 for c in want["connections"] for q in c.get("queries", []))
    query_lines = [t for t in text if " query at " in t]
    conn_lines = [t for t in text if " -> " in t and "closed by" in t]
    assert len(query_lines) == n_queries
    assert len(conn_lines) == len(want["connections"])
    assert any("UPDATE pgbench_accounts" in t and "UPDATE 1" in t for t in query_lines)


def test_sigint_on_a_silent_pipe_ends_the_stream_with_the_capture_parts(tmp_path: Path) -> None:
    data = PGBENCH.read_bytes()
    proc = subprocess.Popen([sys.executable, "-m", "pktflow", "analyze", "-", "--follow",
                             "--format", "jsonl"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(data)
    proc.stdin.flush()  # and the pipe stays open, silent
    first = proc.stdout.readline()  # a query said while the stream is still open
    assert json.loads(first)["event"] == "query"
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out = proc.stdout.read()  # the rest, through the same buffer readline used
    assert proc.stderr is not None
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0, err
    said = lines(first + out)
    assert said[-1]["schema"] == "pktflow.report/1"
    assert said[-1]["capture"]["damage"] is None and said[-1]["capture"]["packets"] > 0
    assert len(said[-1]["relays"]) == 1
    # every connection was said, at the end if not before
    assert len([x for x in said if x.get("event") == "connection"]) == \
        len(report_of(PGBENCH)["connections"])
    proc.stdin.close()


def test_what_follow_hands_over_is_what_the_stub_says() -> None:
    from test_core_types import STUB, Stub

    stub = Stub(STUB.read_text())
    said: list[tuple[str, Any]] = []
    stop = _core.Stopper()
    core = open_pass(str(PGBENCH), Options(), Stream(stop=stop, follow="values"))
    judge = Judge()
    while core.step(judge) is not None:
        said.extend(core.take_live())
    said.extend(core.take_live())
    kinds = {kind for kind, _ in said}
    assert kinds == {"query", "connection"}
    for kind, value in said:
        stub.name(value, "LiveQuery" if kind == "query" else "LiveConnection", kind)


def test_follow_says_what_limited_a_bulk_response() -> None:
    """A connection of one bulk query: its response's limit seconds are (nearly all of) its
    server->client direction's, so the limit named for the query is the direction's."""
    capture = ROOT / "captures" / "seqscan-10k-pgbouncer-bridge.pcap"
    want = {c["id"]: c["directions"]["server_to_client"]
            for c in report_of(capture)["connections"]}
    res = pktflow("analyze", "-", "--follow", "--format", "jsonl", data=capture.read_bytes())
    bulk = [x for x in lines(res.stdout)[:-1] if x["event"] == "query"
            and x["query"]["response_bytes"] >= 64 * 1024]
    assert bulk
    for x in bulk:
        d = want[x["connection"]]
        got = x["response_limits"]
        assert max(got, key=got.get) == d["verdict"]["limit"]
        for limit, s in d["limits"]["seconds"].items():
            assert got[limit] == pytest.approx(s, abs=0.05 * d["limits"]["transfer_s"])
    text = pktflow("analyze", "-", "--follow", data=capture.read_bytes()).stdout.decode()
    assert "SELECT 10000, limited by the receiver's window (72%)" in text
