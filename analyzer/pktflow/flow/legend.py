"""The words and letters a ladder draws, and its legend: every symbol used, explained.

Messages are written as their type byte, the letter the PostgreSQL documentation's Message
Formats give them (`Byte1('D')`). A letter means one message from the frontend (client) and
possibly another from the backend (server): `D` is Describe on an arrow toward the server and
DataRow on one toward the client. So the legend lists the two alphabets apart, by sender, as
the documentation marks messages (F) and (B)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from pktflow.pgwire.messages import BACKEND, FRONTEND

_CODES = {name: chr(t) for t, name in FRONTEND.items()} | \
    {name: chr(t) for t, name in BACKEND.items()}
# Untyped messages and replies named by what they answer keep a word of their own.
_WORDS = {"StartupMessage": "Startup", "SSLRequest": "SSLRequest",
          "GSSENCRequest": "GSSENCRequest", "CancelRequest": "Cancel",
          "EncryptionRefused": "'N'", "EncryptionAccepted": "'S'",
          # TLS records after 'S' (or a direct TLS start), by content type
          "TLSHandshake": "TLS-handshake", "TLSChangeCipherSpec": "TLS-CCS",
          "TLSApplicationData": "TLS-data", "TLSAlert": "TLS-alert",
          "TLSHeartbeat": "TLS-heartbeat", "TLSRecord": "TLS-record"}

# The server's single-byte answers have no name in the documentation: the legend says what
# they are beside their letter.
_SHOWN = {"EncryptionAccepted": "the single-byte answer to SSLRequest: TLS follows",
          "EncryptionRefused": "the single-byte answer: no encryption"}

# What each message is, in a few words (the documentation's one-line purpose).
MEANING = {
    "StartupMessage": "opens the session: protocol version, user, database and options "
                      "(the first message, unless an SSLRequest or GSSENCRequest and its "
                      "answer came before it)",
    "SSLRequest": "the client asks for TLS before starting; the answer is a single byte, S "
                  "or N",
    "GSSENCRequest": "the client asks for GSSAPI encryption before starting; the answer is a "
                     "single byte, G or N",
    "CancelRequest": "cancel the query running on another connection (sent on a new one)",
    "EncryptionRefused": "the server's single-byte answer N: it will not encrypt; the client "
                         "may go on in plain text, close, or try the other request (its "
                         "sslmode or gssencmode decides)",
    "EncryptionAccepted": "the server's single-byte answer S to SSLRequest: a TLS handshake "
                          "follows, and every message after it is encrypted",
    "TLSHandshake": "a TLS handshake record in plain text (content type 22): the hellos (and "
                    "before TLS 1.3, keys and certificates); its messages in brackets",
    "TLSChangeCipherSpec": "a TLS ChangeCipherSpec record (20)",
    "TLSApplicationData": "a TLS record of encrypted data (content type 23; TLS 1.3 sends "
                          "every encrypted record so, its certificate and Finished "
                          "included): PostgreSQL messages inside, unreadable",
    "TLSAlert": "a TLS alert record (21): a warning, or the end of the session",
    "TLSHeartbeat": "a TLS heartbeat record (24)",
    "TLSRecord": "a TLS record of another content type",
    "Authentication": "an authentication request (AuthenticationOk: accepted)",
    "PasswordMessage": "the client's password or SASL/GSS response (content never shown)",
    "BackendKeyData": "the key a client needs to cancel a query on this backend",
    "ParameterStatus": "a server setting the client should know",
    "ReadyForQuery": "the server is ready for the next query; its status byte in brackets: "
                     "I idle, T in a transaction block, E in a failed transaction block",
    "Query": "a simple-protocol query: the SQL text in one message",
    "Parse": "extended protocol: prepare a statement",
    "Bind": "extended protocol: bind parameters to a statement, making a portal",
    "Describe": "extended protocol: ask for a statement's description (answered "
                "ParameterDescription, then RowDescription or NoData) or a portal's "
                "(RowDescription or NoData)",
    "Execute": "extended protocol: run a portal",
    "Sync": "extended protocol: ends the batch (and commits its implicit transaction "
            "when no BEGIN opened one); the server answers ReadyForQuery",
    "Flush": "extended protocol: ask the server to send what it has produced so far, "
             "without ending the batch",
    "Close": "extended protocol: close a statement or portal",
    "ParseComplete": "the server accepted a Parse",
    "BindComplete": "the server accepted a Bind",
    "CloseComplete": "the server closed a statement or portal",
    "ParameterDescription": "the parameter types of a statement",
    "NoData": "the statement returns no rows",
    "RowDescription": "the column names and types of the rows that follow",
    "DataRow": "one row of a result",
    "CommandComplete": "a statement finished; its command tag, as sent, in brackets",
    "EmptyQueryResponse": "the query string was empty",
    "ErrorResponse": "an error: SQLSTATE and message in brackets",
    "NoticeResponse": "a notice or warning: SQLSTATE and message in brackets",
    "NotificationResponse": "a LISTEN/NOTIFY notification",
    "PortalSuspended": "Execute's row limit reached; the portal can go on",
    "CopyInResponse": "COPY FROM STDIN begins: the server waits for CopyData",
    "CopyOutResponse": "COPY TO STDOUT begins: CopyData follows",
    "CopyBothResponse": "streaming replication's COPY in both directions begins",
    "CopyData": "a chunk of COPY data (one row per message for COPY TO STDOUT, pg_dump)",
    "CopyDone": "the end of the COPY data",
    "CopyFail": "the client aborts a COPY FROM STDIN with a message; the server answers "
                "ErrorResponse",
    "FunctionCall": "the fast-path call of a function",
    "FunctionCallResponse": "the result of a fast-path call",
    "NegotiateProtocolVersion": "the server offers an older protocol minor version",
    "Terminate": "the client ends the session; the TCP close follows",
}

# The packets as drawn, and what they are; then the marks a packet can carry.
TCP_WORDS = {
    "data": ("n B", "a segment with n bytes of payload, then the messages it completed, in "
             "the order sent (×k: k in a row); … the last message goes on in a later segment"),
    "syn": ("SYN", "the client opens the connection (with its MSS, window scale, options)"),
    "syn-ack": ("SYN-ACK", "the server accepts, with its own options: the handshake's second "
                "step"),
    "ack": ("ACK n B", "acknowledges n new bytes; win: the receive window it advertises "
            "(bytes it can take beyond them)"),
    "ack-syn": ("ACK of SYN-ACK", "the handshake's last step"),
    "ack-fin": ("ACK of FIN", "acknowledges the peer's FIN (one sequence number)"),
    "ack-only": ("ACK", "an acknowledgement with nothing new and the same window"),
    "window": ("window update", "nothing new acknowledged, a larger window: the reader freed "
               "buffer space"),
    "dupack": ("dup ACK", "the same acknowledgement again while data is outstanding: the "
               "receiver got bytes beyond a hole (a segment lost or reordered)"),
    "SACK": ("[SACK]", "the ACK carries a SACK block: the bytes the receiver holds beyond the "
             "hole, so the sender resends only what is missing"),
    "D-SACK": ("[D-SACK]", "the ACK's SACK block lies below it: bytes that arrived twice (a "
               "retransmission that was not needed)"),
    "keepalive": ("keep-alive", "a probe one byte before the next sequence number: is the "
                  "peer still there?"),
    "probe": ("window probe", "the sender asks a receiver whose window is zero whether it has "
              "room again (a keep-alive's shape: one sequence number back)"),
    "fin": ("FIN", "the sender has no more to send (it may still receive)"),
    "rst": ("RST", "the connection is aborted at once"),
    "raw": ("win … raw", "the window-scale factor was not seen (the connection began before "
            "the capture): the raw 16-bit field"),
    "zero window": ("[zero window]", "the receiver's buffer is full: the sender must wait"),
    "retransmission": ("[retransmission]", "bytes sent before, sent again"),
    "out of order": ("[out of order]", "bytes that fill a hole, arriving after later bytes"),
    "after a hole": ("[after a hole]", "bytes beyond a hole: something before them is missing "
                     "so far"),
    "FIN": ("[FIN]", "the sender's last data: no more will come from it"),
    "for": ("[for cN]", "a request the pooler forwards to the server on behalf of client "
            "connection cN (paired by the relay analysis)"),
    "pooler's own": ("[pooler's own]", "a statement the pooler sends on its own: no client "
                     "sent it"),
}


class Detail(NamedTuple):
    """What a diagram shows beside a message: a command tag, an error's or notice's severity
    (never localized), SQLSTATE and text."""

    name: str
    code: str | None
    text: str
    severity: str | None = None


# the severity an error or notice usually has: only another one is drawn (FATAL, WARNING)
_USUAL = {"ErrorResponse": "ERROR", "NoticeResponse": "NOTICE"}


def detail_text(d: Detail) -> str:
    """An error's or notice's severity where unusual, SQLSTATE and message; a tag as sent."""
    severity = None if d.severity == _USUAL.get(d.name) else d.severity
    return " ".join(filter(None, (severity, d.code, d.text)))


def family(name: str) -> str:
    """A message's name as the legend groups it: every authentication request as one."""
    if name.startswith("Authentication"):
        return "Authentication"
    if name.startswith(("SASL", "GSSResponse")):
        return "PasswordMessage"
    return name


def code(name: str) -> str:
    """"DataRow" -> "D": the type byte; untyped messages keep a short word."""
    name = family(name)
    if name in _WORDS:
        return _WORDS[name]
    return _CODES.get(name, name)


def tokens(msgs: Iterable[tuple[str, int]], details: Iterable[Detail] = ()) -> list[str]:
    """Each message of a segment as drawn, in wire order: "D×71", "C(SELECT 10000)",
    "E(42P01 relation "t" does not exist)". Details go to the messages they belong to, in
    order."""
    queue: dict[str, list[Detail]] = {}
    for d in details:
        queue.setdefault(d.name, []).append(d)
    out = []
    for name, n in msgs:
        text = code(name) if n == 1 else f"{code(name)}×{n:,}"
        mine = queue.get(name, [])[:n]
        if mine:
            del queue[name][:len(mine)]
            # a handshake message by its name only: what a ServerHello chose is for the walk
            text += "(" + ", ".join(d.text.partition(", ")[0] if d.name.startswith("TLS")
                                    else detail_text(d)
                                    for d in mine) + ")"
        out.append(text)
    return out


def legend(used: Iterable[tuple[bool, str]], packets: Iterable[str]) -> list[str]:
    """Lines explaining each letter used, per sender ((True, name): sent toward the server),
    and each kind of packet and mark drawn (keys of TCP_WORDS), in the order given."""
    seen: dict[bool, dict[str, str]] = {True: {}, False: {}}
    for front, name in used:
        seen[front].setdefault(code(name), family(name))
    out = []
    for front, head in ((True, "F, toward the server"), (False, "B, toward the client")):
        plain = {c: n for c, n in seen[front].items() if not n.startswith("TLS")}
        if plain:
            out.append(f"{head}: " + " · ".join(
                c if c == n else f"{c} ({_SHOWN[n]})" if n in _SHOWN else f"{c} {n}"
                for c, n in plain.items()))
    tls = {c: n for side in seen.values() for c, n in side.items() if n.startswith("TLS")}
    if tls:
        out.append("TLS records, by content type: " + " · ".join(
            f"{c} = {MEANING[n].removeprefix('a TLS ')}" for c, n in tls.items()))
    if any(not n.startswith("TLS") for side in seen.values() for n in side.values()):
        both = sorted(c for c in set(seen[True]) & set(seen[False])
                      if seen[True][c] != seen[False][c])
        out.append("  letters are the type bytes of the PostgreSQL documentation's Message "
                   "Formats; the sender tells them apart (F: frontend, B: backend)"
                   + ("".join(f"; {c} is {seen[True][c]} toward the server, {seen[False][c]} "
                              f"toward the client" for c in both)))
        if any(n in ("CommandComplete", "ErrorResponse", "NoticeResponse")
               for side in seen.values() for n in side.values()):
            out.append("  C(tag): the command tag as sent; E(…), N(…): SQLSTATE and message "
                       "(a severity other than ERROR or NOTICE first)")
    for k in dict.fromkeys(packets):
        if k in TCP_WORDS:
            word, meaning = TCP_WORDS[k]
            out.append(f"{word}: {meaning}")
    return out
