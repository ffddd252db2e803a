"""A relay judged as a component (issue 24): from what limited each leg, whether the client,
the client's path, the pooler itself, the server's path or the server set the pace; and the
client's extra time split between what the relay did and what the client leg cost. Checked
against the lab's kernel figures for each sending socket."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_limits_corpus import KNOWN_DISAGREEMENTS

from pktflow.lab.kernel import verdict_agrees
from pktflow.lab.record import kernel_sockets
from pktflow.pipeline import analyze
from pktflow.relay.measure import component, forwarded_at_once

ROOT = Path(__file__).resolve().parent.parent
POOLED = sorted((ROOT / "captures" / "conditions").glob("*-pgbouncer-*.pcap.gz"))
# a sender blocked on its send buffer full of unacknowledged data was paced by round trips


def _kernel_legs(capture: Path) -> tuple[dict[str, object], dict[str, object]]:
    """The kernel's account of the front leg's and the back leg's sending sockets."""
    by = {s["direction"]: s for s in kernel_sockets(capture)}
    return by["pooler->client"], by["server->pooler"]


def _limit(sock: dict[str, object]) -> str:
    limit = str(sock["dominant_limit"])
    return "latency" if limit == "send_buffer" else limit


@pytest.mark.parametrize("capture", POOLED, ids=lambda p: p.name.split(".")[0])
def test_the_relay_component_agrees_with_the_kernel(capture: Path) -> None:
    report = analyze(str(capture))
    (relay,) = report["relays"]
    v = relay["verdict"]
    front, back = v["legs"]["front"], v["legs"]["back"]
    at_once = forwarded_at_once(relay["forwarding"])
    assert v["limit"] == component(front, back, at_once)
    # the legs' verdicts are the kernel's (test_limits_corpus, less the disagreements listed
    # there), so the relay's is too
    kf, kb = _kernel_legs(capture)
    name = capture.name.removesuffix(".pcap.gz").removesuffix("-snap128")
    if (name, "pooler->client") not in KNOWN_DISAGREEMENTS:
        assert verdict_agrees(front, None, kf) and verdict_agrees(back, None, kb)
        assert v["limit"] == component(_limit(kf), _limit(kb), at_once)
    # the client's extra time beyond the server leg: the relay's part and the client leg's
    costs = [p["relay_cost_ms"] for p in relay["queries"] if p["relay_cost_ms"] is not None]
    assert v["relay_ms"] + v["front_leg_ms"] == pytest.approx(sum(costs), abs=0.01)
    if v["limit"] not in ("client", "network"):
        assert v["front_leg_ms"] == 0
    # pkt_buf is named only where the pooler is what limits
    assert ("pkt_buf (default" in (v["setting"] or "")) == (v["limit"] == "pooler")


@pytest.mark.parametrize("condition, limit", [
    ("slowreader200000", "client"), ("rcvbuf16384", "client"), ("loss2pct", "network"),
    ("rtt10ms", "network"), ("20mbit", "server_network"),
    # the server's egress shaped, PgBouncer forwarding what came: never the client's path
    ("server20mbit", "server_network")])
def test_each_condition_names_its_cause(condition: str, limit: str) -> None:
    capture = ROOT / "captures" / "conditions" / f"seqscan-10k-pgbouncer-bridge-{condition}.pcap.gz"
    (relay,) = analyze(str(capture))["relays"]
    v = relay["verdict"]
    kf, kb = _kernel_legs(capture)
    at_once = forwarded_at_once(relay["forwarding"])
    assert v["limit"] == limit == component(_limit(kf), _limit(kb), at_once)
    if limit == "client" and condition.startswith("slowreader"):
        # seconds of a slow reader are the client leg's, not the relay's
        assert v["front_leg_ms"] > 1000 > 10 > v["relay_ms"]
        assert "the relay itself added" in v["summary"]
