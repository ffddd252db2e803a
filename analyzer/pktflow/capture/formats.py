"""Record framing for pcap and pcapng: yields (linktype, ts, frame bytes, original length).

Both read the file in large blocks and cut records out of a buffer, so memory does not grow
with the file. Damage sets stats.damage = (frame, byte offset, reason) and ends the records.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from pktflow.capture.packet import CaptureStats

PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"
BLOCK = 1 << 17  # 128 KiB reads into a buffer of twice that (larger measured no faster)
# Largest frame any capture tool writes is 262,144 bytes; a record claiming more is corrupt.
MAX_FRAME = 1 << 18
MAX_BLOCK = 16 << 20

Record = tuple[int, float, bytes, int]
# Fixed fields each block type's body must hold before its data and options (block type ->
# bytes): IDB, obsolete Packet Block, Simple Packet Block, Interface Statistics, Enhanced Packet.
_MIN_BODY = {1: 8, 2: 20, 3: 4, 5: 12, 6: 20}


class _Buffer:
    """A read-ahead window over the file: `need(n)` makes n bytes available at `pos`.

    The file is read into one reused bytearray: a fresh bytes object per read cost page faults,
    and joining the unread tail to it a copy of every byte. `buf` is a view of the valid part,
    valid until the next `need`: records taken out of it are copied (bytes(...))."""

    __slots__ = ("fh", "buf", "pos", "base", "error", "_arr")

    def __init__(self, fh: BinaryIO, base: int) -> None:
        self.fh = fh
        self.buf: bytes | memoryview = b""
        self.pos = 0
        self.base = base  # file offset of buf[0]
        self.error: str | None = None
        self._arr = bytearray(2 * BLOCK)

    def need(self, n: int) -> bool:
        have = len(self.buf) - self.pos
        if have >= n:
            return True
        arr = self._arr
        if n + BLOCK > len(arr):  # a record larger than a read: room for it and a read more
            arr = self._arr = bytearray(n + BLOCK)
        arr[:have] = bytes(self.buf[self.pos:])  # the unread tail (a copy: it may overlap)
        self.base += self.pos
        self.pos = 0
        view = memoryview(arr)
        while have < n:
            try:
                # readinto1: what the stream has now (one underlying read), so the bytes before
                # damage in a compressed stream arrive before its error
                got = self.fh.readinto1(view[have:])  # type: ignore[attr-defined]
            except (EOFError, OSError) as exc:  # a cut or corrupt gzip stream (capture.gz)
                self.error = f"the compressed stream is damaged ({exc})"
                got = 0
            if not got:
                break
            have += got
        self.buf = view[:have]
        return have >= n

    @property
    def offset(self) -> int:
        return self.base + self.pos

    @property
    def at_end(self) -> bool:
        return len(self.buf) == self.pos and not self.need(1)


def _cut(st: CaptureStats, frame: int, buf: _Buffer, what: str) -> None:
    st.damage = (frame, buf.offset, buf.error or what)


def pcap_header(head: bytes, rest: bytes) -> tuple[str, bool, int, int]:
    """Byte order ("<" or ">"), nanosecond flag, snaplen and link type of a pcap file."""
    if head in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        order = "<"
    else:
        order = ">"
    nano = head in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    _major, _minor, _zone, _sigfigs, snaplen, network = struct.unpack(order + "HHiIII", rest)
    return order, nano, snaplen, network & 0x0FFFFFFF


class _PcapFile:
    """A pcap file after its header: the read-ahead buffer and how to read its records."""

    def __init__(self, fh: BinaryIO, head: bytes, st: CaptureStats) -> None:
        self.st = st
        self.b = _Buffer(fh, 4)
        self.ok = self.b.need(20)
        if not self.ok:
            _cut(st, 1, self.b, "the file ends inside the pcap file header")
            return
        b = self.b
        self.order, self.nano, self.snaplen, self.linktype = pcap_header(
            head, bytes(b.buf[b.pos:b.pos + 20]))
        b.pos += 20
        st.nanosecond = self.nano
        # a corrupt snaplen must not license a 4 GB read: no capture tool writes frames that big
        self.limit = min(max(self.snaplen, MAX_FRAME), MAX_BLOCK)
        self.rec = struct.Struct(self.order + "IIII").unpack_from

    def next_header(self, frame: int) -> tuple[int, int, int, int] | None:
        """The header of record frame + 1, with the whole record in the buffer; None at the
        end of the file or at damage, which it reports."""
        b, st = self.b, self.st
        if not b.need(16):
            if len(b.buf) > b.pos or b.error:
                _cut(st, frame + 1, b, f"the file ends inside the header of frame {frame + 1}")
            return None
        sec, frac, caplen, orig = self.rec(b.buf, b.pos)
        if caplen > self.limit:
            _cut(st, frame + 1, b, f"frame {frame + 1} claims {caplen:,} captured bytes, more "
                                   f"than any capture holds (snaplen {self.snaplen:,})")
            return None
        if not b.need(16 + caplen):
            _cut(st, frame + 1, b, f"the file ends inside frame {frame + 1} ({caplen:,} bytes "
                                   f"announced, {len(b.buf) - b.pos - 16:,} present)")
            return None
        return sec, frac, caplen, orig


def pcap_records(fh: BinaryIO, head: bytes, st: CaptureStats) -> Iterator[Record]:
    f = _PcapFile(fh, head, st)
    if not f.ok:
        return
    b, linktype = f.b, f.linktype
    scale = 1e-9 if f.nano else 1e-6
    frame = 0
    while (h := f.next_header(frame)) is not None:
        sec, frac, caplen, orig = h
        p = b.pos + 16
        b.pos = p + caplen
        frame += 1
        yield linktype, sec + frac * scale, bytes(b.buf[p:p + caplen]), orig


def pcap_batches(fh: BinaryIO, head: bytes, st: CaptureStats, scan: Callable[..., Any],
                 seen: Callable[[int], None]) -> Iterator[list[tuple]]:  # type: ignore[type-arg]
    """pcap_records and the frame decoding in one, by the native `scan_pcap`: lists of TCP
    packet tuples, with the same stats and the same damage reports as the Python path. The
    scan stops before a record this read cuts or that claims too many bytes; next_header then
    reads more, or reports the damage exactly as pcap_records does."""
    f = _PcapFile(fh, head, st)
    if not f.ok:
        return
    b, linktype = f.b, f.linktype
    big = f.order == ">"
    frame = 0
    while True:
        (b.pos, frame, packets, first, last, truncated, non_tcp, fragments,
         undecodable) = scan(b.buf, b.pos, big, f.nano, linktype, frame, f.limit)
        if first is not None:
            if st.first_ts is None:  # the first record: its link type is now seen
                seen(linktype)
            _scanned(st, frame, first, last, truncated, non_tcp, fragments, undecodable)
            yield packets
        if f.next_header(frame) is None:
            return


def _scanned(st: CaptureStats, frame: int, first: float, last: float, truncated: int,
             non_tcp: int, fragments: int, undecodable: int) -> None:
    """Account for records a native scan read (it read at least one)."""
    st.packets = frame
    if st.first_ts is None:
        st.first_ts = first
    st.last_ts = last
    st.truncated_packets += truncated
    st.non_tcp_packets += non_tcp
    st.ip_fragments += fragments
    st.undecodable_packets += undecodable


def _tsresol(v: int) -> float:
    return 2.0 ** -(v & 0x7F) if v & 0x80 else 10.0 ** -v


def _options(body: bytes, start: int, order: str) -> Iterator[tuple[int, bytes]]:
    i, n = start, len(body)
    u16 = struct.Struct(order + "HH").unpack_from
    while i + 4 <= n:
        code, length = u16(body, i)
        if code == 0:
            return
        yield code, body[i + 4:i + 4 + length]
        i += 4 + ((length + 3) & ~3)


def pcapng_records(fh: BinaryIO, head: bytes, st: CaptureStats,
                   scan: Callable[..., Any] | None = None,
                   seen: Callable[[int], None] | None = None
                   ) -> Iterator[Record | list[tuple]]:  # type: ignore[type-arg]
    """The records of a pcapng file. With the native `scan_pcapng`, runs of Enhanced Packet
    Blocks come out decoded instead: a list of TCP packet tuples, the stats (and st.packets)
    updated and their link types passed to `seen`."""
    b = _Buffer(fh, 0)
    b.buf = head
    order = "<"
    ifaces: list[tuple[int, float, float, int]] = []  # linktype, resolution, offset, snaplen
    drops: dict[int, int] = {}
    frame = 0
    while True:
        if scan is not None and ifaces:
            (b.pos, frame, packets, first, last, truncated, non_tcp, fragments, undecodable,
             links) = scan(b.buf, b.pos, order == ">", ifaces, frame, MAX_BLOCK)
            if first is not None:
                _scanned(st, frame, first, last, truncated, non_tcp, fragments, undecodable)
                for link in links:
                    seen(link)  # type: ignore[misc]
                yield packets
        if not b.need(12):
            if len(b.buf) > b.pos or b.error:
                _cut(st, frame + 1, b, "the file ends inside a pcapng block header")
            break
        raw_type = b.buf[b.pos:b.pos + 4]
        if raw_type == PCAPNG_MAGIC:  # Section Header Block: its byte-order magic decides
            bom = b.buf[b.pos + 8:b.pos + 12]
            if bom == b"\x4d\x3c\x2b\x1a":
                order = "<"
            elif bom == b"\x1a\x2b\x3c\x4d":
                order = ">"
            else:
                _cut(st, frame + 1, b, "a pcapng section header has a bad byte-order magic")
                break
            ifaces = []
        btype, blen = struct.unpack_from(order + "II", b.buf, b.pos)
        if blen < 12 or blen % 4 or blen > MAX_BLOCK:
            _cut(st, frame + 1, b, f"a pcapng block (type {btype:#x}) has an invalid length "
                                   f"of {blen:,} bytes")
            break
        if not b.need(blen):
            _cut(st, frame + 1, b, f"the file ends inside a pcapng block (type {btype:#x}, "
                                   f"{blen:,} bytes announced)")
            break
        if blen - 12 < _MIN_BODY.get(btype, 0):
            _cut(st, frame + 1, b, f"a pcapng block (type {btype:#x}) of {blen:,} bytes is too "
                                   f"short for its fixed fields")
            break
        (trail,) = struct.unpack_from(order + "I", b.buf, b.pos + blen - 4)
        if trail != blen:
            _cut(st, frame + 1, b, f"a pcapng block (type {btype:#x}) announces {blen:,} bytes "
                                   f"but ends with a length of {trail:,}")
            break
        body = bytes(b.buf[b.pos + 8:b.pos + blen - 4])
        b.pos += blen
        if btype == 6 or btype == 2:  # Enhanced Packet Block / obsolete Packet Block
            if btype == 6:
                iface, hi, lo, caplen, orig = struct.unpack_from(order + "IIIII", body)
            else:
                iface, _drops, hi, lo, caplen, orig = struct.unpack_from(order + "HHIIII", body)
            if iface >= len(ifaces) or 20 + caplen > len(body):
                b.pos -= blen
                _cut(st, frame + 1, b, f"frame {frame + 1} names interface {iface}, which was "
                                       f"not described, or overruns its block")
                break
            link, res, off, _snap = ifaces[iface]
            frame += 1
            yield link, ((hi << 32) | lo) * res + off, body[20:20 + caplen], orig
        elif btype == 3:  # Simple Packet Block: interface 0, no timestamp
            if not ifaces:
                continue
            (orig,) = struct.unpack_from(order + "I", body)
            link, _res, _off, snap = ifaces[0]
            caplen = min(orig, len(body) - 4, snap or orig)
            frame += 1
            yield link, st.last_ts or 0.0, body[4:4 + caplen], orig
        elif btype == 1:  # Interface Description Block
            link, _res16, snap = struct.unpack_from(order + "HHI", body)
            res, off = 1e-6, 0.0
            for code, val in _options(body, 8, order):
                if code == 9 and val:
                    res = _tsresol(val[0])
                elif code == 14 and len(val) == 8:
                    off = float(struct.unpack(order + "q", val)[0])
            ifaces.append((link, res, off, snap))
        elif btype == 5:  # Interface Statistics Block: the capturing tool's drop counter
            (iface,) = struct.unpack_from(order + "I", body)
            for code, val in _options(body, 12, order):
                if code == 5 and len(val) == 8:
                    drops[iface] = struct.unpack(order + "Q", val)[0]
    if drops:
        st.if_drops = sum(drops.values())
