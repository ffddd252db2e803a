"""Protocol detail at least as Zeek and Suricata log it, and queries readable in any terminal
(issue 33): notices on their query, every startup parameter, how the client authenticated,
cancel requests linked to what they cancelled, every field of an error or notice, a result's
shape, fixed-length messages checked, no PostgreSQL errors on what is not PostgreSQL, and the
text report's query table. Each fact is checked in the JSON, the text and the HTML page; on the
lab's real captures (captures/logins-*, session-*) against tshark's pgsql dissector too; and a
capture with a cleartext password goes through every output format without showing it.
Crafted streams cover what real runs cannot produce."""

from __future__ import annotations

import html
import io
import json
import re
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tcpfeed import Flow, write_capture
from tsharkcheck import TSHARK

from pktflow.cli import Env, main
from pktflow.errors import ExitCode
from pktflow.lab.scenarios import LAB_PASSWORD

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "captures"
LOGINS = CAPTURES / "logins-direct-loopback.pcap"
SESSION = CAPTURES / "session-direct-loopback.pcap"
FLOW_FORMATS = ("text", "json", "svg", "html", "mermaid", "plantuml")
needs_tshark = pytest.mark.skipif(TSHARK is None, reason="tshark is not installed (Debian "
                                                           "package tshark)")


def cli(*argv: str, width: int = 80) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Env(stdout=out, stderr=err, width=width))
    return code, out.getvalue(), err.getvalue()


def report_of(path: Path) -> dict[str, Any]:
    code, out, err = cli("analyze", "--format", "json", str(path))
    assert code == ExitCode.OK and err == "", err
    return json.loads(out)  # type: ignore[no-any-return]


def flat(text: str) -> str:
    """Text as words: a panel's borders and its wrapping taken out."""
    return " ".join(re.sub(r"[│╭╮╰╯─┃┏┓┗┛━┡┩┠┨╇╈]", " ", text).split())


def text_of(path: Path, width: int = 80) -> str:
    code, out, err = cli("analyze", str(path), width=width)
    assert code == ExitCode.OK and err == "", err
    assert all(len(line) <= width for line in out.splitlines())
    return flat(out)


def page_of(path: Path, tmp_path: Path) -> str:
    out = tmp_path / f"{path.stem}.html"
    code, _, err = cli("report", str(path), "-o", str(out))
    assert code == ExitCode.OK, err
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", out.read_text())).split())


def tshark_rows(path: Path, fields: list[str], where: str = "pgsql") -> list[list[str]]:
    """tshark's pgsql fields per frame (several of a frame joined by '|')."""
    cmd = [TSHARK or "tshark", "-n", "-r", str(path), "-d", "tcp.port==5432,pgsql", "-Y", where,
           "-T", "fields", "-E", "separator=\t", "-E", "aggregator=|"]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [(line.split("\t") + [""] * len(fields))[:len(fields)] for line in out.splitlines()]


def frame_times(path: Path) -> dict[int, float]:
    rows = tshark_rows(path, ["frame.number", "frame.time_relative"], where="frame")
    return {int(n): float(t) for n, t in rows}


# -- authentication (captures/logins-direct-loopback.pcap) ---------------------------------

LOGINS_WANT = {  # connection -> method, mechanisms, mechanism, outcome, round trips
    "c1": ("sasl", ["SCRAM-SHA-256"], "SCRAM-SHA-256", "ok", 3),
    "c2": ("md5", [], None, "ok", 2),
    "c3": ("cleartext-password", [], None, "ok", 2),
    "c4": ("md5", [], None, "failed", 2),
}


def test_logins_authentication_in_json_text_and_html(tmp_path: Path) -> None:
    rep = report_of(LOGINS)
    conns = {c["id"]: c for c in rep["connections"]}
    for cid, (method, offered, chosen, outcome, trips) in LOGINS_WANT.items():
        a = conns[cid]["authentication"]
        assert (a["method"], a["mechanisms"], a["mechanism"], a["outcome"],
                a["round_trips"]) == (method, offered, chosen, outcome, trips), cid
        assert a["ms"] > 0 and a["last_frame"] > a["first_frame"]
    failed = conns["c4"]
    (err,) = failed["errors"]
    assert (err["severity"], err["code"], err["frame"]) == ("FATAL", "28P01",
                                                            failed["authentication"]["last_frame"])
    assert failed["queries"] == [] and conns["c1"]["queries"][0]["command_tag"] == "SELECT 1"
    said = [
        "authentication: SASL SCRAM-SHA-256 (offered: SCRAM-SHA-256), ok; 3 round trips",
        "authentication: MD5 password, ok; 2 round trips",
        "authentication: cleartext password, ok; 2 round trips",
        'authentication: MD5 password, failed (FATAL 28P01 password authentication failed for '
        'user "lab_md5"); 2 round trips',
    ]
    text, page = text_of(LOGINS), page_of(LOGINS, tmp_path)
    for line in said:
        assert line in text and line in page, line
    # the ladder names the refusal with its severity
    code, out, _ = cli("flow", str(LOGINS), "--connection", "c4", width=200)
    assert code == 0 and 'E(FATAL 28P01 password authentication failed for user "lab_md5")' in out


@needs_tshark
def test_logins_against_tshark() -> None:
    """The method is the first authentication request tshark decodes on the connection, the
    SASL mechanisms are the ones it shows offered and chosen, the round trips are the client's
    messages up to the deciding frame, and the time is between the frames tshark times."""
    rep = report_of(LOGINS)
    times = frame_times(LOGINS)
    rows = tshark_rows(LOGINS, ["frame.number", "tcp.srcport", "tcp.dstport", "pgsql.type",
                                "pgsql.authtype", "pgsql.auth.sasl.mech"])
    codes = {3: "cleartext-password", 5: "md5", 10: "sasl"}
    for conn in rep["connections"]:
        a, port = conn["authentication"], conn["client"]["port"]
        mine = [r for r in rows if port in (int(r[1]), int(r[2]))]
        first = next(int(r[4].split("|")[0]) for r in mine if r[4])
        assert a["method"] == codes[first]
        mechs = [r[5].split("|") for r in mine if r[5]]
        if a["method"] == "sasl":
            assert mechs == [a["mechanisms"], [a["mechanism"]]]  # offered, then chosen
        asked = [int(r[0]) for r in mine if int(r[1]) == port and int(r[0]) <= a["last_frame"]]
        assert len(asked) == a["round_trips"]  # Startup, then each password or SASL message
        assert a["first_frame"] == asked[0]
        want = (times[a["last_frame"]] - times[a["first_frame"]]) * 1e3
        assert abs(a["ms"] - want) < 0.002, (a["ms"], want)


def _client_messages(path: Path) -> list[tuple[int, bytes]]:
    """The clients' typed messages in the capture, read from its bytes (each connection's
    client stream after its StartupMessage), independently of pktflow."""
    from scapy.layers.inet import TCP
    from scapy.utils import rdpcap

    streams: dict[int, bytes] = {}
    for pkt in rdpcap(str(path)):
        if TCP in pkt and pkt[TCP].dport == 5432 and bytes(pkt[TCP].payload):
            streams[pkt[TCP].sport] = streams.get(pkt[TCP].sport, b"") + bytes(pkt[TCP].payload)
    out = []
    for data in streams.values():
        pos = struct.unpack("!I", data[:4])[0]  # the StartupMessage's length
        while pos + 5 <= len(data):
            t, ln = data[pos], struct.unpack("!I", data[pos + 1:pos + 5])[0]
            out.append((t, data[pos + 5:pos + 1 + ln]))
            pos += 1 + ln
    return out


def _secrets(path: Path) -> list[str]:
    """What the logins' clients sent to prove who they are: the cleartext password, the MD5
    hashes, SCRAM's nonces and proof; each must appear in no output."""
    found = [LAB_PASSWORD]
    for t, body in _client_messages(path):
        if t != ord("p"):
            continue
        text = body.rstrip(b"\0").decode("latin-1")
        if text.startswith("md5"):
            found.append(text)  # md5 + 32 hex digits: a hash of the password and the salt
        for part in re.split(r"[,\0]", text):
            if part[:2] in ("r=", "p="):
                found.append(part[2:])  # a SCRAM nonce, the client's proof
    return found


def test_the_logins_capture_holds_what_the_secret_test_looks_for() -> None:
    secrets = _secrets(LOGINS)
    assert LAB_PASSWORD.encode() in LOGINS.read_bytes()  # the cleartext login sent it as is
    assert sum(s.startswith("md5") for s in secrets) == 2  # the MD5 logins, good and wrong
    assert len(secrets) >= 5 and all(len(s) >= 16 for s in secrets)


def test_no_output_shows_a_password_a_hash_or_a_sasl_proof(tmp_path: Path) -> None:
    secrets = _secrets(LOGINS)
    outputs: dict[str, str] = {}
    cap = str(LOGINS)
    for width in (80, 300):
        outputs[f"analyze text {width}"] = cli("analyze", cap, width=width)[1]
    for fmt in ("json", "jsonl"):
        outputs[f"analyze {fmt}"] = cli("analyze", "--format", fmt, cap)[1]
    for fmt in FLOW_FORMATS:
        for extra in ((), ("--expand",), ("--explain",)):
            outputs[f"flow {fmt} {extra}"] = cli("flow", cap, "--all", "--format", fmt, *extra,
                                                 width=300)[1]
    for name in ("report.html", "plot.svg"):
        out = tmp_path / name
        code, _, err = cli("report" if name.endswith("html") else "plot", cap, "-o", str(out))
        assert code == 0, err
        outputs[name] = out.read_text()
    for fmt in ("text", "json"):
        outputs[f"compare {fmt}"] = cli("compare", cap, cap, "--format", fmt, width=300)[1]
    assert all(outputs.values()), [k for k, v in outputs.items() if not v]
    for name, out in outputs.items():
        for secret in secrets:
            assert secret not in out and html.escape(secret) not in out, (name, secret)


# -- what the server says (captures/session-direct-loopback.pcap) ---------------------------

def test_session_in_json_text_and_html(tmp_path: Path) -> None:
    rep = report_of(SESSION)
    c1, c2 = rep["connections"]
    qs = c1["queries"]
    assert [q["sql"].split()[0] for q in qs] == ["DROP", "COMMIT", "BEGIN", "SELECT", "COMMIT",
                                                  "INSERT", "SELECT", "SELECT"]
    # notices on their query: severity, SQLSTATE, message
    (skip,) = qs[0]["notices"]
    assert (skip["severity"], skip["code"], skip["message"]) == (
        "NOTICE", "00000", 'table "tsession_no_such_table" does not exist, skipping')
    assert qs[0]["command_tag"] == "DROP TABLE" and qs[0]["notices_total"] == 1
    (warn,) = qs[1]["notices"]
    assert (warn["severity"], warn["code"]) == ("WARNING", "25P01")
    # a COMMIT in a failed transaction is answered ROLLBACK
    assert (qs[3]["error"]["code"], qs[4]["sql"], qs[4]["command_tag"]) == (
        "22012", "COMMIT", "ROLLBACK")
    fk = qs[5]["error"]
    assert {k: fk[k] for k in ("severity", "code", "schema", "table", "constraint", "file",
                               "routine")} == {
        "severity": "ERROR", "code": "23503", "schema": "public", "table": "tsession_child",
        "constraint": "tsession_child_parent_fkey", "file": "ri_triggers.c",
        "routine": "ri_ReportViolation"}
    assert fk["detail"] == 'Key (parent)=(42) is not present in table "tsession".'
    assert "hint" in fk and fk["hint"] is None and "where" not in fk  # not sent
    # a result's shape
    assert (qs[6]["columns"], qs[6]["column_count"], qs[6]["rows"]) == (["id", "digest"], 2, 5)
    assert qs[6]["data_row_bytes"] == 5 * (2 + 4 + 1 + 4 + 32)  # an int's text, an md5
    assert qs[2]["columns"] is None and qs[2]["data_row_bytes"] == 0
    # a cancel request, linked both ways
    cancel, stopped = c2["cancel_request"], qs[7]
    assert stopped["error"]["code"] == "57014" and cancel["backend_pid"] == c1["backend_pid"]
    assert cancel["target"] == {"connection": "c1", "query_index": 7}
    assert stopped["cancelled_by"] == {"connection": "c2", "frame": cancel["frame"],
                                       "cancel_to_error_ms": cancel["cancel_to_error_ms"]}
    assert cancel["cancel_to_error_ms"] == round(
        (stopped["error"]["at_s"] - cancel["sent_s"]) * 1e3, 3)
    assert c2["startup"] is None and "secret" not in json.dumps(c2).lower()
    # every startup parameter, in order
    assert c1["startup"]["parameters"] == {
        "user": "postgres", "database": "lab", "options": "-c DateStyle=ISO,DMY -c TimeZone=UTC",
        "application_name": "pktflow-lab", "client_encoding": "UTF8"}
    said = [
        'DROP TABLE IF EXISTS tsession_no_such_table -> DROP TABLE; NOTICE 00000 table '
        '"tsession_no_such_table" does not exist, skipping',
        "COMMIT -> COMMIT; WARNING 25P01 there is no transaction in progress",
        "SELECT 1/0 -> ERROR 22012 division by zero", "COMMIT -> ROLLBACK",
        "SELECT id, payload AS digest FROM tsession ORDER BY id -> SELECT 5 (2 columns: id, "
        "digest; 215 B of rows)",
        'violates foreign key constraint "tsession_child_parent_fkey" (detail: Key (parent)=(42) '
        'is not present in table "tsession".; schema public, table tsession_child, constraint '
        f"tsession_child_parent_fkey; raised in ri_triggers.c:{fk['line']} ri_ReportViolation)",
        "SELECT pg_sleep(5) -> ERROR 57014 canceling statement due to user request (raised in "
        f"postgres.c:{stopped['error']['line']} ProcessInterrupts); cancelled by c2's cancel "
        f"request (frame {cancel['frame']}), {cancel['cancel_to_error_ms']:,.3f} ms before the "
        "error",
        f"PostgreSQL: a cancel request for backend process {cancel['backend_pid']}",
        f"it cancelled c1#7: its error 57014 came {cancel['cancel_to_error_ms']:,.3f} ms later",
        "startup: options '-c DateStyle=ISO,DMY -c TimeZone=UTC'; client_encoding 'UTF8'",
    ]
    text = text_of(SESSION)
    assert "startup not in the capture" not in text
    for line in said:
        assert line in text, line
    page = page_of(SESSION, tmp_path)
    for line in said[-3:] + said[4:6]:  # the queries table: an sql cell, an answer cell
        assert line.replace(" -> ", " ") in page, line
    for sql, answer in (("DROP TABLE IF EXISTS tsession_no_such_table",
                         'DROP TABLE; NOTICE 00000 table "tsession_no_such_table" does not exist, '
                         "skipping"), ("COMMIT", "ROLLBACK")):
        assert f"{sql} {answer}" in page, answer  # the queries table's sql and answer cells


def test_session_in_the_ladder() -> None:
    code, out, _ = cli("flow", str(SESSION), "--connection", "c1", "--format", "json")
    assert code == 0
    doc = json.loads(out)
    rows = [r for it in doc["items"] for r in (it["group"]["rows"] if "group" in it else [it])]
    details = [d for r in rows for d in r["details"]
               if d["message"] in ("NoticeResponse", "ErrorResponse")]
    assert [(d["message"], d["severity"], d["sqlstate"]) for d in details] == [
        ("NoticeResponse", "NOTICE", "00000"), ("NoticeResponse", "WARNING", "25P01"),
        ("ErrorResponse", "ERROR", "22012"), ("ErrorResponse", "ERROR", "23503"),
        ("ErrorResponse", "ERROR", "57014")]
    code, out, _ = cli("flow", str(SESSION), "--connection", "c1", "--expand", width=240)
    for label in ('N(00000 table "tsession_no_such_table" does not exist, skipping)',
                  "N(WARNING 25P01 there is no transaction in progress)", "C(ROLLBACK)"):
        assert label in out, label


@needs_tshark
def test_session_against_tshark() -> None:
    """Every error's and notice's fields, the startup's parameters, the RowDescription's
    columns, the DataRows' bytes and the cancel's process id, as tshark decodes them."""
    rep = report_of(SESSION)
    c1, c2 = rep["connections"]
    said = {m["frame"]: m for q in c1["queries"] for m in [q["error"], *q["notices"]] if m}
    fields = {"severity": "pgsql.text", "code": "pgsql.code", "message": "pgsql.message",
              "detail": "pgsql.detail", "hint": "pgsql.hint", "position": "pgsql.position",
              "localized_severity": "pgsql.severity", "where": "pgsql.where",
              "schema": "pgsql.schema_name", "table": "pgsql.table_name",
              "column": "pgsql.column_name", "data_type": "pgsql.type_name",
              "constraint": "pgsql.constraint_name", "file": "pgsql.file",
              "line": "pgsql.line", "routine": "pgsql.routine"}
    rows = tshark_rows(SESSION, ["frame.number", *fields.values()],
                       'pgsql.type == "Error" or pgsql.type == "Notice"')
    assert sorted(int(r[0]) for r in rows) == sorted(said)
    for r in rows:
        mine = said[int(r[0])]
        for key, value in zip(fields, r[1:]):
            assert (mine.get(key) or "") == value, (r[0], key)
    ((names, values),) = [r[1:] for r in tshark_rows(
        SESSION, ["frame.number", "pgsql.parameter_name", "pgsql.parameter_value"],
        'pgsql.type == "Startup message"')]
    assert dict(zip(names.split("|"), values.split("|"))) == c1["startup"]["parameters"]
    q = c1["queries"][6]
    rows = tshark_rows(SESSION, ["frame.number", "pgsql.type", "pgsql.field.count",
                                 "pgsql.col.name", "pgsql.length"], f"frame.number == "
                       f"{q['first_frame']}")
    ((_, types, count, cols, lengths),) = rows
    kinds, lengths_ = types.split("|"), [int(x) for x in lengths.split("|")]
    # the field count of the RowDescription, then of each DataRow
    assert (int(count.split("|")[0]), cols.split("|")) == (q["column_count"], q["columns"])
    assert sum(n - 4 for k, n in zip(kinds, lengths_) if k == "Data row") == q["data_row_bytes"]
    ((frame, pid),) = tshark_rows(SESSION, ["frame.number", "pgsql.pid"],
                                  'pgsql.type == "Cancel request"')
    assert (int(frame), int(pid)) == (c2["cancel_request"]["frame"],
                                      c2["cancel_request"]["backend_pid"])


# -- crafted streams ------------------------------------------------------------------------

def msg(t: str, body: bytes = b"") -> bytes:
    return t.encode() + struct.pack(">I", len(body) + 4) + body


def cstr(s: str) -> bytes:
    return s.encode() + b"\x00"


STARTUP_BODY = struct.pack(">I", 196608) + cstr("user") + cstr("alice") + cstr("database") + \
    cstr("shop") + b"\x00"
STARTUP = struct.pack(">I", len(STARTUP_BODY) + 4) + STARTUP_BODY
AUTH_OK, READY = msg("R", struct.pack(">I", 0)), msg("Z", b"I")


def key_data(pid: int, key: int) -> bytes:
    return msg("K", struct.pack(">II", pid, key))


def talk(exchange: list[tuple[int, bytes]], *, port: int = 40000, t: float = 1.7e9
         ) -> list[tuple]:  # type: ignore[type-arg]
    """A connection from client port `port`: the handshake, each (side, bytes) as a segment
    acknowledged by the other side, both FINs."""
    flow = Flow(t=t)
    flow.handshake()
    for side, data in exchange:
        flow.send(side, data)
        flow.ack(1 - side)
    flow.fin(0)
    flow.fin(1)
    flow.ack(0)
    return [p[:4] + (port if p[4] == 40000 else p[4], port if p[5] == 40000 else p[5]) + p[6:]
            for p in flow.packets]


def capture(tmp_path: Path, *connections: list[tuple], name: str = "c.pcap") -> Path:  # type: ignore[type-arg]
    packets = sorted((p for c in connections for p in c), key=lambda p: p[1])
    return write_capture(tmp_path / name, packets)


def _select(extra: bytes = b"") -> list[tuple[int, bytes]]:
    return [(0, STARTUP), (1, AUTH_OK + key_data(4242, 7) + READY),
            (0, msg("Q", cstr("SELECT 1"))), (1, extra + msg("C", cstr("SELECT 0")) + READY)]


FIXED = [  # (role, type, length it always has, wrong lengths)
    ("backend", "I", 4, [5, 10]), ("backend", "1", 4, [5, 8]), ("backend", "2", 4, [6]),
    ("backend", "3", 4, [7]), ("backend", "n", 4, [5]), ("backend", "s", 4, [9]),
    ("backend", "c", 4, [5]), ("backend", "Z", 5, [4, 6]), ("backend", "K", 12, [8, 16]),
    ("frontend", "S", 4, [5]), ("frontend", "H", 4, [6]), ("frontend", "X", 4, [8]),
    ("frontend", "c", 4, [5]),
]
NAMES = {"I": "EmptyQueryResponse", "1": "ParseComplete", "2": "BindComplete",
         "3": "CloseComplete", "n": "NoData", "s": "PortalSuspended", "Z": "ReadyForQuery",
         "K": "BackendKeyData", "S": "Sync", "H": "Flush", "X": "Terminate", "c": "CopyDone"}


@pytest.mark.parametrize("role,t,always,lengths", FIXED,
                         ids=[f"{r}-{t if t.isalnum() else ord(t)}" for r, t, _, _ in FIXED])
def test_fixed_length_types_at_other_lengths_are_malformed(
        tmp_path: Path, role: str, t: str, always: int, lengths: list[int]) -> None:
    for ln in lengths:
        bad = t.encode() + struct.pack(">I", ln) + b"\x00" * (ln - 4)
        if role == "backend":
            exchange = _select(bad)
        else:
            exchange = _select()[:3] + [(0, bad)] + _select()[3:]
        path = capture(tmp_path, talk(exchange), name=f"{ord(t)}-{ln}.pcap")
        rep = report_of(path)
        (conn,) = rep["connections"]
        reason = f"a {NAMES[t]} ('{t}') of length {ln}, which is always {always}"
        assert conn["decode_stopped"]["reason"] == reason
        assert conn["decode_stopped"]["direction"] == role
        (found,) = [f for f in rep["findings"] if f["code"] == "pgwire-malformed"]
        assert found["severity"] == "error" and reason in found["message"]
        # counted: the messages before it, and not it
        assert conn["messages"][role] == (
            {"AuthenticationOk": 1, "BackendKeyData": 1, "ReadyForQuery": 1}
            if role == "backend" else {"StartupMessage": 1, "Query": 1})
        if ln == lengths[0]:
            assert reason in text_of(path, width=120)
            assert reason in page_of(path, tmp_path)
        code, _, _ = cli("analyze", "--strict", str(path))
        assert code == ExitCode.FINDINGS


def _mysql_greeting(version: bytes) -> bytes:
    body = (b"\x0a" + version + b"\x00" + struct.pack("<I", 12) + b"abcdefgh\x00\xff\xff\x21"
            + struct.pack("<HH", 2, 0xDFFF) + b"\x15" + b"\x00" * 10
            + b"ijklmnopqrst\x00caching_sha2_password\x00")
    return struct.pack("<I", len(body))[:3] + b"\x00" + body


FOREIGN = {
    # 73 bytes: 'I' 00 00 00 0a, an EmptyQueryResponse of length 10 if lengths went unchecked
    "mysql-greeting-I": [(1, _mysql_greeting(b"5.7.9")),
                         (0, b"\x40\x00\x00\x01" + b"\x85\xa6\x0f\x00" + bytes(60))],
    # 82 bytes: 'R', an Authentication request that frames, the bytes after it not
    "mysql-greeting-R": [(1, _mysql_greeting(b"8.0.36-0ubuntu")),
                         (0, b"\x40\x00\x00\x01" + b"\x85\xa6\x0f\x00" + bytes(60))],
    "http": [(0, b"GET / HTTP/1.1\r\nHost: db\r\n\r\n"),
             (1, b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")],
}


@pytest.mark.parametrize("name", sorted(FOREIGN))
def test_not_postgresql_on_5432_has_no_postgresql_error(tmp_path: Path, name: str) -> None:
    path = capture(tmp_path, talk(FOREIGN[name]))
    assert path.read_bytes().count(b"\x00\x00\x00\x0a") >= (1 if "mysql" in name else 0)
    rep = report_of(path)
    (conn,) = rep["connections"]
    assert conn["protocol"] == "unknown" and conn["messages"] == {"frontend": {}, "backend": {}}
    assert conn["queries"] == [] and conn["authentication"] is None
    # a protocol recognised by name is information; bytes PostgreSQL never sends, a warning
    severity = "info" if name == "http" else "warning"
    assert [(f["severity"], f["code"]) for f in rep["findings"]] == [(severity, "not-postgresql")]
    assert "not PostgreSQL" in text_of(path) and "not PostgreSQL" in page_of(path, tmp_path)
    code, _, err = cli("analyze", "--strict", str(path))
    assert (code, err) == (ExitCode.OK, "")


EVERY_FIELD = [("S", "ERREUR"), ("V", "ERROR"), ("C", "23514"),
               ("M", 'new row for relation "orders" violates check constraint "qty_positive"'),
               ("D", "Failing row contains (7, -1)."), ("H", "Make the quantity positive."),
               ("P", "29"), ("p", "5"), ("q", "SELECT check_qty(NEW.qty)"),
               ("W", "PL/pgSQL function check_qty() line 3 at RAISE"), ("s", "public"),
               ("t", "orders"), ("c", "qty"), ("d", "positive_int"), ("n", "qty_positive"),
               ("F", "execMain.c"), ("L", "2049"), ("R", "ExecConstraints")]
KEYS = {"S": "localized_severity", "V": "severity", "C": "code", "M": "message", "D": "detail",
        "H": "hint", "P": "position", "p": "internal_position", "q": "internal_query",
        "W": "where", "s": "schema", "t": "table", "c": "column", "d": "data_type",
        "n": "constraint", "F": "file", "L": "line", "R": "routine"}


def test_an_error_with_every_field(tmp_path: Path) -> None:
    error = msg("E", b"".join(k.encode() + cstr(v) for k, v in EVERY_FIELD) + b"\x00")
    sql = "INSERT INTO orders VALUES (7, -1)"
    exchange = [(0, STARTUP), (1, AUTH_OK + READY), (0, msg("Q", cstr(sql))),
                (1, error + READY)]
    path = capture(tmp_path, talk(exchange))
    (conn,) = report_of(path)["connections"]
    err = conn["queries"][0]["error"]
    assert {KEYS[k]: err[KEYS[k]] for k, _ in EVERY_FIELD} == {KEYS[k]: v for k, v in EVERY_FIELD}
    answer = (f"{sql} -> ERROR 23514 {dict(EVERY_FIELD)['M']} (detail: Failing row contains "
              "(7, -1).; hint: Make the quantity positive.; at character 29; in 'SELECT "
              "check_qty(NEW.qty)' at character 5; where: PL/pgSQL function check_qty() line 3 "
              "at RAISE; schema public, table orders, column qty, type positive_int, constraint "
              "qty_positive; raised in execMain.c:2049 ExecConstraints)")
    assert answer in text_of(path) and answer.replace(" ->", "") in page_of(path, tmp_path)
    if TSHARK is not None:  # tshark decodes the same fields
        names = ["pgsql.severity", "pgsql.text", "pgsql.code", "pgsql.message", "pgsql.detail",
                 "pgsql.hint", "pgsql.position", "pgsql.internal_position",
                 "pgsql.internal_query", "pgsql.where", "pgsql.schema_name",
                 "pgsql.table_name", "pgsql.column_name", "pgsql.type_name",
                 "pgsql.constraint_name", "pgsql.file", "pgsql.line", "pgsql.routine"]
        ((frame, *values),) = tshark_rows(path, ["frame.number", *names],
                                          'pgsql.type == "Error"')
        assert int(frame) == err["frame"] and values == [v for _, v in EVERY_FIELD]


def test_a_cancel_finds_its_backend_by_process_id_and_key(tmp_path: Path) -> None:
    """Two backends with the same process id (one after the other, or two servers' worth):
    the cancel request's key says which one it cancelled."""
    canceled = msg("E", b"SERROR\x00VERROR\x00C57014\x00Mcanceling statement due to user "
                   b"request\x00\x00")

    def session(key: int, port: int, t: float) -> list[tuple]:  # type: ignore[type-arg]
        return talk([(0, STARTUP), (1, AUTH_OK + key_data(999, key) + READY),
                     (0, msg("Q", cstr("SELECT pg_sleep(60)"))), (1, canceled + READY)],
                    port=port, t=t)

    # each segment 0.1 ms after the one before: the second sends its query 0.8 ms after its
    # start and is answered 0.2 ms later; the cancel request comes 0.1 ms before that answer
    first, second = session(1111, 40001, 1.7e9), session(2222, 40002, 1.7e9 + 0.0005)
    cancel = talk([(0, struct.pack(">IIII", 16, 80877102, 999, 2222))], port=40003,
                  t=1.7e9 + 0.0005 + 0.00045)
    path = capture(tmp_path, first, second, cancel)
    rep = report_of(path)
    conns = {c["client"]["port"]: c for c in rep["connections"]}
    req = conns[40003]["cancel_request"]
    assert req["backend_pid"] == 999
    assert req["target"] == {"connection": conns[40002]["id"], "query_index": 0}
    stopped = conns[40002]["queries"][0]
    assert stopped["cancelled_by"]["connection"] == conns[40003]["id"]
    assert req["cancel_to_error_ms"] == stopped["cancelled_by"]["cancel_to_error_ms"] > 0
    assert conns[40001]["queries"][0]["cancelled_by"] is None  # the same pid, another key
    # a cancel request for a backend whose start-up the capture does not hold
    lost = talk([(0, struct.pack(">IIII", 16, 80877102, 999, 3333))], port=40004)
    (conn,) = report_of(capture(tmp_path, lost, name="lost.pcap"))["connections"]
    assert conn["cancel_request"]["target"] is None
    assert "cancel request for backend process 999" in text_of(capture(tmp_path, lost,
                                                                         name="l2.pcap"))


def test_queries_are_readable_at_80_columns(tmp_path: Path) -> None:
    """Four DELETEs that differ only past 48 characters, and one long statement: piped at 80
    columns, each query's SQL is there whole (wrapped), the long one by its start and end."""
    deletes = [f"DELETE FROM pgbench_history WHERE tid = 1 AND bid = 1 AND aid = {n} "
               f"AND delta = {n * 7}" for n in (11, 12, 13, 14)]
    long_sql = "SELECT " + ", ".join(f"col_{i}" for i in range(200)) + " FROM wide_table_9"
    exchange = [(0, STARTUP), (1, AUTH_OK + READY)]
    for sql in (*deletes, long_sql):
        exchange += [(0, msg("Q", cstr(sql))), (1, msg("C", cstr("DELETE 1")) + READY)]
    path = capture(tmp_path, talk(exchange))
    code, out, _ = cli("analyze", str(path), width=80)
    assert code == 0 and all(len(line) <= 80 for line in out.splitlines())
    text = flat(out)
    for sql in deletes:
        assert f"{sql} -> DELETE 1" in text
    assert long_sql[:200] in text and f"{long_sql[-100:]} ({len(long_sql):,} characters)" in text


@needs_tshark
def test_data_row_bytes_and_columns_of_a_bulk_result_against_tshark() -> None:
    """10,000 DataRows cut across 8 KB writes: their bodies' bytes as tshark's lengths say."""
    path = CAPTURES / "seqscan-10k-direct-loopback.pcap"
    (q,) = report_of(path)["connections"][0]["queries"]
    rows = tshark_rows(path, ["pgsql.type", "pgsql.length", "pgsql.col.name"])
    total, names = 0, []
    for types, lengths, cols in rows:
        for t, n in zip(types.split("|"), lengths.split("|")):
            total += int(n) - 4 if t == "Data row" else 0
        names += [c for c in cols.split("|") if c]
    assert (q["data_row_bytes"], q["columns"], q["data_rows"]) == (total, names, 10_000)
