#!/usr/bin/env python3
"""Write the fuzz targets' seed corpora (not kept in git: they come from the repository's
captures). `python3 seed.py [OUT]` fills OUT/capture, OUT/pass and OUT/pgwire (OUT defaults to
corpus/ beside this file, where `cargo fuzz run <target>` looks):

- capture, pass: every capture in tests/regressions/ and tests/golden/crafted/ whole, the real
  captures in captures/ cut to their first 32 KiB (the cut is damage: the reader's end of file
  path), one gzipped capture re-compressed from its first 32 KiB;
- capture, pass, also: inputs standing for large files (fuzz/src/lib.rs's `file`: b"REP!",
  a count and a split, then a prefix and a unit repeated): thousands of records across the
  reader's window refills, a record over its 128 KiB block, many gzip members, a pcapng EPB
  repeated;
- pgwire: the decoder's script format (see fuzz/src/lib.rs) made from the TCP payloads of each
  connection of those captures, in capture order, as the engine would feed them.
"""

from __future__ import annotations

import gzip
import hashlib
import struct
import sys
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent.parent
CUT = 32 * 1024
STREAM = 8 * 1024  # bytes per direction kept in a pgwire script


def _captures() -> list[tuple[str, bytes]]:
    out = []
    for d in (ROOT / "tests" / "regressions", ROOT / "tests" / "golden" / "crafted"):
        out += [(p.name, p.read_bytes()) for p in sorted(d.iterdir()) if p.is_file()]
    for p in sorted((ROOT / "captures").glob("*.pcap")):
        out.append((f"{p.stem}-head.pcap", p.read_bytes()[:CUT]))
    gz = sorted((ROOT / "captures" / "conditions").glob("*.pcap.gz"))
    if gz:
        head = gzip.decompress(gz[0].read_bytes())[:CUT]
        out.append((f"{gz[0].name[:-8]}-head.pcap.gz", gzip.compress(head, mtime=0)))
    return out


def _records(data: bytes) -> list[bytes]:
    """The whole records (16-byte header and frame) of a little-endian microsecond pcap."""
    pos, out = 24, []
    while pos + 16 <= len(data):
        caplen = struct.unpack("<I", data[pos + 8:pos + 12])[0]
        if pos + 16 + caplen > len(data):
            break
        out.append(data[pos:pos + 16 + caplen])
        pos += 16 + caplen
    return out


def _repeat(n: int, prefix: bytes, unit: bytes) -> bytes:
    return b"REP!" + struct.pack("<II", n, len(prefix)) + prefix + unit


def _large() -> list[tuple[str, bytes]]:
    out = []
    plain = [p for p in sorted((ROOT / "captures").glob("*.pcap"))
             if p.read_bytes()[:4] == b"\xd4\xc3\xb2\xa1"]
    if plain:
        data = plain[0].read_bytes()[:1 << 20]
        header, recs = data[:24], _records(data)
        big = max(recs[:40], key=len)
        out.append(("repeat-records", _repeat(3000, header + b"".join(recs[:4]), big)))
        size = 300_000  # over the window's 128 KiB block: the window grows for it
        wide = header[:16] + struct.pack("<I", 1 << 20) + header[20:]
        rec = big[:8] + struct.pack("<II", size, size) + big[16:]
        out.append(("repeat-large-record", _repeat(size - (len(big) - 16), wide + rec, b"\0")))
        first = gzip.compress(header + b"".join(recs[:4]), mtime=0)
        out.append(("repeat-gzip-members",
                    _repeat(100, first, gzip.compress(b"".join(recs[4:12]), mtime=0))))
    for p in sorted((ROOT / "tests" / "golden" / "crafted").iterdir()):
        data = p.read_bytes()
        if data[:4] != b"\x0a\x0d\x0d\x0a" or data[8:12] != b"\x4d\x3c\x2b\x1a":
            continue
        pos = 0
        while pos + 12 <= len(data):
            btype, blen = struct.unpack("<II", data[pos:pos + 8])
            if blen < 12 or pos + blen > len(data):
                break
            if btype == 6:
                epb = data[pos:pos + blen]
                out.append((f"repeat-epb-{p.stem}", _repeat(3000, data[:pos], epb)))
                break
            pos += blen
        break
    return out


def _ip(frame: bytes, link: int) -> bytes | None:
    """The IP packet in a frame of an Ethernet (1) or raw IP (101, 12, 14) capture."""
    if link == 1:
        at, etype = 14, frame[12:14]
        while etype in (b"\x81\x00", b"\x88\xa8") and len(frame) >= at + 4:
            etype, at = frame[at + 2:at + 4], at + 4
        return frame[at:] if etype in (b"\x08\x00", b"\x86\xdd") else None
    return frame if link in (101, 12, 14) else None


def _tcp(ip: bytes) -> tuple[tuple[bytes, bytes, int, int], bytes] | None:
    """((src, dst, sport, dport), payload) of an unfragmented IPv4/IPv6 TCP packet."""
    if len(ip) >= 20 and ip[0] >> 4 == 4 and ip[9] == 6:
        ihl, total = (ip[0] & 15) * 4, struct.unpack(">H", ip[2:4])[0] or len(ip)
        src, dst, t, end = ip[12:16], ip[16:20], ihl, total
    elif len(ip) >= 40 and ip[0] >> 4 == 6 and ip[6] == 6:
        src, dst, t, end = ip[8:24], ip[24:40], 40, 40 + struct.unpack(">H", ip[4:6])[0]
    else:
        return None
    if len(ip) < t + 20:
        return None
    sport, dport = struct.unpack(">HH", ip[t:t + 4])
    return (src, dst, sport, dport), ip[t + (ip[t + 12] >> 4) * 4:min(end, len(ip))]


def _pcap_frames(data: bytes) -> tuple[int, list[bytes]]:
    """The link type and whole records of a classic pcap (either byte order)."""
    if len(data) < 24 or data[:4] not in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4",
                                         b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d"):
        return 0, []
    e = "<" if data[0] in (0xd4, 0x4d) else ">"
    link, pos, frames = struct.unpack(e + "I", data[20:24])[0] & 0xFFFF, 24, []
    while pos + 16 <= len(data):
        caplen = struct.unpack(e + "I", data[pos + 8:pos + 12])[0]
        if pos + 16 + caplen > len(data):
            break
        frames.append(data[pos + 16:pos + 16 + caplen])
        pos += 16 + caplen
    return link, frames


def _scripts(data: bytes) -> list[bytes]:
    """A pgwire script per connection: flags (both starts seen), then [direction, length,
    bytes] per payload piece of at most 255 bytes; direction 0 is the first sender."""
    if data[:2] == b"\x1f\x8b":
        try:
            data = zlib.decompressobj(wbits=31).decompress(data)
        except zlib.error:
            return []  # a damaged stream: the capture seeds have it
    link, frames = _pcap_frames(data)
    conns: dict[frozenset[tuple[bytes, int]], tuple[tuple[bytes, int], bytearray, list[int]]] = {}
    for f in frames:
        ip = _ip(f, link)
        got = _tcp(ip) if ip else None
        if not got or not got[1]:
            continue
        (src, dst, sport, dport), payload = got
        key = frozenset([(src, sport), (dst, dport)])
        first, script, sent = conns.setdefault(key, ((src, sport), bytearray(b"\x03"), [0, 0]))
        d = 0 if (src, sport) == first else 1
        payload = payload[:max(0, STREAM - sent[d])]
        sent[d] += len(payload)
        for at in range(0, len(payload), 255):
            piece = payload[at:at + 255]
            script += bytes([d, len(piece)]) + piece
    return [bytes(s) for _, s, _ in conns.values() if len(s) > 1]


def main(out: Path) -> None:
    caps = _captures()
    for target in ("capture", "pass", "pgwire"):
        (out / target).mkdir(parents=True, exist_ok=True)
    for name, data in caps:
        for target in ("capture", "pass"):
            (out / target / name).write_bytes(data)
        for script in _scripts(data):
            digest = hashlib.sha1(script).hexdigest()[:16]
            (out / "pgwire" / digest).write_bytes(script)
    for name, data in _large():
        for target in ("capture", "pass"):
            (out / target / name).write_bytes(data)
    n = {t: len(list((out / t).iterdir())) for t in ("capture", "pass", "pgwire")}
    print(f"seeds in {out}: {n}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "corpus")
