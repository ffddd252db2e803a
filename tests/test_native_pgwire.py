"""The native PostgreSQL decoder (pktflow._core, native/pgwire.c and pgframe.c) against its
Python twin (pktflow.pgwire.conversation): fed the same events, both must report the same
text byte for byte (compact and indented), the same findings, the same frontend direction
and the same fields for relay matching. On the lab's captures (through the Python TCP
engine), on crafted PostgreSQL streams cut every way, and on random and hostile bytes."""

from __future__ import annotations

import random
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

core = pytest.importorskip("pktflow._core", reason="the native core (pktflow._core) is not built")
if not hasattr(core, "ConversationProbe"):
    pytest.skip("pktflow._core has no ConversationProbe", allow_module_level=True)

from pktflow.pgwire import conversation as C  # noqa: E402
from pktflow.pgwire.conversation import Conversation  # noqa: E402
from pktflow.pgwire.query import SQL_CAP  # noqa: E402
from pktflow.report.jsontext import compact, indented  # noqa: E402
from pktflow.report.stored import Spill  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TIMES = ("sent_s", "first_response_s", "last_response_s")
from pktflow.relay.topology import BULK_SEGMENTS, LEG_QUERY_KEYS  # noqa: E402


# -- the twins --------------------------------------------------------------------------------

class Twin:
    """A Conversation and two ConversationProbes (compact; indented, nested as a report's
    connection is) fed the same events; check() compares what they report."""

    def __init__(self, start: float = 0.0, seen: tuple[bool, bool] = (True, True),
                 archive: bool = True, conn_id: str = "c1") -> None:
        self.start = start
        self.seen = list(seen)
        self.conv = Conversation(conn_id, start_seen=lambda d: self.seen[d],
                                 archive=Spill() if archive else None)
        self.probes = [
            core.ConversationProbe(conn_id, start, -1, 2, archive=Spill() if archive else None),
            core.ConversationProbe(conn_id, start, 2, 4, archive=Spill() if archive else None)]

    def view(self) -> list[bool]:
        return self.seen

    def _sync(self) -> None:
        seen = self.view()
        for p in self.probes:
            for d in (0, 1):
                p.set_view(d, bool(seen[d]), False)

    def feed(self, d: int, data: bytes, offset: int, frame: int, ts: float) -> None:
        self._sync()
        self.conv.feed(d, data, offset, frame, ts)
        for p in self.probes:
            p.feed(d, data, offset, frame, ts)

    def gap(self, d: int, offset: int, length: int, frame: int, ts: float) -> None:
        self._sync()
        self.conv.gap(d, offset, length, frame, ts)
        for p in self.probes:
            p.gap(d, offset, length, frame, ts)

    def finish(self) -> None:
        self._sync()
        self.conv.finish()
        for p in self.probes:
            p.finish()

    def check(self) -> dict[str, Any]:
        """Compare everything the pass reads of both; the Python report (times relative)."""
        pg = self.conv.to_json()
        for q in pg["queries"]:  # as pipeline.Run.connection_json does
            for key in TIMES:
                if q.get(key) is not None:
                    q[key] = round(q[key] - self.start, 6)
        flat, nested = self.probes
        assert flat.to_json(-1, 0) == compact(pg)
        assert nested.to_json(2, 2) == indented(pg, 2)
        want = self.conv.findings
        listed = len(pg["queries"])
        for p in self.probes:
            assert p.findings() == want
            assert p.frontend_direction == self.conv.frontend_direction
            assert p.is_postgres == pg["protocol"].startswith("postgresql")
            assert p.listed == listed
            for most in (16, listed, listed + 1):
                legs = p.leg_queries(most)
                if listed < most:
                    assert legs == tuple(leg_values(q) for q in pg["queries"])
                else:
                    assert legs is None
        return pg


def leg_values(q: dict[str, Any]) -> tuple[Any, ...]:
    """What the native core hands relay matching of a query: LEG_QUERY_KEYS' values, the
    segment sizes only for a bulk response (LegQuery drops them for the others)."""
    bulk = (q["response_segments"] or 0) >= BULK_SEGMENTS
    return tuple(q[k] if k != "response_segment_sizes" or bulk else None
                 for k in LEG_QUERY_KEYS)


def cuts(data: bytes, how: str | list[int] | None, rng: random.Random | None) -> list[bytes]:
    """data whole, a byte at a time, at the given sizes, or at random sizes."""
    if not data:
        return []
    if how is None:
        return [data]
    if how == "bytes":
        return [data[i:i + 1] for i in range(len(data))]
    out, pos = [], 0
    sizes = iter(how) if isinstance(how, list) else None
    while pos < len(data):
        if sizes is not None:
            n = next(sizes, len(data))
        else:
            assert rng is not None
            n = rng.choice((1, 2, 3, 5, 7, 64, 1460, 4096, 65536, rng.randint(1, 300)))
        n = max(1, n)
        out.append(data[pos:pos + n])
        pos += n
    return out


Event = tuple  # ("feed", d, bytes) | ("gap", d, length) | ("seen", d, bool)


def drive(events: Iterable[Event], *, how: str | list[int] | None = None, seed: int = 0,
          start: float = 1000.0, seen: tuple[bool, bool] = (True, True), archive: bool = True,
          finish: bool = True, jumble: bool = False) -> dict[str, Any]:
    """Feed the events to a Twin (offsets as the engine gives them, or random ones with
    `jumble`), finish, and compare."""
    rng = random.Random(seed)
    twin = Twin(start=start, seen=seen, archive=archive)
    off, frame = [0, 0], 1
    for ev in events:
        kind, d = ev[0], ev[1]
        if kind == "seen":
            twin.seen[d] = ev[2]
        elif kind == "gap":
            twin.gap(d, off[d], ev[2], frame, start + frame * 0.001)
            off[d] += ev[2]
            frame += 1
        else:
            for chunk in cuts(ev[2], how, rng):
                at = rng.randrange(1 << 20) if jumble else off[d]
                twin.feed(d, chunk, at, frame, start + frame * 0.001)
                off[d] += len(chunk)
                frame += 1
    if finish:
        twin.finish()
    return twin.check()


def every_way(events: list[Event], seeds: int = 3, **kw: Any) -> dict[str, Any]:
    """The same events whole, a byte at a time and at random cuts: each twin pair agrees."""
    out = drive(events, **kw)
    drive(events, how="bytes", **kw)
    for seed in range(seeds):
        drive(events, how="random", seed=seed, **kw)
    return out


# -- PostgreSQL bytes ------------------------------------------------------------------------

def msg(t: str, body: bytes = b"") -> bytes:
    return t.encode() + struct.pack(">I", len(body) + 4) + body


def cstr(s: str | bytes) -> bytes:
    return (s.encode() if isinstance(s, str) else s) + b"\x00"


def startup(user: str = "alice", db: str = "shop", app: str = "psql",
            extra: bytes = b"") -> bytes:
    body = struct.pack(">I", 196608) + cstr("user") + cstr(user) + cstr("database") + \
        cstr(db) + cstr("application_name") + cstr(app) + extra + b"\x00"
    return struct.pack(">I", len(body) + 4) + body


SSL_REQUEST = struct.pack(">II", 8, 80877103)
GSS_REQUEST = struct.pack(">II", 8, 80877104)
CANCEL = struct.pack(">IIII", 16, 80877102, 4242, 99)
AUTH_OK = msg("R", struct.pack(">I", 0))
READY = msg("Z", b"I")
PARAMS = b"".join(msg("S", cstr(k) + cstr(v)) for k, v in (
    ("server_version", "15.20"), ("TimeZone", "UTC"), ("client_encoding", "UTF8"),
    ("DateStyle", "ISO, MDY"), ("integer_datetimes", "on")))
KEY = msg("K", struct.pack(">II", 4242, 7))
DESC = msg("T", struct.pack(">H", 1) + cstr("v") + b"\x00" * 18)


def datarow(i: int) -> bytes:
    val = f"row-{i}".encode()
    return msg("D", struct.pack(">HI", 1, len(val)) + val)


def error(code: str = "42P01", text: str = "relation does not exist", **more: str) -> bytes:
    fields = [("S", "ERROR"), ("V", "ERROR"), ("C", code), ("M", text)] + \
        [(k, v) for k, v in more.items()]
    return msg("E", b"".join(k.encode() + cstr(v) for k, v in fields) + b"\x00")


def select(sql: str, rows: int, tag: str | None = None) -> tuple[bytes, bytes]:
    return (msg("Q", cstr(sql)),
            DESC + b"".join(datarow(i) for i in range(rows))
            + msg("C", cstr(tag or f"SELECT {rows}")) + READY)


def session(*exchanges: tuple[bytes, bytes], pipelined: bool = False,
            front0: bytes | None = None, back0: bytes | None = None) -> list[Event]:
    """Startup, authentication, then each (request, answer) in turn (or each request sent
    before the answer to the one before it)."""
    ev: list[Event] = [("feed", 0, startup() if front0 is None else front0),
                       ("feed", 1, AUTH_OK + PARAMS + KEY + READY if back0 is None else back0)]
    if not pipelined:
        for req, ans in exchanges:
            ev += [("feed", 0, req), ("feed", 1, ans)]
    else:
        for i, (req, _) in enumerate(exchanges):
            ev.append(("feed", 0, req))
            if i:
                ev.append(("feed", 1, exchanges[i - 1][1]))
        if exchanges:
            ev.append(("feed", 1, exchanges[-1][1]))
    return ev + [("feed", 0, msg("X"))]


def extended(sql: str, rows: int, stmt: str = "", portal: str = "", parse: bool = True,
             limit_hit: bool = False) -> tuple[bytes, bytes]:
    req = (msg("P", cstr(stmt) + cstr(sql) + b"\x00\x00") if parse else b"") + \
        msg("B", cstr(portal) + cstr(stmt) + b"\x00\x00\x00\x00\x00\x00") + \
        msg("D", b"P" + cstr(portal)) + msg("E", cstr(portal) + b"\x00\x00\x00\x00") + msg("S")
    ans = (msg("1") if parse else b"") + msg("2") + DESC + \
        b"".join(datarow(i) for i in range(rows)) + \
        (msg("s") if limit_hit else msg("C", cstr(f"SELECT {rows}"))) + READY
    return req, ans


# -- the lab's captures, through the Python TCP engine --------------------------------------

class EngineTwin(Twin):
    """A Twin as the engine's stream sink: the probes see the engine's directions."""

    def __init__(self, conn: Any, start: float) -> None:
        super().__init__(start=start, conn_id=conn.id)
        dirs = conn.dirs
        self.conn = conn
        self.conv = Conversation(conn.id, start_seen=lambda d: dirs[d].isn_seen,
                                 archive=Spill())

    def view(self) -> list[bool]:
        return [self.conn.dirs[0].isn_seen, self.conn.dirs[1].isn_seen]


def capture_twins(path: Path) -> list[EngineTwin]:
    from pktflow.capture.reader import open_capture
    from pktflow.pipeline import feed_capture
    from pktflow.tcp.engine import TcpEngine

    twins: list[EngineTwin] = []
    opened: list[Any] = []

    def sink(conn: Any) -> EngineTwin:
        first = opened[0].stats.first_ts
        assert first is not None  # the capture's first record is read before any connection
        twins.append(EngineTwin(conn, first))
        return twins[-1]

    engine = TcpEngine(sink_factory=sink, observer_factory=None, retired=None)
    with open_capture(str(path)) as cap:
        opened.append(cap)
        feed_capture(cap, engine)
    engine.finish()
    return twins


CAPTURES = sorted((ROOT / "captures").glob("*.pcap")) + \
    sorted((ROOT / "tests" / "regressions").glob("*.pcap"))


@pytest.mark.parametrize("path", CAPTURES, ids=[p.name for p in CAPTURES])
def test_lab_captures(path: Path) -> None:
    twins = capture_twins(path)
    assert twins
    reports = [t.check() for t in twins]
    if path.parent.name == "captures" and not path.name.startswith("tls"):
        assert any(r["protocol"] == "postgresql" and r["queries"] for r in reports)


def lossy(path: Path, out: Path, seed: int) -> Path:
    """A copy of a classic pcap with frames dropped, duplicated and cut short at random."""
    rng = random.Random(seed)
    raw = path.read_bytes()
    assert raw[:4] == b"\xd4\xc3\xb2\xa1"  # little-endian, microseconds
    head, pos, kept = [raw[:24]], 24, []
    while pos + 16 <= len(raw):
        ts_s, ts_us, incl, orig = struct.unpack_from("<IIII", raw, pos)
        body = raw[pos + 16:pos + 16 + incl]
        pos += 16 + incl
        roll = rng.random()
        if roll < 0.03:
            continue  # lost
        if roll < 0.05 and incl > 80:
            body = body[:rng.randint(60, incl - 1)]  # snapped short: the rest unseen
        kept.append(struct.pack("<IIII", ts_s, ts_us, len(body), orig) + body)
        if roll > 0.98:
            kept.append(kept[-1])  # seen twice
    out.write_bytes(b"".join(head + kept))
    return out


SMALL = [p for p in CAPTURES if p.stat().st_size < 3_000_000]


@pytest.mark.parametrize("path", SMALL, ids=[p.name for p in SMALL])
def test_lab_captures_with_loss(path: Path, tmp_path: Path) -> None:
    for seed in range(2):
        for t in capture_twins(lossy(path, tmp_path / f"lossy{seed}.pcap", seed)):
            t.check()


# -- crafted conversations -------------------------------------------------------------------

def test_simple_queries_cut_every_way() -> None:
    out = every_way(session(select("SELECT * FROM t", 40), select("SELECT 1", 1),
                            (msg("Q", cstr("")), msg("I") + READY)))
    assert [q["rows"] for q in out["queries"]] == [40, 1, None]
    assert out["backend_pid"] == 4242 and out["server_parameters"]["TimeZone"] == "UTC"


def test_pipelined_extended_protocol() -> None:
    ex = [extended("SELECT $1", 3, stmt="s1", portal="p1"),
          extended("SELECT $1", 2, stmt="s1", portal="p1", parse=False),
          extended("SELECT 2", 5, limit_hit=True),
          extended("SELECT 3", 0, stmt="s2")]
    out = every_way(session(*ex, pipelined=True))
    # an empty query's tag is "": PortalSuspended takes its place
    every_way(session((msg("Q", cstr("")), msg("I") + msg("s") + READY)))
    assert [q["sql"] for q in out["queries"]] == ["SELECT $1", "SELECT $1", "SELECT 2",
                                                  "SELECT 3"]
    assert out["queries"][2]["command_tag"] == "PortalSuspended"


def test_error_in_a_batch_closes_the_skipped_executes() -> None:
    req = msg("P", cstr("") + cstr("SELEC oops") + b"\x00\x00") + \
        msg("B", b"\x00" * 8) + msg("E", b"\x00" * 5) + \
        msg("B", b"\x00" * 8) + msg("E", b"\x00" * 5) + msg("S")
    every_way(session((req, error("42601", "syntax error") + READY), select("SELECT 1", 1)))


def test_copy_out_in_both_and_fail() -> None:
    copy_out = (msg("Q", cstr("COPY t TO STDOUT")),
                msg("H", b"\x00\x00\x01\x00\x00") + msg("d", b"1\n") * 50 + msg("c")
                + msg("C", cstr("COPY 50")) + READY)
    copy_in = (msg("Q", cstr("COPY t FROM STDIN")), msg("G", b"\x00\x00\x01\x00\x00"))
    rows_in = (msg("d", b"x\n") * 30 + msg("c"), msg("C", cstr("COPY 30")) + READY)
    fail = (msg("Q", cstr("COPY t FROM STDIN")) + msg("f", cstr("nope")),
            msg("G", b"\x00\x00\x01\x00\x00") + error("57014", "COPY from stdin failed")
            + READY)
    both = (msg("Q", cstr("START_REPLICATION")), msg("W", b"\x00\x00\x00") + msg("d", b"w") * 5)
    out = every_way(session(copy_out, copy_in, rows_in, fail, both))
    assert [q["kind"] for q in out["queries"]] == ["copy"] * 4


def test_ssl_and_gss_negotiation() -> None:
    ex = select("SELECT 1", 1)
    every_way([("feed", 0, SSL_REQUEST), ("feed", 1, b"N")] + session(ex)[:1]
              + [("feed", 1, AUTH_OK + READY), ("feed", 0, ex[0]), ("feed", 1, ex[1])])
    every_way([("feed", 0, SSL_REQUEST + startup()), ("feed", 1, b"N" + AUTH_OK + READY)])
    for answer in (b"S", b"G"):
        for ask in (SSL_REQUEST, GSS_REQUEST):
            every_way([("feed", 0, ask), ("feed", 1, answer + b"\x16\x03\x03" + bytes(50)),
                       ("feed", 0, b"\x16\x03\x01\x02\x00" + b"\x01" * 100)])
    # an answer that is neither: decoding goes on with typed framing
    every_way([("feed", 0, SSL_REQUEST), ("feed", 1, b"E" + struct.pack(">I", 4) + READY),
               ("feed", 0, startup())])
    every_way([("feed", 0, GSS_REQUEST + startup()), ("feed", 1, b"N"), ("feed", 1, READY)])


def test_cancel_request_and_odd_startups() -> None:
    every_way([("feed", 0, CANCEL)])
    every_way([("feed", 0, CANCEL + msg("Q", cstr("SELECT 1")))])
    dup = startup(extra=cstr("user") + cstr("bob") + cstr("") + cstr("x") + b"\xff\xfe\x00")
    every_way([("feed", 0, dup), ("feed", 1, AUTH_OK + READY)])
    many = struct.pack(">I", 196608) + b"".join(cstr(f"k{i}") + cstr(f"v{i}") for i in range(40)) \
        + cstr("user") + cstr("late") + b"\x00"
    every_way([("feed", 0, struct.pack(">I", len(many) + 4) + many)])
    odd = struct.pack(">I", 0x00030005) + cstr("database") + b"\xc3\x28db"
    every_way([("feed", 0, struct.pack(">I", len(odd) + 4) + odd), ("feed", 1, AUTH_OK)])
    for junk in (struct.pack(">II", 8, 1234), struct.pack(">II", 20000, 196608),
                 struct.pack(">II", 4, 196608), b"GET / HTTP/1.1\r\n\r\n"):
        every_way([("feed", 0, junk), ("feed", 1, b"HTTP/1.1 400 Bad\r\n\r\n")])
        every_way([("feed", 0, junk + msg("Q", cstr("SELECT 1")) * 3)], seen=(False, False))


def client_hello(alpn: list[bytes] | None, pad: int = 0, raw: bytes | None = None) -> bytes:
    ext = b""
    if alpn is not None:
        names = b"".join(bytes([len(a)]) + a for a in alpn)
        ext = struct.pack(">HHH", 0x0010, len(names) + 2, len(names)) + names
    ext = struct.pack(">HH", 0x000a, pad) + bytes(pad) + (ext if raw is None else raw)
    hello = b"\x03\x03" + bytes(32) + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00" + \
        struct.pack(">H", len(ext)) + ext
    hs = b"\x01" + len(hello).to_bytes(3, "big") + hello
    return b"\x16\x03\x01" + struct.pack(">H", len(hs)) + hs


def test_direct_tls() -> None:
    for alpn in ([b"postgresql"], [b"h2", b"postgresql"], [b"h2", b"http/1.1"], [],
                 [b"p\xffs\x01tgres"], None):
        for pad in (0, 3000):
            hello = client_hello(alpn, pad)
            every_way([("feed", 0, hello), ("feed", 1, b"\x16\x03\x03" + bytes(60))])
            drive([("feed", 0, hello)], seen=(False, True))
    hello = client_hello([b"postgresql"])
    for n in range(0, len(hello), 7):  # cut short: incomplete, then a gap or the end
        drive([("feed", 0, hello[:n])])
        drive([("feed", 0, hello[:n]), ("gap", 0, 10), ("feed", 0, msg("Q", cstr("x")))])
    # names read as Python slices them: a name may run past its extension (not past the hello)
    for raw in (struct.pack(">HHH", 0x0010, 7, 11) + b"\x0apostgresql",
                struct.pack(">HHH", 0x0010, 14, 12) + b"\x02h2\x0apostgresql",
                struct.pack(">HHH", 0x0010, 40, 40) + b"\x02h2\x30postgres",
                struct.pack(">HHH", 0x0010, 1, 11) + b"\x0apostgresql",
                struct.pack(">HHH", 0x0010, 0, 0) + b"\x0apostgresql"):
        drive([("feed", 0, client_hello(None, raw=raw))])
    big = client_hello([b"postgresql"], pad=40000)  # longer than MAX_CLIENT_HELLO
    every_way([("feed", 0, big)], seeds=1)
    for n in range(5, 90):  # ClientHellos cut inside: what the parser makes of the rest
        cut = bytearray(hello)
        cut[3:5] = n.to_bytes(2, "big")
        drive([("feed", 0, bytes(cut))])


def test_nul_characters_in_findings() -> None:
    """A U+0000 in a finding (an ALPN name, SQL with a NUL) is part of its message."""
    twin = Twin()
    twin.feed(0, client_hello([b"h2\x00x"]), 0, 1, 1.0)
    twin.finish()
    assert twin.probes[0].findings() == twin.conv.findings


def test_authentication_names() -> None:
    back = msg("R", struct.pack(">I", 10) + cstr("SCRAM-SHA-256") + b"\x00") + \
        msg("R", struct.pack(">I", 11) + b"r=abc") + msg("R", struct.pack(">I", 12) + b"v=x") + \
        msg("R", struct.pack(">I", 77)) + msg("R", b"\x01") + msg("R", struct.pack(">I", 1)) + \
        msg("R", struct.pack(">I", 77)) + msg("R", struct.pack(">I", 0xFFFFFFFF)) + \
        msg("R", struct.pack(">I", 5) + b"salt") + AUTH_OK + READY
    front = startup() + msg("p", cstr("SCRAM-SHA-256") + b"\x00\x00\x00\x04abcd")
    every_way([("feed", 0, front), ("feed", 1, back[:60]), ("feed", 0, msg("p", b"c=biws")),
               ("feed", 1, back[60:]), ("feed", 0, msg("p", cstr("md5xyz")))])
    for code in (3, 5, 7, 8, 9, 10, 11, 12, 99):
        drive([("feed", 0, startup()), ("feed", 1, msg("R", struct.pack(">I", code))),
               ("feed", 0, msg("p", b"secret"))])
    many = b"".join(msg("R", struct.pack(">I", 1000 + i)) for i in range(300))
    drive([("feed", 0, startup()), ("feed", 1, many + AUTH_OK + READY)])


def test_server_parameters() -> None:
    params = [("application_name", "a"), ("TimeZone", "UTC"), ("application_name", "b")] + \
        [(f"p{k}", "x") for k in range(70)] + [("TimeZone", "CET"), ("p1", "changed")]
    body = b"".join(msg("S", cstr(k) + cstr(v)) for k, v in params)
    odd = msg("S", b"no-nul") + msg("S", b"") + msg("S", b"a\x00b") + \
        msg("S", b"k\x00v\x00more\x00") + msg("S", b"\xff\x00\xfe") + \
        msg("S", b"x" * 300 + b"\x00y")
    every_way([("feed", 0, startup()), ("feed", 1, AUTH_OK + odd + body + READY)], seeds=1)
    # a ParameterStatus (and a short BackendKeyData) while a query waits: charged to it
    ex = (msg("Q", cstr("SET x = 1")),
          msg("S", cstr("x") + cstr("1")) + msg("S", b"") + msg("K", b"\x01") + msg("K", b"")
          + msg("C", cstr("SET")) + READY)
    every_way(session(ex))


def test_errors_and_notices() -> None:
    fails = [(msg("Q", cstr(f"SELECT   *\n FROM\tmissing_{i} " + "x" * (i * 3))),
              msg("N", b"SNOTICE\x00Mhi\x00\x00") + error("42P01", f"missing {i}", D="d",
                                                         H="h", P="15") + READY)
             for i in range(25)]
    odd = [(msg("Q", cstr("SELECT 1")), msg("E", b"") + READY),
           (msg("Q", cstr("SELECT 2")), msg("E", b"Mno code\x00\x00") + READY),
           (msg("Q", cstr("SELECT 3")), msg("E", b"C1\x00C2\x00M\xff\x00Zz\x00") + READY),
           (msg("Q", cstr("SELECT 4")), msg("E", b"\x00\x00C") + READY),
           (msg("Q", cstr("é " * 40)), error() + READY)]
    every_way(session(*odd, *fails), seeds=1)
    # errors outside any query: during authentication
    every_way([("feed", 0, startup()), ("feed", 1, error("28P01", "password failed"))])
    every_way([("feed", 0, startup()), ("feed", 1, msg("E", b"Mx\x00\x00") + msg("E", b""))])


def test_command_tags() -> None:
    tags = ["SELECT 5", "INSERT 0 3", "UPDATE 2", "DELETE 0", "MERGE 1", "FETCH 9", "MOVE 4",
            "COPY 7", "CREATE TABLE", "SELECT", "", "SELECT 99999999999999999999999999",
            "SELECT 9223372036854775807", "SELECT\x1c12", "  SELECT \t 3  ", "SELECT -1",
            "SELECT 1e3", "select 5", "SELECT ٣", "SELECT\u20035", "ÉLECT 5", "SELECT 0005",
            "INSERT 0 " + "9" * 19, "SELECT 000000000000000000000000000012"]
    for tag in tags:
        ex = (msg("Q", cstr("q")), DESC + datarow(1) + msg("C", cstr(tag)) + READY)
        drive(session(ex))
    # tags summed: one query's CommandCompletes past 64 bits
    big = "SELECT " + str(2 ** 62)
    ex = (msg("Q", cstr("q1; q2; q3")), b"".join(msg("C", cstr(big)) for _ in range(5)) + READY)
    drive(session(ex))
    ex = (msg("Q", cstr("q1; q2")), msg("C", cstr("SELECT " + str(2 ** 63 - 1)))
          + msg("C", cstr("SELECT 1")) + READY)
    drive(session(ex))


def test_a_count_of_non_ascii_digits_is_no_count() -> None:
    """str.isdigit() accepts "²" and "٣", int() refuses the first: a hostile tag once made the
    Python decoder raise and the whole pass fail. Neither twin counts rows from them now."""
    for tag in ("SELECT ²", "SELECT ٣", "COPY 1²", "SELECT 12"):
        twin = Twin()
        twin.feed(0, startup() + msg("Q", cstr("q")), 0, 1, 1.0)
        twin.feed(1, AUTH_OK + READY + msg("C", cstr(tag)) + READY, 0, 2, 2.0)
        twin.finish()
        pg = twin.check()
        assert pg["queries"][0]["rows"] == (12 if tag == "SELECT 12" else 0), tag


def test_function_call_and_odd_frontend_messages() -> None:
    fc = (msg("F", struct.pack(">IHH", 1598, 0, 0)), msg("V", struct.pack(">i", 4) + b"abcd")
          + READY)
    short = (msg("F", b"\x01"), READY)
    bind_unknown = (msg("B", cstr("p9") + cstr("never-parsed")) + msg("E", cstr("p9"))
                    + msg("E", b"") + msg("E", b"nonul") + msg("S"),
                    msg("2") + msg("C", cstr("SELECT 0")) + msg("C", cstr("SELECT 1")) + READY)
    parse_odd = (msg("P", b"noname") + msg("P", cstr("s\xff") + b"SELECT \xe9") +
                 msg("B", cstr("") + b"s\xff") + msg("E", b"\x00") + msg("C", b"S\x00") +
                 msg("H") + msg("S"), msg("1") + msg("2") + msg("n") + msg("3") + READY)
    every_way(session(fc, short, bind_unknown, parse_odd))


def test_sql_text_decoding_and_cap() -> None:
    long_sql = "SELECT '" + "é" * (SQL_CAP // 2) + "x" * 100 + "'"
    ex = [(msg("Q", cstr(long_sql)), msg("C", cstr("SELECT 1")) + READY),
          (msg("Q", b"SELECT \xff\xfe bad utf8 \xe2\x82\x00\x00\x00"), READY),
          (msg("Q", b"SELECT 1\x00; inner nul"), READY),
          (msg("P", cstr("big") + cstr("SELECT " + "y" * (SQL_CAP + 5))) +
           msg("B", cstr("") + cstr("big")) + msg("E", cstr("")) + msg("S"),
           msg("1") + msg("2") + msg("C", cstr("SELECT 0")) + READY)]
    every_way(session(*ex), seeds=1)


def test_oversized_messages_are_read_up_to_keep_cap() -> None:
    huge = "SELECT '" + "z" * (C.KEEP_CAP + 5000) + "'"
    ex = [(msg("Q", cstr(huge)), msg("C", cstr("SELECT 1")) + READY),
          (msg("Q", cstr("SELECT 2")),
           msg("T", b"\x00" * (C.KEEP_CAP + 100)) + datarow(1) + msg("C", cstr("SELECT 1"))
           + READY),
          (msg("Q", cstr("SELECT 3")), error("XX000", "m" * (C.KEEP_CAP + 10)) + READY),
          (msg("Q", cstr("SELECT 4")), error("XX000", "n" * (C.KEEP_CAP + 9000)) + READY)]
    drive(session(*ex))
    drive(session(*ex), how=[1460] * 2000)
    drive(session(*ex), how="random", seed=3)
    # more than KEEP_CAP bytes of an unfinished message in one segment: read up to KEEP_CAP
    for req, ans in ex:
        for d, data in ((0, req), (1, ans)):
            for cut in (2, C.KEEP_CAP + 5, C.KEEP_CAP + 2000, C.KEEP_CAP - 3):
                rest = req if d else ans
                events = [("feed", 0, startup()), ("feed", 1, AUTH_OK + READY),
                          ("feed", d, data[:cut]), ("feed", d, data[cut:]),
                          ("feed", 1 - d, rest)]
                drive(events)


def test_messages_at_keep_cap() -> None:
    for ln in (C.KEEP_CAP - 1, C.KEEP_CAP, C.KEEP_CAP + 1):
        body = b"C" + b"Y" * 5 + b"\x00M" + b"k" * (ln - 4 - 9) + b"\x00"
        ans = msg("E", body[:ln - 4]) + READY
        assert len(ans) == ln + 1 + len(READY)
        for cut in (100, ln - 10):
            drive([("feed", 0, startup() + msg("Q", cstr("q"))), ("feed", 1, AUTH_OK + READY),
                   ("feed", 1, ans[:cut]), ("feed", 1, ans[cut:])])


def test_boundary_search_rules() -> None:
    """Mid-stream: which chains of messages prove a boundary (and a side)."""
    big = 20 << 20  # past MAX_CONTROL
    junk = b"\xee\x01\x02"
    backs = [READY + b"d" + struct.pack(">I", big) + b"x" * 100,
             READY + b"D" + struct.pack(">I", big) + b"x" * 100,
             READY + b"T" + struct.pack(">I", big) + b"x" * 100,
             msg("Z", b"II") + READY + READY + msg("C", cstr("SELECT 1")),
             READY + msg("C", cstr("SELECT 1")),  # two messages, ending at the buffer's end
             READY,
             msg("1") + msg("2") + b"D" + struct.pack(">I", 30),
             datarow(1) * 3 + READY,
             READY + READY + b"C\x00\x00",  # a header cut short at the buffer's end
             msg("Z") + READY + READY + msg("C", cstr("SELECT 1")),
             READY + b"T" + struct.pack(">I", 1 << 24) + b"x" * 10,  # MAX_CONTROL
             READY + b"T" + struct.pack(">I", (1 << 24) + 1) + b"x" * 10]
    fronts = [msg("Q", cstr("SELECT 1")) + b"D" + struct.pack(">I", big),
              msg("S") + msg("S") + msg("H"),
              msg("P", b"\x00x\x00\x00\x00") + msg("B", b"\x00\x00") + msg("E", b"\x00" * 5)]
    for back in backs:
        for front in fronts:
            for seen in ((False, False), (True, False)):
                for how in (None, "bytes"):
                    drive([("feed", 1, junk + back), ("feed", 0, junk[:2] + front)], seen=seen,
                          how=how)
                    drive([("feed", 0, junk + front), ("feed", 1, back)], seen=seen, how=how)


def test_bulk_rows_straddling_segments_and_gaps() -> None:
    big = msg("D", b"\x00\x01" + struct.pack(">I", 2000) + b"r" * 2000)
    ex = (msg("Q", cstr("SELECT big")), DESC + big * 30 + datarow(1) * 50
          + msg("C", cstr("SELECT 80")) + READY)
    events = session(ex)
    every_way(events, seeds=2)
    back = events[3][2]
    for at, n in ((200, 5000), (len(DESC) + 10, 1900), (len(DESC) + 5, 100),
                  (len(back) - 40, 30), (len(DESC) + 2006, 2010), (len(DESC) + 2, 2)):
        cut = events[:3] + [("feed", 1, back[:at]), ("gap", 1, n), ("feed", 1, back[at + n:])] \
            + events[4:]
        every_way(cut, seeds=1)


def test_bulk_runs_cut_anywhere_count_as_one_walk() -> None:
    """DataRow and CopyData first seen in one walk take their places in the counts in that
    order, wherever a segment boundary cuts the bytes."""
    for front in (startup(), startup() + msg("Q", cstr("SELECT 1"))):
        back = AUTH_OK + READY + msg("d", b"x") + datarow(1) + msg("d", b"y") + datarow(2) \
            + msg("C", cstr("SELECT 1")) + READY
        for cut in range(len(AUTH_OK + READY), len(back)):
            for cut2 in (cut + 3, cut + 9, len(back)):
                drive([("feed", 0, front), ("feed", 1, back[:cut]), ("feed", 1, back[cut:cut2]),
                       ("feed", 1, back[cut2:])])


def test_gaps_resynchronise() -> None:
    exs = [select(f"SELECT {i}", i % 4) for i in range(12)]
    events = session(*exs)
    for i, ev in enumerate(events):
        if ev[0] != "feed" or i < 2:
            continue
        for frac in (0.0, 0.3, 0.9):
            data = ev[2]
            at = int(len(data) * frac)
            cut = events[:i] + [("feed", ev[1], data[:at]), ("gap", ev[1], 7)] + \
                [("feed", ev[1], data[at + 7:])] + events[i + 1:]
            drive(cut)
            drive(cut, how="random", seed=i)
    # a gap at the very start, then the rest of the conversation
    drive([("gap", 0, 100), ("gap", 1, 50)] + events[2:])
    drive([("gap", 1, 50)] + events)


def test_mid_stream_roles_and_sync() -> None:
    back = b"".join(datarow(i) for i in range(5))[7:] + msg("C", cstr("SELECT 9")) + READY \
        + DESC + datarow(1) + msg("C", cstr("SELECT 1")) + READY
    front = msg("Q", cstr("SELECT 1")) + msg("Q", cstr("SELECT 2"))
    for seen in ((False, False), (True, False), (False, True)):
        every_way([("feed", 0, back), ("feed", 1, front)], seen=seen, seeds=2)
        every_way([("feed", 1, front[3:]), ("feed", 0, back)], seen=seen, seeds=2)
    # only DataRows (which frame as Describe too): no proof until the window is full
    rows = b"".join(datarow(i) for i in range(30000))
    drive([("feed", 1, rows[3:]), ("feed", 0, front)], seen=(False, False),
          how=[65536] * 100)
    drive([("feed", 1, rows[3:100000])], seen=(False, False))  # settled at finish
    # garbage that never frames
    rnd = random.Random(5)
    junk = bytes(rnd.randrange(256) for _ in range(300_000))
    drive([("feed", 0, junk), ("feed", 1, junk[:1000])], seen=(False, False), how=[4096] * 100)
    drive([("feed", 0, b"\x00" * 300_000)], seen=(False, False), how=[1460] * 300)
    drive([("feed", 0, b"\x00" * 300_000)], seen=(False, True), how=[65536] * 10)


def test_malformed_framing() -> None:
    front = startup() + msg("Q", cstr("SELECT 1"))
    for bad in (b"D\x00\x00\x00\x02", b"D\xff\xff\xff\xff", b"Q\x00\x00\x00\x09abcd",
                b"?\x00\x00\x00\x04", b"Z\x00\x00\x00\x01", b"d\x00\x00\x00\x00",
                datarow(1) + b"D\x00\x00\x00\x03", datarow(1) + b"D\x7f\x00\x00\x00"):
        every_way([("feed", 0, front), ("feed", 1, AUTH_OK + READY + DESC + bad + READY)],
                  seeds=1)
        every_way([("feed", 0, startup() + bad), ("feed", 1, AUTH_OK + READY)], seeds=1)
        every_way([("feed", 0, startup()), ("feed", 1, bad)], seeds=1)
        every_way([("feed", 1, bad), ("feed", 0, bad)], seen=(False, False), seeds=1)


def test_many_queries_are_archived() -> None:
    kinds = [select("SELECT 1", 1), extended("SELECT $1", 2),
             (msg("Q", cstr("COPY t TO STDOUT")),
              msg("H", b"\x00\x00\x01\x00\x00") + msg("d", b"1\n") * 3 + msg("c")
              + msg("C", cstr("COPY 3")) + READY),
             (msg("Q", cstr("SELECT * FROM nope")), error() + READY),
             (msg("S"), READY)]
    rounds = [kinds[(i * 7) % 5] for i in range(400)]
    for pipelined in (False, True):
        out = drive(session(*rounds, pipelined=pipelined))
        assert len(out["queries"]) == sum(r is not kinds[-1] for r in rounds)
        drive(session(*rounds, pipelined=pipelined), archive=False)
    drive(session(*rounds[:200], pipelined=True), how="random", seed=1)
    # archiving runs as the 128th query in memory is added: shifted so that it meets every
    # moment of the pattern (a lone Sync's ReadyForQuery charged to the last answered query)
    for shift in range(6):
        drive(session(*([kinds[0]] * shift + rounds[:175]), pipelined=True))


def test_queries_beyond_the_cap() -> None:
    n = C.MAX_QUERIES + 30
    q, answer = select("SELECT 1", 1)
    reqs = [("feed", 0, q), ("feed", 1, answer)] * n
    for archive in (True, False):
        out = drive([("feed", 0, startup()), ("feed", 1, AUTH_OK + READY)] + reqs,
                    archive=archive)
        assert out["queries_total"] == n and len(out["queries"]) == C.MAX_QUERIES
    # never answered: all pending
    drive([("feed", 0, startup()), ("feed", 1, AUTH_OK + READY),
           ("feed", 0, q * (C.MAX_QUERIES + 5))], archive=True)


def test_named_statements_are_bounded() -> None:
    parse = b"".join(msg("P", cstr(f"s{i}") + cstr(f"SELECT {i}") + b"\x00\x00")
                     for i in range(C.MAX_NAMES + 20))
    use = b"".join(msg("B", cstr(f"p{i}") + cstr(f"s{i}")) + msg("E", cstr(f"p{i}"))
                   for i in (0, 5, 25, C.MAX_NAMES + 19)) + \
        msg("P", cstr("s30") + cstr("again")) + msg("B", cstr("") + cstr("s30")) + \
        msg("E", b"\x00") + msg("S")
    out = drive([("feed", 0, startup() + parse + use), ("feed", 1, AUTH_OK + READY)])
    assert [q["sql"] for q in out["queries"]] == ["", "", "SELECT 25",
                                                  f"SELECT {C.MAX_NAMES + 19}", "again"]


def test_goodput_and_times() -> None:
    twin = Twin(start=1700000000.123456)
    twin.feed(0, startup() + msg("Q", cstr("SELECT big")), 0, 1, 1700000000.5)
    back = AUTH_OK + READY + DESC + datarow(1) * 1000
    twin.feed(1, back, 0, 2, 1700000000.75)
    twin.gap(1, len(back), 1 << 40, 3, 1700000000.7500002)
    twin.feed(1, msg("C", cstr("SELECT 1")) + READY, len(back) + (1 << 40), 4,
              1700000000.7500005)
    twin.finish()
    twin.check()
    # a response of huge claimed DataRows within a microsecond: goodput past 64 bits
    twin = Twin(start=10.0)
    twin.feed(0, startup() + msg("Q", cstr("q")), 0, 1, 10.5)
    back = AUTH_OK + READY + b"D" + struct.pack(">I", (1 << 30))
    twin.feed(1, back, 0, 2, 11.0)
    off = len(back)
    for i in range(20):
        twin.gap(1, off, (1 << 30) - 4, 3 + i, 11.0 + i * 1e-7)
        off += (1 << 30) - 4
        twin.feed(1, b"D" + struct.pack(">I", 1 << 30), off, 3 + i, 11.0 + (i + 1) * 1e-7)
        off += 5
    twin.finish()
    twin.check()


def test_to_json_before_finish_and_twice() -> None:
    twin = Twin()
    twin.feed(0, startup() + msg("Q", cstr("SELECT 1")), 0, 1, 1.0)
    twin.check()
    twin.feed(1, AUTH_OK + READY + DESC + datarow(1), 0, 2, 2.0)
    twin.check()
    twin.check()
    twin.finish()
    twin.check()


def test_no_memory_kept_after_free() -> None:
    """Every object and buffer a probe makes is given back (tracemalloc sees PyMem_*)."""
    import gc
    import tracemalloc

    kinds = [select("SELECT 1", 3), extended("SELECT $1", 2, stmt="s", portal="p"),
             (msg("Q", cstr("SELECT * FROM nope")), error() + READY),
             (msg("Q", cstr("COPY t TO STDOUT")),
              msg("H", b"\x00\x00\x00") + msg("d", b"1\n") * 3 + msg("c")
              + msg("C", cstr("SELECT 99999999999999999999999")) + READY)]
    front = b"".join(k[0] for k in kinds * 50) + msg("Q", cstr("never answered"))
    back = AUTH_OK + PARAMS + KEY + READY + b"".join(k[1] for k in kinds * 50)

    def once() -> None:
        for archive in (Spill(), None):
            p = core.ConversationProbe("c1", 0.0, 2, 4, archive=archive)
            p.set_view(0, True, False)
            p.set_view(1, True, False)
            p.feed(0, startup() + front, 0, 1, 1.0)
            for i in range(0, len(back), 333):
                p.feed(1, back[i:i + 333], i, 2 + i, 2.0 + i)
            p.gap(1, len(back), 10, 5, 3.0)
            p.feed(1, READY * 3 + b"\xff" * 300, len(back) + 10, 6, 4.0)
            p.feed(0, b"\x00" * 70000, len(startup() + front), 7, 5.0)
            p.finish()
            p.to_json(2, 2)
            p.findings()
            p.leg_queries(10 ** 6)
            del p
        q = core.ConversationProbe("c2", 0.0)
        q.feed(0, b"\x00" * 300_000, 0, 1, 1.0)  # a sync window given up
        q.feed(1, client_hello([b"h2"]), 0, 2, 1.0)
        r = core.ConversationProbe("c3", 0.0)  # a search that keeps undecided positions
        for i in range(3):
            r.feed(1, b"D\x00\x01\x00\x00" * 1000, i * 5000, 1 + i, 1.0)
        del q, r

    for _ in range(3):
        once()
    gc.collect()
    tracemalloc.start()
    try:
        once()
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(10):
            once()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert after - before < 2_000, after - before


# -- random and hostile bytes ----------------------------------------------------------------

VOCAB = [startup(), SSL_REQUEST, GSS_REQUEST, CANCEL, b"N", b"S", AUTH_OK, READY, PARAMS, KEY,
         DESC, datarow(1), datarow(2) * 3, msg("C", cstr("SELECT 1")), msg("C", cstr("COPY 2")),
         msg("I"), error(), msg("N", b"x\x00"), msg("1"), msg("2"), msg("3"), msg("n"),
         msg("s"), msg("t", b"\x00\x00"), msg("G", b"\x00\x00\x00"), msg("H", b"\x00\x00\x00"),
         msg("W", b"\x00\x00\x00"), msg("d", b"row\n"), msg("c"), msg("f", b"no\x00"),
         msg("Q", cstr("SELECT 1")), msg("Q", cstr("SELECT\n  2")), msg("P", b"s\x00SELECT 3\x00"),
         msg("B", b"\x00s\x00"), msg("E", b"\x00\x00\x00\x00\x00"), msg("D", b"S\x00"),
         msg("S"), msg("H"), msg("X"), msg("F", b"\x00\x00\x06\x3e"), msg("p", b"pw\x00"),
         msg("R", struct.pack(">I", 10)), msg("R", struct.pack(">I", 3)),
         msg("V", b"\x00\x00\x00\x00"), client_hello([b"postgresql"])[:40], b"\x16\x03\x01",
         b"D\x00\x00\x01\x00", b"\x00\x00\x00", b"Z\x00\x00\x00\x05"]


@st.composite
def conversations(draw: Any) -> list[Event]:
    events: list[Event] = []
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(("vocab", "vocab", "vocab", "bytes", "gap", "seen")))
        d = draw(st.integers(0, 1))
        if kind == "vocab":
            parts = draw(st.lists(st.sampled_from(VOCAB), min_size=1, max_size=6))
            events.append(("feed", d, b"".join(parts)))
        elif kind == "bytes":
            events.append(("feed", d, draw(st.binary(min_size=1, max_size=64))))
        elif kind == "gap":
            events.append(("gap", d, draw(st.sampled_from((1, 3, 5, 100, 70000)))))
        else:
            events.append(("seen", d, draw(st.booleans())))
    return events


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations(), st.booleans(), st.booleans(), st.integers(0, 3))
def test_random_conversations(events: list[Event], seen0: bool, seen1: bool,
                              seed: int) -> None:
    drive(events, seen=(seen0, seen1))
    drive(events, seen=(seen0, seen1), how="random", seed=seed)
    drive(events, seen=(seen0, seen1), how="random", seed=seed, jumble=True)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600), st.binary(max_size=600), st.booleans(), st.integers(0, 9))
def test_arbitrary_bytes(front: bytes, back: bytes, seen: bool, seed: int) -> None:
    events = [("feed", 0, front), ("feed", 1, back)]
    drive(events, seen=(seen, seen))
    drive(events, seen=(seen, not seen), how="random", seed=seed)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 3000), st.binary(min_size=1, max_size=8), st.booleans(),
       st.integers(0, 9))
def test_mutated_streams(at: int, junk: bytes, which: bool, seed: int) -> None:
    events = session(select("SELECT * FROM t", 15), extended("SELECT 2", 3),
                     (msg("Q", cstr("COPY t TO STDOUT")),
                      msg("H", b"\x00\x00\x00") + msg("d", b"1\n") * 5 + msg("c") + READY))
    flat0 = b"".join(e[2] for e in events if e[1] == 0)
    flat1 = b"".join(e[2] for e in events if e[1] == 1)
    if which:
        flat1 = flat1[:at] + junk + flat1[at + len(junk):]
    else:
        flat0 = flat0[:at] + junk + flat0[at + len(junk):]
    drive([("feed", 0, flat0), ("feed", 1, flat1)], how="random", seed=seed)
