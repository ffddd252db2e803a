"""The words for what the Rust capture reader (pktflow_core::capture) reports as facts.

The facts arrive as the dicts pythonize makes of its serde structs; every enum there is
internally tagged with "kind" (a unit variant is {"kind": "empty"}, a struct variant carries
its fields beside the tag), and Damage flattens its kind into itself:
{"frame": 3, "offset": 100, "kind": "record_cut", "caplen": 1500, "present": 40,
 "stream": None}.

- open_error(facts, path): the exception to raise for an OpenError (Capture.open, or
  Capture.outcome once the records are exhausted), with today's reason, offset and hint.
- damage_reason(damage): the "reason" of report["capture"]["damage"].
- damage_tuple(damage): stats.damage as the reference kept it, (frame, offset, reason).
"""

from __future__ import annotations

import os
from typing import Any

from pktflow.errors import NoFileError, NotACaptureError, PktflowError, UnsupportedCaptureError

Facts = dict[str, Any]

NOT_A_CAPTURE_HINT = "record with tcpdump -w, or convert with editcap"
PERMISSION_HINT = "check the file's permissions (tcpdump -w files are often root-only)"
UNSUPPORTED_HINT = "pktflow reads Ethernet, Linux cooked (SLL/SLL2), BSD loopback and raw IP"


def _os_error(errno: int | None) -> OSError:
    """The OSError Python's own I/O would have raised (its str() is what messages quote)."""
    if errno is None:
        return OSError("I/O error")
    return OSError(errno, os.strerror(errno))


def stream_fault(fault: Facts) -> str:
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


def damage_reason(damage: Facts) -> str:
    """Why reading stopped, as stats.damage's reason (a broken compressed stream's fault
    wins over what the reader found where it stopped)."""
    if damage.get("stream") is not None:
        return f"the compressed stream is damaged ({stream_fault(damage['stream'])})"
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


def damage_tuple(damage: Facts | None) -> tuple[int, int, str] | None:
    if damage is None:
        return None
    return damage["frame"], damage["offset"], damage_reason(damage)


def open_error(facts: Facts, path: str) -> PktflowError | OSError:
    """The error the reference raised for `facts` (an OpenError) on the capture at `path`:
    NoFileError (exit 3), NotACaptureError (4), UnsupportedCaptureError (5). A failed read
    of the first bytes is the OSError the reference let escape (an internal error)."""
    kind = facts["kind"]
    if kind == "no_file":
        why = facts["why"]
        if why == "directory":
            return NoFileError("is a directory, not a capture file", file=path)
        if why == "missing":
            return NoFileError("no such file", file=path)
        if why == "permission_denied":
            return NoFileError("permission denied", file=path, hint=PERMISSION_HINT)
        errno = facts["errno"]
        strerror = os.strerror(errno) if errno is not None else "I/O error"
        return NoFileError(f"cannot open: {strerror}", file=path)
    if kind == "empty":
        return NotACaptureError("the file is empty", file=path, offset=0)
    if kind == "bad_gzip":
        return NotACaptureError(f"not a valid gzip file ({stream_fault(facts['fault'])})",
                                file=path, offset=0)
    if kind == "unknown_magic":
        return NotACaptureError(
            f"not a pcap or pcapng capture (starts with {bytes(facts['head']).hex()})",
            file=path, offset=0, hint=NOT_A_CAPTURE_HINT)
    if kind == "unsupported":
        return UnsupportedCaptureError(
            f"no supported link type ({', '.join(facts['link_types'])})", file=path,
            hint=UNSUPPORTED_HINT)
    if kind == "read_failed":
        return _os_error(facts["errno"])
    raise ValueError(f"unknown open error {kind!r}")


__all__ = ["damage_reason", "damage_tuple", "open_error", "stream_fault"]
