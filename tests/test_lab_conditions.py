"""Network conditions in the lab, and the kernel's account of each sender.

The recordings (marker `lab`: root, the Debian packages, gcc and libnetfilter-queue-dev) check
each condition against the capture it produced, read by tshark, not by pktflow's analyzer:
the handshake's round trip for a delay, retransmissions for loss, zero windows for a slow
reader. And they check that the kernel's figures are there and hang together. The rest of
the file runs anywhere: the sampler's parser, the dominant-limit rule, the handshake reader and the
command-line checks, on fixed inputs.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tcpfeed import ip_header, tcp_header

from pktflow.cli import Env, main
from pktflow.errors import ExitCode, LabError, UsageError
from pktflow.lab import kernel
from pktflow.lab.conditions import Conditions, loss_rules, tcp_rmem
from pktflow.lab.handshakes import handshakes
from pktflow.lab.record import (Recording, kernel_sockets, metadata_path, record,
                                remake_command, samples_path)

ROOT = Path(__file__).resolve().parents[1]

# -- the sampler's parser and the rule, on fixed input ---------------------------------------

# tcpinfo.c's line for one socket: a 1.15 MB seq scan through a 16 KB client buffer
LINE = ("ESTAB 10.213.0.30:5432 10.213.0.10:57638 cc:cubic busy_us:28000 rwnd_us:28000 "
        "sndbuf_us:0 ca_state:0 bytes_sent:1150211 bytes_retrans:824 bytes_acked:1149387 "
        "dsack_dups:1 retrans:0 total_retrans:1 lost:0 sacked:0 notsent:0 unacked:0 cwnd:17 "
        "ssthresh:2147483647 srtt_us:124 rttvar_us:31 minrtt_us:33 delivery_rate:43878787 "
        "app_limited:1 snd_wnd:9600 mss:1448 reord_seen:0 bytes_received:95 sndbuf:46080 "
        "wmem_queued:0")


def test_parse_line_reads_the_chronographs_and_counters() -> None:
    s = kernel.parse_line(LINE)
    assert s is not None
    assert (s["local"], s["peer"], s["congestion_control"]) == (
        "10.213.0.30:5432", "10.213.0.10:57638", "cubic")
    assert (s["busy_ms"], s["rwnd_limited_ms"], s["sndbuf_limited_ms"]) == (28, 28, 0)
    assert (s["retrans"], s["bytes_retrans"], s["dsack_dups"]) == (1, 824, 1)
    assert (s["srtt_ms"], s["rttvar_ms"], s["minrtt_ms"]) == (0.124, 0.031, 0.033)
    assert s["cwnd"] == 17 and s["ssthresh"] is None  # not yet set
    assert s["delivery_rate_bps"] == 8 * 43878787 and s["app_limited"] is True
    assert (s["sndbuf"], s["wmem_queued"], s["snd_wnd"]) == (46080, 0, 9600)
    assert kernel.parse_line("@@ 12345") is None
    assert kernel.parse_line("tcpinfo: sock_diag dump: Operation not permitted") is None


def _sample(t: float, **kw: Any) -> dict[str, Any]:
    base = {"local": "10.0.0.1:5432", "peer": "10.0.0.2:4000", "app_limited": False,
            "mss": 1448, "cwnd": 10, "snd_wnd": 1 << 20, "ca_state": 0, "t": t}
    return base | kw


def test_each_sample_is_classed_by_the_senders_state() -> None:
    series = [
        _sample(0.000, bytes_sent=100, bytes_received=50),  # the start-up
        _sample(0.001, bytes_sent=100, bytes_received=90),  # the query: a turn
        _sample(0.002, bytes_sent=10_000, unacked=10, notsent=5_000, srtt_ms=0.2,
                minrtt_ms=0.1),  # cwnd full, no queue: latency
        _sample(0.003, bytes_sent=20_000, unacked=10, notsent=5_000, srtt_ms=30.0,
                minrtt_ms=0.1),  # cwnd full, a standing queue: network
        _sample(0.004, bytes_sent=30_000, unacked=4, notsent=5_000, snd_wnd=6_000),  # window
        _sample(0.005, bytes_sent=40_000, unacked=3, notsent=0),  # nothing waited: sender
        _sample(0.006, bytes_sent=50_000, unacked=8, notsent=0, ca_state=3, retrans=1),
        _sample(0.007, bytes_sent=60_000, unacked=8, notsent=0, sndbuf=1000,
                wmem_queued=900),  # the application blocked on its send buffer
        _sample(0.008, bytes_sent=60_000),  # after the last bytes: not the transfer
    ]
    assert kernel.classify(series) == [None, None, "latency", "network", "receiver_window",
                                       "sender", "loss", "send_buffer", None]


def test_a_response_that_left_whole_between_two_turns_is_no_transfer_time() -> None:
    """pg_dump's catalogue queries: each answer leaves in one instant, a round trip from the
    next request. Its sample holds the turn's end and the wait for its ACK: no class (as
    pktflow books such a response no transfer time), where the bulk answer's samples count."""
    series = [_sample(0.000, bytes_sent=0, bytes_received=100)]
    sent, got = 0, 100
    for k in range(3):  # request (a turn of two samples), answer, wait for its ACK
        got += 80
        series += [_sample(0.01 * k + 0.001, bytes_sent=sent, bytes_received=got),
                   _sample(0.01 * k + 0.002, bytes_sent=sent, bytes_received=got)]
        sent += 300
        series.append(_sample(0.01 * k + 0.003, bytes_sent=sent, bytes_received=got,
                              unacked=1, notsent=0))
    # the COPY: its first sample leaves data queued, then the bulk goes on
    got += 80
    series.append(_sample(0.05, bytes_sent=sent, bytes_received=got))
    for k in range(1, 4):
        series.append(_sample(0.05 + 0.001 * k, bytes_sent=sent + 50_000 * k,
                              bytes_received=got, unacked=10, notsent=0 if k == 3 else 9_000,
                              srtt_ms=0.2, minrtt_ms=0.1))
    labels = kernel.classify(series)
    assert labels[:-3] == [None] * (len(series) - 3), labels
    assert labels[-3:] == ["latency", "latency", "sender"], labels


def _recorded_series(tmp: Path, name: str, recording: dict[str, Any],
                     conditions: dict[str, Any], srtt_ms: float, minrtt_ms: float) -> Path:
    """A recording's metadata and samples, as the lab writes them: one server->pooler socket
    waiting 30 samples with its congestion window full and data unsent."""
    out = tmp / f"{name}.pcap.gz"
    series = [_sample(0.0, bytes_sent=0)] + [
        _sample(0.001 * i, bytes_sent=1448 * i, unacked=10, notsent=9_000, srtt_ms=srtt_ms,
                minrtt_ms=minrtt_ms) for i in range(1, 31)]
    sock = kernel.summarize(series, "server->pooler")
    key = f"{sock['local']} {sock['peer']}"
    with gzip.open(samples_path(out), "wt") as f:
        json.dump({key: sock.pop("series")}, f)
    metadata_path(out).write_text(json.dumps({
        "recording": recording, "conditions": conditions, "kernel": {"sockets": [sock]}}))
    return out


def test_the_kernel_is_read_with_what_the_recording_built(tmp_path: Path) -> None:
    # a pool warmed before the back link's 10 ms delay: its least RTT is the bridge's
    stale = _recorded_series(tmp_path, "stale", {"rate": None}, {"delay_back_ms": 10.0},
                             srtt_ms=10.2, minrtt_ms=0.02)
    (sock,) = kernel_sockets(stale)
    assert sock["dominant_limit"] == "latency", sock["sample_shares"]
    # a smoothed RTT 5 ms over a least of 0.05: a queue behind a shaper on the server's
    # egress, the receiver's ACK delays without one
    for rate, limit in (({"rate": "20mbit", "rate_at": "server"}, "network"),
                        ({"rate": None}, "latency")):
        path = _recorded_series(tmp_path, f"srtt-{limit}", rate, {}, srtt_ms=5.0,
                                minrtt_ms=0.05)
        (sock,) = kernel_sockets(path)
        assert sock["dominant_limit"] == limit, (rate, sock["sample_shares"])


def test_a_recovery_the_receiver_reports_spurious_is_not_loss() -> None:
    series = [_sample(0.0, bytes_sent=100),
              _sample(0.001, bytes_sent=2_000, unacked=2, notsent=0, ca_state=3, retrans=1),
              _sample(0.002, bytes_sent=3_000, unacked=1, notsent=0, retrans=1, dsack_dups=1)]
    assert kernel.classify(series)[1] == "sender"


def test_summary_names_the_class_of_most_samples_and_calls_few_weak() -> None:
    series = [_sample(0.0, bytes_sent=0)] + [
        _sample(0.001 * i, bytes_sent=1448 * i, unacked=10, notsent=9_000, srtt_ms=0.2,
                minrtt_ms=0.1, busy_ms=float(i)) for i in range(1, 31)]
    s = kernel.summarize(series, "server->client")
    assert s["transfer_samples"] == 30 and s["sample_shares"]["latency"] == 1.0
    assert s["dominant_limit"] == "latency" and s["dominant_basis"] == "30 samples"
    few = kernel.summarize(series[:5], "server->client")
    assert few["dominant_basis"].startswith("weak")


@pytest.mark.parametrize("figures, limit", [
    ({"busy_ms": 100, "rwnd_limited_share": 0.93, "sndbuf_limited_share": 0.0},
     "receiver_window"),
    ({"busy_ms": 100, "rwnd_limited_share": 0.1, "sndbuf_limited_share": 0.6},
     "send_buffer"),
    ({"busy_ms": 100, "rwnd_limited_share": 0.2, "bytes_retrans_lost": 20_000}, "loss"),
    # a retransmission the receiver reported as a duplicate is not loss
    ({"busy_ms": 100, "rwnd_limited_share": 0.0, "bytes_retrans_lost": 0}, "sender"),
    ({"busy_ms": 0, "bytes_sent": 0}, None),
])
def test_the_weak_rule_falls_back_to_the_chronographs(figures: dict[str, Any],
                                                      limit: str | None) -> None:
    got, why, basis = kernel.dominant_limit({"bytes_sent": 1_000_000} | figures)
    assert got == limit, why
    assert why and basis


def test_a_socket_open_before_the_client_is_counted_from_its_baseline() -> None:
    """A warm pool's server connection: its counters at the round before the client started
    are its warm-up, not the recording's; shares are of the difference."""
    before = _sample(0.0, busy_ms=45, rwnd_limited_ms=2, bytes_sent=900, bytes_acked=900,
                     retrans=0)
    series = [_sample(-0.001, busy_ms=44, bytes_sent=0), before,
              _sample(0.001, busy_ms=60, rwnd_limited_ms=10, unacked=3, bytes_sent=600_000),
              _sample(0.002, busy_ms=85, rwnd_limited_ms=26, bytes_sent=1_150_900,
                      bytes_acked=1_150_900, retrans=1)]
    s = kernel.summarize(series, "server->pooler", baseline=before)
    assert (s["busy_ms"], s["rwnd_limited_ms"], s["bytes_sent"], s["retrans"]) == (
        40, 24, 1_150_000, 1)
    assert s["rwnd_limited_share"] == 0.6
    assert s["counted_from"] == "the sample before the client started"
    assert s["samples"] == 3  # from the baseline on


def test_sampler_reads_rounds_from_a_stream() -> None:
    import io
    text = (f"{LINE}\n{kernel.SEPARATOR} 1000000000\n"
            f"{LINE.replace('busy_us:28000', 'busy_us:30000')}\n{kernel.SEPARATOR} 1002000000\n")
    sampler = kernel.Sampler(io.BytesIO(text.encode()), "server")
    sampler.join()
    assert sampler.rounds == 2
    (series,) = sampler.samples.values()
    assert [s["busy_ms"] for s in series] == [28, 30]
    assert [s["t"] for s in series] == [1.0, 1.002]  # the kernel's clock, from the sampler
    # not frozen: the baseline is the last round's
    assert list(sampler.baseline.values()) == [series[1]]


def test_the_baseline_is_the_last_round_before_the_client() -> None:
    """Rounds until freeze() are the baseline of the sockets open then; idle_round waits for
    one where nothing was unacknowledged (the warm-up's delayed ACK came)."""
    import os
    r, w = os.pipe()
    sampler = kernel.Sampler(os.fdopen(r, "rb"), "pooler")
    out = os.fdopen(w, "wb", buffering=0)
    busy = LINE.replace("busy_us:28000", "busy_us:40000").replace("unacked:0", "unacked:1")
    out.write(f"{busy}\n{kernel.SEPARATOR} 1\n".encode())
    assert not sampler.idle_round.wait(0.3)  # the warm-up's last segment awaits its ACK
    out.write(f"{LINE.replace('busy_us:28000', 'busy_us:45000')}\n{kernel.SEPARATOR} 2\n"
              .encode())
    assert sampler.idle_round.wait(5.0)
    sampler.freeze()
    out.write(f"{LINE.replace('busy_us:28000', 'busy_us:90000')}\n{kernel.SEPARATOR} 3\n"
              .encode())
    out.close()
    sampler.join()
    (base,) = sampler.baseline.values()
    assert base["busy_ms"] == 45 and sampler.rounds == 3


# -- the handshake reader, on a crafted capture ----------------------------------------------

def _frame(src: str, dst: str, sport: int, dport: int, seq: int, ack: int, flags: int) -> bytes:
    tcp = tcp_header(sport, dport, seq, ack, flags, 65535)
    ip = ip_header(bytes(map(int, src.split("."))), bytes(map(int, dst.split("."))), len(tcp))
    return b"\x00" * 12 + b"\x08\x00" + ip + tcp


def _pcap(path: Path, frames: list[tuple[float, bytes]]) -> None:
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    for t, f in frames:
        out += struct.pack("<IIII", int(t), round((t % 1) * 1e6), len(f), len(f)) + f
    path.write_bytes(out)


def test_handshakes_time_syn_to_ack(tmp_path: Path) -> None:
    c, s = "10.213.0.10", "10.213.0.20"
    frames = [
        (100.000000, _frame(c, s, 40000, 6432, 1000, 0, 0x02)),       # SYN
        (100.000050, _frame(s, c, 6432, 40000, 5000, 1001, 0x12)),    # SYN-ACK
        (100.010250, _frame(c, s, 40000, 6432, 1001, 5001, 0x10)),    # ACK, 10.25 ms later
        (100.020000, _frame(c, s, 40001, 6432, 7, 0, 0x02)),          # SYN never answered
    ]
    _pcap(tmp_path / "h.pcap", frames)
    (h,) = handshakes(tmp_path / "h.pcap")
    assert (h["client"], h["server"]) == (f"{c}:40000", f"{s}:6432")
    assert h["rtt_ms"] == pytest.approx(10.25, abs=0.001)
    assert h["syn_to_synack_ms"] == pytest.approx(0.05, abs=0.001)


# -- the command line's checks ----------------------------------------------------------------

@pytest.mark.parametrize("cond, network, via, words", [
    (Conditions(delay_ms=10), "loopback", "direct", "--network bridge"),
    (Conditions(loss_pct=2), "loopback", "pgbouncer", "--network bridge"),
    (Conditions(delay_back_ms=5), "bridge", "direct", "needs a pooler"),
    (Conditions(pooler_rcvbuf=65536), "bridge", "direct", "needs a pooler"),
    (Conditions(loss_back_pct=2), "bridge", "direct", "needs a pooler"),
    (Conditions(loss_back_pct=2), "loopback", "pgbouncer", "--network bridge"),
    (Conditions(loss_pct=100), "bridge", "direct", "between 0 and 100"),
    (Conditions(delay_ms=0), "bridge", "direct", "more than 0"),
    (Conditions(client_rcvbuf=100), "bridge", "direct", "at least 2048"),
])
def test_conditions_refused_where_they_cannot_act(cond: Conditions, network: str, via: str,
                                                  words: str) -> None:
    with pytest.raises(UsageError, match=words):
        cond.check(network, via)


@pytest.mark.parametrize("flags, said", [
    (["--delay", "10"], "--delay 10 needs --network bridge (acting inside the lab's own "
                        "namespaces)"),
    (["--loss", "2", "--client-rcvbuf", "16384"],
     "--loss 2 --client-rcvbuf 16384 need --network bridge (acting inside the lab's own "
     "namespaces)"),
    (["--network", "bridge", "--delay-back", "5"],
     "--delay-back 5 needs a pooler: add --via pgbouncer or --via pgpool"),
    (["--rate", "20mbit"], "--rate 20mbit needs --network bridge (loopback has no NIC to "
                           "shape or offload)"),
    (["--network", "bridge", "--rate-at", "server"],
     "--rate-at server needs --rate (the rate to shape with)"),
    (["--network", "bridge", "--rate", "fast"],
     "--rate fast: give a tc rate such as 100mbit or 1gbit"),
    (["--network", "bridge", "--delay", "0"],
     "--delay 0: give milliseconds, more than 0 and at most 10000"),
])
def test_command_line_mistakes_are_usage_errors_naming_the_flag(
        tmp_path: Path, flags: list[str], said: str) -> None:
    """Exit 2, as argparse's own, with the flag that is missing or wrong, before anything runs
    (not 7, the lab's failure to record: a user without root learns of the mistake first)."""
    out, err = io.StringIO(), io.StringIO()
    code = main(["lab", "record", "--scenario", "seqscan-10k", *flags, "-o",
                 str(tmp_path / "x.pcap")], Env(stdout=out, stderr=err))
    assert (code, err.getvalue()) == (ExitCode.USAGE, f"pktflow: {said}\n")
    assert not any(tmp_path.iterdir())


def test_recording_to_a_directory_is_the_outputs_error(tmp_path: Path) -> None:
    err = io.StringIO()
    code = main(["lab", "record", "--scenario", "seqscan-10k", "-o", str(tmp_path)],
                Env(stdout=io.StringIO(), stderr=err))
    assert (code, err.getvalue()) == (ExitCode.OUTPUT, f"pktflow: {tmp_path}: cannot be "
                                      "written: it is a directory (name a file in it)\n")


def test_slow_reader_works_on_loopback_and_names_itself() -> None:
    Conditions(slow_reader=1_000_000).check("loopback", "direct")
    cond = Conditions(delay_ms=10, loss_pct=2, client_rcvbuf=16384, slow_reader=500000)
    assert cond.tag() == "rtt10ms-loss2pct-rcvbuf16384-slowreader500000"
    rec = Recording("seqscan-10k", via="pgbouncer", network="bridge", conditions=cond)
    assert remake_command(rec, "x.pcap.gz").endswith(
        "--delay 10 --loss 2 --client-rcvbuf 16384 --slow-reader 500000 -o captures/x.pcap.gz")
    assert tcp_rmem(16384) == "4096 16384 16384" and tcp_rmem(2048) == "2048 2048 2048"
    drop, count = loss_rules(0.02, "10.213.0.30", 5432)
    assert drop[-2:] == ["-j", "DROP"] and "0.020000" in drop and "-j" not in count
    assert metadata_path(Path("a/x.pcap.gz")) == Path("a/x.pcap.json")
    assert metadata_path(Path("a/x.pcap")) == Path("a/x.json")


# -- recordings -------------------------------------------------------------------------------

LAB_PROGRAMS = {"tcpdump": "tcpdump", "pgbouncer": "pgbouncer", "psql": "postgresql-client-15",
                "tshark": "tshark", "iptables": "iptables", "gcc": "gcc", "ip": "iproute2",
                "ethtool": "ethtool", "setpriv": "util-linux", "tc": "iproute2", "ss": "iproute2"}


def skip_unless_lab() -> None:
    if os.geteuid() != 0:
        pytest.skip("the lab needs root")
    for prog, pkg in LAB_PROGRAMS.items():
        if shutil.which(prog) is None and not Path("/usr/sbin", prog).exists():
            pytest.skip(f"{prog} is not installed (Debian package {pkg})")
    if not Path("/usr/include/libnetfilter_queue/libnetfilter_queue.h").exists():
        pytest.skip("libnetfilter-queue-dev is not installed (the delay line is built per run)")


def tshark(path: Path, *args: str) -> list[str]:
    res = subprocess.run(["tshark", "-r", str(path), *args], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    return [ln for ln in res.stdout.splitlines() if ln.strip()]


def by_direction(meta: dict[str, Any]) -> dict[str, dict[str, Any]]:
    socks = meta["kernel"]["sockets"]
    out = {s["direction"]: s for s in socks}
    assert len(out) == len(socks), "one sending socket per direction in these scenarios"
    return out


def assert_sane(sock: dict[str, Any], result_bytes: int = 1_100_000) -> None:
    """The kernel's figures for one sending socket are there and hang together."""
    assert sock["congestion_control"] == "cubic", sock
    assert sock["samples"] >= 1
    assert sock["last_sample_after_transfer"], sock
    # the chronographs count whole jiffies (4 ms steps on this kernel): a transfer whose every
    # burst left and was acknowledged within one tick books no busy time (one CI run: the seq
    # scan at 2% loss, 1.17 MB in 11 samples, none with data in flight, busy 0), and then no
    # share of it either
    assert 0 <= sock["rwnd_limited_ms"] <= sock["busy_ms"], sock
    assert 0 <= sock["sndbuf_limited_ms"] <= sock["busy_ms"], sock
    if sock["busy_ms"]:
        assert sock["rwnd_limited_share"] + sock["sndbuf_limited_share"] <= 1.0 + 1e-9, sock
    else:
        assert sock["rwnd_limited_share"] is None and sock["sndbuf_limited_share"] is None, sock
    # the seq scan's result (10,000 rows of ~115 bytes on the wire) was sent and acknowledged
    assert sock["bytes_acked"] >= result_bytes and sock["bytes_sent"] >= sock["bytes_acked"], \
        sock
    assert 0 <= sock["bytes_retrans"] <= sock["bytes_sent"]
    assert sock["cwnd"] >= 1 and sock["srtt_ms"] > 0 and sock["delivery_rate_bps"] > 0, sock
    assert sock["minrtt_ms"] <= sock["srtt_ms"] + sock["rttvar_ms"], sock
    assert sock["dominant_limit"] in kernel.CLASSES, sock
    assert sock["dominant_rule"]


@pytest.fixture(scope="module")
def lab_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("conditions")


def recorded(tmp: Path, name: str, rec: Recording) -> tuple[dict[str, Any], Path]:
    skip_unless_lab()
    out = tmp / f"{name}.pcap.gz"
    meta = record(rec, out)
    assert json.loads(metadata_path(out).read_text()) == meta
    assert meta["tcpdump_dropped"] == 0
    return meta, out


def initial_rtts_ms(path: Path) -> dict[str, float]:
    """tshark's own handshake round trip (tcp.analysis.initial_rtt: SYN to the ACK of the
    SYN-ACK, carried by the frames after it), per client address:port."""
    rows = tshark(path, "-Y", "(tcp.flags.syn == 1 && tcp.flags.ack == 0) || "
                  "tcp.analysis.initial_rtt", "-T", "fields", "-E", "separator=,", "-e",
                  "tcp.stream", "-e", "ip.src", "-e", "tcp.srcport", "-e", "tcp.flags.syn",
                  "-e", "tcp.analysis.initial_rtt")
    clients: dict[str, str] = {}
    rtts: dict[str, float] = {}
    for row in rows:
        stream, ip, port, syn, rtt = row.split(",")
        if syn in ("1", "True") and not rtt:
            clients.setdefault(stream, f"{ip}:{port}")
        elif rtt:
            rtts.setdefault(stream, float(rtt) * 1e3)
    return {clients[s]: v for s, v in rtts.items() if s in clients}


def delay_line_was_late(meta: dict[str, Any]) -> bool:
    """The delay line's own report says the scheduler held it back: on this kernel
    (PREEMPT_NONE) a busy machine can keep even a real-time task off the CPU for
    milliseconds (measured: up to 27 ms with 2 cores compiling)."""
    lines = [v for k, v in meta["conditions"].items() if k.startswith("delay_line_")]
    return any(ln["late_us_max"] > 500 for ln in lines)


def recorded_on_time(tmp: Path, name: str, rec: Recording,
                     on_time: Any) -> tuple[dict[str, Any], Path]:
    """Record; while the delay checked by `on_time(meta)` is off AND the delay line reports
    that it was held back, wait and record again (3 tries). A delay off while the delay line
    kept time fails at once: that is the lab's fault, not the machine's."""
    for attempt in range(3):
        meta, out = recorded(tmp, name, rec)
        if on_time(meta) or not delay_line_was_late(meta):
            return meta, out
        time.sleep(10)
    return meta, out


def _rtt_ok(target: float) -> Any:
    return lambda meta: all(abs(h["rtt_ms"] - target) <= 1.0 for h in meta["handshakes"])


@pytest.fixture(scope="module")
def rtt10_pooled(lab_dir: Path) -> tuple[dict[str, Any], Path]:
    # the issue's own check: through PgBouncer, on the bridge, 10 ms added to the client's link
    return recorded_on_time(lab_dir, "rtt10-pgbouncer",
                            Recording("seqscan-10k", via="pgbouncer", network="bridge",
                                      conditions=Conditions(delay_ms=10)), _rtt_ok(10.0))


@pytest.mark.lab
def test_delay_10ms_is_the_handshake_round_trip(rtt10_pooled: tuple[dict[str, Any], Path]
                                                ) -> None:
    meta, out = rtt10_pooled
    tshark_rtt = initial_rtts_ms(out)
    (h,) = meta["handshakes"]  # the pooled server connection was opened before the capture
    assert h["server"] == f"{meta['addresses']['pooler']}:{meta['ports']['pgbouncer']}"
    # the capture sits at the pooler: the SYN-ACK leaves at once, the client's ACK is held
    assert abs(tshark_rtt[h["client"]] - 10.0) <= 1.0, tshark_rtt
    assert h["rtt_ms"] == pytest.approx(tshark_rtt[h["client"]], abs=0.002)
    assert h["synack_to_ack_ms"] > 9.0 and h["syn_to_synack_ms"] < 1.0, h
    line = meta["conditions"]["delay_line_client"]
    # the client's packets through the line: its handshake, request and ACKs; how many ACKs
    # depends on how many segments each covers (69 to 400 seen), so only that it carried them
    assert line["packets"] > 30 and line["delay_ms"] == 10
    assert line["enobufs"] == line["queue_dropped"] == line["user_dropped"] == 0
    assert line["late_us_median"] < 1000, line


@pytest.mark.lab
def test_delay_kernel_figures_for_every_sender(rtt10_pooled: tuple[dict[str, Any], Path]
                                               ) -> None:
    meta, _ = rtt10_pooled
    socks = by_direction(meta)
    assert set(socks) == {"server->pooler", "pooler->client"}
    for s in socks.values():
        assert_sane(s)
    # the kernel's own round trip agrees: the client's link has the delay, the back link not
    assert abs(socks["pooler->client"]["minrtt_ms"] - 10.0) <= 1.0, socks["pooler->client"]
    assert socks["server->pooler"]["minrtt_ms"] < 2.0, socks["server->pooler"]
    assert meta["congestion_control"].startswith("cubic")
    assert "--delay 10" in meta["remake"]


@pytest.mark.lab
def test_loss_2pct_retransmits_and_the_kernel_counts_them(lab_dir: Path) -> None:
    meta, out = recorded(lab_dir, "loss2-direct",
                         Recording("seqscan-10k", via="direct", network="bridge",
                                   conditions=Conditions(loss_pct=2)))
    loss = meta["conditions"]["loss"]
    assert loss["dropped"] > 0 and 0 < loss["achieved_pct"] < 10, loss
    server = f"{meta['addresses']['server']}"
    # Every segment the server sent again, as tshark sees it: at a 0.1 ms round trip tshark
    # calls a quick retransmission "out of order" (in one CI run, every one of them), so
    # count both (the capture is the server's egress, where nothing else goes backwards).
    again = tshark(out, "-Y", f"ip.src == {server} && tcp.len > 0 && "
                   "(tcp.analysis.retransmission || tcp.analysis.out_of_order)")
    (sock,) = by_direction(meta).values()
    assert_sane(sock)
    # the kernel's counter against the capture: equal in most runs, one apart in one CI run
    # (22 counted, 21 seen): a retransmission can leave after the capture stops or go out as a
    # probe tshark files under another name
    assert len(again) > 0 and abs(sock["retrans"] - len(again)) <= max(1, len(again) // 10), (
        sock, len(again))
    assert sock["bytes_retrans"] > 0


@pytest.mark.lab
def test_loss_back_drops_the_servers_segments_to_the_pooler(lab_dir: Path) -> None:
    """After the capture point (the pooler's interface): the capture holds each lost segment
    and its retransmission, and the server's socket counts them."""
    meta, out = recorded(lab_dir, "lossback2-pooled",
                         Recording("seqscan-10k", via="pgbouncer", network="bridge",
                                   conditions=Conditions(loss_back_pct=2)))
    loss = meta["conditions"]["loss_back"]
    assert loss["dropped"] > 0 and 0 < loss["achieved_pct"] < 10, loss
    assert "loss" not in meta["conditions"]
    assert "the pooler's namespace" in meta["conditions"]["how"]["loss_back"]
    server = meta["addresses"]["server"]
    again = tshark(out, "-Y", f"ip.src == {server} && tcp.len > 0 && "
                   "(tcp.analysis.retransmission || tcp.analysis.out_of_order)")
    sock = by_direction(meta)["server->pooler"]
    assert_sane(sock)
    assert len(again) > 0 and abs(sock["retrans"] - len(again)) <= max(1, len(again) // 10), (
        sock, len(again))
    assert by_direction(meta)["pooler->client"]["retrans"] == 0


@pytest.mark.lab
def test_delay_back_and_cold_pool_time_both_handshakes(lab_dir: Path) -> None:
    def on_time(meta: dict[str, Any]) -> bool:
        rtt = {h["server"].rsplit(":", 1)[1]: h["rtt_ms"] for h in meta["handshakes"]}
        return abs(rtt.get("6432", 0) - 2.0) <= 1.0 and abs(rtt.get("5432", 0) - 5.0) <= 1.0

    meta, out = recorded_on_time(lab_dir, "rtt2-back5-pgbouncer",
                                 Recording("seqscan-10k", via="pgbouncer", network="bridge",
                                           warm_pool=False,
                                           conditions=Conditions(delay_ms=2, delay_back_ms=5)),
                                 on_time)
    rtt = {h["server"].rsplit(":", 1)[1]: h["rtt_ms"] for h in meta["handshakes"]}
    assert set(rtt) == {"6432", "5432"}, meta["handshakes"]
    assert abs(rtt["6432"] - 2.0) <= 1.0 and abs(rtt["5432"] - 5.0) <= 1.0, rtt
    assert meta["conditions"]["delay_line_pooler"]["packets"] > 0
    socks = by_direction(meta)
    assert abs(socks["server->pooler"]["minrtt_ms"] - 5.0) <= 1.0, socks["server->pooler"]


@pytest.mark.lab
def test_delay_back_is_in_force_before_the_pool_is_warmed(lab_dir: Path) -> None:
    """A warm pool's server connection carries the back link's delay from its first packet,
    as on a real network: the kernel's least round trip on it is the delay. (Warmed before
    the delay line, it kept the least round trip of a path of microseconds, and the kernel's
    reading called every sample with data waiting a queue: network.)"""
    # a late delay line makes round trips longer, never shorter: the least is the delay
    meta, _ = recorded(lab_dir, "back5-warm-pgbouncer",
                       Recording("seqscan-10k", via="pgbouncer", network="bridge",
                                 conditions=Conditions(delay_back_ms=5)))
    assert meta["handshakes"] and all(h["server"].endswith(":6432")
                                      for h in meta["handshakes"])  # the pool was warm
    sock = by_direction(meta)["server->pooler"]
    assert sock["counted_from"] == "the sample before the client started", sock
    assert abs(sock["minrtt_ms"] - 5.0) <= 1.0, sock
    # the delay is the path's own round trip, not a queue (warmed first: network, most samples)
    assert sock["sample_shares"]["network"] < 0.5, sock
    assert meta["conditions"]["delay_line_pooler"]["packets"] > 0


@pytest.mark.lab
def test_slow_reader_closes_the_window_and_the_kernel_says_receiver(lab_dir: Path) -> None:
    # psql reads 16 KB at a time: at 250 KB/s every 65 ms, past the receiver's delayed-ACK
    # timer (40 ms), so the full buffer is advertised as a zero window before each read (at
    # 2 MB/s reads come every 8 ms and each one's window update is all the wire shows)
    meta, out = recorded(lab_dir, "slowreader-direct",
                         Recording("seqscan-10k", via="direct", network="bridge", rows=3000,
                                   conditions=Conditions(slow_reader=250_000)))
    # 3,000 rows (~345 KB) read at 250 KB/s take more than a second however fast the network
    assert meta["client_seconds"] >= 1.0
    assert tshark(out, "-Y", "tcp.analysis.zero_window")
    (sock,) = by_direction(meta).values()
    assert_sane(sock, result_bytes=330_000)
    assert sock["dominant_limit"] == "receiver_window", sock
    assert sock["rwnd_limited_share"] >= 0.5


@pytest.mark.lab
def test_small_client_buffer_caps_the_window(lab_dir: Path) -> None:
    meta, out = recorded(lab_dir, "rcvbuf16k-direct",
                         Recording("seqscan-10k", via="direct", network="bridge",
                                   conditions=Conditions(client_rcvbuf=16384)))
    assert meta["tcp_rmem"]["client"] == [4096, 16384, 16384]
    assert meta["tcp_rmem"]["server"] != [4096, 16384, 16384]
    # the client's scaled window never exceeds its buffer
    wins = [int(w) for w in tshark(out, "-Y", f"ip.src == {meta['addresses']['client']} && "
                                   "tcp.flags.syn == 0", "-T", "fields",
                                   "-e", "tcp.window_size")]
    assert wins and max(wins) <= 16384, max(wins)
    # and the server fills it (tshark's "window full": bytes in flight reach the window)
    assert tshark(out, "-Y", "tcp.analysis.window_full")
    (sock,) = by_direction(meta).values()
    assert_sane(sock)
    # The kernel counts rwnd_limited only while data waits queued behind the window: with a
    # reader that keeps up and 8 KB writes into a 9 KB window, one CI run counted 0 ms of its
    # 12 ms busy (another 12 of 20), so its count is not asserted here.


# -- nothing left behind ----------------------------------------------------------------------

def _lab_processes() -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if "pktflow-lab-" in ln or "while kill -0" in ln]


@pytest.mark.lab
def test_failure_mid_setup_leaves_nothing(lab_dir: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    """The loss rule fails after the servers, the delay line and its rule are up."""
    skip_unless_lab()
    from pktflow.lab import conditions

    monkeypatch.setattr(conditions, "loss_rules", lambda *a: [["iptables", "-A", "INPUT",
                                                               "--no-such-option"]])
    before = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    with pytest.raises(LabError, match="no-such-option"):
        record(Recording("seqscan-10k", via="pgbouncer", network="bridge",
                         conditions=Conditions(delay_ms=10, loss_pct=2)),
               lab_dir / "failed.pcap.gz")
    after = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"pktflow-{os.getpid()}-" not in after and after == before
    assert not _lab_processes()
    assert not (lab_dir / "failed.pcap.gz").exists()


@pytest.mark.lab
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_run_leaves_nothing_and_the_next_run_works(lab_dir: Path,
                                                               sig: signal.Signals) -> None:
    skip_unless_lab()
    assert not _lab_processes(), "a lab run is already going on here"
    env = os.environ | {"PYTHONPATH": str(ROOT / "analyzer")}
    out = lab_dir / f"interrupted-{sig.name}.pcap"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pktflow.lab", "record", "--scenario", "seqscan-10k", "--via",
         "pgbouncer", "--network", "bridge", "--delay", "10", "--loss", "1",
         "--slow-reader", "100000", "-o", str(out)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    # interrupt while everything runs: the delay line, the samplers, the slow client
    end = time.monotonic() + 60
    while not any("delayline" in ln for ln in _lab_processes()):
        assert proc.poll() is None, proc.communicate()[0].decode()
        assert time.monotonic() < end, "the delay line never started"
        time.sleep(0.1)
    time.sleep(1.0)
    ns = f"pktflow-{proc.pid}-"
    assert ns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    proc.send_signal(sig)
    text = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 130, text
    assert "interrupted" in text
    assert ns not in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                    text=True).stdout
    end = time.monotonic() + 5
    while _lab_processes() and time.monotonic() < end:
        time.sleep(0.1)
    assert not _lab_processes()
    assert not out.exists() and not out.with_suffix(".json").exists()
    # and a run right after works
    meta, _ = recorded_on_time(lab_dir, f"after-{sig.name}",
                               Recording("seqscan-10k", via="pgbouncer", network="bridge",
                                         conditions=Conditions(delay_ms=10)), _rtt_ok(10.0))
    (h,) = meta["handshakes"]
    assert abs(h["rtt_ms"] - 10.0) <= 1.0, h
