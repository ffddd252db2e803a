"""Round trips of a conversation (issue 24 item 4): a client running its statements one after
another pays a round trip each. Crafted conversations at a 10 ms and a 0.1 ms round trip,
captured at the server (the lab's pg_dump at 10 ms: 65 queries, 10.2 ms each, 66% of 1.0 s;
unshaped 3% of 0.3 s, README)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
from craft import tcp_segment
from test_capture_point import write

from pktflow.pipeline import analyze
from pktflow.transfer.round_trips import summary


def msg(t: bytes, body: bytes) -> bytes:
    return t + struct.pack("!I", len(body) + 4) + body


def conversation(rtt: float, queries: int, rows: int = 1,
                 work: float = 0.002) -> list[tuple[float, bytes]]:
    """A handshake and `queries` simple queries, each answered by the server `work` seconds
    later with `rows` 100-byte DataRows; the client sends the next a round trip after the
    answer (the capture is at the server)."""
    c = {"src": "10.0.0.1", "dst": "10.0.0.2", "sport": 40000, "dport": 5432}
    s = {"src": "10.0.0.2", "dst": "10.0.0.1", "sport": 5432, "dport": 40000}
    t = 1000.0
    pkts = [(t, tcp_segment(**c, seq=100, ack=0, flags="S")),
            (t + 0.00005, tcp_segment(**s, seq=500, ack=101, flags="SA")),
            (t + 0.00005 + rtt, tcp_segment(**c, seq=101, ack=501, flags="A"))]
    cseq, sseq = 101, 501
    t = pkts[-1][0] + 0.001
    body = struct.pack("!I", 196608) + b"user\x00postgres\x00\x00"
    startup = struct.pack("!I", len(body) + 4) + body
    ready = msg(b"R", struct.pack("!I", 0)) + msg(b"Z", b"I")
    pkts += [(t, tcp_segment(startup, **c, seq=cseq, ack=sseq)),
             (t + 0.001, tcp_segment(ready, **s, seq=sseq, ack=cseq + len(startup)))]
    cseq, sseq = cseq + len(startup), sseq + len(ready)
    t += 0.001 + rtt
    q = msg(b"Q", b"SELECT x FROM t\x00")
    row = msg(b"D", struct.pack("!hI", 1, 94) + b"x" * 94)
    answer = (msg(b"T", struct.pack("!h", 1) + b"x\x00" + bytes(18)) + row * rows
              + msg(b"C", b"SELECT %d\x00" % rows) + msg(b"Z", b"I"))
    for _ in range(queries):
        pkts.append((t, tcp_segment(q, **c, seq=cseq, ack=sseq)))
        cseq += len(q)
        t += work
        pkts.append((t, tcp_segment(answer, **s, seq=sseq, ack=cseq)))
        sseq += len(answer)
        t += rtt  # the client's ACK and next query come a round trip later
    return pkts


def test_sixty_queries_at_10ms_are_mostly_round_trips(tmp_path: Path) -> None:
    report = analyze(str(write(tmp_path / "c.pcap", conversation(0.010, 60))))
    (conn,) = report["connections"]
    rt = conn["round_trips"]
    assert (rt["queries"], rt["rtt_from"]) == (60, "handshake")
    assert rt["rtt_ms"] == pytest.approx(10.05, abs=0.01)
    assert rt["round_trips_ms"] == pytest.approx(60 * rt["rtt_ms"], abs=0.01)
    assert rt["share"] > 0.8  # 10 ms of each 12
    assert f"{rt['share']:.0%} of the" in rt["summary"]
    (f,) = [f for f in report["findings"] if f["code"] == "round-trips"]
    assert "60 queries ran one after another" in f["message"] and f["frames"]


def test_the_same_at_a_tenth_of_a_millisecond_says_nothing(tmp_path: Path) -> None:
    report = analyze(str(write(tmp_path / "c.pcap", conversation(0.0001, 60))))
    (conn,) = report["connections"]
    assert conn["round_trips"]["share"] < 0.5
    assert not [f for f in report["findings"] if f["code"] == "round-trips"]


def _rt(**numbers: Any) -> Any:
    base = {"queries": 5, "rtt_ms": 8.0, "rtt_from": "rtt samples", "round_trips_ms": 40.0,
            "span_ms": 42.0, "responses_ms": 5.0, "bulk_ms": 0.0, "share": 0.952}
    return {**base, **numbers}


def test_the_summary_says_the_numbers_it_is_given() -> None:
    """(The numbers are the core's: report/round_trips.rs, with its own tests.)"""
    said = summary(_rt())
    assert said.startswith("5 queries one after another, each a round trip of 8.000 ms "
                           "(rtt samples): 40.0 ms, 95% of the 42.0 ms")
    assert "unknown" in summary(_rt(rtt_ms=None, rtt_from=None, round_trips_ms=None, share=None))
    assert "24.0 ms from the first" in summary(_rt(round_trips_ms=24.0, share=None, span_ms=0.0))


def test_the_answer_leads_with_the_round_trips(tmp_path: Path) -> None:
    """When the round trips were most of a conversation's time, the text report's first
    lines say so, with the numbers of its round_trips; at 0.1 ms they do not."""
    import io

    from pktflow.cli import Env, main

    def text(rtt: float) -> str:
        out = io.StringIO()
        path = write(tmp_path / f"c{rtt}.pcap", conversation(rtt, 60))
        assert main(["analyze", str(path)], Env(stdout=out, stderr=io.StringIO(),
                                                width=200)) == 0
        return out.getvalue()

    rt = analyze(str(write(tmp_path / "c.pcap", conversation(0.010, 60))))[
        "connections"][0]["round_trips"]
    lines = text(0.010).splitlines()
    assert lines[0] == "What limited it"
    assert lines[1].startswith(f"c1: 60 queries one after another, round trips "
                               f"{rt['share']:.0%} of the time (60 x {rt['rtt_ms']:,.3f} ms = "
                               f"{rt['round_trips_ms']:,.1f} ms of {rt['span_ms']:,.1f} ms")
    line = " ".join(" ".join(lines[1:4]).split())  # a long line wraps at the width
    assert "Look at fewer round trips" in line
    assert (f"with the client next to the server it would take about "
            f"{rt['round_trips_ms']:,.0f} ms less, with its queries pipelined about "
            f"{59 * rt['rtt_ms']:,.0f} ms less") in line
    assert "queries one after another" not in text(0.0001)
