"""What limited a direction's transfer, in plain words with the numbers and frames behind it,
and the direction's JSON (pktflow.report/1, "acks", "window", "in_flight", "flights", ...).

Everything here reads one direction's facts as the core measured them (a dict: the
serialized pktflow_core::transfer::DirectionFacts, as the binding or json.loads gives it);
nothing is measured here."""

from __future__ import annotations

from typing import Any

from pktflow.findings import Finding
from pktflow.rates import bits_per_second

MIN_BYTES = 64 * 1024  # below this a direction carries too little to judge
MIN_SEGMENTS = 20


def _ms(us: int | None) -> float | None:
    return None if us is None else round(us / 1000, 3)


def _top(h: dict[str, Any]) -> dict[str, int]:
    """A histogram's most frequent values, keyed as strings for JSON, largest count first."""
    return {str(v): c for v, c in h["top"]}


def pattern(f: dict[str, Any]) -> str:
    """The dominant ACK pattern in words: '1 ACK per 2 segments, 16,384 B (87% of ACKs)'."""
    acks = f["acks"]
    if not acks["count"]:
        return "no ACKs advanced"
    segs, nbytes = acks["segments_per_ack"]["mode"], acks["bytes_acked"]["mode"]
    share = acks["bytes_acked"]["mode_count"] / acks["count"]
    unit = "segment" if segs == 1 else "segments"
    return f"1 ACK per {segs} {unit}, {nbytes:,} B ({share:.0%} of ACKs)"


def _goodput(f: dict[str, Any]
             ) -> tuple[int | None, dict[str, Any] | None, dict[str, Any] | None]:
    """The direction's rate in bits per second (None when too small to measure), and its best
    and worst 100 ms bins."""
    first = f["first_ts"]
    if first is None:
        return None, None, None
    span = f["last_ts"] - first
    rate = bits_per_second(f["data_bytes"], span, f["segments"])
    g = f["goodput"]
    if not g["bins"] or span < 0.2:
        return rate, None, None
    best, worst = g["best"], g["worst"]  # worst: an empty bin if there is one
    return (rate, {"bps": best["bytes"] * 80, "start_ts": first + best["index"] / 10},
            {"bps": worst["bytes"] * 80, "start_ts": first + worst["index"] / 10})


def verdict(f: dict[str, Any]) -> dict[str, Any]:
    fl, w = f["flights"], f["window"]
    reasons, flights = fl["end_reasons"], max(1, fl["count"])
    data_bytes, segments, retrans = f["data_bytes"], f["segments"], f["retransmitted_segments"]
    if data_bytes < MIN_BYTES or segments < MIN_SEGMENTS:
        return {"limit": "none", "summary": f"too little data to judge ({data_bytes:,} bytes "
                f"in {segments} segments)", "evidence_frames": []}
    pat = pattern(f)
    if retrans / segments > 0.01:
        return {"limit": "loss", "summary": f"{retrans:,} of {segments:,} segments were "
                f"retransmitted ({retrans / segments:.1%}): loss recovery sets the pace",
                "evidence_frames": [f["first_frame"], f["last_frame"]]}
    full = reasons["window_full"]
    span = max(f["last_ts"] - (f["first_ts"] or f["last_ts"]), 1e-9)
    zero_periods, zero_total = w["zero_window_periods"], w["zero_window_total_s"]
    # a brief zero window now and then is not what sets the pace; a real share of the time is
    if zero_total >= 0.05 * span or full >= 0.3 * flights:
        # a frame can both shut the window and fill it: listed once
        evidence = (list(dict.fromkeys(w["zero_frames"][:5] + w["full_frames"][:5]))
                    or [f["first_frame"]])
        zero = (f" and fell to zero {zero_periods} time(s) for {zero_total * 1e3:,.1f} ms "
                f"in all" if zero_periods else "")
        how = ("judged by zero windows only: the window scale is unknown"
               if not w["scaled"] else f"{full} of {fl['count']} flights ended with the "
               f"window full")
        return {"limit": "receiver_window", "summary":
                f"the receiver's window limited the sender ({how}){zero}: the receiving "
                f"application did not read as fast as data arrived. If the receiver is psql, it "
                f"was busy printing; if it is a pooler, its buffer settings (PgBouncer pkt_buf, "
                f"tcp_socket_buffer) set how much it takes per read.",
                "evidence_frames": evidence}
    if reasons["cwnd_wait"] >= 0.3 * flights:
        rtt = _ms(f["rtt"]["median_us"])
        return {"limit": "latency", "summary":
                f"the sender waited for ACKs with the receive window open in "
                f"{reasons['cwnd_wait']} of {fl['count']} flights (median flight "
                f"{fl['bytes_median'] or 0:,} B, RTT median {rtt} ms): the congestion "
                f"window and the round-trip time set the pace",
                "evidence_frames": fl["end_frames"]["cwnd_wait"][:5]}
    inf = f["in_flight"]
    ratio_max = inf["max_ratio_to_window"]
    ratio = f" ({ratio_max:.0%} of the window)" if w["scaled"] and ratio_max else ""
    if zero_periods:
        ratio += (f"; the window fell to zero {zero_periods} time(s), "
                  f"{zero_total * 1e3:,.2f} ms in all, too briefly to set the pace")
    return {"limit": "sender", "summary":
            f"the window never limited it: at most {inf['max']:,} bytes in flight{ratio}. "
            f"Flights ended with an ACK arriving while the sender was still sending "
            f"({reasons['ack_arrived']}) or with the sender idle ({reasons['sender_idle']}), so "
            f"the sender set the pace (for a server: producing the rows). The ACK pattern "
            f"({pat}) is delayed-ACK pacing, not a round-trip limit.",
            # the most in flight can be at the first or the last segment: each frame once
            "evidence_frames": list(dict.fromkeys((f["first_frame"], inf["max_frame"],
                                                   f["last_frame"])))}


def _waiting_for(p: dict[str, Any]) -> str:
    if p["zero_window"]:
        return "the sender waited for the receiver to open its window (zero window)"
    if p["outstanding"] <= 0:
        return "everything was acknowledged: the sender had nothing to send"
    return f"the sender waited with {p['outstanding']:,} bytes unacknowledged"


def direction_json(f: dict[str, Any], start: float = 0.0) -> dict[str, Any]:
    """The direction's JSON; times relative to `start` (the capture's first)."""
    rate, best, worst = _goodput(f)
    for x in (best, worst):
        if x is not None:
            x["start_s"] = round(x.pop("start_ts") - start, 6)
    r = f["rtt"]
    rtt = None
    if r["samples"]:
        rtt = {"samples": r["samples"], "min": round((r["min_s"] or 0) * 1e3, 3),
               "median": _ms(r["median_us"]), "p95": _ms(r["p95_us"])}
    acks, w, inf, fl, idle = (f["acks"], f["window"], f["in_flight"], f["flights"],
                              f["idle_periods"])
    return {
        "acks": {"count": acks["count"], "bytes_acked_median": acks["bytes_acked"]["median"],
                 "bytes_acked_histogram": _top(acks["bytes_acked"]),
                 "segments_per_ack_median": acks["segments_per_ack"]["median"],
                 "causes": dict(acks["causes"])},
        "pattern": pattern(f),
        "segment_size_median": f["segment_size"]["median"],
        "segment_size_histogram": _top(f["segment_size"]),
        "window": {"min": w["min"], "max": w["max"], "scaled": w["scaled"],
                   "scale_lower_bound": None if w["scaled"] else w["scale_lower_bound"],
                   "zero_window_periods": w["zero_window_periods"],
                   "zero_window_total_s": round(w["zero_window_total_s"], 6)},
        "in_flight": {"max": inf["max"], "median": inf["median"],
                      "max_frame": inf["max_frame"],
                      "max_ratio_to_window": round(inf["max_ratio_to_window"], 3)
                      if w["scaled"] else None},
        "flights": {"count": fl["count"], "bytes_median": fl["bytes_median"],
                    "segments_median": fl["segments_median"],
                    "end_reasons": dict(fl["end_reasons"])},
        "rtt_ms": rtt,
        "goodput_bps": rate,
        "best_100ms": best,
        "worst_100ms": worst,
        "idle_periods": {"count": idle["count"], "total_s": round(idle["total_s"], 6),
                         "first": [{"seconds": round(p["seconds"], 6),
                                    "from_frame": p["from_frame"], "to_frame": p["to_frame"],
                                    "waiting_for": _waiting_for(p),
                                    "start_s": round(p["start_ts"] - start, 6)}
                                   for p in idle["first"]]},
        "verdict": verdict(f),
    }


def direction_findings(conn_id: str, name: str, f: dict[str, Any]) -> list[Finding]:
    out: list[Finding] = []
    acks = f["acks"]
    timer, count = acks["causes"]["delayed_timer"], acks["count"]
    if count >= 10 and timer >= 0.1 * count:
        out.append(Finding(
            "warning", "delayed-ack-stalls",
            f"{name}: {timer} of {count} ACKs came from the delayed-ACK timer (>= 40 ms after "
            f"the data): each is a stall of at least 40 ms", conn_id, []))
    span = (f["last_ts"] - f["first_ts"]) if f["first_ts"] is not None else 0.0
    idle = f["idle_periods"]
    if span > 0 and idle["waiting_s"] > 0.2 * span:
        out.append(Finding(
            "warning", "stalls",
            f"{name}: the sender stalled for {idle['waiting_s']:.3f} s of {span:.3f} s (pauses "
            f"over 10 ms with data unacknowledged or the window shut)", conn_id,
            [p["to_frame"] for p in idle["first"][:10]]))
    return out
