"""`pktflow analyze - --follow` on an endless stream: a capture replayed through a pipe again
and again, each copy shifted in time and given client ports of its own (so each is new
connections, as more pgbench clients would be; what the capture leaves open is closed by a RST
at the end of each copy), for as many minutes of capture time as asked; peak RSS sampled as the
stream goes, by the capture time reached.

    python3 bench/stream.py CAPTURE MINUTES [--every S]   (default: back to back)

Used by bench/run.py (--follow-minutes); prints one JSON object. Server ports (5432, 6432,
9999) are kept, every other port is shifted per copy.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

SERVER_PORTS = (5432, 6432, 9999)


def records(path: Path) -> tuple[bytes, np.ndarray, list[int], list[int], bool]:
    """The file header, the records' bytes, where each timestamp is and where each port
    to shift is (offsets into the records' bytes); whether timestamps are nanoseconds."""
    data = path.read_bytes()
    magic = data[:4]
    if magic not in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        raise SystemExit(f"{path}: a little-endian pcap is needed (Ethernet)")
    nano = magic == b"\x4d\x3c\xb2\xa1"
    link = struct.unpack_from("<I", data, 20)[0]
    if link != 1:
        raise SystemExit(f"{path}: Ethernet captures only (link type {link})")
    header, body = data[:24], bytearray(data[24:])
    # connections the capture leaves open (a pooler's server legs) are closed at the end of
    # each copy by a RST, as a pooler's idle timeout would: each copy's connections are new,
    # and an endless stream of connections that never close could not be held in bounded memory
    last: dict[tuple[bytes, ...], int] = {}
    closed: set[tuple[bytes, ...]] = set()
    at = 0
    while at + 16 <= len(body):
        caplen = struct.unpack_from("<I", body, at + 8)[0]
        frame = at + 16
        if caplen >= 14 + 20 + 20 and body[frame + 12:frame + 14] == b"\x08\x00" \
                and body[frame + 14 + 9] == 6:
            ihl = (body[frame + 14] & 0x0F) * 4
            tcp = frame + 14 + ihl
            ends = sorted([bytes(body[frame + 26:frame + 30]) + bytes(body[tcp:tcp + 2]),
                           bytes(body[frame + 30:frame + 34]) + bytes(body[tcp + 2:tcp + 4])])
            key = tuple(ends)
            last[key] = at
            if body[tcp + 13] & 0x05:  # FIN or RST
                closed.add(key)
        at = frame + caplen
    end_ts = struct.unpack_from("<II", body, last[max(last, key=last.get)]) if last else (0, 0)
    for key, rec in last.items():
        if key in closed:
            continue
        frame = rec + 16
        ihl = (body[frame + 14] & 0x0F) * 4
        tcp = frame + 14 + ihl
        thl = (body[tcp + 12] >> 4) * 4
        length = 14 + ihl + thl
        rst = bytearray(body[frame:frame + length])
        struct.pack_into(">H", rst, 14 + 2, ihl + thl)  # IP total length
        rst[14 + ihl + 13] = 0x14  # RST, ACK
        sec, sub = end_ts
        body += struct.pack("<IIII", sec, sub + 1, length, length) + rst
    ts, ports = [], []
    at = 0
    while at + 16 <= len(body):
        caplen = struct.unpack_from("<I", body, at + 8)[0]
        frame = at + 16
        ts.append(at)
        if caplen >= 14 + 20 + 4 and body[frame + 12:frame + 14] == b"\x08\x00":
            ihl = (body[frame + 14] & 0x0F) * 4
            if body[frame + 14 + 9] == 6:
                tcp = frame + 14 + ihl
                for off in (tcp, tcp + 2):
                    if struct.unpack_from(">H", body, off)[0] not in SERVER_PORTS:
                        ports.append(off)
        at = frame + caplen
    return header, np.frombuffer(bytes(body), dtype=np.uint8).copy(), ts, ports, nano


class Replay:
    """Copies of the capture, `every` seconds apart in capture time, until `seconds`."""

    def __init__(self, path: Path, seconds: float, every: float | None) -> None:
        self.header, self.body, ts, ports, self.nano = records(path)
        self.ts_at = np.array(ts, dtype=np.int64)
        sec = self.body[self.ts_at[:, None] + np.arange(4)].view("<u4").ravel().astype(np.int64)
        sub = self.body[self.ts_at[:, None] + 4 + np.arange(4)].view("<u4").ravel()
        self.unit = 1_000_000_000 if self.nano else 1_000_000
        self.t0 = sec * self.unit + sub.astype(np.int64)
        # back to back by default: each copy starts 10 ms after the last one's end
        span = (int(self.t0.max()) - int(self.t0.min())) / self.unit
        self.seconds, self.every = seconds, every or round(span + 0.01, 3)
        self.port_at = np.array(ports, dtype=np.int64)
        hi = self.body[self.port_at].astype(np.int64)
        lo = self.body[self.port_at + 1].astype(np.int64)
        self.port0 = hi * 256 + lo
        self.copies = int(seconds // self.every)
        self.done = 0  # copies written (read by the sampler)

    def copy(self, k: int) -> bytes:
        out = self.body.copy()
        t = self.t0 + int(k * self.every * self.unit)
        out[self.ts_at[:, None] + np.arange(4)] = np.frombuffer(
            (t // self.unit).astype("<u4").tobytes(), dtype=np.uint8).reshape(-1, 4)
        out[self.ts_at[:, None] + 4 + np.arange(4)] = np.frombuffer(
            (t % self.unit).astype("<u4").tobytes(), dtype=np.uint8).reshape(-1, 4)
        port = 1024 + (self.port0 - 1024 + k * 37) % 64000
        out[self.port_at] = (port >> 8).astype(np.uint8)
        out[self.port_at + 1] = (port & 0xFF).astype(np.uint8)
        return out.tobytes()

    def write(self, pipe: Any) -> None:
        try:
            pipe.write(self.header)
            for k in range(self.copies):
                pipe.write(self.copy(k))
                self.done = k + 1
            pipe.close()
        except BrokenPipeError:
            pass


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def run(python: str, capture: Path, minutes: float, every: float | None = None) -> dict[str, Any]:
    replay = Replay(capture, minutes * 60, every)
    every = replay.every
    proc = subprocess.Popen([python, "-m", "pktflow", "analyze", "-", "--follow", "--format",
                             "jsonl"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    writer = threading.Thread(target=replay.write, args=(proc.stdin,), daemon=True)
    started = time.monotonic()
    writer.start()
    samples = []  # (capture seconds written, RSS KiB), while the stream runs
    end = [0]  # RSS once it ended: the relays found and the report written
    while proc.poll() is None:
        rss = rss_kib(proc.pid)
        if replay.done < replay.copies:
            samples.append((replay.done * every, rss))
        else:
            end.append(rss)
        time.sleep(0.25)
    wall = time.monotonic() - started
    err = proc.stderr.read().decode() if proc.stderr else ""
    span = replay.copies * every
    first = [r for t, r in samples if t <= 600] or [0]
    last = [r for t, r in samples if t >= span - 600] or [0]
    return {"capture": capture.name, "minutes": minutes, "copies": replay.copies, "every_s": every,
            "packets": replay.copies * len(replay.ts_at), "wall_s": round(wall, 1),
            "exit": proc.returncode, "stderr": err[-300:],
            "peak_rss_first_10min_mb": round(max(first) / 1024, 1),
            "peak_rss_last_10min_mb": round(max(last) / 1024, 1),
            "peak_rss_at_end_mb": round(max(end) / 1024, 1),
            "rss_by_10min_mb": [round(max([r for t, r in samples if i * 600 <= t < (i + 1) * 600]
                                          or [0]) / 1024, 1)
                                for i in range(int(span // 600) + 1)]}


if __name__ == "__main__":
    args = sys.argv[1:]
    every = None
    if "--every" in args:
        i = args.index("--every")
        every = float(args[i + 1])
        del args[i:i + 2]
    print(json.dumps(run(sys.executable, Path(args[0]), float(args[1]), every)))
