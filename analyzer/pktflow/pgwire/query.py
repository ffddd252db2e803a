"""One query's journey: request, response messages and bytes, timing, and the frames."""

from __future__ import annotations

from typing import Any, Final

from pktflow.pgwire.messages import command_rows
from pktflow.transfer.histogram import Histogram

SQL_CAP: Final = 64 * 1024  # SQL kept per query; longer text is cut and marked


class Query:
    __slots__ = ("sql", "kind", "tag", "tags_rows", "data_rows", "copy_data", "resp_bytes",
                 "resp_msgs", "sent_ts", "sent_frame", "first_ts", "first_frame", "last_ts",
                 "last_frame", "error", "incomplete", "done", "sql_truncated", "segments")

    def __init__(self, sql: str, kind: str, ts: float, frame: int) -> None:
        self.sql = sql[:SQL_CAP]
        self.sql_truncated = len(sql) > SQL_CAP
        self.kind = kind  # "simple" | "extended" | "copy" | "function"
        self.tag: str | None = None
        self.tags_rows: int | None = None  # rows summed over the command tags
        self.data_rows = 0
        self.copy_data = 0
        self.resp_bytes = 0
        self.resp_msgs = 0
        self.sent_ts = ts  # the frame carrying the request's last byte
        self.sent_frame = frame
        self.first_ts: float | None = None
        self.first_frame: int | None = None
        self.last_ts: float | None = None
        self.last_frame: int | None = None
        self.error: dict[str, Any] | None = None
        self.incomplete = False  # a capture gap hid part of the response
        self.done = False
        # sizes of the backend's segments while this query was the one being answered: how the
        # response was carried, which a relay changes (re-segmentation)
        self.segments = Histogram(cap=256)

    def respond(self, nbytes: int, nmsgs: int, ts: float, frame: int) -> None:
        if self.first_ts is None:
            self.first_ts, self.first_frame = ts, frame
        self.resp_bytes += nbytes
        self.resp_msgs += nmsgs
        self.last_ts, self.last_frame = ts, frame

    def command_complete(self, tag: str) -> None:
        self.tag = tag
        rows = command_rows(tag)
        if rows is not None:
            self.tags_rows = (self.tags_rows or 0) + rows

    @property
    def rows(self) -> int | None:
        if self.tags_rows is not None:
            return self.tags_rows
        return self.data_rows if self.data_rows else (0 if self.tag else None)

    def to_json(self) -> dict[str, Any]:
        return {
            "sql": self.sql, "sql_truncated": self.sql_truncated, "kind": self.kind,
            "command_tag": self.tag, "rows": self.rows, "data_rows": self.data_rows,
            "copy_data": self.copy_data, "response_bytes": self.resp_bytes,
            "response_messages": self.resp_msgs, "sent_s": self.sent_ts,
            "first_response_s": self.first_ts, "last_response_s": self.last_ts,
            "sent_frame": self.sent_frame, "first_frame": self.first_frame,
            "last_frame": self.last_frame, "error": self.error, "incomplete": self.incomplete,
            "response_segments": self.segments.n,
            "response_segment_median": self.segments.median(),
            "response_segment_max": self.segments.hi,
            "response_segment_sizes": self.segments.top(6),
            "goodput_bps": self.goodput(),
        }

    def goodput(self) -> int | None:
        """Response bytes per second from the first response byte to the last."""
        if self.first_ts is None or self.last_ts is None or self.last_ts <= self.first_ts:
            return None
        return round(self.resp_bytes / (self.last_ts - self.first_ts))
