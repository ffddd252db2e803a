"""Tables of SQL and numbers that stay whole in a narrow terminal: numbers keep their full
width and only the SQL gives way, down to SQL_MIN characters; past that, the caller splits
the columns over two tables (the relay's matched queries, a connection's queries)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from rich.table import Table
from rich.text import Text

SQL_MIN = 12
SQL_WIDTH = 48  # SQL shown in a table cell, whitespace collapsed, longer cut with an ellipsis
PANEL = 4  # a panel's border and padding, both sides


def short_sql(sql: str | None, width: int = SQL_WIDTH) -> str:
    text = " ".join((sql or "").split())
    return text if len(text) <= width else text[:width - 1] + "…"


def widths(heads: Sequence[str], rows: Sequence[Sequence[str | Text]]) -> list[int]:
    """Each column's full width: its header's or its widest cell's."""
    return [max([len(h), *(len(str(r[i])) for r in rows)]) for i, h in enumerate(heads)]


def fits(full: list[int], sql: int, width: int) -> bool:
    """Whether all columns, with SQL_MIN characters of SQL (column `sql`), fit in a panel
    `width` wide."""
    return sum(full) - full[sql] + SQL_MIN + 2 * (len(full) - 1) <= width - PANEL


def table(title: str, heads: Sequence[str], rows: Sequence[Sequence[str | Text]], full: list[int],
          cols: Iterable[int], left: Collection[str] = ("sql",)) -> Table:
    """The columns `cols` of `rows`; "sql" takes the room left, columns in `left` are
    left-justified, the others right."""
    out = Table(title=title, title_justify="left", box=None, pad_edge=False, expand=True)
    cols = list(cols)
    for i in cols:
        sql = heads[i] == "sql"
        out.add_column(heads[i], justify="left" if heads[i] in left else "right",
                       no_wrap=True, overflow="ellipsis", ratio=1 if sql else None,
                       min_width=SQL_MIN if sql else full[i])
    for r in rows:
        out.add_row(*(r[i] for i in cols))
    return out
