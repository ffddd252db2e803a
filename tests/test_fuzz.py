"""Fuzzing the three parsers with hypothesis, seeded from a real capture, end to end.

Invariant: whatever the bytes, pktflow finishes with a report or with its own PktflowError,
never another exception and never a hang. Each stage is fuzzed through a capture file that
reaches it: the capture reader on mutated file bytes, the TCP engine on mutated packet
sequences written as captures, the PostgreSQL decoder on mutated or random streams carried by
a TCP connection; all through analyze(), and the CLI's text report on mutated files. The
inputs that once broke them are kept as explicit examples and as files in tests/regressions/.
"""

from __future__ import annotations

import faulthandler
import gzip
import io
import os
import signal
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from craft import _block
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tcpfeed import Flow, write_capture

from pktflow._core import ACK, FIN, PSH, RST, SYN
from pktflow.cli import Env, main
from pktflow.errors import ExitCode, NotACaptureError, PktflowError
from pktflow.pipeline import Options, analyze

ROOT = Path(__file__).resolve().parent.parent
SEED_FILE = ROOT / "captures" / "seqscan-10k-direct-loopback.pcap"
SEED = SEED_FILE.read_bytes()[:8192]  # header, handshake, startup, the query, first rows
# both legs through PgBouncer, so the relay pairing runs too
POOLED = (ROOT / "captures" / "seqscan-10k-pgbouncer-bridge.pcap").read_bytes()[:16384]
REGRESSIONS = Path(__file__).resolve().parent / "regressions"

# Bounded: the whole module stays well under two minutes on two cores, and derandomized so a
# run is repeatable. PKTFLOW_FUZZ_EXAMPLES=5000 searches longer with fresh randomness.
_LONG = os.environ.get("PKTFLOW_FUZZ_EXAMPLES")
FUZZ = settings(max_examples=int(_LONG or 800), deadline=None, derandomize=not _LONG,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
# the CLI also writes the text report: slower per example, searched less
CLI_FUZZ = settings(FUZZ, max_examples=int(_LONG or 200))
PER_EXAMPLE_S = 20  # far above any real example (milliseconds); catches hangs


@contextmanager
def time_limit(seconds: int = PER_EXAMPLE_S) -> Iterator[None]:
    """Turn a hang into a test failure rather than a stuck test run: in Python code (the
    report's mapping, the verdicts) a TimeoutError; in the core, which does not return to
    Python while it loops, faulthandler dumps the stacks and ends the run a little later."""
    def fire(signum: int, frame: object) -> None:
        raise TimeoutError(f"no result within {seconds} s: a hang")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    faulthandler.dump_traceback_later(seconds + 10, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _pcap_records(data: bytes) -> list[tuple[float, bytes]]:
    """(time, frame) of each whole record of a microsecond little-endian pcap."""
    out, pos = [], 24
    while pos + 16 <= len(data):
        sec, usec, caplen = struct.unpack_from("<III", data, pos)
        if pos + 16 + caplen > len(data):
            break
        out.append((sec + usec / 1e6, data[pos + 16:pos + 16 + caplen]))
        pos += 16 + caplen
    return out


def _as_pcapng(frames: list[bytes]) -> bytes:
    """The seed's frames as pcapng: section, interface (ns resolution), packets, statistics."""
    out = [_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)),
           _block(1, struct.pack("<HHI", 1, 0, 262144) + struct.pack("<HHB3x", 9, 1, 9)
                  + b"\x00" * 4)]
    t = 1_700_000_000 * 10**9
    for i, f in enumerate(frames):
        ts = t + i * 100_000
        out.append(_block(6, struct.pack("<IIIII", 0, ts >> 32, ts & 0xFFFFFFFF, len(f), len(f))
                          + f))
    out.append(_block(5, struct.pack("<III", 0, 0, 0) + struct.pack("<HHQ", 5, 8, 3)
                      + b"\x00" * 4))
    return b"".join(out)


SEED_RECORDS = _pcap_records(SEED)
SEED_NG = _as_pcapng([f for _, f in SEED_RECORDS])
SEED_GZ = gzip.compress(SEED, mtime=0)  # mutations hit the deflate stream and the gzip trailer


def _tcp_packet(frame: int, ts: float, eth: bytes) -> tuple[Any, ...]:
    """An Ethernet/IPv4/TCP frame as a tcpfeed packet tuple (frame, ts, src, dst, sport,
    dport, seq, ack, flags, win, wire payload length, payload, options)."""
    assert struct.unpack_from("!H", eth, 12)[0] == 0x0800
    ip = eth[14:]
    ihl, total = (ip[0] & 15) * 4, struct.unpack_from("!H", ip, 2)[0]
    assert ip[9] == 6
    tcp = ip[ihl:total]
    sport, dport, seq, ack, off, flags, win = struct.unpack_from("!HHIIBBH", tcp)
    doff = (off >> 4) * 4
    payload = tcp[doff:]
    return (frame, ts, ip[12:16], ip[16:20], sport, dport, seq, ack, flags, win, len(payload),
            payload, tcp[20:doff])


SEED_PACKETS = [_tcp_packet(i + 1, ts, f) for i, (ts, f) in enumerate(SEED_RECORDS[:40])]


def _streams() -> tuple[bytes, bytes]:
    """Both byte streams of the seed connection: startup, auth, the query, the first rows."""
    c2s, s2c = bytearray(), bytearray()
    for pkt in SEED_PACKETS:
        (c2s if pkt[5] == 5432 else s2c).extend(pkt[11])
    return bytes(c2s), bytes(s2c)


SEED_STREAMS = _streams()


@pytest.fixture
def cap(tmp_path: Path) -> Path:
    """Where an example's capture is written (hypothesis reuses one test's directory)."""
    return tmp_path / "fuzz.pcap"


# -- mutations ---------------------------------------------------------------------------------

mutation = st.tuples(st.sampled_from(("set", "insert", "delete", "u32")),
                     st.floats(0, 1, allow_nan=False), st.binary(min_size=1, max_size=8))


def mutate(data: bytes, edits: list[tuple[str, float, bytes]]) -> bytes:
    b = bytearray(data)
    for op, where, blob in edits:
        if not b:
            b.extend(blob)
            continue
        p = min(int(where * len(b)), len(b) - 1)
        if op == "set":
            b[p:p + len(blob)] = blob[:len(b) - p]
        elif op == "insert":
            b[p:p] = blob
        elif op == "delete":
            del b[p:p + len(blob)]
        else:  # a 32-bit field (length, timestamp, sequence number) set to an extreme
            val = (0, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, len(blob) * 1000)[blob[0] % 5]
            b[p:p + 4] = struct.pack("<I", val)[:len(b) - p]
    return bytes(b)


def check_file(path: Path, options: Options | None = None) -> dict[str, Any] | None:
    """The invariant on a file: a report or a PktflowError, in bounded time."""
    with time_limit():
        try:
            report = analyze(str(path), options)
        except PktflowError as exc:
            assert exc.one_line()
            return None
    assert report["schema"] == "pktflow.report/1"
    return report


def check_connections(report: dict[str, Any] | None) -> None:
    """What holds of any report's connections, whatever their packets were."""
    assert report is not None  # a capture pktflow wrote itself always opens
    for conn in report["connections"]:
        for d in conn["directions"].values():
            assert d["payload_bytes"] >= 0 and d["missing_bytes"] >= 0
        assert conn["protocol"] in ("unknown", "postgresql", "postgresql-tls",
                                    "postgresql-gss")
        if conn["protocol"] == "unknown":
            assert not conn["queries"] and conn["startup"] is None
        assert conn["queries_total"] >= len(conn["queries"])


# -- capture reader (and everything after it) --------------------------------------------------

SEEDS = {"f.pcap": SEED, "f.pcapng": SEED_NG, "pooled.pcap": POOLED, "f.pcap.gz": SEED_GZ}


@pytest.mark.parametrize("name", list(SEEDS))
@FUZZ
@given(cut=st.floats(0, 1, allow_nan=False), edits=st.lists(mutation, max_size=8))
@example(cut=1.0, edits=[("u32", 0.5, b"\x01")])  # a record length or timestamp gone wild
@example(cut=1.0, edits=[("set", 0.02, b"\x00\x00\x00\x00")])  # a zeroed header field
def test_fuzz_capture_reader(tmp_path: Path, name: str, cut: float,
                             edits: list[tuple[str, float, bytes]]) -> None:
    seed = SEEDS[name]
    p = tmp_path / name
    p.write_bytes(mutate(seed[:round(cut * len(seed))], edits))
    check_file(p)


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Env(stdout=out, stderr=err, width=120))
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("name", ["f.pcap", "pooled.pcap"])
@CLI_FUZZ
@given(cut=st.floats(0, 1, allow_nan=False), edits=st.lists(mutation, max_size=8))
def test_fuzz_cli_text_report(tmp_path: Path, name: str, cut: float,
                              edits: list[tuple[str, float, bytes]]) -> None:
    """The CLI on a mutated file: the text report, or one line naming the file with the
    README's exit code; never a traceback, never the internal-error code."""
    seed = SEEDS[name]
    p = tmp_path / name
    p.write_bytes(mutate(seed[:round(cut * len(seed))], edits))
    with time_limit():
        code, out, err = cli("analyze", str(p))
    assert code in (ExitCode.OK, ExitCode.DAMAGED, ExitCode.NOT_A_CAPTURE,
                    ExitCode.UNSUPPORTED), (code, err)
    assert "Traceback" not in err
    if code == ExitCode.OK:
        assert out and not err
    else:
        assert len(err.strip().splitlines()) == 1 and str(p) in err, err
        assert bool(out) == (code == ExitCode.DAMAGED)  # what precedes damage is reported


@pytest.mark.parametrize("btype,body", [
    (6, b"\x00" * 8),  # Enhanced Packet Block shorter than its 20 fixed bytes
    (2, b"\x00" * 4),  # obsolete Packet Block, likewise
    (3, b""),  # Simple Packet Block without its length field
    (5, b""),  # Interface Statistics Block without interface and timestamp
    (1, b""),  # Interface Description Block without link type and snaplen
])
def test_regression_short_pcapng_blocks(tmp_path: Path, btype: int, body: bytes) -> None:
    """Found by test_fuzz_pcapng_reader: struct.error from a block too short for its fields."""
    at = 28 if btype == 1 else 28 + 32  # after the section header (and the interface)
    p = tmp_path / "short.pcapng"
    p.write_bytes(SEED_NG[:at] + _block(btype, body) + SEED_NG[at:])
    report = check_file(p)
    assert report is not None and report["capture"]["damage"] is not None
    assert "too short" in report["capture"]["damage"]["reason"]


def test_regression_corrupt_deflate_at_the_start(tmp_path: Path) -> None:
    """Found by probing cut gzip files: a deflate error in the first 4 bytes escaped as
    zlib.error; it is 'not a valid gzip file' (exit 4)."""
    p = tmp_path / "bad.pcap.gz"
    p.write_bytes(SEED_GZ[:4] + b"\x00" * 6 + SEED_GZ[10:12] + b"\xff" * 32)
    with pytest.raises(NotACaptureError, match="not a valid gzip file"):
        analyze(str(p))


def test_regression_timestamp_jump_does_not_hang() -> None:
    """Found by test_fuzz_pcap_reader: one frame's timestamp 30 years early made the goodput
    scan walk 9e9 empty 100 ms bins (transfer/verdict.py); it must finish at once."""
    report = check_file(REGRESSIONS / "goodput-timestamp-jump.pcap")
    assert report is not None and report["capture"]["damage"] is not None


def test_regression_relay_segment_median_none() -> None:
    """Found by fuzzing the PgBouncer capture: verdict_json formats None with ',.0f'."""
    check_file(REGRESSIONS / "relay-segment-median-none.pcap")


def test_regression_relay_cost_unknown_for_the_worst_pair() -> None:
    """Found by test_native's mutated captures: a matched pair whose relay cost is unknown was
    taken for the worst (unknown counted as 0 ms, the known ones all below), and verdict_json
    formatted None with ',.2f'."""
    report = check_file(REGRESSIONS / "relay-cost-unknown-worst.pcap")
    assert report is not None and report["relays"]


# -- TCP engine ----------------------------------------------------------------------------------

FLAGS = st.sampled_from((ACK, ACK | PSH, SYN, SYN | ACK, FIN | ACK, RST, RST | ACK, 0, 0xFF))
packet_edit = st.tuples(
    st.integers(0, len(SEED_PACKETS) - 1),  # which packet
    st.sampled_from(("seq", "ack", "flags", "plen", "payload", "drop", "dup", "swap", "win",
                     "options", "ts")),
    st.integers(-(1 << 32), 1 << 32), FLAGS, st.binary(max_size=64))
# the most a raw-IP record can say: IP's 16-bit total length less its header and the TCP one
MAX_WIRE_PAYLOAD = 65535 - 20 - 60


def edit_packets(edits: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    pkts = [list(p) for p in SEED_PACKETS]
    for i, what, num, flags, blob in edits:
        if not pkts:
            break
        i %= len(pkts)
        p = pkts[i]
        if what == "seq":
            p[6] = (p[6] + num) & 0xFFFFFFFF
        elif what == "ack":
            p[7] = (p[7] + num) & 0xFFFFFFFF
        elif what == "flags":
            p[8] = flags
        elif what == "plen":
            p[10] = min(abs(num), MAX_WIRE_PAYLOAD)  # on the wire
            p[11] = p[11][:p[10]]  # a capture never holds more than the wire carried
        elif what == "payload":
            p[11] = blob
            p[10] = len(blob)
        elif what == "drop":
            del pkts[i]
        elif what == "dup":
            pkts.insert(i, list(p))
        elif what == "swap":
            j = abs(num) % len(pkts)
            pkts[i], pkts[j] = pkts[j], pkts[i]
        elif what == "win":
            p[9] = abs(num) & 0xFFFF
        elif what == "options":
            p[12] = blob[:40]  # what the TCP header's data offset can say
        else:
            p[1] += num / 1e3
    return [tuple(p) for p in pkts]


@FUZZ
@given(edits=st.lists(packet_edit, max_size=12), short_linger=st.booleans())
def test_fuzz_tcp_engine(cap: Path, edits: list[tuple[Any, ...]], short_linger: bool) -> None:
    """Mutated packet sequences written as a capture; with a short linger, closed connections
    are reported and dropped while the pass goes on, and packets after are late."""
    packets = edit_packets(edits)
    write_capture(cap, packets)
    options = Options(linger_s=0.0005, settled_linger_s=0.0005) if short_linger else None
    report = check_file(cap, options)
    check_connections(report)
    assert report is not None and report["capture"]["packets"] == len(packets)


# -- PostgreSQL decoder ------------------------------------------------------------------------

chunk = st.tuples(st.integers(0, 1), st.integers(1, 3000), st.booleans())


@FUZZ
@given(edits_c=st.lists(mutation, max_size=6), edits_s=st.lists(mutation, max_size=6),
       chunks=st.lists(chunk, min_size=1, max_size=40), handshake=st.booleans())
def test_fuzz_conversation(cap: Path, edits_c: list[tuple[str, float, bytes]],
                           edits_s: list[tuple[str, float, bytes]],
                           chunks: list[tuple[int, int, bool]], handshake: bool) -> None:
    """The seed's two streams, mutated, cut into segments in any order of the two sides, some
    never captured (gaps), from the handshake or mid-stream."""
    streams = (mutate(SEED_STREAMS[0], edits_c), mutate(SEED_STREAMS[1], edits_s))
    flow = Flow()
    if handshake:
        flow.handshake()
    offs = [0, 0]
    for n, (d, size, is_gap) in enumerate(chunks, 1):
        if offs[d] >= len(streams[d]):
            continue
        if is_gap and n % 4 == 0:
            flow.seq[d] += size  # never captured: the next segment skips them
        else:
            flow.send(d, streams[d][offs[d]:offs[d] + size])
            flow.ack(1 - d)
        offs[d] += size
    for d in (0, 1):  # the rest in one piece
        if offs[d] < len(streams[d]):
            flow.send(d, streams[d][offs[d]:])
    check_connections(check_file(write_capture(cap, flow.packets)))


@FUZZ
@given(data=st.lists(st.binary(min_size=1, max_size=512), min_size=1, max_size=8),
       sides=st.lists(st.integers(0, 1), min_size=8, max_size=8))
def test_fuzz_conversation_random_bytes(cap: Path, data: list[bytes], sides: list[int]) -> None:
    flow = Flow()
    flow.handshake()
    for i, blob in enumerate(data):
        flow.send(sides[i], blob)
    check_connections(check_file(write_capture(cap, flow.packets)))
