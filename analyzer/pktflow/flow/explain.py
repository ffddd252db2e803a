"""Teaching mode (`pktflow flow --explain`): the walk (the conversation step by step), then a
sentence on each message type and each TCP pattern the diagram shows, each worded for what
this capture's frames show (a clause that depends on what happened is said only where it
happened)."""

from __future__ import annotations

from typing import Any

from pktflow.flow.ladder import Ladder, Row, Run
from pktflow.flow.legend import MEANING, code, family
from pktflow.flow.tcpnotes import tcp_notes
from pktflow.flow.tcpsteps import tcp_steps, tls13
from pktflow.flow.walk import Exchange, exchanges, fold, lines, message_steps, who_text

PAGE_STEPS = 200  # steps the page lists and steps through
PAGE_FRAMES = 2_000  # frames of a step the page maps to it

# What each message is and why it shows where it does, by name, where the legend's short
# meaning is not enough; the conditional clauses are added by _message below.
MESSAGES = {
    "SSLRequest": "the client asks for TLS before the start-up; the server answers a single "
                  "byte, S (TLS follows) or N (it will not).",
    "EncryptionAccepted": "S, the server's single-byte answer to SSLRequest: a TLS handshake "
                          "follows, and everything after it is encrypted.",
    "Authentication": "the server's authentication requests; AuthenticationOk: the client is "
                      "authenticated.",
    "PasswordMessage": "the client's password or SASL (SCRAM) response; pktflow never shows "
                       "its content.",
    "BackendKeyData": "the process ID and secret key a client puts in a CancelRequest to "
                      "cancel a query running on this session.",
    "ParameterStatus": "a setting the server reports (server_version, client_encoding, "
                       "application_name…): all of them at start-up, then each that changes.",
    "Query": "a simple-protocol query: the SQL text in one message.",
    "Parse": "extended protocol: prepares a statement from its SQL text.",
    "Bind": "extended protocol: binds parameter values to a prepared statement, making a "
            "portal.",
    "Execute": "extended protocol: runs a portal.",
    "ParseComplete": "the server accepted a Parse.",
    "BindComplete": "the server accepted a Bind.",
    "NoData": "the described statement returns no rows.",
    "ParameterDescription": "the parameter types of the statement a Describe asked about.",
    "RowDescription": "the column names and types of the rows that follow.",
    "CopyOutResponse": "COPY TO STDOUT begins: CopyData follows.",
    "CopyInResponse": "the server is ready for COPY FROM STDIN data.",
    "CopyDone": "the end of the COPY data.",
    "CopyFail": "the client aborts its COPY FROM STDIN, with a reason; the server answers "
                "ErrorResponse and ReadyForQuery, and copies nothing.",
    "NoticeResponse": "a warning or notice from the server, with its SQLSTATE and message.",
    "CancelRequest": "sent on a new connection with the key from BackendKeyData, to cancel the "
                     "query running on another; the server never answers it.",
}


def _message(name: str, xs: list[Exchange], view: list[Row | Run], lanes: list[str]) -> str:
    """The sentence for one message type, with what this drawing shows of it."""
    sent = {n for x in xs for n in x.sent}
    if name == "StartupMessage":
        first = ("after the answer to SSLRequest" if "SSLRequest" in sent
                 else "the client's first message")
        return (f"opens the session: protocol version, user, database and options ({first}).")
    if name == "EncryptionRefused":
        went_on = any(x.sent[:1] == ["StartupMessage"] for x in xs)
        return ("N, the server's single-byte answer: it will not encrypt"
                + ("; here the client went on in plain text (its sslmode allowed it; it could "
                   "have closed, or tried GSSENCRequest)." if went_on else "."))
    if name == "Describe":
        statement = any("ParameterDescription" in x.answered for x in xs)
        return ("extended protocol: asks for a description; of a statement it is answered "
                "ParameterDescription, then RowDescription or NoData" if statement else
                "extended protocol: asks for a description; of a portal (as here) it is "
                "answered RowDescription, or NoData for a statement without rows") + "."
    if name == "Sync":
        return ("extended protocol: ends a batch; the server answers ReadyForQuery, one per "
                "Sync, and commits the batch's implicit transaction (if no BEGIN opened one); "
                "after an error it skips everything up to the Sync.")
    if name == "Flush":
        return ("extended protocol: asks the server to send the replies it has so far, without "
                "ending the batch: no ReadyForQuery comes for it.")
    if name == "ErrorResponse":
        parts = ["from the server, an error with its SQLSTATE and message"]
        for x in xs:
            if "ErrorResponse" not in x.answered:
                continue
            if "StartupMessage" in x.sent:
                parts.append("during start-up it ends the session (the server closes the "
                            "connection)")
            elif "CopyFail" in x.sent:
                parts.append("after CopyFail it reports the abandoned COPY")
            elif "Sync" in x.sent:
                parts.append("in an extended batch the server skips everything up to the next "
                            "Sync, and ReadyForQuery comes only after that Sync")
            elif "Query" in x.sent:
                parts.append("in a simple Query the rest of its string is abandoned and "
                            "ReadyForQuery follows")
        return "; ".join(dict.fromkeys(parts)) + "."
    rows = [r for r in view if isinstance(r, Row)]
    runs = [r for r in view if isinstance(r, Run)]
    if name == "DataRow":
        said = "from the server, one row of a result."
        if any(r.partial and any(n == "DataRow" for n, _ in r.msgs) or
               r.partial and r.msgs == () for r in rows if not r.to_server and r.kind == "data") \
                or any(not r.to_server and (r.partial_datarow or r.partial_empty) for r in runs):
            said += (" The server packs its messages into an 8,192-byte send buffer and writes "
                     "it when full, so rows are cut across segments (… marks a segment ending "
                     "inside a row; the row is counted in the segment that ends it).")
        return said
    if name == "CopyData":
        out = any(not r.to_server and any(n == "CopyData" for n, _ in r.msgs) for r in view)
        into = any(r.to_server and any(n == "CopyData" for n, _ in r.msgs) for r in view)
        parts = []
        if out:
            parts.append("from the server, one message per row of COPY TO STDOUT (what pg_dump "
                        "reads)")
        if into:
            parts.append("from the client, chunks of its input, which need not be rows")
        return "COPY data: " + "; ".join(parts) + "."
    if name == "CommandComplete":
        tags = list(dict.fromkeys(d.text for r in rows for d in r.details
                                  if d.name == "CommandComplete"))
        return ("the statement finished; its command tag, as sent, says what it did"
                + (f" (here: {', '.join(tags[:3])})" if tags else "") + ".")
    if name == "ReadyForQuery":
        got: dict[str, int] = {}
        for r in rows:
            for d in r.details:
                if d.name == "ReadyForQuery":
                    got[d.text] = got.get(d.text, 0) + 1
        said = ("the server is ready for the next query. Its status byte says where the "
                "session stands: I idle, T inside a transaction block, E inside a failed one"
                + (f" (here: {', '.join(f'{s} ×{n:,}' for s, n in got.items())})" if got
                   else "") + ".")
        if any(r for r in rows if not r.to_server and len(r.msgs) >= 3 and r.msgs[-1][0] ==
               "ReadyForQuery" and r.msgs[0][0] in ("DataRow", "CopyData")):
            said += (" The server flushes its send buffer here, so the last segment of a "
                     "response carries the tail of the rows with C and Z.")
        return said
    if name == "Terminate":
        pooler = any(x.sent == ["Terminate"] and lanes[x.rows[0].src].startswith("pooler")
                     for x in xs)
        return "the client ends the session" + (
            "; a pooler sends it too, to close a server connection" if pooler else "") + "."
    if name in MESSAGES:
        return MESSAGES[name]
    return MEANING.get(name, "") + "."


def notes(ladder: Ladder, view: list[Row | Run], xs: list[Exchange],
          report: dict[str, Any] | None = None) -> list[str]:
    """The sentences on each message type drawn, then on the TCP patterns drawn (`view`: the
    rows the walk reads, `xs`: their exchanges)."""
    names: list[str] = []
    for r in view:
        for name, _ in r.msgs:
            if family(name) not in names:
                names.append(family(name))
    # the server's single-byte answers have no documented name: keyed by their byte alone
    out = [f"{code(n)}  " + ("" if n.startswith("Encryption") else f"{n}: ")
           + _message(n, xs, view, ladder.lanes) for n in names
           if not n.startswith("TLS")]
    by_conn: dict[str, list[Row]] = {}
    for r in view:
        if isinstance(r, Row) and r.details:
            by_conn.setdefault(r.conn, []).append(r)
    tls = {conn: tls13(rows) for conn, rows in by_conn.items()}
    return out + tcp_notes(ladder, report, tls)


def teach(ladder: Ladder, report: dict[str, Any] | None = None) -> None:
    """The walk and the notes, into the ladder (its explain lines, and its steps for the
    page's step-through)."""
    view = ladder.walk(PAGE_FRAMES)
    xs = exchanges(view)
    folded = fold(tcp_steps(ladder, view) + message_steps(ladder, view, xs, report))
    # the page's step-through keeps a bounded walk: its size follows the conversation's
    # shape, not a storm's 20,000 handshakes
    ladder.steps = [(f"{s.kind} ({who_text(who)})" + (f" ×{n}" if n > 1 else ""),
                     s.sentence, sorted(s.frames)[:PAGE_FRAMES])
                    for s, who, n in folded[:PAGE_STEPS]]
    ladder.explain = lines(folded) + notes(ladder, view, xs, report)
