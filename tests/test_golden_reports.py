"""The one engine reproduces every value of the reports pktflow wrote before it.

tests/golden/reports/ holds `pktflow analyze --format json` of every capture in captures/ and
tests/regressions/, of the crafted inputs other tests build (tests/golden/crafted/), and of
cuts of two real captures, each with its exit code and stderr, as written by the last release of
the previous engines (Python and C). A deliberate change of a value is made here, listed in
DIFFERENCES with its reason, never by rewriting the golden file.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pktflow.cli import Env, main

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "reports"
CUT = re.compile(r"cut-(?P<capture>.+)-(?P<offset>\d+)")

# (golden name, JSON path) -> why the engine now differs from the golden value. Empty: none.
DIFFERENCES: dict[tuple[str, str], str] = {
    ("seqscan-10k-pgbouncer-pktbuf65536-loopback",
     ".connections[1].directions.server_to_client.verdict.limit"):
        "receiver_window, was sender: the verdict is now judged on shares of time. PgBouncer's "
        "window to the server (a pooled connection: no handshake, the scale unknown) was "
        "closed 78% of the time and fell to zero while PgBouncer waited on psql; the old rule "
        "judged an unknown scale by zero windows alone and counted flights, not time",
    ("seqscan-10k-pgbouncer-bridge", ".connections[0].directions.server_to_client.verdict.limit"):
        "latency 48%, was sender: after its 80 KB flights PgBouncer's next 4 KB write left 22 "
        "us after psql's ACK, which came 1.4 ms after the data: the pooler's writes waited "
        "for ACKs (its send buffer), the wait is the round trip's, not its own (issue 31 "
        "rule 4)",
    ("seqscan-10k-pgpool-bridge", ".connections[1].directions.server_to_client.verdict.limit"):
        "sender 61%, was receiver_window 36%: the headline names the largest share of the "
        "transfer's time (issue 31 rule 5), not the window at half of the busy time",
    ("seqscan-10k-pgpool-loopback", ".connections[0].directions.server_to_client.verdict.limit"):
        "sender, was receiver_window: 9 of 15 flights ended with psql's window full, but the "
        "window was closed 12% of the time; Pgpool-II's own pace (it reads the server 1 KB at "
        "a time) held 86% of it",
}
# (golden name, JSON path) as regular expressions -> why: differences that touch many reports
# (added keys, rewritten sentences), each matched in full against the name and the path.
DIRECTION = r"\.connections\[\d+\]\.directions\.(client_to_server|server_to_client)"
DIFFERENCE_PATTERNS: dict[tuple[str, str], str] = {
    (".*", DIRECTION + r"\.(writes|limits)"):
        "added: each direction's writes (PSH-delimited, byte-weighted sizes) and where its "
        "time went (seconds per limit, the longest run of each), issue 24 items 1 and 2",
    (".*", DIRECTION + r"\.verdict\.mixed_with"):
        "added: a near-tie (two limits within 5 points) is said as mixed, naming both (issue 31 "
        "rule 5)",
    (".*", DIRECTION + r"\.verdict\.(shares|receiver)"):
        "added: the verdict's shares of the transfer time per limit, and for a receiver-window "
        "limit whether the buffer or the application held it",
    (".*", DIRECTION + r"\.verdict\.(saving_s|without|saving_model)"):
        "added: what the transfer would save without the limit its verdict names, what "
        "'without' means (or why there is no saving) and the model's name, issue 35",
    (".*", r"\.connections\[\d+\]\.round_trips\.(saving_s|pipelined_saving_s|without)"):
        "added: what the conversation would save with the client next to the server and with "
        "its queries pipelined, issue 35",
    (".*", r"\.relays\[\d+\]\.verdict\.(saving_s|without)"):
        "added: what going direct would save (all the relay added), issue 35",
    (".*", DIRECTION + r"\.verdict\.(summary|evidence_frames(\[\d+\])?)"):
        "the verdict's sentence now quotes the shares of time it is judged on and the frames "
        "of the dominant limit's first and longest runs",
    (".*", r"\.connections\[\d+\]\.round_trips"):
        "added: a PostgreSQL conversation of two queries or more says what its round trips "
        "cost (queries x the handshake's round trip) against the time its responses moved, "
        "issue 24 item 4",
    (".*", r"\.relays\[\d+\]\.(server_write|forward_write)"):
        "added: the server's and the relay's habitual write sizes (PSH-delimited), issue 24 "
        "item 1",
    (r"(cut-)?(seqscan-10k|pgdump-20k)-(pgbouncer|pgpool)-.*", r"\.relays\[0\]\.verdict\.summary"):
        "the re-split is read from writes, not segments: 'the server wrote 8,192 bytes at a "
        "time and the relay wrote them on in 4,096-byte writes' (8,170 for Pgpool-II), on "
        "loopback and on MTU-1500 captures alike",
    (r"(cut-)?seqscan-10k-(pgbouncer|pgpool)-bridge(-\d+)?", r"\.relays\[0\]\.verdict\.setting"):
        "on an MTU-1500 capture the writes show PgBouncer's 4 KB forwarding (pkt_buf) and "
        "Pgpool-II's 8 KB buffer, which the segments (all 1,448 bytes) hid: the setting names "
        "them, as on loopback, instead of sending the reader to the front leg's verdict",
    (".*", r"\.relays\[\d+\]\.verdict\.(limit|legs|relay_ms|front_leg_ms)"):
        "added: the relay judged as a component from both legs' limits (client, network, "
        "pooler, server_network, server), and the client's extra time split between what the "
        "relay did and the client leg's slower drain, issue 24 item 3",
    (".*", r"\.relays\[\d+\]\.verdict\.(summary|setting)"):
        "the relay's verdict says which component set the pace and attributes its added time "
        "to it; a forwarding unit (pkt_buf) is the setting only where the pooler is the limit",
    (".*", r"\.relays\[\d+\]\.forwarding"):
        "added: how the relay forwarded its bulk responses, from both legs' packets side by "
        "side (each forwarded segment's delay after its back-leg twin, the bytes the relay "
        "held, which leg's window closed first), issue 37",
    (".*", r"\.relays\[\d+\]\.queries\[\d+\]\.relay_own_ms"):
        "added: of each matched query's relay cost, what the relay did itself (forwarding the "
        "request and the first byte), issue 37",
    ("regression-goodput-timestamp-jump",
     r"\.findings.*|\.connections\[0\]\.(capture_point\.evidence\[\d\]|directions\..*)"):
        "frames 4 and 8 of this fuzzed capture are stamped 30 years early and 43 minutes late "
        "(microseconds above a million): each is a time-jump finding naming its frame, and the "
        "times handed on keep one timeline, so the handshake, round trips, idle periods and "
        "rates are those of the 2.9 ms the connection lasted (issue 36)",
    (r"crafted-(00dea068e6607c1c|da74ea36bdcb9c16|db6255dc0ce718a4)",
     r"\.findings(\[\d+\](\.\w+)?(\[\d+\])?)?|\.connections\[0\]\.decode_stopped\.(reason|frame)"):
        "another protocol is named where a segment starts (an HTTP request line, a TLS record "
        "header): the connection is HTTP or TLS, said as information (issue 36), where it was "
        "'no framing' or 'not a startup' as a warning; the findings' order follows the severity",
    (r"crafted-703a7ea0b416f919",
     r"\.findings\[0\]\.(message|frames\[0\])|\.connections\[0\]\.decode_stopped\.\w+"):
        "the backend's bytes, which came first, are refused first: a type byte no backend sends",
    (r"crafted-(883bef4e75823890|bf0a89518eb3f776)|cut-seqscan-10k-pgbouncer-bridge-1576|"
     r"regression-relay-(segment-median-none|cost-unknown-worst)", ".*"):
        "a connection whose start the capture does not show is PostgreSQL only with proof, a "
        "request answered by its kind of response and a ReadyForQuery closing the cycle (or two "
        "requests answered), and its roles are those TCP or the ports gave, never swapped "
        "(issue 36): these captures' mid-stream legs show a Query without its answer, framing "
        "broken before any proof, or a frontend on the lower port, so they are not PostgreSQL "
        "and what depended on them (a relay, its pairs) goes",
    (".*", r"\.capture\.(tunnelled_packets|tunnels|duplicates|timeline)"):
        "added: the TCP packets taken out of tunnels (VXLAN, Geneve, GRE, ERSPAN, IP in IP) "
        "and per tunnel, the copies of packets captured twice, and where the timestamps jumped "
        "or stepped back, issue 36",
    (".*", r"\.connections\[\d+\]\.(authentication|startup\.(protocol_version|parameters))"):
        "added: every startup parameter and the protocol version asked for; how the client "
        "authenticated (method, SASL mechanisms, outcome, round trips, time), issue 33",
    (".*", r"\.connections\[\d+\]\.(cancel_request|queries\[\d+\]\.cancelled_by)"):
        "added: a CancelRequest linked to the connection whose BackendKeyData it names and to "
        "the query there that ended in 57014, with the time from the request to the error, "
        "issue 33",
    (".*", r"\.connections\[\d+\]\.(notices|notices_total|errors)"):
        "added: the NoticeResponses and ErrorResponses outside any query, each with every "
        "field sent and its frame and time, issue 33",
    (".*", r"\.connections\[\d+\]\.queries\[\d+\]\.(notices|notices_total|columns|"
           r"column_count|data_row_bytes)"):
        "added: the notices a query raised, its result's columns (RowDescription) and its "
        "DataRows' bytes, issue 33",
    (".*", r"\.connections\[\d+\]\.queries\[\d+\]\.error\.(localized_severity|"
           r"internal_position|internal_query|where|schema|table|column|data_type|constraint|"
           r"file|line|routine|frame|at_s)"):
        "added: an error's other fields where the server sent them (S, p, q, W, s, t, c, d, "
        "n, F, L, R), and the frame and time it came, issue 33",
    (".*", r"\.relays\[\d+\]\.(coupling|verdict)\.evidence_frames(\[\d+\])?"):
        "a relay's evidence includes its back legs' verdict frames, which are now the runs of "
        "the back leg's dominant limit",
}


def _at(doc: Any, path: str) -> Any:
    """The value at a JSON path as _diff writes it (".a.b[2].c")."""
    for key, index in re.findall(r"\.(\w+)|\[(\d+)\]", path):
        doc = doc[key] if key else doc[int(index)]
    return doc


def _bits_or_unmeasured(golden: Any, new: Any, report: Any, path: str) -> bool:
    """Bytes per second became bits per second; or no rate, for a transfer too small to
    measure (pktflow/rates.py: under 4 segments, or under 100 us, the span being the
    bytes over the golden rate)."""
    if new is not None:
        return isinstance(golden, (int, float)) and isinstance(new, int) and \
            abs(new - 8 * golden) <= 8
    owner = _at(report, path.rsplit(".", 1)[0])
    if "response_segments" in owner:
        nbytes, segments = owner["response_bytes"], owner["response_segments"]
    else:
        nbytes, segments = owner["payload_bytes"], owner["data_segments"]
    return segments < 4 or not golden or nbytes / golden < 100e-6


def _times_eight(golden: Any, new: Any, report: Any, path: str) -> bool:
    return bool(new == 8 * golden)


def _unknown_now(golden: Any, new: Any, report: Any, path: str) -> bool:
    return isinstance(golden, int) and new is None


def _attributed_anew(golden: Any, new: Any, report: Any, path: str) -> bool:
    return True


def _refused_decodes_nothing(golden: Any, new: Any, report: Any, path: str) -> bool:
    """A connection found not to be PostgreSQL loses what was decoded on the way."""
    conn = _at(report, path.split(".lost_bytes")[0])
    return new == 0 and conn["protocol"] == "unknown"


def _ports_give_the_roles(golden: Any, new: Any, report: Any, path: str) -> bool:
    return bool(golden == "application" and new == "port")


def _why_postgresql(golden: Any, new: Any, report: Any, path: str) -> bool:
    """A mid-stream connection's finding now says why it was taken as PostgreSQL, and names
    the frames of the request and answer that prove it besides the first decoded one."""
    finding = _at(report, re.sub(r"\.frames(\[\d+\])?$|\.message$", "", path))
    if finding["code"] != "pgwire-mid-stream":
        return False
    if path.endswith(".message"):
        return bool(new.startswith(golden + ", and it is taken as PostgreSQL because "))
    return isinstance(golden, list) and set(golden) <= set(new) or golden in finding["frames"]


def _mode_or_median(golden: Any, new: Any, report: Any, path: str) -> bool:
    """The commonest ACK was named when it was half of them or less; now the median is."""
    said = re.search(r"\((\d+)% of ACKs\)$", golden or "")
    return bool(said) and int(said[1]) <= 50 and new.startswith("ACKs vary: the median covers ")


# A change that touches many reports: (golden names, JSON paths) as regular expressions ->
# (why, a check of the new value against the golden one, given the new report).
def _zero_window_words(golden: Any, new: Any, report: Any, path: str) -> bool:
    from pktflow.tcp.findings import ZERO_WINDOW_WHY

    said = "its application was not reading fast enough"
    return isinstance(golden, str) and golden.endswith(said) \
        and new == golden.removesuffix(said) + ZERO_WINDOW_WHY


Check = Callable[[Any, Any, Any, str], bool]
BITS = ("goodput_bps held bytes per second; it is bits per second as its name says, and a "
        "transfer of fewer than 4 segments or under 100 us has no rate (issue 25)")
PATTERNS: list[tuple[re.Pattern[str], re.Pattern[str], str, Check]] = [
    (re.compile(".*"), re.compile(r"\.connections\[\d+\]\.roles_from"),
     "a connection without its handshake keeps the roles its ports gave: PostgreSQL decoding "
     "never swaps them (issue 36), so roles come from the port, not the application",
     _ports_give_the_roles),
    (re.compile(".*"), re.compile(r"\.connections\[\d+\]\.lost_bytes\.(frontend|backend)"),
     "a connection found not to be PostgreSQL reports nothing of what was tried on it: no "
     "messages, no bytes lost to PostgreSQL decoding (issue 36)", _refused_decodes_nothing),
    (re.compile(".*"), re.compile(r"\.findings\[\d+\]\.(message|frames(\[\d+\])?)"),
     "a connection seen mid-stream is PostgreSQL only with proof (issue 36), and its finding says "
     "which request was answered by its kind of response, and which ReadyForQuery closed the "
     "cycle", _why_postgresql),
    (re.compile(".*"), re.compile(r"\.findings\[\d+\]\.message"),
     "a zero window says the receive buffer was full of unread data, no longer that the "
     "application was not reading fast enough: a small buffer fills too, and the verdict says "
     "which (issue 31 rule 6)", _zero_window_words),
    (re.compile(".*"), re.compile(r"\.connections\[\d+\]\.(queries\[\d+\]|directions\.\w+)"
                                  r"\.goodput_bps"), BITS, _bits_or_unmeasured),
    (re.compile(".*"), re.compile(r"\.connections\[\d+\]\.directions\.\w+\.(best|worst)_100ms"
                                  r"\.bps"), BITS, _times_eight),
    (re.compile(".*"), re.compile(r"\.connections\[\d+\]\.queries\[\d+\]\.rows"),
     "a response cut by a capture gap or by the capture's end has unknown rows (null), not the "
     "DataRows seen so far (a lower bound, still in data_rows)", _unknown_now),
    (re.compile(".*"), re.compile(r"\.connections\[\d+\]\.directions\.\w+\.pattern"),
     "the ACK pattern names the commonest ACK only when it is most of them, else the median "
     "one: '1 ACK per 2 segments, 8,192 B (11% of ACKs)' beside a median of 12,265 B over 3 "
     "segments read as a contradiction (issue 39 item 9)", _mode_or_median),
    (re.compile("regression-relay-cost-unknown-worst"), re.compile(
        r"\.(findings(\[\d+\](\.\w+)?(\[\d+\])?)?|connections\[\d+\]\.queries\[\d+\]\.(response_bytes|"
        r"first_response_s|first_frame|goodput_bps)|relays\[0\]\.queries\[1\]\.("
        r"response_bytes\.back|frames\.back_first|first_byte_delay_ms))"),
     "bytes a backend gap hid count toward the response under way (as the sequence numbers "
     "say), a simple query answered before a backend gap closes when the next Query comes, and "
     "a short snapshot length's cut bytes and resyncs are one finding for the capture: this "
     "crafted capture has gaps in both directions and cut packets, so its responses are "
     "attributed anew and its findings folded", _attributed_anew),
]


def _explained(name: str, path: str, golden: Any, new: Any, report: Any) -> bool:
    if (name, path) in DIFFERENCES or any(re.fullmatch(n, name) and re.fullmatch(p, path)
                                          for n, p in DIFFERENCE_PATTERNS):
        return True
    return any(n.fullmatch(name) and p.fullmatch(path) and check(golden, new, report, path)
               for n, p, _, check in PATTERNS)


def _input(name: str, tmp_path: Path) -> Path:
    cut = CUT.fullmatch(name)
    if cut:
        data = (ROOT / "captures" / f"{cut['capture']}.pcap").read_bytes()
        path = tmp_path / "cut.pcap"
        path.write_bytes(data[:int(cut["offset"])])
        return path
    if name.startswith("crafted-"):
        return next((ROOT / "tests" / "golden" / "crafted").glob(name[8:] + ".*"))
    if name.startswith("regression-"):
        return ROOT / "tests" / "regressions" / f"{name[11:]}.pcap"
    return ROOT / "captures" / f"{name}.pcap"


def _diff(a: Any, b: Any, path: str, out: list[tuple[str, Any, Any, str]]) -> None:
    """Differences as (path, golden value, new value, what to say)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in a.keys() | b.keys():
            if k not in a or k not in b:
                out.append((f"{path}.{k}", a.get(k), b.get(k),
                            f"{path}.{k}: {'missing' if k not in a else 'added'}"))
            else:
                _diff(a[k], b[k], f"{path}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append((path, a, b, f"{path}: {len(b)} items, golden {len(a)}"))
        for i, (x, y) in enumerate(zip(a, b)):
            _diff(x, y, f"{path}[{i}]", out)
    elif a != b or type(a) is not type(b) and not {type(a), type(b)} <= {int, float}:
        out.append((path, a, b, f"{path}: {b!r}, golden {a!r}"))


@pytest.mark.parametrize("name", sorted(p.stem for p in GOLDEN.glob("*.json")))
def test_report_equals_the_golden_one(name: str, tmp_path: Path) -> None:
    golden = json.loads((GOLDEN / f"{name}.json").read_text())
    path = _input(name, tmp_path)
    out, err = io.StringIO(), io.StringIO()
    code = main(["analyze", str(path), "--format", "json"], Env(stdout=out, stderr=err))
    assert code == golden["exit"]
    stderr = re.sub(r"^pktflow: \S+?(?=[ :])", "pktflow: <file>", err.getvalue().strip(),
                    flags=re.M)
    assert stderr == golden["stderr"]
    if "report" not in golden:
        assert not out.getvalue().strip()
        return
    report = json.loads(out.getvalue())
    report["capture"]["file"] = None
    report["tool"] = None
    found: list[tuple[str, Any, Any, str]] = []
    _diff(golden["report"], report, "", found)
    unexplained = [say for path, a, b, say in found
                   if not _explained(name, path, a, b, report)]
    assert not unexplained, "\n".join(unexplained[:40])
