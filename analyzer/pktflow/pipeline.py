"""One pass over a capture: the Rust core measures and keeps the facts, Python judges.

The core (pktflow._core) reads the file, runs the TCP engine, the PostgreSQL decoder and the
transfer measurements, and builds each connection's record ("pktflow.report/1"'s layout) once
the connection is done; the judge (pktflow.judge) words it from the few numbers its rules read.
Once the pass is done the core finds the relays (Python words them), and holds the report,
which it writes itself; renderers read its parts (report.connections).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from pktflow import __version__, _core
from pktflow._core import DUP_WINDOW_S, JITTER_S
from pktflow.capture.problems import damage_reason, open_error
from pktflow.errors import NoSpaceError
from pktflow.findings import SEVERITY_ORDER, Finding
from pktflow.judge import Judge
from pktflow.relay.measure import RelayJudge
from pktflow.report.connections import Connections, Pairs

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
    # the report's connections and each relay's pairs read from the core as a renderer asks
    # (report.connections), not all made Python values at once
    lazy: bool = False
    # every connection's packets kept by the core for a diagram (Report.core.drawing)
    record: bool = False


class Report(dict[str, Any]):
    """The report as renderers read it ("pktflow.report/1"'s keys), and the core's report,
    which writes the JSON (`core.write_json`)."""

    core: Any


STDIN = "-"  # the path that reads standard input


class Stream(NamedTuple):
    """How a pass over a pipe runs: `live` takes what the pipe has at each read; `stop` ends
    the stream where it stands (SIGINT); `follow` ("json" or "values") has the core say each
    query once final and each connection once judged, handed to `said` after each step."""
    stop: Any
    live: bool = False
    follow: str | None = None
    said: Callable[[list[tuple[str, Any]]], None] | None = None


def open_pass(path: str, options: Options, stream: Stream | None = None,
              name: str | None = None) -> Any:
    """The core's pass over `path`; a capture it cannot open is a PktflowError (naming it
    `name`, default `path`)."""
    extra: dict[str, Any] = {}
    if stream is not None:
        extra = {"live": stream.live, "stop": stream.stop, "follow": stream.follow}
    try:
        return _core.Pass(path, options.decode_postgres, options.transfer,
                          _finite(options.linger_s), _finite(options.settled_linger_s),
                          options.record, **extra)
    except _core.OpenError as exc:
        raise open_error(exc, name or path) from None


def _finite(s: float) -> float | None:
    return None if s == float("inf") else s


def analyze(path: str, options: Options | None = None,
            progress: Progress | None = None, stream: Stream | None = None,
            name: str | None = None) -> Report:
    """Analyse the capture at `path` ("-": standard input, read as `stream` says), called
    `name` in the report (default: `path`); raises PktflowError subclasses for unreadable
    input."""
    options = options or Options()
    said = stream.said if stream is not None else None
    try:
        core = open_pass(path, options, stream, name)
        judge = Judge()
        shown = 0
        while core.step(judge) is not None:
            if said is not None:
                said(_live(core, judge))
            if progress is not None and core.records >> 16 != shown >> 16:
                shown = core.records
                progress(shown)
        if said is not None:
            said(_live(core, judge))
        try:
            core.outcome()
        except _core.OpenError as exc:
            raise open_error(exc, name or path) from None
        stats = core.stats()
        relay_judge = RelayJudge()
        core.relays(relay_judge)
        if said is not None:  # the legs were said before their relay was found
            said([("verdict", v) for v in relay_judge.judged_again])
        damage = stats["damage"]
        reason = None if damage is None else damage_reason(damage)
        findings = report_findings(stats, reason, core.engine(), judge, relay_judge, options)
        done = core.finish({"file": name or path, "version": __version__,
                            "damage_reason": reason,
                            "findings": [f.to_json() for f in findings]})
    except _core.SpoolError as exc:
        raise NoSpaceError(str(exc.args[0]), hint="set TMPDIR to a directory with room") \
            from None
    return report_of(done, options.lazy)


def _live(core: Any, judge: Judge) -> list[tuple[str, Any]]:
    """Following: what the core said since the last step, then the findings of the
    connections it said; those are not kept for the end (an endless stream would pile them
    up), which then lists the capture's and the relays' own."""
    items: list[tuple[str, Any]] = core.take_live()
    for _, found in sorted(judge.findings_of, key=lambda r: r[0]):
        items.extend(("finding", f.to_json()) for f in found)
    judge.findings_of = []
    return items


def report_of(core: Any, lazy: bool) -> Report:
    """The report's keys over the core's report: its connections and pairs read as they are
    asked for (lazy), or all at once."""
    relays = core.relays()
    for i, relay in enumerate(relays):
        relay["queries"] = Pairs(core, i)
        if not lazy:
            relay["queries"] = list(relay["queries"])
    connections = Connections(core)
    out = Report(schema=_core.SCHEMA, tool={"name": "pktflow", "version": __version__},
                 capture=core.capture(),
                 connections=connections if lazy else list(connections),
                 relays=relays, findings=core.findings())
    out.core = core
    return out


def capture_findings(capture: dict[str, Any], reason: str | None) -> list[Finding]:
    """The capture's own findings, from its stats (`reason`: the damage's, when damaged)."""
    out = []
    damage = capture["damage"]
    if damage is not None:
        frame, offset = damage["frame"], damage["offset"]
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
    dup = capture["duplicates"]
    if dup["packets"]:
        out.append(Finding("warning", "duplicate-packets",
                           f"{dup['packets']:,} TCP packets were captured twice (the same IP "
                           f"packet within {DUP_WINDOW_S * 1e3:g} ms: tcpdump -i any on a host "
                           f"with a bridge sees a packet on the port it came in by and on the one "
                           f"it left by, a mirror may send it from both ends); each is counted "
                           f"once and the copies dropped, which would otherwise read as "
                           f"retransmissions", None, [copy for copy, _ in dup["frames"]]))
    out += timeline_findings(capture["timeline"])
    if capture["tunnelled_packets"]:
        out.append(Finding("info", "tunnelled",
                           f"{capture['tunnelled_packets']:,} TCP packets came inside tunnels "
                           f"and are analysed as if captured directly: "
                           f"{tunnels(capture['tunnels'])}", None, []))
    if capture["packets"] and not capture["tcp_packets"]:
        out.append(Finding("warning", "no-tcp", "the capture holds no TCP packets", None, []))
    return out


def timeline_findings(tl: Mapping[str, Any]) -> list[Finding]:
    """Timestamps that jumped (kept on one timeline) or stepped back (left as they are)."""
    out = []
    if tl["jumps_total"]:
        said = "; ".join(
            f"frame {j['frame']} " + (f"comes back {_span(j['step_s'])}" if j["returns"] else
                                      f"jumps {_span(j['step_s'])}")
            for j in tl["jumps"][:5])
        more = (f" (and {tl['jumps_total'] - 5:,} more)" if tl["jumps_total"] > 5 else "")
        out.append(Finding(
            "warning", "time-jump",
            f"the capture's timestamps jump: {said}{more}. Durations and rates keep one "
            f"timeline: a frame whose time jumped takes the time of the frame before it, the "
            f"frames after it continue from there, and one back on the earlier timeline takes "
            f"its own time again", None, [j["frame"] for j in tl["jumps"]]))
    if tl["backward_steps"]:
        out.append(Finding(
            "info", "time-backward",
            f"timestamps step back by more than {JITTER_S * 1e3:g} ms {tl['backward_steps']:,} "
            f"time(s), by at most {tl['backward_max_s'] * 1e3:,.3f} ms (first at frame "
            f"{tl['backward_first_frame']}): packets of several interfaces or CPUs reached the "
            f"capture out of order, or the clock was set back; their times are kept as they are",
            None, [tl["backward_first_frame"]]))
    return out


def _span(step_s: float) -> str:
    """A jump's size and direction in words."""
    how = "back" if step_s < 0 else "forward"
    s = abs(step_s)
    if s >= 365.25 * 86400:
        return f"{s / (365.25 * 86400):,.1f} years {how}"
    if s >= 86400:
        return f"{s / 86400:,.1f} days {how}"
    return f"{s:,.1f} s {how}"


def tunnel_name(t: Mapping[str, Any]) -> str:
    """A tunnel as a reader names it: 'VXLAN VNI 42', 'GRE key 7', 'IPv6 in IPv4'."""
    kind = t["kind"]
    if kind in ("vxlan", "geneve"):
        return f"{kind.upper() if kind == 'vxlan' else 'Geneve'} VNI {t['vni']}"
    if kind == "gre":
        return f"GRE key {t['key']}" if t.get("key") is not None else "GRE"
    if kind == "erspan":
        kind_of = {1: "type II" if t.get("session") is not None else "type I", 2: "type III"}
        said = f"ERSPAN {kind_of.get(t['version'], str(t['version']))}"
        return f"{said} session {t['session']}" if t.get("session") is not None else said
    return f"IPv{t['inner']} in IPv{t['outer']}"


def tunnels(counts: list[Any]) -> str:
    """The tunnels of a capture, each with its TCP packets."""
    return ", ".join(f"{tunnel_name(c)} ({c['packets']:,} packets)" for c in counts)


def report_findings(stats: dict[str, Any], reason: str | None, engine: dict[str, Any],
                    judge: Judge, relay_judge: RelayJudge, options: Options) -> list[Finding]:
    """Every finding, in the report's order: the capture's, each connection's (in connection
    order), the late packets', the relays'; most severe first."""
    judge.findings_of.sort(key=lambda r: r[0])
    findings = capture_findings(stats, reason)
    if stats["truncated_packets"]:
        findings = [f for f in findings if f.code != "snaplen"]
        findings.append(judge.cut.finding(stats["truncated_packets"]))
    for _, found in judge.findings_of:
        findings.extend(found)
    judge.findings_of = []
    if engine["late_packets"]:
        settled = engine["settled_linger"]
        findings.append(Finding(
            "info", "late-packets",
            f"{engine['late_packets']:,} packets came after their connection had closed and been "
            f"reported (silent {settled if settled is not None else float('inf'):g} s "
            f"after a RST or both FINs acknowledged, else {options.linger_s:g} s); they are "
            f"not analysed", None, engine["late_frames"]))
    findings.extend(relay_judge.findings)
    findings.sort(key=lambda f: SEVERITY_ORDER[f.severity])
    return findings
