"""How a relay forwarded a response, from both legs side by side (core/src/relay/forwarding.rs):
each forwarded segment's delay after its back-leg twin, the bytes the relay held, and which
leg's window closed first. Checked on the lab's pooled recordings against what the lab imposed
and the kernel's own account of each sending socket."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pktflow.pipeline import analyze

ROOT = Path(__file__).resolve().parent.parent
CONDITIONS = ROOT / "captures" / "conditions"
POOLED = sorted(CONDITIONS.glob("*-pgbouncer-*.pcap.gz")) + sorted(
    (ROOT / "captures").glob("seqscan-10k-p*-*.pcap"))


def forwarding(capture: Path) -> dict[str, Any]:
    (relay,) = analyze(str(capture))["relays"]
    f: dict[str, Any] = relay["forwarding"]
    return f


def kernel(capture: Path) -> dict[str, str]:
    meta = json.loads(capture.with_suffix("").with_suffix(".pcap.json").read_text())
    return {s["direction"]: s["dominant_limit"] for s in meta["kernel"]["sockets"]}


@pytest.mark.parametrize("capture", POOLED, ids=lambda p: p.name.split(".")[0])
def test_each_pooled_recording_measures_its_bulk_response(capture: Path) -> None:
    f = forwarding(capture)
    if capture.name.startswith("seqscan"):
        assert f["responses"] == 1  # the seq scan's one bulk response
    else:
        assert f["responses"] > 1  # pg_dump's: its catalog queries' and its COPY's
    for q in (f["delay_ms"], f["held_bytes"]):
        assert 0 <= q["median"] <= q["p90"] <= q["max"], f
    assert 0 < f["span_s"] and 0 <= f["held_over_few_s"] <= f["span_s"] + 1e-6, f
    assert f["few_segments_bytes"] > 0


def test_a_shaped_server_path_leaves_the_relay_holding_little() -> None:
    """The server's egress shaped to 20 Mbit/s (the kernel: server->pooler network-limited,
    pooler->client sender-limited): the pooler forwards each segment as it comes. It held no
    more than a few segments most of the time, and no window closed."""
    capture = CONDITIONS / "seqscan-10k-pgbouncer-bridge-20mbit.pcap.gz"
    assert kernel(capture) == {"server->pooler": "network", "pooler->client": "sender"}
    f = forwarding(capture)
    assert f["held_bytes"]["median"] <= f["few_segments_bytes"], f
    assert f["held_over_few_s"] < 0.5 * f["span_s"], f
    assert f["first_closed"] is None and f["client_closed"] == f["relay_closed"] == 0


def test_a_pooler_fed_by_a_shaped_server_forwards_at_once() -> None:
    """The server's egress shaped to 20 Mbit/s: PgBouncer sends each segment on as it comes,
    holding next to nothing, so the relay follows the server's path (issue 31 rule 2)."""
    f = forwarding(CONDITIONS / "seqscan-10k-pgbouncer-bridge-server20mbit.pcap.gz")
    assert f["delay_ms"]["median"] < 1.0 and f["held_bytes"]["median"] <= f[
        "few_segments_bytes"], f
    assert f["held_over_few_s"] < 0.5 * f["span_s"], f


def test_a_short_snaplen_measures_what_the_whole_capture_does() -> None:
    """The bytes a snapshot length cut still count: the 128-byte cuts of two recordings give
    the forwarding of the recordings themselves."""
    for name in ("rtt10ms", "loss2pct"):
        whole = forwarding(CONDITIONS / f"seqscan-10k-pgbouncer-bridge-{name}.pcap.gz")
        cut = forwarding(CONDITIONS / f"seqscan-10k-pgbouncer-bridge-{name}-snap128.pcap.gz")
        for key in ("delay_ms", "held_bytes", "first_closed", "responses"):
            assert cut[key] == whole[key], (name, key)


def test_a_distant_client_delays_each_forwarded_segment_by_its_round_trips() -> None:
    """10 ms added on the client's link: the relay forwards as the client's ACKs let it, so a
    segment leaves a round trip or more after its twin came from the server, and the relay
    holds far more than a few segments; fed by a shaped server, it forwards at once."""
    far = forwarding(CONDITIONS / "seqscan-10k-pgbouncer-bridge-rtt10ms.pcap.gz")
    fed = forwarding(CONDITIONS / "seqscan-10k-pgbouncer-bridge-server20mbit.pcap.gz")
    assert far["delay_ms"]["median"] >= 10.0 > fed["delay_ms"]["median"], (far, fed)
    assert far["held_bytes"]["median"] > 10 * far["few_segments_bytes"], far
