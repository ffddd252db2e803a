"""Measuring "is PostgreSQL" per connection (issue 36): pktflow's answer against how the
capture was made and against tshark's pgsql dissector (told the ports with -d), and queries
matched against tshark's. Also the cuts the corpus is built with: a short snapshot length, and
each connection picked up mid-stream (its handshake and first exchanges cut away).

Run as a script to print the numbers: `python tests/detection.py CAPTURE PORT[,PORT] [pg|not]`.
"""

from __future__ import annotations

import struct
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Conn = frozenset[tuple[str, int]]


def tcp_key(frame: bytes, link: int) -> tuple[Conn, int] | None:
    """The connection (its two endpoints) and TCP payload length of an IPv4 frame of an
    Ethernet (1) or Linux cooked v2 (276) capture."""
    if link == 1:
        if frame[12:14] != b"\x08\x00":
            return None
        ip = frame[14:]
    elif link == 276:
        if frame[0:2] != b"\x08\x00":
            return None
        ip = frame[20:]
    else:
        return None
    if len(ip) < 20 or ip[9] != 6:
        return None
    ihl = (ip[0] & 0x0F) * 4
    total = struct.unpack(">H", ip[2:4])[0]
    t = ip[ihl:]
    if len(t) < 20:
        return None
    thl = (t[12] >> 4) * 4
    src = (".".join(map(str, ip[12:16])), struct.unpack(">H", t[0:2])[0])
    dst = (".".join(map(str, ip[16:20])), struct.unpack(">H", t[2:4])[0])
    return frozenset((src, dst)), total - ihl - thl


def pcap_records(path: Path) -> tuple[bytes, int, list[tuple[bytes, bytes]]]:
    """(file header, link type, [(record header, frame)]) of a little-endian microsecond pcap."""
    data = path.read_bytes()
    magic, link = struct.unpack("<I", data[:4])[0], struct.unpack("<I", data[20:24])[0]
    assert magic == 0xA1B2C3D4, path
    out, pos = [], 24
    while pos + 16 <= len(data):
        incl = struct.unpack("<I", data[pos + 8:pos + 12])[0]
        out.append((data[pos:pos + 16], data[pos + 16:pos + 16 + incl]))
        pos += 16 + incl
    return data[:24], link & 0xFFFF, out


def mid_stream(src: Path, dst: Path, skip_data: int = 4) -> Path:
    """`src` with each TCP connection's packets up to and including its `skip_data`-th packet
    carrying data cut away: the capture picks every connection up mid-stream."""
    head, link, recs = pcap_records(src)
    seen: dict[Conn, int] = defaultdict(int)
    kept = []
    for rh, frame in recs:
        key = tcp_key(frame, link)
        if key is None:
            kept.append(rh + frame)
            continue
        conn, plen = key
        if seen[conn] >= skip_data:
            kept.append(rh + frame)
        elif plen > 0:
            seen[conn] += 1
    dst.write_bytes(head + b"".join(kept))
    return dst


def snaplen(src: Path, dst: Path, n: int) -> Path:
    """`src` as tcpdump -s n would have written it."""
    head, _, recs = pcap_records(src)
    header = bytearray(head)
    header[16:20] = n.to_bytes(4, "little")
    out = [bytes(header)]
    for rh, frame in recs:
        keep = frame[:n]
        out.append(rh[:8] + struct.pack("<I", len(keep)) + rh[12:16] + keep)
    dst.write_bytes(b"".join(out))
    return dst


def _unescape(text: str) -> str:
    return text.replace("\\n", "\n").replace("\\t", "\t").replace("\\r", "\r") \
        .replace('\\"', '"').replace("\\\\", "\\")


@dataclass
class Seen:
    pg: bool = False
    queries: list[str] = field(default_factory=list)


def tshark_pgsql(path: Path, ports: list[int]) -> dict[Conn, Seen]:
    """Per connection: whether tshark's pgsql dissector names a PostgreSQL message in it
    (not only "Unknown"), and the Simple queries' text it shows, in order."""
    cmd = ["tshark", "-n", "-r", str(path), "-Y", "pgsql", "-T", "fields", "-E",
           "separator=\t", "-e", "ip.src", "-e", "tcp.srcport", "-e", "ip.dst",
           "-e", "tcp.dstport", "-e", "pgsql.type", "-e", "pgsql.query"]
    for p in ports:
        cmd += ["-d", f"tcp.port=={p},pgsql"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    res: dict[Conn, Seen] = defaultdict(Seen)
    for line in out.splitlines():
        s, sp, d, dp, types, query = (line.split("\t") + [""] * 6)[:6]
        key = frozenset(((s.split(",")[-1], int(sp)), (d.split(",")[-1], int(dp))))
        kinds = types.split(",")
        if any(k != "Unknown" for k in kinds):
            res[key].pg = True
        if "Simple query" in kinds:
            res[key].queries.append(_unescape(query))
    return dict(res)


def pktflow_pgsql(report: dict[str, Any]) -> dict[Conn, Seen]:
    res: dict[Conn, Seen] = {}
    for c in report["connections"]:
        key = frozenset(((c["client"]["ip"], c["client"]["port"]),
                         (c["server"]["ip"], c["server"]["port"])))
        res[key] = Seen(str(c.get("protocol", "")).startswith("postgresql"),
                        [q["sql"] for q in c.get("queries") or [] if q["kind"] in ("simple", "copy")])
    return res


def matched(tshark: list[str], ours: list[str]) -> bool:
    """tshark's Simple queries are ours, in order, as far as the capture kept their text (a
    query tshark shows empty was cut before its end: ours holds the start)."""
    if len(tshark) != len(ours):
        return False
    return all(t == o or not t or (o and t.startswith(o)) for t, o in zip(tshark, ours))


@dataclass
class Tally:
    """Connections of a corpus: what they are, what tshark and pktflow say."""
    truth_pg: int = 0
    truth_other: int = 0
    tshark_pg: int = 0
    found: int = 0  # pktflow: PostgreSQL, and truly so
    false: int = 0  # pktflow: PostgreSQL, and truly another protocol
    tshark_confirmed: int = 0
    confirmed_found: int = 0  # of those tshark confirms, pktflow finds with queries matched
    missed: list[str] = field(default_factory=list)

    def add(self, name: str, truth: bool, report: dict[str, Any], tshark: dict[Conn, Seen]
            ) -> None:
        ours = pktflow_pgsql(report)
        for key in set(ours) | set(tshark):
            mine, theirs = ours.get(key, Seen()), tshark.get(key, Seen())
            self.truth_pg += truth
            self.truth_other += not truth
            self.tshark_pg += theirs.pg
            self.found += mine.pg and truth
            self.false += mine.pg and not truth
            if truth and theirs.pg:
                self.tshark_confirmed += 1
                if mine.pg and matched(theirs.queries, mine.queries):
                    self.confirmed_found += 1
                else:
                    self.missed.append(f"{name} {sorted(key)}: tshark {theirs.queries[:3]}, "
                                       f"pktflow {mine.pg} {mine.queries[:3]}")

    @property
    def precision(self) -> float:
        said = self.found + self.false
        return self.found / said if said else 1.0

    @property
    def recall(self) -> float:
        return self.found / self.truth_pg if self.truth_pg else 1.0

    @property
    def recall_of_confirmed(self) -> float:
        return self.confirmed_found / self.tshark_confirmed if self.tshark_confirmed else 1.0

    def line(self, label: str) -> str:
        return (f"{label}: {self.truth_pg} PostgreSQL + {self.truth_other} other connections; "
                f"tshark -d calls {self.tshark_pg} PostgreSQL; pktflow {self.found} right, "
                f"{self.false} wrong: precision {self.precision:.3f}, recall {self.recall:.3f}; "
                f"of {self.tshark_confirmed} tshark-confirmed, {self.confirmed_found} found with "
                f"their queries ({self.recall_of_confirmed:.3f})")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "analyzer"))
    from pktflow.pipeline import analyze

    capture, ports, truth = Path(sys.argv[1]), [int(p) for p in sys.argv[2].split(",")], \
        (sys.argv[3] if len(sys.argv) > 3 else "pg") == "pg"
    tally = Tally()
    tally.add(capture.name, truth, analyze(str(capture)), tshark_pgsql(capture, ports))
    print(tally.line(capture.name))
    print("\n".join(tally.missed))
