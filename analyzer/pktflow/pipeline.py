"""One pass over a capture: the Rust core measures and keeps the facts, Python judges.

The core (pktflow._core) reads the file, runs the TCP engine, the PostgreSQL decoder and the
transfer measurements, and builds each connection's record ("pktflow.report/1"'s layout) once
the connection is done; the judge (pktflow.judge) words it from the few numbers its rules read.
Relay matching then reads the records.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

from pktflow import __version__, _core
from pktflow.capture.problems import damage_reason, open_error
from pktflow.findings import SEVERITY_ORDER, Finding
from pktflow.judge import Judge
from pktflow.relay.measure import RelayJudge
from pktflow.report.stored import PAIR_DEPTH, Connections, Reports, Texts, TopPairs

SCHEMA = "pktflow.report/1"
# A closed connection silent this long (capture time) is reported and its analyses dropped
# while the pass goes on; a packet after that (a FIN retransmitted a seventh time: the backoff
# reaches 12.6 s after six) is counted as late.
LINGER_S = 30.0
# After a RST only what crossed it can still come (a round trip); once both FINs are
# acknowledged, only a FIN retransmitted for a final ACK lost past the capture point: an RTO
# later (200 ms at least, doubling; three in 1.4 s).
SETTLED_LINGER_S = 2.0

Progress = Callable[[int], None]


class Options(NamedTuple):
    decode_postgres: bool = True
    transfer: bool = True
    linger_s: float = LINGER_S  # both inf: every connection is reported at the end
    settled_linger_s: float = SETTLED_LINGER_S
    # keep each connection's report compressed once it is reported (report.stored), its JSON
    # in this layout (report.stored.COMPACT or INDENTED): the report's "connections" is then
    # a Connections sequence, not a list of dicts
    store: str | None = None
    # with `store`: keep the reports of only this many of the busiest connections (the text
    # report draws no more; report.stored.Connections)
    keep: int | None = None


def open_pass(path: str, options: Options) -> Any:
    """The core's pass over `path`; a capture it cannot open is a PktflowError."""
    try:
        return _core.Pass(path, options.decode_postgres, options.transfer,
                          _finite(options.linger_s), _finite(options.settled_linger_s))
    except _core.OpenError as exc:
        raise open_error(exc.args[0], path) from None


def _finite(s: float) -> float | None:
    return None if s == float("inf") else s


def analyze(path: str, options: Options | None = None,
            progress: Progress | None = None) -> dict[str, Any]:
    """Analyse the capture at `path`; raises PktflowError subclasses for unreadable input."""
    options = options or Options()
    # Each connection's report adds dozens of containers, none in a cycle: the cyclic
    # collector would re-scan them all again and again (three quarters of a storm's pass).
    collecting = gc.isenabled()
    gc.disable()
    try:
        core = open_pass(path, options)
        run = Run(options)
        shown = 0
        while (done := core.step(run.judge)) is not None:
            for record in done:
                run.report(record)
            if progress is not None and core.records >> 16 != shown >> 16:
                shown = core.records
                progress(shown)
        try:
            core.outcome()
        except _core.OpenError as exc:
            raise open_error(exc.args[0], path) from None
        stats = core.stats()
        stats["file"] = path  # as given (the core's is the path as bytes allow)
        relay_judge = RelayJudge()
        relays, roles = core.relays(relay_judge)
        return build_report(stats, core.engine(), run, relays, roles, relay_judge.findings)
    finally:
        if collecting:
            # What the pass kept would sit in the youngest generation, and the first
            # collection would scan all of it: file it with the oldest, as it has lived long
            # (unless the caller froze objects of its own, which unfreeze would release).
            if not gc.get_freeze_count():
                gc.freeze()
                gc.unfreeze()
            gc.enable()


class Run:
    """The reports of one pass's connections, as the core finishes them."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.judge = Judge()
        self.reports: Reports | Connections = (
            Reports() if options.store is None else Connections(options.store, options.keep))

    def report(self, record: dict[str, Any]) -> None:
        self.reports.add(int(record["id"][1:]), record)


def capture_json(stats: dict[str, Any]) -> dict[str, Any]:
    duration = 0.0
    if stats["first_ts"] is not None and stats["last_ts"] is not None:
        duration = stats["last_ts"] - stats["first_ts"]
    damage = stats["damage"]
    return {
        "file": stats["file"],
        "format": stats["format"],
        "compressed": stats["compressed"],
        "link_types": stats["link_types"],
        "packets": stats["packets"],
        "tcp_packets": stats["tcp_packets"],
        "non_tcp_packets": stats["non_tcp_packets"],
        "truncated_packets": stats["truncated_packets"],
        "undecodable_packets": stats["undecodable_packets"],
        "ip_fragments": stats["ip_fragments"],
        "if_drops": stats["if_drops"],
        "first_ts": stats["first_ts"],
        "duration_s": round(duration, 6),
        "damage": None if damage is None else {
            "frame": damage["frame"], "offset": damage["offset"],
            "reason": damage_reason(damage)},
    }


def capture_findings(capture: dict[str, Any]) -> list[Finding]:
    out = []
    damage = capture["damage"]
    if damage is not None:
        frame, offset, reason = damage["frame"], damage["offset"], damage["reason"]
        out.append(Finding("error", "capture-damaged",
                           f"the capture is damaged at byte offset {offset} (frame {frame}): "
                           f"{reason}; only what precedes it was analysed", None, [frame]))
    if capture["if_drops"]:
        out.append(Finding("warning", "capture-drops",
                           f"the capturing interface dropped {capture['if_drops']:,} packets: "
                           f"expect capture gaps", None, []))
    if capture["truncated_packets"]:
        out.append(Finding("info", "snaplen",
                           f"{capture['truncated_packets']:,} packets were cut by the snapshot "
                           f"length; sequence accounting uses the lengths on the wire", None, []))
    if capture["undecodable_packets"]:
        out.append(Finding("warning", "undecodable-packets",
                           f"{capture['undecodable_packets']:,} packets had IP/TCP headers cut "
                           f"or malformed and were skipped", None, []))
    if capture["packets"] and not capture["tcp_packets"]:
        out.append(Finding("warning", "no-tcp", "the capture holds no TCP packets", None, []))
    return out


def build_report(stats: dict[str, Any], engine: dict[str, Any], run: Run,
                 relays: list[dict[str, Any]], roles: dict[str, str],
                 relay_findings: list[Finding]) -> dict[str, Any]:
    """The report, once the pass is done: connections in the order they opened."""
    capture = capture_json(stats)
    judge = run.judge
    judge.findings_of.sort(key=lambda r: r[0])
    findings = capture_findings(capture)
    if capture["truncated_packets"]:
        findings = [f for f in findings if f.code != "snaplen"]
        findings.append(judge.cut.finding(capture["truncated_packets"]))
    for _, found in judge.findings_of:
        findings.extend(found)
    judge.findings_of = []
    if engine["late_packets"]:
        settled = engine["settled_linger"]
        findings.append(Finding(
            "info", "late-packets",
            f"{engine['late_packets']:,} packets came after their connection had closed and been "
            f"reported (silent {settled if settled is not None else float('inf'):g} s "
            f"after a RST or both FINs acknowledged, else {run.options.linger_s:g} s); they are "
            f"not analysed", None, engine["late_frames"]))
    reports = run.reports
    reports.sort()
    store = run.options.store
    # a storm's matched queries stored like its connections (2 KB each as dicts), as text
    kept: Callable[[], Any] = (
        list if store is None else partial(TopPairs, run.options.keep) if run.options.keep
        else partial(Texts, store, PAIR_DEPTH, deflate=False))
    for relay in relays:
        pairs = kept()
        for pair in relay["queries"]:
            pairs.append(pair)
        relay["queries"] = pairs
    reports.matched(roles)
    findings.extend(relay_findings)
    findings.sort(key=lambda f: SEVERITY_ORDER[f.severity])
    return {
        "schema": SCHEMA,
        "tool": {"name": "pktflow", "version": __version__},
        "capture": capture,
        "connections": reports.connections(),
        "relays": relays,
        "findings": [f.to_json() for f in findings],
    }

