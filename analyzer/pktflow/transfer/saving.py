"""How much a direction's transfer would save without the limit its verdict names: a what-if
over the capture's own figures (the seconds the core booked to each limit, transfer/limits.rs),
never a second measurement.

The model ("remove the booked time"): every moment of the transfer belongs to one limit; take
away the limit named, and the moments it held go with it, while the rest of the transfer keeps
the pace it had where that limit did not hold it. Per limit, "without" means:
- receiver_window: the receiver keeps up (a larger buffer, a reader that does not stop): the
  time the window held the sender goes;
- latency: a path whose round trip is near zero (the client next to the server): the waits for
  ACKs go, and so do the waits for a window that reopened a round trip later (a small buffer's
  window is a round trip's worth of data; a stopped reader's is not, and stays);
- loss: no recoveries and no window cut: the recoveries' time and the regrowth after them go;
- network: no bottleneck slower than the sender (the shaper, the slow link removed): the time
  data waited at the path's pace goes;
- sender: nothing: the sender is the pace, and the sentence says its production rate.

Assumptions, and where it errs: the limit removed does not hand the transfer to another one it
hid (a pooled client leg freed of its window still runs at the pooler's pace; a network limit
removed leaves the sender's own pace, which a shaped capture may book partly as the sender's),
and the party it held did not need the held moments for its own work: a server held by a
window goes on producing rows into its socket, unseen until the window opens, so where that
work is the pace (processes sharing a busy machine's cores) the saving comes out too large.
Below MIN_TRANSFER_S there is too little time to share out, and no saving is given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from pktflow._core import LimitFacts, TransferJudgement, Verdict

MIN_TRANSFER_S = 0.002  # shorter: a few packets' time, too little to share out between limits
MODEL = "remove-booked-time"

WITHOUT = {
    "receiver_window": "the receiver keeping up",
    "latency": "a round trip near zero (the client next to the server)",
    "loss": "no loss recoveries and no window cut",
    "network": "no bottleneck slower than the sender",
}
# what the answer's sentence calls each limit removed ("without the client's small buffer")
WITHOUT_WORDS = {
    "receiver_window": "the receiver's small buffer",
    "latency": "the round trips",
    "loss": "the losses",
    "network": "the bottleneck",
}


class Saving(NamedTuple):
    saving_s: float | None
    without: str
    model: str


def saving(f: TransferJudgement, v: Verdict) -> Saving:
    """The saving of the limit `v` names, for the transfer `f` (its verdict)."""
    limit = v["limit"]
    lim = f["limits"]
    if limit == "none" or lim is None:
        return Saving(None, "no limit named: " + v["summary"], MODEL)
    total = lim["transfer_s"]
    if total < MIN_TRANSFER_S:
        return Saving(None, f"too short a transfer to model ({total * 1e3:.2f} ms)", MODEL)
    if limit == "sender":
        rate = f["data_bytes"] * 8 / total
        return Saving(0.0, f"nothing: the sender was the pace, producing {_rate(rate)}", MODEL)
    return Saving(removed_s(lim, limit, v.get("receiver")), WITHOUT[limit], MODEL)


def removed_s(lim: LimitFacts | dict[str, Any], limits: str | tuple[str, ...],
              receiver: str | None) -> float:
    """The seconds a transfer with these booked seconds would take less without `limits`
    (receiver_window, latency, loss, network: one, or the two of a mixed verdict), whichever
    limit its verdict names: the same what-if for two transfers (a condition's run and its
    baseline's) is what tells one's saving from the other's. `receiver`: the verdict's, where
    the window held ("application": a stopped reader, whose waits a round trip near zero
    leaves). Two limits remove the union of their moments: the regrowth after a loss is
    inside the round trips or the path's pace when those go too."""
    names = {limits} if isinstance(limits, str) else set(limits)
    secs = lim["seconds"]
    out = 0.0
    if "receiver_window" in names or "latency" in names and receiver != "application":
        out += secs["receiver_window"]
    if "latency" in names:
        out += secs["latency"]
    if "network" in names:
        out += secs["network"]
    if "loss" in names:
        out += secs["loss"] + (0.0 if names & {"latency", "network"} else lim["after_loss_s"])
    return round(min(out, lim["transfer_s"]), 6)


def _rate(bps: float) -> str:
    return f"{bps / 1e6:,.1f} Mbit/s" if bps >= 1e6 else f"{bps / 1e3:,.1f} kbit/s"


def apply(f: TransferJudgement, v: Verdict) -> None:
    """Put the saving into the verdict."""
    s = saving(f, v)
    if s.saving_s is not None:
        v["saving_s"] = s.saving_s
    v["without"] = s.without
    v["saving_model"] = s.model


def sentence(limit: str, took_s: float | None, v: Verdict | dict[str, Any]) -> str:
    """The saving in words, for the answer: 'without the receiver's small buffer this transfer
    would take about 70 ms instead of 220 ms'; empty when the model gives none or nothing."""
    s = v.get("saving_s")
    if s is None or not took_s or s <= 0 or limit not in WITHOUT_WORDS:
        return ""
    what = WITHOUT_WORDS[limit]
    if limit == "receiver_window" and v.get("receiver") == "application":
        what = "the receiver's stalls (its application not reading)"
    return (f"without {what} this transfer would take about {(took_s - s) * 1e3:,.0f} ms "
            f"instead of {took_s * 1e3:,.0f} ms")
