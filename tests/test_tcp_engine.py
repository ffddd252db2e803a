"""The TCP engine, fed packet tuples directly (it is sans-IO)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from tcpfeed import Flow, RecordingSink

from pktflow.tcp.engine import TcpEngine
from pktflow.tcp.observe import FILLS_HOLE, KEEPALIVE, NEW, OUT_OF_ORDER, RETRANS


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple] = []  # type: ignore[type-arg]
        self.info = None

    def on_packet(self, *args: object) -> None:
        self.calls.append(args)

    def finish(self, info: object) -> None:
        self.info = info


def run(packets: list[tuple]) -> tuple[TcpEngine, list[RecordingSink], list[Recorder]]:  # type: ignore[type-arg]
    sinks: list[RecordingSink] = []
    recs: list[Recorder] = []

    def sink(conn: object) -> RecordingSink:
        sinks.append(RecordingSink())
        return sinks[-1]

    def obs(conn: object) -> list[Recorder]:
        recs.append(Recorder())
        return [recs[-1]]

    eng = TcpEngine(sink_factory=sink, observer_factory=obs)
    for p in packets:
        eng.feed(p)
    eng.finish()
    return eng, sinks, recs


def d(eng: TcpEngine, i: int = 0, side: str = "server_to_client") -> dict:  # type: ignore[type-arg]
    return eng.connections[i].to_json(0.0)["directions"][side]


def test_handshake_options_and_scaled_window() -> None:
    f = Flow()
    f.handshake(wscale_c=7, wscale_s=9)
    f.send(0, b"Q" * 10, win=100)
    f.send(1, b"x" * 3000, win=50)
    f.fin(0)
    f.fin(1)
    eng, sinks, recs = run(f.packets)
    conn = eng.connections[0].to_json(0.0)
    assert conn["handshake_seen"] and conn["closed_by"] == "fin"
    c2s = conn["directions"]["client_to_server"]
    assert (c2s["mss"], c2s["window_scale"], c2s["window_scale_known"]) == (1460, 7, True)
    assert conn["directions"]["server_to_client"]["window_scale"] == 9
    # the data packets' windows reach observers scaled by the sender's own shift
    wins = [c[6] for c in recs[0].calls if c[4] > c[3]]
    assert wins == [100 << 7, 50 << 9]
    assert bytes(sinks[0].data[0]) == b"Q" * 10 and len(sinks[0].data[1]) == 3000


def test_retransmission_counted_once_delivered_once() -> None:
    f = Flow()
    f.handshake()
    p = f.send(1, b"a" * 100)
    f.send(1, b"a" * 100, seq=p[6], advance=False, dt=0.3)
    f.send(1, b"b" * 50)
    eng, sinks, recs = run(f.packets)
    s2c = d(eng)
    assert s2c["retransmitted_segments"] == 1 and s2c["retransmitted_bytes"] == 100
    assert s2c["payload_bytes"] == 150 and s2c["data_segments"] == 2
    assert bytes(sinks[0].data[1]) == b"a" * 100 + b"b" * 50
    kinds = [c[8] for c in recs[0].calls if c[0] == 1 and c[4] > c[3]]
    assert kinds == [NEW, RETRANS, NEW]


def test_reordering_within_3ms_is_out_of_order_and_reassembled() -> None:
    f = Flow()
    f.handshake()
    base = f.seq[1]
    f.send(1, b"2" * 10, seq=base + 10, advance=False)
    f.send(1, b"1" * 10, seq=base, advance=False, dt=0.001)
    f.seq[1] = base + 20
    f.send(1, b"3" * 10)
    eng, sinks, recs = run(f.packets)
    s2c = d(eng)
    assert s2c["out_of_order_segments"] == 1 and s2c["retransmitted_segments"] == 0
    assert s2c["gaps"] == 0 and s2c["payload_bytes"] == 30
    assert bytes(sinks[0].data[1]) == b"1" * 10 + b"2" * 10 + b"3" * 10
    kinds = [c[8] for c in recs[0].calls if c[0] == 1 and c[4] > c[3]]
    assert kinds == [NEW | OUT_OF_ORDER, FILLS_HOLE, NEW]


def test_capture_gap_acked_by_receiver() -> None:
    f = Flow()
    f.handshake()
    f.send(1, b"a" * 100)
    f.seq[1] += 200  # 200 bytes the capture never saw
    f.send(1, b"c" * 100)
    f.ack(0)
    eng, sinks, _ = run(f.packets)
    s2c = d(eng)
    assert (s2c["gaps"], s2c["missing_bytes"]) == (1, 200)
    assert sinks[0].gaps == [(1, 100, 200)]
    assert bytes(sinks[0].data[1][300:]) == b"c" * 100


def test_tail_gap_at_end_of_capture() -> None:
    f = Flow()
    f.handshake()
    f.send(1, b"a" * 100)
    f.ack(0, ack=f.seq[1] + 400)
    eng, sinks, _ = run(f.packets)
    assert (d(eng)["gaps"], d(eng)["missing_bytes"]) == (1, 400)


def test_sequence_wraparound() -> None:
    f = Flow(isn_s=0xFFFFFFFF - 150)
    f.handshake()
    for i in range(5):
        f.send(1, bytes([65 + i]) * 100)
        f.ack(0)
    eng, sinks, recs = run(f.packets)
    s2c = d(eng)
    assert s2c["payload_bytes"] == 500 and s2c["retransmitted_segments"] == 0
    assert s2c["gaps"] == 0
    assert bytes(sinks[0].data[1]) == b"".join(bytes([65 + i]) * 100 for i in range(5))
    assert [c[3] for c in recs[0].calls if c[0] == 1 and c[4] > c[3]] == [0, 100, 200, 300, 400]


def test_port_reuse_after_close_starts_new_connection() -> None:
    f = Flow()
    f.handshake()
    f.send(0, b"x")
    f.fin(0)
    f.fin(1)
    g = Flow(isn_c=9_000_000, isn_s=77, t=f.t + 1)
    g.handshake()
    g.send(0, b"yy")
    packets = f.packets + [(len(f.packets) + i + 1, *p[1:]) for i, p in enumerate(g.packets)]
    eng, sinks, _ = run(packets)
    assert len(eng.connections) == 2
    assert [c.to_json(0)["directions"]["client_to_server"]["payload_bytes"]
            for c in eng.connections] == [1, 2]


def test_retransmitted_syn_stays_in_connection() -> None:
    f = Flow()
    f.handshake()
    syn = f.packets[0]
    f.packets.insert(1, (2, syn[1] + 1, *syn[2:]))
    eng, _, _ = run(f.packets)
    assert len(eng.connections) == 1


def test_missing_handshake_lower_port_server_and_scale_lower_bound() -> None:
    f = Flow()
    # no handshake: the server sends 4 x 1000 bytes while the client advertises raw window 10
    f.ack(0, win=10)
    for _ in range(4):
        f.send(1, b"z" * 1000)
    eng, _, recs = run(f.packets)
    conn = eng.connections[0].to_json(0.0)
    assert not conn["handshake_seen"] and conn["server"]["port"] == 5432
    c2s = conn["directions"]["client_to_server"]
    assert c2s["window_scale_known"] is False and c2s["window_scale"] is None
    # 4000 bytes in flight against a raw window of 10: scale >= 9 (10 << 9 = 5120)
    assert c2s["window_scale_lower_bound"] == 9


def test_snaplen_truncated_payload_is_counted_not_invented() -> None:
    f = Flow()
    f.handshake()
    f.send(1, b"t" * 60, plen=1000)
    f.send(1, b"u" * 10)
    eng, sinks, _ = run(f.packets)
    s2c = d(eng)
    assert s2c["truncated_bytes"] == 940 and s2c["payload_bytes"] == 1010
    assert sinks[0].gaps == [(1, 60, 940)]
    assert bytes(sinks[0].data[1][1000:]) == b"u" * 10


def test_zero_window_window_update_keepalive_rst() -> None:
    f = Flow()
    f.handshake()
    f.send(1, b"d" * 100)
    f.ack(0, win=0)
    f.ack(0, win=300)  # same ack, bigger window: a window update
    f.send(1, b"k", seq=f.seq[1] - 1, advance=False, dt=5)  # keep-alive probe
    f.rst(0)
    eng, _, recs = run(f.packets)
    conn = eng.connections[0].to_json(0.0)
    c2s = conn["directions"]["client_to_server"]
    assert c2s["zero_window_events"] == 1 and c2s["window_updates"] == 1
    assert conn["directions"]["server_to_client"]["keepalives"] == 1
    assert conn["directions"]["server_to_client"]["retransmitted_segments"] == 0
    assert conn["closed_by"] == "rst"
    assert KEEPALIVE in [c[8] for c in recs[0].calls]


def test_random_reordering_always_reassembles_exactly() -> None:
    rnd = random.Random(7)
    for trial in range(30):
        f = Flow(isn_s=rnd.randrange(1 << 32))
        f.handshake()
        chunks = [bytes([rnd.randrange(256)]) * rnd.randrange(1, 300) for _ in range(40)]
        sent = []
        for c in chunks:
            sent.append(f.send(1, c))
        body = f.packets[:3]
        data = f.packets[3:]
        rnd.shuffle(data)
        eng, sinks, _ = run(body + [(i + 4, p[1], *p[2:]) for i, p in enumerate(data)])
        assert bytes(sinks[0].data[1]) == b"".join(chunks), trial
        assert d(eng)["payload_bytes"] == sum(map(len, chunks))


def test_compiled_and_python_consumers_get_the_same_calls() -> None:
    """pktflow's own analyses are called directly when compiled, others through Python; a
    connection with both kinds gives each every packet and byte, in capture order."""
    from pktflow.pgwire.conversation import Conversation
    from pktflow.tcp.connection import CompiledSink
    from pktflow.tcp.observe import CompiledObserver
    from pktflow.transfer.analyzer import TransferAnalyzer

    f = Flow()
    f.handshake()
    f.send(0, b"Q\x00\x00\x00\x0dSELECT 1\x00", win=100)
    for _ in range(3):
        f.send(1, b"x" * 1000, win=50)
    f.ack(0)
    f.fin(0)
    f.fin(1)
    recs: list[Recorder] = []
    tas: list[TransferAnalyzer] = []

    class Both:  # the observer factory may mix both kinds
        def __call__(self, conn: object) -> list[object]:
            recs.append(Recorder())
            tas.append(TransferAnalyzer("c1"))
            return [recs[-1], tas[-1]]

    eng = TcpEngine(sink_factory=lambda conn: Conversation(conn.id),  # type: ignore[attr-defined]
                    observer_factory=Both())  # type: ignore[arg-type]
    for p in f.packets:
        eng.feed(p)
    eng.finish()
    conn = eng.connections[0]
    assert isinstance(conn.sink, CompiledSink) and conn.compiled_sink is conn.sink
    assert conn.compiled_observers == (tas[0],) and conn.other_observers == (recs[0],)
    assert all(isinstance(o, CompiledObserver) for o in conn.compiled_observers)
    assert len(recs[0].calls) == len(f.packets) and recs[0].info is not None
    assert tas[0].info is not None
    out = tas[0].result(1)
    assert out["segment_size_histogram"] == {"1000": 3}
    assert conn.sink.to_json()["messages"]["frontend"] == {"Query": 1}  # type: ignore[union-attr]


def _fresh_addresses(packets: list[tuple]) -> list[tuple]:  # type: ignore[type-arg]
    """The same packets, each with address objects of its own (as the pure-Python reader
    makes them): the engine's identity shortcut never applies, the table answers."""
    return [(p[0], p[1], bytes(bytearray(p[2])), bytes(bytearray(p[3])), *p[4:])
            for p in packets]


def test_connection_shortcut_agrees_with_the_table() -> None:
    """Three connections interleaved, one 4-tuple reused after close, a retransmitted SYN:
    finding connections by address identity gives what the table gives."""
    rng = random.Random(7)
    flows = []
    for port, isn in ((40000, 1000), (40001, 50_000), (40000, 9_000_000)):
        f = Flow(isn_c=isn, t=1_700_000_000.0 + (1 if isn == 9_000_000 else 0))
        f.handshake()
        if isn == 50_000:
            f.packets.insert(1, (0, f.packets[0][1] + 1e-6, *f.packets[0][2:]))  # SYN again
        for _ in range(20):
            f.send(rng.choice((0, 1)), bytes(rng.randrange(1, 300)))
        f.fin(0)
        f.fin(1)
        flows.append([p[:4] + (port if p[4] == 40000 else p[4],
                               port if p[5] == 40000 else p[5]) + p[6:] for p in f.packets])
    # interleave the first two, the third (same 4-tuple as the first) after both
    mixed = sorted(flows[0] + flows[1], key=lambda p: p[1]) + flows[2]
    packets = [(i + 1, *p[1:]) for i, p in enumerate(mixed)]

    def report(pkts: list[tuple]) -> list[object]:  # type: ignore[type-arg]
        eng, sinks, recs = run(pkts)
        return [[c.to_json(0.0) for c in eng.connections], [s.data for s in sinks],
                [r.calls for r in recs]]

    shared = report(packets)
    assert len(shared[0]) == 3  # type: ignore[arg-type]
    assert shared == report(_fresh_addresses(packets))


@settings(max_examples=500, deadline=None)
@given(st.binary(min_size=4, max_size=4) | st.binary(min_size=16, max_size=16)
       | st.binary(min_size=4, max_size=4).map(lambda v4: bytes(10) + b"\xff\xff" + v4))
def test_addresses_are_written_as_inet_ntop_writes_them(raw: bytes) -> None:
    import socket

    from pktflow.tcp.connection import format_ip

    family = socket.AF_INET if len(raw) == 4 else socket.AF_INET6
    assert format_ip(raw) == socket.inet_ntop(family, raw)
