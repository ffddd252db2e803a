"""Teaching mode (`pktflow flow --explain`): one sentence for each message type and each ACK
pattern that appears in the diagram, saying what it is and why it happens."""

from __future__ import annotations

from pktflow.flow.ladder import Ladder

# Message codes as drawn on the arrows (the protocol's type bytes; "Startup" etc. untyped).
MESSAGES = {
    "Startup": "StartupMessage: the client's first message, naming user, database and options.",
    "SSLRequest": "SSLRequest: the client asks for TLS before starting; 'S' means everything "
                  "after is encrypted, 'N' means it continues in plain text.",
    "R": "Authentication*: the server's authentication requests and its final "
         "AuthenticationOk.",
    "p": "the client's password or SASL (SCRAM) response; pktflow never shows its content.",
    "K": "BackendKeyData: the key the client needs to cancel a query on this backend.",
    "Q": "Query: a simple-protocol query, the SQL text in one message.",
    "P": "Parse: extended protocol, prepares a statement.",
    "B": "Bind: extended protocol, binds parameters to a prepared statement (a portal).",
    "E": "Execute (from the client) runs a portal; ErrorResponse (from the server) reports an "
         "error.",
    "1": "ParseComplete: the server accepted a Parse.",
    "2": "BindComplete: the server accepted a Bind.",
    "T": "RowDescription: the column names and types of the rows that follow.",
    "D": "DataRow (from the server): one row of the result. The server packs rows into an "
         "8,192-byte send buffer and writes it when full, so rows are cut across segments "
         "(the … marks a segment ending inside a row).",
    "d": "CopyData: one chunk of COPY data, one row per message for COPY TO STDOUT "
         "(what pg_dump reads).",
    "H": "CopyOutResponse (from the server): COPY TO STDOUT begins.",
    "G": "CopyInResponse: the server is ready for COPY FROM STDIN data.",
    "c": "CopyDone: the end of the COPY data.",
    "C": "CommandComplete: the statement finished; its tag says what it did (SELECT 10000).",
    "S": "ParameterStatus (from the server): a setting the client should know; Sync (from the "
         "client) ends an extended-protocol batch.",
    "N": "NoticeResponse: a warning or notice from the server.",
    "Z": "ReadyForQuery: the server is idle again. The server flushes its send buffer here, so "
         "the last segment of a response carries the tail of the rows plus C and Z.",
    "X": "Terminate: the client closes the session.",
}


def notes(ladder: Ladder) -> list[str]:
    """The sentences that apply to this diagram, in a useful reading order."""
    codes: list[str] = []
    acks: list[int] = []
    data_sizes: dict[int, int] = {}
    zero = winupd = dup = False
    for r in ladder.rows:
        for c, _ in r.msgs:
            if c not in codes:
                codes.append(c)
        if r.kind == "ack":
            acks.append(r.nbytes)
        elif r.kind == "data":
            data_sizes[r.nbytes] = data_sizes.get(r.nbytes, 0) + 1
        zero |= "zero window" in r.marks
        winupd |= r.kind == "window"
        dup |= r.kind == "dupack"
    out = [f"{c}  {MESSAGES[c]}" for c in codes if c in MESSAGES]
    common = max(data_sizes, key=data_sizes.__getitem__) if data_sizes else 0
    if acks and common and sum(1 for a in acks if a == 2 * common) >= len(acks) / 3:
        out.append(
            f"ACK {2 * common:,} B  Linux acknowledges at once when more than one full segment "
            f"is unacknowledged, otherwise it delays the ACK (40 ms minimum): with "
            f"{common:,}-byte segments that is one ACK per two segments, {2 * common:,} bytes. "
            f"This is ACK pacing, not a round trip the sender waited for.")
    if any(n == 4096 or 4000 <= n < 4096 for n in data_sizes) and \
            any(name.startswith("pooler") for name in ladder.lanes):
        out.append("~4 KB segments from the pooler  PgBouncer reads at most pkt_buf bytes "
                   "(4,096 by default) before it writes to the other side, so one 8,192-byte "
                   "server write leaves it as about 4 KB + 4 KB + a small tail.")
    if zero:
        out.append("zero window  the receiver's buffer is full: the sender must stop until a "
                   "window update. Through a pooler, the pooler's window to the server closes "
                   "while it is still draining to the client.")
    if winupd:
        out.append("window update  an ACK with nothing new acknowledged and a larger window: "
                   "the application read data and freed buffer space.")
    if dup:
        out.append("dup ACK  the same acknowledgement again while data is outstanding: a sign "
                   "of a lost or reordered segment.")
    if any("raw" in name for name in ladder.lanes) or any(r.win_raw for r in ladder.rows):
        out.append("win … raw  the connection began before the capture, so the window-scale "
                   "factor (sent only in the SYNs) is unknown: the raw 16-bit value is shown.")
    return out
