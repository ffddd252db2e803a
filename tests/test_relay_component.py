"""A relay judged as a component (issue 24): from what limited each leg, whether the client,
the client's path, the pooler itself, the server's path or the server set the pace; and the
client's extra time split between what the relay did and what the client leg cost. Checked
against the lab's kernel figures for each sending socket."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_limits_corpus import AGREES, direction_of, over_the_transfer

from pktflow.pipeline import analyze
from pktflow.relay.measure import component

ROOT = Path(__file__).resolve().parent.parent
POOLED = sorted((ROOT / "captures" / "conditions").glob("*-pgbouncer-*.pcap.gz"))
# the kernel's names for a sending socket's limit, in the verdict's terms
KERNEL = {"receiver_window": "receiver_window", "network": "network", "loss": "loss",
          "sender": "sender", "send_buffer": "sender"}


def _kernel_legs(capture: Path) -> tuple[str, str]:
    """What limited each leg by the kernel's figures, over the transfer's span as the limits
    corpus test reads them (test_limits_corpus.over_the_transfer)."""
    meta = json.loads(capture.with_suffix("").with_suffix(".pcap.json").read_text())
    report = analyze(str(capture))
    by = {s["direction"]: KERNEL[over_the_transfer(s, direction_of(report, s))[
        "dominant_limit"]] for s in meta["kernel"]["sockets"]}
    return by["pooler->client"], by["server->pooler"]


@pytest.mark.parametrize("capture", POOLED, ids=lambda p: p.name.split(".")[0])
def test_the_relay_component_agrees_with_the_kernel(capture: Path) -> None:
    report = analyze(str(capture))
    (relay,) = report["relays"]
    v = relay["verdict"]
    front, back = v["legs"]["front"], v["legs"]["back"]
    assert v["limit"] == component(front, back)
    # the legs' verdicts are the kernel's (test_limits_corpus: its network is the verdict's
    # network or latency), so the relay's is too
    kernel = _kernel_legs(capture)
    assert front in AGREES[kernel[0]] and back in AGREES[kernel[1]]
    assert v["limit"] == component(*kernel)
    # the client's extra time beyond the server leg: the relay's part and the client leg's
    costs = [p["relay_cost_ms"] for p in relay["queries"] if p["relay_cost_ms"] is not None]
    assert v["relay_ms"] + v["front_leg_ms"] == pytest.approx(sum(costs), abs=0.01)
    if v["limit"] not in ("client", "network"):
        assert v["front_leg_ms"] == 0
    # pkt_buf is named only where the pooler is what limits
    assert ("pkt_buf (default" in (v["setting"] or "")) == (v["limit"] == "pooler")


@pytest.mark.parametrize("condition, limit", [
    ("slowreader200000", "client"), ("rcvbuf16384", "client"), ("loss2pct", "network"),
    ("20mbit", "server_network"),
    # nothing shaped: PgBouncer itself, forwarding 4 KB at a time, closed its window to the
    # server while it had nothing more for the client
    ("unshaped", "pooler")])
def test_each_condition_names_its_cause(condition: str, limit: str) -> None:
    capture = ROOT / "captures" / "conditions" / f"seqscan-10k-pgbouncer-bridge-{condition}.pcap.gz"
    (relay,) = analyze(str(capture))["relays"]
    v = relay["verdict"]
    assert v["limit"] == limit == component(*_kernel_legs(capture))
    if limit == "client" and condition.startswith("slowreader"):
        # seconds of a slow reader are the client leg's, not the relay's
        assert v["front_leg_ms"] > 1000 > 10 > v["relay_ms"]
        assert "the relay itself added" in v["summary"]
