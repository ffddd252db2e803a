"""The report as a Parquet dataset (`pktflow analyze --format parquet -o DIR CAPTURES...`):
a folder per table, a file per capture in each.

The columns are the core's (pktflow._core's tables, "pktflow.tables/1"): Arrow record batches
built in Rust from the report's records, taken by pyarrow through the Arrow C data interface.
This module only names the files and writes them. A capture's files are named after the
capture (its base name and a digest of its absolute path, so two hosts' `x.pcap` stay apart)
and each is written whole to a temporary name, then renamed: a rerun, or a task retried on
another Dask worker, replaces the file rather than adding a second one, and a reader never
sees half a file. A capture that gave no report has its row in `errors`, and its files in the
other tables are removed (and a report removes its stale `errors` row).

pyarrow is the `parquet` extra's: imported only when a dataset is written.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pktflow import _core

if TYPE_CHECKING:
    from pktflow.pipeline import Report

TABLES = ("captures", "connections", "directions", "queries", "relays", "relay_pairs",
          "findings", "errors")
BUFFER = 1 << 16  # bytes a table's file gathers before a write
EXTRA_HINT = "install the parquet extra: pip install 'pktflow[parquet]'"


def pyarrow_modules() -> tuple[Any, Any]:
    """pyarrow and pyarrow.parquet, or a usage error naming the extra."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        from pktflow.errors import UsageError

        raise UsageError("--format parquet needs pyarrow", hint=EXTRA_HINT) from None
    return pa, pq


def file_name(capture: str) -> str:
    """The file a capture's rows go in, in each table's folder (`capture`: its path, made
    absolute where the command was given, so every worker names it alike)."""
    base = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(capture)) or "capture"
    digest = hashlib.sha256(os.path.abspath(capture).encode()).hexdigest()[:12]
    return f"{base}-{digest}.parquet"


def _replace(pq: Any, table: Any, path: Path) -> None:
    """`table` written to `path` whole, or not at all."""
    tmp = _tmp(path)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def _remove(out: Path, names: tuple[str, ...], capture: str) -> None:
    for name in names:
        (out / name / file_name(capture)).unlink(missing_ok=True)


def write_report(out: Path, report: Report, capture: str) -> int:
    """Every table's rows of `report` (on the capture at `capture`) to `out`, a batch at a
    time as the core builds them; each file renamed into place once all are written. The
    rows written."""
    pa, pq = pyarrow_modules()
    name = file_name(capture)
    writers: dict[str, Any] = {}
    sinks: dict[str, Any] = {}
    rows = 0

    def sink(batch: Any) -> None:
        nonlocal rows
        if batch.name == "errors":
            return
        rb = pa.record_batch(batch)
        if batch.name not in writers:
            folder = out / batch.name
            folder.mkdir(parents=True, exist_ok=True)
            # buffered: written straight to the file, Parquet's pages and footer are hundreds
            # of small writes, each with a seek (a fleet of small captures spent a third of
            # its time in those system calls)
            sinks[batch.name] = pa.output_stream(str(_tmp(folder / name)), buffer_size=BUFFER)
            writers[batch.name] = pq.ParquetWriter(sinks[batch.name], rb.schema)
        writers[batch.name].write_batch(rb)
        rows += rb.num_rows

    try:
        report.core.write_tables(sink)
        for table, writer in writers.items():
            writer.close()
            sinks[table].close()
        for table in writers:
            os.replace(_tmp(out / table / name), out / table / name)
    finally:
        for table, writer in writers.items():
            writer.close()
            sinks[table].close()
            _tmp(out / table / name).unlink(missing_ok=True)
    _remove(out, ("errors",), capture)
    return rows


def errors_schema(pa: Any) -> Any:
    """The `errors` table's schema, as the core declares it (units in field metadata)."""
    types = {"int": pa.int64(), "text": pa.string()}
    fields = []
    for table, columns in _core.table_schema():
        if table != "errors":
            continue
        for name, _, kind, unit in columns:
            fields.append(pa.field(name, types[kind], metadata={"unit": unit} if unit else None))
    return pa.schema(fields, metadata={"pktflow.schema": _core.TABLES_SCHEMA,
                                       "pktflow.table": "errors"})


def write_error(out: Path, capture: str, name: str, fields: dict[str, Any]) -> None:
    """A capture (at `capture`, called `name`) that gave no report: its "pktflow.error/1"
    fields as its row in `errors`, and no rows of it in the other tables."""
    pa, pq = pyarrow_modules()
    schema = errors_schema(pa)
    row = {"file": name, **fields}
    table = pa.Table.from_pylist([{f.name: row.get(f.name) for f in schema}], schema=schema)
    folder = out / "errors"
    folder.mkdir(parents=True, exist_ok=True)
    _replace(pq, table, folder / file_name(capture))
    _remove(out, tuple(t for t in TABLES if t != "errors"), capture)


def sweep(out: Path) -> None:
    """Temporary files a killed task left behind (its worker died mid-write), once the run is
    over: readers skip them (their names start with a dot), this removes them."""
    for table in TABLES:
        for tmp in (out / table).glob(".*.tmp"):
            tmp.unlink(missing_ok=True)
