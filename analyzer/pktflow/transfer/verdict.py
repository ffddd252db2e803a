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


# The limits, in the order the core's chronographs list them (transfer/limits.rs).
LIMITS = ("receiver_window", "network", "loss", "latency", "sender")
# The rule naming the dominant limit mirrors the kernel's (pktflow.lab.kernel.dominant_limit),
# so a verdict can be checked against the lab's ground truth: the receiver's window when it
# held the sender at least half of the time the sender had data to send ("busy": the transfer
# less the time the sender had nothing in flight and nothing waiting); else loss when at least
# 1% of the segments were sent again or filled a hole the capture never saw (each loss cuts
# the congestion window: at that rate recoveries and the regrowth after them set the pace) and
# recovery took a tenth of the busy time or more (two stray retransmissions in a fast
# transfer cost nothing); else the sender when it had nothing to send longer than data waited
# (network and latency together: the kernel's "network", data waiting unsent behind the
# congestion window or a rate limit), otherwise the larger of network and latency.
HALF = 0.5
LOSS_SHARE = 0.01
LOSS_TIME = 0.1


def _frames(s: dict[str, Any] | None) -> str:
    if not s:
        return ""
    return (f"; longest {s['seconds'] * 1e3:,.1f} ms, frames {s['from_frame']}-"
            f"{s['to_frame']}")


def limit_shares(lim: dict[str, Any]) -> dict[str, float]:
    """Each limit's share of the transfer time (0.0 each when it took no time)."""
    total = lim["transfer_s"]
    secs = lim["seconds"]
    return {k: round(secs[k] / total, 3) if total > 0 else 0.0 for k in LIMITS}


def dominant(f: dict[str, Any]) -> tuple[str, float]:
    """The dominant limit by the rule above, and the busy seconds it was judged against."""
    lim = f["limits"]
    secs = lim["seconds"]
    busy = max(lim["transfer_s"] - lim["sender_idle_s"], 0.0)
    if busy > 0 and secs["receiver_window"] >= HALF * busy:
        return "receiver_window", busy
    if (_lost(f) >= LOSS_SHARE * max(1, f["segments"]) and busy > 0
            and secs["loss"] >= LOSS_TIME * busy):
        return "loss", busy
    if secs["sender"] >= secs["network"] + secs["latency"]:
        return "sender", busy
    return ("network" if secs["network"] >= secs["latency"] else "latency"), busy


def _lost(f: dict[str, Any]) -> int:
    """Segments sent again, and holes the capture never saw filled but the ACKs passed."""
    return int(f["retransmitted_segments"]) + int(f["limits"]["recovery_by_hole"])


def verdict(f: dict[str, Any]) -> dict[str, Any]:
    data_bytes, segments = f["data_bytes"], f["segments"]
    if data_bytes < MIN_BYTES or segments < MIN_SEGMENTS:
        return {"limit": "none", "shares": None, "summary": f"too little data to judge "
                f"({data_bytes:,} bytes in {segments} segments)", "evidence_frames": []}
    lim, w = f["limits"], f["window"]
    if lim["transfer_s"] <= 0:
        # Many small responses (a pooler's server connection under a storm): each left in one
        # instant, so there is no transfer time to share out; the waits between them are the
        # conversation's round trips (connections[].round_trips), not a limit of this sender.
        turns = lim["turns"]
        how = f"{turns + 1:,} sends a turn apart" if turns else "one instant"
        return {"limit": "none", "shares": None, "summary": f"no bulk transfer to judge: "
                f"{data_bytes:,} bytes in {segments:,} segments, each send leaving at once "
                f"({how}); the time between them is the conversation's round trips",
                "evidence_frames": []}
    shares = limit_shares(lim)
    limit, busy = dominant(f)
    total_ms = lim["transfer_s"] * 1e3
    longest, first = lim["longest"][limit], lim["first"][limit]
    share = shares[limit]
    head = (f"{share:.0%} of the transfer's {total_ms:,.1f} ms" + _frames(longest))
    out: dict[str, Any] = {"limit": limit, "shares": shares}
    if limit == "receiver_window":
        zero_periods, zero_total = w["zero_window_periods"], w["zero_window_total_s"]
        busy_share = lim["seconds"]["receiver_window"] / busy
        if zero_periods:
            out["receiver"] = "application"
            why = (f"the window fell to zero {zero_periods} time(s), {zero_total * 1e3:,.1f} ms "
                   f"in all: the receiving application stopped reading (psql printing, a "
                   f"slow client, a pooler waiting on its own client)")
        else:
            out["receiver"] = "buffer"
            why = (f"the window filled but never shut (at most {w['max'] or 0:,} bytes): the "
                   f"receiver kept reading, its buffer held less than the path can carry; a "
                   f"larger receive buffer (tcp_rmem, a pooler's tcp_socket_buffer) lifts it")
        summary = (f"the receiver's window held the sender {head} ({busy_share:.0%} of the "
                   f"time it had data to send); {why}")
    elif limit == "loss":
        lost = _lost(f)
        summary = (f"{lost:,} of {segments:,} segments were lost or sent again "
                   f"({lost / segments:.1%}); {lim['recoveries']} recoveries (from "
                   f"retransmissions, duplicate ACKs or SACKs, data beyond a hole) and the "
                   f"congestion window's regrowth after them took {head}")
    elif limit == "network":
        summary = (f"data was waiting and the window open, yet it left at the path's pace "
                   f"{head}: a bottleneck rate (a link, a shaper, pacing) set the pace, not "
                   f"the sender or the receiver")
    elif limit == "latency":
        rtt = _ms(f["rtt"]["median_us"])
        summary = (f"the sender waited for ACKs with data waiting and the window open {head}: "
                   f"round trips (RTT median {rtt} ms) times a congestion window still small "
                   f"(slow start, or regrowing) set the pace")
    else:
        summary = (f"the sender had nothing more to send {head}: its application set the pace "
                   f"(for a server: producing the rows; for a pooler: what its other leg "
                   f"brought); the window and the network kept up. The ACK pattern "
                   f"({pattern(f)}) is delayed-ACK pacing, not a round-trip limit")
    others = ", ".join(f"{k.replace('_', ' ')} {shares[k]:.0%}" for k in LIMITS
                       if k != limit and shares[k] >= 0.01)
    if others:
        summary += f" (the rest: {others})"
    out["summary"] = summary
    out["evidence_frames"] = list(dict.fromkeys(
        x for s in (first, longest) if s for x in (s["from_frame"], s["to_frame"])))
    return out


# the capture point's position -> the direction captured at its receiver
AT_RECEIVER = {"client": "server_to_client", "server": "client_to_server"}


def note_capture_point(conn: dict[str, Any]) -> None:
    """A direction captured beside its receiver is seen from the far end of the path: its data
    arrive a one-way delay after they left, bytes in flight are only what the receiver had not
    yet acknowledged, and the sender's waits for the window or ACKs look shorter than they
    were. Said in the verdict, where the shares are read."""
    name = AT_RECEIVER.get(conn["capture_point"]["position"])
    if name is None:
        return
    v = conn["directions"][name].get("verdict") or {}
    if v.get("limit", "none") != "none":
        v["summary"] += (". Captured beside the receiver: the sender's waits for its window "
                         "and ACKs are seen a round trip short, bytes in flight are what the "
                         "receiver had not yet acknowledged")


def limits_json(lim: dict[str, Any]) -> dict[str, Any]:
    """The chronographs as the report keeps them: seconds per limit, frames of the longest."""
    return {"transfer_s": round(lim["transfer_s"], 6),
            "seconds": {k: round(lim["seconds"][k], 6) for k in LIMITS},
            "sender_idle_s": round(lim["sender_idle_s"], 6),
            "ack_tail_s": round(lim["ack_tail_s"], 6),
            "turns": lim["turns"], "turns_s": round(lim["turns_s"], 6),
            "recoveries": lim["recoveries"],
            "longest": {k: None if s is None else {"from_frame": s["from_frame"],
                                                   "to_frame": s["to_frame"],
                                                   "seconds": round(s["seconds"], 6)}
                        for k, s in lim["longest"].items()}}


def writes_json(w: dict[str, Any]) -> dict[str, Any]:
    """The sender's writes (PSH-delimited), sizes weighted by bytes."""
    return {"count": w["count"], "size_p10_by_bytes": w["p10_by_bytes"],
            "size_median_by_bytes": w["median_by_bytes"],
            "size_p90_by_bytes": w["p90_by_bytes"],
            "sizes_by_bytes": {str(v): c for v, c in w["top_by_bytes"]},
            "unended_bytes": w["unended_bytes"]}


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
        "writes": writes_json(f["writes"]),
        "limits": limits_json(f["limits"]),
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
