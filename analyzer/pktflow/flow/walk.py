"""Teaching mode's walk (`pktflow flow --explain`): the conversation told step by step as the
PostgreSQL documentation's Message Flow section tells it (start-up and authentication, simple
query, extended query and its Sync, COPY out and in, errors and ReadyForQuery, cancellation and
termination), with the TCP side beside it (handshake, close), each step naming the frames that
show it. Repeated exchanges are told once, with their count and frames."""

from __future__ import annotations

from dataclasses import dataclass, field

from pktflow.flow.ladder import Ladder, Row
from pktflow.flow.legend import tokens

MAX_STEPS = 16  # steps told; the rest are counted
FRAMES_LISTED = 8


@dataclass
class _Exchange:
    conn: str
    frames: list[int] = field(default_factory=list)
    sent: list[str] = field(default_factory=list)  # frontend messages, in order
    answered: list[str] = field(default_factory=list)  # backend messages, in order
    labels: list[str] = field(default_factory=list)  # what the arrows say, in order
    done: bool = False


def _frames(frames: list[int]) -> str:
    shown = ", ".join(str(f) for f in frames[:FRAMES_LISTED])
    return f"frame{'s' if len(frames) > 1 else ''} {shown}" + (
        f" … {frames[-1]}" if len(frames) > FRAMES_LISTED else "")


def _kind(x: _Exchange) -> tuple[str, str]:
    """(title, sentence) of an exchange, by the messages in it."""
    sent, answered = set(x.sent), set(x.answered)
    if "SSLRequest" in sent or "GSSENCRequest" in sent:
        if "EncryptionAccepted" in answered:
            return ("encryption", "the client asks for TLS (SSLRequest) and the server answers "
                    "'S': a TLS handshake follows and every message after it is encrypted")
        return ("encryption", "the client asks for TLS (SSLRequest); the server answers 'N', "
                "so the start-up goes on in plain text on the same connection")
    if "StartupMessage" in sent:
        auth = [m for m in x.answered if m.startswith("Authentication")]
        return ("start-up", "StartupMessage names the user and database; the server "
                f"authenticates ({', '.join(dict.fromkeys(auth)) or 'no request seen'}), then "
                "reports its settings (ParameterStatus), the cancellation key (BackendKeyData) "
                "and ReadyForQuery: the session is ready")
    if "CancelRequest" in sent:
        return ("cancellation", "a CancelRequest, sent on a new connection with the key from "
                "BackendKeyData, asks the server to cancel the query running on another; the "
                "server closes this one without an answer")
    if "Terminate" in sent and len(x.sent) == 1:
        return ("termination", "Terminate: the client ends the session, then closes the TCP "
                "connection (FIN)")
    if not answered:
        return ("request", f"{', '.join(dict.fromkeys(x.sent))} sent; the answer is outside "
                "the drawn span")
    error = "ErrorResponse" in answered
    if "CopyOutResponse" in answered:
        return ("COPY out", "a COPY TO STDOUT: CopyOutResponse, then one CopyData per row, "
                "CopyDone, CommandComplete (COPY n) and ReadyForQuery")
    if "CopyInResponse" in answered:
        return ("COPY in", "a COPY FROM STDIN: the server answers CopyInResponse, the client "
                "sends CopyData then CopyDone, the server CommandComplete and ReadyForQuery")
    if "Parse" in sent or "Execute" in sent or "Bind" in sent:
        tail = (" An error made the server skip everything up to the Sync, then answer "
                "ReadyForQuery." if error else "")
        return ("extended query", "extended protocol: Parse, Bind, Describe, Execute, then Sync; "
                "the server answers each (ParseComplete, BindComplete, RowDescription, DataRow, "
                "CommandComplete) and ReadyForQuery only at the Sync, which ends the batch."
                + tail)
    if "Query" in sent:
        if error:
            return ("failed query", "a simple query that failed: ErrorResponse (SQLSTATE and "
                    "message) instead of a result, and ReadyForQuery all the same: the "
                    "session goes on")
        if "RowDescription" not in answered:
            return ("simple query", "Query carries the SQL; a statement without rows is "
                    "answered CommandComplete (its tag) and ReadyForQuery")
        return ("simple query", "Query carries the SQL; the server answers RowDescription, a "
                "DataRow per row, CommandComplete with its tag and ReadyForQuery")
    return ("messages", "messages outside a request and its answer")


def _messages(ladder: Ladder) -> list[tuple[str, str, list[int]]]:
    """Exchanges in order: (title, sentence with what was seen, frames)."""
    open_: dict[str, _Exchange] = {}
    out: list[_Exchange] = []
    for r in ladder.rows:
        if r.kind != "data" or not r.msgs:
            continue
        names = [n for n, _ in r.msgs if not n.startswith("TLS")]
        if not names:
            continue
        x = open_.get(r.conn)
        starts = r.to_server and (x is None or x.done or not x.sent
                                  or names[0] in ("Query", "Parse", "StartupMessage",
                                                  "SSLRequest", "Terminate", "CancelRequest")
                                  and x.answered and not _copy_in(x))
        if x is None or starts:
            x = _Exchange(r.conn)
            open_[r.conn] = x
            out.append(x)
        x.frames.append(r.frame)
        (x.sent if r.to_server else x.answered).extend(names)
        x.labels.append(f"{'→' if r.to_server else '←'} {' '.join(tokens(r.msgs, r.details))}")
        if not r.to_server and names[-1] in ("ReadyForQuery", "EncryptionAccepted",
                                             "EncryptionRefused"):
            x.done = True
    steps = []
    for x in out:
        title, sentence = _kind(x)
        seen = "; ".join(x.labels[:4]) + ("; …" if len(x.labels) > 4 else "")
        steps.append((f"{title} ({x.conn})", f"{sentence.rstrip('.')}. On the wire: {seen}",
                      x.frames))
    return steps


def _copy_in(x: _Exchange) -> bool:
    return "CopyInResponse" in x.answered and not x.done


def _tcp(rows: list[Row]) -> tuple[list[tuple[str, str, list[int]]],
                                  list[tuple[str, str, list[int]]]]:
    """The handshakes, TLS sessions and closes: one step each per connection."""
    opened: dict[str, list[int]] = {}
    tls: dict[str, list[int]] = {}
    closed: dict[str, list[int]] = {}
    for r in rows:
        if r.kind in ("syn", "syn-ack") or (r.kind == "ack" and r.acks == "SYN-ACK"):
            opened.setdefault(r.conn, []).append(r.frame)
        elif r.kind in ("fin", "rst") or "FIN" in r.marks or (r.kind == "ack"
                                                               and r.acks == "FIN"):
            closed.setdefault(r.conn, []).append(r.frame)
        if any(n.startswith("TLS") for n, _ in r.msgs):
            tls.setdefault(r.conn, []).append(r.frame)
    first = [(f"TCP handshake ({c})", "SYN, SYN-ACK, ACK: both sides pick their first sequence "
              "numbers and announce their MSS and window scale; only then can data flow", f)
             for c, f in opened.items()]
    first += [(f"TLS ({c})", "the TLS handshake (hellos, keys, certificates), then encrypted "
               "records: the PostgreSQL messages are inside them, the capture cannot read "
               "them; only their sizes and timing show", f) for c, f in tls.items()]
    last = [(f"TCP close ({c})", "each side sends FIN when it has no more to send and the other "
             "acknowledges it (a RST aborts instead)", f) for c, f in closed.items()]
    return first, last


def walk(ladder: Ladder) -> list[str]:
    """The steps, as "step N  title: sentence (frames ...)" lines."""
    opening, closing = _tcp(ladder.rows)
    steps = opening + _messages(ladder) + closing
    steps.sort(key=lambda s: s[2][0] if s[2] else 0)
    # a run of the same kind of exchange is told once, whichever connections carried it (a
    # relay's front and back legs alternate)
    folded: list[tuple[str, list[str], str, list[int], int]] = []
    for title, sentence, frames in steps:
        kind, _, conn = title.partition(" (")
        conn = conn.rstrip(")")
        if folded and folded[-1][0] == kind and not kind.startswith(("TCP", "TLS")):
            was, conns, said, seen, count = folded[-1]
            folded[-1] = (was, conns if conn in conns else conns + [conn], said, seen + frames,
                          count + 1)
        else:
            folded.append((kind, [conn], sentence, frames, 1))
    out = []
    for i, (kind, conns, sentence, frames, count) in enumerate(folded[:MAX_STEPS], 1):
        times = f" ×{count}" if count > 1 else ""
        out.append(f"step {i}  {kind} ({', '.join(conns)}){times}: {sentence} "
                   f"({_frames(sorted(frames))})")
    if len(folded) > MAX_STEPS:
        out.append(f"…  {len(folded) - MAX_STEPS} more steps: select a query (--query) to "
                   f"walk through it")
    return out
