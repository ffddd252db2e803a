"""Gzip-compressed captures, read as the stream of their decompressed bytes.

Two things gzip.GzipFile does not give: speed, with ISA-L's inflate (the isal package, about
three times zlib's) when it is installed and zlib's otherwise, decoding the same bytes; and
every decodable byte before damage: a member's CRC is checked once its data is handed out,
and a cut or corrupt stream hands out what it decoded before raising. The members of a
multi-member file follow one another; zero padding after the last is allowed, as gzip does.
"""

from __future__ import annotations

import functools
import importlib
import struct
import zlib
from types import ModuleType
from typing import Any, BinaryIO

READ = 1 << 17  # compressed bytes per read
STEP = 1 << 15  # compressed bytes per inflate call: corrupt data loses at most this much
MAGIC = b"\x1f\x8b"
FHCRC, FEXTRA, FNAME, FCOMMENT = 0x02, 0x04, 0x08, 0x10


@functools.cache
def deflate_lib() -> ModuleType:
    """isal's zlib-compatible module when installed (looked for when first needed: plain
    captures of a few connections do not load it), zlib otherwise: they decode the same
    bytes, and isal inflates about 3x and deflates (level 1) about 2x as fast."""
    try:
        return importlib.import_module("isal.isal_zlib")
    except ImportError:
        return zlib


def backend() -> str:
    return "zlib" if deflate_lib() is zlib else "isal"


class GzipError(OSError):
    """The compressed stream is damaged; the message says how and at which compressed byte."""


class GzipStream:
    """A readable binary stream (read, readinto1, close) of a gzip file's contents."""

    def __init__(self, fh: BinaryIO, lib: ModuleType | None = None) -> None:
        self._fh = fh
        self._lib: Any = lib if lib is not None else deflate_lib()
        self._errors = (zlib.error, self._lib.error)
        self._in = b""  # compressed bytes read; those from _at on are not used yet
        self._at = 0
        self._used = 0  # compressed offset of _in[_at], for messages
        self._member: Any = None  # the member's decompressor; None between members
        self._crc = 0
        self._size = 0
        self._out = memoryview(b"")  # decompressed bytes not handed out yet
        self._error: Exception | None = None  # raised once _out is handed out
        self._done = False

    # -- the stream interface ----------------------------------------------------------------

    def readinto1(self, b: Any) -> int:
        while not self._out:
            if self._error is not None:
                error, self._error = self._error, None
                self._done = True
                raise error
            if self._done:
                return 0
            try:
                self._out = memoryview(self._decode())
            except (OSError, EOFError) as exc:
                self._error = exc  # raised by this loop; later calls return 0
        n = min(len(b), len(self._out))
        b[:n] = self._out[:n]
        self._out = self._out[n:]
        return n

    def read(self, n: int) -> bytes:
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = self.readinto1(view[got:])
            if not k:
                break
            got += k
        return bytes(buf[:got])

    def close(self) -> None:
        self._fh.close()

    # -- decoding ------------------------------------------------------------------------------

    def _more(self, n: int) -> bool:
        """At least n unused compressed bytes, from _in[0] on, unless the file ends first."""
        if self._at:
            self._in, self._at = self._in[self._at:], 0
        while len(self._in) < n:
            chunk = self._fh.read(max(READ, n - len(self._in)))
            if not chunk:
                return False
            self._in += chunk
        return True

    def _take(self, n: int) -> bytes:
        piece = self._in[self._at:self._at + n]
        self._at += len(piece)
        self._used += len(piece)
        return piece

    def _header(self) -> bool:
        """Start the next member; False at the end of the file (zero padding allowed)."""
        while True:
            if not self._more(1):
                return False
            stripped = self._in.lstrip(b"\x00")
            self._used += len(self._in) - len(stripped)
            self._in = stripped
            if self._in:
                break
        self._more(10)
        if not (MAGIC + b"\x08").startswith(self._in[:3]):  # magic and deflate, or their start
            raise GzipError(f"no gzip member at compressed byte {self._used:,}")
        if len(self._in) < 10:
            raise EOFError("the file ends inside a gzip member header")
        flags, at = self._in[3], 10
        if flags & FEXTRA:
            if not self._more(at + 2):
                raise EOFError("the file ends inside a gzip member header")
            at += 2 + struct.unpack_from("<H", self._in, at)[0]
        for flag in (FNAME, FCOMMENT):
            if flags & flag:
                while (end := self._in.find(b"\x00", at)) < 0:
                    if not self._more(len(self._in) + 1):
                        raise EOFError("the file ends inside a gzip member header")
                at = end + 1
        if flags & FHCRC:
            at += 2
        if not self._more(at):
            raise EOFError("the file ends inside a gzip member header")
        self._take(at)
        self._member = self._lib.decompressobj(-15)  # raw deflate: _trailer checks the CRC
        self._crc = self._size = 0
        return True

    def _decode(self) -> bytes:
        """The next decompressed bytes (never empty), or b"" at the end of the file."""
        while True:
            if self._member is None and not self._header():
                self._done = True
                return b""
            if self._at == len(self._in) and not self._more(1):
                raise EOFError("the file ends inside the compressed stream")
            start = self._used
            piece = self._take(STEP)
            try:
                out = self._member.decompress(piece)
            except self._errors:
                raise GzipError(f"corrupt deflate data in compressed bytes {start:,}-"
                                f"{self._used:,}") from None
            self._crc = self._lib.crc32(out, self._crc)
            self._size += len(out)
            if self._member.eof:
                rest = len(self._member.unused_data)  # the piece's bytes after the member
                self._at -= rest
                self._used -= rest
                self._member = None
                self._trailer(out)
            if out:
                return out

    def _trailer(self, out: bytes) -> None:
        """Check the member's CRC and length; on a mismatch the data is still handed out."""
        at = self._used
        error: Exception | None = None
        if not self._more(8):
            error = EOFError("the file ends inside a gzip member trailer")
        else:
            crc, size = struct.unpack("<II", self._take(8))
            if crc != self._crc or size != self._size & 0xFFFFFFFF:
                error = GzipError(f"the gzip member ending at compressed byte {at:,} fails its "
                                  f"CRC or length check")
        if error is not None:
            if not out:
                raise error
            self._error = error  # raised by readinto1 once `out` is handed out
