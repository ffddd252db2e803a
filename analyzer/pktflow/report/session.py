"""A connection's PostgreSQL session in words, for the text report and the HTML page alike:
how the client authenticated, what its start-up asked for, what a cancel request stopped,
what the server said outside any query, and each query's outcome (its command tag, error,
notices). Words only: every fact is the core's, read from the connection's record.

Each function returns parts as (text, style): the terminal colours them, the page marks them.
"""

from __future__ import annotations

from typing import Any

Part = tuple[str, str | None]

# shown in a query's table of the text report: longer SQL keeps its start and its end (where
# statements that begin alike differ: four DELETEs of different rows)
SQL_SHOWN = 480
SQL_TAIL = 120

_METHODS = {"trust": "trust (no password asked)", "cleartext-password": "cleartext password",
            "md5": "MD5 password", "sasl": "SASL", "gss": "GSSAPI", "sspi": "SSPI",
            "kerberos-v5": "Kerberos V5", "scm-credential": "SCM credential"}
_SHOWN_PARAMETERS = ("user", "database", "application_name")  # on the connection's first line


def sql_text(sql: str | None, truncated: bool = False, limit: int = SQL_SHOWN) -> str:
    """The SQL with its whitespace collapsed; past `limit` characters its start and its end,
    with how long it is."""
    text = " ".join((sql or "").split())
    if len(text) > limit:
        text = (f"{text[:limit - SQL_TAIL - 3]} … {text[-SQL_TAIL:]} ({len(text):,} "
                f"characters)")
    return text + (" …(cut: the rest is not in the capture)" if truncated else "")


def server_said(m: dict[str, Any]) -> str:
    """An error or notice as the server sent it: severity, SQLSTATE, message."""
    return " ".join(x for x in (m.get("severity") or m.get("localized_severity"),
                                m.get("code"), m.get("message")) if x)


def _details(m: dict[str, Any]) -> str:
    """An error's or notice's other fields, where the server sent them."""
    parts = [f"{label}: {m[key]}" for key, label in (("detail", "detail"), ("hint", "hint"))
             if m.get(key)]
    if m.get("position"):
        parts.append(f"at character {m['position']}")
    if m.get("internal_query"):
        parts.append(f"in {m['internal_query']!r}" + (f" at character {m['internal_position']}"
                                                       if m.get("internal_position") else ""))
    if m.get("where"):
        parts.append(f"where: {m['where']}")
    objects = [f"{label} {m[key]}" for key, label in (
        ("schema", "schema"), ("table", "table"), ("column", "column"),
        ("data_type", "type"), ("constraint", "constraint")) if m.get(key)]
    if objects:
        parts.append(", ".join(objects))
    if m.get("file") or m.get("routine"):
        parts.append("raised in " + " ".join(x for x in (
            f"{m.get('file') or '?'}:{m['line']}" if m.get("line") else m.get("file"),
            m.get("routine")) if x))
    return f" ({'; '.join(parts)})" if parts else ""


def _shape(q: dict[str, Any], shown: int = 8) -> str:
    """A result's columns and its rows' bytes."""
    names, count = q.get("columns"), q.get("column_count")
    if names is None or count is None:
        return ""
    listed = ", ".join(names[:shown]) + (f", … ({count:,} columns)" if count > shown else "")
    said = f"{count} column{'s' if count != 1 else ''}" + (f": {listed}" if names else "")
    return f" ({said}; {q.get('data_row_bytes') or 0:,} B of rows)"


def outcome(q: dict[str, Any]) -> list[Part]:
    """What answered a query: its command tag as sent (a COMMIT in a failed transaction is
    answered ROLLBACK), its error, its notices, the cancel request that stopped it."""
    parts: list[Part] = []
    tag, err = q.get("command_tag"), q.get("error")
    if tag is not None:
        parts.append(((tag or "empty query") + _shape(q), None))
    if err:
        parts.append((server_said(err) + _details(err), "red"))
    if tag is None and not err:
        parts.append(("no answer" if q.get("first_response_s") is None else "no command tag",
                      "dim"))
    notices = q.get("notices") or []
    parts += [(server_said(n) + _details(n), "yellow") for n in notices]
    more = (q.get("notices_total") or 0) - len(notices)
    if more > 0:
        parts.append((f"and {more:,} more notice{'s' if more > 1 else ''}", "yellow"))
    by = q.get("cancelled_by")
    if by:
        parts.append((f"cancelled by {by['connection']}'s cancel request (frame {by['frame']}), "
                      f"{by['cancel_to_error_ms']:,.3f} ms before the error", "red"))
    if q.get("incomplete"):
        parts.append(("its end is not in the capture", "dim"))
    return parts


def _authentication(conn: dict[str, Any]) -> str | None:
    a = conn.get("authentication")
    if not a:
        return None
    method = a["method"]
    how = "refused before asking anything" if method is None else _METHODS.get(method, method)
    if method == "sasl":
        offered = ", ".join(a["mechanisms"]) or "none"
        how += f" {a['mechanism']} (offered: {offered})" if a["mechanism"] else \
            f" (offered: {offered})"
    if a["outcome"] == "ok":
        result = "ok"
    elif a["outcome"] == "failed":
        said = [e for e in conn.get("errors") or [] if e["frame"] == a["last_frame"]]
        result = "failed" + (f" ({server_said(said[0])})" if said else "")
    else:
        result = "not finished in the capture"
    trips = f"{a['round_trips']} round trip{'s' if a['round_trips'] != 1 else ''}"
    took = "" if a["ms"] is None else f", {a['ms']:,.3f} ms"
    return f"authentication: {how}, {result}; {trips}{took}"


def _cancel(conn: dict[str, Any]) -> str | None:
    c = conn.get("cancel_request")
    if not c:
        return None
    head = f"sent in frame {c['frame']}"
    target = c.get("target")
    if target is None:
        return (f"{head}: the connection whose start-up gave that process id and key is not in "
                f"the capture")
    if target["query_index"] is None:
        return (f"{head} to {target['connection']}'s backend, where no query ended as cancelled "
                f"after it (it came too late, or nothing was running)")
    return (f"{head}, it cancelled {target['connection']}#{target['query_index']}: its error "
            f"57014 came {c['cancel_to_error_ms']:,.3f} ms later")


def _parameters(conn: dict[str, Any]) -> str | None:
    st = conn.get("startup")
    if not st:
        return None
    params = {k: v for k, v in st["parameters"].items() if k not in _SHOWN_PARAMETERS}
    version = st["protocol_version"]
    if not params and version == "3.0":
        return None
    said = "; ".join(f"{k} {v!r}" for k, v in params.items())
    proto = "" if version == "3.0" else f"protocol {version}" + ("; " if said else "")
    return f"startup: {proto}{said}"


def session_lines(conn: dict[str, Any]) -> list[Part]:
    """The session's own facts, a line each: a cancel request, the authentication, the
    start-up's other parameters, what the server said outside any query."""
    out: list[Part] = []
    for line in (_cancel(conn), _authentication(conn), _parameters(conn)):
        if line is not None:
            out.append((line, None))
    auth = conn.get("authentication") or {}
    failed = auth.get("last_frame") if auth.get("outcome") == "failed" else None
    for key, what in (("errors", "error"), ("notices", "notice")):
        # the error that refused the login is said with the authentication
        said = [m for m in conn.get(key) or [] if key != "errors" or m["frame"] != failed]
        if said:
            total = conn.get(f"{key}_total", len(said))
            more = f" (the first {len(said)} of {total:,})" if total > len(said) else ""
            out.append((f"outside any query, {what}{'s' if len(said) > 1 else ''}{more}: "
                        + "; ".join(f"{server_said(m)} (frame {m['frame']})" for m in said),
                        "red" if key == "errors" else "yellow"))
    return out


def who(conn: dict[str, Any]) -> str:
    """Who connected, as the connection's first PostgreSQL line says it."""
    st = conn.get("startup")
    if st:
        return (f"user {st.get('user')!r} database {st.get('database')!r}"
                + (f" application {st['application_name']!r}" if st.get("application_name")
                   else ""))
    if conn.get("cancel_request"):
        return f"a cancel request for backend process {conn['cancel_request']['backend_pid']}"
    return "startup not in the capture"
