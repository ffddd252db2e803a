"""The words for what the Rust capture reader (pktflow_core::capture) reports as facts.

The facts arrive as the binding hands them (pktflow/_core.pyi): a damage and a stream fault
are dicts tagged by "kind", the damage's kind's fields beside its frame and offset:
{"frame": 3, "offset": 100, "kind": "record_cut", "caplen": 1500, "present": 40,
 "stream": None}; an open error is an exception class per kind, its facts as attributes.

- open_error(exc, path): the exception to raise for the core's OpenError (a subclass per way
  a capture cannot be opened, its facts as attributes), with its reason, offset and hint.
- damage_reason(damage): the "reason" of report["capture"]["damage"].
- damage_tuple(damage): stats.damage as the reference kept it, (frame, offset, reason).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from pktflow import _core
from pktflow.errors import NoFileError, NotACaptureError, PktflowError, UnsupportedCaptureError

if TYPE_CHECKING:
    from pktflow._core import DamageFacts, StreamFault

NOT_A_CAPTURE_HINT = "record with tcpdump -w, or convert with editcap"
PERMISSION_HINT = "check the file's permissions (tcpdump -w files are often root-only)"
UNSUPPORTED_HINT = "pktflow reads Ethernet, Linux cooked (SLL/SLL2), BSD loopback and raw IP"


def _os_error(errno: int | None) -> OSError:
    """The OSError Python's own I/O would have raised (its str() is what messages quote)."""
    if errno is None:
        return OSError("I/O error")
    return OSError(errno, os.strerror(errno))


def stream_fault(fault: StreamFault) -> str:
    """A fault of the compressed stream, as capture/gz.py worded its exceptions."""
    kind = fault["kind"]
    if kind == "no_member":
        return f"no gzip member at compressed byte {fault['at']:,}"
    if kind == "header_cut":
        return "the file ends inside a gzip member header"
    if kind == "data_cut":
        return "the file ends inside the compressed stream"
    if kind == "corrupt":
        return f"corrupt deflate data in compressed bytes {fault['start']:,}-{fault['end']:,}"
    if kind == "check_failed":
        return f"the gzip member ending at compressed byte {fault['at']:,} fails its CRC or " \
               f"length check"
    if kind == "trailer_cut":
        return "the file ends inside a gzip member trailer"
    if kind == "io":
        return str(_os_error(fault["errno"]))
    raise ValueError(f"unknown stream fault {kind!r}")


def damage_reason(damage: DamageFacts) -> str:
    """Why reading stopped, as stats.damage's reason (a broken compressed stream's fault
    wins over what the reader found where it stopped)."""
    stream = damage["stream"]
    if stream is not None:
        return f"the compressed stream is damaged ({stream_fault(stream)})"
    kind, frame = damage["kind"], damage["frame"]
    if kind == "file_header_cut":
        return "the file ends inside the pcap file header"
    if kind == "record_header_cut":
        return f"the file ends inside the header of frame {frame}"
    if kind == "record_too_large":
        return f"frame {frame} claims {damage['caplen']:,} captured bytes, more than any " \
               f"capture holds (snaplen {damage['snaplen']:,})"
    if kind == "record_cut":
        return f"the file ends inside frame {frame} ({damage['caplen']:,} bytes announced, " \
               f"{damage['present']:,} present)"
    if kind == "block_header_cut":
        return "the file ends inside a pcapng block header"
    if kind == "bad_byte_order":
        return "a pcapng section header has a bad byte-order magic"
    if kind in ("bad_block_length", "block_cut", "block_too_short", "trailer_mismatch"):
        btype, blen = f"{damage['block_type']:#x}", f"{damage['length']:,}"
        if kind == "bad_block_length":
            return f"a pcapng block (type {btype}) has an invalid length of {blen} bytes"
        if kind == "block_cut":
            return f"the file ends inside a pcapng block (type {btype}, {blen} bytes announced)"
        if kind == "block_too_short":
            return f"a pcapng block (type {btype}) of {blen} bytes is too short for its fixed " \
                   f"fields"
        return f"a pcapng block (type {btype}) announces {blen} bytes but ends with a length " \
               f"of {damage['trailer']:,}"
    if kind == "bad_interface":
        return f"frame {frame} names interface {damage['interface']}, which was not " \
               f"described, or overruns its block"
    raise ValueError(f"unknown damage {kind!r}")


def damage_tuple(damage: DamageFacts | None) -> tuple[int, int, str] | None:
    if damage is None:
        return None
    return damage["frame"], damage["offset"], damage_reason(damage)


def open_error(exc: _core.OpenError, path: str) -> PktflowError | OSError:
    """The error to raise for the core's OpenError on the capture at `path`: NoFileError
    (exit 3), NotACaptureError (4), UnsupportedCaptureError (5). A failed read of the first
    bytes is the OSError Python's own read would have raised (an internal error)."""
    if isinstance(exc, _core.NoFile):
        if exc.why == "directory":
            return NoFileError("is a directory, not a capture file", file=path)
        if exc.why == "missing":
            return NoFileError("no such file", file=path)
        if exc.why == "permission_denied":
            return NoFileError("permission denied", file=path, hint=PERMISSION_HINT)
        strerror = os.strerror(exc.errno) if exc.errno is not None else "I/O error"
        return NoFileError(f"cannot open: {strerror}", file=path)
    if isinstance(exc, _core.EmptyCapture):
        return NotACaptureError("the file is empty", file=path, offset=0)
    if isinstance(exc, _core.BadGzip):
        return NotACaptureError(f"not a valid gzip file ({stream_fault(exc.fault)})",
                                file=path, offset=0)
    if isinstance(exc, _core.UnknownMagic):
        return NotACaptureError(
            f"not a pcap or pcapng capture (starts with {exc.head.hex()})",
            file=path, offset=0, hint=NOT_A_CAPTURE_HINT)
    if isinstance(exc, _core.Unsupported):
        return UnsupportedCaptureError(
            f"no supported link type ({', '.join(exc.link_types)})", file=path,
            hint=UNSUPPORTED_HINT)
    if isinstance(exc, _core.ReadFailed):
        return _os_error(exc.errno)
    raise ValueError(f"unknown open error {type(exc).__name__}")


__all__ = ["damage_reason", "damage_tuple", "open_error", "stream_fault"]
