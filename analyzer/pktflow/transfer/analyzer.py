"""Transfer dynamics of one connection, per direction of data, from the engine's packet stream.

Definitions (the report's words mean exactly this):
- An ACK "advances" when it acknowledges bytes of the direction's data not acknowledged before;
  bytes_acked is that difference, segments_per_ack the data segments it newly covers.
- ACK causes: every_second_segment (covers 2+ segments or more than the largest segment:
  Linux ACKs once more than one receive-MSS is unacknowledged); delayed_timer (covers one
  segment, sent >= 40 ms after it: the delayed-ACK timer fired); quick_ack (covers one segment,
  sooner: quick-ack mode at the start or after idle, or an ACK sent as the application read);
  window_update (same ack, larger window, no data); duplicate (same ack, same window, no data,
  data outstanding).
- A flight is the data sent between two advancing ACKs. It ended because the window was full
  (in flight reached the receiver's window, or a zero window), because an ACK arrived while the
  sender was still sending (ack_arrived: not a round trip at all), because the sender waited
  for that ACK with the window open (cwnd_wait: ACK-clocked, the congestion window), or because
  the sender had nothing to send (sender_idle).
- In flight: highest byte sent minus highest byte acknowledged, at the capture point.
Memory is bounded: histograms and capped queues, nothing per packet.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from pktflow.capture.packet import FIN, RST, SYN
from pktflow.findings import Finding
from pktflow.tcp.observe import NEW, RETRANS, CompiledObserver, DirectionInfo
from pktflow.transfer.histogram import Bins, Histogram, Quantiles
from pktflow.transfer.report import transfer_findings, transfer_result

DELAYED_ACK_S: Final = 0.040  # Linux's minimum delayed-ACK timeout
CONTINUOUS_S: Final = 0.001  # a sender pausing less than this between segments was not waiting
ACK_CLOCK_S: Final = 0.0005  # a sender resuming this soon after an ACK was waiting for it
IDLE_S: Final = 0.010  # idle periods reported
MAX_OUTSTANDING: Final = 4096  # segments remembered for RTT and segments-per-ACK
MAX_IDLE_KEPT: Final = 20
MAX_BINS: Final = 200_000  # 100 ms goodput bins: over five hours
TOP_K: Final = 12  # the most frequent values listed per histogram


class Flow:
    """One direction of data: its sender's segments and its receiver's ACKs and windows."""

    __slots__ = (
        "data_bytes", "segments", "retrans", "seg_sizes", "first_ts", "last_ts", "last_frame",
        "first_frame", "high", "acked", "out_end", "out_ts", "out_head", "karn_upto",
        "ack_hist", "segs_hist", "every_second", "window_updates", "quick_acks",
        "delayed_timer", "duplicates", "acks", "win", "win_min", "win_max", "win_prev",
        "zero_since",
        "zero_periods", "zero_total", "zero_frames", "inflight", "inflight_max",
        "inflight_max_frame", "ratio_max", "fl_bytes", "fl_segs", "fl_full", "fl_first_frame",
        "pend_bytes", "pend_segs", "pend_full", "pend_data_ts", "pend_ack_ts", "pend_frame",
        "flights", "fl_bytes_hist", "fl_segs_hist", "end_reasons", "end_frames",
        "rtt", "rtt_min", "idle", "idle_count", "idle_total", "bins", "maxseg", "scale_known",
        "last_ack_ts", "full_frames", "idle_waiting", "bin_cur", "bin_new",
    )

    def __init__(self, scale_known: bool) -> None:
        self.data_bytes = 0
        self.segments = 0
        self.retrans = 0
        self.seg_sizes = Histogram()
        self.first_ts: float | None = None
        self.last_ts = 0.0
        self.first_frame = 0
        self.last_frame = 0
        self.high = 0
        self.acked = -1
        # The end and send time of each unacknowledged new segment, oldest at out_head: a
        # queue in two native lists, without a tuple per segment.
        self.out_end: list[int] = []
        self.out_ts: list[float] = []
        self.out_head = 0
        self.karn_upto = -1  # no RTT samples for bytes up to here: they were retransmitted
        self.ack_hist = Histogram()
        self.segs_hist = Histogram()
        # ACK causes (see the module's docstring), counted in native ints
        self.every_second = 0
        self.window_updates = 0
        self.quick_acks = 0
        self.delayed_timer = 0
        self.duplicates = 0
        self.acks = 0
        self.win: int | None = None
        self.win_min: int | None = None
        self.win_max: int | None = None
        self.win_prev = -1
        self.zero_since: float | None = None
        self.zero_periods = 0
        self.zero_total = 0.0
        self.zero_frames: list[int] = []
        self.inflight = Quantiles()
        self.inflight_max = 0
        self.inflight_max_frame = 0
        self.ratio_max = 0.0
        self.fl_bytes = 0
        self.fl_segs = 0
        self.fl_full = False
        self.fl_first_frame = 0
        # A flight closed by an ACK, classified when the sender's next move is seen (none
        # while pend_segs is 0): its bytes, segments, whether the window was full, its last
        # data's time, the ACK's time and frame.
        self.pend_bytes = 0
        self.pend_segs = 0
        self.pend_full = False
        self.pend_data_ts = 0.0
        self.pend_ack_ts = 0.0
        self.pend_frame = 0
        self.flights = 0
        self.fl_bytes_hist = Quantiles()
        self.fl_segs_hist = Quantiles()
        self.end_reasons = {"window_full": 0, "ack_arrived": 0, "cwnd_wait": 0,
                            "sender_idle": 0}
        self.end_frames: dict[str, list[int]] = {k: [] for k in self.end_reasons}
        self.rtt = Quantiles()  # microseconds
        self.rtt_min: float | None = None
        self.idle: list[dict[str, Any]] = []
        self.idle_count = 0
        self.idle_total = 0.0
        self.bins = Bins()  # complete after finish(): the current bin is in bin_*
        self.bin_cur = -1  # the 100 ms bin being filled, and its new bytes not yet in bins
        self.bin_new = 0
        self.maxseg = 0
        self.scale_known = scale_known
        self.last_ack_ts = 0.0
        self.full_frames: list[int] = []
        self.idle_waiting = 0.0  # idle time with data unacknowledged or the window shut

    @property
    def causes(self) -> dict[str, int]:
        return {"every_second_segment": self.every_second, "window_update": self.window_updates,
                "quick_ack": self.quick_acks, "delayed_timer": self.delayed_timer,
                "duplicate": self.duplicates}

    def end_flight(self, ack_ts: float, frame: int) -> None:
        """End the current flight (by an ACK at ack_ts, or the data's end): it waits in pend_*
        for the sender's next move to tell why it ended."""
        self.pend_bytes, self.pend_segs, self.pend_full = self.fl_bytes, self.fl_segs, self.fl_full
        self.pend_data_ts, self.pend_ack_ts, self.pend_frame = self.last_ts, ack_ts, frame
        self.fl_bytes = self.fl_segs = 0


def _hist_facts(h: Histogram) -> dict[str, Any]:
    counts = h.counts
    mode = h.mode()
    return {"count": h.n, "median": h.median(), "mode": mode,
            "mode_count": 0 if mode is None else counts.get(mode, 0),
            "top": [[v, c] for v, c in sorted(counts.items(), key=_by_count)[:TOP_K]]}


def _by_count(item: tuple[int, int]) -> tuple[int, int]:
    return -item[1], item[0]


def flow_facts(f: Flow, lower_bound: int | None) -> dict[str, Any]:
    """One direction's facts (pktflow_core::transfer::DirectionFacts)."""
    best = worst = None
    if f.first_ts is not None and len(f.bins):
        i, c = f.bins.most()
        best = {"index": i, "bytes": c}
        w = f.bins.least(int((f.last_ts - f.first_ts) * 10))
        worst = {"index": w, "bytes": f.bins.get(w)}
    return {
        "data_bytes": f.data_bytes, "segments": f.segments,
        "retransmitted_segments": f.retrans, "first_ts": f.first_ts, "last_ts": f.last_ts,
        "first_frame": f.first_frame, "last_frame": f.last_frame, "max_segment": f.maxseg,
        "segment_size": _hist_facts(f.seg_sizes),
        "acks": {"count": f.acks, "causes": dict(f.causes),
                 "bytes_acked": _hist_facts(f.ack_hist),
                 "segments_per_ack": _hist_facts(f.segs_hist)},
        "window": {"min": f.win_min, "max": f.win_max, "scaled": f.scale_known,
                   "scale_lower_bound": lower_bound, "zero_window_periods": f.zero_periods,
                   "zero_window_total_s": f.zero_total, "zero_frames": list(f.zero_frames),
                   "full_frames": list(f.full_frames)},
        "in_flight": {"max": f.inflight_max, "median": f.inflight.median(),
                      "max_frame": f.inflight_max_frame, "max_ratio_to_window": f.ratio_max},
        "flights": {"count": f.flights, "bytes_median": f.fl_bytes_hist.median(),
                    "segments_median": f.fl_segs_hist.median(),
                    "end_reasons": dict(f.end_reasons),
                    "end_frames": {k: list(v) for k, v in f.end_frames.items()}},
        "rtt": {"samples": f.rtt.n, "min_s": f.rtt_min, "median_us": f.rtt.median(),
                "p95_us": f.rtt.quantile(0.95)},
        "goodput": {"bins": len(f.bins), "best": best, "worst": worst},
        "idle_periods": {"count": f.idle_count, "total_s": f.idle_total,
                         "waiting_s": f.idle_waiting, "first": [dict(p) for p in f.idle]},
    }


def _flush_bin(f: Flow) -> None:
    if f.bin_new:
        f.bins.add(f.bin_cur, f.bin_new)
        f.bin_new = 0


class TransferAnalyzer(CompiledObserver):
    def __init__(self, conn_id: str, scale_known: Callable[[int], bool] | None = None) -> None:
        self.conn_id = conn_id
        self._scale_known = scale_known or (lambda d: True)
        # flows[d]'s windows are advertised by side 1-d
        self.flows = (Flow(self._scale_known(1)), Flow(self._scale_known(0)))
        self.syn_ts: dict[int, float] = {}
        self.await_hs_ack = False  # SYN-ACK seen, the client's ACK not yet: one test per packet
        self.handshake: float | None = None  # SYN-ACK - SYN when the first data came
        self.info: tuple[DirectionInfo, DirectionInfo] | None = None
        self._facts: dict[str, Any] | None = None

    # -- per packet ----------------------------------------------------------------------

    def on_packet(self, d: int, frame: int, ts: float, seq: int, end: int, ack: int, win: int,
                  flags: int, kind: int) -> None:
        if flags & SYN:
            self._syn(d, ts, flags)
            return
        if self.await_hs_ack and d == 0 and flags & 0x10:
            self.syn_ts[2] = ts  # the client's ACK completing the handshake
            self.await_hs_ack = False
        if ack >= 0:
            # this packet's window and ACK speak about the other direction's data
            self._ack(self.flows[1 - d], 1 - d, frame, ts, ack, win, flags, end > seq)
        if end > seq:
            self._data(self.flows[d], frame, ts, seq, end, kind)

    def _syn(self, d: int, ts: float, flags: int) -> None:
        if not flags & 0x10:
            self.syn_ts[0] = ts
        elif 0 in self.syn_ts:
            self.syn_ts[1] = ts
            self.await_hs_ack = 2 not in self.syn_ts
        for i in (0, 1):
            self.flows[i].scale_known = self._scale_known(1 - i)

    def _data(self, f: Flow, frame: int, ts: float, seq: int, end: int, kind: int) -> None:
        n = end - seq
        if f.first_ts is None:
            f.first_ts, f.first_frame = ts, frame
            if 1 in self.syn_ts and self.handshake is None and 0 in self.syn_ts:
                self.handshake = self.syn_ts[1] - self.syn_ts[0]
        elif ts - f.last_ts > IDLE_S:
            self._idle(f, ts, frame)
        if f.pend_segs:
            self._close_flight(f, ts)
        f.segments += 1
        f.seg_sizes.add(n)
        if n > f.maxseg:
            f.maxseg = n
        if kind & RETRANS:
            f.retrans += 1
            if end > f.karn_upto:
                f.karn_upto = end
        if kind & NEW and end > f.high:
            new = end - max(seq, f.high)
            f.data_bytes += new
            f.high = end
            b = int((ts - f.first_ts) * 10)
            if b < MAX_BINS:
                if b != f.bin_cur:  # thousands of segments share a bin: one update each
                    _flush_bin(f)
                    f.bin_cur = b
                f.bin_new += new
            if len(f.out_end) - f.out_head >= MAX_OUTSTANDING:
                f.out_head += 1
            f.out_end.append(end)
            f.out_ts.append(ts)
        if f.fl_segs == 0:
            f.fl_first_frame = frame
        f.fl_bytes += n
        f.fl_segs += 1
        if f.acked >= 0:
            inflight = f.high - f.acked
            f.inflight.add(inflight)
            if inflight > f.inflight_max:
                f.inflight_max, f.inflight_max_frame = inflight, frame
            win = f.win
            if win is not None and f.scale_known:
                if win and inflight / win > f.ratio_max:
                    f.ratio_max = inflight / win
                if inflight >= win - f.maxseg:
                    f.fl_full = True
                    if len(f.full_frames) < 20:
                        f.full_frames.append(frame)
        f.last_ts, f.last_frame = ts, frame

    def _ack(self, f: Flow, d: int, frame: int, ts: float, ack: int, win: int, flags: int,
             has_data: bool) -> None:
        if win == 0:
            if f.zero_since is None and not flags & (RST | FIN):
                f.zero_since = ts
                f.zero_periods += 1
                f.fl_full = True
                if len(f.zero_frames) < 20:
                    f.zero_frames.append(frame)
        elif f.zero_since is not None:
            f.zero_total += ts - f.zero_since
            f.zero_since = None
        if not flags & RST:
            f.win = win
            if f.win_min is None or win < f.win_min:
                f.win_min = win
            if f.win_max is None or win > f.win_max:
                f.win_max = win
        if ack > f.acked:
            if f.acked >= 0:
                self._advance(f, frame, ts, ack)
            f.acked = ack
        elif ack == f.acked and not has_data and not flags & (SYN | FIN | RST):
            if win > f.win_prev >= 0:
                f.window_updates += 1
            elif win == f.win_prev and f.high > ack:
                f.duplicates += 1
        f.win_prev = win

    def _advance(self, f: Flow, frame: int, ts: float, ack: int) -> None:
        nbytes = ack - f.acked
        segs = 0
        sent = 0.0
        ends, times, h = f.out_end, f.out_ts, f.out_head
        n = len(ends)
        while h < n and ends[h] <= ack:
            sent = times[h]
            segs += 1
            if ends[h] > f.karn_upto:  # Karn: no sample from retransmitted data
                rtt = ts - sent
                f.rtt.add(int(rtt * 1e6))
                if f.rtt_min is None or rtt < f.rtt_min:
                    f.rtt_min = rtt
            h += 1
        if h == n:
            ends.clear()
            times.clear()
            h = 0
        elif h >= 1024:  # drop what was acknowledged, now and then: a move of what is not
            del ends[:h]
            del times[:h]
            h = 0
        f.out_head = h
        f.acks += 1
        f.ack_hist.add(nbytes)
        f.segs_hist.add(segs)
        if segs >= 2 or nbytes > f.maxseg:
            f.every_second += 1
        elif segs and ts - sent >= DELAYED_ACK_S:
            f.delayed_timer += 1
        else:
            f.quick_acks += 1
        f.last_ack_ts = ts
        if f.fl_segs:
            f.end_flight(ts, frame)
            f.fl_full = f.win == 0

    def _close_flight(self, f: Flow, next_ts: float | None) -> None:
        nbytes, segs, last_data, ack_ts, frame = (f.pend_bytes, f.pend_segs, f.pend_data_ts,
                                                  f.pend_ack_ts, f.pend_frame)
        f.pend_segs = 0
        if f.pend_full:
            reason = "window_full"
        elif next_ts is None:
            reason = "sender_idle"
        elif next_ts - last_data <= CONTINUOUS_S:
            reason = "ack_arrived"
        elif next_ts - ack_ts <= max(ACK_CLOCK_S, 0.25 * (f.rtt_min or 0.0)):
            reason = "cwnd_wait"
        else:
            reason = "sender_idle"
        f.flights += 1
        f.fl_bytes_hist.add(nbytes)
        f.fl_segs_hist.add(segs)
        f.end_reasons[reason] += 1
        if len(f.end_frames[reason]) < 20:
            f.end_frames[reason].append(frame)

    def _idle(self, f: Flow, ts: float, frame: int) -> None:
        gap = ts - f.last_ts
        f.idle_count += 1
        f.idle_total += gap
        outstanding = f.high - f.acked if f.acked >= 0 else 0
        if f.win == 0 or outstanding > 0:
            f.idle_waiting += gap
        if len(f.idle) < MAX_IDLE_KEPT:
            f.idle.append({"start_ts": f.last_ts, "seconds": gap, "from_frame": f.last_frame,
                           "to_frame": frame, "outstanding": outstanding,
                           "zero_window": f.win == 0})

    # -- end -----------------------------------------------------------------------------

    def finish(self, info: tuple[DirectionInfo, DirectionInfo]) -> None:
        self.info = info
        for d, f in enumerate(self.flows):
            _flush_bin(f)
            if f.fl_segs and not f.pend_segs:  # the last flight: data simply ended
                f.end_flight(f.last_ts, f.last_frame)
            if f.pend_segs:
                self._close_flight(f, None)
            if f.zero_since is not None:
                f.zero_total += f.last_ts - f.zero_since if f.last_ts > f.zero_since else 0.0
            f.scale_known = info[1 - d].window_scale_known

    def facts(self) -> dict[str, Any]:
        """What was measured, as the Rust core's TransferFacts serializes it (the same keys
        and values): what pktflow.transfer.report reads."""
        if self._facts is not None:
            return self._facts

        def bound(side: int) -> int | None:
            return None if self.info is None else self.info[side].window_scale_lower_bound

        out = {"directions": [flow_facts(self.flows[0], bound(1)),
                              flow_facts(self.flows[1], bound(0))],
               "syn_ts": [self.syn_ts.get(0), self.syn_ts.get(1), self.syn_ts.get(2)],
               "handshake_syn_to_synack_s": self.handshake,
               "finished": self.info is not None}
        if self.info is not None:  # nothing changes after finish: computed once
            self._facts = out
        return out

    def direction_findings(self, name: Callable[[int], str]) -> list[Finding]:
        """Findings per direction, named once the roles are settled (name(d): 'a->b')."""
        return transfer_findings(self.facts(), self.conn_id, name)

    def result(self, d: int, start: float = 0.0) -> dict[str, Any]:
        """JSON for direction d's data; times relative to `start` (the capture's first)."""
        return transfer_result(self.facts(), d, start)
