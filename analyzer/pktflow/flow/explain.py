"""Teaching mode (`pktflow flow --explain`): one sentence for each message type and each ACK
pattern that appears in the diagram, saying what it is and why it happens."""

from __future__ import annotations

from pktflow.flow.ladder import Ladder
from pktflow.flow.legend import MEANING, code, family

# What each message is and why it shows where it does, by name (the legend's short meanings
# for the rest). The arrow's key is the message's letter, as drawn.
MESSAGES = {
    "StartupMessage": "the client's first message, naming user, database and options.",
    "SSLRequest": "the client asks for TLS before starting; 'S' means everything after is "
                  "encrypted, 'N' means it continues in plain text.",
    "EncryptionRefused": "the server's one-byte answer 'N' to SSLRequest: no TLS, the "
                         "startup follows in plain text.",
    "Authentication": "the server's authentication requests and its final AuthenticationOk.",
    "PasswordMessage": "the client's password or SASL (SCRAM) response; pktflow never shows "
                       "its content.",
    "BackendKeyData": "the key the client needs to cancel a query on this backend.",
    "Query": "a simple-protocol query, the SQL text in one message.",
    "Parse": "extended protocol, prepares a statement.",
    "Bind": "extended protocol, binds parameters to a prepared statement (a portal).",
    "Describe": "extended protocol (from the client): asks for the description of a "
                "statement or portal; the server answers RowDescription or NoData.",
    "Execute": "extended protocol (from the client): runs a portal.",
    "Sync": "extended protocol (from the client): ends a batch; the server answers with "
            "ReadyForQuery, after an error it skips to here.",
    "ErrorResponse": "from the server, an error, shown with its SQLSTATE and message; the "
                     "statement is abandoned and ReadyForQuery follows.",
    "ParseComplete": "the server accepted a Parse.",
    "BindComplete": "the server accepted a Bind.",
    "RowDescription": "the column names and types of the rows that follow.",
    "DataRow": "from the server, one row of the result. The server packs rows into an "
               "8,192-byte send buffer and writes it when full, so rows are cut across "
               "segments (the … marks a segment ending inside a row; the row is counted in "
               "the segment that ends it).",
    "CopyData": "one chunk of COPY data, one row per message for COPY TO STDOUT "
                "(what pg_dump reads).",
    "CopyOutResponse": "COPY TO STDOUT begins.",
    "CopyInResponse": "the server is ready for COPY FROM STDIN data.",
    "CopyDone": "the end of the COPY data.",
    "CommandComplete": "the statement finished; its command tag, shown as sent, says what it "
                       "did (SELECT 10000, COPY 20000, INSERT 0 1).",
    "ParameterStatus": "from the server, a setting the client should know.",
    "NoticeResponse": "a warning or notice from the server, with its SQLSTATE and message.",
    "ReadyForQuery": "the server is idle again. The server flushes its send buffer here, so "
                     "the last segment of a response carries the tail of the rows plus C "
                     "and Z.",
    "Terminate": "the client closes the session.",
}


def notes(ladder: Ladder) -> list[str]:
    """The sentences that apply to this diagram, in a useful reading order."""
    names: list[str] = []
    acks: list[int] = []
    data_sizes: dict[int, int] = {}
    zero = winupd = dup = False
    for r in ladder.rows:
        for name, _ in r.msgs:
            if family(name) not in names:
                names.append(family(name))
        if r.kind == "ack":
            acks.append(r.nbytes)
        elif r.kind == "data":
            data_sizes[r.nbytes] = data_sizes.get(r.nbytes, 0) + 1
        zero |= "zero window" in r.marks
        winupd |= r.kind == "window"
        dup |= r.kind == "dupack"
    out = [f"{code(n)}  {n}: {MESSAGES.get(n) or MEANING.get(n, '') + '.'}" for n in names]
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
