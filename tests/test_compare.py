"""`pktflow compare`: the study's comparison, direct vs through PgBouncer, from real captures."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from pktflow.cli import Env, main

CAPTURES = Path(__file__).resolve().parent.parent / "captures"
DIRECT = CAPTURES / "seqscan-10k-direct-loopback.pcap"
POOLED = CAPTURES / "seqscan-10k-pgbouncer-loopback.pcap"


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), Env(stdout=out, stderr=io.StringIO(), width=120))
    return code, out.getvalue()


def test_direct_vs_pgbouncer() -> None:
    code, out = run("compare", str(DIRECT), str(POOLED), "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["schema"] == "pktflow.compare/1"
    assert not doc["a_has_relay"] and doc["b_has_relay"]
    (row,) = [r for r in doc["queries"] if r["sql"] == "SELECT * FROM t10k"]
    a, b = row["a"], row["b"]
    assert a["rows"] == b["rows"] == 10_000
    assert a["response_bytes"] == b["response_bytes"]
    assert not a["via_relay"] and b["via_relay"]
    # The study's numbers: direct, 8,192-byte segments and 16,384 bytes per ACK; through
    # PgBouncer the client gets ~4 KB segments while the server still writes 8,192 bytes.
    assert a["client_segment_median"] == a["server_segment_median"] == 8192
    assert doc["connections"]["a"][a["server_connection"]]["bytes_per_ack"] == 16384
    assert b["client_segment_median"] <= 4096 and b["server_segment_median"] == 8192
    assert row["ratio_b_to_a"]["client_segment_median"] < 0.6
    assert a["relay_cost_ms"] == 0.0 and b["relay_cost_ms"] > 0
    # The pooler's own statements are not client queries: they appear in neither list.
    assert all("DISCARD" not in q["sql"] for q in doc["only_in_b"])


def test_a_capture_against_itself_is_all_ones() -> None:
    code, out = run("compare", str(POOLED), str(POOLED), "--format", "json")
    doc = json.loads(out)
    assert code == 0 and not doc["only_in_a"] and not doc["only_in_b"]
    for row in doc["queries"]:
        assert all(r in (None, 1.0) for r in row["ratio_b_to_a"].values())
    assert doc["summary"]["difference_ms"] == 0
    assert all(p["ms"] == 0 for p in doc["summary"]["parts"])


CONDITIONS = CAPTURES / "conditions"
CONNECTION_WIDE = {"bytes_per_ack", "bytes_per_flight", "flights", "zero_windows", "rtt_ms"}


@pytest.mark.parametrize("condition", ["rtt10ms", "unshaped", "loss2pct", "20mbit"])
def test_the_difference_is_decomposed_into_parts_that_add_up(condition: str) -> None:
    direct = CONDITIONS / f"seqscan-10k-direct-bridge-{condition}.pcap.gz"
    pooled = CONDITIONS / f"seqscan-10k-pgbouncer-bridge-{condition}.pcap.gz"
    code, out = run("compare", str(direct), str(pooled), "--format", "json")
    doc = json.loads(out)
    summary = doc["summary"]
    assert code == 0 and summary["queries"] >= 1
    # the parts add up to the difference, which is the matched queries' client times
    timed = [r for r in doc["queries"] if r["a"]["client_ms"] is not None]
    assert summary["difference_ms"] == pytest.approx(
        sum(r["b"]["client_ms"] - r["a"]["client_ms"] for r in timed), abs=0.001 * len(timed))
    assert summary["difference_ms"] == pytest.approx(sum(p["ms"] for p in summary["parts"]),
                                                     abs=1e-9)
    for r in timed:  # and each query's parts add up to its time
        for s in ("a", "b"):
            q = r[s]
            assert q["client_ms"] == pytest.approx(
                q["server_wait_ms"] + q["server_transfer_ms"] + q["relay_cost_ms"]
                + q["client_leg_ms"], abs=1e-9)
        # per-query rows carry per-query numbers only
        assert not CONNECTION_WIDE & set(r["a"]) and not CONNECTION_WIDE & set(r["b"])
    parts = {p["part"]: p for p in summary["parts"]}
    assert parts["relay"]["a_ms"] == 0 and parts["relay"]["b_ms"] > 0
    # the relay's part is what analyze gives as the relay's own cost (issue 31 rule 8)
    (relay,) = json.loads(run("analyze", str(pooled), "--format", "json")[1])["relays"]
    assert parts["relay"]["b_ms"] == pytest.approx(relay["verdict"]["relay_ms"], abs=0.002)
    assert parts["client_leg"]["b_ms"] == pytest.approx(relay["verdict"]["front_leg_ms"],
                                                        abs=0.002)
    if condition == "rtt10ms":
        # the 10 ms link sits on the direct connection's server leg, but on the pooled
        # capture's client leg: its round trips move from the server leg into the client
        # leg's part, never into the relay's
        assert parts["server_wait"]["ms"] < 0 < parts["client_leg"]["ms"]
        assert parts["relay"]["ms"] < 2
        assert "round trip A 10." in parts["server_wait"]["why"]


def test_text_highlights_the_differences() -> None:
    code, out = run("compare", str(DIRECT), str(POOLED))
    assert code == 0
    assert "segment size to the client (median)" in out and "0.50x" in out
    # the answer first: the difference and its parts, before any per-query table
    headline = out.splitlines()[2]
    assert headline.startswith("B is ") and " than A in all (" in headline
    assert out.index("inside the relay") < out.index("segment size to the client")


def test_a_lazy_report_is_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """compare reads a report as the CLI reads it (from the core, as asked for) in one pass,
    each connection decoded once, and finds what it finds in the whole reports."""
    from pktflow.report.compare import compare, side
    from pktflow.pipeline import Options, analyze
    from pktflow.report.connections import Connections

    a, b = CAPTURES / "pgbench-txn-pgbouncer-loopback.pcap", POOLED
    stored = analyze(str(a), Options(lazy=True))
    decoded: list[int] = []
    get = Connections.__getitem__
    monkeypatch.setattr(Connections, "__getitem__",
                        lambda self, i: (decoded.append(i), get(self, i))[1])
    got = side(stored)
    assert sorted(decoded) == list(range(len(stored["connections"])))
    assert compare(got, analyze(str(b))) == compare(analyze(str(a)), analyze(str(b)))
    assert any(q["a"]["via_relay"] for q in compare(got, got)["queries"])
