"""The PostgreSQL decoder on crafted byte streams: split invariance, fuzzing, protocol cases."""

from __future__ import annotations

import struct
import tracemalloc

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from pktflow.pgwire.conversation import Conversation

# with the native speedups and with the pure-Python code (conftest.py)
pytestmark = pytest.mark.usefixtures("both_paths")


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


def datarow(i: int) -> bytes:
    val = f"row-{i}".encode()
    return msg("D", struct.pack(">HI", 1, len(val)) + val)


def select_exchange(rows: int) -> tuple[bytes, bytes]:
    front = startup() + msg("Q", cstr("SELECT * FROM t")) + msg("X")
    back = AUTH_OK + msg("S", cstr("server_version") + cstr("15.20")) + \
        msg("K", struct.pack(">II", 4242, 7)) + READY + \
        msg("T", struct.pack(">H", 1) + cstr("v") + b"\x00" * 18) + \
        b"".join(datarow(i) for i in range(rows)) + msg("C", cstr(f"SELECT {rows}")) + READY
    return front, back


def run(front: bytes, back: bytes, *, splits: tuple[list[int], list[int]] | None = None,
        start_seen: bool = True) -> dict:  # type: ignore[type-arg]
    """Feed the frontend bytes first, then the backend's, each cut at the given sizes."""
    conv = Conversation("c1", start_seen=lambda d: start_seen)
    for d, data in ((0, front), (1, back)):
        cuts = (splits or ([], []))[d]
        pos, frame = 0, 1
        for size in cuts + [len(data)]:
            if pos >= len(data):
                break
            chunk = data[pos:pos + max(1, size)]
            conv.feed(d, chunk, pos, frame, 1000.0 + frame)
            pos += len(chunk)
    conv.finish()
    out = conv.to_json()
    for q in out["queries"]:  # timing depends on where cuts fall; content must not
        for k in ("sent_s", "first_response_s", "last_response_s", "sent_frame",
                  "first_frame", "last_frame", "response_segments", "response_segment_median",
                  "response_segment_max", "response_segment_sizes"):
            q.pop(k)
    return out


def test_server_parameters_of_many_connections() -> None:
    """ParameterStatus bodies are decoded once and shared: each connection still gets its own
    values (the last one sent for a name wins, at most 64 names), and the shared table stays
    bounded when every body differs."""
    from pktflow.pgwire import conversation

    front = startup() + msg("Q", cstr("SELECT 1")) + msg("X")
    for i in range(conversation.MAX_PARAMETER_TEXT + 10):
        params = [("application_name", f"app{i}"), ("TimeZone", "UTC"), ("bad", None),
                  ("application_name", f"app{i}b"), ("server_version", "15.20")] + \
            [(f"p{k}", "x") for k in range(70)]
        back = AUTH_OK + b"".join(msg("S", cstr(k) + cstr(v) if v else k.encode())
                                  for k, v in params) + READY  # "bad": no NUL, no value
        got = run(front, back)["server_parameters"]
        if i in (0, 1, conversation.MAX_PARAMETER_TEXT + 9):
            assert list(got.items())[:4] == [("application_name", f"app{i}b"),
                                             ("TimeZone", "UTC"), ("server_version", "15.20"),
                                             ("p0", "x")] and len(got) == 64
    assert len(conversation._PARAMETER_TEXT) <= conversation.MAX_PARAMETER_TEXT


def test_simple_query_whole() -> None:
    front, back = select_exchange(100)
    out = run(front, back)
    assert out["protocol"] == "postgresql" and out["decode_started_at"] == "startup"
    assert out["startup"] == {"user": "alice", "database": "shop", "application_name": "psql",
                              "encryption": "none"}
    assert out["messages"]["frontend"] == {"StartupMessage": 1, "Query": 1, "Terminate": 1}
    assert out["messages"]["backend"]["DataRow"] == 100
    assert out["backend_pid"] == 4242 and out["server_parameters"] == {"server_version": "15.20"}
    (q,) = out["queries"]
    assert (q["sql"], q["command_tag"], q["rows"], q["data_rows"]) == \
        ("SELECT * FROM t", "SELECT 100", 100, 100)
    assert q["response_messages"] == 100 + 3  # T, D x 100, C, Z
    response = msg("T", struct.pack(">H", 1) + cstr("v") + b"\x00" * 18) + \
        b"".join(datarow(i) for i in range(100)) + msg("C", cstr("SELECT 100")) + READY
    assert back.endswith(response) and q["response_bytes"] == len(response)


def test_response_segments_are_the_backend_segments_of_the_query() -> None:
    front, back = select_exchange(200)
    conv = Conversation("c1", start_seen=lambda d: True)
    conv.feed(0, front, 0, 1, 0.0)
    sizes = [1000] * (len(back) // 1000) + [len(back) % 1000]
    off = 0
    for i, n in enumerate(sizes):
        conv.feed(1, back[off:off + n], off, 2 + i, 0.1 + i / 1000)
        off += n
    conv.finish()
    (q,) = conv.to_json()["queries"]
    assert q["rows"] == 200
    assert q["response_segments"] == len(sizes)
    assert q["response_segment_median"] == 1000
    assert q["response_segment_max"] == 1000
    assert q["response_segment_sizes"]["1000"] == len(sizes) - 1


def test_byte_at_a_time_equals_whole() -> None:
    front, back = select_exchange(20)
    whole = run(front, back)
    ones = run(front, back, splits=([1] * len(front), [1] * len(back)))
    assert ones == whole


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_random_splits_give_identical_results(data: st.DataObject) -> None:
    front, back = select_exchange(30)
    whole = run(front, back)
    sizes = st.lists(st.integers(1, 300), max_size=60)
    assert run(front, back, splits=(data.draw(sizes), data.draw(sizes))) == whole


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600), st.binary(max_size=600), st.booleans())
def test_fuzz_arbitrary_bytes_never_raise(front: bytes, back: bytes, seen: bool) -> None:
    out = run(front, back, start_seen=seen)
    assert out["protocol"] in ("postgresql", "postgresql-tls", "postgresql-gss", "unknown")


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2000), st.binary(min_size=1, max_size=8), st.booleans())
def test_fuzz_mutated_streams_never_raise(at: int, junk: bytes, which: bool) -> None:
    front, back = select_exchange(15)
    if which:
        back = back[:at] + junk + back[at + len(junk):]
    else:
        front = front[:at] + junk + front[at + len(junk):]
    run(front, back)


def test_ssl_refused_then_plaintext() -> None:
    front, back = select_exchange(3)
    out = run(SSL_REQUEST + front, b"N" + back)
    assert out["protocol"] == "postgresql" and out["startup"]["encryption"] == "none"
    assert out["messages"]["frontend"]["SSLRequest"] == 1
    assert out["queries"][0]["rows"] == 3


def test_ssl_accepted_stops_decoding() -> None:
    conv = Conversation("c1", start_seen=lambda d: True)
    conv.feed(0, SSL_REQUEST, 0, 1, 1.0)
    conv.feed(1, b"S", 0, 2, 1.1)
    conv.feed(0, b"\x16\x03\x01\x02\x00" + b"\x01" * 512, 8, 3, 1.2)  # ClientHello
    conv.finish()
    assert conv.protocol == "postgresql-tls" and conv.queries == []
    assert any(f.code == "encrypted" for f in conv.findings)


def test_http_on_5432_is_not_postgres() -> None:
    out = run(b"GET / HTTP/1.1\r\nHost: db\r\n\r\n", b"HTTP/1.1 400 Bad Request\r\n\r\n")
    assert out["protocol"] == "unknown" and out["queries"] == []
    assert out["messages"] == {"frontend": {}, "backend": {}}


def test_mid_stream_roles_proven_by_types_even_when_guess_is_wrong() -> None:
    # A pooled server connection captured late: the engine guessed the server is direction 0.
    back = b"".join(datarow(i) for i in range(5))[7:] + msg("C", cstr("SELECT 9")) + READY \
        + msg("T", struct.pack(">H", 0)) + datarow(1) + msg("C", cstr("SELECT 1")) + READY
    front = msg("Q", cstr("SELECT 1")) + msg("Q", cstr("SELECT 2"))
    conv = Conversation("c1")
    conv.feed(0, back, 0, 1, 1.0)
    conv.feed(1, front, 0, 2, 1.0)
    conv.finish()
    assert conv.frontend_direction == 1 and conv.decode_started_at == "mid-stream"
    out = conv.to_json()
    assert out["messages"]["frontend"] == {"Query": 2}
    assert out["messages"]["backend"]["ReadyForQuery"] == 2
    assert out["lost_bytes"]["backend"] > 0


def test_gap_inside_datarow_body_loses_nothing() -> None:
    front, back = select_exchange(50)
    conv = Conversation("c1", start_seen=lambda d: True)
    conv.feed(0, front, 0, 1, 1.0)
    i = back.index(datarow(10))
    conv.feed(1, back[:i + 8], 0, 2, 1.0)  # header + 3 body bytes of row 10
    conv.gap(1, i + 8, 2, 3, 1.0)  # 2 body bytes never captured
    conv.feed(1, back[i + 10:], i + 10, 4, 1.0)
    conv.finish()
    q = conv.queries[0]
    assert q.rows == 50 and not q.incomplete and conv.to_json()["lost_bytes"]["backend"] == 0


def test_gap_across_messages_resynchronises_without_invention() -> None:
    front, back = select_exchange(200)
    conv = Conversation("c1", start_seen=lambda d: True)
    conv.feed(0, front, 0, 1, 1.0)
    i = back.index(datarow(50)) + 3
    conv.feed(1, back[:i], 0, 2, 1.0)
    conv.gap(1, i, 500, 3, 1.0)
    conv.feed(1, back[i + 500:], i + 500, 4, 1.0)
    conv.finish()
    out = conv.to_json()
    assert out["messages"]["backend"]["DataRow"] < 200
    assert out["messages"]["backend"]["CommandComplete"] == 1  # found again after the gap
    assert out["queries"][0]["command_tag"] == "SELECT 200" and out["queries"][0]["incomplete"]
    assert any(f.code == "pgwire-resync" for f in conv.findings)


def test_malformed_length_is_a_finding_with_offset() -> None:
    front, back = select_exchange(5)
    i = back.index(datarow(2))
    bad = back[:i] + b"D\x00\x00\x00\x02" + back[i + 5:]
    conv = Conversation("c1", start_seen=lambda d: True)
    conv.feed(0, front, 0, 1, 1.0)
    conv.feed(1, bad, 0, 7, 1.0)
    conv.finish()
    (f,) = [f for f in conv.findings if f.code == "pgwire-malformed"]
    assert f.frames == [7] and f"offset {i:,}" in f.message
    assert conv.to_json()["decode_stopped"]["offset"] == i


def test_huge_length_claim_keeps_memory_bounded() -> None:
    front, _ = select_exchange(0)
    conv = Conversation("c1", start_seen=lambda d: True)
    conv.feed(0, front, 0, 1, 1.0)
    conv.feed(1, AUTH_OK + READY + b"D" + struct.pack(">I", 0x7FFFFFF0), 0, 2, 1.0)
    tracemalloc.start()
    chunk = b"\x00" * 65536
    for k in range(64):  # 4 MiB of a message claiming ~2 GB
        conv.feed(1, chunk, 16 + k * 65536, 3 + k, 1.0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1 << 20


def test_extended_protocol_pipeline() -> None:
    front = startup() + msg("P", cstr("s1") + cstr("SELECT $1::int") + b"\x00\x00") + \
        msg("B", cstr("") + cstr("s1") + b"\x00" * 6) + msg("D", b"P" + cstr("")) + \
        msg("E", cstr("") + b"\x00\x00\x00\x00") + \
        msg("B", cstr("") + cstr("s1") + b"\x00" * 6) + msg("E", cstr("") + b"\x00" * 4) + \
        msg("S")
    back = AUTH_OK + READY + msg("1") + msg("2") + msg("T", b"\x00\x00") + datarow(1) + \
        msg("C", cstr("SELECT 1")) + msg("2") + datarow(2) + msg("C", cstr("SELECT 1")) + READY
    out = run(front, back)
    assert [(q["sql"], q["kind"], q["rows"]) for q in out["queries"]] == \
        [("SELECT $1::int", "extended", 1), ("SELECT $1::int", "extended", 1)]
    assert out["messages"]["backend"]["ParseComplete"] == 1
    assert out["messages"]["frontend"]["Describe"] == 1


def test_copy_out_and_copy_in() -> None:
    front = startup() + msg("Q", cstr("COPY t TO STDOUT")) + msg("Q", cstr("COPY t FROM STDIN")) \
        + msg("d", b"1\tx\n") * 4 + msg("c")
    back = AUTH_OK + READY + msg("H", b"\x00\x00\x01\x00\x00") + msg("d", b"1\ta\n") * 7 + \
        msg("c") + msg("C", cstr("COPY 7")) + READY + msg("G", b"\x00\x00\x01\x00\x00") + \
        msg("C", cstr("COPY 4")) + READY
    out = run(front, back)
    q1, q2 = out["queries"]
    assert (q1["kind"], q1["rows"], q1["copy_data"]) == ("copy", 7, 7)
    assert (q2["kind"], q2["rows"], q2["copy_data"]) == ("copy", 4, 4)
    assert out["messages"]["frontend"]["CopyData"] == 4


def test_error_response_attached_to_query() -> None:
    err = msg("E", b"SERROR\x00VERROR\x00C42P01\x00Mrelation \"nope\" does not exist\x00\x00")
    front = startup() + msg("Q", cstr("SELECT * FROM nope"))
    back = AUTH_OK + READY + err + READY
    (q,) = run(front, back)["queries"]
    assert q["error"]["code"] == "42P01" and "nope" in q["error"]["message"]
    assert q["command_tag"] is None


def test_scram_exchange_names_without_secrets() -> None:
    init = msg("p", cstr("SCRAM-SHA-256") + struct.pack(">I", 5) + b"n,,n=")
    final = msg("p", b"c=biws,r=secretnonce,p=PROOF")
    sasl = msg("R", struct.pack(">I", 10) + cstr("SCRAM-SHA-256") + b"\x00")
    cont = msg("R", struct.pack(">I", 11) + b"r=x,s=y,i=4096")
    fin = msg("R", struct.pack(">I", 12) + b"v=sig") + AUTH_OK + READY
    conv = Conversation("c1", start_seen=lambda d: True)
    fo = bo = 0
    for d, data in ((0, startup()), (1, sasl), (0, init), (1, cont), (0, final), (1, fin)):
        off = fo if d == 0 else bo
        conv.feed(d, data, off, 1, 1.0)
        if d == 0:
            fo += len(data)
        else:
            bo += len(data)
    out = conv.to_json()
    assert out["messages"]["frontend"]["SASLInitialResponse"] == 1
    assert out["messages"]["frontend"]["SASLResponse"] == 1
    assert out["messages"]["backend"]["AuthenticationSASLFinal"] == 1
    assert "PROOF" not in str(out) and "secretnonce" not in str(out)


def test_function_call_is_a_query_with_its_response() -> None:
    # FunctionCall (the fast path libpq's large-object API uses): OID 764 (lo_import), no args
    call = msg("F", struct.pack(">IhhI", 764, 0, 0, 0) + struct.pack(">h", 1))
    result = msg("V", struct.pack(">i", 4) + struct.pack(">I", 16385))
    front = startup() + call + msg("X")
    back = AUTH_OK + READY + result + READY
    out = run(front, back)
    (q,) = out["queries"]
    assert q["kind"] == "function" and q["sql"] == "FunctionCall oid 764"
    assert q["response_messages"] == 2 and q["response_bytes"] == len(result) + len(READY)
    assert out["messages"]["backend"]["FunctionCallResponse"] == 1


def test_queries_beyond_the_cap_are_counted_not_kept() -> None:
    from pktflow.pgwire import conversation as C

    n = C.MAX_QUERIES + 50
    q = msg("Q", cstr("SELECT 1"))
    answer = msg("T", struct.pack(">H", 1) + cstr("v") + b"\x00" * 18) + datarow(1) + \
        msg("C", cstr("SELECT 1")) + READY
    conv = Conversation("c1", start_seen=lambda d: True)
    conv.feed(0, startup(), 0, 1, 0.0)
    conv.feed(1, AUTH_OK + READY, 0, 2, 0.0)
    off0, off1 = len(startup()), len(AUTH_OK + READY)
    for i in range(n):
        conv.feed(0, q, off0, 3 + 2 * i, float(i))
        conv.feed(1, answer, off1, 4 + 2 * i, float(i))
        off0, off1 = off0 + len(q), off1 + len(answer)
    conv.finish()
    out = conv.to_json()
    assert out["queries_total"] == n and len(out["queries"]) == C.MAX_QUERIES
    assert out["messages"]["backend"]["DataRow"] == n  # counts cover every query
    assert len(conv.pending) == 0  # answered queries are not held on to
    assert [f.code for f in conv.findings].count("queries-capped") == 1


@pytest.mark.parametrize("every", [2, 0], ids=["archiving-often", "as-built"])
def test_archived_queries_report_as_the_kept_ones(every: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """With an archive, answered queries leave memory as the list grows: the report is the
    same, for simple, extended, COPY and failed queries, answered one by one or pipelined.
    Archiving often (the pure-Python path reads ARCHIVE_AT as it runs; compiled, it is a
    constant) archives next to every kind of request, a lone Sync's among them."""
    from pktflow.pgwire import conversation as C

    if every:
        monkeypatch.setattr(C, "ARCHIVE_AT", every)

    err = msg("E", b"SERROR\x00C42P01\x00Mno\x00\x00")
    desc = msg("T", struct.pack(">H", 1) + cstr("v") + b"\x00" * 18)
    kinds = [
        (msg("Q", cstr("SELECT 1")), desc + datarow(1) + msg("C", cstr("SELECT 1")) + READY),
        (msg("P", cstr("") + cstr("SELECT $1") + b"\x00\x00") + msg("B", b"\x00" * 8)
         + msg("E", b"\x00" * 5) + msg("S"),
         msg("1") + msg("2") + datarow(2) + msg("C", cstr("SELECT 1")) + READY),
        (msg("Q", cstr("COPY t TO STDOUT")),
         msg("H", b"\x00\x00\x01\x00\x00") + msg("d", b"1\n") * 3 + msg("c")
         + msg("C", cstr("COPY 3")) + READY),
        (msg("Q", cstr("SELECT * FROM nope")), err + READY),
        (msg("S"), READY),  # a lone Sync: its ReadyForQuery goes to the last answered query
    ]
    rounds = [kinds[(i * 7) % 5] for i in range(384)]

    def report(archive: list[bytes] | None) -> tuple[dict, Conversation]:  # type: ignore[type-arg]
        conv = Conversation("c1", start_seen=lambda d: True, archive=archive)
        conv.feed(0, startup(), 0, 1, 0.0)
        conv.feed(1, AUTH_OK + READY, 0, 2, 0.0)
        off, frame = [len(startup()), len(AUTH_OK + READY)], 3
        # each request sent before the answer to the one before it (pipelined)
        order = [(0, 0)] + [x for i in range(1, len(rounds)) for x in ((0, i), (1, i - 1))]
        for d, i in order + [(1, len(rounds) - 1)]:
            data = rounds[i][d]
            conv.feed(d, data, off[d], frame, frame * 0.001)
            off[d] += len(data)
            frame += 1
        conv.finish()
        return conv.to_json(), conv

    archive: list[bytes] = []
    kept, _ = report(None)
    archived, conv = report(archive)
    queries = sum(r is not kinds[-1] for r in rounds)
    assert archived == kept and len(kept["queries"]) == queries
    assert len(archive) > queries // 2 and len(conv.queries) < 128
    assert {q["kind"] for q in kept["queries"]} == {"simple", "extended", "copy"}


def test_named_statements_are_bounded() -> None:
    from pktflow.pgwire import conversation as C

    names: dict[str, str] = {}
    for i in range(C.MAX_NAMES + 10):
        C._bounded_put(names, f"S_{i}", "SELECT 1")
    assert len(names) == C.MAX_NAMES and "S_0" not in names and f"S_{C.MAX_NAMES + 9}" in names


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


def test_direct_tls_with_alpn_postgresql_is_postgres_encrypted() -> None:
    """PostgreSQL 17 sslnegotiation=direct: no SSLRequest, a ClientHello offering ALPN
    "postgresql", split across segments as a small MSS would."""
    hello = client_hello(["postgresql"])
    conv = Conversation("c1", start_seen=lambda d: True)
    for i, at in enumerate(range(0, len(hello), 100)):
        conv.feed(0, hello[at:at + 100], at, 1 + i, 1.0 + i)
    conv.feed(1, b"\x16\x03\x03\x00\x7a\x02" + bytes(200), 0, 50, 2.0)  # the ServerHello
    conv.finish()
    assert conv.protocol == "postgresql-tls" and conv.queries == []
    found = [f for f in conv.findings if f.code == "encrypted"]
    assert len(found) == 1 and "directly" in found[0].message
    assert found[0].frames == [1 + (len(hello) - 1) // 100]  # the segment completing it


def test_tls_without_alpn_postgresql_is_not_postgres() -> None:
    for alpn in (None, ["h2", "http/1.1"]):
        conv = Conversation("c1", start_seen=lambda d: True)
        conv.feed(0, client_hello(alpn), 0, 1, 1.0)
        conv.finish()
        assert conv.protocol == "unknown", alpn
        assert "ALPN" in conv.decode_stopped["reason"]  # type: ignore[index]
        assert ("h2" in conv.decode_stopped["reason"]) == bool(alpn)  # type: ignore[index]


def test_client_hello_parser_on_every_prefix_and_junk() -> None:
    from pktflow.pgwire.tls import NEED_MORE, NOT_TLS, client_hello_alpn
    hello = client_hello(["postgresql", "x"])
    assert client_hello_alpn(hello) == ["postgresql", "x"]
    for n in range(len(hello)):
        assert client_hello_alpn(hello[:n]) == NEED_MORE, n
    assert client_hello_alpn(b"\x17\x03\x03\x00\x10" + bytes(16)) == NOT_TLS  # application data
    assert client_hello_alpn(b"\x16\x03\x03\x00\x04\x02\x00\x00\x00") == NOT_TLS  # ServerHello
    assert client_hello_alpn(b"GET / HTTP/1.1") == NOT_TLS
    cut = bytearray(hello)
    cut[3:5] = (60).to_bytes(2, "big")  # a record shorter than its ClientHello
    assert client_hello_alpn(bytes(cut[:65])) in (NOT_TLS, [])


def test_command_tag_row_counts() -> None:
    """The rows a CommandComplete tag reports, from ASCII digits only: str.isdigit() also takes
    "²", which int() refuses (a hostile tag once failed the whole pass)."""
    from pktflow.pgwire.messages import command_rows

    assert command_rows("SELECT 5") == 5
    assert command_rows("INSERT 0 3") == 3
    assert command_rows("COPY 1500000") == 1_500_000
    assert command_rows("CREATE TABLE") is None
    assert command_rows("SELECT") is None
    assert command_rows("SELECT ²") is None
    assert command_rows("SELECT ٣") is None
