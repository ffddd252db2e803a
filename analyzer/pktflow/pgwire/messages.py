"""PostgreSQL protocol 3.0 message type bytes and their names as in the PostgreSQL
documentation: the letters diagrams label messages with (the core decodes the protocol and
names each message; these only map the names back to their letters)."""

from __future__ import annotations

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
