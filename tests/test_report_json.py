"""The report's JSON is written by a few threads, each decoding and writing a batch of
connections while the writer copies the finished batches out in order (report/document.rs).
What they write together is what one writer writes, in the report's order, however the
batches fall; and a stream that fails stops every thread, with the stream's own error."""

from __future__ import annotations

import io
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from tcpfeed import Flow, write_capture
from test_relay_memory import POOLER, READY, ROW, STARTUP, _msg, storm

ROOT = Path(__file__).resolve().parent.parent
DB = socket.inet_aton("10.0.0.3")


def _long_session(t: float, queries: int) -> list[tuple]:  # type: ignore[type-arg]
    """A server connection that runs `queries` statements one after another: its record is
    far past a batch's bytes (a batch of its own, written straight through)."""
    f = Flow(t=t)
    f.handshake()
    f.send(0, STARTUP)
    f.send(1, READY)
    for i in range(queries):
        f.send(0, _msg(b"Q", f"SELECT abalance FROM pgbench_accounts WHERE aid = {i}".encode()
                       + b"\0"))
        f.t += 0.0001
        f.send(1, ROW)
    f.fin(0)
    f.fin(1)
    f.ack(0)
    out = []
    for p in f.packets:
        fwd = p[4] == 40000
        a, b = ((POOLER, 29999), (DB, 5432)) if fwd else ((DB, 5432), (POOLER, 29999))
        out.append((0, p[1], a[0], b[0], a[1], b[1], *p[6:]))
    return out


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """400 connections (a storm of 200 clients through a pooler) and, among them, one long
    server connection of 3,000 queries."""
    packets = storm(200) + _long_session(1000.1, 3_000)
    packets.sort(key=lambda p: p[1])
    numbered = [(i + 1, *p[1:]) for i, p in enumerate(packets)]
    return write_capture(tmp_path_factory.mktemp("many") / "many.pcap", numbered)


def test_the_threads_write_what_json_dumps_writes_in_order(many: Path) -> None:
    from pktflow.pipeline import analyze

    report = analyze(str(many))
    ids = [c["id"] for c in report["connections"]]
    assert len(ids) == 401 and max(len(c["queries"]) for c in report["connections"]) == 3_000
    for indented, dumps in ((True, {"indent": 2}), (False, {"separators": (",", ":")})):
        out = io.StringIO()
        report.core.write_json(out, indented)
        assert out.getvalue() == json.dumps(report, **dumps) + "\n"  # type: ignore[arg-type]
        assert [c["id"] for c in json.loads(out.getvalue())["connections"]] == ids


CHILD = r"""
import io, sys
sys.path.insert(0, sys.argv[1])
from pktflow.pipeline import Options, analyze


class Failing(io.StringIO):
    # takes `good` writes, then fails as a closed pipe does
    def __init__(self, good):
        super().__init__()
        self.good = good

    def write(self, s):
        if self.good == 0:
            raise BrokenPipeError(32, "Broken pipe")
        self.good -= 1
        return super().write(s)


report = analyze(sys.argv[2], Options(lazy=True))
try:
    report.core.write_json(Failing(int(sys.argv[3])), True)
except BrokenPipeError:
    print("broken pipe")
"""


@pytest.mark.parametrize("good", [0, 1, 3])
def test_a_failing_stream_stops_the_writer_threads_with_its_error(many: Path,
                                                                   good: int) -> None:
    """In a child process, so that threads left waiting fail the test by its timeout rather
    than hang the suite."""
    done = subprocess.run([sys.executable, "-c", CHILD, str(ROOT / "analyzer"), str(many),
                           str(good)], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (0, "broken pipe\n", "")
