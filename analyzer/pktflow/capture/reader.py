"""Open a capture (pcap, pcapng, either gzipped) and stream its TCP packets as tuples.

Damage part-way (a cut record, a corrupt block) ends iteration normally with `stats.damage`
set, so everything before it is still analysed; the caller reports it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from types import ModuleType, TracebackType
from typing import Any, BinaryIO, cast

from pktflow import accel
from pktflow.capture.formats import (PCAPNG_MAGIC, Record, pcap_batches, pcap_records,
                                     pcapng_records)
from pktflow.capture.gz import GzipStream
from pktflow.capture.ip import FRAGMENT, NOT_TCP, decode
from pktflow.capture.link import DECODERS, link_name
from pktflow.capture.packet import CaptureStats
from pktflow.errors import NoFileError, NotACaptureError, UnsupportedCaptureError

_GZIP_MAGIC = b"\x1f\x8b"
FED = 0  # a native core took the packet (Core.decode)
_PCAP_MAGICS = {b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d"}


class Capture:
    def __init__(self, path: str) -> None:
        self.path = path
        self.stats = CaptureStats(file=path)
        self._fh: BinaryIO = _open(path)
        head = self._fh.read(4)
        if head[:2] == _GZIP_MAGIC:
            self._fh.seek(0)
            self._fh = GzipStream(self._fh)  # type: ignore[assignment]
            self.stats.compressed = True
            try:
                head = self._fh.read(4)
            except (OSError, EOFError) as exc:
                raise NotACaptureError(f"not a valid gzip file ({exc})", file=path,
                                       offset=0) from None
        if not head:
            raise NotACaptureError("the file is empty", file=path, offset=0)
        if head == PCAPNG_MAGIC:
            self.stats.format = "pcapng"
        elif head in _PCAP_MAGICS:
            self.stats.format = "pcap"
        else:
            raise NotACaptureError(
                f"not a pcap or pcapng capture (starts with {head.hex()})", file=path, offset=0,
                hint="record with tcpdump -w, or convert with editcap")
        self._head = head
        self._seen_links: set[int] = set()  # link types of the records read

    def __enter__(self) -> Capture:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._fh.close()

    def __iter__(self) -> Iterator[tuple]:  # type: ignore[type-arg]
        for batch in self.batches():
            yield from batch

    def batches(self) -> Iterator[list[tuple]]:  # type: ignore[type-arg]
        """The TCP packets in capture order, a list at a time: the per-packet loop's unit."""
        native = accel.native
        if native is not None and self.stats.format == "pcap":
            batches = pcap_batches(self._fh, self._head, self.stats, native.scan_pcap,
                                   self._seen)
        else:
            batches = self._record_batches(native)
        yield from self._counted(batches)

    def feed(self, core: Any, progress: Callable[[int], None] | None = None) -> None:
        """Feed every record to the native analysis pass (pktflow._core.Core), which decodes
        and analyses them without packet objects, in the batches `batches` would make (the
        engine is swept after each, as pipeline.feed_capture does)."""
        if self.stats.format == "pcap":
            counts = pcap_batches(self._fh, self._head, self.stats, core.scan_pcap, self._seen)
        else:
            counts = self._record_batches(accel.native, core)
        n = 0
        for count in self._counted(counts):
            if progress is not None and (n + count) >> 16 != n >> 16:
                progress(n + count)
            n += count

    def _counted(self, batches: Iterator[Any]) -> Iterator[Any]:
        """The batches (lists of packets, or counts of packets fed), counted in the stats."""
        st = self.stats
        tcp = 0
        for batch in batches:
            tcp += batch if type(batch) is int else len(batch)
            yield batch
        st.tcp_packets = tcp
        if st.packets and not tcp and not any(t in DECODERS for t in self._seen_links):
            raise UnsupportedCaptureError(
                f"no supported link type ({', '.join(st.link_types)})", file=self.path,
                hint="pktflow reads Ethernet, Linux cooked (SLL/SLL2), BSD loopback and raw IP")

    def _seen(self, linktype: int) -> None:
        self._seen_links.add(linktype)
        name = link_name(linktype)
        if name not in self.stats.link_types:
            self.stats.link_types.append(name)

    def _record_batches(self, native: ModuleType | None, core: Any = None
                        ) -> Iterator[Any]:
        """Batches decoded record by record (pcapng, or no native speedups); runs of pcapng
        packet blocks a native scan decoded pass through as they are, stats already counted.
        With `core`, records are fed to it instead of decoded: the batches are counts, and at
        each batch's end the core is swept (a native scan's run sweeps itself, the packets
        fed before it first)."""
        st = self.stats
        records: Iterator[Record | list[tuple] | int]  # type: ignore[type-arg]
        scan = core.scan_pcapng if core is not None else (
            native.scan_pcapng if native is not None else None)
        if st.format == "pcap":
            records = pcap_records(self._fh, self._head, st)
        else:
            records = pcapng_records(self._fh, self._head, st, scan, self._seen)
        decoders = DECODERS
        seen_links = self._seen_links
        decoder = core.decode if core is not None else (
            native.decode if native is not None else None)
        frame = 0
        pending: list[tuple] = []  # type: ignore[type-arg]
        fed = 0  # with a core: packets fed since its last sweep
        for rec in records:
            if type(rec) is list or type(rec) is int:
                frame = st.packets
                if pending:
                    yield pending
                    pending = []
                if fed:
                    yield fed
                    fed = 0
                yield rec
                continue
            linktype, ts, data, orig_len = cast(Record, rec)
            frame += 1
            if linktype not in seen_links:
                self._seen(linktype)
            if st.first_ts is None:
                st.first_ts = ts
            st.last_ts = ts
            if len(data) < orig_len:
                st.truncated_packets += 1
            if decoder is not None:
                pkt = decoder(linktype, data, frame, ts)
            else:
                link = decoders.get(linktype)
                where = link(data) if link is not None else None
                if where is None:
                    st.non_tcp_packets += 1
                    continue
                pkt = decode(data, where[0], where[1], frame, ts)
            if type(pkt) is tuple:
                pending.append(pkt)
                if len(pending) >= 256:
                    yield pending
                    pending = []
            elif pkt == FED:
                fed += 1
                if fed >= 256:
                    core.sweep_pending()
                    yield fed
                    fed = 0
            elif pkt == NOT_TCP:
                st.non_tcp_packets += 1
            elif pkt == FRAGMENT:
                st.ip_fragments += 1
            else:
                st.undecodable_packets += 1
        if pending:
            yield pending
        if fed:
            core.sweep_pending()
            yield fed
        st.packets = frame


def _open(path: str) -> BinaryIO:
    if os.path.isdir(path):
        raise NoFileError("is a directory, not a capture file", file=path)
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise NoFileError("no such file", file=path) from None
    except PermissionError:
        raise NoFileError("permission denied", file=path,
                          hint="check the file's permissions (tcpdump -w files are often "
                               "root-only)") from None
    except OSError as exc:
        raise NoFileError(f"cannot open: {exc.strerror}", file=path) from None


def open_capture(path: str) -> Capture:
    return Capture(path)


__all__ = ["Capture", "open_capture"]
