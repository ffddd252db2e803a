"""Golden files: the terminal report, the ladder and the Mermaid text of real captures, rendered
at a fixed width, must not change by accident. After a deliberate change, regenerate with
PKTFLOW_UPDATE_GOLDEN=1 and review the diff like code."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from pktflow.cli import Env, main

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden"
WIDTH = 120

CASES = {
    "analyze-seqscan-direct.txt": ["analyze", "captures/seqscan-10k-direct-loopback.pcap"],
    "analyze-seqscan-pgbouncer.txt": ["analyze", "captures/seqscan-10k-pgbouncer-loopback.pcap"],
    "flow-seqscan-direct.txt": ["flow", "captures/seqscan-10k-direct-loopback.pcap"],
    "flow-seqscan-pgbouncer.txt": ["flow", "captures/seqscan-10k-pgbouncer-loopback.pcap"],
    "flow-pgpool-explain.txt": ["flow", "captures/seqscan-10k-pgpool-loopback.pcap", "--explain"],
    "flow-seqscan-direct.mmd": ["flow", "captures/seqscan-10k-direct-loopback.pcap",
                                "--format", "mermaid"],
    "flow-seqscan-pgbouncer.mmd": ["flow", "captures/seqscan-10k-pgbouncer-loopback.pcap",
                                   "--format", "mermaid"],
    "compare-direct-pgbouncer.txt": ["compare", "captures/seqscan-10k-direct-loopback.pcap",
                                     "captures/seqscan-10k-pgbouncer-loopback.pcap"],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # paths in the output are as given: relative to the checkout
    out, err = io.StringIO(), io.StringIO()
    code = main(CASES[name], Env(stdout=out, stderr=err, width=WIDTH))
    assert code == 0 and err.getvalue() == ""
    golden = GOLDEN / name
    if os.environ.get("PKTFLOW_UPDATE_GOLDEN") == "1":
        golden.write_text(out.getvalue())
    assert golden.exists(), f"{golden} is missing: run with PKTFLOW_UPDATE_GOLDEN=1"
    assert out.getvalue() == golden.read_text()
