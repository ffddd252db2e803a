"""pktflow on the real captures in captures/, cross-checked against tshark's own analysis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tsharkcheck import (TSHARK, pktflow_directions, pktflow_pgsql_counts, tshark_directions,
                         tshark_pgsql_counts)

from pktflow.pipeline import analyze

CAPTURES = sorted(p for p in (Path(__file__).resolve().parent.parent / "captures").iterdir()
                  if p.suffix in (".pcap", ".pcapng", ".gz"))


def test_corpus_is_present() -> None:
    assert CAPTURES, "captures/ must hold at least one real capture"


@pytest.fixture(scope="module", params=CAPTURES, ids=[p.name for p in CAPTURES])
def analysed(request: pytest.FixtureRequest) -> tuple[Path, dict]:  # type: ignore[type-arg]
    path: Path = request.param
    return path, analyze(str(path))


def test_report_is_json_and_complete(analysed: tuple[Path, dict]) -> None:  # type: ignore[type-arg]
    path, report = analysed
    assert report["schema"] == "pktflow.report/1"
    json.dumps(report)
    cap = report["capture"]
    assert cap["damage"] is None and cap["tcp_packets"] > 0
    assert cap["packets"] == cap["tcp_packets"] + cap["non_tcp_packets"] + \
        cap["undecodable_packets"] + cap["ip_fragments"]
    for conn in report["connections"]:
        for d in conn["directions"].values():
            assert d["gaps"] == 0, f"{path.name} {conn['id']}: a clean lab capture has no gaps"


@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed (Debian package tshark)")
def test_tcp_counts_agree_with_tshark(analysed: tuple[Path, dict]) -> None:  # type: ignore[type-arg]
    path, report = analysed
    assert pktflow_directions(report) == tshark_directions(path)


@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed (Debian package tshark)")
def test_message_counts_agree_with_tshark_pgsql(analysed: tuple[Path, dict]) -> None:  # type: ignore[type-arg]
    path, report = analysed
    ports = sorted({c["server"]["port"] for c in report["connections"]})
    assert pktflow_pgsql_counts(report) == tshark_pgsql_counts(path, ports)


def test_rows_equal_command_tags_and_table_size(analysed: tuple[Path, dict]) -> None:  # type: ignore[type-arg]
    path, report = analysed
    meta = json.loads(path.with_suffix(".json").read_text())
    scenario = meta["scenario"]
    legs = [c for c in report["connections"] if c["protocol"].startswith("postgresql")]
    # a pooled leg without its handshake keeps the roles its ports gave
    assert legs and all(c["roles_from"] == "handshake" or c["roles_from"] == "port"
                        and c["decode_started_at"] == "mid-stream" for c in legs)
    for conn in legs:
        for q in conn["queries"]:
            if "FROM STDIN" in q["sql"].upper():
                continue  # the client batches rows into CopyData as it likes (psql: ~64 KB)
            if q["command_tag"] and q["command_tag"].split()[0] in ("SELECT", "COPY"):
                counted = q["copy_data"] if q["kind"] == "copy" else q["data_rows"]
                assert counted == q["rows"], (conn["id"], q["sql"][:40])
        if scenario in ("seqscan-10k", "pgdump"):
            # every leg carries the whole table: 10,000 DataRows or one CopyData per row
            big = max(conn["queries"], key=lambda q: q["response_bytes"])
            assert big["rows"] == meta["rows"], conn["id"]
    if scenario == "extended":
        (conn,) = [c for c in legs if c["messages"]["frontend"].get("Parse")]
        qs = [q for q in conn["queries"] if q["kind"] == "extended"]
        assert len(qs) == 20 and all(q["rows"] == 1 for q in qs)
        for name in ("Parse", "Bind", "Execute", "Sync"):
            assert conn["messages"]["frontend"][name] == 20
    elif scenario == "copy-in":
        (q,) = legs[0]["queries"]
        assert q["kind"] == "copy" and q["command_tag"] == f"COPY {meta['rows']}"
        assert legs[0]["messages"]["frontend"]["CopyDone"] == 1
        assert legs[0]["messages"]["backend"]["CopyInResponse"] == 1
    elif scenario == "error":
        bad, good = legs[0]["queries"]
        assert bad["error"]["code"] == "22012" and bad["command_tag"] is None
        assert good["error"] is None and good["rows"] == 1
        assert any(f["code"] == "query-error" and "22012" in f["message"]
                   for f in report["findings"]), report["findings"]
    elif scenario == "tls":
        (conn,) = legs
        assert conn["protocol"] == "postgresql-tls" and conn["queries"] == []
        assert conn["directions"]["server_to_client"]["payload_bytes"] > 10_000  # encrypted rows
    if scenario == "pgbench":
        # 4 clients x 25 transactions, each ending in END (tag COMMIT), on both sides of the
        # pooler: the clients' legs and the pooled server connections
        pooler = meta["ports"].get(meta["via"])
        for side in (True, False):
            commits = sum(q["command_tag"] == "COMMIT" for c in legs
                          if (c["server"]["port"] == pooler) == side for q in c["queries"])
            assert commits == 100, side
    elif scenario in ("seqscan-10k", "pgdump"):
        assert len(legs) == (1 if meta["via"] == "direct" else 2)
