"""Teaching mode's walk (`flow --explain`): the conversation step by step in the order of the
PostgreSQL documentation's Message Flow section, each step naming the frames that show it, on
real captures of each kind of exchange."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

from pktflow.cli import Env, main
from pktflow.flow.walk import MAX_STEPS

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "captures"


def steps(name: str, *argv: str) -> list[tuple[str, str, list[int]]]:
    """(kind with its connections and count, sentence, frames listed) per step."""
    out, err = io.StringIO(), io.StringIO()
    code = main(["flow", str(CAPTURES / name), *argv, "--explain", "--format", "json"],
                Env(stdout=out, stderr=err))
    assert code == 0, err.getvalue()
    got = []
    for line in json.loads(out.getvalue())["explain"]:
        m = re.fullmatch(r"step \d+  (.+?): (.*) \(frames? ([\d, …]+)\)", line)
        if m:
            frames = [int(f) for f in re.findall(r"\d+", m[3])]
            got.append((m[1], m[2], frames))
    return got


def kinds(walk: list[tuple[str, str, list[int]]]) -> list[str]:
    return [k for k, _, _ in walk]


def test_startup_simple_and_extended_queries_in_order() -> None:
    walk = steps("extended-direct-loopback.pcap", "--all")
    assert kinds(walk) == [
        "TCP handshake (c1)", "encryption (c1)", "start-up (c1)", "simple query (c1) ×2",
        "termination (c1)", "TCP close (c1)", "TCP handshake (c2)", "encryption (c2)",
        "start-up (c2)", "extended query (c2) ×20", "termination (c2)", "TCP close (c2)"]
    handshake, _, frames = walk[0]
    assert frames == [1, 2, 3]
    _, sentence, frames = walk[2]
    assert frames == [8, 9] and "AuthenticationOk" in sentence and "BackendKeyData" in sentence
    _, sentence, frames = walk[9]
    assert frames[:2] == [25, 28] and "Sync" in sentence and "→ P B D E S" in sentence
    assert walk[5][2] == [15, 26, 27]  # FIN, FIN, the last ACK


def test_an_error_then_ready_for_query() -> None:
    walk = steps("error-direct-loopback.pcap", "--all")
    (failed,) = [w for w in walk if w[0].startswith("failed query")]
    assert failed[2] == [10, 11, 12]
    assert "E(22012 division by zero)" in failed[1] and "ReadyForQuery" in failed[1]


def test_copy_in_copy_out_and_tls() -> None:
    assert any(k.startswith("COPY in (c1)") for k in kinds(steps("copy-in-direct-loopback.pcap",
                                                                 "--all")))
    # through the pooler: the client's COPY, and the server leg the pooler sent it on
    assert kinds(steps("pgdump-20k-pgbouncer-loopback.pcap"))[:2] == [
        "COPY out (c2)", "COPY out (c1 for c2)"]
    tls = kinds(steps("tls-direct-loopback.pcap", "--all"))
    assert tls == ["TCP handshake (c1)", "encryption (c1)", "TLS (c1)", "TCP close (c1)"]


def test_the_walk_is_bounded() -> None:
    out, _ = io.StringIO(), io.StringIO()
    main(["flow", str(CAPTURES / "pgbench-txn-pgbouncer-loopback.pcap"), "--all", "--explain",
          "--format", "json"], Env(stdout=out, stderr=io.StringIO()))
    lines = json.loads(out.getvalue())["explain"]
    walk = [ln for ln in lines if ln.startswith("step ")]
    assert len(walk) == MAX_STEPS
    assert any(ln.startswith("…  ") and "more steps" in ln for ln in lines)
