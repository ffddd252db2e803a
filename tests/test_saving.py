"""What a transfer, a conversation and a relay would save without their limits (issue 35),
checked against the lab's own pairs: the same select recorded with a condition and without it
(captures/conditions/: `-unshaped` is the baseline). The measured saving is the difference in
the client's response time; the predicted one comes from each recording's report alone
(pktflow.transfer.saving_pairs). bench/savings.py runs the same check on fresh recordings.
"""

from __future__ import annotations

import io
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from pktflow.cli import Env, main
from pktflow.pipeline import analyze
from pktflow.transfer.saving import MIN_TRANSFER_S, saving
from pktflow.transfer.saving_pairs import client_connection, pair, within

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "captures" / "conditions"
CAPTURES = ROOT / "captures"


@cache
def report(name: str) -> dict[str, Any]:
    return analyze(str(CORPUS / f"{name}.pcap.gz"))


# condition's recording -> (the limit its client-facing transfer names, the measured saving in
# ms: the client's time in its queries with the condition less the unshaped one's, as
# pktflow.transfer.saving_pairs measures it)
PAIRS = {
    "seqscan-10k-direct-bridge-rcvbuf16384": ("receiver_window", 18.7),
    "seqscan-10k-direct-bridge-rtt10ms": ("latency", 64.3),
    "seqscan-10k-direct-bridge-loss2pct": ("loss", 250.8),
    "seqscan-10k-direct-bridge-slowreader200000": ("receiver_window", 5169.0),
    "seqscan-10k-pgbouncer-bridge-rcvbuf16384": ("receiver_window", 52.9),
    "seqscan-10k-pgbouncer-bridge-rtt2ms": ("latency", 47.5),
    # the relay had nothing more to send: the server leg's shaper is the client's limit
    "seqscan-10k-pgbouncer-bridge-20mbit": ("sender", 419.3),
}


def baseline(name: str) -> str:
    return name.rsplit("-", 1)[0] + "-unshaped"


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_predicted_saving_is_within_the_measured_one(name: str) -> None:
    limit, measured_ms = PAIRS[name]
    rep = report(name)
    conn = client_connection(rep)
    assert conn is not None
    assert conn["directions"]["server_to_client"]["verdict"]["limit"] == limit
    got = pair(rep, report(baseline(name)))
    assert got is not None
    predicted, measured = got
    # the measure itself: the recordings' response times, read from the reports
    assert measured * 1e3 == pytest.approx(measured_ms, abs=0.1)
    assert within(predicted, measured), (
        f"{name}: predicted {predicted * 1e3:.1f} ms, measured {measured * 1e3:.1f} ms")


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_a_saving_leaves_the_transfer_some_time(name: str) -> None:
    """A limit removed takes its own time away, not the transfer's: the rest of it still
    moves the bytes, and a saving says what it removed."""
    d = client_connection(report(name))
    assert d is not None
    s2c = d["directions"]["server_to_client"]
    v, took = s2c["verdict"], s2c["limits"]["transfer_s"]
    assert v["saving_model"] == "remove-booked-time"
    assert v["without"]
    assert 0.0 <= v["saving_s"] < took
    if v["limit"] == "sender":
        assert v["saving_s"] == 0.0
        assert "sender was the pace" in v["without"]


def test_the_answer_says_the_saving_in_words() -> None:
    out = io.StringIO()
    path = CORPUS / "seqscan-10k-direct-bridge-rcvbuf16384.pcap.gz"
    assert main(["analyze", str(path)], Env(stdout=out, stderr=io.StringIO(), width=300)) == 0
    answer = out.getvalue().split("Findings")[0].split("No findings")[0]
    v = report("seqscan-10k-direct-bridge-rcvbuf16384")["connections"][0]["directions"][
        "server_to_client"]
    took, saved = v["limits"]["transfer_s"], v["verdict"]["saving_s"]
    assert (f"without the receiver's small buffer this transfer would take about "
            f"{(took - saved) * 1e3:,.0f} ms instead of {took * 1e3:,.0f} ms") in answer


def _verdict(limit: str, summary: str) -> Any:
    return {"limit": limit, "shares": None, "summary": summary, "evidence_frames": []}


def _transfer(transfer_s: float, **seconds: float) -> Any:
    secs = {k: 0.0 for k in ("receiver_window", "network", "loss", "latency", "sender")}
    secs |= seconds
    return {"data_bytes": 1_000_000, "segments": 700,
            "limits": {"transfer_s": transfer_s, "seconds": secs, "after_loss_s": 0.0}}


def test_too_short_a_transfer_has_no_saving_and_says_why() -> None:
    t = _transfer(MIN_TRANSFER_S / 2, receiver_window=MIN_TRANSFER_S / 2)
    s = saving(t, _verdict("receiver_window", ""))
    assert s.saving_s is None and "too short" in s.without


def test_no_limit_has_no_saving() -> None:
    s = saving(_transfer(0.5), _verdict("none", "too little data to judge"))
    assert s.saving_s is None and "too little data" in s.without


def test_the_conversation_saves_its_round_trips() -> None:
    """pg_dump's catalogue queries: with the client next to the server each query's round trip
    goes; pipelined, all but one."""
    rep = analyze(str(CAPTURES / "pgdump-20k-direct-loopback.pcap"))
    rt = next(c["round_trips"] for c in rep["connections"] if c.get("round_trips"))
    assert rt["queries"] >= 10
    assert rt["saving_s"] == pytest.approx(rt["round_trips_ms"] / 1e3)
    assert rt["pipelined_saving_s"] == pytest.approx((rt["queries"] - 1) * rt["rtt_ms"] / 1e3)
    assert rt["saving_s"] < rt["span_ms"] / 1e3
    assert "next to the server" in rt["without"]


def test_going_direct_saves_what_the_relay_added() -> None:
    rep = report("seqscan-10k-pgbouncer-bridge-rcvbuf16384")
    (relay,) = rep["relays"]
    v = relay["verdict"]
    # the relay's own time, not the client leg's drain: that would hold the server directly
    assert v["front_leg_ms"] > 10 * v["relay_ms"]
    assert v["saving_s"] * 1e3 == pytest.approx(v["relay_ms"], abs=0.01)
    assert v["without"].startswith("going direct")


def test_the_answer_says_what_going_direct_would_save() -> None:
    name = "seqscan-10k-pgbouncer-bridge-rcvbuf16384"
    out = io.StringIO()
    path = CORPUS / f"{name}.pcap.gz"
    assert main(["analyze", str(path)], Env(stdout=out, stderr=io.StringIO(), width=300)) == 0
    (relay,) = report(name)["relays"]
    saved = relay["verdict"]["saving_s"]
    assert saved > 0
    assert f"going direct would save about {saved * 1e3:,.2f} ms" in out.getvalue()


def test_each_part_of_a_comparison_says_what_would_close_it() -> None:
    """compare: a 16 KiB client buffer behind PgBouncer against the unshaped direct select.
    Each part names its change on the slower side and what it would save there: the server
    leg's transfer by its verdict's saving (at most the gap), the relay by going direct (all
    it added), the client leg by keeping up (all its time)."""
    from pktflow.report.compare import compare

    a = report("seqscan-10k-direct-bridge-unshaped")
    b = report("seqscan-10k-pgbouncer-bridge-rcvbuf16384")
    parts = {p["part"]: p for p in compare(a, b)["summary"]["parts"]}
    back = next(c for c in b["connections"] if c.get("role") == "back")
    model_ms = back["directions"]["server_to_client"]["verdict"]["saving_s"] * 1e3
    transfer = parts["server_transfer"]
    assert transfer["ms"] > 0 and transfer["close_by"].startswith("B's server leg")
    assert transfer["saving_ms"] == pytest.approx(min(transfer["ms"], model_ms), abs=0.002)
    assert parts["relay"]["close_by"].startswith("B going direct")
    assert parts["relay"]["saving_ms"] == parts["relay"]["b_ms"]
    assert parts["client_leg"]["saving_ms"] == parts["client_leg"]["b_ms"] > 0
    wait = parts["server_wait"]  # faster in B: A's to close
    assert wait["ms"] < 0 and wait["close_by"].startswith("A's")
    assert wait["saving_ms"] == pytest.approx(-wait["ms"])


def test_the_client_time_counts_the_waits_between_queries() -> None:
    """pg_dump's wall time: a response whose last segment was lost reaches the client a
    retransmission timeout after the capture saw it, and its next query comes only then. The
    capture beside the server adds the round trip of the first request and the last byte."""
    from pktflow.transfer.saving_pairs import client_time_s

    def query(sent: float, last: float) -> dict[str, Any]:
        return {"sent_s": sent, "last_response_s": last}

    conn = {"queries": [query(0.0, 0.001), query(0.207, 0.208), query(0.2085, 0.3)],
            "capture_point": {"position": "server"},
            "directions": {"client_to_server": {
                "handshake_ms": {"syn_to_synack": 0.02, "synack_to_ack": 0.08}}}}
    assert client_time_s(conn) == pytest.approx(0.3 + 0.0001)
    conn["capture_point"] = {"position": "client"}
    assert client_time_s(conn) == pytest.approx(0.3)


def test_a_conversation_through_a_relay_saves_both_legs_round_trips() -> None:
    """pg_dump through PgBouncer: each of its queries crosses the client leg and then the
    server leg, one after another, so with the client next to the server the client's time
    loses both round trips per query; the server leg's own count would add the pooler's own
    statements (its SET at login), which the client does not wait for."""
    from pktflow.transfer.saving_pairs import predicted_s, removed, transfer_s

    rep = analyze(str(CAPTURES / "pgdump-20k-pgbouncer-loopback.pcap"))
    conn = client_connection(rep)
    assert conn is not None and conn["role"] == "front"
    (relay,) = rep["relays"]
    (back,) = [c for c in rep["connections"] if c["id"] in relay["back_connections"]]
    front_rt, back_rt = conn["round_trips"], back["round_trips"]
    assert back_rt["queries"] > front_rt["queries"] >= 10
    both = front_rt["saving_s"] + front_rt["queries"] * back_rt["rtt_ms"] / 1e3
    conversation = predicted_s(rep, conn) - transfer_s(rep, conn, removed(rep, conn))
    assert conversation == pytest.approx(both, abs=1e-9)
    assert conversation > front_rt["saving_s"] + 1e-3


def test_the_baseline_loses_the_same_limit_not_its_own_verdicts() -> None:
    """A pair's prediction is one what-if in both recordings: the limit the condition's run
    names, less what the baseline would save without that same limit. On a path of
    microseconds the baseline's verdict flips between the sender and round trips (the hosts'
    ACK pace, there in both runs alike); the prediction must not flip with it."""
    import copy

    name = "seqscan-10k-direct-bridge-rcvbuf16384"
    cond, base = report(name), report(baseline(name))
    b = client_connection(base)
    assert b is not None
    bv = b["directions"]["server_to_client"]["verdict"]
    assert bv["limit"] in ("sender", "latency")
    got = pair(cond, base)
    assert got is not None
    flipped = copy.deepcopy({"connections": list(base["connections"]), "relays": base["relays"]})
    fb = client_connection(flipped)
    assert fb is not None
    # the baseline's verdict flipped to the other of the two
    other = ({"limit": "latency", "saving_s": 0.005} if bv["limit"] == "sender"
             else {"limit": "sender", "saving_s": 0.0})
    fb["directions"]["server_to_client"]["verdict"] |= other
    again = pair(cond, flipped)
    assert again is not None
    assert again[0] == pytest.approx(got[0], abs=1e-9)
    # and what the baseline loses is its window's time, the limit the condition names
    c = client_connection(cond)
    assert c is not None
    c_saving = c["directions"]["server_to_client"]["verdict"]["saving_s"]
    b_window = b["directions"]["server_to_client"]["limits"]["seconds"]["receiver_window"]
    assert got[0] == pytest.approx(c_saving - b_window, abs=2e-6)


def test_the_baseline_loses_the_same_window_as_the_condition() -> None:
    """Whose window it was is part of the what-if: a round trip near zero takes a small
    buffer's waits with it, not a stopped reader's. The pair removes what the condition's
    verdict says from both recordings, whatever the baseline's own sub-class: the unshaped
    pooled psql falls behind the data (`application`), the same reader the 2 ms run has."""
    import copy

    name = "seqscan-10k-pgbouncer-bridge-rtt2ms"
    cond, base = report(name), report(baseline(name))
    c, b = client_connection(cond), client_connection(base)
    assert c is not None and b is not None
    assert c["directions"]["server_to_client"]["verdict"]["limit"] == "latency"
    bv = b["directions"]["server_to_client"]["verdict"]
    assert bv["limit"] == "receiver_window" and bv["receiver"] == "application"
    got = pair(cond, base)
    assert got is not None
    flipped = copy.deepcopy({"connections": list(base["connections"]), "relays": base["relays"]})
    fb = client_connection(flipped)
    assert fb is not None
    fb["directions"]["server_to_client"]["verdict"]["receiver"] = "buffer"
    again = pair(cond, flipped)
    assert again is not None
    assert again[0] == pytest.approx(got[0], abs=1e-9)
    # the condition's what-if in the baseline: its round trips and its window's waits
    secs = b["directions"]["server_to_client"]["limits"]["seconds"]
    c_saving = c["directions"]["server_to_client"]["verdict"]["saving_s"]
    assert got[0] == pytest.approx(
        c_saving - secs["latency"] - secs["receiver_window"]
        + conversation(c, cond) - conversation(b, base), abs=2e-6)


def conversation(conn: dict[str, Any], rep: dict[str, Any]) -> float:
    from pktflow.transfer.saving_pairs import back_legs, conversation_s

    return conversation_s(conn, back_legs(rep, conn))


def _relay_judgements(name: str, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The RelayJudgements the core hands the relay judge for a corpus capture."""
    import pktflow.pipeline as pipeline
    from pktflow.relay.measure import RelayJudge

    seen: list[Any] = []

    class Keep(RelayJudge):
        def __call__(self, j: Any) -> Any:
            seen.append(j)
            return super().__call__(j)

    monkeypatch.setattr(pipeline, "RelayJudge", Keep)
    analyze(str(CORPUS / f"{name}.pcap.gz"))
    return seen


def test_a_small_pooler_buffer_saves_the_time_its_window_held_the_server(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The pooler's tcp_rmem capped at 16 KiB: its window on the server leg never passed
    64 KiB (autotuning takes a buffer that keeps up past it). Where the relay set the pace
    with it (the client leg waiting on the relay, the pooler's window holding the server),
    its verdict's saving is what a buffer that grows would give back: the seconds that window
    held the server, at most the seconds the client leg waited on the relay. An autotuned
    pooler's window is no such buffer and keeps the saving of going direct."""
    import copy

    from pktflow.relay.measure import BIGGER_BUFFER, CAPPED_WINDOW, capped_buffer_s, verdict_json

    (j,) = _relay_judgements("seqscan-10k-pgbouncer-bridge-poolerrcvbuf16384", monkeypatch)
    (back,) = [b for b in j["backs"] if b["verdict"]["limit"] == "receiver_window"]
    assert back["window_ceiling"] < CAPPED_WINDOW
    held = back["limits"]["seconds"]["receiver_window"]
    waited = max(f["limits"]["seconds"]["sender"] for f in j["fronts"])
    assert capped_buffer_s(j) == pytest.approx(min(held, waited))
    # the recorded run's client leg was held by the client's window (the relay: "client");
    # the same legs with the client leg waiting on the relay are the pooler's pace
    paced = copy.deepcopy(j)
    paced["legs"] = {"front": "sender", "back": "receiver_window"}
    for f in paced["fronts"]:
        f["limits"]["seconds"]["sender"] = f["limits"]["transfer_s"]
    v = verdict_json(paced, "")
    assert v["limit"] == "pooler"
    assert v["saving_s"] == pytest.approx(held, abs=1e-6)
    assert v["without"].startswith(BIGGER_BUFFER)
    # and its setting is that buffer, with the window it compared, not the forwarding unit
    setting = v["setting"] or ""
    assert setting.startswith("the pooler's own receive buffer"), setting
    assert f"its window at most {back['window_ceiling']:,} bytes" in setting
    assert "tcp_socket_buffer" in setting and "consistent with" not in setting
    # autotuned: the unshaped run's pooler window is past 64 KiB, and going direct stays
    (u,) = _relay_judgements("seqscan-10k-pgbouncer-bridge-unshaped", monkeypatch)
    assert capped_buffer_s(u) is None
    paced = copy.deepcopy(u)
    paced["legs"] = {"front": "sender", "back": "receiver_window"}
    v = verdict_json(paced, "")
    assert v["without"].startswith("going direct")
    assert "own receive buffer" not in (v["setting"] or "")


def test_a_mixed_verdict_removes_both_its_limits_whichever_it_names() -> None:
    """Two limits within a few percent of each other: which one a verdict names is a toss
    (r4's pooled 1 MB select at 10 ms: the client's window 36.6 ms, round trips 34.9 ms, and
    the window named: 37 ms predicted, 70 ms measured). The pair's what-if removes both, so the
    prediction is the same whichever is named; a sender mixed with round trips removes those."""
    import copy

    from pktflow.transfer.saving_pairs import removed

    name = "seqscan-10k-pgbouncer-bridge-rtt10ms"
    cond, base = report(name), report(baseline(name))

    def named(limit: str, mixed: str | None) -> tuple[float, float]:
        c = copy.deepcopy({"connections": list(cond["connections"]), "relays": cond["relays"]})
        conn = client_connection(c)
        assert conn is not None
        v = conn["directions"]["server_to_client"]["verdict"]
        v |= {"limit": limit, "mixed_with": mixed}
        got = pair(c, base)
        assert got is not None
        return got

    window_first = named("receiver_window", "latency")
    latency_first = named("latency", "receiver_window")
    assert window_first[0] == pytest.approx(latency_first[0], abs=1e-9)
    conn = client_connection(cond)
    assert conn is not None
    secs = conn["directions"]["server_to_client"]["limits"]["seconds"]
    assert secs["receiver_window"] > 0.005 and secs["latency"] > 0.005
    # both go, in each run: the window's seconds and the round trips'
    b = client_connection(base)
    assert b is not None
    bsecs = b["directions"]["server_to_client"]["limits"]["seconds"]
    both = (secs["receiver_window"] + secs["latency"]) - (bsecs["receiver_window"]
                                                          + bsecs["latency"])
    conversations = window_first[0] - both
    assert abs(conversations) < 0.002  # one query: no conversation to speak of
    # a sender mixed with round trips: the round trips' what-if, as if they were named
    # (each saving is rounded to the microsecond, the two sums in their own order)
    assert named("sender", "latency")[0] == pytest.approx(named("latency", None)[0], abs=2e-6)
    assert removed(cond, conn).mixed_with is None  # the recorded verdict is not mixed


def test_a_pooler_waiting_on_its_client_hands_the_what_if_to_the_clients_path() -> None:
    """A 19 MB select through PgBouncer at 10 ms to the client: the client leg is the pooler's
    pace (sender), and the pooler's window held the server while it waited on its client
    (receiver sub-class application). The client's path set the pace through the relay (issue
    31's rule 2), so the pair's what-if removes the client leg's round trips (r10-r13: 110-147
    ms measured; the pooler's own buffer predicted nothing). A small pooler buffer (a window
    that never grew) stays the relay's own."""
    from pktflow.transfer.saving_pairs import Removed, removed

    def rep(receiver: str) -> tuple[dict[str, Any], dict[str, Any]]:
        front = {"id": "c1", "role": "front", "queries": [{}], "directions": {
            "server_to_client": {"payload_bytes": 19_000_000,
                                 "verdict": {"limit": "sender", "mixed_with": None}}}}
        back = {"id": "c2", "role": "back", "queries": [{}], "directions": {
            "server_to_client": {"payload_bytes": 19_000_000, "verdict": {
                "limit": "receiver_window", "mixed_with": None, "receiver": receiver}}}}
        return ({"connections": [front, back],
                 "relays": [{"front_connections": ["c1"], "back_connections": ["c2"]}]}, front)

    assert removed(*rep("application")) == Removed("client", "latency")
    assert removed(*rep("buffer")) == Removed("relay", "receiver_window")
