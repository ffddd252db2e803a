"""The whole CLI in-process: output formats, exit codes, one-line errors, never a traceback."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from craft import frame, tcp_segment, write_pcap

from pktflow.cli import Env, main
from pktflow.errors import ExitCode
from pktflow.report.relays import MAX_ROWS

ROOT = Path(__file__).resolve().parent.parent
DIRECT = ROOT / "captures" / "seqscan-10k-direct-loopback.pcap"


def cli(*argv: str, width: int = 100) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Env(stdout=out, stderr=err, width=width))
    return code, out.getvalue(), err.getvalue()


def test_text_report_explains_the_capture() -> None:
    code, out, err = cli("analyze", str(DIRECT), width=400)
    assert code == 0 and err == ""
    assert "SELECT * FROM t10k" in out and "10,000" in out
    assert "1 ACK per 2 segments, 16,384 B" in out
    assert "delayed-ACK pacing, not a round-trip limit" in out


def test_json_report_schema() -> None:
    code, out, _ = cli("analyze", "--format", "json", str(DIRECT))
    report = json.loads(out)
    assert code == 0 and report["schema"] == "pktflow.report/1"
    (conn,) = report["connections"]
    for key in ("id", "client", "server", "handshake_seen", "start_s", "end_s", "closed_by",
                "directions", "protocol", "startup", "decode_started_at", "messages",
                "queries"):
        assert key in conn
    for d in conn["directions"].values():
        for key in ("payload_bytes", "data_segments", "max_segment", "mss", "window_scale",
                    "window_scale_known", "window_scale_lower_bound", "retransmitted_segments",
                    "retransmitted_bytes", "out_of_order_segments", "gaps", "missing_bytes",
                    "truncated_bytes", "zero_window_events", "window_updates", "acks",
                    "window", "in_flight", "flights", "rtt_ms", "goodput_bps", "verdict"):
            assert key in d
    q = conn["queries"][0]
    assert 0 <= q["sent_s"] <= q["first_response_s"] <= q["last_response_s"]


def test_jsonl_one_report_per_line() -> None:
    code, out, _ = cli("analyze", "--format", "jsonl", str(DIRECT), str(DIRECT))
    lines = out.splitlines()
    assert code == 0 and len(lines) == 2 and all(json.loads(x)["schema"] for x in lines)


@pytest.mark.parametrize("make,code,words", [
    (lambda p: None, ExitCode.NO_FILE, "no such file"),
    (lambda p: p.mkdir(), ExitCode.NO_FILE, "is a directory"),
    (lambda p: p.write_bytes(b""), ExitCode.NOT_A_CAPTURE, "empty"),
    (lambda p: p.write_text("hello"), ExitCode.NOT_A_CAPTURE, "not a pcap"),
])
def test_bad_input_one_line_and_exit_code(tmp_path: Path, make, code, words) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "x.pcap"
    make(p)
    got, out, err = cli("analyze", str(p))
    assert got == code and words in err and str(p) in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_damaged_capture_reports_what_precedes(tmp_path: Path) -> None:
    data = DIRECT.read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(data[:len(data) // 2])
    code, out, err = cli("analyze", "--format", "json", str(cut))
    report = json.loads(out)
    assert code == ExitCode.DAMAGED
    assert report["capture"]["damage"]["frame"] > 1
    assert any(f["code"] == "capture-damaged" for f in report["findings"])
    assert "byte offset" in err and "frame" in err and len(err.strip().splitlines()) == 1


def test_strict_turns_error_findings_into_exit_1(tmp_path: Path) -> None:
    query = b"Q\x00\x00\x00\x0eselect 1;\x00"
    answer = b"C\x00\x00\x00\x0dSELECT 1\x00Z\x00\x00\x00\x05I"
    seg = tcp_segment(query, flags="PA", sport=40000, dport=5432)
    back = tcp_segment(answer, flags="PA", src="10.0.0.2", dst="10.0.0.1", sport=5432,
                       dport=40000, seq=1, ack=1000 + len(query))
    ok = write_pcap(tmp_path / "ok.pcap", [frame(seg, 1), frame(back, 1)])
    assert cli("analyze", "--strict", str(ok))[0] == 0
    # decoding has begun (a query answered and its cycle closed: PostgreSQL); then a length
    # under 4: malformed framing
    bad = tcp_segment(b"Q\x00\x00\x00\x02" + b"Q" * 40, flags="PA", sport=40000, dport=5432,
                      seq=1000 + len(query))
    p = write_pcap(tmp_path / "bad.pcap", [frame(seg, 1), frame(back, 1), frame(bad, 1)])
    code, out, _ = cli("analyze", "--strict", "--format", "json", str(p))
    assert any(f["severity"] == "error" for f in json.loads(out)["findings"])
    assert code == ExitCode.FINDINGS


def test_installed_console_script_runs() -> None:
    proc = subprocess.run([sys.executable, "-m", "pktflow", "analyze", str(DIRECT), "--format",
                           "json"], capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT / "analyzer"), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and json.loads(proc.stdout)["connections"]


def test_many_captures_in_parallel_keep_order_and_errors(tmp_path: Path) -> None:
    caps = sorted((ROOT / "captures").glob("*.pcap"))
    missing = tmp_path / "missing.pcap"
    argv = [str(p) for p in caps[:2]] + [str(missing)] + [str(p) for p in caps[2:]]
    code, out, err = cli("analyze", "--format", "jsonl", *argv)
    lines = [json.loads(line) for line in out.splitlines()]
    files = [x["capture"]["file"] if "capture" in x else x["file"] for x in lines]
    assert files == argv  # one line per input, the missing one's too, in input order
    assert lines[2] == {"schema": "pktflow.error/1", "file": str(missing),
                        "message": f"{missing}: no such file", "reason": "no such file",
                        "frame": None, "offset": None, "exit_code": int(ExitCode.NO_FILE)}
    assert code == ExitCode.NO_FILE
    assert err.strip().splitlines() == [f"pktflow: {missing}: no such file"]


@pytest.mark.parametrize("cores", [1, 4], ids=["one process", "in parallel"])
def test_jsonl_lines_match_inputs_with_two_unreadable(
        tmp_path: Path, cores: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """`analyze --format jsonl a b c d`, b missing and d not a capture: four lines, in input
    order, each failure a line naming its file, exit code and reason; the exit code is the
    worst, as before."""
    monkeypatch.setattr("os.cpu_count", lambda: cores)
    text = tmp_path / "notes.txt"
    text.write_text("not a capture\n")
    argv = [str(DIRECT), str(tmp_path / "gone.pcap"), str(DIRECT), str(text)]
    code, out, err = cli("analyze", "--format", "jsonl", *argv)
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == 4
    assert [x["schema"] for x in lines] == ["pktflow.report/1", "pktflow.error/1",
                                           "pktflow.report/1", "pktflow.error/1"]
    assert [lines[1]["file"], lines[3]["file"]] == [argv[1], argv[3]]
    assert (lines[1]["exit_code"], lines[3]["exit_code"]) == (ExitCode.NO_FILE,
                                                              ExitCode.NOT_A_CAPTURE)
    assert lines[3]["reason"].startswith("not a pcap or pcapng capture")
    assert code == ExitCode.NOT_A_CAPTURE and len(err.strip().splitlines()) == 2


def test_jsonl_keeps_a_line_for_an_input_that_hit_a_bug(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug on one input (here a stand-in) is that input's line, not the end of the run."""
    import pktflow.cli

    real = pktflow.cli.analyze

    def flaky(path: str, *a: object, **k: object) -> object:
        if path == "boom.pcap":
            raise ZeroDivisionError("stand-in")
        return real(path, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr("os.cpu_count", lambda: 1)
    monkeypatch.setattr(pktflow.cli, "analyze", flaky)
    code, out, _ = cli("analyze", "--format", "jsonl", str(DIRECT), "boom.pcap")
    lines = [json.loads(line) for line in out.splitlines()]
    assert [x["schema"] for x in lines] == ["pktflow.report/1", "pktflow.error/1"]
    assert lines[1]["exit_code"] == ExitCode.INTERNAL == code
    assert "ZeroDivisionError" in lines[1]["reason"]


def _scan(tmp_path: Path, n: int) -> Path:
    """A capture of n connection attempts refused with a RST."""
    scan = []
    for port in range(20000, 20000 + n):
        scan.append(tcp_segment(sport=port, seq=100, ack=0, flags="S"))
        scan.append(tcp_segment(src="10.0.0.2", dst="10.0.0.1", sport=5432, dport=port,
                                seq=0, ack=101, flags="RA"))
    return write_pcap(tmp_path / "scan.pcap", [frame(p, 1) for p in scan])


SPILLS = 3000  # connections whose records are more than the megabyte the core holds in memory


def test_many_captures_in_parallel_write_what_each_alone_writes(tmp_path: Path) -> None:
    """Worker processes hand back their output: the lines are what each capture alone gives,
    in input order, also for a capture whose records went to the core's temporary file."""
    big = _scan(tmp_path, SPILLS)
    code, out, err = cli("analyze", "--format", "jsonl", str(big), str(DIRECT))
    assert code == 0, err
    alone = [cli("analyze", "--format", "jsonl", str(p))[1] for p in (big, DIRECT)]
    assert out == "".join(alone)
    assert len(json.loads(out.splitlines()[0])["connections"]) == SPILLS


def test_json_of_several_captures_is_refused_with_a_pointer_to_jsonl() -> None:
    code, out, err = cli("analyze", "--format", "json", str(DIRECT), str(DIRECT))
    assert code == ExitCode.USAGE and out == ""
    assert "--format jsonl" in err and len(err.splitlines()) == 1


def test_temporary_files_that_cannot_be_written_are_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full or read-only TMPDIR: one line naming the capture, the directory and the reason,
    exit code 8, no traceback."""
    big = _scan(tmp_path, SPILLS)
    nowhere = tmp_path / "no-such-dir"
    monkeypatch.setenv("TMPDIR", str(nowhere))
    code, out, err = cli("analyze", "--format", "json", str(big))
    assert code == ExitCode.NO_SPACE and out == ""
    assert err == (f"pktflow: {big}: cannot write the report's temporary file in "
                   f"{nowhere} (No such file or directory (os error 2)); set TMPDIR to a "
                   f"directory with room\n")


@pytest.mark.parametrize("width", [80, 100, 160])
def test_overview_is_whole_in_a_narrow_terminal(width: int) -> None:
    """The connection overview at 80 columns: every header, endpoint, count and verdict in
    full (endpoints and a long verdict take a second line), nothing cut with an ellipsis."""
    capture = str(ROOT / "captures" / "seqscan-10k-pgbouncer-bridge.pcap")
    _, report, _ = cli("analyze", "--format", "json", capture)
    code, out, _ = cli("analyze", capture, width=width)
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if "connections, busiest first" in line)
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("╭"))
    overview = "\n".join(lines[start:end])
    assert code == 0 and "…" not in overview
    assert all(len(line) <= width for line in lines[start:end])
    words = overview.split()
    for head in ("conn", "role", "packets", "queries", "limit"):
        assert head in words
    for c in json.loads(report)["connections"]:
        for end_ in ("client", "server"):
            assert f"{c[end_]['ip']}:{c[end_]['port']}" in words
        assert f"{c['packets']:,}" in words
        s2c = c["directions"]["server_to_client"]
        assert f"{s2c['payload_bytes']:,}" in words
        limit = s2c["verdict"]["limit"]
        assert limit in words or all(part in words for part in limit.split("_"))


@pytest.mark.parametrize("width", [80, 100, 160])
@pytest.mark.parametrize("capture", ["seqscan-10k-pgbouncer-bridge", "pgdump-20k-pgbouncer-loopback",
                                     "pgbench-txn-pgbouncer-loopback"])
def test_relay_table_is_whole_in_a_narrow_terminal(capture: str, width: int) -> None:
    """The relay panel's matched queries at 80 columns: every id, delay, segment count and
    median size in full (the segmentation moves to a table of its own), titles not cut."""
    path = str(ROOT / "captures" / f"{capture}.pcap")
    _, report, _ = cli("analyze", "--format", "json", path)
    code, out, _ = cli("analyze", path, width=width)
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("╭─ Relay"))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("╰"))
    # the panel's text, its borders and the wrapping of long lines taken away
    words = " ".join(line.strip("│ ") for line in lines[start + 1:end]).split()
    assert code == 0 and all(len(line) <= width for line in lines)
    assert "sizes in -> out" in " ".join(words)
    text = " ".join(words)
    queries = json.loads(report)["relays"][0]["queries"]
    drawn = [p for p in queries if f"{p['front']['connection']}#{p['front']['query_index']} via "
             f"{p['back']['connection']}#{p['back']['query_index']} " in text]
    assert len(drawn) == min(len(queries), MAX_ROWS)
    for p in drawn:
        assert f"{p['segments_in']:,} -> {p['segments_out']:,}" in text
        if p["segment_median_in"] is not None:
            assert f"{p['segment_median_in']:,} -> {p['segment_median_out']:,}" in text
        if p["relay_cost_ms"] is not None:
            assert f"{p['relay_cost_ms']:,.2f}" in words


@pytest.mark.parametrize("width", [80, 120])
def test_query_tables_are_whole_in_a_narrow_terminal(width: int) -> None:
    """A connection's queries at 80 columns as at 120: a line of numbers each, every number in
    full, starting with the query's number (#1 is c1#1), and under it its SQL whole, then its
    command tag."""
    capture = str(ROOT / "captures" / "seqscan-10k-pgbouncer-bridge.pcap")
    _, report, _ = cli("analyze", "--format", "json", capture)
    code, out, _ = cli("analyze", capture, width=width)
    assert code == 0 and all(len(line) <= width for line in out.splitlines())
    for c in json.loads(report)["connections"]:
        panel = out[out.index(f"╭─ {c['id']} "):]
        panel = panel[:panel.index("╰")]
        lines = [line.strip("│ ").split() for line in panel.splitlines()]
        for i, q in enumerate(c["queries"]):
            numbers = [f"{q['rows']:,}", f"{q['response_bytes']:,}",
                       f"{q['first_frame']}-{q['last_frame']}"]
            (at,) = [k for k, words in enumerate(lines)
                     if words[:1] == [f"#{i}"] and all(n in words for n in numbers)]
            said = " ".join(w for words in lines[at + 1:] for w in words)
            assert said.startswith(" ".join(q["sql"].split()) + " -> " + q["command_tag"])


@pytest.mark.parametrize("capture", sorted((ROOT / "captures").glob("*.pcap")),
                         ids=lambda p: p.stem)
def test_the_cores_json_is_what_json_dumps_writes_of_the_report(capture: Path) -> None:
    """The core writes the report's JSON itself, a connection at a time: byte for byte what
    json.dumps makes of the whole report as Python reads it, indented and compact."""
    from pktflow.pipeline import analyze

    report = analyze(str(capture))
    for indented, dumps in ((True, {"indent": 2}), (False, {"separators": (",", ":")})):
        out = io.StringIO()
        report.core.write_json(out, indented)
        assert out.getvalue() == json.dumps(report, **dumps) + "\n"  # type: ignore[arg-type]


def test_a_json_run_does_not_import_rich(tmp_path: Path) -> None:
    """JSON and jsonl are written by the core: rich, a tenth of a small run's time, is loaded
    only for text."""
    capture = Path(__file__).resolve().parent.parent / "captures" / "error-direct-loopback.pcap"
    child = ("import sys\nfrom pktflow.cli import main\n"
             f"code = main(['analyze', '--format', sys.argv[1], {str(capture)!r}])\n"
             "print(code, 'rich' in sys.modules)")
    for fmt, rich in (("json", False), ("jsonl", False), ("text", True)):
        out = subprocess.run([sys.executable, "-c", child, fmt], capture_output=True, text=True,
                             check=True, cwd=tmp_path)
        assert out.stdout.splitlines()[-1] == f"0 {rich}", (fmt, out.stderr[-500:])
