"""Exact ladders: each drawn segment carries the PostgreSQL messages it completed in wire order
(checked frame by frame against tshark's pgsql dissector on every capture), labels read in that
order with command tags and errors as sent, and `--expand` draws every frame of the selection,
the handshake, FIN and ACK-only packets named."""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from test_flow import cli, flow_json, rows
from tsharkcheck import (TSHARK, pktflow_pgsql_frames, pktflow_tls_frames, tshark_pgsql_frames,
                         tshark_tls_frames)

from pktflow.pipeline import analyze

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "captures"
ALL = sorted([*CAPTURES.glob("*.pcap"), *(CAPTURES / "conditions").glob("*.pcap.gz")])
# snaplen 128: tshark cannot reassemble cut payloads (its pgsql shows "Unknown" there), and
# pktflow decodes only up to the first cut; there is nothing to compare message by message.
SNAPPED = [p for p in ALL if "snap128" in p.name]
READABLE = [p for p in ALL if p not in SNAPPED]
needs_tshark = pytest.mark.skipif(TSHARK is None, reason="tshark is not installed (Debian "
                                                         "package tshark)")


def frame_row(doc: dict[str, Any], frame: int) -> dict[str, Any]:
    (row,) = [r for r in rows(doc) if r["frame"] == frame]
    return row


@needs_tshark
@pytest.mark.parametrize("path", READABLE, ids=lambda p: p.name)
def test_message_order_per_frame_is_tsharks(path: Path) -> None:
    """Every frame's messages equal tshark's, in order, consecutive repeats folded. tshark
    decodes the ports it is told (PgBouncer's 6432, Pgpool-II's 9999); pktflow finds
    PostgreSQL by its framing."""
    ports = sorted({c["server"]["port"] for c in analyze(str(path))["connections"]})
    doc = flow_json(str(path), "--all", "--expand")
    assert not doc["cut"]
    ours = pktflow_pgsql_frames(doc)
    theirs = tshark_pgsql_frames(path, ports)
    assert ours, "the capture carries PostgreSQL messages"
    diff = {f: (ours.get(f), theirs.get(f)) for f in sorted(set(ours) | set(theirs))
            if ours.get(f) != theirs.get(f)}
    assert not diff, list(diff.items())[:5]


@needs_tshark
def test_snapped_captures_are_what_tshark_cannot_read() -> None:
    assert SNAPPED, "the corpus has snaplen-cut captures"
    for path in SNAPPED:
        frames = tshark_pgsql_frames(path, [5432, 6432])
        assert any(name.startswith("?") for seq in frames.values() for name, _ in seq), path


def test_extended_protocol_reads_in_wire_order() -> None:
    path = CAPTURES / "extended-direct-loopback.pcap"
    doc = flow_json(str(path), "--all", "--expand")
    sent, answer = frame_row(doc, 25), frame_row(doc, 28)
    assert sent["message_sequence"] == [["Parse", 1], ["Bind", 1], ["Describe", 1],
                                        ["Execute", 1], ["Sync", 1]]
    assert sent["label"].endswith("P B D E S")
    assert answer["message_sequence"] == [
        ["ParseComplete", 1], ["BindComplete", 1], ["RowDescription", 1], ["DataRow", 1],
        ["CommandComplete", 1], ["ReadyForQuery", 1]]
    assert answer["label"].endswith("1 2 T D C(SELECT 1) Z(I)")
    # the legend tells the two D's apart, by sender
    legend = "\n".join(doc["legend"])
    assert "F, toward the server:" in legend and "D Describe" in legend
    assert "B, toward the client:" in legend and "D DataRow" in legend
    assert "D is Describe toward the server, DataRow toward the client" in legend


def test_rows_then_completion_fold_and_tags_are_as_sent() -> None:
    doc = flow_json(str(CAPTURES / "seqscan-10k-direct-loopback.pcap"))
    last = frame_row(doc, 215)
    assert last["message_sequence"] == [["DataRow", 18], ["CommandComplete", 1],
                                        ["ReadyForQuery", 1]]
    assert last["details"] == [{"message": "CommandComplete", "severity": None,
                                "sqlstate": None, "text": "SELECT 10000"},
                               {"message": "ReadyForQuery", "severity": None, "sqlstate": None,
                                "text": "I"}]
    # a row cut across segments belongs to the segment that ends it (as tshark counts it)
    assert frame_row(doc, 11)["message_sequence"] == [["RowDescription", 1], ["DataRow", 72]]
    copy = flow_json(str(CAPTURES / "pgdump-20k-direct-loopback.pcap"))
    assert frame_row(copy, 631)["label"].endswith("d×25 c C(COPY 20000) Z(T)")


def test_errors_show_sqlstate_and_message() -> None:
    doc = flow_json(str(CAPTURES / "error-direct-loopback.pcap"), "--all")
    (err,) = [r for r in rows(doc) if r["message_sequence"] == [["ErrorResponse", 1]]]
    assert err["details"] == [{"message": "ErrorResponse", "severity": "ERROR",
                               "sqlstate": "22012", "text": "division by zero"}]
    assert err["label"] == "66 B  E(22012 division by zero)"
    code, out, _ = cli("flow", str(CAPTURES / "error-direct-loopback.pcap"), "--all",
                       width=160)
    assert code == 0 and "E(22012 division by zero)" in out


EXPANDED = [CAPTURES / n for n in ("extended-direct-loopback.pcap",
                                   "seqscan-10k-direct-loopback.pcap",
                                   "seqscan-10k-pgbouncer-loopback.pcap",
                                   "pgbench-txn-pgbouncer-loopback.pcap",
                                   "tls-direct-loopback.pcap")]


@pytest.mark.parametrize("path", EXPANDED, ids=lambda p: p.name)
def test_expand_draws_every_frame(path: Path, tmp_path: Path) -> None:
    """--expand: as many arrows as the capture has TCP frames, in text, JSON and SVG."""
    want = analyze(str(path))["capture"]["tcp_packets"]
    doc = flow_json(str(path), "--all", "--expand")
    assert [r["frame"] for r in rows(doc)] == list(range(1, want + 1))
    code, out, _ = cli("flow", str(path), "--all", "--expand", width=200)
    assert code == 0 and sum(("▶" in ln or "◀" in ln) for ln in out.splitlines()) == want
    svg = tmp_path / "f.svg"
    assert cli("flow", str(path), "--all", "--expand", "--format", "svg", "-o", str(svg))[0] == 0
    ns = "{http://www.w3.org/2000/svg}"
    assert sum(1 for e in ET.parse(svg).getroot().iter(f"{ns}line") if e.get("marker-end")) \
        == want


@needs_tshark
def test_expand_of_a_query_draws_its_span_frame_for_frame() -> None:
    """A query's selection: every frame of its connections within the span, as tshark
    filters them."""
    path = CAPTURES / "seqscan-10k-pgbouncer-bridge.pcap"
    doc = flow_json(str(path), "--expand")
    drawn = [r["frame"] for r in rows(doc)]
    conns = {r["connection"] for r in rows(doc)}
    report = analyze(str(path))
    ports = [c["client"]["port"] for c in report["connections"] if c["id"] in conns]
    t0, t1 = min(r["t"] for r in rows(doc)), max(r["t"] for r in rows(doc))
    filt = (f"({' || '.join(f'tcp.port=={p}' for p in ports)}) && "
            f"frame.time_relative >= {t0 - 1e-6:.6f} && frame.time_relative <= {t1 + 1e-6:.6f}")
    out = subprocess.run([TSHARK or "tshark", "-n", "-r", str(path), "-Y", filt, "-T", "fields",
                          "-e", "frame.number"], capture_output=True, text=True,
                         check=True).stdout
    assert drawn == [int(x) for x in out.split()]


def test_handshake_fin_and_ack_only_are_named() -> None:
    doc = flow_json(str(CAPTURES / "extended-direct-loopback.pcap"), "--all", "--expand")
    first = rows(doc)[:3]
    assert [r["label"] for r in first][:2] == ["SYN", "SYN-ACK"]
    assert [r["kind"] for r in first] == ["syn", "syn-ack", "ack"]
    assert first[2]["label"].startswith("ACK of SYN-ACK")
    labels = [r["label"] for r in rows(doc)]
    assert "FIN" in labels and any(lb.startswith("ACK of FIN") for lb in labels)
    # an ACK of a FIN is not "ACK 1 B": the FIN takes a sequence number, not a byte
    fin_acks = [r for r in rows(doc) if r["label"].startswith("ACK of FIN")]
    assert all(r["bytes"] == 0 for r in fin_acks)
    legend = "\n".join(doc["legend"])
    for word in ("SYN:", "SYN-ACK:", "FIN:", "ACK:", "ACK n B:", "n B:"):
        assert word in legend, word


def test_window_updates_are_named() -> None:
    doc = flow_json(str(CAPTURES / "seqscan-10k-pgbouncer-loopback.pcap"), "--all", "--expand")
    updates = [r for r in rows(doc) if r["kind"] == "window"]
    assert updates and all(r["label"].startswith("window update") for r in updates)
    assert any(line.startswith("window update:") for line in doc["legend"])


@needs_tshark
def test_keepalive_shaped_probes_are_tsharks_keepalives() -> None:
    """The slow reader's zero windows: the server probes with keep-alive-shaped segments
    (one sequence number back, no payload). Drawn and named on the frames tshark flags."""
    path = CAPTURES / "conditions" / "seqscan-10k-pgbouncer-bridge-slowreader200000.pcap.gz"
    doc = flow_json(str(path), "--all", "--expand")
    probes = [r["frame"] for r in rows(doc) if r["kind"] in ("probe", "keepalive")]
    out = subprocess.run([TSHARK or "tshark", "-n", "-r", str(path), "-Y",
                          "tcp.analysis.keep_alive", "-T", "fields", "-e", "frame.number"],
                         capture_output=True, text=True, check=True).stdout
    assert probes == [int(x) for x in out.split()] and probes  # as many as the reader stalled
    assert all(r["label"] == "window probe" for r in rows(doc) if r["frame"] in probes)
    assert any(line.startswith("window probe:") for line in doc["legend"])


def test_a_reset_is_drawn_and_explained() -> None:
    doc = flow_json(str(CAPTURES / "tls-direct-loopback.pcap"), "--all", "--expand")
    (rst,) = [r for r in rows(doc) if r["kind"] == "rst"]
    assert rst["frame"] == 42 and rst["label"] == "RST"
    assert any(line.startswith("RST:") for line in doc["legend"])


@needs_tshark
def test_tls_records_are_named_by_content_type_as_tshark_shows_them() -> None:
    """After the server's one-byte 'S', segments are labelled by the TLS records they
    complete (handshake, ChangeCipherSpec, encrypted data), frame by frame as tshark shows
    them."""
    path = CAPTURES / "tls-direct-loopback.pcap"
    doc = flow_json(str(path), "--all", "--expand")
    ours, theirs = pktflow_tls_frames(doc), tshark_tls_frames(path)
    assert len(ours) == len(theirs) > 20
    assert ours == theirs
    assert frame_row(doc, 6)["message_sequence"] == [["EncryptionAccepted", 1]]
    assert frame_row(doc, 6)["label"] == "1 B  'S'"
    assert frame_row(doc, 11)["label"].endswith("TLS-handshake(ServerHello) TLS-data×4")
    legend = "\n".join(doc["legend"])
    assert "'S' (the single-byte answer to SSLRequest: TLS follows)" in legend
    assert "EncryptionAccepted" not in legend and "TLS-data = " in legend


def test_a_folded_group_starts_with_its_request_and_says_the_odd_one_out() -> None:
    """20 alike extended queries (issue 39, item 4): one group of 20 exchanges, each request
    (P B D E S) drawn before its answer; the requests whose parameter has one digit less are
    named, not a group of their own."""
    path = str(CAPTURES / "extended-direct-loopback.pcap")
    doc = flow_json(path, "--connection", "c2", "--detail")
    groups = [it["group"] for it in doc["items"] if "group" in it]
    assert [(g["repetitions"], g["period"]) for g in groups] == [(20, 2)]
    (g,) = groups
    first = g["rows"][0]
    assert (first["from"], first["to"]) == (0, 1) and first["label"].endswith("P B D E S")
    (sizes,) = g["sizes"]
    assert sizes["step"] == 0 and sizes["alike"] + sizes["other_count"] == 20
    assert sizes["alike"] > sizes["other_count"] > 0
    odd = {frame: n for frame, n in sizes["others"]}
    assert odd and all(n != sizes["bytes"] for n in odd.values())
    assert {r["frame"]: r["bytes"] for r in g["rows"] if r["frame"] in odd} == odd
    code, out, _ = cli("flow", path, "--connection", "c2", "--detail", width=160)
    assert code == 0 and "× 20" in out
    assert f"step 1 (P B D E S): {sizes['bytes']} B in {sizes['alike']} of 20" in out
    # every group of every capture's requests starts with a request
    for name in ("pgbench-txn-pgbouncer-loopback.pcap", "extended-direct-loopback.pcap"):
        doc = flow_json(str(CAPTURES / name), "--all", "--detail")
        for it in doc["items"]:
            if "group" in it and any(r["from"] < r["to"] and r["messages"]
                                     for r in it["group"]["rows"]):
                r = it["group"]["rows"][0]
                assert r["from"] < r["to"] and r["messages"], (name, r["frame"])
