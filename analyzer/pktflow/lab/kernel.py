"""Ground truth for a recording: what the kernel says limited each sending socket.

While a scenario runs, one sampler per sending namespace (tcpinfo.c, built by the lab) asks
the kernel every millisecond for each sending socket's struct tcp_info, the way ss(8) does but
without a process per round. Linux keeps, per socket, chronographs of the time the sender had
data to send (`busy`) and, within it, the time it was stalled by the receiver's window
(`rwnd_limited`) or by its own send buffer (`sndbuf_limited`); beside them the congestion state
(open, disorder, CWR, recovery, loss), cwnd, srtt and the least RTT, the bytes written but not
yet sent (`notsent`), the segments in flight, the peer's window, and the retransmissions the
receiver reported as duplicates (D-SACK: those were not lost). The counters only grow, so the
last sample before a socket closes holds its totals; the series says, sample by sample, what
held the sender (`classify`). HZ is 250 on the lab's kernels: the chronographs move in 4 ms
steps, which the series does not.

`summarize` turns a socket's samples into numbers for the metadata; `dominant_limit` names the
limit that held the sender back most, by the rule written down there. Parsing is separate from
sampling: `parse_line` takes one line of the sampler's output and returns a dict of numbers.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

SAMPLE_INTERVAL_S = 0.001
SEPARATOR = "@@"  # the sampler prints "@@ <CLOCK_MONOTONIC ns>" after each round
INFINITE_SSTHRESH = 2147483647  # tcp_info's "not set yet" (TCP_INFINITE_SSTHRESH)
RECOVERY, LOSS_STATE = 3, 4  # tcpi_ca_state: TCP_CA_Recovery, TCP_CA_Loss


def sampler_argv(binary: str, ports: Iterable[int], parent_pid: int, tick: str) -> list[str]:
    """The sampler (tcpinfo.c, built as `binary`) for every TCP socket whose local port is one
    of `ports` (the sending side of the lab's connections), every SAMPLE_INTERVAL_S, until
    killed or `parent_pid` is gone (so an orphaned sampler stops by itself). After each round
    it touches `tick`, which the client's shim watches before it closes (clientshim.c). Only
    sockets still open for sending (established, or closed by the peer only): once a socket
    has sent its FIN, the FIN in flight would pass for data in flight."""
    return [binary, str(round(SAMPLE_INTERVAL_S * 1e6)), str(parent_pid), tick,
            *(str(p) for p in ports)]


# the sampler's key -> (the summary's key, the factor that makes its unit)
_FIELDS: dict[str, tuple[str, float]] = {
    "busy_us": ("busy_ms", 1e-3), "rwnd_us": ("rwnd_limited_ms", 1e-3),
    "sndbuf_us": ("sndbuf_limited_ms", 1e-3), "srtt_us": ("srtt_ms", 1e-3),
    "rttvar_us": ("rttvar_ms", 1e-3), "minrtt_us": ("minrtt_ms", 1e-3),
    "delivery_rate": ("delivery_rate_bps", 8.0), "total_retrans": ("retrans", 1),
    "retrans": ("retrans_outstanding", 1),
}
_COUNTS = ("ca_state", "bytes_sent", "bytes_retrans", "bytes_acked", "bytes_received",
           "dsack_dups", "lost", "sacked", "notsent", "unacked", "cwnd", "ssthresh",
           "snd_wnd", "mss", "reord_seen", "sndbuf", "wmem_queued")


def parse_line(line: str) -> dict[str, Any] | None:
    """One socket line of the sampler as numbers; None for a line that is not one."""
    words = line.split()
    if len(words) < 4 or words[0] not in ("ESTAB", "CLOSE-WAIT") or ":" not in words[1]:
        return None
    out: dict[str, Any] = {"state": words[0], "local": words[1], "peer": words[2]}
    for w in words[3:]:
        key, _, val = w.partition(":")
        if key == "cc":
            out["congestion_control"] = val
            continue
        try:
            n = int(val)
        except ValueError:
            continue
        if key == "app_limited":
            out["app_limited"] = bool(n)
        elif key in _FIELDS:
            name, factor = _FIELDS[key]
            out[name] = n * factor if factor != 1 else n
        elif key in _COUNTS:
            out[key] = None if key == "ssthresh" and n >= INFINITE_SSTHRESH else n
    return out


class Sampler:
    """Reads one sampler process's output in a thread: every sample of every socket, with
    the time it was read. Until `freeze` (called before the lab's client starts), each round's
    sockets are those already open (a warm pool's server connection), and their samples are
    their `baseline`: so that their figures cover the recording, not their whole life.
    `idle_round` is set once a round found every socket idle (nothing unacknowledged: the
    warm-up's last ACK, perhaps a delayed one, is in, and its busy time with it)."""

    def __init__(self, stream: Iterable[bytes], label: str) -> None:
        self.label = label
        self.samples: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.rounds = 0
        self.idle_round = threading.Event()
        self.baseline: dict[tuple[str, str], dict[str, Any]] = {}
        self._frozen = False
        self._stream = stream
        self._thread = threading.Thread(target=self._read, daemon=True,
                                        name=f"tcpinfo-{label}")
        self._thread.start()

    def _read(self) -> None:
        batch: list[dict[str, Any]] = []
        for raw in self._stream:
            line = raw.decode(errors="replace").strip()
            if line.startswith(SEPARATOR):
                stamp = line[len(SEPARATOR):].strip()
                t = int(stamp) / 1e9 if stamp.isdigit() else 0.0
                for s in batch:
                    s["t"] = t
                    self.samples.setdefault((s["local"], s["peer"]), []).append(s)
                if not self._frozen:
                    self.baseline = {(s["local"], s["peer"]): s for s in batch}
                    if not any(s.get("unacked") or s.get("notsent") for s in batch):
                        self.idle_round.set()
                self.rounds += 1
                batch = []
            elif line:
                parsed = parse_line(line)
                if parsed is not None:
                    batch.append(parsed)

    def freeze(self) -> None:
        """The client starts now: the baseline is the last round before it."""
        self._frozen = True

    def join(self, timeout: float = 5.0) -> None:
        self._thread.join(timeout)
        self.idle_round.set()  # the stream ended: no round is coming


# -- what limited the sender ------------------------------------------------------------------

# Each sample of a sending socket, while it had a transfer under way, goes to one class by the
# kernel's own state at that instant; the samples are evenly spaced in time, so their shares
# are shares of the transfer's time, as pktflow's verdict gives them:
# - loss: in recovery (ca_state recovery or loss), unless the receiver's D-SACKs showed that
#   episode's retransmissions were duplicates: then the episode goes by the rules below;
# - receiver_window: data waited unsent and the peer's window had no room for one more
#   segment beyond those in flight;
# - network: data waited unsent and the smoothed RTT stood more than max(half the least RTT,
#   1 ms) above the least: a queue at a bottleneck (a shaper, a slower link);
# - latency: data waited unsent, no queue, and at least half the congestion window in flight:
#   the path's own round trips paced it (slow start, or a window grown too little);
# - (data waiting with the window barely used is the stack pushing out what was just written:
#   the sender's, as below);
# - send_buffer: nothing waited unsent, but the send buffer was full of unacknowledged data
#   (more than the 2/3 of it above which Linux reports a socket not writable): the
#   application could not write more until ACKs freed room, so the round trip paced it;
# - sender: nothing waited unsent: the application had given the socket all it had.
# The transfer runs from the first sample that saw bytes sent to the last one; within it, a
# run of samples that saw no bytes sent but bytes received is the conversation's turn (the
# peer's next request), and goes to no class, as pktflow leaves turns out of the transfer; so
# does a sample in which a whole response left between two turns (nothing waited unsent):
# its millisecond is the turn's end and the wait for the response's ACK, not transfer time
# (a catalogue query's answer of pg_dump, a round trip apart from the next).
# The limit is the class with the most samples. Under MIN_SAMPLES samples the call is weak:
# the chronographs (exact, if in 4 ms steps) decide as before, and the summary says so.
CLASSES = ("receiver_window", "network", "loss", "latency", "send_buffer", "sender")
WRITABLE_SHARE = 2 / 3  # sk_stream_is_writeable: free space at least half of what is queued
MIN_SAMPLES = 20
QUEUE_FLOOR_MS = 1.0
QUEUE_SHARE = 0.5
CWND_USED = 0.5
HALF = 0.5
LOSS_SHARE = 0.01
RULE = ("each 1 ms sample of the sending socket during its transfer is put in one class by "
        "the kernel's state: loss in recovery (unless D-SACKs showed its retransmissions "
        "spurious); receiver_window when data waited unsent and the peer's window had no room "
        "for a segment; network when data waited unsent with srtt more than max(min_rtt/2, "
        "1 ms) above min_rtt (a queue); latency when data waited unsent, no queue, and half "
        "the congestion window or more in flight; send_buffer "
        "when nothing waited unsent but unacknowledged data filled over 2/3 of the send "
        "buffer; sender otherwise. Samples in the conversation's turns, and one in which a "
        "whole response left between two turns, are no transfer time. The limit is the class "
        "of most samples; with fewer than 20 "
        "samples the call is weak, and the chronographs decide: receiver_window if "
        "rwnd_limited >= 50% of busy, send_buffer if sndbuf_limited >= 50%, loss if "
        "non-duplicate retransmitted bytes >= 1% of bytes sent, else sender")


def _state(s: dict[str, Any], in_recovery: bool) -> str:
    """The class of one sample with data unacknowledged or unsent."""
    if in_recovery:
        return "loss"
    if not s.get("notsent"):
        queued, size = s.get("wmem_queued"), s.get("sndbuf")
        if s.get("unacked") and queued and size and queued > WRITABLE_SHARE * size:
            return "send_buffer"
        return "sender"
    mss = s.get("mss") or 1448
    unacked = s.get("unacked") or 0
    wnd = s.get("snd_wnd")
    if wnd is not None and wnd - unacked * mss < mss:
        return "receiver_window"
    srtt, least = s.get("srtt_ms"), s.get("minrtt_ms")
    queue = (srtt is not None and least is not None
             and srtt - least > max(QUEUE_SHARE * least, QUEUE_FLOOR_MS))
    if queue:
        return "network"
    cwnd = s.get("cwnd") or 0
    if cwnd and unacked >= CWND_USED * cwnd:
        return "latency"
    return "sender"


def _spurious_episodes(samples: list[dict[str, Any]]) -> set[int]:
    """Indices of samples in recovery episodes whose retransmissions the receiver reported as
    duplicates (D-SACK) by the end of the episode or soon after: Linux undoes those
    recoveries, and they were no loss."""
    out: set[int] = set()
    i, n = 0, len(samples)
    while i < n:
        if (samples[i].get("ca_state") or 0) < RECOVERY:
            i += 1
            continue
        j = i
        while j < n and (samples[j].get("ca_state") or 0) >= RECOVERY:
            j += 1
        before = samples[i - 1] if i else samples[i]
        after = samples[min(j + 5, n - 1)]  # D-SACKs come a round trip after the resends
        resent = (after.get("retrans") or 0) - (before.get("retrans") or 0)
        dups = (after.get("dsack_dups") or 0) - (before.get("dsack_dups") or 0)
        if resent > 0 and dups >= resent:
            out.update(range(i, j))
        i = j
    return out


def classify(samples: list[dict[str, Any]]) -> list[str | None]:
    """Each sample's class (CLASSES), or None outside the transfer and in the turns."""
    n = len(samples)
    labels: list[str | None] = [None] * n
    sent = [i for i in range(1, n) if (samples[i].get("bytes_sent") or 0)
            > (samples[i - 1].get("bytes_sent") or 0)]
    if not sent:
        return labels
    first, last = sent[0], sent[-1]
    spurious = _spurious_episodes(samples)
    sending, turn = set(sent), set[int]()
    i = first
    while i <= last:
        # a run of samples that sent nothing: a turn when the peer spoke meanwhile
        j = i
        while j <= last and j not in sending:
            j += 1
        if j > i:
            spoke = ((samples[j].get("bytes_received") or 0)
                     > (samples[i - 1].get("bytes_received") or 0))
            if not spoke:
                for k in range(i, j):
                    labels[k] = _label(samples[k], k in spurious)
            else:
                turn.update(range(i, j))
            i = j
            continue
        labels[i] = _label(samples[i], i in spurious)
        i += 1
    for i in sent:
        # a response that left whole within one sample, between two turns (or at the
        # transfer's ends): its sample is the turn's end and the wait for its ACK, no transfer
        # time (pktflow books such a response none)
        if ((i == first or i - 1 in turn) and (i == last or i + 1 in turn)
                and not samples[i].get("notsent")):
            labels[i] = None
    return labels


def _label(s: dict[str, Any], spurious: bool) -> str:
    recovering = (s.get("ca_state") or 0) >= RECOVERY and not spurious
    if not recovering and not s.get("unacked") and not s.get("notsent"):
        return "sender"  # idle within the transfer: the application had nothing to send
    return _state(s, recovering)


def dominant_limit(s: dict[str, Any]) -> tuple[str | None, str, str]:
    """(limit, why, basis) for one socket's summary; limit None when the socket never sent.
    The basis says how firm the call is: the samples (with their number), or, under
    MIN_SAMPLES, the chronographs and counters (weak)."""
    busy = s.get("busy_ms") or 0
    if not busy and not s.get("bytes_sent"):
        return None, "the socket sent nothing", "counters"
    shares, n = s.get("sample_shares"), s.get("transfer_samples") or 0
    if shares and n >= MIN_SAMPLES:
        ranked = sorted(CLASSES, key=lambda k: -shares[k])
        top, second = ranked[0], ranked[1]
        return top, (f"{shares[top]:.0%} of {n} samples in the transfer "
                     f"(next: {second.replace('_', ' ')} {shares[second]:.0%})"), \
            f"{n} samples"
    weak = f"weak: {n} samples in the transfer"
    rwnd, sndbuf = s.get("rwnd_limited_share"), s.get("sndbuf_limited_share")
    if rwnd is not None and rwnd >= HALF:
        return "receiver_window", f"rwnd_limited is {rwnd:.1%} of busy ({busy:g} ms)", weak
    if sndbuf is not None and sndbuf >= HALF:
        return "send_buffer", f"sndbuf_limited is {sndbuf:.1%} of busy ({busy:g} ms)", weak
    sent, again = s.get("bytes_sent") or 0, s.get("bytes_retrans_lost") or 0
    if sent and again / sent >= LOSS_SHARE:
        return "loss", (f"{again:,} of {sent:,} bytes sent were retransmitted and not "
                        f"reported duplicate ({again / sent:.1%}, >= {LOSS_SHARE:.0%})"), weak
    return "sender", ("window and buffer stalls under half of busy, too few samples to "
                      "tell the congestion window from the application"), weak


# -- a verdict against the kernel -------------------------------------------------------------

# the kernel's class -> the verdicts that agree with it. A sender blocked on its send buffer
# full of unacknowledged data was paced by the round trip (latency) or by its own buffer
# (the sender's side).
AGREES = {"receiver_window": {"receiver_window"}, "loss": {"loss"}, "sender": {"sender"},
          "network": {"network"}, "latency": {"latency"},
          "send_buffer": {"sender", "latency"}}
NEAR_TIE_SHARE = 0.10  # a verdict within this of the kernel's top share names a near-tie


def verdict_agrees(limit: str, mixed_with: str | None, sock: dict[str, Any]) -> bool:
    """Whether a verdict (its limit, and the one it called a near-tie with) agrees with a
    sending socket's summary: it names the kernel's class, or one within NEAR_TIE_SHARE of
    the kernel's top share; or loss, where the kernel saw at least LOSS_SHARE of the bytes
    sent again and not reported duplicate (a verdict may name loss under a larger share:
    the window each loss cut slowed what followed)."""
    named = [x for x in (limit, mixed_with) if x]
    if any(x in AGREES.get(sock["dominant_limit"] or "", set()) for x in named):
        return True
    sent = sock.get("bytes_sent") or 0
    if limit == "loss" and sent and (sock.get("bytes_retrans_lost") or 0) / sent >= LOSS_SHARE:
        return True
    shares = sock.get("sample_shares")
    if shares:
        top = max(shares.values())
        return any(shares.get(x, -1.0) >= top - NEAR_TIE_SHARE for x in named)
    return False


def direction_of(report: dict[str, Any], sock: dict[str, Any]) -> dict[str, Any] | None:
    """The report's direction whose sender is the kernel's socket (its local address), or
    None when no connection of the report has it."""
    lip, lport = sock["local"].rsplit(":", 1)
    pip, pport = sock["peer"].rsplit(":", 1)
    for c in report["connections"]:
        cl, sv = c["client"], c["server"]
        for name, src, dst in (("client_to_server", cl, sv), ("server_to_client", sv, cl)):
            if (src["ip"], src["port"], dst["ip"], dst["port"]) == (lip, int(lport), pip,
                                                                    int(pport)):
                return c["directions"][name]  # type: ignore[no-any-return]
    return None


SUMMARY_FIELDS = ("congestion_control", "busy_ms", "rwnd_limited_ms", "sndbuf_limited_ms",
                  "retrans", "bytes_retrans", "dsack_dups", "bytes_sent", "bytes_acked",
                  "cwnd", "ssthresh", "srtt_ms", "rttvar_ms", "minrtt_ms",
                  "delivery_rate_bps", "mss")


# the counters that only grow, as summarize keeps them
COUNTERS = ("busy_ms", "rwnd_limited_ms", "sndbuf_limited_ms", "retrans", "bytes_retrans",
            "dsack_dups", "bytes_sent", "bytes_acked")


def summarize(samples: list[dict[str, Any]], direction: str,
              baseline: dict[str, Any] | None = None) -> dict[str, Any]:
    """A socket's figures: its last sample's counters (less those of `baseline`, a sample
    taken before the lab's client started, for a socket already open then), and from the
    series each class's share of the transfer's samples."""
    if baseline is not None:
        # the warm-up before the client started is not part of the recording
        samples = [x for x in samples if x.get("t", 0.0) >= baseline.get("t", 0.0)] or samples
    last = samples[-1]
    out: dict[str, Any] = {"direction": direction, "local": last["local"],
                           "peer": last["peer"]}
    out.update({k: last.get(k) for k in SUMMARY_FIELDS})
    for k in ("busy_ms", "rwnd_limited_ms", "sndbuf_limited_ms", "retrans", "bytes_retrans",
              "dsack_dups"):
        out[k] = out[k] or 0
    if baseline is not None:
        # opened before the client (a warm pool): its warm-up is not part of the recording
        for k in COUNTERS:
            if out[k] is not None:
                out[k] -= baseline.get(k) or 0
    for k in ("busy_ms", "rwnd_limited_ms", "sndbuf_limited_ms"):
        out[k] = round(out[k], 3)
    out["counted_from"] = ("the sample before the client started" if baseline is not None
                           else "the socket's start")
    busy = out["busy_ms"]
    for k in ("rwnd_limited", "sndbuf_limited"):
        out[f"{k}_share"] = round(out[f"{k}_ms"] / busy, 4) if busy else None
    # retransmissions the receiver reported as duplicates were not lost
    out["bytes_retrans_lost"] = max(0, out["bytes_retrans"]
                                    - out["dsack_dups"] * (out["mss"] or 1448))
    out.update(classified(samples))
    out["series"] = compact(samples)  # the recorder keeps it beside the capture
    # whether the last sample came after the sender had finished (nothing in flight or
    # queued): then its counters are the socket's totals
    out["last_sample_after_transfer"] = not (last.get("unacked") or last.get("notsent"))
    out["dominant_limit"], out["dominant_rule"], out["dominant_basis"] = dominant_limit(out)
    return out


def classified(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The series' part of a socket's summary: how many samples fell in the transfer, and
    each class's share of them."""
    labels = classify(samples)
    counted = [x for x in labels if x is not None]
    return {"samples": len(samples), "transfer_samples": len(counted),
            "sample_shares": ({k: round(counted.count(k) / len(counted), 3) for k in CLASSES}
                              if counted else None)}


def resummarized(sock: dict[str, Any], series: dict[str, list[Any]]) -> dict[str, Any]:
    """A socket's summary with its series' part judged again by the rule as it is now, from
    the samples kept beside the capture (`compact`)."""
    out = {**sock, **classified(expand(series))}
    out["dominant_limit"], out["dominant_rule"], out["dominant_basis"] = dominant_limit(out)
    return out


# What the classification reads of each sample, kept beside a capture (X.pcap.samples.json.gz)
# so the kernel's account can be judged again when the rule changes, and checked.
SERIES_FIELDS = ("t", "bytes_sent", "bytes_received", "unacked", "notsent", "cwnd", "snd_wnd",
                 "mss", "ca_state", "srtt_ms", "minrtt_ms", "retrans", "dsack_dups", "sndbuf",
                 "wmem_queued")


def compact(samples: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """A socket's samples as one list per field (SERIES_FIELDS)."""
    return {k: [x.get(k) for x in samples] for k in SERIES_FIELDS}


def expand(series: dict[str, list[Any]]) -> list[dict[str, Any]]:
    n = len(series.get("t", []))
    return [{k: series[k][i] for k in SERIES_FIELDS if k in series} for i in range(n)]
