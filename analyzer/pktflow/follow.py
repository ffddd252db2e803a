"""A capture read from a pipe, said as it goes (`tcpdump -w - | pktflow analyze - --follow`).

The core says each query once it is final and each connection once it is judged
("pktflow.follow/1"), and the judge each connection's findings; this module writes them, a
line each: the core's JSON line as it is
(jsonl), or a line of text from the same values. SIGINT ends the stream where it stands: the
pass then finishes as at the stream's end, and the capture's own parts (relays, findings) are
written last.
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from pktflow import _core
from pktflow.rates import format_rate
from pktflow.transfer.advice import NAMES
from pktflow.transfer.verdict import MIN_BYTES


@contextmanager
def stop_on_sigint(stopper: Any) -> Iterator[None]:
    """While inside, SIGINT stops the stream (`stopper`) instead of raising
    KeyboardInterrupt; a second SIGINT raises it as usual."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread (a test's worker thread: none)
        return

    def handler(signum: int, frame: Any) -> None:
        if stopper.stopped:
            raise KeyboardInterrupt
        stopper.stop()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _ms(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None else f"{(b - a) * 1000:.3f} ms"


def response_limit(q: dict[str, Any], limits: dict[str, float] | None) -> str | None:
    """What limited a bulk response (MIN_BYTES or more, as for a direction's verdict): the
    limit its transfer gave the most seconds, and its share of them; None for a small one."""
    if not limits or q["response_bytes"] < MIN_BYTES:
        return None
    total = sum(limits.values())
    if total <= 0:
        return None
    limit = max(limits, key=lambda k: limits[k])
    return f"limited by {NAMES.get(limit, limit)} ({limits[limit] / total:.0%})"


def query_line(connection: str, q: dict[str, Any],
               limits: dict[str, float] | None = None) -> str:
    """One final query: where, when, its SQL, the server's time to the first response byte,
    the response's transfer time, rows, bytes, tag or error, and for a bulk response what
    limited it."""
    sql = " ".join(q["sql"].split())
    if len(sql) > 80:
        sql = sql[:79] + "…"
    parts = [f"{connection} query at {q['sent_s']:.6f} s: {sql}",
             f"server {_ms(q['sent_s'], q['first_response_s'])}",
             f"transfer {_ms(q['first_response_s'], q['last_response_s'])}",
             f"{'-' if q['rows'] is None else format(int(q['rows']), ',')} rows",
             f"{q['response_bytes']:,} B"]
    if q["goodput_bps"] is not None:
        parts.append(format_rate(q["goodput_bps"]))
    error = q["error"]
    if error is not None:
        parts.append(f"error {error.get('code') or ''} {error.get('message') or ''}".rstrip())
    elif q["command_tag"]:
        parts.append(q["command_tag"])
    if q["incomplete"]:
        parts.append("incomplete")
    limited = response_limit(q, limits)
    if limited:
        parts.append(limited)
    return ", ".join(parts)


def connection_line(c: dict[str, Any]) -> str:
    """One judged connection: who, how long, how it closed, its queries and each direction's
    bytes and limit."""
    def ep(e: dict[str, Any]) -> str:
        return f"[{e['ip']}]:{e['port']}" if ":" in e["ip"] else f"{e['ip']}:{e['port']}"

    parts = [f"{c['id']} {ep(c['client'])} -> {ep(c['server'])} "
             f"{c['start_s']:.6f}-{c['end_s']:.6f} s",
             f"closed by {c['closed_by'] or 'nobody seen'}"]
    if "queries_total" in c:
        parts.append(f"{c['queries_total']:,} queries")
    for name, d in c["directions"].items():
        if not d["payload_bytes"]:
            continue
        side = "to server" if name == "client_to_server" else "to client"
        limit = d["verdict"]["limit"]
        shares = d["verdict"]["shares"]
        said = f"{d['payload_bytes']:,} B {side}"
        if limit != "none":
            share = f" {shares[limit]:.0%}" if shares and limit in shares else ""
            said += f" ({limit}{share})"
        parts.append(said)
    return ", ".join(parts)


def verdict_line(connection: str, v: dict[str, Any]) -> str:
    """A relay leg's verdict judged again as the relay's (at the stream's end)."""
    shares = v["shares"]
    share = f" {shares[v['limit']]:.0%}" if shares and v["limit"] in shares else ""
    return (f"{connection} to client, judged again as its relay's: {v['limit']}{share}: "
            f"{v['summary']}")


class Printer:
    """Writes what the core said after each step, flushing so a pipe sees it at once."""

    def __init__(self, out: IO[str], jsonl: bool) -> None:
        self.out = out
        self.jsonl = jsonl

    @property
    def follow(self) -> str:
        return "json" if self.jsonl else "values"

    def __call__(self, items: list[tuple[str, Any]]) -> None:
        if not items:
            return
        for kind, item in items:
            if kind == "finding":  # Python's words, written here
                if self.jsonl:
                    self.out.write(json.dumps({"schema": _core.FOLLOW_SCHEMA, "event": "finding",
                                               **item}, separators=(",", ":")) + "\n")
                else:
                    self.out.write(f"{item['connection'] or '-'} {item['severity']} "
                                   f"{item['code']}: {item['message']}\n")
            elif kind == "verdict":  # a relay leg's verdict judged again as its relay's
                if self.jsonl:
                    self.out.write(json.dumps({"schema": _core.FOLLOW_SCHEMA, "event": "verdict",
                                               "direction": "server_to_client", **item},
                                              separators=(",", ":")) + "\n")
                else:
                    self.out.write(verdict_line(item["connection"], item["verdict"]) + "\n")
            elif self.jsonl:
                self.out.write(item + "\n")
            elif kind == "query":
                self.out.write(query_line(item["connection"], item["query"],
                                          item["response_limits"]) + "\n")
            else:
                self.out.write(connection_line(item["connection"]) + "\n")
        self.out.flush()


def stopper() -> Any:
    return _core.Stopper()
