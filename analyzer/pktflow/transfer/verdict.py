"""What limited a direction's transfer, in plain words with the numbers and frames behind it,
and the direction's JSON (pktflow.report/1, "acks", "window", "in_flight", "flights", ...)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pktflow.findings import Finding
from pktflow.tcp.observe import DirectionInfo

if TYPE_CHECKING:
    from pktflow.transfer.analyzer import Flow

MIN_BYTES = 64 * 1024  # below this a direction carries too little to judge
MIN_SEGMENTS = 20


def _ms(us: int | None) -> float | None:
    return None if us is None else round(us / 1000, 3)


def pattern(f: Flow) -> str:
    """The dominant ACK pattern in words: '1 ACK per 2 segments, 16,384 B (87% of ACKs)'."""
    if not f.acks:
        return "no ACKs advanced"
    segs, nbytes = f.segs_hist.mode(), f.ack_hist.mode()
    share = f.ack_hist.counts.get(nbytes, 0) / f.acks  # type: ignore[arg-type]
    unit = "segment" if segs == 1 else "segments"
    return f"1 ACK per {segs} {unit}, {nbytes:,} B ({share:.0%} of ACKs)"


def _goodput(f: Flow) -> tuple[float, dict[str, Any] | None, dict[str, Any] | None]:
    if f.first_ts is None:
        return 0.0, None, None
    span = f.last_ts - f.first_ts
    rate = f.data_bytes / span if span > 0 else 0.0
    if not len(f.bins) or span < 0.2:
        return rate, None, None
    best = f.bins.most()
    worst_bin = f.bins.least(int(span * 10))  # an empty one if there is one
    return (rate, {"bps": best[1] * 10, "start_ts": f.first_ts + best[0] / 10},
            {"bps": f.bins.get(worst_bin) * 10, "start_ts": f.first_ts + worst_bin / 10})


def verdict(f: Flow) -> dict[str, Any]:
    reasons, flights = f.end_reasons, max(1, f.flights)
    evidence: list[int] = []
    if f.data_bytes < MIN_BYTES or f.segments < MIN_SEGMENTS:
        return {"limit": "none", "summary": f"too little data to judge ({f.data_bytes:,} bytes "
                f"in {f.segments} segments)", "evidence_frames": []}
    pat = pattern(f)
    if f.retrans / f.segments > 0.01:
        return {"limit": "loss", "summary": f"{f.retrans:,} of {f.segments:,} segments were "
                f"retransmitted ({f.retrans / f.segments:.1%}): loss recovery sets the pace",
                "evidence_frames": [f.first_frame, f.last_frame]}
    full = reasons["window_full"]
    span = max(f.last_ts - (f.first_ts or f.last_ts), 1e-9)
    # a brief zero window now and then is not what sets the pace; a real share of the time is
    if f.zero_total >= 0.05 * span or full >= 0.3 * flights:
        # a frame can both shut the window and fill it: listed once
        evidence = list(dict.fromkeys(f.zero_frames[:5] + f.full_frames[:5])) or [f.first_frame]
        zero = (f" and fell to zero {f.zero_periods} time(s) for {f.zero_total * 1e3:,.1f} ms "
                f"in all" if f.zero_periods else "")
        how = ("judged by zero windows only: the window scale is unknown"
               if not f.scale_known else f"{full} of {f.flights} flights ended with the window "
               f"full")
        return {"limit": "receiver_window", "summary":
                f"the receiver's window limited the sender ({how}){zero}: the receiving "
                f"application did not read as fast as data arrived. If the receiver is psql, it "
                f"was busy printing; if it is a pooler, its buffer settings (PgBouncer pkt_buf, "
                f"tcp_socket_buffer) set how much it takes per read.",
                "evidence_frames": evidence}
    if reasons["cwnd_wait"] >= 0.3 * flights:
        rtt = _ms(f.rtt.median())
        return {"limit": "latency", "summary":
                f"the sender waited for ACKs with the receive window open in "
                f"{reasons['cwnd_wait']} of {f.flights} flights (median flight "
                f"{f.fl_bytes_hist.median() or 0:,} B, RTT median {rtt} ms): the congestion "
                f"window and the round-trip time set the pace",
                "evidence_frames": f.end_frames["cwnd_wait"][:5]}
    ratio = f" ({f.ratio_max:.0%} of the window)" if f.scale_known and f.ratio_max else ""
    if f.zero_periods:
        ratio += (f"; the window fell to zero {f.zero_periods} time(s), "
                  f"{f.zero_total * 1e3:,.2f} ms in all, too briefly to set the pace")
    return {"limit": "sender", "summary":
            f"the window never limited it: at most {f.inflight_max:,} bytes in flight{ratio}. "
            f"Flights ended with an ACK arriving while the sender was still sending "
            f"({reasons['ack_arrived']}) or with the sender idle ({reasons['sender_idle']}), so "
            f"the sender set the pace (for a server: producing the rows). The ACK pattern "
            f"({pat}) is delayed-ACK pacing, not a round-trip limit.",
            # the most in flight can be at the first or the last segment: each frame once
            "evidence_frames": list(dict.fromkeys((f.first_frame, f.inflight_max_frame,
                                                   f.last_frame)))}


def direction_json(f: Flow, info: DirectionInfo | None, start: float = 0.0) -> dict[str, Any]:
    rate, best, worst = _goodput(f)
    for w in (best, worst):
        if w is not None:
            w["start_s"] = round(w.pop("start_ts") - start, 6)
    rtt = None
    if f.rtt.n:
        rtt = {"samples": f.rtt.n, "min": round((f.rtt_min or 0) * 1e3, 3),
               "median": _ms(f.rtt.median()), "p95": _ms(f.rtt.quantile(0.95))}
    return {
        "acks": {"count": f.acks, "bytes_acked_median": f.ack_hist.median(),
                 "bytes_acked_histogram": f.ack_hist.top(),
                 "segments_per_ack_median": f.segs_hist.median(),
                 "causes": dict(f.causes)},
        "pattern": pattern(f),
        "segment_size_median": f.seg_sizes.median(),
        "segment_size_histogram": f.seg_sizes.top(),
        "window": {"min": f.win_min, "max": f.win_max, "scaled": f.scale_known,
                   "scale_lower_bound": None if f.scale_known or info is None
                   else info.window_scale_lower_bound,
                   "zero_window_periods": f.zero_periods,
                   "zero_window_total_s": round(f.zero_total, 6)},
        "in_flight": {"max": f.inflight_max, "median": f.inflight.median(),
                      "max_frame": f.inflight_max_frame,
                      "max_ratio_to_window": round(f.ratio_max, 3) if f.scale_known else None},
        "flights": {"count": f.flights, "bytes_median": f.fl_bytes_hist.median(),
                    "segments_median": f.fl_segs_hist.median(),
                    "end_reasons": dict(f.end_reasons)},
        "rtt_ms": rtt,
        "goodput_bps": round(rate),
        "best_100ms": best,
        "worst_100ms": worst,
        "idle_periods": {"count": f.idle_count, "total_s": round(f.idle_total, 6),
                         "first": [dict(p, start_s=round(p.pop("start_ts") - start, 6))
                                   for p in (dict(x) for x in f.idle)]},
        "verdict": verdict(f),
    }


def direction_findings(conn_id: str, name: str, f: Flow) -> list[Finding]:
    out: list[Finding] = []
    timer = f.delayed_timer
    if f.acks >= 10 and timer >= 0.1 * f.acks:
        out.append(Finding(
            "warning", "delayed-ack-stalls",
            f"{name}: {timer} of {f.acks} ACKs came from the delayed-ACK timer (>= 40 ms after "
            f"the data): each is a stall of at least 40 ms", conn_id, []))
    span = (f.last_ts - f.first_ts) if f.first_ts is not None else 0.0
    if span > 0 and f.idle_waiting > 0.2 * span:
        out.append(Finding(
            "warning", "stalls",
            f"{name}: the sender stalled for {f.idle_waiting:.3f} s of {span:.3f} s (pauses over "
            f"10 ms with data unacknowledged or the window shut)", conn_id,
            [p["to_frame"] for p in f.idle[:10]]))
    return out
