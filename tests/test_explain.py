"""Teaching mode teaches only what is true for the capture it describes: each sentence the
explain mode prints is tested here on a real capture whose frames show it, and the facts it
cites (status bytes, TLS handshake types, who sent FIN or RST, the pooler's own statements,
sizes, times) are checked against tshark's dissection of the same frames. A sentence that
depends on what happened (ACK pacing, a round trip, a reordering) is checked absent where the
capture does not show it. test_every_sentence_printed_is_one_tested_here keeps the list
whole: a new kind of sentence fails it until a test here covers it."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from test_flow import flow_json, rows
from tsharkcheck import TSHARK

from pktflow.pipeline import analyze

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "captures"
CONDITIONS = CAPTURES / "conditions"
PIPELINE = CAPTURES / "pipeline-direct-loopback.pcap"
EXTENDED = CAPTURES / "extended-direct-loopback.pcap"
TLS = CAPTURES / "tls-direct-loopback.pcap"
PGBENCH = CAPTURES / "pgbench-txn-pgbouncer-loopback.pcap"
DUMP_POOLED = CAPTURES / "pgdump-20k-pgbouncer-loopback.pcap"
POOLED = CAPTURES / "seqscan-10k-pgbouncer-loopback.pcap"
PGPOOL = CAPTURES / "seqscan-10k-pgpool-loopback.pcap"
DIRECT = CAPTURES / "seqscan-10k-direct-loopback.pcap"
BRIDGE = CAPTURES / "seqscan-10k-direct-bridge.pcap"
COPY_IN = CAPTURES / "copy-in-direct-loopback.pcap"
ERROR = CAPTURES / "error-direct-loopback.pcap"
RTT10 = CONDITIONS / "seqscan-10k-direct-bridge-rtt10ms.pcap.gz"
LOSS = CONDITIONS / "seqscan-10k-direct-bridge-loss2pct.pcap.gz"

needs_tshark = pytest.mark.skipif(TSHARK is None, reason="tshark is not installed (Debian "
                                  "package tshark)")


def explain(path: Path, *argv: str) -> list[str]:
    return list(flow_json(str(path), *argv, "--explain")["explain"])


def note(lines: list[str], key: str, name: str = "") -> str:
    """The one note keyed `key` ("Z", "ACK 16,384 B", "[after a hole]"), of the message
    `name` where a letter has two ("D", "Describe")."""
    (line,) = [ln for ln in lines if ln.startswith(f"{key}  {name}")]
    return line[len(key) + 2:]


def steps(lines: list[str], kind: str) -> list[tuple[str, str, list[int]]]:
    """(title, sentence, frames listed) of the walk's steps of a kind ("extended query")."""
    out = []
    for line in lines:
        m = re.fullmatch(r"step \d+  (.+?): (.*) \(frames? ([\d, …]+)\)", line)
        if m and m[1].startswith(kind):
            out.append((m[1], m[2], [int(f) for f in re.findall(r"\d+", m[3])]))
    return out


def tshark(path: Path, fields: list[str], *, where: str = "", ports: tuple[int, ...] = (5432,)
           ) -> dict[int, list[str]]:
    """frame -> the fields' values as tshark dissects them (pgsql decoded on `ports`)."""
    cmd = [TSHARK or "tshark", "-n", "-r", str(path), "-o", "tcp.reassemble_out_of_order:TRUE",
           "-o", "tcp.relative_sequence_numbers:TRUE", "-T", "fields", "-e", "frame.number"]
    for f in fields:
        cmd += ["-e", f]
    for p in ports:
        cmd += ["-d", f"tcp.port=={p},pgsql"]
    if where:
        cmd += ["-Y", where]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return {int(line.split("\t")[0]): line.split("\t")[1:] for line in out.splitlines()}


# -- 1. ReadyForQuery carries its status byte ------------------------------------------------

@needs_tshark
def test_ready_for_query_status_bytes_are_tsharks() -> None:
    """Z(I), Z(T), Z(E) in every frame as tshark reads pgsql.status; in the pgbench capture
    1,200 of 1,412 are 'T'; the pipeline capture shows all three."""
    for path, ports in ((PGBENCH, (5432, 6432)), (PIPELINE, (5432,))):
        ours: dict[int, list[str]] = {}
        for r in rows(flow_json(str(path), "--all", "--expand")):
            got = [d["text"] for d in r["details"] if d["message"] == "ReadyForQuery"]
            if got:
                ours[r["frame"]] = got
        theirs = {f: [chr(int(s)) for s in v[0].split(",")]
                  for f, v in tshark(path, ["pgsql.status"], where="pgsql.status",
                                     ports=ports).items()}
        assert ours == theirs
        if path == PGBENCH:
            statuses = [s for v in ours.values() for s in v]
            assert (len(statuses), statuses.count("T")) == (1412, 1200)
    lines = explain(PIPELINE, "--all")
    assert "(here: I ×6, T ×1, E ×1)" in note(lines, "Z")
    (begin,) = [s for s in steps(lines, "simple query") if "(BEGIN)" in s[1]]
    assert "ReadyForQuery(T) (inside a transaction block)" in begin[1]
    (failed,) = [s for s in steps(lines, "failed query") if "Z(E)" in s[1]]
    assert "ReadyForQuery(E) (inside a failed transaction block" in failed[1]
    assert "idle again" not in " ".join(lines)


@needs_tshark
def test_a_server_connection_left_in_a_transaction_is_closed_not_reused() -> None:
    """pg_dump through PgBouncer: the server's last ReadyForQuery is 'T', so the pooler sends
    Terminate to the server instead of returning the connection."""
    lines = explain(DUMP_POOLED)
    (end,) = [s for s in steps(lines, "termination") if "pooler" in s[1]]
    assert "said T (inside a transaction block)" in end[1] and end[2] == [1636]
    seen = tshark(DUMP_POOLED, ["tcp.srcport", "tcp.dstport", "pgsql.type", "pgsql.status"],
                  where="frame.number==1583 || frame.number==1636", ports=(5432, 6432))
    assert seen[1583][1] != "5432" and seen[1583][3].split(",")[-1] == str(ord("T"))
    assert seen[1636][1] == "5432" and seen[1636][0] != "6432"  # the pooler's own socket
    assert seen[1636][2] == "Termination"
    client_end = [s for s in steps(lines, "termination") if "pooler" not in s[1]]
    assert client_end and client_end[0][1].startswith("Terminate: the client ends the session")


# -- 2. The ACK rule, and pacing only where the capture shows it ------------------------------

@needs_tshark
def test_ack_pacing_is_said_only_where_the_sender_never_waited() -> None:
    direct = explain(DIRECT)
    rule = note(direct, "ACK n B")
    assert "RFC 1122 (4.2.3.2)" in rule and "SHOULD" in rule and "window can move" in rule
    assert "8,192" not in rule  # a segment's worth is the kernel's estimate, not a constant
    pairs = note(direct, "ACK 16,384 B")
    # the share of round trips quoted is analyze's: where it is none, the note says ACK pacing
    (conn,) = [c for c in analyze(str(DIRECT))["connections"]
               if c["directions"]["server_to_client"]["verdict"]["limit"] != "none"]
    lim = conn["directions"]["server_to_client"]["limits"]
    waited = lim["seconds"]["latency"] / lim["transfer_s"]
    if waited:
        assert f"round trips held the sender {waited:.0%} of the" in pairs
        assert "ACK pacing" not in pairs
    else:
        assert "ACK pacing, not a round trip" in pairs and "0 %" in pairs
    frames = [int(f) for f in re.findall(r"frames ([\d, ]+)", pairs)[0].split(", ")]
    acks = tshark(DIRECT, ["tcp.ack"], where="tcp.srcport!=5432")  # the client's every ACK
    order = sorted(acks)
    for f in frames:
        before = max(g for g in order if g < f)
        assert int(acks[f][0]) - int(acks[before][0]) == 16384, f
    slow = explain(RTT10)
    assert "ACK pacing" not in " ".join(slow)
    waited = note(slow, "ACK 2,896 B")
    (conn,) = [c for c in analyze(str(RTT10))["connections"]
               if c["directions"]["server_to_client"]["verdict"]["limit"] != "none"]
    lim = conn["directions"]["server_to_client"]["limits"]
    share, ms = lim["seconds"]["latency"] / lim["transfer_s"], lim["transfer_s"] * 1000
    assert share >= 0.5 and f"round trips held the sender {share:.0%} of the {ms:,.1f} ms" in waited
    assert waited.endswith("it waited for these ACKs.")


@needs_tshark
def test_an_ack_held_while_the_reader_lags_and_the_window_shrinks() -> None:
    """COPY FROM STDIN: one ACK for 92,581 B with the window down to 26,624, then a window
    update as PostgreSQL reads."""
    said = note(explain(COPY_IN), "ACK 92,581 B")
    assert "(frame 27)" in said and "down from 111,616 to 26,624" in said
    assert "read less than arrived" in said and "window update (frame 28" in said
    assert "COPY FROM STDIN the server reads the CopyData only as fast as" in said
    seen = tshark(COPY_IN, ["tcp.ack", "tcp.window_size", "tcp.analysis.window_update"],
                  where="tcp.srcport==5432 && tcp.len==0")
    ack27 = int(seen[27][0])
    before = max(f for f in seen if f < 27)
    assert ack27 - int(seen[before][0]) == 92581
    assert (seen[before][1], seen[27][1], seen[28][1]) == ("111616", "26624", "111616")
    assert seen[28][2] == "1"  # tshark: a window update
    n = re.search(r"one ACK for (\d+) segments", said)
    data = tshark(COPY_IN, ["tcp.seq", "tcp.len"], where="tcp.dstport==5432 && tcp.len>0")
    covered = [f for f, (seq, ln) in data.items()
               if int(seq) >= int(seen[before][0]) and int(seq) + int(ln) <= ack27]
    assert n is not None and int(n[1]) == len(covered)


@needs_tshark
def test_a_delayed_ack_is_said_where_the_timer_ran_out() -> None:
    said = note(explain(PIPELINE, "--all"), "ACK 24 B")
    assert "(frame 41) 40.5 ms after the data it acknowledges (frame 40)" in said
    times = tshark(PIPELINE, ["frame.time_relative"],
                   where="frame.number==40 || frame.number==41")
    assert round((float(times[41][0]) - float(times[40][0])) * 1000, 1) == 40.5
    assert not any(ln.startswith("ACK 24 B") for ln in explain(EXTENDED, "--all"))


# -- 3. TLS as tshark dissects it ---------------------------------------------------------------

@needs_tshark
def test_tls_handshake_types_and_the_hello_retry_are_tsharks() -> None:
    doc = flow_json(str(TLS), "--all", "--expand", "--explain")
    ours = {r["frame"]: [d["text"] for d in r["details"]] for r in rows(doc) if r["details"]}
    seen = tshark(TLS, ["tls.handshake.type", "_ws.col.Info",
                        "tls.handshake.extensions_key_share_selected_group",
                        "tls.handshake.extensions.supported_version",
                        "tls.handshake.ciphersuite"], where="tls.handshake.type")
    names = {1: "ClientHello", 2: "ServerHello"}
    assert set(ours) == set(seen) == {8, 9, 10, 11}
    for frame, (kind, info, group, version, cipher) in seen.items():
        name = "HelloRetryRequest" if "Hello Retry Request" in info else names[int(kind)]
        assert ours[frame][0].split(", ")[0] == name
        if int(kind) == 2:
            assert (version, cipher) == ("0x0304", "0x1302")
            assert ours[frame][0].split(", ")[1:3] == ["TLS 1.3", "TLS_AES_256_GCM_SHA384"]
    assert seen[9][2] == "23" and ours[9][0].endswith("secp256r1")  # tshark: secp256r1 (23)
    (step,) = steps(doc["explain"], "TLS")
    assert "a HelloRetryRequest (frame 9)" in step[1] and "one round trip more" in step[1]
    assert "TLS 1.3 encrypts the handshake too" in step[1] and "application_data" in step[1]
    legend = " ".join(doc["legend"])
    assert "hellos, keys, certificates" not in legend
    # the certificate travels in frame 11's application_data records, not in a handshake one
    types = tshark(TLS, ["tls.record.content_type", "tls.record.opaque_type"],
                   where="frame.number==11")
    assert types[11] == ["22", "23,23,23,23"]


@needs_tshark
def test_a_tls_record_adds_22_bytes_to_the_servers_8192_byte_write() -> None:
    said = note(explain(TLS), "8,214 B")
    assert "8,192 bytes of plaintext plus 22" in said and "16-byte tag" in said
    lengths = tshark(TLS, ["tcp.len", "tls.record.length"],
                     where="tcp.srcport==5432 && tcp.len==8214")
    assert len(lengths) >= 10
    assert all(v == ["8214", "8209"] for v in lengths.values())  # 5 + 8,192 + 1 + 16


@needs_tshark
def test_the_tls_close_is_a_fin_then_data_answered_by_a_reset() -> None:
    (close,) = steps(explain(TLS), "TCP close")
    assert "the server sends FIN first (frame 40)" in close[1]
    assert "the client still sends 24 B (frame 41)" in close[1]
    assert "answers with RST (frame 42)" in close[1]
    assert "each side sends FIN" not in close[1]
    flags = tshark(TLS, ["tcp.srcport", "tcp.flags.fin", "tcp.flags.reset", "tcp.len"],
                   where="frame.number>=40")
    assert flags[40][:2] == ["5432", "1"] and flags[41][0] != "5432" and flags[41][3] == "24"
    assert flags[42][:3] == ["5432", "0", "1"]


# -- 4, 5. SSLRequest's single-byte answer; StartupMessage after it ---------------------------

@needs_tshark
def test_the_answer_to_sslrequest_is_one_byte_and_what_followed_it() -> None:
    lines = explain(EXTENDED, "--all")
    said = note(lines, "'N'")
    assert said.startswith("N, the server's single-byte answer")
    assert "went on in plain text" in said and "GSSENCRequest" in said
    assert not any("EncryptionRefused" in ln or "EncryptionAccepted" in ln for ln in lines)
    (enc, *_) = steps(lines, "encryption")
    assert "goes on in plain text on the same connection" in enc[1]
    seen = tshark(EXTENDED, ["tcp.srcport", "tcp.payload", "pgsql.type"],
                  where="tcp.len>0 && frame.number<=8")
    assert seen[6][:2] == ["5432", "4e"]  # one byte: 'N'
    assert seen[8][2] == "Startup message"
    legend = " ".join(flow_json(str(TLS), "--all")["legend"])
    assert "'S' (the single-byte answer to SSLRequest: TLS follows)" in legend
    assert "EncryptionAccepted" not in legend


@needs_tshark
def test_startup_message_is_the_first_only_without_sslrequest() -> None:
    after = note(explain(EXTENDED, "--all"), "Startup")
    assert "after the answer to SSLRequest" in after and "first message" not in after
    first = note(explain(PIPELINE, "--all"), "Startup")
    assert "the client's first message" in first
    seen = tshark(PIPELINE, ["pgsql.type"], where="pgsql.frontend==1")
    assert seen[min(seen)] == ["Startup message"]


# -- 6. The pooler's own statements, and whose transaction a server connection carries --------

@needs_tshark
def test_the_poolers_own_statements_are_labelled_as_the_poolers() -> None:
    for path, port in ((POOLED, 6432), (PGPOOL, 9999)):
        doc = flow_json(str(path), "--all", "--expand", "--explain")
        own = {r["frame"] for r in rows(doc) if "pooler's own" in r["marks"]}
        sql = tshark(path, ["tcp.dstport", "pgsql.query"], where="pgsql.query",
                     ports=(5432, port))
        client_sql = {v[1] for v in sql.values() if v[0] == str(port)}
        theirs = {f for f, v in sql.items() if v[0] == "5432" and v[1] not in client_sql}
        assert own == theirs and own, path
        assert {sql[f][1].split()[0] for f in own} == {"SET", "DISCARD"}
        walk = steps(doc["explain"], "pooler's own statement")
        assert {w[2][0] for w in walk} == own
        assert not steps(doc["explain"], "simple query (c1, c2") or \
            all("SET application_name" not in w[1] for w in steps(doc["explain"], "simple"))
        forwarded = [r for r in rows(doc) if any(m.startswith("for c") for m in r["marks"])]
        assert forwarded and all(sql[r["frame"]][1] in client_sql for r in forwarded)
    discard = [w for w in steps(explain(PGPOOL), "pooler's own") if "DISCARD ALL" in w[1]]
    assert discard and "(c2)" in discard[0][0] and "resets the session" in discard[0][1]


@needs_tshark
def test_a_server_connection_changes_hands_between_transactions() -> None:
    """Transaction pooling: the default draws one client's transaction with its server leg;
    after ReadyForQuery 'I' ends it, the server connection carries another client's BEGIN."""
    doc = flow_json(str(PGBENCH), "--explain")
    assert doc["title"].startswith("a transaction: c3#0-6")
    (hand,) = steps(doc["explain"], "hand-over")
    assert "c3's transaction on server connection c2 ended with ReadyForQuery(I)" in hand[1]
    assert "its next request is c4's" in hand[1] and hand[2] == [94, 96]
    assert steps(doc["explain"], "request (c2 for c4)")
    assert all("c2 for c3" in t for t, _, _ in steps(doc["explain"], "simple query"))
    seen = tshark(PGBENCH, ["tcp.srcport", "tcp.dstport", "pgsql.query", "pgsql.status"],
                  where="frame.number==62 || frame.number==94 || frame.number==96",
                  ports=(5432, 6432))
    assert seen[94][0] == "5432" and seen[94][3] == str(ord("I"))
    assert seen[96][1] == "5432" and seen[96][2] == "BEGIN;"
    assert seen[94][1] == seen[96][0]  # the same server connection
    assert seen[62][2] == "BEGIN;"  # c4's own BEGIN, sent before the pooler could serve it


# -- 7. Describe, errors, Sync and pipelining, Flush ------------------------------------------

@needs_tshark
def test_a_pipelined_batch_with_an_error_is_skipped_to_its_sync() -> None:
    lines = explain(PIPELINE, "--all")
    batch, flushed = steps(lines, "extended query")
    said = batch[1]
    assert "3 queries sent one after another before a single Sync: a pipeline" in said
    assert "E(22012 division by zero) answers the Bind of query 2" in said
    assert "(6 messages unanswered: Describe Execute Parse Bind Describe Execute)" in said
    assert "rolls back the batch's implicit transaction, with what ran before it " \
           "(INSERT 0 1)" in said
    assert "ErrorResponse left in a segment of its own, ReadyForQuery after the Sync" in said
    assert "one per Sync" in said and "arrive together in one segment" not in said
    assert "Flush asks the server to send what it has" in flushed[1]
    assert "commits its implicit transaction" in flushed[1]
    seen = tshark(PIPELINE, ["pgsql.type", "pgsql.tag"],
                  where="frame.number>=18 && frame.number<=25")
    assert seen[18][0] == ",".join(["Parse,Bind,Describe,Execute"] * 3 + ["Sync"])
    assert seen[19][0] == ("Parse completion,Bind completion,No data,Command completion,"
                           "Parse completion,Error")
    assert seen[20][0] == "Ready for query"
    assert seen[22][0].endswith("Execute,Flush") and "Ready for query" not in seen[23][0]
    assert seen[25][1] == "DELETE 0"  # the rolled back INSERT left nothing to delete


@needs_tshark
def test_replies_waiting_for_sync_come_in_one_segment_and_describe_is_of_the_portal() -> None:
    lines = explain(EXTENDED, "--all")
    (batch,) = steps(lines, "extended query")
    assert batch[0] == "extended query (c2) ×20"
    assert "so they arrive together in one segment" in batch[1]
    assert "Describe of the portal is answered by RowDescription" in batch[1]
    assert "of a portal (as here)" in note(lines, "D", "Describe")
    seen = tshark(EXTENDED, ["pgsql.type"], where="frame.number==28")
    assert seen[28][0].endswith("Command completion,Ready for query")
    described = subprocess.run([TSHARK or "tshark", "-n", "-r", str(EXTENDED), "-V", "-Y",
                                "frame.number==25"], capture_output=True, text=True).stdout
    assert re.search(r"Type: Describe\n\s+Length: \d+\n\s+Portal:", described)


@needs_tshark
def test_an_error_in_a_simple_query_and_the_session_going_on() -> None:
    doc = flow_json(str(ERROR), "--explain")
    assert doc["title"] == "SELECT 1/0  (c1#0, failed), and the next query"
    (failed,) = steps(doc["explain"], "failed query")
    assert "the error ends the Query" in failed[1] and "then ReadyForQuery(I)" in failed[1]
    (after,) = steps(doc["explain"], "simple query")
    assert after[2] == [14, 15]  # the default goes on to the next answer
    assert "in a simple Query the rest of its string is abandoned" in \
        note(doc["explain"], "E", "ErrorResponse")
    seen = tshark(ERROR, ["pgsql.type", "pgsql.code"], where="frame.number==11")
    assert seen[11] == ["Error", "22012"]


@needs_tshark
def test_a_refused_startup_a_cancel_and_copyfail() -> None:
    lines = explain(PIPELINE, "--all")
    (refused,) = [s for s in steps(lines, "start-up (c1)")]
    assert "E(3D000 database \"tpipe_no_such_db\" does not exist)" in refused[1]
    assert "an error during start-up ends it, and the server closes the connection" in \
        refused[1]
    (cancel,) = steps(lines, "cancellation")
    assert "the server answers nothing and closes this connection" in cancel[1]
    assert "the query on c2 then fails with E(57014 canceling statement" in cancel[1]
    (copy,) = steps(lines, "COPY in, aborted")
    assert "aborts with CopyFail" in copy[1] and "E(57014 COPY from stdin failed" in copy[1]
    assert "during start-up it ends the session" in note(lines, "E", "ErrorResponse")
    seen = tshark(PIPELINE, ["tcp.stream", "tcp.srcport", "tcp.flags.fin", "pgsql.type",
                             "pgsql.code"])
    assert seen[6][3:] == ["Authentication request,Error", "3D000"]
    fins = [f for f, v in seen.items() if v[0] == seen[6][0] and v[2] == "1"]
    assert seen[min(fins)][1] == "5432"  # the server closed the refused session first
    assert seen[45][3] == "Cancel request"
    cancel_stream = [v for v in seen.values() if v[0] == seen[45][0]]
    assert not any(v[1] == "5432" and v[3] for v in cancel_stream)  # no answer
    assert seen[36][3] == "Copy data,Copy failure" and seen[37][4] == "57014"
    assert seen[47][4] == "57014"


# -- 8. Folded counts per leg ---------------------------------------------------------------

def test_folded_counts_are_per_leg_and_a_fold_moves_data() -> None:
    doc = flow_json(str(DUMP_POOLED))
    for it in doc["items"]:
        if "group" not in it:
            continue
        g = it["group"]
        for leg in g["legs"]:
            drawn: dict[str, int] = {}
            for r in g["rows"]:
                if (r["from"], r["to"]) == (leg["from"], leg["to"]):
                    for name, n in r["message_sequence"]:
                        drawn[name] = drawn.get(name, 0) + n
            assert leg["messages"] == drawn
    from test_flow import cli
    _, out, _ = cli("flow", str(DUMP_POOLED), width=200)
    assert "CopyData×38,622" not in out
    assert "pooler→client CopyData×18,724; server→pooler CopyData×19,898" in out
    _, out, _ = cli("flow", str(RTT10), width=200)
    assert "0 segments" not in out
    # ACKs alone after the transfer: a repeat, never a bulk transfer of none
    assert re.search(r"× (\d+): frames \d+-\d+, [\d.]+ ms, \1 ACKs", out), out


# -- 9. Reordering on loopback, and times going back ----------------------------------------

@needs_tshark
def test_a_reordering_on_loopback_is_said_not_lost() -> None:
    said = note(explain(POOLED), "[after a hole]")
    assert said.startswith("frame 179 came before the bytes ahead of it, which came 6 µs "
                           "later in frame 180")
    assert "sent once, not retransmitted" in said and "nothing was lost" in said
    assert "its ACK (frame 182) reports the hole with a SACK block" in said
    seen = tshark(POOLED, ["frame.time_relative", "tcp.analysis.out_of_order",
                           "tcp.analysis.retransmission", "tcp.options.sack_le", "tcp.seq",
                           "tcp.len"], where="frame.number>=179 && frame.number<=182")
    assert round((float(seen[180][0]) - float(seen[179][0])) * 1e6) == 6
    assert seen[180][1] == "1" and not seen[180][2]  # out of order, not a retransmission
    assert seen[182][3]  # the receiver's SACK
    assert int(seen[180][4]) + int(seen[180][5]) == int(seen[179][4])


@needs_tshark
def test_times_that_go_back_are_said() -> None:
    doc = flow_json(str(DUMP_POOLED), "--expand")
    drawn = {r["frame"] for r in rows(doc)}
    back = tshark(DUMP_POOLED, ["frame.time_delta"], where="frame.time_delta < 0")
    (said,) = [n for n in doc["notes"] if "earlier than the frame before" in n]
    listed = {int(f) for f in re.findall(r"\d+", said.split(" carr")[0])}
    assert listed == {f for f in back if f in drawn} and listed
    assert "up to 3 µs" in said
    assert not any("earlier than the frame before" in n for n in flow_json(str(DIRECT))["notes"])


# -- 10. The default draws what the capture teaches -----------------------------------------

def test_the_default_draws_the_captures_point() -> None:
    ext = flow_json(str(EXTENDED))
    assert ext["title"].endswith("(c2#0)")
    assert rows(ext)[0]["label"].endswith("P B D E S")
    pipe = flow_json(str(PIPELINE))
    assert pipe["title"].startswith("SELECT 1/0  (c2#1, failed)")
    assert rows(pipe)[0]["frame"] == 18  # from the batch's first message
    # a transfer's capture keeps its biggest query
    assert flow_json(str(DIRECT))["title"] == "SELECT * FROM t10k  (c1#0)"
    assert flow_json(str(COPY_IN))["title"] == "COPY tcopy FROM STDIN  (c1#0)"


# -- Additions: TCP as it happened ------------------------------------------------------------

@needs_tshark
def test_segments_are_not_writes_at_mtu_1500() -> None:
    said = note(explain(BRIDGE), "952 B")
    m = re.search(r"a 8,192-byte write leaves as 5 × 1,448 \+ 952 bytes \(([\d,]+) times\)",
                  said)
    assert m is not None and "PSH" in said
    seen = tshark(BRIDGE, ["tcp.len", "tcp.flags.push"], where="tcp.srcport==5432 && tcp.len>0")
    writes, run = [], []
    for f in sorted(seen):
        run.append(int(seen[f][0]))
        if seen[f][1] == "1":
            writes.append(tuple(run))
            run = []
    assert writes.count((1448,) * 5 + (952,)) == int(m[1].replace(",", ""))


@needs_tshark
def test_a_segment_coalesced_after_the_window_reopened() -> None:
    lines = explain(POOLED)
    (said,) = [ln for ln in lines if "the first after the window reopened" in ln]
    m = re.fullmatch(r"([\d,]+) B  \(frame (\d+)\) one segment, the first after the window "
                     r"reopened \(frame (\d+)\), against ([\d,]+) B, its most frequent size: .*",
                     said)
    assert m is not None, said
    size, segment, reopened, common = (int(g.replace(",", "")) for g in m.groups())
    seen = tshark(POOLED, ["tcp.stream", "tcp.srcport", "tcp.len", "tcp.window_size_value"])
    stream, sender = seen[segment][0], seen[segment][1]
    assert int(seen[segment][2]) == size >= 2 * common
    back = {f: v for f, v in seen.items() if v[0] == stream and v[1] != sender}
    assert seen[reopened] == back[reopened] and back[reopened][3] != "0"
    closed = max(f for f, v in back.items() if f < reopened and v[3] == "0")  # a zero window
    assert all(v[3] != "0" for f, v in back.items() if closed < f <= reopened)
    between = [f for f, v in seen.items() if v[0] == stream and v[1] == sender
               and reopened < f < segment and v[2] != "0"]
    assert between == []  # the first segment the sender sent after it reopened
    assert not [ln for ln in explain(DIRECT) if "window reopened" in ln]


@needs_tshark
def test_each_loss_with_the_sacks_that_reported_it() -> None:
    said = note(explain(LOSS), "[retransmission]")
    m = re.search(r"frame (\d+) resends the bytes of frame (\d+).*?receiver's (\d+) ACKs after "
                  r"them \(frames ([\d, ]+)\)", said)
    assert m is not None and "lost past the capture point" in said
    resent, original = int(m[1]), int(m[2])
    dups = [int(f) for f in m[4].split(", ")]
    seen = tshark(LOSS, ["tcp.seq", "tcp.ack", "tcp.options.sack_le", "tcp.len"],
                  where=" || ".join(f"frame.number=={f}" for f in [resent, original, *dups]))
    assert seen[resent][0] == seen[original][0] and seen[resent][3] == seen[original][3]
    for f in dups:
        assert seen[f][1] == seen[resent][0] and seen[f][2]  # ACK up to the hole, with SACK
    assert not any(ln.startswith("[retransmission]") for ln in explain(DIRECT))


@needs_tshark
def test_slow_start_round_by_round_at_10ms() -> None:
    said = note(explain(RTT10), "slow start")
    # the initial window of 10 doubling each round (until the client's window, itself
    # growing, held it)
    assert said.startswith("round by round, 10, 20, 40,")
    starts = [int(f) for f in re.findall(r"rounds begin at frames ([\d, ]+)", said)[0]
              .split(", ")]
    times = tshark(RTT10, ["frame.time_relative"], where="tcp.srcport==5432 && tcp.len>0")
    order = sorted(times)
    for f in starts[1:]:
        before = max(g for g in order if g < f)
        assert float(times[f][0]) - float(times[before][0]) > 0.005, f  # a round trip apart
    assert not any(ln.startswith("slow start") for ln in explain(BRIDGE))


# -- The HTML step-through carries the walk ---------------------------------------------------

def test_the_report_page_steps_through_the_walk(tmp_path: Path) -> None:
    import json

    from test_flow import cli
    page = tmp_path / "p.html"
    code, _, err = cli("report", str(PIPELINE), "-o", str(page))
    assert code == 0, err
    text = page.read_text()
    data = json.loads(re.search(r"<script type='application/json' id='ladder'>(.*?)</script>",
                                text, re.S)[1].replace("<\\/", "</"))
    titles = [s["title"] for s in data["steps"]]
    assert titles[0] == "extended query (c2)" and 18 in data["steps"][0]["frames"]
    assert "skips everything after it up to the Sync" in data["steps"][0]["sentence"]
    assert "<h3>Step by step</h3>" in text and "Z(I)" in text
    assert "L.steps.findIndex(s => s.frames.includes(r.frame))" in text


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian package "
                                             "chromium)")
def test_a_picked_arrow_says_its_step_in_a_real_browser(tmp_path: Path) -> None:
    """Stepping through the ladder arrow by arrow, the pane names the walk's step each arrow
    belongs to: the pipelined batch's error and the Sync's ReadyForQuery(I)."""
    from cdp import Browser

    from test_flow import cli
    page = tmp_path / "p.html"
    code, _, err = cli("report", str(PIPELINE), "-o", str(page))
    assert code == 0, err
    with Browser(CHROMIUM or "chromium", tmp_path) as b:
        b.open(page.as_uri())
        b.eval("document.querySelector('#ladder-box summary').click()")
        for _ in range(100):
            if b.eval("document.querySelectorAll('#ladder-svg .arrow').length"):
                break
            time.sleep(0.05)
        b.eval("document.getElementById('next').click()")  # the first arrow: frame 18
        pane = b.eval("document.getElementById('pane').innerText")
        assert pane.startswith("frame 18") and "step 1, extended query (c2):" in pane
        assert "skips everything after it up to the Sync" in pane
        for _ in range(2):
            b.eval("document.getElementById('next').click()")
        pane = b.eval("document.getElementById('pane').innerText")
        assert pane.startswith("frame 20") and "ReadyForQuery" in pane and "(I)" in pane
        assert "step 1, extended query (c2):" in pane


# -- Every sentence printed is one tested above ---------------------------------------------

# The notes' keys and the walk's kinds, each with the test above that checks it on frames.
NOTES = {
    r"Startup|SSLRequest|'N'|'S'|Cancel": "the answer to SSLRequest, StartupMessage, cancel",
    r"R|S|K|Q|P|B|E|D|1|2|n|t|T|C|Z|X|H|G|c|d|f|I|s|N|A": "messages, by their letter",
    r"ACK n B": "test_ack_pacing_is_said_only_where_the_sender_never_waited",
    r"ACK [\d,]+ B": "pacing, held ACKs, delayed ACKs",
    r"[\d,]+ B": "writes, coalesced segments, TLS records",
    r"~4 KiB segments from the pooler": "test_explain_names_only_what_the_diagram_shows",
    r"zero window|window update|dup ACK|win … raw": "test_flow, test_explain",
    r"\[after a hole\]|\[retransmission\]|slow start": "reordering, loss, slow start",
}
KINDS = ("TCP handshake", "TCP close", "TLS", "encryption", "start-up", "cancellation",
         "termination", "pooler's own statement", "hand-over", "request", "COPY out",
         "COPY in", "COPY in, aborted", "extended query", "simple query", "failed query")


@pytest.mark.parametrize("path", [PIPELINE, EXTENDED, TLS, PGBENCH, DUMP_POOLED, POOLED,
                                  PGPOOL, DIRECT, BRIDGE, COPY_IN, ERROR, RTT10, LOSS],
                         ids=lambda p: p.name)
def test_every_sentence_printed_is_one_tested_here(path: Path) -> None:
    for argv in ((), ("--all",)):
        for line in explain(path, *argv):
            if line.startswith("step "):
                kind = re.match(r"step \d+  (.+?) \(", line)
                assert kind is not None and kind[1] in KINDS, line
            elif not line.startswith("…  "):
                key = line.split("  ")[0]
                assert any(re.fullmatch(k, key) for k in NOTES), line
