"""tshark as an independent witness: per-connection, per-direction TCP counts from its own
sequence analysis, for comparison with pktflow's engine."""

from __future__ import annotations

import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

TSHARK = shutil.which("tshark")

_FIELDS = ["tcp.stream", "ip.src", "ipv6.src", "tcp.srcport", "ip.dst", "ipv6.dst",
           "tcp.dstport", "tcp.len", "tcp.analysis.retransmission",
           "tcp.analysis.fast_retransmission", "tcp.analysis.spurious_retransmission",
           "tcp.analysis.out_of_order", "tcp.analysis.keep_alive"]

Key = tuple[str, int, str, int]  # src ip, src port, dst ip, dst port


def tshark_directions(path: Path) -> dict[Key, dict[str, int]]:
    """Per direction (src -> dst): payload bytes and data segments not flagged as
    retransmissions, and retransmitted segments, as tshark's TCP analysis counts them."""
    cmd = [TSHARK or "tshark", "-n", "-r", str(path), "-Y", "tcp", "-T", "fields",
           "-E", "separator=\t", "-o", "tcp.analyze_sequence_numbers:TRUE",
           "-o", "tcp.desegment_tcp_streams:FALSE"]
    for f in _FIELDS:
        cmd += ["-e", f]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    res: dict[Key, dict[str, int]] = defaultdict(lambda: {"payload_bytes": 0,
                                                          "data_segments": 0,
                                                          "retransmitted_segments": 0})
    for line in out.splitlines():
        (stream, s4, s6, sport, d4, d6, dport, tlen, retr, fretr, sretr, ooo,
         ka) = (line.split("\t") + [""] * 13)[:13]
        n = int(tlen or 0)
        if not n or ka:
            continue
        key = (s4 or s6, int(sport), d4 or d6, int(dport))
        row = res[key]
        if retr or fretr or sretr:
            row["retransmitted_segments"] += 1
        else:
            row["payload_bytes"] += n
            row["data_segments"] += 1
    return dict(res)


def pktflow_directions(report: dict) -> dict[Key, dict[str, int]]:  # type: ignore[type-arg]
    out: dict[Key, dict[str, int]] = {}
    for conn in report["connections"]:
        c, s = conn["client"], conn["server"]
        for name, key in (("client_to_server", (c["ip"], c["port"], s["ip"], s["port"])),
                          ("server_to_client", (s["ip"], s["port"], c["ip"], c["port"]))):
            d = conn["directions"][name]
            row = out.setdefault(key, {"payload_bytes": 0, "data_segments": 0,
                                       "retransmitted_segments": 0})
            # Segments that filled a hole are unique data to tshark too, unless it called them
            # retransmissions: pktflow counts those in both, so compare like with like.
            row["payload_bytes"] += d["payload_bytes"]
            row["data_segments"] += d["data_segments"]
            row["retransmitted_segments"] += d["retransmitted_segments"]
    return {k: v for k, v in out.items() if v["data_segments"] or v["retransmitted_segments"]}


# tshark's pgsql.type strings and the PostgreSQL documentation's names pktflow uses.
_PGSQL_NAMES = {
    "Data row": "DataRow", "Copy data": "CopyData", "Command completion": "CommandComplete",
    "Ready for query": "ReadyForQuery", "Row description": "RowDescription",
    "Simple query": "Query", "Parameter status": "ParameterStatus",
    "Backend key data": "BackendKeyData", "Termination": "Terminate",
    "Startup message": "StartupMessage", "SSL request": "SSLRequest", "Copy completion": "CopyDone",
    "CopyOut response": "CopyOutResponse", "CopyIn response": "CopyInResponse",
    "Parse": "Parse", "Bind": "Bind", "Execute": "Execute", "Sync": "Sync",
    "Parse completion": "ParseComplete", "Bind completion": "BindComplete",
    "Error": "ErrorResponse", "Notice": "NoticeResponse",
}
# Names the per-frame order compares as well (tshark's words for every message it names).
_PGSQL_ORDER_NAMES = _PGSQL_NAMES | {
    "Describe": "Describe", "Close completion": "CloseComplete", "Close": "Close",
    "Authentication request": "Authentication", "Password message": "PasswordMessage",
    "Row description": "RowDescription", "Empty query": "EmptyQueryResponse",
    "Parameter description": "ParameterDescription", "No data": "NoData",
    "Portal suspended": "PortalSuspended", "Flush": "Flush", "Copy failure": "CopyFail",
    "Notification response": "NotificationResponse", "Function call": "FunctionCall",
    "Function call response": "FunctionCallResponse", "Cancel request": "CancelRequest",
    # the frontend's 'p' is named by the authentication request it answers, as pktflow does
    "SASLInitialResponse message": "SASLInitialResponse", "SASLResponse message": "SASLResponse",
    "GSSResponse message": "GSSResponse",
}


def tshark_pgsql_counts(path: Path, ports: list[int]) -> dict[tuple[int, int], dict[str, int]]:
    """Per (src port, dst port): message counts from tshark's pgsql dissector, with decode-as
    for the non-standard ports and reassembly of out-of-order segments (without it tshark
    loses the message boundaries after a reordered segment)."""
    cmd = [TSHARK or "tshark", "-n", "-r", str(path), "-o", "tcp.reassemble_out_of_order:TRUE",
           "-T", "fields", "-e", "tcp.srcport", "-e", "tcp.dstport", "-e", "pgsql.type"]
    for p in ports:
        cmd += ["-d", f"tcp.port=={p},pgsql"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    res: dict[tuple[int, int], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for line in out.splitlines():
        sport, dport, types = (line.split("\t") + ["", ""])[:3]
        for t in filter(None, types.split(",")):
            name = _PGSQL_NAMES.get(t)
            if name is not None:
                res[(int(sport), int(dport))][name] += 1
    return {k: dict(v) for k, v in res.items()}


def pktflow_pgsql_counts(report: dict) -> dict[tuple[int, int], dict[str, int]]:  # type: ignore[type-arg]
    out = {}
    wanted = set(_PGSQL_NAMES.values())
    for conn in report["connections"]:
        # encrypted sessions too: their SSLRequest is plaintext, for tshark as for pktflow
        if not str(conn.get("protocol")).startswith("postgresql"):
            continue
        c, s = conn["client"]["port"], conn["server"]["port"]
        for side, key in (("frontend", (c, s)), ("backend", (s, c))):
            counts = {k: v for k, v in conn["messages"][side].items() if k in wanted}
            if counts:
                out[key] = counts
    return out


Sequence = list[tuple[str, int]]


def fold(names: list[str]) -> Sequence:
    """Consecutive repeats folded: [D, D, C] -> [(D, 2), (C, 1)]."""
    out: Sequence = []
    for n in names:
        if out and out[-1][0] == n:
            out[-1] = (n, out[-1][1] + 1)
        else:
            out.append((n, 1))
    return out


def tshark_pgsql_frames(path: Path, ports: list[int]) -> dict[int, Sequence]:
    """Per frame: the PostgreSQL messages tshark's pgsql dissector shows in it, in order,
    consecutive repeats folded. tshark reassembles a message across segments and shows it in
    the frame that completes it; out-of-order segments are reassembled too. Authentication
    requests are one name to tshark ("Authentication request"). A frame with a type tshark
    cannot name maps to None (the caller decides)."""
    cmd = [TSHARK or "tshark", "-n", "-r", str(path), "-o", "tcp.reassemble_out_of_order:TRUE",
           "-T", "fields", "-e", "frame.number", "-e", "pgsql.type"]
    for p in ports:
        cmd += ["-d", f"tcp.port=={p},pgsql"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    res: dict[int, Sequence] = {}
    for line in out.splitlines():
        frame, _, types = line.partition("\t")
        if not types:
            continue
        names = [_PGSQL_ORDER_NAMES.get(t, f"?{t}") for t in types.split(",")]
        res[int(frame)] = fold(names)
    return res


def pktflow_pgsql_frames(flow: dict) -> dict[int, Sequence]:  # type: ignore[type-arg]
    """The same from a flow JSON document (`flow --all --expand --format json`): each item's
    message_sequence, authentication requests under one name as tshark has them, and the
    server's one-byte answer to SSLRequest and TLS records left out (tshark's pgsql does not
    show them; tshark_tls_frames compares the records)."""
    res: dict[int, Sequence] = {}
    for it in flow["items"]:
        for row in it["group"]["rows"] if "group" in it else [it]:
            names: list[str] = []
            for name, n in row["message_sequence"]:
                if name.startswith(("Encryption", "TLS")):  # not pgsql messages to tshark
                    continue
                if name.startswith("Authentication"):
                    name = "Authentication"
                names += [name] * n
            if names:
                res[row["frame"]] = fold(names)
    return res


_TLS_NAMES = {"20": "TLSChangeCipherSpec", "21": "TLSAlert", "22": "TLSHandshake",
              "23": "TLSApplicationData", "24": "TLSHeartbeat"}


def tshark_tls_frames(path: Path) -> dict[int, Sequence]:
    """Per frame: the TLS records tshark shows completed in it, by content type, folded.
    tshark lists plaintext records' content types and TLS 1.3's encrypted records' opaque
    types in two fields; in a TLS 1.3 stream the plaintext ones come first."""
    cmd = [TSHARK or "tshark", "-n", "-r", str(path), "-T", "fields", "-e", "frame.number",
           "-e", "tls.record.content_type", "-e", "tls.record.opaque_type"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    res: dict[int, Sequence] = {}
    for line in out.splitlines():
        frame, plain, opaque = (line.split("\t") + ["", ""])[:3]
        types = [t for t in (plain.split(",") + opaque.split(",")) if t]
        if types:
            res[int(frame)] = fold([_TLS_NAMES.get(t, "TLSRecord") for t in types])
    return res


def pktflow_tls_frames(flow: dict) -> dict[int, Sequence]:  # type: ignore[type-arg]
    """The TLS records of a flow JSON document's items, per frame."""
    res: dict[int, Sequence] = {}
    for it in flow["items"]:
        for row in it["group"]["rows"] if "group" in it else [it]:
            seq = [(n, k) for n, k in row["message_sequence"] if n.startswith("TLS")]
            if seq:
                res[row["frame"]] = [(n, k) for n, k in seq]
    return res
