"""What a relay did, in words: whether the server waited on it, what limited it as a component,
what it cost, and the setting the evidence points at. The core finds relays, pairs their
queries and measures both legs (core/src/relay/); Python reads the few numbers its rules need
(a RelayJudgement, pktflow/_core.pyi) and hands back its words (RelayWords).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from pktflow.findings import Finding
from pktflow.transfer.advice import SENDER
from pktflow.transfer.saving import MODEL
from pktflow.transfer.verdict import (CAPPED_WINDOW, LIMITS, LimitName, framed, head_of,
                                      window_held)

if TYPE_CHECKING:
    from pktflow._core import (BackLeg, ByLimit, Component, Coupling, Forwarding, FrontLeg,
                               LegVerdict, RelayJudgement, RelayVerdict, RelayWords, Verdict)


def coupling_summary(c: Coupling) -> str:
    """Did the server wait for the relay? The relay's receive window on the back leg
    (advertised to the server) shrinking to zero while it forwards to the client is the
    sign."""
    zero_events = c["back_window_zero_events"]
    if zero_events:
        return (f"the relay's receive window on the back leg reached zero {zero_events} "
                f"time(s), {c['back_window_zero_s'] * 1000:,.2f} ms in all: the server waited "
                f"for the relay to drain its buffer to the client")
    return ("the back leg's window never reached zero: the server did not wait for the relay's "
            "drain to the client")


# A relay judged as a component, from what limited each leg's server -> client direction (the
# bulk legs: those that carried the most). The front leg is read first: a client that reads
# slowly or a lossy, slow or distant client path holds the relay's output and, through its full
# buffers, the back leg too (the back leg then looks window-limited by the relay, though the
# relay is not the cause). Only when the relay had nothing to send to the client does the back
# leg say why: the relay not reading (its window held the server: the pooler is the limit),
# the server's path, or the server producing the rows.
CLIENT_PATH = ("network", "loss", "latency")
SETTINGS = {
    "client": "the client reads more slowly than the relay forwards: look at the client (its "
              "receive buffer, or an application that stops reading), not at pooler settings",
    "client_and_pooler": "the client reads more slowly than the relay forwards: look at the "
                         "client first (its receive buffer, or an application that stops "
                         "reading)",
    "network": "the path between the client and the relay (its rate, loss or round trips) set "
               "the pace, not the pooler",
    "server": f"{SENDER['server']} (the relay kept up with it)",
    "server_network": "the path between the relay and the server (its rate, loss or round "
                      "trips) set the pace",
    "pooler": "the pooler's own pace: its read and write buffers (PgBouncer pkt_buf, "
              "tcp_socket_buffer) or its CPU",
}
# what each limit means on a leg's server -> client direction
FRONT_WORDS = {"receiver_window": "the client's receive window", "network": "the network's rate",
               "loss": "loss recovery", "latency": "round trips",
               "sender": "the relay having nothing more to send", "none": "nothing"}
BACK_WORDS = {"receiver_window": "the relay's receive window", "network": "the network's rate",
              "loss": "loss recovery", "latency": "round trips",
              "sender": "the server's own pace (producing the rows)", "none": "nothing"}


# A relay that held no more than a few segments (the median over time) and sent each segment
# on within PROMPT_MS of its twin from the server had nothing more to send its client: its
# front legs' pace is the back leg's, whatever their own packets suggest (a shaped server path
# reaches the client as trains with gaps between them).
PROMPT_MS = 0.1


def forwarded_at_once(fw: Forwarding) -> bool:
    held, few, delay = fw["held_bytes"]["median"], fw["few_segments_bytes"], fw["delay_ms"][
        "median"]
    return (held is not None and few is not None and delay is not None and held <= few
            and delay <= PROMPT_MS)


def component(front: str, back: str, at_once: bool = False) -> Component:
    """The relay's limit from its legs': client, network, pooler, server_network, server or
    none. A relay that forwarded at once follows its back leg unless the client's window
    closed."""
    if front == "receiver_window":
        return "client"
    if front in CLIENT_PATH and not at_once:
        return "network"
    if at_once and front in CLIENT_PATH:
        front = "sender"
    if front == "sender" or front == "none" and back != "none":
        if back == "receiver_window":
            return "pooler"
        if back in CLIENT_PATH:
            return "server_network"
        if back == "sender":
            return "server"
    return "none"


def verdict_json(j: RelayJudgement, coupling: str) -> RelayVerdict:
    """One paragraph: how the relay re-splits the data, whether the server waited on it, what
    limited the relay as a component, what it cost, and the setting the evidence points at."""
    front, back = j["legs"]["front"], j["legs"]["back"]
    fw = j["forwarding"]
    at_once = forwarded_at_once(fw)
    limit = component(front, back, at_once)
    bulk = j["bulk"]
    parts: list[str] = []
    setting: str | None = None
    frames: list[int] = []
    server_unit, relay_unit = j["server_write"], j["forward_write"]
    if bulk["count"]:
        med_in, med_out = bulk["segment_median_in"], bulk["segment_median_out"]
        ratio = bulk["segments_out_per_in"]
        if med_in is not None and med_out is not None:  # unknown when a leg's response is lost
            parts.append(f"the server sent bulk responses in {med_in:,.0f}-byte segments "
                         f"(median) and the relay forwarded them in {med_out:,.0f}-byte "
                         f"segments" + (f", {ratio:.2f} out per segment in" if ratio else ""))
        if server_unit and relay_unit and relay_unit < server_unit:
            parts.append(f"the server wrote {server_unit:,} bytes at a time and the relay "
                         f"wrote them on in {relay_unit:,}-byte writes (PSH-delimited; larger "
                         f"ones are queued writes taken as one): it reads and forwards about "
                         f"that much at a time")
            if limit != "pooler" or capped_buffer_s(j) is not None:
                pass  # a forwarding unit named only where it is what limits
            elif 4000 <= relay_unit <= 4096 + 128:
                setting = ("consistent with PgBouncer's pkt_buf (default 4096), which splits each "
                           "8 KiB server write into about 4 KiB + 4 KiB + a small tail; pkt_buf >= "
                           "8256 (8,192 + 64) forwards it whole")
            elif 7000 <= relay_unit <= 8192:
                setting = ("consistent with Pgpool-II, which writes to the client through an "
                           "8,192-byte buffer and flushes before a message that would not fit "
                           "(a fixed buffer in its code, not a configuration setting)")
        frames += bulk["frames"]
    cp = j["coupling"]
    if cp["back_window_zero_events"]:
        parts.append(coupling)
        frames += cp["evidence_frames"][:3]
    waits = j["waits"]
    worst_wait = waits["worst"]
    if waits["count"] >= 10 and j["front_connections"] > j["back_connections"] and \
            worst_wait is not None and waits["median"] is not None and waits["p90"] is not None:
        median, p90 = waits["median"], waits["p90"]
        if p90 >= 1.0 and p90 >= 10 * max(median, 0.01):
            parts.append(
                f"clients waited for a server connection: {j['front_connections']} client "
                f"connections shared {j['back_connections']} server connection(s), and one "
                f"request in ten waited {p90:,.2f} ms or more before the relay could forward it "
                f"(median {median:,.3f} ms, worst {worst_wait['request_delay_ms']:,.2f} ms)")
            frames += [x for x in (worst_wait["front_sent"], worst_wait["back_sent"]) if x]
            setting = setting or ("the pool is smaller than the number of clients that are "
                                  "busy at once: PgBouncer's default_pool_size (or Pgpool-II's "
                                  "num_init_children) sets how many server connections serve "
                                  "them")
    if limit == "pooler":
        parts.append(f"the relay set the pace: on the front leg {FRONT_WORDS[front]} limited "
                     f"it, while on the back leg {BACK_WORDS[back]} held the server: it read "
                     f"no faster than it wrote")
    elif limit in ("client", "network"):
        parts.append(f"the client leg set the pace ({FRONT_WORDS[front]} limited it), and the "
                     f"relay passed that back to the server")
    elif limit != "none":
        parts.append(f"the relay kept up: it waited on the server leg, limited by "
                     f"{BACK_WORDS[back]}")
        if at_once and front in CLIENT_PATH:
            parts.append(f"it sent each segment on a median {_us(fw['delay_ms']['median'])} "
                         f"after its twin from the server and held "
                         f"{fw['held_bytes']['median'] or 0:,.0f} bytes or fewer half the "
                         f"time, so the client leg's gaps ({FRONT_WORDS[front]} on its own "
                         f"packets) were the server leg's pace passed on")
    costs = j["costs"]
    worst = costs["worst"]
    total = costs["total_ms"]
    own = costs["own_ms"] if limit in ("client", "network") else total
    count = costs["count"]
    n = f"{count:,} matched quer{'y' if count == 1 else 'ies'}"
    if count and worst is not None:
        if limit in ("client", "network"):
            parts.append(f"of the {total:,.2f} ms the client waited beyond the server leg over "
                         f"{n}, the relay itself added {own:,.2f} ms (forwarding each request "
                         f"and its first byte) and the client leg's slower drain "
                         f"{total - own:,.2f} ms")
        else:
            through, back_leg = worst["through_relay_ms"], worst["back_leg_ms"]
            parts.append(f"the relay added {total:,.2f} ms over {n} (most: "
                         f"{worst['relay_cost_ms']:,.2f} ms, {through or 0.0:,.2f} ms "
                         f"through the relay vs {back_leg or 0.0:,.2f} ms on the back leg)")
    capped = capped_buffer_s(j) if limit == "pooler" else None
    if capped is not None:
        setting = own_buffer_setting(j)
    if setting is None and limit != "none":
        setting = SETTINGS[limit]
    pooler_too = small_pooler_buffer(j) if limit == "client" else None
    if pooler_too is not None:
        setting = SETTINGS["client_and_pooler"] + "; " + pooler_too
    summary = "; ".join(parts) + "." if parts else "no bulk response went through the relay."
    out: RelayVerdict = {"summary": summary[0].upper() + summary[1:], "setting": setting,
                         "limit": limit, "legs": {"front": front, "back": back},
                         "relay_ms": round(own, 3) if count else None,
                         "front_leg_ms": round(total - own, 3) if count else None,
                         "evidence_frames": sorted(set(frames))[:12]}
    if capped is not None:
        out["saving_s"] = round(capped, 6)
        out["without"] = (f"{BIGGER_BUFFER} that grows with its path "
                          f"(PgBouncer's tcp_socket_buffer unset or larger, net.ipv4.tcp_rmem): "
                          f"the {capped * 1e3:,.1f} ms its window, never past "
                          f"{CAPPED_WINDOW // 1024} KiB, held the server while the client leg "
                          f"waited on the relay")
    elif count:
        # going direct saves the relay's own time only: the client's slower drain (its window,
        # its path) would hold the server directly instead. Paired lab recordings agree: a slow
        # reader behind the relay, 4.3 s of client-leg drain, measured 9-60 ms slower pooled.
        out["saving_s"] = round(own / 1e3, 6)
        out["without"] = (f"going direct (no relay): the {own:,.2f} ms the relay itself added "
                          f"over {n}; the client leg's own pace stays")
    else:
        out["without"] = "no query matched leg to leg: no saving"
    return out


# what a relay's verdict says its saving is without, when its own small buffer set the pace
BIGGER_BUFFER = "a receive buffer at the pooler"


def capped_buffer_s(j: RelayJudgement) -> float | None:
    """What a pooler's own small receive buffer cost, when the relay set the pace with it: the
    seconds its window held a server leg whose window never passed CAPPED_WINDOW (a buffer set
    small; autotuning takes one that keeps up past it), at most the seconds a client leg waited
    on the relay (what the client can gain). None when no such window held the server."""
    held = [b["limits"]["seconds"]["receiver_window"] for b in capped_backs(j)]
    if not held:
        return None
    waited = max((f["limits"]["seconds"]["sender"] for f in j["fronts"]), default=0.0)
    return min(max(held), waited)


def capped_backs(j: RelayJudgement) -> list[BackLeg]:
    """The back legs the pooler's window held whose window never passed CAPPED_WINDOW."""
    return [b for b in j["backs"] if b["verdict"]["limit"] == "receiver_window"
            and b["window_ceiling"] is not None and b["window_ceiling"] < CAPPED_WINDOW]


def own_buffer_setting(j: RelayJudgement) -> str:
    """The setting where the pooler's own small receive buffer set the pace: the back legs it
    held, their window's ceiling, what to raise."""
    small = capped_backs(j)
    own = max(b["window_ceiling"] or 0 for b in small)
    legs = ", ".join(b["connection"] for b in small[:3])
    return (f"the pooler's own receive buffer ({legs}: its window at most {own:,} bytes, never "
            f"past {CAPPED_WINDOW // 1024} KiB): raise it (PgBouncer's tcp_socket_buffer, or "
            f"net.ipv4.tcp_rmem on the pooler's host); its read and write buffers (pkt_buf) "
            f"wait on it")


def _us(ms: float | None) -> str:
    return f"{(ms or 0.0) * 1000:,.0f} us"


def front_verdicts(j: RelayJudgement) -> list[LegVerdict]:
    """The front legs' verdicts judged again as the relay's, when it forwarded at once: the
    time their own packets give the network and round trips was the back leg's pace, which
    the relay passed on; the relay had nothing more to send."""
    fw = j["forwarding"]
    if not forwarded_at_once(fw):
        return []
    out: list[LegVerdict] = []
    for f in j["fronts"]:
        v = _inherited(f, fw)
        if v is not None:
            out.append({"connection": f["connection"], "verdict": v})
    return out


def _inherited(f: FrontLeg, fw: Forwarding) -> Verdict | None:
    lim = f["limits"]
    total, secs = lim["transfer_s"], lim["seconds"]
    moved = secs["network"] + secs["latency"]
    if total <= 0 or moved <= 0:
        return None
    seconds: dict[LimitName, float] = {k: secs[k] for k in LIMITS}
    seconds |= {"network": 0.0, "latency": 0.0, "sender": secs["sender"] + moved}
    shares: dict[LimitName, float] = {k: round(seconds[k] / total, 3) for k in LIMITS}
    limit = max(LIMITS, key=lambda k: shares[k])
    longest = lim["longest"]
    runs = [r for r in (longest["network"], longest["latency"]) if r]
    frames = sorted({x for r in runs for x in (r["from_frame"], r["to_frame"])})[:4]
    summary = (f"the relay sent each segment on a median {_us(fw['delay_ms']['median'])} after "
               f"its twin from the server and held {fw['held_bytes']['median'] or 0:,.0f} "
               f"bytes or fewer half the time: what this leg's own packets give the network "
               f"({secs['network'] / total:.0%}) and round trips ({secs['latency'] / total:.0%}) "
               f"was the server leg's pace passed on, and the relay had nothing more to send "
               f"{shares['sender']:.0%} of the transfer's {total * 1e3:,.1f} ms")
    if limit != "sender":
        summary += f"; {limit.replace('_', ' ')} {shares[limit]:.0%} outweighs it"
    out: Verdict = {"limit": limit, "shares": cast("ByLimit[float]", shares),
                    "summary": summary, "evidence_frames": frames}
    if limit == "sender":
        out |= {"saving_s": 0.0, "saving_model": MODEL,
                "without": "nothing on this leg: the relay passed the server leg's pace on "
                           "(the relay's verdict says what would save time)"}
    else:
        out |= {"without": f"the leg's own figures mix the server leg's pace with "
                           f"{limit.replace('_', ' ')}: no saving modelled", "saving_model": MODEL}
    return out


# A back leg's window ceiling under this share of the client's, and under CAPPED_WINDOW, is
# the pooler's own small receive buffer, whoever else was slow: that is what to raise.
OWN_BUFFER_SHARE = 0.5


def client_window_ceiling(j: RelayJudgement) -> int | None:
    """The largest window the client advertised on a front leg its window held (bytes, a
    lower bound where the scale is unknown); None unless the client's window held the
    relay's front."""
    if j["legs"]["front"] != "receiver_window":
        return None
    return max((f["window_ceiling"] for f in j["fronts"] if f["limit"] == "receiver_window"
                and f["window_ceiling"] is not None), default=None)


def own_small_buffer(b: BackLeg, client_ceiling: int | None) -> bool:
    """The back leg's window was the pooler's own small receive buffer: its ceiling under
    OWN_BUFFER_SHARE of the client's, and under CAPPED_WINDOW."""
    own = b["window_ceiling"]
    return own is not None and client_ceiling is not None and \
        own < min(OWN_BUFFER_SHARE * client_ceiling, CAPPED_WINDOW)


def back_verdicts(j: RelayJudgement) -> list[LegVerdict]:
    """The back legs' window verdicts judged again as the relay's: while the client's window
    held the front leg, the pooler's window on the back leg shut because the pooler waited on
    its own client (the receiver is its application, not its buffer), unless the pooler's
    window was much smaller than the client's (its own receive buffer, then)."""
    if j["legs"]["front"] != "receiver_window":
        return []
    client = client_window_ceiling(j)
    fronts = [f["connection"] for f in j["fronts"] if f["limit"] == "receiver_window"]
    out: list[LegVerdict] = []
    for b in j["backs"]:
        v, own = b["verdict"], b["window_ceiling"]
        if v.get("receiver") != "buffer" or own_small_buffer(b, client):
            continue
        who = ", ".join(fronts[:3]) or "its front legs"
        why = (f"the pooler waited on its own client: the client's window held the front leg "
               f"({who}), and the pooler's window on this leg "
               + (f"(at least {own:,} bytes at its largest) " if own is not None else "")
               + "filled while it could not pass on what it held; a larger buffer at the "
                 "pooler would only hold more: look at the client")
        shares, lim = v["shares"], b["limits"]
        if shares is None:
            continue
        summary = framed(window_held(lim, head_of(lim, shares, "receiver_window"), why), shares,
                         "receiver_window", v.get("mixed_with"))
        out.append({"connection": b["connection"],
                    "verdict": v | {"receiver": "application", "summary": summary,
                                    "without": "the pooler's client keeping up: its window "
                                               "held the client leg, and the pooler with it"}})
    return out


def small_pooler_buffer(j: RelayJudgement) -> str | None:
    """While the client set the pace, the back legs whose window was the pooler's own small
    buffer, said as the setting's second half (the back leg's own verdict names it too)."""
    client = client_window_ceiling(j)
    small = [b for b in j["backs"] if b["verdict"].get("receiver") == "buffer"
             and own_small_buffer(b, client)]
    if not small or client is None:
        return None
    own = max(b["window_ceiling"] or 0 for b in small)
    legs = ", ".join(b["connection"] for b in small[:3])
    return (f"the pooler's own receive buffer held the server leg too ({legs}: its window at "
            f"most {own:,} bytes, under {OWN_BUFFER_SHARE:.0%} of the client's {client:,} and "
            f"never past {CAPPED_WINDOW // 1024} KiB): "
            f"raising it (PgBouncer's tcp_socket_buffer, or net.ipv4.tcp_rmem on the pooler's "
            f"host) lets the server finish sooner, while the client's pace stays")


def relay_findings(j: RelayJudgement) -> list[Finding]:
    unmatched = j["unmatched_front"]
    first = unmatched["first"]
    if not unmatched["count"] or first is None:
        return []
    n = unmatched["count"]
    return [Finding(
        "info", "relay-unmatched",
        f"{n} front-leg quer{'y' if n == 1 else 'ies'} through {j['host']}:{j['front_port']} "
        f"had no back-leg execution in the capture (answered by the pooler itself, or its back "
        f"leg was not captured); first: {first['connection']} query {first['query_index']}",
        first["connection"], [first["sent_frame"]])]


class RelayJudge:
    """Words each relay the core found, keeping their findings for the capture's list."""

    def __init__(self) -> None:
        self.findings: list[Finding] = []
        # legs' verdicts judged again as the relay's, kept for a followed stream: its legs
        # were written before their relay was found
        self.judged_again: list[LegVerdict] = []

    def __call__(self, j: RelayJudgement) -> RelayWords:
        coupling = coupling_summary(j["coupling"])
        found = relay_findings(j)
        self.findings += found
        fronts, backs = front_verdicts(j), back_verdicts(j)
        self.judged_again += fronts + backs
        return {"coupling": coupling, "verdict": verdict_json(j, coupling),
                "findings": [f.to_json() for f in found], "front_verdicts": fronts,
                "back_verdicts": backs}
