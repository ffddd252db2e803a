"""The one engine reproduces every value of the reports pktflow wrote before it.

tests/golden/reports/ holds `pktflow analyze --format json` of every capture in captures/ and
tests/regressions/, of the crafted inputs other tests build (tests/golden/crafted/), and of
cuts of two real captures, each with its exit code and stderr, as written by the last release of
the previous engines (Python and C). A deliberate change of a value is made here, listed in
DIFFERENCES with its reason, never by rewriting the golden file.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from pktflow.cli import Env, main

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "reports"
CUT = re.compile(r"cut-(?P<capture>.+)-(?P<offset>\d+)")

# (golden name, JSON path) -> why the engine now differs from the golden value. Empty: none.
DIFFERENCES: dict[tuple[str, str], str] = {
    ("seqscan-10k-pgbouncer-pktbuf65536-loopback",
     ".connections[1].directions.server_to_client.verdict.limit"):
        "receiver_window, was sender: the verdict is now judged on shares of time. PgBouncer's "
        "window to the server (a pooled connection: no handshake, the scale unknown) was "
        "closed 78% of the time and fell to zero while PgBouncer waited on psql; the old rule "
        "judged an unknown scale by zero windows alone and counted flights, not time",
    ("seqscan-10k-pgpool-loopback", ".connections[0].directions.server_to_client.verdict.limit"):
        "sender, was receiver_window: 9 of 15 flights ended with psql's window full, but the "
        "window was closed 12% of the time; Pgpool-II's own pace (it reads the server 1 KB at "
        "a time) held 86% of it",
}
# (golden name pattern, JSON path pattern) -> why: differences that touch many reports, each
# pattern matched in full against the name and against the path of a difference.
DIRECTION = r"\.connections\[\d+\]\.directions\.(client_to_server|server_to_client)"
DIFFERENCE_PATTERNS: dict[tuple[str, str], str] = {
    (".*", DIRECTION + r"\.(writes|limits)"):
        "added: each direction's writes (PSH-delimited, byte-weighted sizes) and where its "
        "time went (seconds per limit, the longest run of each), issue 24 items 1 and 2",
    (".*", DIRECTION + r"\.verdict\.(shares|receiver)"):
        "added: the verdict's shares of the transfer time per limit, and for a receiver-window "
        "limit whether the buffer or the application held it",
    (".*", DIRECTION + r"\.verdict\.(summary|evidence_frames(\[\d+\])?)"):
        "the verdict's sentence now quotes the shares of time it is judged on and the frames "
        "of the dominant limit's first and longest runs",
    (".*", r"\.connections\[\d+\]\.round_trips"):
        "added: a PostgreSQL conversation of two queries or more says what its round trips "
        "cost (queries x the handshake's round trip) against the time its responses moved, "
        "issue 24 item 4",
    (".*", r"\.relays\[\d+\]\.(server_write|forward_write)"):
        "added: the server's and the relay's habitual write sizes (PSH-delimited), issue 24 "
        "item 1",
    (r"(cut-)?(seqscan-10k|pgdump-20k)-(pgbouncer|pgpool)-.*", r"\.relays\[0\]\.verdict\.summary"):
        "the re-split is read from writes, not segments: 'the server wrote 8,192 bytes at a "
        "time and the relay wrote them on in 4,096-byte writes' (8,170 for Pgpool-II), on "
        "loopback and on MTU-1500 captures alike",
    (r"(cut-)?seqscan-10k-(pgbouncer|pgpool)-bridge(-\d+)?", r"\.relays\[0\]\.verdict\.setting"):
        "on an MTU-1500 capture the writes show PgBouncer's 4 KB forwarding (pkt_buf) and "
        "Pgpool-II's 8 KB buffer, which the segments (all 1,448 bytes) hid: the setting names "
        "them, as on loopback, instead of sending the reader to the front leg's verdict",
    (".*", r"\.relays\[\d+\]\.verdict\.(limit|legs|relay_ms|front_leg_ms)"):
        "added: the relay judged as a component from both legs' limits (client, network, "
        "pooler, server_network, server), and the client's extra time split between what the "
        "relay did and the client leg's slower drain, issue 24 item 3",
    (".*", r"\.relays\[\d+\]\.verdict\.(summary|setting)"):
        "the relay's verdict says which component set the pace and attributes its added time "
        "to it; a forwarding unit (pkt_buf) is the setting only where the pooler is the limit",
    (".*", r"\.relays\[\d+\]\.(coupling|verdict)\.evidence_frames(\[\d+\])?"):
        "a relay's evidence includes its back legs' verdict frames, which are now the runs of "
        "the back leg's dominant limit",
}


def explained(name: str, path: str) -> bool:
    """Whether a difference at `path` of golden report `name` is listed, itself or by a
    pattern."""
    return (name, path) in DIFFERENCES or any(
        re.fullmatch(n, name) and re.fullmatch(p, path) for n, p in DIFFERENCE_PATTERNS)


def _input(name: str, tmp_path: Path) -> Path:
    cut = CUT.fullmatch(name)
    if cut:
        data = (ROOT / "captures" / f"{cut['capture']}.pcap").read_bytes()
        path = tmp_path / "cut.pcap"
        path.write_bytes(data[:int(cut["offset"])])
        return path
    if name.startswith("crafted-"):
        return next((ROOT / "tests" / "golden" / "crafted").glob(name[8:] + ".*"))
    if name.startswith("regression-"):
        return ROOT / "tests" / "regressions" / f"{name[11:]}.pcap"
    return ROOT / "captures" / f"{name}.pcap"


def _diff(a: Any, b: Any, path: str, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in a.keys() | b.keys():
            if k not in a or k not in b:
                out.append(f"{path}.{k}: {'missing' if k not in a else 'added'}")
            else:
                _diff(a[k], b[k], f"{path}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{path}: {len(b)} items, golden {len(a)}")
        for i, (x, y) in enumerate(zip(a, b)):
            _diff(x, y, f"{path}[{i}]", out)
    elif a != b or type(a) is not type(b) and not {type(a), type(b)} <= {int, float}:
        out.append(f"{path}: {b!r}, golden {a!r}")


@pytest.mark.parametrize("name", sorted(p.stem for p in GOLDEN.glob("*.json")))
def test_report_equals_the_golden_one(name: str, tmp_path: Path) -> None:
    golden = json.loads((GOLDEN / f"{name}.json").read_text())
    path = _input(name, tmp_path)
    out, err = io.StringIO(), io.StringIO()
    code = main(["analyze", str(path), "--format", "json"], Env(stdout=out, stderr=err))
    assert code == golden["exit"]
    stderr = re.sub(r"^pktflow: \S+?(?=[ :])", "pktflow: <file>", err.getvalue().strip(),
                    flags=re.M)
    assert stderr == golden["stderr"]
    if "report" not in golden:
        assert not out.getvalue().strip()
        return
    report = json.loads(out.getvalue())
    report["capture"]["file"] = None
    report["tool"] = None
    found: list[str] = []
    _diff(golden["report"], report, "", found)
    unexplained = [d for d in found if not explained(name, d.split(":")[0])]
    assert not unexplained, "\n".join(unexplained[:40])
