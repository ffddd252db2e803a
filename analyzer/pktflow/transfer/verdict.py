"""What limited a direction's transfer, in plain words with the numbers and frames behind it;
the ACK pattern, the idle periods' causes and the direction's findings in words.

Everything here reads a direction's TransferJudgement (the few numbers the core hands over
for these rules: pktflow._core); nothing is measured here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, cast

from pktflow.findings import Finding

if TYPE_CHECKING:  # the binding's value types (pktflow/_core.pyi): checked, not imported
    from pktflow._core import (ByLimit, IdleJudged, LimitFacts, Limits, Run, Stretch,
                               TransferJudgement, Verdict)

MIN_BYTES = 64 * 1024  # below this a direction carries too little to judge
MIN_SEGMENTS = 20


def pattern(f: TransferJudgement) -> str:
    """The ACK pattern in words: the commonest ACK when it is most of them, '1 ACK per 2
    segments, 16,384 B (87% of ACKs)'; otherwise the median one, 'ACKs vary: the median
    covers 3 segments, 12,265 B' (a mode of 11% beside it read as a contradiction)."""
    acks = f["acks"]
    if not acks["count"]:
        return "no ACKs advanced"
    share = acks["bytes_mode_count"] / acks["count"]
    if share > 0.5:
        segs, nbytes = acks["segments_mode"], acks["bytes_mode"]
        return f"1 ACK per {segs} {_segments(segs)}, {nbytes or 0:,} B ({share:.0%} of ACKs)"
    segs, nbytes = acks["segments_median"], acks["bytes_median"]
    return f"ACKs vary: the median covers {segs} {_segments(segs)}, {nbytes or 0:,} B"


def _segments(n: int | None) -> str:
    return "segment" if n == 1 else "segments"


# The limits, in the order the core's chronographs list them (transfer/limits.rs).
LimitName = Literal["receiver_window", "network", "loss", "latency", "sender"]
LIMITS: tuple[LimitName, ...] = ("receiver_window", "network", "loss", "latency", "sender")
# The headline names the limit with the largest share of the transfer's time, direct or pooled
# alike, and never a limit under another's larger share: two within NEAR_TIE of each other are
# a near-tie, said as mixed, naming both. One exception: loss, when at least LOSS_SHARE of the
# segments were lost (sent again, or a hole the capture never saw filled) and recovering plus
# the congestion window's regrowth after the losses (booked as the round trips it waited for:
# `after_loss_s`) outweigh every other limit. A loss cuts the window, so what follows it is
# slower; the sentence says so, with the share of segments lost and each part's share. A queue
# that overflows now and then (a few losses behind a shaper) stays the network's.
NEAR_TIE = 0.05
LOSS_SHARE = 0.01

def _frames(s: Stretch | Run | None) -> str:
    if not s:
        return ""
    return (f"; longest {s['seconds'] * 1e3:,.1f} ms, frames {s['from_frame']}-"
            f"{s['to_frame']}")


def limit_shares(lim: LimitFacts) -> ByLimit[float]:
    """Each limit's share of the transfer time (0.0 each when it took no time)."""
    total = lim["transfer_s"]
    secs = lim["seconds"]
    return cast("ByLimit[float]",
                {k: round(secs[k] / total, 3) if total > 0 else 0.0 for k in LIMITS})


def dominant(f: TransferJudgement, lim: LimitFacts) -> tuple[LimitName, LimitName | None]:
    """The limit to name, and the one in a near-tie with it (None: a clear lead)."""
    seconds = lim["seconds"]
    secs: dict[LimitName, float] = {k: seconds[k] for k in LIMITS}
    ranked = sorted(LIMITS, key=lambda k: -secs[k])
    if _loss_named(f, lim):
        return "loss", None
    top, second = ranked[0], ranked[1]
    total = lim["transfer_s"]
    if total > 0 and secs[second] > 0 and (secs[top] - secs[second]) / total <= NEAR_TIE:
        return top, second
    return top, None


def _loss_named(f: TransferJudgement, lim: LimitFacts) -> bool:
    """Loss named under a larger share: enough segments lost, and recovery and the regrowth
    after it outweigh every other limit (less the regrowth they hold)."""
    if _lost(f, lim) < LOSS_SHARE * max(1, f["segments"]):
        return False
    secs, after = lim["seconds"], lim["after_loss_s"]
    effect = secs["loss"] + after
    # the regrowth is booked under latency or network: set it against them without it
    others = [secs[k] - (after if k in ("latency", "network") else 0.0)
              for k in LIMITS if k != "loss"]
    return effect > 0 and effect >= max(others)


# A receiver that kept its window shut this long (each time, on average: the path's least
# round trips, and at least ZERO_FLOOR_S, as a capture beside the receiver sees round trips
# of microseconds) or for this share of the time its window held the sender, stopped reading;
# briefer zero windows are a small buffer's, which the reader emptied as fast as it could.
ZERO_RTTS = 4
ZERO_FLOOR_S = 0.001
ZERO_SHARE = 0.25
# Linux's receive autotuning takes a receiver that keeps up past 64 KiB within a bulk
# transfer; a window that never passed it was held by a buffer set small (tcp_rmem's
# maximum, SO_RCVBUF, PgBouncer's tcp_socket_buffer). Without this bound a pooler on a
# path of microseconds, whose window need not grow, was taken for one with a small buffer
# beside a client 10 ms away whose window grew to megabytes.
CAPPED_WINDOW = 65_536


def _stopped_reading(f: TransferJudgement, lim: LimitFacts) -> str | None:
    """How the reader was seen to stop (`application`) rather than its buffer fill (`buffer`),
    None when it was not: the window shut for longer than a few round trips each time
    ("shut"), or for a quarter of the time it held the sender ("shut"), or sat under a quarter
    of its largest for a quarter of that time ("low": a reader paced slower than the data,
    whose window seldom reaches zero). A window that never passed CAPPED_WINDOW shuts briefly,
    and runs low, as often as its buffer fills: only long shuts tell its reader stopped."""
    w = f["window"]
    periods, total = w["zero_window_periods"], w["zero_window_total_s"]
    rtt = (f["rtt_min_ms"] or 0.0) / 1e3
    if periods and total / periods > max(ZERO_RTTS * rtt, ZERO_FLOOR_S):
        return "shut"
    if w["max"] is not None and w["max"] < CAPPED_WINDOW:
        return None
    held = lim["seconds"]["receiver_window"]
    if periods and total >= ZERO_SHARE * held:
        return "shut"
    return "low" if lim["low_window_s"] >= ZERO_SHARE * held else None


def _lost(f: TransferJudgement, lim: LimitFacts) -> int:
    """Segments sent again, and holes the capture never saw filled but the ACKs passed."""
    return int(f["retransmitted_segments"]) + int(lim["recovery_by_hole"])


def head_of(lim: LimitFacts | Limits, shares: ByLimit[float], limit: LimitName) -> str:
    """The named limit's share of the transfer, and its longest stretch."""
    return (f"{shares[limit]:.0%} of the transfer's {lim['transfer_s'] * 1e3:,.1f} ms"
            + _frames(lim["longest"][limit]))


def window_held(lim: LimitFacts | Limits, head: str, why: str) -> str:
    """The receiver's window's sentence: how long it held the sender, and whose it was."""
    busy = max(lim["transfer_s"] - lim["sender_idle_s"], 0.0)
    busy_share = lim["seconds"]["receiver_window"] / busy if busy else 0.0
    busy_part = f" ({busy_share:.0%} of the time it had data to send)" if busy else ""
    return f"the receiver's window held the sender {head}{busy_part}; {why}"


def framed(summary: str, shares: ByLimit[float], limit: LimitName,
           mixed: LimitName | None) -> str:
    """A verdict's sentence with its near-tie said first and the other limits' shares last."""
    if mixed is not None:
        summary = (f"mixed: {limit.replace('_', ' ')} {shares[limit]:.0%} and "
                   f"{mixed.replace('_', ' ')} {shares[mixed]:.0%}, within "
                   f"{NEAR_TIE:.0%} of each other; " + summary)
    others = ", ".join(f"{k.replace('_', ' ')} {shares[k]:.0%}" for k in LIMITS
                       if k != limit and shares[k] >= 0.01)
    return summary + (f" (the rest: {others})" if others else "")


def verdict(f: TransferJudgement) -> Verdict:
    data_bytes, segments = f["data_bytes"], f["segments"]
    if data_bytes < MIN_BYTES or segments < MIN_SEGMENTS:
        return {"limit": "none", "shares": None, "summary": f"too little data to judge "
                f"({data_bytes:,} bytes in {segments} segments)", "evidence_frames": []}
    lim, w = f["limits"], f["window"]
    assert lim is not None, "the core hands over a judged transfer's limits (Judge.min_bytes)"
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
    limit, mixed = dominant(f, lim)
    longest, first = lim["longest"][limit], lim["first"][limit]
    head = head_of(lim, shares, limit)
    out: Verdict = {"limit": limit, "shares": shares}  # type: ignore[typeddict-item]
    if mixed is not None:
        out["mixed_with"] = mixed
    if limit == "receiver_window":
        zero_periods, zero_total = w["zero_window_periods"], w["zero_window_total_s"]
        stopped = _stopped_reading(f, lim)
        if stopped is not None:
            out["receiver"] = "application"
            held_ms, low_ms = lim["seconds"]["receiver_window"] * 1e3, lim["low_window_s"] * 1e3
            low = (f"stayed under a quarter of its largest ({w['max'] or 0:,} bytes) for "
                   f"{low_ms:,.1f} ms of the {held_ms:,.1f} ms it held the sender")
            if stopped == "low":
                seen = f"the window {low}: the receiving application read slower than the data came"
            else:
                # zero windows that are a small part of a long hold: the low window says the rest
                rest = f", and {low}" if low_ms > 2 * zero_total * 1e3 else ""
                seen = (f"the window fell to zero {zero_periods} time(s), "
                        f"{zero_total * 1e3:,.1f} ms in all{rest}: the receiving application "
                        f"stopped reading")
            why = (f"{seen} (psql printing, a slow client, a pooler waiting on its own client); "
                   f"a larger buffer would only hold more unread")
        else:
            out["receiver"] = "buffer"
            shut = (f", shut only briefly ({zero_periods} time(s), {zero_total * 1e3:,.1f} ms "
                    f"in all)" if zero_periods else " but never shut")
            most = (f"at most {w['max'] or 0:,} bytes" if w["scaled"] else
                    f"at least {w['max'] or 0:,} bytes at its largest: its scale is not in the "
                    f"capture")
            why = (f"the window filled{shut} ({most}): the receiver kept reading, its buffer "
                   f"held less than the path can carry; a larger receive buffer (tcp_rmem, a "
                   f"pooler's tcp_socket_buffer) lifts it")
        summary = window_held(lim, head, why)
    elif limit == "loss":
        lost = _lost(f, lim)
        after = lim["after_loss_s"] / lim["transfer_s"]
        summary = (f"{lost:,} of {segments:,} segments were lost or sent again "
                   f"({lost / segments:.1%}); {lim['recoveries']} recoveries (from "
                   f"retransmissions, duplicate ACKs or SACKs, data beyond a hole) took {head}")
        if after >= 0.01:
            summary += (f", and the congestion window each loss cut held the sender for "
                        f"another {after:.0%} of the time as it grew back (booked as round "
                        f"trips, latency and network)")
    elif limit == "network":
        summary = (f"data was waiting and the window open, yet it left at the path's pace "
                   f"{head}: a bottleneck rate (a link, a shaper, pacing) set the pace, not "
                   f"the sender or the receiver")
    elif limit == "latency":
        rtt = f["rtt_median_ms"]
        summary = (f"the sender waited for ACKs with data waiting and the window open {head}: "
                   f"round trips (RTT median {rtt} ms) times a congestion window still small "
                   f"(slow start, or regrowing) set the pace")
    else:
        summary = (f"the sender had nothing more to send {head}: its application set the pace "
                   f"(for a server: producing the rows; for a pooler: what its other leg "
                   f"brought); the window and the network kept up. The ACK pattern "
                   f"({pattern(f)}) is delayed-ACK pacing, not a round-trip limit")
    out["summary"] = framed(summary, shares, limit, mixed)
    out["evidence_frames"] = list(dict.fromkeys(
        x for s in (first, longest) if s for x in (s["from_frame"], s["to_frame"])))
    return out


# the capture point's position -> the direction captured at its receiver
AT_RECEIVER = {"client": "server_to_client", "server": "client_to_server"}
AT_RECEIVER_NOTE = (". Captured beside the receiver: the sender's waits for its window and ACKs "
                    "are seen a round trip short, bytes in flight are what the receiver had not "
                    "yet acknowledged")


def note_capture_point(verdicts: dict[str, Verdict], position: str) -> None:
    """A direction captured beside its receiver is seen from the far end of the path: its data
    arrive a one-way delay after they left, bytes in flight are only what the receiver had not
    yet acknowledged, and the sender's waits for the window or ACKs look shorter than they
    were. Said in the verdict, where the shares are read."""
    name = AT_RECEIVER.get(position)
    if name is None:
        return
    v = verdicts[name]
    if v["limit"] != "none":
        v["summary"] += AT_RECEIVER_NOTE


def waiting_for(p: IdleJudged) -> str:
    """What the sender waited for in an idle period."""
    if p["zero_window"]:
        return "the sender waited for the receiver to open its window (zero window)"
    if p["outstanding"] <= 0:
        return "everything was acknowledged: the sender had nothing to send"
    return f"the sender waited with {p['outstanding']:,} bytes unacknowledged"


def direction_findings(conn_id: str, name: str, f: TransferJudgement) -> list[Finding]:
    out: list[Finding] = []
    acks = f["acks"]
    timer, count = acks["delayed_timer"], acks["count"]
    if count >= 10 and timer >= 0.1 * count:
        out.append(Finding(
            "warning", "delayed-ack-stalls",
            f"{name}: {timer} of {count} ACKs came from the delayed-ACK timer (>= 40 ms after "
            f"the data): each is a stall of at least 40 ms", conn_id, []))
    span = f["span_s"]
    idle = f["idle"]
    if span > 0 and idle["waiting_s"] > 0.2 * span:
        out.append(Finding(
            "warning", "stalls",
            f"{name}: the sender stalled for {idle['waiting_s']:.3f} s of {span:.3f} s (pauses "
            f"over 10 ms with data unacknowledged or the window shut)", conn_id,
            [p["to_frame"] for p in idle["periods"][:10]]))
    return out
