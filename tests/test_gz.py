"""The gzip stream (capture/gz.py), with ISA-L's inflate and with zlib's: the same bytes as
Python's gzip module, every decodable byte before damage, the same errors either way."""

from __future__ import annotations

import gzip
import io
import os
import random
import zlib
from types import ModuleType

import pytest

from pktflow.capture import gz
from pktflow.capture.gz import GzipError, GzipStream

isal_zlib = pytest.importorskip("isal.isal_zlib", reason="isal is a declared dependency")
LIBS = {"zlib": zlib, "isal": isal_zlib}


def payload(seed: int, n: int) -> bytes:
    """Capture-like: runs of repeated records and incompressible stretches."""
    rng = random.Random(seed)
    out = bytearray()
    while len(out) < n:
        out += rng.randbytes(rng.randrange(1, 3000)) if rng.random() < 0.3 else \
            bytes([rng.randrange(256)]) * rng.randrange(1, 5000)
    return bytes(out[:n])


def drain(s: GzipStream, step: int = 7919) -> tuple[bytes, Exception | None]:
    out, buf = bytearray(), bytearray(step)
    try:
        while k := s.readinto1(memoryview(buf)):
            out += buf[:k]
    except (OSError, EOFError) as exc:
        return bytes(out), exc
    return bytes(out), None


def stream(data: bytes, lib: ModuleType) -> GzipStream:
    return GzipStream(io.BytesIO(data), lib)  # type: ignore[arg-type]


def test_the_installed_backend_is_isal() -> None:
    """pyproject.toml declares isal: the fast path is the one that runs."""
    assert gz.backend() == "isal"


@pytest.mark.parametrize("lib", LIBS)
def test_members_padding_and_header_fields_decode_as_gzip_does(lib: str) -> None:
    a, b = payload(1, 400_000), payload(2, 5)
    member_b = bytearray(gzip.compress(b, compresslevel=1, mtime=0))
    member_b[3] |= gz.FNAME | gz.FCOMMENT | gz.FEXTRA  # every optional header field
    member_b[10:10] = b"\x03\x00xyzcapture.pcap\x00a comment\x00"
    data = gzip.compress(a, mtime=0) + bytes(member_b) + gzip.compress(b"", mtime=0) + b"\0" * 9
    assert gzip.decompress(data) == a + b  # the reference agrees the file is valid
    assert drain(stream(data, LIBS[lib])) == (a + b, None)


@pytest.mark.parametrize("lib", LIBS)
def test_a_cut_file_gives_what_decodes_then_eof(lib: str) -> None:
    plain = payload(3, 600_000)
    data = gzip.compress(plain, mtime=0)
    for cut in (11, 1000, len(data) // 3, len(data) - 9, len(data) - 1):
        got, exc = drain(stream(data[:cut], LIBS[lib]))
        assert isinstance(exc, EOFError) and plain.startswith(got), cut
        # nothing decodable is lost: a fresh decompressor fed the same bytes gets no further
        assert len(got) >= len(zlib.decompressobj(-15).decompress(data[10:cut])), cut


@pytest.mark.parametrize("lib", LIBS)
def test_a_bad_crc_is_raised_after_the_data(lib: str) -> None:
    plain = payload(4, 100_000)
    data = bytearray(gzip.compress(plain, mtime=0))
    data[-8] ^= 1
    got, exc = drain(stream(bytes(data), LIBS[lib]))
    assert got == plain and isinstance(exc, GzipError) and "CRC" in str(exc)


@pytest.mark.parametrize("lib", LIBS)
def test_corrupt_deflate_keeps_the_steps_before(lib: str) -> None:
    """Damage mid-stream: what the compressed bytes up to the step before it decode to is
    handed out intact, then the damage is raised (a corrupt code, or the CRC at the end)."""
    plain = payload(7, 2_000_000)
    data = bytearray(gzip.compress(plain, mtime=0))
    at = len(data) // 2
    data[at:at + 16] = b"\xff" * 16
    got, exc = drain(stream(bytes(data), LIBS[lib]))
    assert isinstance(exc, GzipError), exc
    intact = next((i for i, (x, y) in enumerate(zip(got, plain)) if x != y), len(got))
    assert intact >= len(zlib.decompressobj(-15).decompress(bytes(data[10:at - 2 * gz.STEP])))


@pytest.mark.parametrize("lib", LIBS)
def test_garbage_after_a_member_is_damage(lib: str) -> None:
    plain = payload(5, 10_000)
    got, exc = drain(stream(gzip.compress(plain, mtime=0) + b"PK\x03\x04", LIBS[lib]))
    assert got == plain and isinstance(exc, GzipError) and "no gzip member" in str(exc)


def test_both_backends_agree_on_every_cut_of_a_small_file() -> None:
    data = gzip.compress(payload(6, 20_000), mtime=0)
    for cut in range(0, len(data), 97):
        a, b = (drain(stream(data[:cut], lib)) for lib in LIBS.values())
        assert a[0] == b[0] and type(a[1]) is type(b[1]) and str(a[1]) == str(b[1]), cut
