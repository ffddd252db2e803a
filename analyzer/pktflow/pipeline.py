"""One pass over a capture: reader -> TCP engine -> per-connection analyses -> report dict.

The reader is the only I/O; everything after it is fed packets. The report is a plain dict in
the "pktflow.report/1" schema, and every renderer (text, JSON) works from that dict alone.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

from pktflow import __version__, accel
from pktflow.capture.packet import CaptureStats
from pktflow.capture.reader import Capture, open_capture
from pktflow.findings import SEVERITY_ORDER, Finding
from pktflow.pgwire.conversation import Conversation
from pktflow.relay.measure import relays_of
from pktflow.report.stored import PAIR_DEPTH, Connections, Reports, Spill, Texts
from pktflow.tcp.connection import Connection
from pktflow.tcp.engine import TcpEngine
from pktflow.tcp.findings import connection_findings, direction_name
from pktflow.tcp.observe import PacketObserver
from pktflow.transfer.analyzer import TransferAnalyzer
from pktflow.transfer.capture_point import capture_point

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


def analyze(path: str, options: Options | None = None,
            progress: Progress | None = None) -> dict[str, Any]:
    """Analyse the capture at `path`; raises PktflowError subclasses for unreadable input."""
    options = options or Options()
    # The analysis state holds no reference cycles, but every connection adds dozens of
    # containers, and the cyclic collector re-scans them all again and again: with 100,000
    # connections it took three quarters of the pass. Reference counting frees everything.
    collecting = gc.isenabled()
    gc.disable()
    try:
        engine: TcpEngine | _Finished
        with open_capture(path) as cap:
            stats = cap.stats
            run = Run(options, stats)
            core = accel.core if options.store is not None and options.transfer else None
            if core is not None:  # the native twin of the Python pass
                engine = native_pass(core, cap, run, progress)
            else:
                engine = python_pass(cap, run, progress)
        return build_report(stats, engine, run)
    finally:
        if collecting:
            # What the pass allocated and kept (the report, a storm's relay views) would sit
            # in the youngest generation, and the first collection would scan all of it (0.3 s
            # on a 20,000-connection report): file it with the oldest, as it has lived long
            # (unless the caller froze objects of its own, which unfreeze would release).
            if not gc.get_freeze_count():
                gc.freeze()
                gc.unfreeze()
            gc.enable()


def python_pass(cap: Capture, run: Run, progress: Progress | None) -> TcpEngine:
    """The pass in Python: the engine fed every packet, finished (its connections still open
    are reported by build_report)."""
    options = run.options
    engine = TcpEngine(sink_factory=run.sink if options.decode_postgres else None,
                       observer_factory=run.observers if options.transfer else None,
                       retired=run.report, linger=options.linger_s,
                       settled_linger=options.settled_linger_s)
    feed_capture(cap, engine, progress)
    engine.finish()
    return engine


def native_pass(core: Any, cap: Capture, run: Run, progress: Progress | None) -> _Finished:
    """The pass on pktflow._core (accel.core): every connection reported to `run`, and what
    build_report reads of the engine. The core's state goes when this returns, before relay
    matching needs the memory."""
    options = run.options
    native = core.Core(options.store, options.decode_postgres, options.linger_s,
                       options.settled_linger_s, run.add_report, run.archive)
    cap.feed(native, progress)
    native.finish()
    return _Finished((), native.late_packets, native.late_frames, native.settled_linger)


def feed_capture(cap: Capture, engine: TcpEngine, progress: Progress | None = None) -> None:
    """Feed the engine every packet of the capture, sweeping it between batches."""
    n = 0
    for batch in cap.batches():
        for pkt in batch:
            engine.feed(pkt)  # a native call when compiled: no bound method between
        if batch:
            engine.sweep(batch[-1][1])
        if progress is not None and (n + len(batch)) >> 16 != n >> 16:
            progress(n + len(batch))
        n += len(batch)


class _Finished(NamedTuple):
    """What build_report reads of an engine whose connections were all reported (the native
    pass's: pktflow._core.Core)."""

    connections: tuple[()]
    late_packets: int
    late_frames: list[int]
    settled_linger: float


class Run:
    """The per-connection analyses of one pass, created as the engine meets connections, and
    the report of each connection once it is finished."""

    def __init__(self, options: Options, stats: CaptureStats) -> None:
        self.options = options
        self.stats = stats
        self.conversations: dict[str, Conversation] = {}
        self.transfers: dict[str, TransferAnalyzer] = {}
        # each reported connection's JSON, and (connection number, its findings) of those
        # with findings
        self.reports: Reports | Connections = (
            Reports() if options.store is None else Connections(options.store))
        self.findings_of: list[tuple[int, list[Finding]]] = []
        # where conversations archive their answered queries while they go on, when reports
        # are stored (one for all: a file each would be a descriptor each)
        self.archive: Spill | None = None if options.store is None else Spill()

    def report(self, conn: Connection) -> None:
        """Report a finished connection, then drop its analyses: the report holds what they
        found."""
        start = self.stats.first_ts or 0.0
        self.settle_roles(conn)
        out = conn.to_json(start)
        self.connection_json(conn, out, start)
        found = connection_findings(conn) + self.findings(conn)
        number = int(conn.id[1:])
        self.reports.add(number, out)
        if found:  # most have none: a storm's 80,000 empty lists were 10 MB
            self.findings_of.append((number, found))
        self.conversations.pop(conn.id, None)
        self.transfers.pop(conn.id, None)
        conn.detach()

    def add_report(self, number: int, text: str, payload: int, leg: tuple[Any, ...] | None,
                   found: list[Finding] | None) -> None:
        """A connection the native pass reported: its JSON text (in the stored layout), its
        payload bytes, what relay matching reads of it, its findings."""
        assert isinstance(self.reports, Connections)
        self.reports.add_text(number, text, payload, leg)
        if found:
            self.findings_of.append((number, found))

    def sink(self, conn: Connection) -> Conversation:
        dirs = conn.dirs
        conv = Conversation(conn.id, start_seen=lambda d: dirs[d].isn_seen,
                            archive=self.archive)
        self.conversations[conn.id] = conv
        return conv

    def observers(self, conn: Connection) -> list[PacketObserver]:
        dirs = conn.dirs
        ta = TransferAnalyzer(conn.id, scale_known=lambda side: dirs[side].wscale_known)
        self.transfers[conn.id] = ta
        return [ta]

    def settle_roles(self, conn: Connection) -> None:
        """Let the wire protocol correct the engine's client/server guess (no handshake)."""
        conv = self.conversations.get(conn.id)
        if conv is None or conv.frontend_direction is None or conn.handshake_seen:
            return
        conn.swapped = conv.frontend_direction == 1
        conn.role_source = "application"

    def connection_json(self, conn: Connection, out: dict[str, Any], start: float) -> None:
        conv = self.conversations.get(conn.id)
        if conv is not None:
            pg = conv.to_json()
            for q in pg.get("queries", []):
                for key in ("sent_s", "first_response_s", "last_response_s"):
                    if q.get(key) is not None:
                        q[key] = round(q[key] - start, 6)
            out.update(pg)
        ta = self.transfers.get(conn.id)
        if ta is not None:
            dirs = out["directions"]
            c2s, s2c = (1, 0) if conn.swapped else (0, 1)
            dirs["client_to_server"].update(ta.result(c2s, start))
            dirs["server_to_client"].update(ta.result(s2c, start))
            out["capture_point"] = capture_point(out)

    def findings(self, conn: Connection) -> list[Finding]:
        out: list[Finding] = []
        conv = self.conversations.get(conn.id)
        if conv is not None:
            out += conv.findings
        ta = self.transfers.get(conn.id)
        if ta is not None:
            out += ta.direction_findings(lambda d: direction_name(conn, d))
        return out


def capture_json(stats: CaptureStats) -> dict[str, Any]:
    duration = 0.0
    if stats.first_ts is not None and stats.last_ts is not None:
        duration = stats.last_ts - stats.first_ts
    return {
        "file": stats.file,
        "format": stats.format,
        "compressed": stats.compressed,
        "link_types": stats.link_types,
        "packets": stats.packets,
        "tcp_packets": stats.tcp_packets,
        "non_tcp_packets": stats.non_tcp_packets,
        "truncated_packets": stats.truncated_packets,
        "undecodable_packets": stats.undecodable_packets,
        "ip_fragments": stats.ip_fragments,
        "if_drops": stats.if_drops,
        "first_ts": stats.first_ts,
        "duration_s": round(duration, 6),
        "damage": None if stats.damage is None else {
            "frame": stats.damage[0], "offset": stats.damage[1], "reason": stats.damage[2]},
    }


def capture_findings(stats: CaptureStats) -> list[Finding]:
    out = []
    if stats.damage is not None:
        frame, offset, reason = stats.damage
        out.append(Finding("error", "capture-damaged",
                           f"the capture is damaged at byte offset {offset} (frame {frame}): "
                           f"{reason}; only what precedes it was analysed", None, [frame]))
    if stats.if_drops:
        out.append(Finding("warning", "capture-drops",
                           f"the capturing interface dropped {stats.if_drops:,} packets: expect "
                           f"capture gaps", None, []))
    if stats.truncated_packets:
        out.append(Finding("info", "snaplen",
                           f"{stats.truncated_packets:,} packets were cut by the snapshot length; "
                           f"sequence accounting uses the lengths on the wire", None, []))
    if stats.undecodable_packets:
        out.append(Finding("warning", "undecodable-packets",
                           f"{stats.undecodable_packets:,} packets had IP/TCP headers cut or "
                           f"malformed and were skipped", None, []))
    if stats.packets and not stats.tcp_packets:
        out.append(Finding("warning", "no-tcp", "the capture holds no TCP packets", None, []))
    return out


def build_report(stats: CaptureStats, engine: TcpEngine | _Finished,
                 run: Run) -> dict[str, Any]:
    """The report, once the engine is finished: the connections still in it are reported now,
    after those retired during the pass, and all listed in the order they opened."""
    for conn in engine.connections:
        run.report(conn)
    run.findings_of.sort(key=lambda r: r[0])
    findings = capture_findings(stats)
    for _, found in run.findings_of:
        findings.extend(found)
    run.findings_of = []
    if engine.late_packets:
        findings.append(Finding(
            "info", "late-packets",
            f"{engine.late_packets:,} packets came after their connection had closed and been "
            f"reported (silent {engine.settled_linger:g} s "
            f"after a RST or both FINs acknowledged, else {run.options.linger_s:g} s); they are "
            f"not analysed", None,
            engine.late_frames))
    reports = run.reports
    reports.sort()
    store = run.options.store
    # a storm's matched queries stored like its connections (2 KB each as dicts), as text
    kept: Callable[[], Any] = (list if store is None
                               else partial(Texts, store, PAIR_DEPTH, deflate=False))
    relays, relay_findings, roles = relays_of(reports.relay_legs(), kept)
    reports.matched(roles)
    findings.extend(relay_findings)
    findings.sort(key=lambda f: SEVERITY_ORDER[f.severity])
    return {
        "schema": SCHEMA,
        "tool": {"name": "pktflow", "version": __version__},
        "capture": capture_json(stats),
        "connections": reports.connections(),
        "relays": relays,
        "findings": [f.to_json() for f in findings],
    }
