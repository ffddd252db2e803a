"""Transfer dynamics end to end: crafted flows written as captures and analysed by the core
(the report's server_to_client direction and findings), and the reference captures.

The transfer measurements themselves (ACK causes, flights, RTT samples, the outstanding-segment
cap, memory bounds) have their unit tests beside the core (analyzer/core/src/transfer/tests.rs);
here the same flows go through the capture reader, the TCP engine and the Python report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tcpfeed import ACK, SYN, Flow, syn_options, write_capture

from pktflow.pipeline import analyze

CAPTURES = Path(__file__).resolve().parent.parent / "captures"
SEG = 8192
# segments the core remembers for an ACK (pktflow_core::transfer::MAX_OUTSTANDING)
MAX_OUTSTANDING = 4096


def run_report(f: Flow, tmp_path: Path) -> dict[str, Any]:
    return analyze(str(write_capture(tmp_path / "flow.pcap", f.packets)))


def run(f: Flow, tmp_path: Path) -> dict[str, Any]:
    """Analyse a crafted flow; return the report's server->client direction."""
    (conn,) = run_report(f, tmp_path)["connections"]
    assert conn["server"]["port"] == 5432
    return conn["directions"]["server_to_client"]


def bulk(f: Flow, rounds: int, *, per_ack: int = 2, gap: float = 0.00002, win: int = 4096,
         ack_delay: float = 0.00005, pause: float = 0.0) -> None:
    """The server sends `per_ack` segments, the client ACKs them: `rounds` times."""
    for _ in range(rounds):
        for i in range(per_ack):
            f.send(1, b"x" * SEG, dt=pause if i == 0 and pause else gap)
        f.ack(0, win=win, dt=ack_delay)


def test_loopback_pattern_two_segments_per_ack(tmp_path: Path) -> None:
    f = Flow()
    f.handshake()
    # each ACK 30 us after the data: the next write, 20 us on, does not answer it (an ACK a
    # reaction time or more after the data, answered within one, would: issue 31 rule 4)
    bulk(f, 40, ack_delay=0.00003)
    out = run(f, tmp_path)
    assert out["acks"]["bytes_acked_median"] == 2 * SEG
    assert out["acks"]["segments_per_ack_median"] == 2
    assert out["pattern"].startswith("1 ACK per 2 segments, 16,384 B")
    assert out["acks"]["causes"]["every_second_segment"] == 40
    assert out["flights"]["end_reasons"]["ack_arrived"] >= 38
    assert out["verdict"]["limit"] == "sender"


def test_mss_pattern_over_a_bridge(tmp_path: Path) -> None:
    f = Flow()
    f.handshake()
    for _ in range(30):
        f.send(1, b"y" * 1448)
        f.send(1, b"y" * 1448)
        f.ack(0)
    out = run(f, tmp_path)
    assert out["acks"]["bytes_acked_median"] == 2896 and out["segment_size_median"] == 1448


def test_delayed_ack_timer_and_quick_ack(tmp_path: Path) -> None:
    f = Flow()
    f.handshake()
    for _ in range(12):
        f.send(1, b"z" * 100)
        f.ack(0, dt=0.041)  # one segment acked 41 ms later: the timer fired
    for _ in range(3):
        f.send(1, b"z" * 100, dt=0.1)
        f.ack(0, dt=0.0001)  # one segment acked at once: quick-ack
    report = run_report(f, tmp_path)
    (conn,) = report["connections"]
    causes = conn["directions"]["server_to_client"]["acks"]["causes"]
    assert causes["delayed_timer"] == 12 and causes["quick_ack"] == 3
    (stalls,) = [x for x in report["findings"] if x["code"] == "delayed-ack-stalls"]
    assert stalls["connection"] == conn["id"]
    assert stalls["message"].startswith("server->client: 12 of 15 ACKs")


def test_window_update_and_duplicate_acks(tmp_path: Path) -> None:
    f = Flow()
    f.handshake()
    f.send(1, b"a" * 1000)
    f.ack(0, win=100)
    f.send(1, b"b" * 1000)
    f.ack(0, ack=f.seq[1] - 1000, win=100)  # same ack, same window, data outstanding
    f.ack(0, ack=f.seq[1] - 1000, win=100)
    f.ack(0, ack=f.seq[1] - 1000, win=900)  # same ack, larger window
    out = run(f, tmp_path)
    assert out["acks"]["causes"]["duplicate"] == 2
    assert out["acks"]["causes"]["window_update"] == 1


def test_zero_window_receiver_limited(tmp_path: Path) -> None:
    f = Flow()
    f.handshake(wscale_c=0, wscale_s=0)
    for _ in range(30):
        f.send(1, b"w" * SEG)
        f.send(1, b"w" * SEG)
        f.ack(0, win=0)  # the receiver's buffer is full
        f.ack(0, win=2 * SEG, dt=0.002)  # its application read: window update
    out = run(f, tmp_path)
    assert out["window"]["zero_window_periods"] == 30 and out["window"]["scaled"]
    assert out["window"]["zero_window_total_s"] == pytest.approx(0.06, rel=0.05)
    assert out["verdict"]["limit"] == "receiver_window"
    assert out["verdict"]["evidence_frames"]
    assert out["flights"]["end_reasons"]["window_full"] >= 25


@pytest.mark.parametrize("shut_s, receiver", [(0.002, "application"), (0.00003, "buffer")])
def test_a_reader_that_stops_is_told_from_a_small_buffer_by_how_long_it_shuts(
        tmp_path: Path, shut_s: float, receiver: str) -> None:
    """Zero windows of 2 ms each: the reading application stopped (a bigger buffer would only
    hold more unread). Of 30 us each: a small buffer the reader emptied at once, its window
    shutting between reads (issue 31 rule 6)."""
    f = Flow()
    f.handshake(wscale_c=0, wscale_s=0)
    for _ in range(30):
        f.send(1, b"w" * SEG)
        f.send(1, b"w" * SEG)
        f.ack(0, win=SEG // 2, dt=0.0005)  # a small window, filling
        f.ack(0, win=0)
        f.ack(0, win=2 * SEG, dt=shut_s)
    out = run(f, tmp_path)
    v = out["verdict"]
    assert v["limit"] == "receiver_window" and v["receiver"] == receiver, v["summary"]
    assert ("tcp_rmem" in v["summary"]) == (receiver == "buffer")


@pytest.mark.parametrize("wscale, ceiling, receiver", [(7, 256 << 10, "application"),
                                                      (6, 50 << 10, "buffer")])
def test_a_reader_paced_slower_than_the_data_is_told_from_a_small_buffer_by_its_ceiling(
        tmp_path: Path, wscale: int, ceiling: int, receiver: str) -> None:
    """A reader paced slower than the data reopens its window a segment at a time, 2 ms apart,
    and never lets it reach zero: after a window of 256 KiB, one of 8 KiB is far below its
    own ceiling, the reader fell behind (issue 31 rule 6). After one of 50 KiB, a window that
    never passed 64 KiB, it is a buffer set small, which runs low as often as it fills."""
    f = Flow()
    f.handshake(wscale_c=wscale)
    f.ack(0, win=ceiling >> wscale)
    for _ in range(30):
        f.send(1, b"w" * SEG)
        f.ack(0, win=SEG >> wscale, dt=0.002)
    out = run(f, tmp_path)
    v = out["verdict"]
    assert out["window"]["zero_window_periods"] == 0
    assert v["limit"] == "receiver_window" and v["receiver"] == receiver, v["summary"]
    low = out["limits"]["low_window_s"]
    assert low >= 0.25 * out["limits"]["seconds"]["receiver_window"]
    if receiver == "application":
        assert f"stayed under a quarter of its largest ({ceiling:,} bytes)" \
            in v["summary"] and "tcp_rmem" not in v["summary"]
        assert f"for {low * 1e3:,.1f} ms" in v["summary"]
    else:
        assert "tcp_rmem" in v["summary"]


def test_a_few_long_shuts_in_a_long_low_window_are_said_with_it(tmp_path: Path) -> None:
    """Three shuts of 3 ms each say the reader stopped; they are 9 ms of the 60-odd the window
    held the sender, so the sentence also says how long the window stayed low, with the
    figures the limits carry."""
    f = Flow()
    f.handshake()
    f.ack(0, win=(256 << 10) >> 7)
    for i in range(30):
        f.send(1, b"w" * SEG)
        if i % 10 == 9:
            f.ack(0, win=0, dt=0.0005)
            f.ack(0, win=SEG >> 7, dt=0.003)
        else:
            f.ack(0, win=SEG >> 7, dt=0.002)
    out = run(f, tmp_path)
    v, lim = out["verdict"], out["limits"]
    assert v["limit"] == "receiver_window" and v["receiver"] == "application", v["summary"]
    zero = out["window"]["zero_window_total_s"]
    assert out["window"]["zero_window_periods"] == 3 and lim["low_window_s"] > 2 * zero
    assert (f"the window fell to zero 3 time(s), {zero * 1e3:,.1f} ms in all, and stayed under "
            f"a quarter of its largest ({256 << 10:,} bytes) for {lim['low_window_s'] * 1e3:,.1f} "
            f"ms of the {lim['seconds']['receiver_window'] * 1e3:,.1f} ms it held the sender"
            ) in v["summary"]


def test_window_full_without_zero_window(tmp_path: Path) -> None:
    f = Flow()
    f.handshake(wscale_c=0, wscale_s=0)
    f.ack(0, win=2 * SEG)
    for _ in range(30):
        f.send(1, b"w" * SEG)
        f.send(1, b"w" * SEG)
        f.ack(0, win=2 * SEG, dt=0.002)  # window of exactly two segments: always full
    out = run(f, tmp_path)
    assert out["in_flight"]["max_ratio_to_window"] == 1.0
    assert out["verdict"]["limit"] == "receiver_window"


def test_ack_clocked_sender_is_latency_bound(tmp_path: Path) -> None:
    f = Flow()
    f.handshake()
    for _ in range(30):
        # full-sized segments (MSS 1460 less 12 bytes of timestamps) without PSH: more data
        # waited behind them, the sender stopped for the congestion window
        for i in range(6):
            f._emit(1, ACK, b"c" * 1448, dt=0.0001 if i == 0 else 0.00001)
            f.seq[1] = (f.seq[1] + 1448) & 0xFFFFFFFF
        f.ack(0, dt=0.020, win=60000)  # 20 ms round trips, wide-open window
    out = run(f, tmp_path)
    assert out["flights"]["end_reasons"]["cwnd_wait"] >= 28
    assert out["verdict"]["limit"] == "latency"
    assert out["verdict"]["shares"]["latency"] > 0.9
    assert out["rtt_ms"]["median"] == pytest.approx(20.0, abs=0.5)


def test_retransmissions_are_loss_limited_and_skip_rtt_samples(tmp_path: Path) -> None:
    f = Flow()
    f.handshake()
    for i in range(30):
        p = f.send(1, b"r" * SEG)
        f.send(1, b"r" * SEG)
        if i % 5 == 0:
            f.send(1, b"r" * SEG, seq=p[6], advance=False, dt=0.2)
        f.ack(0)
    out = run(f, tmp_path)
    assert out["verdict"]["limit"] == "loss"
    assert out["rtt_ms"]["samples"] == 60 - 6 * 2 + 6  # Karn: retransmitted data is skipped


def test_acks_lagging_behind_a_long_transfer(tmp_path: Path) -> None:
    """The queue of unacknowledged segments never empties for 3,000 ACKs (and is compacted
    as it goes): every ACK covers the two oldest of 10 outstanding segments, sent 10 ms
    earlier; each segment gives one RTT sample."""
    f = Flow()
    f.handshake()
    size = 1000
    for _ in range(10):
        f.send(1, b"q" * size, dt=0.001)
    base = f.seq[1] - 10 * size
    for i in range(1, 3001):
        f.send(1, b"q" * size, dt=0.004)
        f.send(1, b"q" * size, dt=0.001)
        f.ack(0, ack=base + 2 * i * size, win=60000, dt=0.0)
    out = run(f, tmp_path)
    assert out["acks"]["count"] == 3000
    assert out["acks"]["segments_per_ack_median"] == 2
    assert out["rtt_ms"]["samples"] == 6000
    assert out["rtt_ms"]["median"] == pytest.approx(25.0, abs=0.2)  # five 5 ms rounds back


def test_segments_remembered_for_an_ack_are_capped(tmp_path: Path) -> None:
    """5,000 segments then one ACK for all: the oldest beyond MAX_OUTSTANDING are forgotten,
    so the ACK counts the 4,096 remembered ones (the bytes are exact)."""
    f = Flow()
    f.handshake()
    for _ in range(5000):
        f.send(1, b"z" * 100, dt=0.00001)
    f.ack(0, win=60000, dt=0.001)
    out = run(f, tmp_path)
    assert out["acks"]["bytes_acked_median"] == 500_000
    assert out["acks"]["segments_per_ack_median"] == MAX_OUTSTANDING
    assert out["rtt_ms"]["samples"] == MAX_OUTSTANDING


def test_unknown_scale_is_labelled_and_only_zero_windows_count(tmp_path: Path) -> None:
    f = Flow()
    f.ack(0, win=100)  # no handshake: raw windows of 100 would mean 100 bytes
    bulk(f, 30, win=100, ack_delay=0.00003)
    out = run(f, tmp_path)
    assert out["window"]["scaled"] is False and out["window"]["scale_lower_bound"] >= 8
    assert out["verdict"]["limit"] == "sender"
    assert out["in_flight"]["max_ratio_to_window"] is None


def test_too_little_data_gives_no_verdict(tmp_path: Path) -> None:
    f = Flow()
    f.handshake()
    f.send(1, b"tiny")
    f.ack(0)
    out = run(f, tmp_path)
    assert out["verdict"]["limit"] == "none"


def test_many_one_segment_responses_are_no_bulk_transfer(tmp_path: Path) -> None:
    """A pooler's server connection under a storm: many requests, each answered by one
    segment. Enough bytes and segments to judge, but each send left at once: no transfer time
    to share out, so no limit is named (it once said "the sender, 0% of the transfer's
    0.0 ms")."""
    f = Flow()
    f.handshake()
    for _ in range(60):
        f.send(0, b"q" * 60, dt=0.002)
        f.send(1, b"r" * 1400, dt=0.0001)
        f.ack(0, dt=0.00005)
    out = run(f, tmp_path)
    assert out["payload_bytes"] >= 64 * 1024 and out["data_segments"] == 60
    assert out["limits"]["transfer_s"] == 0.0 and out["limits"]["turns"] == 59
    v = out["verdict"]
    assert (v["limit"], v["shares"]) == ("none", None)
    assert v["summary"].startswith("no bulk transfer to judge: 84,000 bytes in 60 segments")
    assert "60 sends a turn apart" in v["summary"]


@pytest.fixture(scope="module")
def direct() -> dict[str, Any]:
    return analyze(str(CAPTURES / "seqscan-10k-direct-loopback.pcap"))


@pytest.fixture(scope="module")
def pooled() -> dict[str, Any]:
    return analyze(str(CAPTURES / "seqscan-10k-pgbouncer-loopback.pcap"))


def test_study_direct_16384_bytes_per_ack(direct: dict[str, Any]) -> None:
    (conn,) = direct["connections"]
    s2c = conn["directions"]["server_to_client"]
    assert s2c["segment_size_median"] == 8192 and s2c["max_segment"] <= 65483
    assert s2c["acks"]["bytes_acked_median"] == 16384
    assert s2c["acks"]["segments_per_ack_median"] == 2
    assert s2c["verdict"]["limit"] == "sender"


def test_study_pgbouncer_resplits_and_paces(pooled: dict[str, Any]) -> None:
    legs = {c["server"]["port"]: c for c in pooled["connections"]}
    front = legs[6432]["directions"]["server_to_client"]
    back = legs[5432]["directions"]["server_to_client"]
    assert front["segment_size_median"] <= 4096  # PgBouncer's pkt_buf
    assert back["segment_size_median"] == 8192  # PostgreSQL's send buffer
    assert back["window"]["scaled"] is False  # the pooled leg began before the capture
    assert back["window"]["zero_window_periods"] >= 1  # PgBouncer stopped reading


def test_reference_bridge_capture_shows_the_mss_pattern() -> None:
    # The recorded counterpart of the crafted flow above: MTU 1500 between namespaces.
    report = analyze(str(CAPTURES / "seqscan-10k-direct-bridge.pcap"))
    (conn,) = report["connections"]
    s2c = conn["directions"]["server_to_client"]
    assert s2c["max_segment"] == s2c["segment_size_median"] == 1448  # MSS 1460 - timestamps
    assert s2c["acks"]["segments_per_ack_median"] == 2
    assert s2c["acks"]["bytes_acked_median"] == 2 * 1448
    assert s2c["pattern"].startswith("1 ACK per 2 segments, 2,896 B")


@pytest.mark.parametrize("path", sorted(CAPTURES.glob("*.pcap")), ids=lambda p: p.name)
def test_verdict_evidence_lists_each_frame_once(path: Path) -> None:
    """The pooled 20k dump's server leg had its most bytes in flight at its last segment, and
    the evidence read "13, 1583, 1583"."""
    for conn in analyze(str(path))["connections"]:
        for name, d in conn["directions"].items():
            frames = (d.get("verdict") or {}).get("evidence_frames") or []
            assert len(frames) == len(set(frames)), (conn["id"], name, frames)


def test_a_capture_beside_the_receiver_is_said_in_its_verdict(tmp_path: Path) -> None:
    """Captured at the client: the SYN-ACK took a 10 ms round trip, the ACK came at once; the
    server's data are seen from the far end of the path."""
    f = Flow()
    f._emit(0, SYN, options=syn_options(), ack=0, win=64240)
    f.seq[0] += 1
    f._emit(1, SYN | ACK, options=syn_options(), win=65160, dt=0.010)
    f.seq[1] += 1
    f._emit(0, ACK, dt=0.0001)
    bulk(f, 40)
    (conn,) = run_report(f, tmp_path)["connections"]
    assert conn["capture_point"]["position"] == "client"
    assert "Captured beside the receiver" in conn["directions"]["server_to_client"]["verdict"][
        "summary"]
