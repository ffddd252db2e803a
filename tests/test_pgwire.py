"""The PostgreSQL decoder end to end: crafted byte streams carried by a TCP connection in a
capture, analysed by pipeline.analyze(), checked on the report's PostgreSQL part (protocol,
startup, messages, queries, decode_stopped, findings): split invariance, fuzzing, protocol
cases. The decoder's internals are unit-tested beside it (analyzer/core/src/pgwire)."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tcpfeed import Flow, write_capture

from pktflow.pipeline import analyze

# what the decoder puts in a connection's report, and the findings it gives
PG_KEYS = ("protocol", "startup", "authentication", "decode_started_at", "decode_stopped",
           "lost_bytes", "backend_pid", "cancel_request", "server_parameters", "messages",
           "notices",
           "notices_total", "errors", "queries", "queries_total")
PG_CODES = frozenset({"pgwire-resync", "pgwire-mid-stream", "encrypted", "not-postgresql",
                      "pgwire-malformed", "server-error", "query-error", "queries-capped"})
# a query's timing and segment keys depend on where the stream is cut; its content must not
TIMING = ("sent_s", "first_response_s", "last_response_s", "sent_frame", "first_frame",
          "last_frame", "response_segments", "response_segment_median", "response_segment_max",
          "response_segment_sizes", "goodput_bps")
PROTOCOLS = ("postgresql", "postgresql-tls", "postgresql-gss", "unknown")
# hypothesis runs many examples per test function: a fixture's directory is shared by them
HYPO = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

MAX_QUERIES = 10_000  # queries listed per connection (pgwire/conversation.rs)
MAX_NAMES = 10_000  # prepared statements remembered per connection (pgwire/names.rs)


def msg(t: str, body: bytes = b"") -> bytes:
    return t.encode() + struct.pack(">I", len(body) + 4) + body


def cstr(s: str) -> bytes:
    return s.encode() + b"\x00"


def startup(user: str = "alice", db: str = "shop", app: str = "psql") -> bytes:
    body = struct.pack(">I", 196608) + cstr("user") + cstr(user) + cstr("database") + cstr(db) \
        + cstr("application_name") + cstr(app) + b"\x00"
    return struct.pack(">I", len(body) + 4) + body


SSL_REQUEST = struct.pack(">II", 8, 80877103)
AUTH_OK = msg("R", struct.pack(">I", 0))
READY = msg("Z", b"I")
DESC = msg("T", struct.pack(">H", 1) + cstr("v") + b"\x00" * 18)


def datarow(i: int) -> bytes:
    val = f"row-{i}".encode()
    return msg("D", struct.pack(">HI", 1, len(val)) + val)


def select_exchange(rows: int) -> tuple[bytes, bytes]:
    front = startup() + msg("Q", cstr("SELECT * FROM t")) + msg("X")
    back = AUTH_OK + msg("S", cstr("server_version") + cstr("15.20")) + \
        msg("K", struct.pack(">II", 4242, 7)) + READY + DESC + \
        b"".join(datarow(i) for i in range(rows)) + msg("C", cstr(f"SELECT {rows}")) + READY
    return front, back


# -- the connection, the capture, the report -----------------------------------------------

def pieces(data: bytes, sizes: list[int]) -> list[bytes]:
    """`data` cut at the given sizes (each at least 1), the rest in one piece."""
    out, pos = [], 0
    for size in sizes + [len(data)]:
        if pos >= len(data):
            break
        out.append(data[pos:pos + max(1, size)])
        pos += len(out[-1])
    return out


def exchange(front: bytes, back: bytes, *,
             splits: tuple[list[int], list[int]] | None = None, handshake: bool = True,
             t: float = 1_700_000_000.0) -> Flow:
    """A connection carrying the frontend's bytes, then the backend's, each cut into segments
    at the given sizes and each segment acknowledged; then both FINs."""
    flow = Flow(t=t)
    if handshake:
        flow.handshake()
    for side, data in ((0, front), (1, back)):
        for piece in pieces(data, (splits or ([], []))[side]):
            flow.send(side, piece)
            flow.ack(1 - side)
    close(flow)
    return flow


def close(flow: Flow) -> None:
    flow.fin(0)
    flow.fin(1)
    flow.ack(0)


def analyse(path: Path, packets: list[tuple]) -> dict[str, Any]:  # type: ignore[type-arg]
    return analyze(str(write_capture(path, packets)))


def pg_part(report: dict[str, Any], conn: int = 0) -> dict[str, Any]:
    """One connection's PostgreSQL keys and findings (code, message, frames)."""
    c = report["connections"][conn]
    out = {k: c[k] for k in PG_KEYS}
    out["findings"] = [(f["code"], f["message"], f["frames"]) for f in report["findings"]
                       if f["code"] in PG_CODES and f["connection"] == c["id"]]
    return out


def codes(part: dict[str, Any]) -> list[str]:
    return [code for code, _, _ in part["findings"]]


def content(part: dict[str, Any]) -> dict[str, Any]:
    """The part without what depends on where the streams were cut."""
    out = json.loads(json.dumps(part))
    said = [m for q in out["queries"] for m in [q["error"], *q["notices"]] if m]
    for m in said + out["notices"] + out["errors"]:
        m.pop("frame"), m.pop("at_s")
    if out["authentication"]:
        for k in ("ms", "first_frame", "last_frame"):
            out["authentication"].pop(k)
    for q in out["queries"]:
        for k in TIMING:
            q.pop(k)
    out["findings"] = [f[:2] for f in out["findings"]]
    return out


def run(path: Path, front: bytes, back: bytes, *,
        splits: tuple[list[int], list[int]] | None = None,
        handshake: bool = True) -> dict[str, Any]:
    """The PostgreSQL part of the report of one connection carrying front then back."""
    report = analyse(path, exchange(front, back, splits=splits, handshake=handshake).packets)
    assert len(report["connections"]) == 1
    return pg_part(report)


@pytest.fixture
def cap(tmp_path: Path) -> Path:
    return tmp_path / "c.pcap"


# -- split invariance ------------------------------------------------------------------------

def test_simple_query_whole(cap: Path) -> None:
    front, back = select_exchange(100)
    out = run(cap, front, back)
    assert out["protocol"] == "postgresql" and out["decode_started_at"] == "startup"
    assert out["startup"] == {"user": "alice", "database": "shop", "application_name": "psql",
                              "encryption": "none", "protocol_version": "3.0",
                              "parameters": {"user": "alice", "database": "shop",
                                             "application_name": "psql"}}
    assert out["messages"]["frontend"] == {"StartupMessage": 1, "Query": 1, "Terminate": 1}
    assert out["messages"]["backend"]["DataRow"] == 100
    assert out["backend_pid"] == 4242 and out["server_parameters"] == {"server_version": "15.20"}
    assert out["decode_stopped"] is None and out["lost_bytes"] == {"frontend": 0, "backend": 0}
    assert out["findings"] == [] and out["queries_total"] == 1
    (q,) = out["queries"]
    assert (q["sql"], q["kind"], q["command_tag"], q["rows"], q["data_rows"]) == \
        ("SELECT * FROM t", "simple", "SELECT 100", 100, 100)
    assert q["response_messages"] == 100 + 3  # T, D x 100, C, Z
    assert not q["incomplete"] and q["error"] is None
    response = DESC + b"".join(datarow(i) for i in range(100)) + msg("C", cstr("SELECT 100")) \
        + READY
    assert back.endswith(response) and q["response_bytes"] == len(response)
    # the query went in frame 4 (after the handshake), its whole answer in frame 6
    assert (q["sent_frame"], q["first_frame"], q["last_frame"]) == (4, 6, 6)


def test_response_segments_are_the_backend_segments_of_the_query(cap: Path) -> None:
    front, back = select_exchange(200)
    sizes = [1000] * (len(back) // 1000)
    out = run(cap, front, back, splits=([], sizes))
    (q,) = out["queries"]
    assert q["rows"] == 200
    assert q["response_segments"] == len(sizes) + 1
    assert q["response_segment_median"] == 1000
    assert q["response_segment_max"] == 1000
    assert q["response_segment_sizes"] == {"1000": len(sizes), str(len(back) % 1000): 1}


def test_byte_at_a_time_equals_whole(cap: Path) -> None:
    front, back = select_exchange(20)
    whole = run(cap, front, back)
    ones = run(cap, front, back, splits=([1] * len(front), [1] * len(back)))
    assert ones["queries"][0]["response_segments"] > 100  # the cuts did reach the decoder
    assert content(ones) == content(whole)


@settings(HYPO, max_examples=100)
@given(data=st.data())
def test_random_splits_give_identical_results(cap: Path, data: st.DataObject) -> None:
    front, back = select_exchange(30)
    whole = content(run(cap, front, back))
    sizes = st.lists(st.integers(1, 300), max_size=60)
    assert content(run(cap, front, back, splits=(data.draw(sizes), data.draw(sizes)))) == whole


@settings(HYPO, max_examples=40)
@given(data=st.data())
def test_random_splits_of_a_pipeline_give_identical_results(cap: Path,
                                                            data: st.DataObject) -> None:
    """Likewise for extended-protocol, COPY and failed queries, and without a handshake."""
    front, back = mixed_streams(12)
    handshake = data.draw(st.booleans())
    whole = content(run(cap, front, back, handshake=handshake))
    sizes = st.lists(st.integers(1, 200), max_size=40)
    assert content(run(cap, front, back, splits=(data.draw(sizes), data.draw(sizes)),
                       handshake=handshake)) == whole


# -- never a failure on arbitrary bytes ---------------------------------------------------

@settings(HYPO, max_examples=150)
@given(front=st.binary(max_size=600), back=st.binary(max_size=600), handshake=st.booleans())
def test_fuzz_arbitrary_bytes_never_raise(cap: Path, front: bytes, back: bytes,
                                          handshake: bool) -> None:
    out = run(cap, front, back, handshake=handshake)
    assert out["protocol"] in PROTOCOLS
    if out["protocol"] == "unknown":
        assert out["queries"] == [] and out["startup"] is None


@settings(HYPO, max_examples=150)
@given(at=st.integers(0, 2000), junk=st.binary(min_size=1, max_size=8), which=st.booleans())
def test_fuzz_mutated_streams_never_raise(cap: Path, at: int, junk: bytes, which: bool) -> None:
    front, back = select_exchange(15)
    if which:
        back = back[:at] + junk + back[at + len(junk):]
    else:
        front = front[:at] + junk + front[at + len(junk):]
    out = run(cap, front, back)
    assert out["protocol"] in PROTOCOLS


# -- encryption and foreign protocols -----------------------------------------------------

def test_ssl_refused_then_plaintext(cap: Path) -> None:
    front, back = select_exchange(3)
    out = run(cap, SSL_REQUEST + front, b"N" + back)
    assert out["protocol"] == "postgresql" and out["startup"]["encryption"] == "none"
    assert out["messages"]["frontend"]["SSLRequest"] == 1
    assert out["queries"][0]["rows"] == 3
    assert "encrypted" not in codes(out)


def test_ssl_accepted_stops_decoding(cap: Path) -> None:
    flow = Flow()
    flow.handshake()
    flow.send(0, SSL_REQUEST)
    flow.send(1, b"S")
    flow.send(0, b"\x16\x03\x01\x02\x00" + b"\x01" * 512)  # ClientHello
    close(flow)
    out = pg_part(analyse(cap, flow.packets))
    assert out["protocol"] == "postgresql-tls" and out["queries"] == []
    assert out["messages"]["frontend"] == {"SSLRequest": 1}
    (found,) = [f for f in out["findings"] if f[0] == "encrypted"]
    assert "accepted SSLRequest" in found[1] and "TLS-encrypted" in found[1]
    assert found[2] == [5]  # the server's "S"


def test_http_on_5432_is_not_postgres(cap: Path) -> None:
    out = run(cap, b"GET / HTTP/1.1\r\nHost: db\r\n\r\n", b"HTTP/1.1 400 Bad Request\r\n\r\n")
    assert out["protocol"] == "unknown" and out["queries"] == []
    assert out["messages"] == {"frontend": {}, "backend": {}}
    assert codes(out) == ["not-postgresql"]


def client_hello(alpn: list[str] | None) -> bytes:
    """A real ClientHello, written by OpenSSL (Python's ssl module) into memory."""
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    if alpn:
        ctx.set_alpn_protocols(alpn)
    out = ssl.MemoryBIO()
    conn = ctx.wrap_bio(ssl.MemoryBIO(), out, server_hostname="db.example")
    try:
        conn.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()


SERVER_HELLO = b"\x16\x03\x03\x00\x7a\x02" + bytes(200)


def test_direct_tls_with_alpn_postgresql_is_postgres_encrypted(cap: Path) -> None:
    """PostgreSQL 17 sslnegotiation=direct: no SSLRequest, a ClientHello offering ALPN
    "postgresql", split across segments as a small MSS would."""
    hello = client_hello(["postgresql"])
    flow = Flow()
    flow.handshake()
    sent = [flow.send(0, piece) for piece in pieces(hello, [100] * (len(hello) // 100))]
    flow.send(1, SERVER_HELLO)
    close(flow)
    out = pg_part(analyse(cap, flow.packets))
    assert out["protocol"] == "postgresql-tls" and out["queries"] == []
    assert out["startup"] is None and out["decode_stopped"] is None
    (found,) = [f for f in out["findings"] if f[0] == "encrypted"]
    assert "directly" in found[1]
    assert len(sent) > 2 and found[2] == [sent[-1][0]]  # the segment completing it


def test_tls_without_alpn_postgresql_is_not_postgres(cap: Path) -> None:
    for alpn in (None, ["h2", "http/1.1"]):
        out = run(cap, client_hello(alpn), SERVER_HELLO)
        assert out["protocol"] == "unknown", alpn
        reason = out["decode_stopped"]["reason"]
        assert "ALPN" in reason and ("h2, http/1.1" in reason) == bool(alpn), reason
        assert codes(out) == ["not-postgresql"]


def test_client_hello_cut_or_junk_is_never_postgres_tls(cap: Path) -> None:
    """A ClientHello cut anywhere is never taken for direct TLS, its whole self is; TLS
    records that are not a ClientHello and plain text are not PostgreSQL."""
    hello = client_hello(["postgresql", "x"])
    assert run(cap, hello, b"")["protocol"] == "postgresql-tls"
    for n in sorted({*range(1, 60), *range(60, len(hello), 23), len(hello) - 1}):
        out = run(cap, hello[:n], b"")
        assert out["protocol"] == "unknown" and "encrypted" not in codes(out), n
    for junk in (b"\x17\x03\x03\x00\x10" + bytes(16),  # application data
                 b"\x16\x03\x03\x00\x04\x02\x00\x00\x00",  # a ServerHello
                 b"GET / HTTP/1.1\r\n\r\n"):
        out = run(cap, junk, b"")
        assert out["protocol"] == "unknown" and codes(out) == ["not-postgresql"], junk
    cut = bytearray(hello)
    cut[3:5] = (60).to_bytes(2, "big")  # a record shorter than its ClientHello
    assert run(cap, bytes(cut[:65]), b"")["protocol"] == "unknown"


# -- mid-stream, gaps, malformed framing -------------------------------------------------------

def _late_pool() -> tuple[bytes, bytes]:
    """A pooled server connection captured late: the end of an answer, then two queries."""
    back = b"".join(datarow(i) for i in range(5))[7:] + msg("C", cstr("SELECT 9")) + READY
    answers = [msg("T", struct.pack(">H", 0)) + datarow(1) + msg("C", cstr("SELECT 1")) + READY,
               msg("C", cstr("SELECT 0")) + READY]
    return back, answers  # type: ignore[return-value]


def test_mid_stream_proven_by_a_request_answered_and_closed(cap: Path) -> None:
    """The frontend on 10.0.0.1:40000, the backend on 10.0.0.2:5432, no handshake: the
    ports give the roles, and the conversation proves it is PostgreSQL: a Query answered by
    a RowDescription at the start of the server's next segment, a ReadyForQuery closing the
    cycle. The finding names the frames."""
    tail, answers = _late_pool()
    flow = Flow()
    first = flow.send(1, tail)[0]
    ask = flow.send(0, msg("Q", cstr("SELECT 1")))[0]
    answer = flow.send(1, answers[0])[0]  # type: ignore[index]
    flow.send(0, msg("Q", cstr("SELECT 2")))
    flow.send(1, answers[1])  # type: ignore[index]
    report = analyse(cap, flow.packets)
    (conn,) = report["connections"]
    assert conn["client"] == {"ip": "10.0.0.1", "port": 40000}
    assert conn["roles_from"] == "port" and not conn["handshake_seen"]
    out = pg_part(report)
    assert out["protocol"] == "postgresql" and out["decode_started_at"] == "mid-stream"
    assert out["messages"]["frontend"] == {"Query": 2}
    assert out["messages"]["backend"]["ReadyForQuery"] == 3
    assert out["lost_bytes"]["backend"] > 0
    (found,) = [f for f in out["findings"] if f[0] == "pgwire-mid-stream"]
    assert (f"the client's Query (frame {ask}) was answered by the server's RowDescription "
            f"(frame {answer}) and a ReadyForQuery closed that cycle (frame {answer})") in found[1]
    assert found[2] == sorted({first, ask, answer})


def test_mid_stream_roles_are_never_swapped(cap: Path) -> None:
    """The same bytes with the ports the other way round (the backend on 10.0.0.1:40000, the
    frontend on 10.0.0.2:5432): the engine takes the lower port for the server, and the
    decoder keeps the roles TCP gave. The backend's bytes are no frontend's: not
    PostgreSQL, and the finding says why."""
    tail, answers = _late_pool()
    flow = Flow()
    flow.send(0, tail)
    flow.send(1, msg("Q", cstr("SELECT 1")))
    flow.send(0, answers[0])  # type: ignore[index]
    report = analyse(cap, flow.packets)
    (conn,) = report["connections"]
    assert conn["server"] == {"ip": "10.0.0.2", "port": 5432}
    assert conn["roles_from"] == "port"
    out = pg_part(report)
    assert out["protocol"] == "unknown" and out["queries"] == []
    assert out["messages"] == {"frontend": {}, "backend": {}}
    assert codes(out) == ["not-postgresql"]


def test_gap_inside_datarow_body_loses_nothing(cap: Path) -> None:
    """Two bytes of a DataRow's body never captured: the rows are all counted."""
    front, back = select_exchange(50)
    i = back.index(datarow(10))
    flow = Flow()
    flow.handshake()
    flow.send(0, front)
    flow.send(1, back[:i + 8])  # header + 3 body bytes of row 10
    flow.seq[1] += 2  # 2 body bytes never captured
    flow.send(1, back[i + 10:])
    flow.ack(0)
    close(flow)
    report = analyse(cap, flow.packets)
    assert report["connections"][0]["directions"]["server_to_client"]["missing_bytes"] == 2
    out = pg_part(report)
    (q,) = out["queries"]
    assert q["rows"] == 50 and q["data_rows"] == 50 and not q["incomplete"]
    assert out["lost_bytes"]["backend"] == 0 and "pgwire-resync" not in codes(out)


def test_gap_across_messages_resynchronises_without_invention(cap: Path) -> None:
    front, back = select_exchange(200)
    i = back.index(datarow(50)) + 3
    flow = Flow()
    flow.handshake()
    flow.send(0, front)
    flow.send(1, back[:i])
    flow.seq[1] += 500
    flow.send(1, back[i + 500:])
    flow.ack(0)
    close(flow)
    out = pg_part(analyse(cap, flow.packets))
    assert out["messages"]["backend"]["DataRow"] < 200
    assert out["messages"]["backend"]["CommandComplete"] == 1  # found again after the gap
    (q,) = out["queries"]
    assert q["command_tag"] == "SELECT 200" and q["incomplete"]
    assert 0 < out["lost_bytes"]["backend"] - 500 < 100  # the cut rows' remains, no more
    (found,) = [f for f in out["findings"] if f[0] == "pgwire-resync"]
    assert f"a capture gap of 500 bytes at offset {i:,}" in found[1]


def test_malformed_length_is_a_finding_with_offset(cap: Path) -> None:
    front, back = select_exchange(5)
    i = back.index(datarow(2))
    bad = back[:i] + b"D\x00\x00\x00\x02" + back[i + 5:]
    flow = Flow()
    flow.handshake()
    flow.send(0, front)
    frame = flow.send(1, bad)[0]
    close(flow)
    out = pg_part(analyse(cap, flow.packets))
    (found,) = [f for f in out["findings"] if f[0] == "pgwire-malformed"]
    assert found[2] == [frame] and f"offset {i:,}" in found[1]
    assert out["decode_stopped"] == {"direction": "backend", "offset": i, "frame": frame,
                                     "reason": "length 2 is under 4"}
    assert out["messages"]["backend"]["DataRow"] == 2  # those before it


def _peak_growth_kib(fn: Any) -> tuple[Any, int]:
    """What fn returns, and how far it raised this process's peak resident memory (KiB):
    the core's allocations are not Python's, so tracemalloc does not see them."""
    def hwm() -> int:
        with open("/proc/self/status") as f:
            return int(re.search(r"VmHWM:\s+(\d+)", f.read()).group(1))  # type: ignore[union-attr]

    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak to the present
    before = hwm()
    result = fn()
    return result, hwm() - before


@pytest.mark.parametrize("claim,stops", [(0x3FFFFFF0, False), (0x7FFFFFF0, True)],
                         ids=["1-GiB", "2-GiB-absurd"])
def test_huge_length_claim_keeps_memory_bounded(cap: Path, claim: int, stops: bool) -> None:
    """A DataRow claiming ~1 GiB (PostgreSQL's limit: skipped as it streams by) or ~2 GiB
    (absurd: decoding stops), then 16 MiB of it: memory does not follow the claim."""
    front, _ = select_exchange(0)
    flow = Flow()
    flow.handshake()
    flow.send(0, front)
    flow.send(1, AUTH_OK + READY + b"D" + struct.pack(">I", claim))
    for _ in range(16 * 16):  # 16 MiB in 64 KiB segments
        flow.send(1, b"\x00" * 65000)
        flow.ack(0)
    close(flow)
    path = write_capture(cap, flow.packets)
    report, growth = _peak_growth_kib(lambda: analyze(str(path)))
    assert growth < 6 * 1024, growth
    out = pg_part(report)
    assert out["protocol"] == "postgresql" and out["lost_bytes"]["backend"] == 0
    if stops:
        assert "is absurd" in out["decode_stopped"]["reason"]
        assert codes(out) == ["pgwire-malformed"]
    else:
        assert out["decode_stopped"] is None and codes(out) == []
        (q,) = out["queries"]  # the DataRow is counted at its header, as it claims to be
        assert out["messages"]["backend"]["DataRow"] == 1 and q["incomplete"]
        assert q["response_bytes"] == 1 + claim


# -- the protocol's request kinds -------------------------------------------------------------

def test_extended_protocol_pipeline(cap: Path) -> None:
    front = startup() + msg("P", cstr("s1") + cstr("SELECT $1::int") + b"\x00\x00") + \
        msg("B", cstr("") + cstr("s1") + b"\x00" * 6) + msg("D", b"P" + cstr("")) + \
        msg("E", cstr("") + b"\x00\x00\x00\x00") + \
        msg("B", cstr("") + cstr("s1") + b"\x00" * 6) + msg("E", cstr("") + b"\x00" * 4) + \
        msg("S")
    back = AUTH_OK + READY + msg("1") + msg("2") + msg("T", b"\x00\x00") + datarow(1) + \
        msg("C", cstr("SELECT 1")) + msg("2") + datarow(2) + msg("C", cstr("SELECT 1")) + READY
    out = run(cap, front, back)
    assert [(q["sql"], q["kind"], q["rows"]) for q in out["queries"]] == \
        [("SELECT $1::int", "extended", 1), ("SELECT $1::int", "extended", 1)]
    assert out["messages"]["backend"]["ParseComplete"] == 1
    assert out["messages"]["frontend"]["Describe"] == 1


def test_copy_out_and_copy_in(cap: Path) -> None:
    front = startup() + msg("Q", cstr("COPY t TO STDOUT")) + msg("Q", cstr("COPY t FROM STDIN")) \
        + msg("d", b"1\tx\n") * 4 + msg("c")
    back = AUTH_OK + READY + msg("H", b"\x00\x00\x01\x00\x00") + msg("d", b"1\ta\n") * 7 + \
        msg("c") + msg("C", cstr("COPY 7")) + READY + msg("G", b"\x00\x00\x01\x00\x00") + \
        msg("C", cstr("COPY 4")) + READY
    out = run(cap, front, back)
    q1, q2 = out["queries"]
    assert (q1["kind"], q1["rows"], q1["copy_data"]) == ("copy", 7, 7)
    assert (q2["kind"], q2["rows"], q2["copy_data"]) == ("copy", 4, 4)
    assert out["messages"]["frontend"]["CopyData"] == 4


def test_error_response_attached_to_query(cap: Path) -> None:
    err = msg("E", b"SERROR\x00VERROR\x00C42P01\x00Mrelation \"nope\" does not exist\x00\x00")
    front = startup() + msg("Q", cstr("SELECT * FROM nope"))
    back = AUTH_OK + READY + err + READY
    out = run(cap, front, back)
    (q,) = out["queries"]
    assert q["error"]["code"] == "42P01" and "nope" in q["error"]["message"]
    assert q["error"]["severity"] == "ERROR"
    assert q["command_tag"] is None
    (found,) = out["findings"]
    assert found[0] == "query-error" and "42P01" in found[1] and "SELECT * FROM nope" in found[1]


def test_scram_exchange_names_without_secrets(cap: Path) -> None:
    init = msg("p", cstr("SCRAM-SHA-256") + struct.pack(">I", 5) + b"n,,n=")
    final = msg("p", b"c=biws,r=secretnonce,p=PROOF")
    sasl = msg("R", struct.pack(">I", 10) + cstr("SCRAM-SHA-256") + b"\x00")
    cont = msg("R", struct.pack(">I", 11) + b"r=x,s=y,i=4096")
    fin = msg("R", struct.pack(">I", 12) + b"v=sig") + AUTH_OK + READY
    flow = Flow()
    flow.handshake()
    for side, data in ((0, startup()), (1, sasl), (0, init), (1, cont), (0, final), (1, fin)):
        flow.send(side, data)
    close(flow)
    report = analyse(cap, flow.packets)
    out = pg_part(report)
    assert out["messages"]["frontend"]["SASLInitialResponse"] == 1
    assert out["messages"]["frontend"]["SASLResponse"] == 1
    assert out["messages"]["backend"]["AuthenticationSASL"] == 1
    assert out["messages"]["backend"]["AuthenticationSASLFinal"] == 1
    text = json.dumps(report)
    assert "PROOF" not in text and "secretnonce" not in text


def test_function_call_is_a_query_with_its_response(cap: Path) -> None:
    # FunctionCall (the fast path libpq's large-object API uses): OID 764 (lo_import), no args
    call = msg("F", struct.pack(">IhhI", 764, 0, 0, 0) + struct.pack(">h", 1))
    result = msg("V", struct.pack(">i", 4) + struct.pack(">I", 16385))
    front = startup() + call + msg("X")
    back = AUTH_OK + READY + result + READY
    out = run(cap, front, back)
    (q,) = out["queries"]
    assert q["kind"] == "function" and q["sql"] == "FunctionCall oid 764"
    assert q["response_messages"] == 2 and q["response_bytes"] == len(result) + len(READY)
    assert out["messages"]["backend"]["FunctionCallResponse"] == 1


def test_command_tag_row_counts(cap: Path) -> None:
    """The rows a CommandComplete tag reports, from ASCII digits only: "²" and "٣" are digits
    to str.isdigit() but no row count (a hostile tag once failed the whole pass). Each query
    here gets two DataRows: a tag without a count leaves the rows at those."""
    tags = {"SELECT 5": 5, "INSERT 0 3": 3, "COPY 1500000": 1_500_000, "CREATE TABLE": 2,
            "SELECT": 2, "SELECT ²": 2, "SELECT ٣": 2}
    front = startup() + b"".join(msg("Q", cstr(f"q{i}")) for i in range(len(tags) + 1))
    back = AUTH_OK + READY + b"".join(DESC + datarow(1) + datarow(2) + msg("C", cstr(tag))
                                      + READY for tag in tags) \
        + msg("C", cstr("CREATE TABLE")) + READY  # no rows, no count: 0
    out = run(cap, front, back)
    assert [(q["command_tag"], q["rows"]) for q in out["queries"]] == \
        list(tags.items()) + [("CREATE TABLE", 0)]


def test_row_counts_past_64_bits_and_past_pythons_digit_limit(cap: Path, tmp_path: Path) -> None:
    """A tag's count has no bound: past 64 bits it is still a number, in the report and in the
    JSON; past the digits Python will read (4,300) it is no count rather than no report."""
    import io

    from pktflow.cli import Env, main

    big, huge = "23058430092136939520", "9" * 5000
    front = startup() + msg("Q", cstr("q1")) + msg("Q", cstr("q2"))
    back = AUTH_OK + READY + msg("C", cstr(f"SELECT {big}")) + READY \
        + msg("C", cstr(f"SELECT {huge}")) + READY
    out = run(cap, front, back)
    assert [q["rows"] for q in out["queries"]] == [int(big), None]
    flow = exchange(front, back)
    path = write_capture(tmp_path / "big.pcap", flow.packets)
    text = io.StringIO()
    assert main(["analyze", str(path), "--format", "json"], Env(stdout=text)) == 0
    assert f'"rows": {big},' in text.getvalue()
    assert [q["rows"] for q in json.loads(text.getvalue())["connections"][0]["queries"]] == \
        [int(big), None]


# -- bounds ---------------------------------------------------------------------------------

def test_server_parameters_of_many_connections(cap: Path) -> None:
    """Each connection of a capture gets its own ParameterStatus values (the last one sent
    for a name wins, at most 64 names, a body without its value is skipped)."""
    front = startup() + msg("Q", cstr("SELECT 1")) + msg("X")
    packets: list[tuple] = []  # type: ignore[type-arg]
    n = 12
    for i in range(n):
        params = [("application_name", f"app{i}"), ("TimeZone", "UTC"), ("bad", None),
                  ("application_name", f"app{i}b"), ("server_version", "15.20")] + \
            [(f"p{k}", "x") for k in range(70)]
        back = AUTH_OK + b"".join(msg("S", cstr(k) + cstr(v) if v else k.encode())
                                  for k, v in params) + READY  # "bad": no NUL, no value
        flow = exchange(front, back, t=1_700_000_000.0 + i)
        packets += [p[:4] + (40000 + i if p[4] == 40000 else p[4],
                             40000 + i if p[5] == 40000 else p[5]) + p[6:]
                    for p in flow.packets]  # each from its own client port
    report = analyse(cap, packets)
    assert len(report["connections"]) == n
    for i in range(n):
        got = pg_part(report, i)["server_parameters"]
        assert list(got.items())[:4] == [("application_name", f"app{i}b"), ("TimeZone", "UTC"),
                                         ("server_version", "15.20"), ("p0", "x")], i
        assert len(got) == 64 and "bad" not in got


def test_queries_beyond_the_cap_are_counted_not_kept(cap: Path) -> None:
    n = MAX_QUERIES + 50
    q = msg("Q", cstr("SELECT 1"))
    answer = DESC + datarow(1) + msg("C", cstr("SELECT 1")) + READY
    flow = Flow()
    flow.handshake()
    flow.send(0, startup())
    flow.send(1, AUTH_OK + READY)
    for _ in range(n):
        flow.send(0, q)
        flow.send(1, answer)
    close(flow)
    out = pg_part(analyse(cap, flow.packets))
    assert out["queries_total"] == n and len(out["queries"]) == MAX_QUERIES
    assert out["messages"]["backend"]["DataRow"] == n  # counts cover every query
    assert out["messages"]["frontend"]["Query"] == n
    assert all(q["rows"] == 1 and not q["incomplete"] for q in out["queries"])
    capped = [f for f in out["findings"] if f[0] == "queries-capped"]
    # the first query past the cap: frame 6 + 2 * MAX_QUERIES (after the handshake's three,
    # the startup and its answer, and MAX_QUERIES queries and answers)
    assert capped == [("queries-capped", capped[0][1], [6 + 2 * MAX_QUERIES])]


def mixed_rounds(count: int) -> list[tuple[bytes, bytes]]:
    """`count` requests of every kind in turn, each with its answer: simple, extended, COPY,
    failed, and a lone Sync (its ReadyForQuery goes to the last answered query)."""
    err = msg("E", b"SERROR\x00C42P01\x00Mno\x00\x00")
    kinds = [
        (msg("Q", cstr("SELECT 1")), DESC + datarow(1) + msg("C", cstr("SELECT 1")) + READY),
        (msg("P", cstr("") + cstr("SELECT $1") + b"\x00\x00") + msg("B", b"\x00" * 8)
         + msg("E", b"\x00" * 5) + msg("S"),
         msg("1") + msg("2") + datarow(2) + msg("C", cstr("SELECT 1")) + READY),
        (msg("Q", cstr("COPY t TO STDOUT")),
         msg("H", b"\x00\x00\x01\x00\x00") + msg("d", b"1\n") * 3 + msg("c")
         + msg("C", cstr("COPY 3")) + READY),
        (msg("Q", cstr("SELECT * FROM nope")), err + READY),
        (msg("S"), READY),
    ]
    return [kinds[(i * 7) % 5] for i in range(count)]


def mixed_streams(count: int) -> tuple[bytes, bytes]:
    """The frontend's and the backend's streams of a session of mixed_rounds(count)."""
    rounds = mixed_rounds(count)
    return (startup() + b"".join(r[0] for r in rounds),
            AUTH_OK + READY + b"".join(r[1] for r in rounds))


def test_pipelined_queries_report_as_answered_one_by_one(cap: Path) -> None:
    """Simple, extended, COPY and failed queries and lone Syncs, each request sent after the
    answer to the one before it, or before it (pipelined): the same queries, with the same
    answers."""
    rounds = mixed_rounds(384)

    def report(pipelined: bool) -> dict[str, Any]:
        flow = Flow()
        flow.handshake()
        flow.send(0, startup())
        flow.send(1, AUTH_OK + READY)
        n = len(rounds)
        if pipelined:
            order = [(0, 0)] + [x for i in range(1, n) for x in ((0, i), (1, i - 1))] \
                + [(1, n - 1)]
        else:
            order = [x for i in range(n) for x in ((0, i), (1, i))]
        for side, i in order:
            flow.send(side, rounds[i][side])
        close(flow)
        return pg_part(analyse(cap, flow.packets))

    one_by_one, pipelined = report(False), report(True)
    assert content(pipelined) == content(one_by_one)
    queries = one_by_one["queries"]
    lone_syncs = sum(r[0] == msg("S") for r in rounds)
    assert 0 < lone_syncs < len(rounds)
    assert len(queries) == one_by_one["queries_total"] == len(rounds) - lone_syncs
    assert {q["kind"] for q in queries} == {"simple", "extended", "copy"}
    assert all(not q["incomplete"] for q in queries)
    failed = [q for q in queries if q["error"] is not None]
    assert len(failed) == sum(r[0] == msg("Q", cstr("SELECT * FROM nope")) for r in rounds)
    assert {q["sql"] for q in failed} == {"SELECT * FROM nope"}
    assert one_by_one["messages"]["frontend"]["Sync"] == sum(r[0].endswith(msg("S"))
                                                             for r in rounds)


def test_named_statements_are_bounded(cap: Path) -> None:
    """Past MAX_NAMES prepared statements the oldest is forgotten: a portal bound to it runs
    a query of unknown SQL, the newest still names its SQL."""
    parses = b"".join(msg("P", cstr(f"S_{i}") + cstr(f"SELECT {i}") + b"\x00\x00")
                      for i in range(MAX_NAMES + 10))
    run_stmt = [msg("B", cstr("") + cstr(name) + b"\x00" * 6) + msg("E", cstr("") + b"\x00" * 4)
                for name in ("S_0", "S_10", f"S_{MAX_NAMES + 9}")]
    front = startup() + parses + b"".join(run_stmt) + msg("S")
    back = AUTH_OK + READY + msg("1") * (MAX_NAMES + 10) \
        + (msg("2") + msg("C", cstr("SELECT 0"))) * 3 + READY
    out = run(cap, front, back, splits=([1400] * (len(front) // 1400), []))
    assert [q["sql"] for q in out["queries"]] == ["", "SELECT 10", f"SELECT {MAX_NAMES + 9}"]
