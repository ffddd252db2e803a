"""Ground truth for a recording: what the kernel says limited each sending socket.

While a scenario runs, one sampler per sending namespace runs `ss -tinHO` every 50 ms (a
shell loop started by the lab, `sampler_argv`). Linux keeps, per socket, chronographs of
the time the sender had data to send (`tcpi_busy_time`) and, within it, the time it was stalled
by the receiver's window (`tcpi_rwnd_limited`) or by its own send buffer
(`tcpi_sndbuf_limited`); ss prints them as `busy:56ms rwnd_limited:52ms(92.9%)`, beside cwnd,
ssthresh, rtt, retransmissions, the delivery rate, the bytes not yet sent (`notsent`) and the
`app_limited` flag. The counters only grow, so the last sample before a socket closes holds its
totals; the series adds how often data was waiting unsent, and how often the last delivery
rate sample was application-limited.

`summarize` turns a socket's samples into numbers for the metadata; `dominant_limit` names the
limit that held the sender back most, by the rule written down there. Parsing is separate from
sampling: `parse_line` takes one line of ss output and returns a dict of numbers.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterable
from typing import Any

SAMPLE_INTERVAL_S = 0.05
SEPARATOR = "@@"  # printed by the sampler loop after each ss run

# ss prints rates as e.g. 26234704bps or, in other versions, 1.2Gbps
_RATE = re.compile(r"^([\d.]+)([KMGT]?)bps$")
_UNITS = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_CHRONO = re.compile(r"^(\d+)ms(?:\(([\d.]+)%\))?$")
CONGESTION_CONTROLS = ("cubic", "bbr", "bbr2", "reno", "dctcp", "vegas", "westwood", "htcp",
                       "bic", "illinois", "hybla", "yeah", "scalable", "veno", "lp", "nv",
                       "cdg", "highspeed")


def sampler_argv(ports: Iterable[int], parent_pid: int, tick: str) -> list[str]:
    """A shell loop printing every TCP socket whose local port is one of `ports` (the sending
    side of the lab's connections), every 50 ms, until killed or `parent_pid` is gone (so an
    orphaned sampler stops by itself). After each round it touches `tick`, which the client's
    shim watches before it closes (clientshim.c). Only sockets still open for sending
    (established, or closed by the peer only): once a socket has sent its FIN, the FIN in
    flight would pass for data in flight, and the data are all counted by then."""
    filt = " or ".join(f"sport = :{p}" for p in ports)
    return ["sh", "-c",
            f"while kill -0 {parent_pid} 2>/dev/null; do "
            f"ss -tinHO state established state close-wait '( {filt} )'; "
            f"echo {SEPARATOR}; : > '{tick}'; sleep {SAMPLE_INTERVAL_S}; done"]


def _rate(text: str) -> float | None:
    m = _RATE.match(text)
    return float(m.group(1)) * _UNITS[m.group(2)] if m else None


def parse_line(line: str) -> dict[str, Any] | None:
    """One socket line of `ss -tinHO` as numbers; None for a line that is not one."""
    words = line.split()
    if len(words) < 5 or ":" not in words[3]:
        return None
    out: dict[str, Any] = {"state": words[0], "recv_q": int(words[1]), "send_q": int(words[2]),
                           "local": words[3], "peer": words[4], "app_limited": False}
    rest = words[5:]
    i = 0
    while i < len(rest):
        w = rest[i]
        if w in CONGESTION_CONTROLS:
            out["congestion_control"] = w
        elif w == "app_limited":
            out["app_limited"] = True
        elif w in ("send", "pacing_rate", "delivery_rate") and i + 1 < len(rest):
            out[f"{w}_bps" if w != "send" else "send_rate_bps"] = _rate(rest[i + 1])
            i += 1
        elif ":" in w:
            key, _, val = w.partition(":")
            if key in ("busy", "rwnd_limited", "sndbuf_limited"):
                m = _CHRONO.match(val)
                if m:
                    out[f"{key}_ms"] = int(m.group(1))
                    if m.group(2) is not None:
                        out[f"{key}_pct"] = float(m.group(2))
            elif key == "rtt":
                srtt, _, var = val.partition("/")
                out["srtt_ms"] = float(srtt)
                out["rttvar_ms"] = float(var) if var else None
            elif key == "retrans":
                now, _, total = val.partition("/")
                out["retrans_outstanding"] = int(now)
                out["retrans"] = int(total)
            elif key in ("minrtt", "rcv_rtt"):
                out[f"{key}_ms"] = float(val)
            elif key in ("cwnd", "ssthresh", "unacked", "notsent", "bytes_sent",
                         "bytes_retrans", "bytes_acked", "bytes_received", "segs_out",
                         "data_segs_out", "lost", "sacked", "mss", "snd_wnd", "rcv_space",
                         "lastsnd", "lastack", "delivered"):
                try:
                    out[key] = int(val)
                except ValueError:
                    pass
        i += 1
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
                                        name=f"ss-sampler-{label}")
        self._thread.start()

    def _read(self) -> None:
        batch: list[dict[str, Any]] = []
        for raw in self._stream:
            line = raw.decode(errors="replace").strip()
            if line == SEPARATOR:
                t = time.monotonic()
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

# The rule, in order. The chronographs are the kernel's own measurement of two limits, so they
# come first: when the receiver's window, or the send buffer, stalled the sender for at least
# half of the time it had data to send, that is the limit. The rest of the busy time the kernel
# does not split: the sender was held by its congestion window (or a rate limit downstream),
# or was waiting on the application. Three clues tell those apart:
# - loss: at least 1% of the bytes sent were sent again. Each loss halves (cubic: x0.7) the
#   congestion window and costs a recovery, so at that rate recovery dominates; a stray
#   retransmission (reordering, one tail loss probe) does not.
# - network: in at least half of the samples taken while data was in flight, more data sat in
#   the socket unsent (`notsent`): the application had given it, the window was open, and the
#   congestion window or the link (pacing, a rate limit's queue) held it.
# - sender: otherwise. Nothing waited unsent, so the sender sent whatever the application gave
#   it as soon as it came: the application (the server's query, the pooler's forwarding) set
#   the pace.
HALF = 0.5
LOSS_SHARE = 0.01
RULE = ("receiver_window if rwnd_limited >= 50% of busy; else send_buffer if sndbuf_limited "
        ">= 50% of busy; else loss if bytes_retrans >= 1% of bytes_sent; else network if data "
        "waited unsent (notsent > 0) in >= 50% of the samples with data in flight; else sender")


def dominant_limit(s: dict[str, Any]) -> tuple[str | None, str, str]:
    """(limit, why, basis) for one socket's summary; limit None when the socket never sent.
    The basis says how firm the call is: the kernel's chronographs (measured to the
    microsecond), its retransmission counters, or a number of 50 ms samples."""
    busy = s.get("busy_ms") or 0
    rwnd, sndbuf = s.get("rwnd_limited_share"), s.get("sndbuf_limited_share")
    if not busy and not s.get("bytes_sent"):
        return None, "the socket sent nothing", "counters"
    if rwnd is not None and rwnd >= HALF:
        return ("receiver_window", f"rwnd_limited is {rwnd:.1%} of busy ({busy} ms)",
                "chronographs")
    if sndbuf is not None and sndbuf >= HALF:
        return ("send_buffer", f"sndbuf_limited is {sndbuf:.1%} of busy ({busy} ms)",
                "chronographs")
    sent, again = s.get("bytes_sent") or 0, s.get("bytes_retrans") or 0
    if sent and again / sent >= LOSS_SHARE:
        return "loss", (f"{again:,} of {sent:,} bytes sent were retransmitted "
                        f"({again / sent:.1%}, >= {LOSS_SHARE:.0%})"), "counters"
    notsent, n = s.get("notsent_share"), s.get("active_samples") or 0
    if notsent is not None and notsent >= HALF:
        return "network", (f"data waited unsent in {notsent:.0%} of {n} samples with data "
                           f"in flight; window and buffer stalls under half of busy"), \
            f"{n} samples"
    if notsent is None:
        # the whole transfer fell between two samples: nothing says the congestion window
        # held it, so the application's pace is the remaining explanation (not a measurement)
        return "sender", ("no sample caught data in flight (the transfer fell between "
                          "samples); window and buffer stalls under half of busy"), "0 samples"
    return "sender", (f"data waited unsent in only {notsent:.0%} of {n} samples with data in "
                      f"flight: the application set the pace"), f"{n} samples"


SUMMARY_FIELDS = ("congestion_control", "busy_ms", "rwnd_limited_ms", "sndbuf_limited_ms",
                  "retrans", "bytes_retrans", "bytes_sent", "bytes_acked", "cwnd", "ssthresh",
                  "srtt_ms", "rttvar_ms", "minrtt_ms", "delivery_rate_bps", "mss")


# the counters that only grow, as summarize keeps them
COUNTERS = ("busy_ms", "rwnd_limited_ms", "sndbuf_limited_ms", "retrans", "bytes_retrans",
            "bytes_sent", "bytes_acked")


def summarize(samples: list[dict[str, Any]], direction: str,
              baseline: dict[str, Any] | None = None) -> dict[str, Any]:
    """A socket's figures: its last sample's counters (less those of `baseline`, a sample
    taken before the lab's client started, for a socket already open then), and from the
    series the share of samples with data in flight that had data waiting unsent and that
    were app-limited."""
    last = samples[-1]
    out: dict[str, Any] = {"direction": direction, "local": last["local"],
                           "peer": last["peer"]}
    out.update({k: last.get(k) for k in SUMMARY_FIELDS})
    for k in ("busy_ms", "rwnd_limited_ms", "sndbuf_limited_ms", "retrans", "bytes_retrans"):
        out[k] = out[k] or 0  # ss leaves out zero chronographs and counters
    if baseline is not None:
        # opened before the client (a warm pool): its warm-up is not part of the recording
        for k in COUNTERS:
            if out[k] is not None:
                out[k] -= baseline.get(k) or 0
    out["counted_from"] = ("the sample before the client started" if baseline is not None
                           else "the socket's start")
    busy = out["busy_ms"]
    for k in ("rwnd_limited", "sndbuf_limited"):
        if baseline is not None:
            # the difference of two whole-millisecond counters
            out[f"{k}_share"] = round(out[f"{k}_ms"] / busy, 4) if busy else None
            continue
        # ss's percentage has a tenth of a percent; busy alone is whole milliseconds
        pct = last.get(f"{k}_pct")
        out[f"{k}_share"] = (round(pct / 100, 4) if pct is not None
                             else (0.0 if busy else None))
    active = [s for s in samples if (s.get("unacked") or 0) > 0 or (s.get("notsent") or 0) > 0]
    out["samples"] = len(samples)
    out["active_samples"] = len(active)
    out["notsent_share"] = (round(sum(1 for s in active if s.get("notsent")) / len(active), 3)
                            if active else None)
    out["app_limited_share"] = (round(sum(1 for s in active if s["app_limited"]) / len(active),
                                      3) if active else None)
    # whether the last sample came after the sender had finished (nothing in flight or
    # queued): then its counters are the socket's totals
    out["last_sample_after_transfer"] = not (last.get("unacked") or last.get("notsent"))
    out["dominant_limit"], out["dominant_rule"], out["dominant_basis"] = dominant_limit(out)
    return out
