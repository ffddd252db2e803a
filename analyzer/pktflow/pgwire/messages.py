"""PostgreSQL protocol 3.0 message types, named as in the PostgreSQL documentation, and parsers
for the few bodies pktflow reads. Bodies of DataRow and CopyData are never parsed: counted."""

from __future__ import annotations

import struct
from typing import Any

FRONTEND = {
    ord("Q"): "Query", ord("P"): "Parse", ord("B"): "Bind", ord("E"): "Execute",
    ord("D"): "Describe", ord("S"): "Sync", ord("H"): "Flush", ord("C"): "Close",
    ord("d"): "CopyData", ord("c"): "CopyDone", ord("f"): "CopyFail", ord("F"): "FunctionCall",
    ord("X"): "Terminate", ord("p"): "PasswordMessage",
}
BACKEND = {
    ord("R"): "Authentication", ord("K"): "BackendKeyData", ord("S"): "ParameterStatus",
    ord("Z"): "ReadyForQuery", ord("T"): "RowDescription", ord("D"): "DataRow",
    ord("C"): "CommandComplete", ord("I"): "EmptyQueryResponse", ord("E"): "ErrorResponse",
    ord("N"): "NoticeResponse", ord("A"): "NotificationResponse", ord("1"): "ParseComplete",
    ord("2"): "BindComplete", ord("3"): "CloseComplete", ord("t"): "ParameterDescription",
    ord("n"): "NoData", ord("s"): "PortalSuspended", ord("G"): "CopyInResponse",
    ord("H"): "CopyOutResponse", ord("W"): "CopyBothResponse", ord("d"): "CopyData",
    ord("c"): "CopyDone", ord("V"): "FunctionCallResponse", ord("v"): "NegotiateProtocolVersion",
}
# Types only one side sends: seeing them proves which side is which (mid-stream captures).
FRONTEND_ONLY = frozenset(FRONTEND) - frozenset(BACKEND)
BACKEND_ONLY = frozenset(BACKEND) - frozenset(FRONTEND)

AUTH_NAMES = {
    0: "AuthenticationOk", 2: "AuthenticationKerberosV5", 3: "AuthenticationCleartextPassword",
    5: "AuthenticationMD5Password", 7: "AuthenticationGSS", 8: "AuthenticationGSSContinue",
    9: "AuthenticationSSPI", 10: "AuthenticationSASL", 11: "AuthenticationSASLContinue",
    12: "AuthenticationSASLFinal",
}
# What the frontend's 'p' message is, given the last authentication request.
PASSWORD_REPLY = {3: "PasswordMessage", 5: "PasswordMessage", 7: "GSSResponse",
                  8: "GSSResponse", 9: "GSSResponse", 10: "SASLInitialResponse",
                  11: "SASLResponse"}

PROTOCOL_3 = 196608
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102
UNTYPED = {SSL_REQUEST: "SSLRequest", GSSENC_REQUEST: "GSSENCRequest",
           CANCEL_REQUEST: "CancelRequest"}

ERROR_FIELDS = {
    "S": "severity_localized", "V": "severity", "C": "code", "M": "message", "D": "detail",
    "H": "hint", "P": "position", "p": "internal_position", "q": "internal_query",
    "W": "where", "s": "schema", "t": "table", "c": "column", "d": "data_type",
    "n": "constraint", "F": "file", "L": "line", "R": "routine",
}
TX_STATUS = {ord("I"): "idle", ord("T"): "in-transaction", ord("E"): "failed-transaction"}

HEADER = struct.Struct(">BI")
INT32 = struct.Struct(">I")


def cstrings(body: bytes, limit: int = 64) -> list[str]:
    parts = body.split(b"\x00", limit)
    return [p.decode("utf-8", "replace") for p in parts]


def startup_params(body: bytes) -> dict[str, str]:
    """Key/value pairs of a StartupMessage body (after the protocol number)."""
    items = cstrings(body)
    return {items[i]: items[i + 1] for i in range(0, len(items) - 1, 2) if items[i]}


def error_fields(body: bytes) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in body.split(b"\x00"):
        if item:
            key = ERROR_FIELDS.get(chr(item[0]), f"field_{chr(item[0])}")
            out[key] = item[1:].decode("utf-8", "replace")
    return out


def command_rows(tag: str) -> int | None:
    """Row count of a CommandComplete tag: 'SELECT 5', 'COPY 7', 'INSERT 0 3', 'UPDATE 2'."""
    parts = tag.split()
    # ASCII digits, as PostgreSQL writes them: str.isdigit() also takes "²", which int() refuses
    if len(parts) >= 2 and parts[-1].isascii() and parts[-1].isdigit() and parts[0] in (
            "SELECT", "COPY", "INSERT", "UPDATE", "DELETE", "MERGE", "FETCH", "MOVE"):
        return int(parts[-1])
    return None
