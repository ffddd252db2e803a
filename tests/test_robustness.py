"""Captures from production incidents: cut short, corrupt, huge, hostile, or not PostgreSQL.

pktflow must always finish, say what it could not read (capture.damage, a finding, or a one-line
error with the README's exit code) and analyse the rest. Big captures are generated into
tmp_path with struct (scapy would take minutes for 100,000 connections), never committed.
"""

from __future__ import annotations

import io
import json
import os
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

from pktflow.capture.packet import ACK, FIN, PSH, RST, SYN
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
    """A raw IPv4 + TCP packet (checksums left zero: pktflow does not check them)."""
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 5 << 4,
                      flags, win, 0, 0)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40 + len(payload), 0, 0, 64, 6, 0, src, dst)
    return ip + tcp + payload


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


STARTUP = struct.pack("!II", 8 + 16, 196608) + b"user\0alice\0\0\0\0\0"[:16]
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
