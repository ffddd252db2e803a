"""Teaching mode's walk (`pktflow flow --explain`): the conversation told step by step as the
PostgreSQL documentation's Message Flow section tells it (start-up and authentication, simple
query, extended query and its Sync, COPY out and in, errors and ReadyForQuery, cancellation and
termination), with the TCP side beside it (flow/tcpsteps.py), each step naming the frames that
show it. Every sentence says what these frames show: a clause is added only where they show it
(an error skipping a batch to its Sync, a Flush answered early, a pooler's own statement).
Repeated exchanges told the same way are told once, with their count and frames."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pktflow.flow.ladder import POOLER_OWN, Ladder, Row, Run
from pktflow.flow.legend import tokens
from pktflow.report.connections import by_id

MAX_STEPS = 16  # steps told; the rest are counted
FRAMES_LISTED = 8
WHO_LISTED = 6  # connections named in a folded step's title; the rest are counted
MAX_LOOKED = 10_000  # exchanges searched for what a cancel did

# ReadyForQuery's status byte, as the documentation words it
STATUS = {"I": "idle, no transaction open", "T": "inside a transaction block",
          "E": "inside a failed transaction block, where every statement is refused until "
               "it ends"}
# what opens an exchange on its own: the simple protocol's requests and the untyped ones (an
# extended batch goes on until its Sync's ReadyForQuery)
OPENERS = ("Query", "StartupMessage", "SSLRequest", "GSSENCRequest", "Terminate",
           "CancelRequest")
EXTENDED = ("Parse", "Bind", "Describe", "Execute", "Close", "Sync", "Flush")


class Step(NamedTuple):
    kind: str  # "extended query", "TCP close", ...
    who: str  # the connection, and whose request a pooler sent: "c2 for c5"
    sentence: str
    frames: list[int]


@dataclass
class Exchange:
    conn: str
    # its segments with messages, in order (a run of bulk segments past its first rows is
    # summed up: it adds its messages, its count and its frames, not rows)
    rows: list[Row] = field(default_factory=list)
    sent: list[str] = field(default_factory=list)  # frontend messages, in order
    answered: list[str] = field(default_factory=list)  # backend messages, in order
    labels: list[str] = field(default_factory=list)  # what the arrows say, in order
    done: bool = False
    owner: str = ""  # on a pooler's server leg: "for c5", or the pooler's own
    frames: list[int] = field(default_factory=list)  # its segments' frames, in order
    counts: dict[tuple[str, bool], int] = field(default_factory=dict)  # (name, to server)

    def add(self, r: Row | Run, names: list[str]) -> None:
        """A segment (or a run of them) carrying messages `names`."""
        if isinstance(r, Run):
            self.frames += r.frames + ([r.last_frame] if r.last_frame not in r.frames else [])
            self.labels.append("…")
        else:
            self.rows.append(r)
            self.frames.append(r.frame)
            self.labels.append(f"{'→' if r.to_server else '←'} "
                               f"{' '.join(tokens(r.msgs, r.details))}")
        (self.sent if r.to_server else self.answered).extend(names)
        for name, n in r.msgs:
            key = (name, r.to_server)
            self.counts[key] = self.counts.get(key, 0) + n

    def details(self, name: str) -> list[tuple[str, str, int]]:
        """(SQLSTATE or "", text, frame) of each detail of messages named `name`."""
        return [(d.code or "", d.text, r.frame) for r in self.rows for d in r.details
                if d.name == name]

    def first_frame(self, name: str, to_server: bool) -> int | None:
        return next((r.frame for r in self.rows if r.to_server == to_server
                     and any(n == name for n, _ in r.msgs)), None)

    def count(self, name: str, to_server: bool) -> int:
        return self.counts.get((name, to_server), 0)


def exchanges(view: list[Row | Run]) -> list[Exchange]:
    """The drawn PostgreSQL messages as exchanges: a request and its answer, per connection,
    in order (`view`: the rows the walk reads, Ladder.walk)."""
    open_: dict[str, Exchange] = {}
    out: list[Exchange] = []
    for r in view:
        if isinstance(r, Run):
            names = [n for n in r.messages if not n.startswith("TLS")]
            x = open_.get(r.conn)
            if x is not None and names:  # its first rows opened or joined its exchange
                x.add(r, names)
            continue
        if r.kind != "data" or not r.msgs:
            continue
        names = [n for n, _ in r.msgs if not n.startswith("TLS")]
        if not names:
            continue
        x = open_.get(r.conn)
        starts = r.to_server and (x is None or x.done or not x.sent
                                  or names[0] in OPENERS and x.answered and not _copy_in(x))
        if x is None or starts:
            x = Exchange(r.conn)
            owners = [m for m in r.marks if m == POOLER_OWN or m.startswith("for ")]
            x.owner = owners[0] if owners else ""
            open_[r.conn] = x
            out.append(x)
        x.add(r, names)
        if not r.to_server and names[-1] in ("ReadyForQuery", "EncryptionAccepted",
                                             "EncryptionRefused"):
            x.done = True
    return out


def _copy_in(x: Exchange) -> bool:
    return "CopyInResponse" in x.answered and not x.done


def _list(items: list[str]) -> str:
    return ", ".join(items[:-1]) + (" and " if len(items) > 1 else "") + items[-1] \
        if items else ""


def _status(x: Exchange) -> str:
    """"ReadyForQuery(I) (idle, no transaction open)" for the exchange's last one."""
    got = x.details("ReadyForQuery")
    if not got:
        return "ReadyForQuery"
    s = got[-1][1]
    return f"ReadyForQuery({s}) ({STATUS[s]})" if s in STATUS else f"ReadyForQuery({s})"


class Context:
    """What a step may say about the rest of the drawing: the exchanges after it, the rows
    (who closed), the report's SQL of a pooler's own statements."""

    def __init__(self, ladder: Ladder, view: list[Row | Run], xs: list[Exchange],
                 report: dict[str, Any] | None):
        self.ladder, self.xs = ladder, xs
        self.next: dict[int, Exchange] = {}  # id of an exchange -> the next on its connection
        last: dict[str, Exchange] = {}
        for x in xs:
            if x.conn in last:
                self.next[id(last[x.conn])] = x
            last[x.conn] = x
        self.closes: dict[str, list[int]] = {}  # connection -> the server side's FIN, RST
        for r in view:
            if isinstance(r, Row) and not r.to_server and \
                    (r.kind in ("fin", "rst") or "FIN" in r.marks):
                self.closes.setdefault(r.conn, []).append(r.frame)
        self.cancels = [x for x in xs if "CancelRequest" in x.sent]
        self.sql: dict[tuple[str, int], str] = {}  # (connection, sent frame) -> SQL
        own = {(q["connection"], q["query_index"]): q["sql"]
               for relay in (report or {}).get("relays") or []
               for q in relay.get("pooler_own_queries") or []}
        if report is not None and own:
            for c in by_id(report["connections"], {conn for conn, _ in own}):
                for i, q in enumerate(c.get("queries") or []):
                    if (c["id"], i) in own and q.get("sent_frame") is not None:
                        self.sql[(c["id"], q["sent_frame"])] = own[(c["id"], i)]

    def role(self, r: Row) -> str:
        """Who sent a row: the first word of its lane (client, pooler, server)."""
        return self.ladder.lanes[r.src].split()[0]

    def closed_by_server(self, conn: str, after: int) -> int | None:
        """The frame of the server side's FIN (or RST) on `conn` after frame `after`."""
        return next((f for f in self.closes.get(conn, []) if f > after), None)

    def after(self, x: Exchange) -> Exchange | None:
        """The next exchange on the same connection."""
        return self.next.get(id(x))


def _encryption(x: Exchange, ctx: Context) -> tuple[str, str]:
    asked = "SSLRequest" if "SSLRequest" in x.sent else "GSSENCRequest"
    if "EncryptionAccepted" in x.answered:
        return ("encryption", f"the client asks for TLS ({asked}) and the server answers the "
                "single byte S: a TLS handshake follows on this connection, and every "
                "message after it is encrypted")
    said = (f"the client asks for encryption ({asked}); the server answers the single byte "
            "N: it will not encrypt")
    nxt = ctx.after(x)
    if nxt is not None and nxt.sent[:1] == ["StartupMessage"]:
        return ("encryption", said + "; the client goes on in plain text on the same "
                "connection (its sslmode allows it; it could have closed, or tried "
                "GSSENCRequest)")
    if nxt is not None and nxt.sent[:1] == ["GSSENCRequest"]:
        return ("encryption", said + "; the client tries GSSENCRequest next")
    return ("encryption", said)


def _startup(x: Exchange, ctx: Context) -> tuple[str, str]:
    parts = []
    auth = [m for m in dict.fromkeys(x.answered) if m.startswith("Authentication")]
    if auth:
        parts.append(f"the server authenticates the client ({', '.join(auth)})")
    settings = x.count("ParameterStatus", False)
    if settings:
        parts.append(f"reports {settings} of its settings (ParameterStatus)")
    if "BackendKeyData" in x.answered:
        parts.append("gives the key a CancelRequest needs (BackendKeyData)")
    if "ReadyForQuery" in x.answered:
        parts.append(f"answers {_status(x)}: the session is ready")
    said = "StartupMessage opens the session with the protocol version and its options (user, " \
        "database…)"
    if parts:
        said += "; " + _list(parts)
    errors = x.details("ErrorResponse")
    if errors:
        code, text, frame = errors[0]
        said += (f"; the server refuses the session with E({code} {text}): an error during "
                 f"start-up ends it")
        closed = ctx.closed_by_server(x.conn, frame)
        if closed is not None:
            said += ", and the server closes the connection"
    return ("start-up", said)


def _cancel(x: Exchange, ctx: Context) -> tuple[str, str]:
    said = ("CancelRequest, sent on a connection of its own, carries the process ID and "
            "secret key another connection's BackendKeyData gave")
    if not x.answered:
        said += "; the server answers nothing"
        frame = x.frames[0]
        if ctx.closed_by_server(x.conn, frame) is not None:
            said += " and closes this connection"
    for y in ctx.xs[:MAX_LOOKED]:
        hit = [e for e in y.details("ErrorResponse") if e[0] == "57014" and e[2] > x.frames[0]]
        if y.conn != x.conn and hit:
            said += f"; the query on {y.conn} then fails with E({hit[0][0]} {hit[0][1]})"
            break
    return ("cancellation", said)


def _terminate(x: Exchange, ctx: Context, last: dict[str, tuple[str, int]]) -> tuple[str, str]:
    if ctx.role(x.rows[0]) != "pooler":
        return ("termination", "Terminate: the client ends the session")
    said = "the pooler ends its session with the server (Terminate)"
    status = last.get(x.conn)
    if status is not None and status[0] in ("T", "E"):
        said += (f": the last ReadyForQuery on this server connection said {status[0]} "
                 f"({STATUS[status[0]].split(',')[0]}), so its client left inside a "
                 f"transaction; a server connection in a transaction cannot serve another "
                 f"client, so the pooler closes it instead of returning it to its pool")
    return ("termination", said)


def _pooler_own(x: Exchange, ctx: Context) -> tuple[str, str]:
    sql = ctx.sql.get((x.conn, x.frames[0]), "")
    said = ("the pooler sends a statement of its own, which no client sent"
            + (f": \"{sql}\"" if sql else ""))
    head = sql.strip().upper()
    if head.startswith("SET APPLICATION_NAME"):
        said += "; it gives this server session the client's application_name"
    elif head.startswith("DISCARD ALL"):
        said += ("; it resets the session (settings, prepared statements, temporary tables) "
                 "so that the server connection is clean for the next client")
    if x.answered:
        said += f"; answered with {_status(x)}"
    return ("pooler's own statement", said)


def _copy(x: Exchange) -> tuple[str, str]:
    tags = [t for _, t, _ in x.details("CommandComplete")]
    if "CopyOutResponse" in x.answered:
        rows = x.count("CopyData", False)
        said = "COPY TO STDOUT: CopyOutResponse, then CopyData"
        if tags and tags[-1] == f"COPY {rows}":
            said += f" ×{rows:,}, one per row (the tag says {tags[-1]})"
        return ("COPY out", said + f", CopyDone, CommandComplete and {_status(x)}")
    said = "COPY FROM STDIN: the server answers CopyInResponse and waits for the client's data"
    chunks = x.count("CopyData", True)
    if "CopyFail" in x.sent:
        errors = x.details("ErrorResponse")
        said += (f"; the client sends {chunks} CopyData, then aborts with CopyFail; the server "
                 "answers" + (f" E({errors[0][0]} {errors[0][1]})" if errors else "")
                 + f" and {_status(x)}: nothing is copied")
        return ("COPY in, aborted", said)
    said += f"; the client sends it in {chunks:,} CopyData"
    if tags and tags[-1].startswith("COPY ") and tags[-1] != f"COPY {chunks}":
        said += f" (they need not be rows: the tag counts {tags[-1][5:]} rows)"
    return ("COPY in", said + f", then CopyDone; the server answers CommandComplete and "
            f"{_status(x)}")


# what answers each extended-protocol request, as the Message Flow section lists them
_REPLIES = {"Parse": ("ParseComplete",), "Bind": ("BindComplete",),
            "Describe": ("RowDescription", "NoData"),
            "Execute": ("CommandComplete", "EmptyQueryResponse", "PortalSuspended"),
            "Close": ("CloseComplete",), "Sync": ("ReadyForQuery",)}


def _matched(x: Exchange) -> tuple[int | None, list[str]]:
    """The index in x.sent of the request an ErrorResponse answered, and the requests the
    server skipped after it up to the Sync; (None, []) without an error. Replies are matched
    to requests in order (the server answers each in turn)."""
    todo = [(i, n) for i, n in enumerate(x.sent) if n in _REPLIES]
    at = 0
    for reply in x.answered:
        if at >= len(todo):
            break
        if reply == "ErrorResponse":
            sync = next((k for k in range(at, len(todo)) if todo[k][1] == "Sync"), len(todo))
            return todo[at][0], [n for _, n in todo[at + 1:sync]]
        if reply in _REPLIES[todo[at][1]]:
            at += 1
    return None, []


def _extended(x: Exchange) -> tuple[str, str]:
    syncs, readies = x.count("Sync", True), x.count("ReadyForQuery", False)
    # an implicit transaction: no transaction block opened or closed in the batch
    tags = [t for _, t, _ in x.details("CommandComplete")]
    implicit = not any(t.split(" ")[0] in ("BEGIN", "START", "COMMIT", "ROLLBACK", "END")
                       for t in tags) and _status(x).startswith("ReadyForQuery(I)")
    executes = x.count("Execute", True)
    parts = []
    asked = [n for n in ("Parse", "Bind", "Describe", "Execute") if n in x.sent]
    said = f"extended protocol: {', '.join(asked)}"
    if executes > 1 and syncs == 1:
        said += (f", {executes} queries sent one after another before a single Sync: a "
                 f"pipeline, each query answered in turn")
    if "ParameterDescription" in x.answered:
        parts.append("Describe of the statement is answered by ParameterDescription (the "
                     "parameter types), then RowDescription or NoData")
    elif "Describe" in x.sent and ("RowDescription" in x.answered or "NoData" in x.answered):
        parts.append("Describe of the portal is answered by RowDescription (or NoData for a "
                     "statement without rows)")
    failed, skipped = _matched(x)
    if failed is not None:
        query = x.sent[:failed].count("Execute") + 1
        code, text, frame = x.details("ErrorResponse")[0]
        said_error = (f"E({code} {text}) answers the {x.sent[failed]} of query {query}: the "
                      f"server skips everything after it up to the Sync")
        if skipped:
            said_error += f" ({len(skipped)} messages unanswered: {' '.join(skipped)})"
        parts.append(said_error)
        done = [t for _, t, f in x.details("CommandComplete") if f <= frame]
        if done and implicit:
            parts.append(f"the error rolls back the batch's implicit transaction, with what "
                         f"ran before it ({', '.join(done)})")
        ready = x.first_frame("ReadyForQuery", False)
        if ready is not None and x.first_frame("ErrorResponse", False) != ready:
            parts.append("the ErrorResponse left in a segment of its own, ReadyForQuery "
                         "after the Sync")
    flush = x.first_frame("Flush", True)
    sync = x.first_frame("Sync", True)
    if flush is not None:
        early = [r for r in x.rows if not r.to_server and r.frame > flush
                 and (sync is None or r.frame < sync)]
        if early and not any(n == "ReadyForQuery" for r in early for n, _ in r.msgs):
            parts.append("Flush asks the server to send what it has: the replies so far came "
                         "before the Sync, without ReadyForQuery, and the batch went on")
    if syncs and readies == syncs:
        closed = ("Sync ends the batch" + (" and commits its implicit transaction (no BEGIN "
                                           "opened one)" if failed is None and implicit
                                           else "")
                  + f"; ReadyForQuery comes only after the Sync, one per Sync: {_status(x)}")
        parts.append(closed)
        replies = [r for r in x.rows if not r.to_server and sync is not None
                   and r.frame > sync]
        if failed is None and flush is None and len(replies) == 1 and len(x.rows) == 2:
            parts.append("the server sends its buffered replies when it reaches the Sync, so "
                         "they arrive together in one segment")
    return ("extended query", said + ("; " + "; ".join(parts) if parts else ""))


def _simple(x: Exchange, ctx: Context) -> tuple[str, str]:
    errors = x.details("ErrorResponse")
    tags = [t for _, t, _ in x.details("CommandComplete")]
    if errors:
        code, text, _ = errors[0]
        said = f"a simple query that fails: E({code} {text}) instead of a result"
        if code == "57014":
            cancel = next((y for y in ctx.cancels if y.frames[0] < errors[0][2]), None)
            if cancel is not None:
                said += f", the cancel sent on {cancel.conn}"
        said += ("; the error ends the Query (whatever its string held after the failing "
                 f"statement is not run), then {_status(x)}: the session goes on")
        return ("failed query", said)
    said = "Query carries the SQL"
    if len(tags) > 1:
        said += (f"; its string holds {len(tags)} statements, each answered in turn with its "
                 f"own CommandComplete, one ReadyForQuery at the end")
    if "RowDescription" in x.answered:
        said += "; the server answers RowDescription, a DataRow per row, CommandComplete"
    else:
        said += "; a statement without rows is answered CommandComplete"
    return ("simple query", said + (f" ({tags[-1]})" if tags else "") + f" and {_status(x)}")


def _kind(x: Exchange, ctx: Context, last: dict[str, tuple[str, int]]) -> tuple[str, str]:
    """(kind, sentence) of an exchange, by the messages in it."""
    sent = set(x.sent)
    if sent & {"SSLRequest", "GSSENCRequest"}:
        return _encryption(x, ctx)
    if "StartupMessage" in sent:
        return _startup(x, ctx)
    if "CancelRequest" in sent:
        return _cancel(x, ctx)
    if x.sent == ["Terminate"]:
        return _terminate(x, ctx, last)
    if x.owner == POOLER_OWN:
        return _pooler_own(x, ctx)
    if not x.answered:
        return ("request", f"{', '.join(dict.fromkeys(x.sent))} sent; the answer is after the "
                "drawn span")
    if "CopyOutResponse" in x.answered or "CopyInResponse" in x.answered:
        return _copy(x)
    if sent & set(EXTENDED):
        return _extended(x)
    if "Query" in sent:
        return _simple(x, ctx)
    return ("messages", "messages outside a request and its answer")


def message_steps(ladder: Ladder, view: list[Row | Run], xs: list[Exchange],
                  report: dict[str, Any] | None) -> list[Step]:
    """The exchanges as steps (`xs`: those of `view`, the rows the walk reads), with a
    pooler's hand-over of a server connection between two clients' transactions where the
    drawing shows one."""
    ctx = Context(ladder, view, xs, report)
    last: dict[str, tuple[str, int]] = {}  # connection -> last ReadyForQuery status, frame
    owner: dict[str, tuple[str, Exchange]] = {}  # server connection -> its last client
    steps = []
    for x in xs:
        if x.owner.startswith("for "):
            before = owner.get(x.conn)
            status = last.get(x.conn)
            if before is not None and before[0] != x.owner and status and status[0] == "I":
                steps.append(Step(
                    "hand-over", x.conn,
                    f"{before[0][4:]}'s transaction on server connection {x.conn} ended with "
                    f"ReadyForQuery(I); its next request is {x.owner[4:]}'s: the pooler gives "
                    f"a server connection to another client only between transactions, when "
                    f"ReadyForQuery says I (mid-transaction, T, it stays with its client)",
                    [status[1], x.frames[0]]))
            owner[x.conn] = (x.owner, x)
        kind, sentence = _kind(x, ctx, last)
        seen = "; ".join(x.labels[:4]) + ("; …" if len(x.labels) > 4 else "")
        who = x.conn + (f" {x.owner}" if x.owner.startswith("for ") else "")
        steps.append(Step(kind, who, f"{sentence.rstrip('.')}. On the wire: {seen}", x.frames))
        got = x.details("ReadyForQuery")
        if got:
            last[x.conn] = (got[-1][1], got[-1][2])
    return steps


def _frames(frames: list[int]) -> str:
    shown = ", ".join(str(f) for f in frames[:FRAMES_LISTED])
    return f"frame{'s' if len(frames) > 1 else ''} {shown}" + (
        f" … {frames[-1]}" if len(frames) > FRAMES_LISTED else "")


def fold(steps: list[Step]) -> list[tuple[Step, list[str], int]]:
    """Steps in frame order; a run told the same way is one step (whichever connections
    carried it: a relay's front and back legs alternate), with its count."""
    steps = sorted(steps, key=lambda s: s.frames[0] if s.frames else 0)
    out: list[tuple[Step, list[str], int]] = []
    seen: set[str] = set()  # the connections of the last step
    for s in steps:
        if out and out[-1][0].kind == s.kind and out[-1][0].sentence == s.sentence and \
                not s.kind.startswith(("TCP", "TLS")):
            was, who, count = out[-1]
            was.frames.extend(s.frames)
            if s.who not in seen:
                seen.add(s.who)
                who.append(s.who)
            out[-1] = (was, who, count + 1)
        else:
            out.append((s._replace(frames=list(s.frames)), [s.who], 1))
            seen = {s.who}
    return out


def who_text(who: list[str]) -> str:
    return ", ".join(who[:WHO_LISTED]) + (f" … {len(who):,} connections"
                                          if len(who) > WHO_LISTED else "")


def lines(folded: list[tuple[Step, list[str], int]]) -> list[str]:
    """The steps, as "step N  kind (who): sentence (frames ...)" lines."""
    out = []
    for i, (s, who, count) in enumerate(folded[:MAX_STEPS], 1):
        times = f" ×{count}" if count > 1 else ""
        out.append(f"step {i}  {s.kind} ({who_text(who)}){times}: {s.sentence} "
                   f"({_frames(sorted(s.frames))})")
    if len(folded) > MAX_STEPS:
        out.append(f"…  {len(folded) - MAX_STEPS} more steps: select a query (--query) to "
                   f"walk through it")
    return out
