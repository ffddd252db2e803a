"""Gzipped captures end to end: the core's gzip reader (analyzer/core/src/capture/gzip.rs, unit
tests in capture/tests.rs) as analyze() and the CLI show it. A gzipped capture analyses as the
same capture uncompressed; members follow one another, zero padding after the last is allowed;
every decodable byte before damage is analysed, then the damage is reported: a cut file, a bad
CRC or length, corrupt deflate data, garbage after a member. The expectations are those of the
reference reader (capture/gz.py), which gave these same reports."""

from __future__ import annotations

import gzip
import io
import json
import random
import zlib
from pathlib import Path
from typing import Any

import pytest
from tcpfeed import Flow, write_capture

from pktflow.cli import Env, main
from pktflow.errors import ExitCode, NotACaptureError
from pktflow.pipeline import analyze

STEP = 1 << 15  # compressed bytes per inflate call: corrupt data loses at most this much
CUT = "the compressed stream is damaged (the file ends inside the compressed stream)"
TRAILER_CUT = "the compressed stream is damaged (the file ends inside a gzip member trailer)"


def capture_bytes(tmp: Path, segments: int, seed: int = 1, size: int = 1400) -> bytes:
    """A crafted transfer as a pcap: server segments of `size` bytes, runs of one byte and
    incompressible stretches, every second one acknowledged; closed with FINs."""
    rng = random.Random(seed)
    f = Flow()
    f.handshake()
    for i in range(segments):
        f.send(1, bytes([rng.randrange(256)]) * size if i % 3 else rng.randbytes(size))
        if i % 2:
            f.ack(0)
    f.fin(1)
    f.ack(0)
    f.fin(0)
    f.ack(1)
    return write_capture(tmp / "plain.pcap", f.packets).read_bytes()


def record_ends(plain: bytes) -> list[int]:
    """Offsets where the pcap's file header (24) and each record end."""
    ends, pos = [24], 24
    while pos + 16 <= len(plain):
        pos += 16 + int.from_bytes(plain[pos + 8:pos + 12], "little")
        if pos <= len(plain):
            ends.append(pos)
    return ends


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """307 records, 297 KB: about 99 KB compressed, three inflate steps."""
    return capture_bytes(tmp_path_factory.mktemp("gz"), 200)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """11 records, 1,280 bytes: every cut of its 462 compressed bytes is tried."""
    return capture_bytes(tmp_path_factory.mktemp("gz"), 3, seed=2, size=200)


def run(tmp: Path, data: bytes, name: str = "x.pcap.gz") -> dict[str, Any]:
    p = tmp / name
    p.write_bytes(data)
    return analyze(str(p))


def assert_analysed_as(report: dict[str, Any], tmp: Path, plain: bytes) -> None:
    """The report's connections are those of the uncompressed capture `plain`."""
    want = run(tmp, plain, "want.pcap")
    assert report["connections"] == want["connections"]
    assert report["relays"] == want["relays"]


def complete_records(plain: bytes, decoded: int) -> int:
    """Records wholly within the first `decoded` bytes of the capture."""
    return sum(1 for e in record_ends(plain)[1:] if e <= decoded)


def assert_damaged(report: dict[str, Any], plain: bytes, packets: int, reason: str,
                   decoded: int | None = None) -> None:
    """Damage right after `packets` whole records, with `decoded` bytes of the capture read
    (all of it unless given): at offset 4 when they end inside the pcap file header."""
    cap = report["capture"]
    assert cap["compressed"] and cap["packets"] == cap["tcp_packets"] == packets
    offset = record_ends(plain)[packets] if (decoded or len(plain)) >= 24 else 4
    assert cap["damage"] == {"frame": packets + 1, "offset": offset, "reason": reason}
    assert [f["code"] for f in report["findings"] if f["severity"] == "error"] == \
        ["capture-damaged"]


def test_members_padding_and_header_fields_read_as_one_stream(tmp_path: Path,
                                                              plain: bytes) -> None:
    """Members split mid-record; the second with every optional header field, then an empty
    member and zero padding; detected by its content (no .gz in the name)."""
    split = record_ends(plain)[100] + 7
    member_b = bytearray(gzip.compress(plain[split:], compresslevel=1, mtime=0))
    member_b[3] |= 0x08 | 0x10 | 0x04  # FNAME, FCOMMENT, FEXTRA
    member_b[10:10] = b"\x03\x00xyzcapture.pcap\x00a comment\x00"
    data = (gzip.compress(plain[:split], mtime=0) + bytes(member_b) + gzip.compress(b"", mtime=0)
            + b"\0" * 9)
    assert gzip.decompress(data) == plain  # the reference agrees the file is valid
    report = run(tmp_path, data, "capture.pcap")
    want = run(tmp_path, plain, "want.pcap")
    assert report["capture"]["compressed"] and not want["capture"]["compressed"]
    for key in ("file", "compressed"):
        report["capture"].pop(key), want["capture"].pop(key)
    report.pop("tool"), want.pop("tool")
    assert report == want
    assert report["capture"]["packets"] == 307 and report["capture"]["damage"] is None


def check_cut(tmp: Path, plain: bytes, data: bytes, cut: int) -> dict[str, Any] | None:
    """A gzipped capture cut at `cut`: what decodes is analysed, then the cut is reported
    (or, with not even a capture's magic decoded, the file is not a valid gzip file)."""
    part = data[:cut]
    if cut < 2:  # too short to be told from anything else
        with pytest.raises(NotACaptureError, match="the file is empty" if cut == 0
                           else r"not a pcap or pcapng capture \(starts with 1f\)"):
            run(tmp, part)
        return None
    if cut < 10:
        with pytest.raises(NotACaptureError, match=r"not a valid gzip file \(the file ends "
                                                   r"inside a gzip member header\)"):
            run(tmp, part)
        return None
    decoded = len(zlib.decompressobj(-15).decompress(part[10:]))
    if decoded < 4:
        with pytest.raises(NotACaptureError, match=r"not a valid gzip file \(the file ends "
                                                   r"inside the compressed stream\)"):
            run(tmp, part)
        return None
    report = run(tmp, part)
    if cut == len(data):
        assert report["capture"]["damage"] is None and report["capture"]["compressed"]
        assert report["capture"]["packets"] == len(record_ends(plain)) - 1
        return report
    # nothing decodable is lost: a fresh decompressor fed the same bytes gets no further
    assert_damaged(report, plain, complete_records(plain, decoded),
                   TRAILER_CUT if cut >= len(data) - 8 else CUT, decoded)
    return report


def test_every_cut_of_a_small_file(tmp_path: Path, small: bytes) -> None:
    data = gzip.compress(small, mtime=0)
    outcomes = set()
    for cut in range(len(data) + 1):
        report = check_cut(tmp_path, small, data, cut)
        if report is not None:
            outcomes.add(report["capture"]["packets"])
            if cut % 17 == 0:  # the records before the cut analyse as uncut
                n = report["capture"]["packets"]
                assert_analysed_as(report, tmp_path, small[:record_ends(small)[n]])
    assert outcomes == set(range(len(record_ends(small))))


def test_a_cut_file_gives_what_decodes(tmp_path: Path, plain: bytes) -> None:
    data = gzip.compress(plain, mtime=0)
    for cut in (11, 1000, len(data) // 3, 2 * len(data) // 3, len(data) - 9, len(data) - 8,
                len(data) - 1):
        report = check_cut(tmp_path, plain, data, cut)
        if report is not None:
            n = report["capture"]["packets"]
            assert_analysed_as(report, tmp_path, plain[:record_ends(plain)[n]])


@pytest.mark.parametrize("byte", [-8, -1], ids=["crc", "length"])
def test_a_bad_crc_or_length_is_reported_after_the_data(tmp_path: Path, plain: bytes,
                                                        byte: int) -> None:
    data = bytearray(gzip.compress(plain, mtime=0))
    data[byte] ^= 1
    report = run(tmp_path, bytes(data))
    # the member's deflate data ends where its 8-byte trailer starts
    assert_damaged(report, plain, 307, f"the compressed stream is damaged (the gzip member "
                   f"ending at compressed byte {len(data) - 8:,} fails its CRC or length "
                   f"check)")
    assert_analysed_as(report, tmp_path, plain)


def test_corrupt_deflate_keeps_the_members_before(tmp_path: Path, plain: bytes) -> None:
    """A second member whose first block has the reserved type: the first member's records
    are all analysed, then the corrupt step (at most STEP compressed bytes) is reported."""
    ends = record_ends(plain)
    first = gzip.compress(plain[:ends[150]], mtime=0)
    second = bytearray(gzip.compress(plain[ends[150]:], mtime=0))
    second[10] |= 0x06  # BTYPE 11
    report = run(tmp_path, first + bytes(second))
    reason = report["capture"]["damage"]["reason"]
    prefix = "the compressed stream is damaged (corrupt deflate data in compressed bytes "
    assert reason.startswith(prefix) and reason.endswith(")")
    start, end = (int(x.replace(",", "")) for x in reason[len(prefix):-1].split("-"))
    assert start == len(first) + 10 and start < end <= start + STEP
    assert_damaged(report, plain, 150, reason)
    assert_analysed_as(report, tmp_path, plain[:ends[150]])


@pytest.mark.parametrize("at", [20_000, 40_000, 49_554, 60_000, 80_000])
def test_corrupt_deflate_mid_stream_keeps_the_steps_before(tmp_path: Path, plain: bytes,
                                                           at: int) -> None:
    """Damage mid-stream: what the compressed bytes up to the step before it decode to is
    analysed intact, then damage is reported (a corrupt code, or what the garbage it decoded
    to breaks: a record's length)."""
    data = bytearray(gzip.compress(plain, mtime=0))
    data[at:at + 16] = b"\xff" * 16
    report = run(tmp_path, bytes(data))
    safe = len(zlib.decompressobj(-15).decompress(bytes(data[10:max(10, at - 2 * STEP)])))
    intact = complete_records(plain, safe)
    cap = report["capture"]
    assert cap["damage"] is not None and cap["damage"]["frame"] == cap["packets"] + 1
    assert intact <= cap["packets"] < 307
    got = report["connections"][0]["directions"]["server_to_client"]
    want = run(tmp_path, plain[:record_ends(plain)[cap["packets"]]], "want.pcap")
    assert got == want["connections"][0]["directions"]["server_to_client"]


@pytest.mark.parametrize("tail,at", [(b"PK\x03\x04", 0), (b"\0\0\0x", 3)],
                         ids=["zip", "after-padding"])
def test_garbage_after_a_member_is_damage(tmp_path: Path, plain: bytes, tail: bytes,
                                          at: int) -> None:
    data = gzip.compress(plain, mtime=0)
    report = run(tmp_path, data + tail)
    assert_damaged(report, plain, 307, f"the compressed stream is damaged (no gzip member at "
                   f"compressed byte {len(data) + at:,})")
    assert_analysed_as(report, tmp_path, plain)


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Env(stdout=out, stderr=err, width=120))
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("how", ["cut", "trailer", "crc", "garbage"])
def test_the_cli_reports_the_damage_in_one_line(tmp_path: Path, plain: bytes, how: str) -> None:
    data = bytearray(gzip.compress(plain, mtime=0))
    if how == "cut":
        data = data[:len(data) // 2]
    elif how == "trailer":
        data = data[:-3]
    elif how == "crc":
        data[-8] ^= 1
    else:
        data += b"\x1f\x8b\x08"  # a member's start, cut: garbage as well
    p = tmp_path / "d.pcap.gz"
    p.write_bytes(bytes(data))
    code, out, err = cli("analyze", "--format", "json", str(p))
    assert code == ExitCode.DAMAGED
    damage = json.loads(out)["capture"]["damage"]
    assert err == (f"pktflow: {p} (frame {damage['frame']}, byte offset {damage['offset']}): "
                   f"{damage['reason']}; the report covers what precedes it\n")


def test_not_even_a_magic_decodes_is_not_a_capture(tmp_path: Path, plain: bytes) -> None:
    p = tmp_path / "x.pcap.gz"
    p.write_bytes(gzip.compress(plain, mtime=0)[:11])
    code, out, err = cli("analyze", str(p))
    assert code == ExitCode.NOT_A_CAPTURE and out == ""
    assert err.startswith(f"pktflow: {p} (byte offset 0): not a valid gzip file (the file ends "
                          f"inside the compressed stream)")
