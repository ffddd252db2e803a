"""A relay judged as a component (issue 24): from what limited each leg, whether the client,
the client's path, the pooler itself, the server's path or the server set the pace; and the
client's extra time split between what the relay did and what the client leg cost. Checked
against the lab's kernel figures for each sending socket."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_lab_conditions import tshark
from test_limits_corpus import KNOWN_DISAGREEMENTS

from pktflow.lab.kernel import LOSS_SHARE, verdict_agrees
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
    sent = int(sock.get("bytes_sent") or 0)  # type: ignore[call-overload]
    lost = int(sock.get("bytes_retrans_lost") or 0)  # type: ignore[call-overload]
    if limit == "sender" and sent and lost / sent >= LOSS_SHARE:
        # nothing waited unsent, and its lost bytes waited on their retransmission: a
        # request-response sender whose replies were lost waits on the timer (verdict_agrees
        # grants loss by the same share)
        return "loss"
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


@pytest.mark.skipif(shutil.which("tshark") is None,
                    reason="tshark is not installed (Debian package tshark)")
def test_a_reply_lost_past_the_capture_point_is_the_server_paths_time() -> None:
    """pg_dump through PgBouncer, 5% of what the pooler receives from the server dropped after
    the capture point (tcpdump in the pooler's namespace sees each reply before iptables drops
    it). A reply the pooler took only from the server's retransmission is dated by that copy
    (the query's `delivered`) and counted as the back leg's time, not the relay's."""
    capture = ROOT / "captures" / "conditions" / "pgdump-2k-pgbouncer-bridge-backloss5pct.pcap.gz"
    report = analyze(str(capture))
    (relay,) = report["relays"]
    queries = {c["id"]: c.get("queries") or [] for c in report["connections"]}
    resent = {int(f) for f in tshark(capture, "-Y", "tcp.srcport == 5432 && "
                                     "tcp.analysis.retransmission", "-T", "fields",
                                     "-e", "frame.number")}
    late = []
    for p in relay["queries"]:
        q = queries[p["back"]["connection"]][p["back"]["query_index"]]
        d = q.get("delivered")
        if d and d["last_response_s"] - q["last_response_s"] > 0.1:  # a timer's wait
            late.append((p, q, d))
            assert d["last_frame"] in resent and q["last_frame"] not in resent
            assert p["frames"]["back_last"] == d["last_frame"]
            assert p["relay_cost_ms"] < 1.0, p  # the pooler forwarded the copy at once
    assert len(late) >= 2, "replies lost past the capture point"
    waited_ms = sum(d["last_response_s"] - q["last_response_s"] for _, q, d in late) * 1e3
    assert relay["verdict"]["relay_ms"] < 0.05 * waited_ms
    assert relay["verdict"]["limit"] == "server_network"
    # the back leg's finding says so, with the longest wait and the copies taken
    (found,) = [f for f in report["findings"] if f["code"] == "late-copy"]
    back = late[0][0]["back"]["connection"]
    longest = max((d["last_response_s"] - q["last_response_s"], d["last_frame"])
                  for _, q, d in late)
    assert found["connection"] == back and longest[1] in found["frames"]
    assert f"at most {longest[0] * 1e3:,.1f} ms" in found["message"], found
