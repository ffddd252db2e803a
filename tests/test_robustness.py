"""Captures from production incidents: cut short, corrupt, huge, hostile, or not PostgreSQL.

pktflow must always finish, say what it could not read (capture.damage, a finding, or a one-line
error with the README's exit code) and analyse the rest. Big captures are generated into
tmp_path with struct (scapy would take minutes for 100,000 connections), never committed.
"""

from __future__ import annotations

import gc
import gzip
import io
import json
import os
import random
import re
import socket
import struct
import subprocess
import shutil
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from craft import LINKTYPE_RAW, _block, write_pcap
from tcpfeed import ip_header, tcp_header

from pktflow._core import ACK, FIN, PSH, RST, SYN
from pktflow.cli import Env, main
from pktflow.errors import ExitCode, NotACaptureError, PktflowError
from pktflow.pipeline import analyze

ROOT = Path(__file__).resolve().parent.parent
DIRECT = ROOT / "captures" / "seqscan-10k-direct-loopback.pcap"  # the smallest real capture

CLIENT, SERVER = socket.inet_aton("10.0.0.1"), socket.inet_aton("10.0.0.2")


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Env(stdout=out, stderr=err, width=120))
    return code, out.getvalue(), err.getvalue()


def assert_one_line_error(err: str, path: Path | str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert str(path) in lines[0] and "Traceback" not in err


def ip_tcp(src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int, flags: int,
           payload: bytes = b"", win: int = 512) -> bytes:
    """A raw IPv4 + TCP packet."""
    tcp = tcp_header(sport, dport, seq, ack, flags, win)
    return ip_header(src, dst, len(tcp) + len(payload)) + tcp + payload


class Talk:
    """Client 10.0.0.1:40000 and a server on `port`: a handshake, then data either way."""

    def __init__(self, port: int = 5432, cport: int = 40000) -> None:
        self.port, self.cport = port, cport
        self.seq = [1000, 5000]
        self.frames = [self._pkt(0, SYN, seq=999, ack=0), self._pkt(1, SYN | ACK, seq=4999),
                       self._pkt(0, ACK)]

    def _pkt(self, side: int, flags: int, payload: bytes = b"", *, seq: int | None = None,
             ack: int | None = None) -> bytes:
        a, b = (CLIENT, SERVER) if side == 0 else (SERVER, CLIENT)
        pa, pb = (self.cport, self.port) if side == 0 else (self.port, self.cport)
        return ip_tcp(a, b, pa, pb, self.seq[side] if seq is None else seq,
                      self.seq[1 - side] if ack is None else ack, flags, payload)

    def send(self, side: int, payload: bytes, acked: bool = True) -> None:
        self.frames.append(self._pkt(side, PSH | ACK, payload))
        self.seq[side] += len(payload)
        if acked:
            self.frames.append(self._pkt(1 - side, ACK))

    def write(self, path: Path) -> Path:
        return write_pcap(path, self.frames, LINKTYPE_RAW, dt=1e-4)


def pg_msg(t: bytes, body: bytes) -> bytes:
    return t + struct.pack("!I", 4 + len(body)) + body


_PARAMS = b"user\0alice\0database\0shop\0\0"
STARTUP = struct.pack("!II", 8 + len(_PARAMS), 196608) + _PARAMS
AUTH_OK = pg_msg(b"R", struct.pack("!I", 0)) + pg_msg(b"Z", b"I")
QUERY = pg_msg(b"Q", b"select * from t\0")


def pg_session(talk: Talk) -> None:
    talk.send(0, STARTUP)
    talk.send(1, AUTH_OK)
    talk.send(0, QUERY)


# -- damaged files ---------------------------------------------------------------------------

def _record_ends(data: bytes) -> list[int]:
    """File offsets where each pcap record ends (the file header ends at 24)."""
    ends, pos = [24], 24
    while pos + 16 <= len(data):
        pos += 16 + struct.unpack_from("<I", data, pos + 8)[0]
        if pos <= len(data):
            ends.append(pos)
    return ends


def test_cut_at_every_offset_of_the_first_4k(tmp_path: Path) -> None:
    """Every cut yields a report of the frames before it, with capture.damage naming the cut
    record; only cuts inside the 4-byte magic are not a capture at all."""
    data = DIRECT.read_bytes()
    ends = _record_ends(data)
    p = tmp_path / "cut.pcap"
    for cut in range(0, 4097):
        p.write_bytes(data[:cut])
        if cut < 4:
            with pytest.raises(NotACaptureError):
                analyze(str(p))
            continue
        report = analyze(str(p))
        cap = report["capture"]
        complete = sum(1 for e in ends[1:] if e <= cut)
        assert cap["packets"] == complete, cut
        if cut in ends:
            assert cap["damage"] is None, cut
        else:
            assert cap["damage"] is not None, cut
            assert cap["damage"]["frame"] == complete + 1
            assert cap["damage"]["offset"] == max((e for e in ends if e <= cut), default=4), cut
            assert any(f["code"] == "capture-damaged" for f in report["findings"])


def test_cut_at_later_offsets_via_cli(tmp_path: Path) -> None:
    data = DIRECT.read_bytes()
    ends = set(_record_ends(data))
    p = tmp_path / "cut.pcap"
    offsets = sorted({*range(4096, len(data), len(data) // 48), *range(0, 4096, 97)})
    for cut in offsets:
        p.write_bytes(data[:cut])
        code, out, err = cli("analyze", "--format", "json", str(p))
        if cut < 4:
            assert code == ExitCode.NOT_A_CAPTURE
        elif cut in ends:
            assert code == ExitCode.OK and err == "", cut
            continue
        else:
            assert code == ExitCode.DAMAGED, cut
            assert json.loads(out)["capture"]["damage"]["offset"] <= cut
            assert "byte offset" in err
        assert_one_line_error(err, p)


def _pcap_header() -> bytes:
    return struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, LINKTYPE_RAW)


def _pcapng_head() -> bytes:
    return (_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
            + _block(1, struct.pack("<HHI", LINKTYPE_RAW, 0, 262144)))


def _epb(frame: bytes) -> bytes:
    return _block(6, struct.pack("<IIIII", 0, 0, 1, len(frame), len(frame)) + frame)


SYN_FRAME = ip_tcp(CLIENT, SERVER, 40000, 5432, 999, 0, SYN)


def _damaged_files() -> dict[str, tuple[bytes, ExitCode, str]]:
    good = struct.pack("<IIII", 1, 0, len(SYN_FRAME), len(SYN_FRAME)) + SYN_FRAME
    rnd = bytes((i * 2654435761 >> 13) & 0xFF for i in range(4096))  # fixed pseudo-random
    bad_len = bytearray(_epb(SYN_FRAME))
    bad_len[4:8] = struct.pack("<I", 13)  # not a multiple of 4, smaller than the block
    huge_block = bytearray(_epb(SYN_FRAME))
    huge_block[4:8] = struct.pack("<I", 0xFFFFFFF0)
    return {
        # a record claiming a 4 GB captured length
        "pcap-4gb-record": (_pcap_header() + good
                            + struct.pack("<IIII", 2, 0, 0xFFFFFFFF, 0xFFFFFFFF) + b"\0" * 64,
                            ExitCode.DAMAGED, "4,294,967,295 captured bytes"),
        "pcapng-bad-length": (_pcapng_head() + _epb(SYN_FRAME) + bytes(bad_len),
                              ExitCode.DAMAGED, "invalid length of 13 bytes"),
        "pcapng-huge-length": (_pcapng_head() + bytes(huge_block), ExitCode.DAMAGED,
                               "invalid length"),
        "pcapng-trailer-mismatch": (_pcapng_head() + _epb(SYN_FRAME)[:-4]
                                    + struct.pack("<I", 8) + _epb(SYN_FRAME),
                                    ExitCode.DAMAGED, "ends with a length of 8"),
        "pcap-random-after-header": (_pcap_header() + rnd, ExitCode.DAMAGED, "frame 1"),
        "pcapng-random-after-header": (_pcapng_head() + rnd, ExitCode.DAMAGED, "pcapng block"),
        "random-bytes": (rnd, ExitCode.NOT_A_CAPTURE, "not a pcap or pcapng capture"),
        "empty": (b"", ExitCode.NOT_A_CAPTURE, "empty"),
        "pcap-header-only": (_pcap_header(), ExitCode.OK, ""),
        "pcap-header-cut": (_pcap_header()[:10], ExitCode.DAMAGED, "inside the pcap file header"),
    }


@pytest.mark.parametrize("name", sorted(_damaged_files()))
def test_damaged_file_via_cli(tmp_path: Path, name: str) -> None:
    data, want, words = _damaged_files()[name]
    p = tmp_path / f"{name}.pcap"
    p.write_bytes(data)
    code, out, err = cli("analyze", "--format", "json", str(p))
    assert code == want, err
    if want == ExitCode.OK:
        assert err == ""
        return
    assert_one_line_error(err, p)
    assert words in err
    if want == ExitCode.DAMAGED:  # what precedes the damage is still reported
        report = json.loads(out)
        assert report["capture"]["damage"] is not None
        assert any(f["code"] == "capture-damaged" for f in report["findings"])


def test_directory_and_missing_file_via_cli(tmp_path: Path) -> None:
    code, _, err = cli("analyze", str(tmp_path))
    assert code == ExitCode.NO_FILE and "directory" in err
    assert_one_line_error(err, tmp_path)
    missing = tmp_path / "nope.pcap"
    code, _, err = cli("analyze", str(missing))
    assert code == ExitCode.NO_FILE and "no such file" in err
    assert_one_line_error(err, missing)


def test_unreadable_file_via_cli(tmp_path: Path) -> None:
    """chmod 000 does not stop root, so as root the CLI runs in a child without the
    capabilities that bypass file permissions (setpriv drops them from the bounding set)."""
    p = tmp_path / "secret.pcap"
    p.write_bytes(DIRECT.read_bytes()[:4096])
    p.chmod(0)
    if os.geteuid() != 0:
        code, _, err = cli("analyze", str(p))
    else:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root and setpriv (util-linux) is missing: root reads any file")
        proc = subprocess.run(
            [setpriv, "--bounding-set=-dac_override,-dac_read_search", sys.executable, "-m",
             "pktflow", "analyze", str(p)], capture_output=True, text=True,
            env={"PYTHONPATH": str(ROOT / "analyzer"), "PATH": "/usr/bin:/bin"})
        code, err = proc.returncode, proc.stderr
    assert code == ExitCode.NO_FILE and "permission denied" in err, err
    assert_one_line_error(err, p)


# -- resource bounds ------------------------------------------------------------------------------

def _peak(fn: Any) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("kind", [b"D", b"T"])  # DataRow (counted, skipped), RowDescription
def test_message_claiming_2gb(tmp_path: Path, kind: bytes) -> None:
    """A backend message claims 2 GiB, then 26 MB stream by: memory stays flat and a finding
    says the framing is absurd (PostgreSQL caps messages near 1 GiB)."""
    talk = Talk()
    pg_session(talk)
    chunk = kind + struct.pack("!I", 0x80000000)
    chunk += b"x" * (60_000 - len(chunk))
    for _ in range(430):
        talk.send(1, chunk, acked=False)
        chunk = b"x" * 60_000
    p = talk.write(tmp_path / "big.pcap")
    report, peak = _peak(lambda: analyze(str(p)))
    assert peak < 8 << 20, peak  # 26 MB of payload went by
    (conn,) = report["connections"]
    assert conn["protocol"] == "postgresql"
    assert "absurd" in conn["decode_stopped"]["reason"]
    assert "DataRow" not in conn["messages"]["backend"]
    assert any(f["code"] == "pgwire-malformed" and "2,147,483,648" in f["message"]
               for f in report["findings"])
    # an error finding: --strict says so with exit code 1
    assert cli("analyze", str(p))[0] == ExitCode.OK
    assert cli("analyze", "--strict", str(p))[0] == ExitCode.FINDINGS


def test_strict_on_damage_keeps_the_damage_code(tmp_path: Path) -> None:
    p = tmp_path / "cut.pcap"
    p.write_bytes(DIRECT.read_bytes()[:3000])
    assert cli("analyze", "--strict", str(p))[0] == ExitCode.DAMAGED


def _segments(talk: Talk, count: int, size: int = 100) -> list[bytes]:
    """`count` client data segments after the handshake, in stream order."""
    return [talk._pkt(0, PSH | ACK, b"d" * size, seq=1000 + i * size) for i in range(count)]


def _run_big(tmp_path: Path, name: str, frames: list[bytes]) -> tuple[dict[str, Any], int, float]:
    p = write_pcap(tmp_path / name, frames, LINKTYPE_RAW, dt=1e-6)
    t0 = time.perf_counter()
    report, peak = _peak(lambda: analyze(str(p)))
    return report, peak, time.perf_counter() - t0


def _codes(report: dict[str, Any]) -> set[str]:
    return {f["code"] for f in report["findings"]}


@pytest.mark.parametrize("order", ["hole-first", "reversed", "shuffled"])
def test_100k_out_of_order_segments(tmp_path: Path, order: str) -> None:
    """100,000 segments of one stream out of order: the reassembly buffer and the hole list
    stay bounded, time stays linear (a shuffled stream took minutes before the hole list was
    bounded), and a finding says the bound was hit."""
    talk = Talk()
    segs = _segments(talk, 100_001)
    if order == "hole-first":
        segs = segs[1:]  # the first segment never arrives
    elif order == "reversed":
        segs.reverse()
    else:
        random.Random(7).shuffle(segs)
    report, peak, _ = _run_big(tmp_path, "ooo.pcap", talk.frames + segs)
    assert peak < 24 << 20, peak  # 10 MB of payload; at most 2,048 segments / 4 MiB buffered
    c2s = report["connections"][0]["directions"]["client_to_server"]
    assert c2s["gaps"] >= 1
    assert "reassembly-bound" in _codes(report)


def test_stream_never_acknowledged(tmp_path: Path) -> None:
    """The server answers with 100,000 segments and the client never acknowledges one (no ACK
    flag at all): nothing waits for an ACK that never comes, so memory stays flat."""
    talk = Talk()
    pg_session(talk)
    row = pg_msg(b"D", b"\0\1" + struct.pack("!i", 4) + b"abcd")
    first = pg_msg(b"T", b"\0\0") + row
    talk.frames.append(talk._pkt(1, PSH, first))
    seq = talk.seq[1] + len(first)
    talk.frames += [talk._pkt(1, PSH, row, seq=seq + i * len(row)) for i in range(99_999)]
    report, peak, _ = _run_big(tmp_path, "noack.pcap", talk.frames)
    assert peak < 24 << 20, peak
    (conn,) = report["connections"]
    assert conn["protocol"] == "postgresql"
    assert conn["messages"]["backend"]["DataRow"] == 100_000
    (q,) = conn["queries"]
    assert q["data_rows"] == 100_000 and q["command_tag"] is None
    s2c = conn["directions"]["server_to_client"]
    assert s2c["payload_bytes"] == len(AUTH_OK) + len(first) + 99_999 * len(row)
    assert s2c["gaps"] == 0


def _syn_scan(path: Path, n: int) -> Path:
    """n connection attempts to 5432, each a SYN answered by RST (a port scan)."""
    frames = []
    for i in range(n):
        src = struct.pack("!I", 0x0A010000 + i // 50_000)
        sport = 10_000 + i % 50_000
        frames.append(ip_tcp(src, SERVER, sport, 5432, i * 7, 0, SYN))
        frames.append(ip_tcp(SERVER, src, 5432, sport, 0, i * 7 + 1, RST | ACK))
    return write_pcap(path, frames, LINKTYPE_RAW, dt=1e-6)


_MEASURE = """
import sys, time, tracemalloc
from pktflow.pipeline import analyze
trace = sys.argv[2] == "1"
if trace:
    tracemalloc.start()
t0 = time.perf_counter()
report = analyze(sys.argv[1])
elapsed = time.perf_counter() - t0
peak = tracemalloc.get_traced_memory()[1] if trace else 0
print(len(report["connections"]), elapsed, peak)
"""


def _measure(paths: list[Path], trace: bool) -> list[tuple[int, float, int]]:
    """analyze() each file in its own process, all at once: connections, seconds, peak bytes."""
    env = {"PYTHONPATH": str(ROOT / "analyzer"), "PATH": "/usr/bin:/bin"}
    procs = [subprocess.Popen([sys.executable, "-c", _MEASURE, str(p), "1" if trace else "0"],
                              stdout=subprocess.PIPE, text=True, env=env) for p in paths]
    out = []
    for proc in procs:
        stdout, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0
        n, el, peak = stdout.split()
        out.append((int(n), float(el), int(peak)))
    return out


SCAN = int(os.environ.get("PKTFLOW_SCAN_CONNECTIONS", "100000"))


def test_syn_scan_of_100k_connections(tmp_path: Path) -> None:
    """A SYN scan: every connection is reported, time grows linearly (25k vs 100k, plain
    runs), and memory per connection stays flat (tracemalloc at a tenth of each size: tracing
    every allocation of 100,000 connections takes minutes)."""
    small, big = _syn_scan(tmp_path / "s.pcap", SCAN // 4), _syn_scan(tmp_path / "b.pcap", SCAN)
    (n_s, t_s, _), (n_b, t_b, _) = _measure([small, big], trace=False)
    assert (n_s, n_b) == (SCAN // 4, SCAN)
    assert t_b / t_s < 7, (t_s, t_b)  # linear is 4; quadratic would be 16
    small_t = _syn_scan(tmp_path / "st.pcap", SCAN // 40)
    big_t = _syn_scan(tmp_path / "bt.pcap", SCAN // 10)
    (_, _, m_s), (_, _, m_b) = _measure([small_t, big_t], trace=True)
    assert m_b / m_s < 5, (m_s, m_b)  # linear is 4: per-connection state, no more
    assert m_b / (SCAN // 10) < 64_000  # about 20 KB per connection in 2026: report + analyses
    print(f"SYN scan: {SCAN // 4:,} vs {SCAN:,} connections: {t_s:.1f} s vs {t_b:.1f} s "
          f"(x{t_b / t_s:.2f}); tracemalloc peak at {SCAN // 40:,} vs {SCAN // 10:,}: "
          f"{m_s / 1e6:.0f} MB vs {m_b / 1e6:.0f} MB (x{m_b / m_s:.2f}, "
          f"{m_b / (SCAN // 10):,.0f} B per connection)")


# -- not PostgreSQL on PostgreSQL's ports -----------------------------------------------------

HTTP_REQUEST = b"GET /index.html HTTP/1.1\r\nHost: db.example\r\nAccept: */*\r\n\r\n"
HTTP_RESPONSE = (b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 2000\r\n\r\n"
                 + b"<html>" + b"Q" * 1994)


def _mysql(seq: int, body: bytes) -> bytes:
    return struct.pack("<I", len(body))[:3] + bytes([seq]) + body


def _mysql_talk(version: bytes) -> list[tuple[int, bytes]]:
    """Server greeting (protocol 10), client login, OK, a query and its answer. The greeting's
    3-byte length and sequence number 0 read as a PostgreSQL header whose type byte is the
    length's low byte and whose length is 10 (the protocol version's byte)."""
    return [
        (1, _mysql(0, b"\x0a" + version + b"\x00" + struct.pack("<I", 12)
                   + b"abcdefgh\x00\xff\xff\x21" + struct.pack("<HH", 2, 0xDFFF) + b"\x15"
                   + b"\x00" * 10 + b"ijklmnopqrst\x00caching_sha2_password\x00")),
        (0, _mysql(1, struct.pack("<IIB", 0x000FA685, 1 << 24, 33) + b"\x00" * 23
                   + b"root\x00\x20" + b"S" * 32 + b"caching_sha2_password\x00")),
        (1, _mysql(2, b"\x00\x00\x00\x02\x00\x00\x00")),
        (0, _mysql(0, b"\x03select @@version_comment limit 1")),
        (1, _mysql(1, b"\x01") + _mysql(2, b"\x03def" * 10)),
    ]


MYSQL = _mysql_talk(b"8.0.36")  # a 74-byte greeting: 'J', no PostgreSQL type
# greetings whose first byte is a PostgreSQL backend type: 73 bytes 'I' (EmptyQueryResponse,
# always 4 bytes long), Debian 12's MariaDB at 99 bytes 'c' (CopyDone, 4), 82 bytes 'R'
# (Authentication: it frames, then the bytes after it do not)
MYSQL_GREETING_I = _mysql_talk(b"5.7.9")
MARIADB_GREETING_C = _mysql_talk(b"5.5.5-10.11.6-MariaDB-0+deb12u1")
MYSQL_GREETING_R = _mysql_talk(b"8.0.36-0ubuntu")
_RANDOM = bytes((i * 2654435761 >> 13) & 0xFF for i in range(32))
_HELLO = (b"\x03\x03" + _RANDOM + b"\x00\x00\x04\x13\x01\x13\x02\x01\x00\x00\x08"
          + b"\x00\x2b\x00\x04\x03\x03\x04\x03")
_HANDSHAKE = b"\x01" + len(_HELLO).to_bytes(3, "big") + _HELLO
TLS = [  # a ClientHello with no SSLRequest before it, the server's reply, application data
    (0, b"\x16\x03\x01" + len(_HANDSHAKE).to_bytes(2, "big") + _HANDSHAKE),
    (1, b"\x16\x03\x03\x00\x30\x02\x00\x00\x2c\x03\x03" + _RANDOM + b"\x00\x13\x01\x00"
        + b"\x17\x03\x03\x01\x00" + b"E" * 256),
]
FOREIGN = {"http-on-5432": (5432, [(0, HTTP_REQUEST), (1, HTTP_RESPONSE)]),
           "mysql-on-6432": (6432, MYSQL), "tls-unrequested-on-5432": (5432, TLS),
           "mysql-greeting-I-on-5432": (5432, MYSQL_GREETING_I),
           "mariadb-greeting-c-on-5432": (5432, MARIADB_GREETING_C),
           "mysql-greeting-R-on-5432": (5432, MYSQL_GREETING_R)}


@pytest.mark.parametrize("handshake", [True, False], ids=["from-syn", "mid-stream"])
@pytest.mark.parametrize("name", sorted(FOREIGN))
def test_not_postgresql_on_its_ports(tmp_path: Path, name: str, handshake: bool) -> None:
    port, exchange = FOREIGN[name]
    talk = Talk(port)
    if not handshake:
        talk.frames = []
    for side, payload in exchange:
        talk.send(side, payload)
    code, out, err = cli("analyze", "--format", "json", str(talk.write(tmp_path / "x.pcap")))
    assert code == ExitCode.OK and err == ""
    report = json.loads(out)
    (conn,) = report["connections"]
    assert conn["protocol"] == "unknown"  # never "postgresql"
    assert conn["queries"] == [] and conn["startup"] is None
    assert conn["messages"] == {"frontend": {}, "backend": {}}
    assert conn["decode_stopped"] is not None
    (finding,) = [f for f in report["findings"] if f["code"] == "not-postgresql"]
    assert "not PostgreSQL" in finding["message"]
    assert not any(f["severity"] == "error" for f in report["findings"])
    assert conn["directions"]["server_to_client"]["payload_bytes"] == sum(
        len(p) for side, p in exchange if side == 1)
    # not PostgreSQL: no PostgreSQL error, so --strict has nothing to fail on
    code, out, err = cli("analyze", "--strict", str(tmp_path / "x.pcap"))
    assert (code, err) == (ExitCode.OK, "")
    assert "not PostgreSQL" in out


@pytest.mark.parametrize("how", ["cut", "crc"])
def test_damaged_gzip_keeps_what_precedes(tmp_path: Path, how: str) -> None:
    """A gzipped capture cut short or with a bad CRC: the frames decompressed before the damage
    are analysed (a 1 MiB read() used to lose them all with the exception)."""
    plain = DIRECT.read_bytes()[:50_000]
    gz = bytearray(gzip.compress(plain, mtime=0))
    if how == "cut":
        gz = gz[:len(gz) // 2]
    else:
        gz[-8] ^= 1  # the CRC32 in the trailer
    p = tmp_path / "x.pcap.gz"
    p.write_bytes(bytes(gz))
    code, out, err = cli("analyze", "--format", "json", str(p))
    assert code == ExitCode.DAMAGED
    assert_one_line_error(err, p)
    cap = json.loads(out)["capture"]
    assert cap["compressed"] and "compressed stream is damaged" in cap["damage"]["reason"]
    assert cap["packets"] >= (5 if how == "cut" else 10)


def test_4gb_record_under_a_4gb_snaplen_reads_nothing_big(tmp_path: Path) -> None:
    """A corrupt file header claiming a 4 GB snaplen once licensed a 4 GB read buffer for a
    record claiming 4 GB: now records above 16 MiB are damage whatever the snaplen says."""
    head = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 0xFFFFFFFF, LINKTYPE_RAW)
    p = tmp_path / "huge.pcap"
    p.write_bytes(head + struct.pack("<IIII", 1, 0, 0xFFFFFFF0, 0xFFFFFFF0) + b"x" * 1000)
    report, peak = _peak(lambda: analyze(str(p)))
    assert peak < 32 << 20, peak
    assert "4,294,967,280 captured bytes" in report["capture"]["damage"]["reason"]


def _garbage_reply(path: Path, nbytes: int) -> Path:
    """Mid-stream, proven PostgreSQL (a query answered, its cycle closed); then the capture
    misses a segment of the server's and what follows is noise that never frames."""
    talk = Talk()
    talk.frames = []
    talk.send(0, QUERY)
    talk.send(1, pg_msg(b"C", b"SELECT 0\0") + pg_msg(b"Z", b"I"))
    for _ in range(3):
        talk.send(0, QUERY)
    talk.seq[1] += 1460  # a segment the capture missed
    noise = bytes((i * 2654435761 >> 11) & 0xFF for i in range(1460 * 7))
    for i in range(nbytes // 1460):
        talk.send(1, noise[(i % 7) * 1460:(i % 7 + 1) * 1460], acked=False)
    talk.frames.append(talk._pkt(0, ACK))
    return talk.write(path)


def test_noise_that_never_resynchronises_costs_linear_time(tmp_path: Path) -> None:
    """Each sync search rescanned the whole 256 KiB window on every segment: 1 MB of noise took
    over a minute. Each position is judged once now, so 4x the noise costs about 4x the time."""
    small = _garbage_reply(tmp_path / "s.pcap", 500_000)
    big = _garbage_reply(tmp_path / "b.pcap", 2_000_000)
    times = []
    for p in (small, big):
        t0 = time.perf_counter()
        report = analyze(str(p))
        times.append(time.perf_counter() - t0)
    (conn,) = report["connections"]
    assert conn["protocol"] == "postgresql" and len(conn["queries"]) == 4
    assert conn["lost_bytes"]["backend"] >= 1_900_000
    assert times[1] / times[0] < 8, times  # linear is 4; the old rescan was 16


def test_direct_tls_connection_through_the_cli(tmp_path: Path) -> None:
    """A PostgreSQL 17 client with sslnegotiation=direct: the report calls it PostgreSQL over
    TLS (not "not PostgreSQL") and still analyses its TCP transfer."""
    from test_pgwire import client_hello
    talk = Talk()
    talk.send(0, client_hello(["postgresql"]))
    talk.send(1, b"\x16\x03\x03\x00\x7a\x02" + bytes(1400))
    talk.send(0, b"\x17\x03\x03\x01\x00" + bytes(256))
    path = talk.write(tmp_path / "direct-tls.pcap")
    code, out, err = cli("analyze", "--format", "json", str(path))
    assert code == ExitCode.OK, err
    conn = json.loads(out)["connections"][0]
    assert conn["protocol"] == "postgresql-tls"
    assert conn["directions"]["server_to_client"]["payload_bytes"] == 1406
    code, text, err = cli("analyze", str(path))
    assert code == ExitCode.OK and "directly" in text and "TLS" in text, text


# -- no cyclic garbage -------------------------------------------------------------------------

@pytest.mark.parametrize("capture", sorted((ROOT / "captures").glob("*.pcap")),
                         ids=lambda p: p.stem)
def test_a_pass_leaves_no_cyclic_garbage(capture: Path) -> None:
    """A pass makes a few Python values per connection (its judgement and words), freed as
    soon as the core has them: no reference cycles for the cyclic collector to chase, so a
    collection after a pass finds nothing to free."""
    gc.collect()
    report = analyze(str(capture))
    del report
    assert gc.collect() == 0


def test_text_overview_lists_the_busiest_connections_only(tmp_path: Path) -> None:
    """A capture of thousands of connections: the text report lists the busiest 50 and says
    how many it left out (drawing all of them took longer than the analysis); JSON has all."""
    from pktflow.report.text import MAX_OVERVIEW

    capture = str(_syn_scan(tmp_path / "scan.pcap", MAX_OVERVIEW + 7))
    code, out, _ = cli("analyze", capture)
    rows = [line for line in out.splitlines() if re.match(r"c\d+ +\S+ ->", line)]
    assert code == 0 and len(rows) == MAX_OVERVIEW
    assert "... and 7 smaller connections: --format json lists every one" in out
    assert f"{MAX_OVERVIEW + 7 - 10:,} smaller connections are not drawn" in out
    _, js, _ = cli("analyze", "--format", "json", capture)
    assert len(json.loads(js)["connections"]) == MAX_OVERVIEW + 7


def test_html_report_has_sections_for_the_busiest_connections_only(tmp_path: Path) -> None:
    """The HTML report's per-connection sections: the busiest 50, in capture order, and how
    many it left out (a pgbench -C capture of 20,000 connections made a 12 MB page)."""
    from pktflow.report.page import MAX_SECTIONS

    capture = str(_syn_scan(tmp_path / "scan.pcap", MAX_SECTIONS + 7))
    out = tmp_path / "report.html"
    code, _, err = cli("report", capture, "-o", str(out))
    assert code == 0, err
    page = out.read_text()
    ids = re.findall(r"<h2>(c\d+) 10\.1\.0\.0:", page)
    assert ids == [f"c{i}" for i in range(1, MAX_SECTIONS + 1)]  # all alike: the first ones
    assert "7 smaller connections are not listed" in page
