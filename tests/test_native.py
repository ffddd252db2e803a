"""The native analysis core (pktflow._core) against its twin and reference, the Python pass:
the same report, byte for byte, in both layouts the commands write (json, jsonl), on every
shipped capture, on the record-by-record path (pcapng, gzip), with connections retired as
the pass goes, and on mutated captures. The parts are compared on their own too
(test_native_transfer.py, test_native_pgwire.py); here the whole pass is."""

from __future__ import annotations

import gzip
import io
import math
import os
import random
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from craft import _block, write_pcapng
from nativepath import CORE, core_as

from pktflow.cli import write_json, write_jsonl
from pktflow.pipeline import Options, analyze
from pktflow.report.stored import COMPACT, INDENTED

pytestmark = pytest.mark.skipif(
    CORE is None, reason="pktflow._core is not built (no C compiler at install time): only "
                         "the Python pass exists to test")

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = sorted((ROOT / "captures").glob("*.pcap")) + sorted(
    (ROOT / "tests" / "regressions").glob("*.pcap"))
WRITERS: dict[str, Callable[[dict[str, Any], Any], None]] = {
    COMPACT: write_jsonl, INDENTED: write_json}
# PKTFLOW_FUZZ_EXAMPLES=N: more mutated captures, with fresh randomness
_LONG = os.environ.get("PKTFLOW_FUZZ_EXAMPLES")
MUTANTS = int(_LONG or 40)


def text(path: Path, core: Any, layout: str = COMPACT, **options: Any) -> str:
    """The report the command writes for `path`, with the native core or the Python pass."""
    with core_as(core):
        report = analyze(str(path), Options(store=layout, **options))
    out = io.StringIO()
    WRITERS[layout](report, out)
    return out.getvalue()


def first_difference(a: str, b: str) -> str:
    la, lb = a.splitlines(), b.splitlines()
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return f"line {i + 1}:\n  native: {x[:300]}\n  python: {y[:300]}"
    return f"lengths differ: {len(la)} and {len(lb)} lines"


def assert_same(path: Path, layout: str = COMPACT, **options: Any) -> None:
    native, python = text(path, CORE, layout, **options), text(path, None, layout, **options)
    if layout == COMPACT:  # one line: split it where it differs for the message
        native, python = native.replace(',"', ',\n"'), python.replace(',"', ',\n"')
    assert native == python, f"{path.name}: {first_difference(native, python)}"


@pytest.mark.parametrize("layout", [COMPACT, INDENTED])
@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_same_report_on_every_capture(path: Path, layout: str) -> None:
    assert_same(path, layout)


@pytest.mark.parametrize("path", CAPTURES[:6], ids=lambda p: p.name)
def test_same_report_without_postgres_decoding(path: Path) -> None:
    assert_same(path, decode_postgres=False)


def _records(path: Path) -> tuple[bytes, list[tuple[int, int, bytes, int]]]:
    data = path.read_bytes()
    out, pos = [], 24
    while pos + 16 <= len(data):
        sec, usec, caplen, orig = struct.unpack_from("<IIII", data, pos)
        out.append((sec, usec, data[pos + 16:pos + 16 + caplen], orig))
        pos += 16 + caplen
    return data[:24], out


def _write_pcap(path: Path, head: bytes, records: list[tuple[int, int, bytes, int]]) -> None:
    with open(path, "wb") as f:
        f.write(head)
        for sec, usec, frame, orig in records:
            f.write(struct.pack("<IIII", sec % 2**32, usec, len(frame), max(orig, len(frame))))
            f.write(frame)


def _mixed_pcapng(path: Path, records: list[tuple[int, int, bytes, int]]) -> None:
    """The records as pcapng: the first 600 and every fifth after as Simple Packet Blocks
    (no timestamp: decoded one at a time, Core.decode), the others as Enhanced Packet Blocks
    (runs of them scanned natively, Core.scan_pcapng)."""
    out = [_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)),
           _block(1, struct.pack("<HHI", 1, 0, 262144))]
    for i, (sec, usec, frame, orig) in enumerate(records):
        if i < 600 or i % 5 == 0:
            out.append(_block(3, struct.pack("<I", len(frame)) + frame))
        else:
            ts = sec * 10**6 + usec
            out.append(_block(6, struct.pack("<IIIII", 0, ts >> 32, ts & 0xFFFFFFFF,
                                             len(frame), len(frame)) + frame))
    path.write_bytes(b"".join(out))


@pytest.mark.parametrize("name", ["seqscan-10k-pgbouncer-bridge.pcap",
                                  "pgbench-txn-pgbouncer-loopback.pcap"])
def test_same_report_from_pcapng_and_gzip(tmp_path: Path, name: str) -> None:
    """pcapng goes through Core.scan_pcapng and, for what the scan leaves, Core.decode a
    record at a time: the batches (and the sweeps between them) must be the Python pass's."""
    source = ROOT / "captures" / name
    _, records = _records(source)
    ng = tmp_path / "c.pcapng"
    # two interfaces, packets alternating between them
    write_pcapng(ng, [(i % 2, f) for i, (_, _, f, _) in enumerate(records)], [1, 1])
    mixed = tmp_path / "mixed.pcapng"
    _mixed_pcapng(mixed, records)
    gz = tmp_path / "c.pcap.gz"
    gz.write_bytes(gzip.compress(source.read_bytes(), mtime=0))
    for path in (ng, mixed, gz):
        assert_same(path)
        assert_same(path, INDENTED, linger_s=0.01, settled_linger_s=0.001)


def test_same_report_with_connections_retired_as_the_pass_goes(tmp_path: Path) -> None:
    """Short lingers retire closed connections mid-pass (and MAX_SETTLED's bound with an
    infinite linger): what is reported when, what counts as late, must agree."""
    path = ROOT / "captures" / "pgbench-txn-pgbouncer-loopback.pcap"
    for linger, settled in ((0.001, 0.0005), (0.05, 0.01), (math.inf, math.inf), (2.0, 0.0)):
        assert_same(path, linger_s=linger, settled_linger_s=settled)
    head, records = _records(path)
    late = tmp_path / "late.pcap"  # the capture twice, the second copy 100 s later
    _write_pcap(late, head, records + [(s + 100, u, f, o) for s, u, f, o in records])
    assert_same(late, linger_s=1.0, settled_linger_s=0.5)


def _tcp(frame: bytes) -> int | None:
    """Offset of the TCP header in an Ethernet/IPv4 frame."""
    if len(frame) < 34 or frame[12:14] != b"\x08\x00":
        return None
    return 14 + (frame[14] & 15) * 4


def mutate(records: list[tuple[int, int, bytes, int]], rnd: random.Random
           ) -> list[tuple[int, int, bytes, int]]:
    """Reordered, lost, duplicated, cut, re-flagged, re-sequenced packets, jumping clocks and
    reused ports: what a bad capture point, loss and tcpdump can make of a connection."""
    recs = [[s, u, bytearray(f), o] for s, u, f, o in records]
    for _ in range(rnd.randint(1, 12)):
        if not recs:
            break
        i = rnd.randrange(len(recs))
        f = recs[i][2]
        t = _tcp(bytes(f[:40]))
        op = rnd.randrange(12)
        if op == 0:
            del recs[i]
        elif op == 1:
            recs.insert(i, [recs[i][0], recs[i][1], bytearray(f), recs[i][3]])
        elif op == 2 and i + 1 < len(recs):
            recs[i], recs[i + 1] = recs[i + 1], recs[i]
        elif op == 3:
            recs[i][2] = f[:rnd.randint(0, len(f))]
        elif op == 4 and t and len(f) >= t + 14:
            f[t + 13] = rnd.choice([0x02, 0x12, 0x10, 0x11, 0x04, 0x14, 0x18, 0x01, 0x19,
                                    rnd.randrange(256)])
        elif op in (5, 6) and t and len(f) >= t + 12:
            at = t + (4 if op == 5 else 8)
            v = struct.unpack_from(">I", f, at)[0] + rnd.choice(
                [1, -1, 1448, -1448, 2**31, rnd.randrange(2**32)])
            struct.pack_into(">I", f, at, v % 2**32)
        elif op == 7 and t and len(f) >= t + 16:
            struct.pack_into(">H", f, t + 14, rnd.choice([0, 1, 65535, rnd.randrange(65536)]))
        elif op == 8:
            recs[i][0] += rnd.choice([-5, 3, 40, 100000])
        elif op == 9 and t and len(f) >= t + 4:
            struct.pack_into(">H", f, t, rnd.choice([5432, 6432, 40000, rnd.randrange(65536)]))
        elif op == 10:
            j = rnd.randrange(len(recs))
            block = recs[j:j + rnd.randint(1, 30)]
            del recs[j:j + len(block)]
            k = rnd.randrange(len(recs) + 1)
            recs[k:k] = block
        elif op == 11 and t and len(f) > t + 13:
            f[rnd.randrange(t, len(f))] = rnd.randrange(256)
    return [(s, u, bytes(f), o) for s, u, f, o in recs]


SEEDS = ["seqscan-10k-pgbouncer-bridge.pcap", "pgbench-txn-pgbouncer-loopback.pcap",
         "seqscan-10k-direct-bridge.pcap", "copy-in-direct-loopback.pcap",
         "extended-direct-loopback.pcap", "error-direct-loopback.pcap"]


def test_same_report_on_mutated_captures(tmp_path: Path) -> None:
    rnd = random.Random(None if _LONG else 20261124)
    seeds = [_records(ROOT / "captures" / name) for name in SEEDS]
    for n in range(MUTANTS):
        head, records = seeds[n % len(seeds)]
        if rnd.random() < 0.7:
            j = rnd.randrange(max(1, len(records) - 300))
            part = records[j:j + rnd.randint(5, 300)]
        else:
            part = records[:rnd.randint(5, 600)]
        path = tmp_path / f"m{n}.pcap"
        _write_pcap(path, head, mutate(part, rnd))
        assert_same(path, linger_s=rnd.choice([30.0, 0.01]), settled_linger_s=0.005)
        path.unlink()


def _closed_connections(path: Path, n: int, late: range) -> None:
    """n short connections (handshake, FINs both ways, each acknowledged), 1 ms apart, as raw
    IP; then, an hour later, the last ACK again of each in `late`."""
    def packet(ts: float, src: int, sport: int, dst: int, dport: int, seq: int, ack: int,
               flags: int) -> bytes:
        ip = struct.pack(">BBHHHBBHII", 0x45, 0, 40, 0, 0, 64, 6, 0, src, dst)
        tcp = struct.pack(">HHIIBBHHH", sport, dport, seq, ack, 0x50, flags, 65535, 0, 0)
        return struct.pack("<IIII", int(ts), int(ts % 1 * 1e6), 40, 40) + ip + tcp

    client, server = 0x0A000001, 0x0A000002
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 101)]
    last = []
    for i in range(n):
        t, port = 1000.0 + i * 0.001, 10000 + i % 50000
        c, s = 1000 + i, 5000 + i
        steps = [(0, (client, port, server, 5432, c, 0, 0x02)),
                 (1, (server, 5432, client, port, s, c + 1, 0x12)),
                 (2, (client, port, server, 5432, c + 1, s + 1, 0x10)),
                 (3, (client, port, server, 5432, c + 1, s + 1, 0x11)),
                 (4, (server, 5432, client, port, s + 1, c + 2, 0x11)),
                 (5, (client, port, server, 5432, c + 2, s + 2, 0x10))]
        out += [packet(t + k * 1e-4, *fields) for k, fields in steps]
        if i in late:
            last.append(steps[-1][1])
    out += [packet(1000.0 + 3600 + i, *fields) for i, fields in enumerate(last)]
    path.write_bytes(b"".join(out))


def test_same_report_past_the_retired_connections_remembered(tmp_path: Path) -> None:
    """65,536 4-tuples of retired connections are remembered (both ways: 32,768 connections):
    a packet for a forgotten one opens a connection, for a remembered one it is late. 40,000
    closed connections (37,788 retired by the end: the first 5,020 forgotten), then
    packets for connections on both sides of that bound."""
    path = tmp_path / "closed.pcap"
    _closed_connections(path, 40_000, late=range(4_800, 5_300))
    assert_same(path)
    report = text(path, CORE, COMPACT)
    assert '"code":"late-packets"' in report  # remembered
    assert '"id":"c40001"' in report  # forgotten: a new connection


def _packets_pcap(path: Path, packets: list[tuple]) -> None:  # type: ignore[type-arg]
    """Packet tuples (pktflow.capture.packet.TcpPacket) as a raw-IPv4 pcap, SYNs offering
    MSS 1460, window scale 7 and SACK."""
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 101)]
    for _, ts, src, dst, sport, dport, seq, ack, flags, win, _, payload, _ in packets:
        opts = b"\x02\x04\x05\xb4\x01\x03\x03\x07\x04\x02\x00\x00" if flags & 0x02 else b""
        tcp = struct.pack(">HHIIBBHHH", sport, dport, seq, ack, (5 + len(opts) // 4) << 4,
                          flags, win, 0, 0) + opts + payload
        ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0, 0, 64, 6, 0, src, dst)
        out.append(struct.pack("<IIII", int(ts), round(ts % 1 * 1e6), 20 + len(tcp),
                               20 + len(tcp)) + ip + tcp)
    path.write_bytes(b"".join(out))


def test_same_report_for_connections_kept_as_handshake_segments(tmp_path: Path) -> None:
    """Connection attempts that are only SYNs and SYN-ACKs wait as their packets until another
    kind comes or the capture ends (test_retire's nine interleaved cases: retransmitted SYNs,
    a RST answer, a 4-tuple reused with a new ISN, a capture starting at the SYN-ACK, more
    than MAX_WAITING, data on a SYN, ...)."""
    from test_retire import _handshake_cases

    path = tmp_path / "handshakes.pcap"
    _packets_pcap(path, _handshake_cases())
    assert_same(path)
    assert_same(path, linger_s=0.05, settled_linger_s=0.01)
