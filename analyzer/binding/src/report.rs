//! A finished report as Python holds it: the core writes its JSON, and hands renderers the
//! parts they draw (a connection, a relay's pairs) one at a time, as they ask.

use std::io::Write;

use pktflow_core::drawing::{Drawing as CoreDrawing, Drawn, Lanes, Map, Shared};
use pktflow_core::relay::RelayRecord;
use pktflow_core::report::{Report as CoreReport, ReportError};
use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::drawing::Drawing;
use crate::errors::CoreBug;
use crate::{guard, spool_error, to_py};

#[pyclass(module = "pktflow._core")]
pub struct Report {
    inner: CoreReport,
    /// Every connection's packets, when the pass kept them for a diagram.
    recording: Option<Shared>,
}

impl Report {
    pub fn new(inner: CoreReport, recording: Option<Shared>) -> Self {
        Report { inner, recording }
    }

    /// The packets of connections `numbers` within capture times [t0, t1], at most `max`.
    fn drawn(&self, numbers: &[u64], t0: f64, t1: f64, max: usize) -> PyResult<Drawn> {
        let recording = (self.recording.as_ref()).ok_or_else(|| {
            PyValueError::new_err("the pass kept no packets (open it with record=True)")
        })?;
        let recording = recording
            .lock()
            .map_err(|_| CoreBug::new_err("the recording's lock was poisoned"))?;
        guard(|| recording.read(numbers, t0, t1, max))?.map_err(spool_error)
    }
}

/// Each connection's lanes, as Python gives them: (number, client lane, server lane, client's
/// window raw, server's window raw).
fn lanes_map(lanes: Vec<(u64, u16, u16, bool, bool)>) -> Map<u64, Lanes> {
    (lanes.into_iter())
        .map(|(n, client, server, client_raw, server_raw)| {
            let lane = Lanes {
                client,
                server,
                client_raw,
                server_raw,
            };
            (n, lane)
        })
        .collect()
}

/// A diagram's packet as Python's tests read it: connection, engine direction, frame, time,
/// seq, end, ack, window, flags, payload class, first SACK block's place.
type PacketTuple = (u64, u8, u64, f64, i64, i64, i64, i64, u8, u8, u8);

pub(crate) fn report_error(e: ReportError) -> PyErr {
    match e {
        ReportError::Spool(e) => spool_error(e),
        ReportError::Decode(e) => CoreBug::new_err(e),
        ReportError::Write(e) => PyValueError::new_err(e),
    }
}

/// Text to a Python stream's `write`, a megabyte at a time. A Python exception there (a
/// closed pipe) is kept, and raised as itself once the writing stops.
struct PyStream<'py> {
    stream: Bound<'py, PyAny>,
    buf: Vec<u8>,
    failed: Option<PyErr>,
}

const CHUNK: usize = 1 << 20;

impl PyStream<'_> {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let buf = std::mem::take(&mut self.buf);
        let sent = self.send_text(&buf);
        self.buf = buf;
        self.buf.clear();
        sent
    }

    fn send_text(&mut self, data: &[u8]) -> std::io::Result<()> {
        // the report is ASCII (its writer escapes everything else)
        let text = std::str::from_utf8(data).map_err(std::io::Error::other)?;
        let chunk = PyString::new(self.stream.py(), text);
        if let Err(e) = self.stream.call_method1("write", (chunk,)) {
            self.failed = Some(e);
            return Err(std::io::Error::other("the stream's write failed"));
        }
        Ok(())
    }
}

impl Write for PyStream<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if data.len() >= CHUNK {
            // as large as a chunk: sent as it is, after what came before it
            self.send()?;
            self.send_text(data)?;
            return Ok(data.len());
        }
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

impl Report {
    fn relay(&self, relay: usize) -> PyResult<&RelayRecord> {
        (self.inner.relays.get(relay))
            .ok_or_else(|| PyIndexError::new_err(format!("no relay {relay}")))
    }
}

#[pymethods]
impl Report {
    /// Write the report's JSON to `stream` (an object with `write(str)`): indented as
    /// json.dumps(report, indent=2) indents it, or compact on one line; then a newline.
    #[pyo3(signature = (stream, indented=true))]
    fn write_json(&self, stream: &Bound<'_, PyAny>, indented: bool) -> PyResult<()> {
        crate::memory::give_back_free_pages();
        let mut out = PyStream {
            stream: stream.clone(),
            buf: Vec::with_capacity(CHUNK + (64 << 10)),
            failed: None,
        };
        let written = guard(|| self.inner.write_json(&mut out, indented))?;
        let flushed = written.map(|out| out.flush());
        // the stream's own exception first (a closed pipe stays a BrokenPipeError)
        if let Some(e) = out.failed.take() {
            return Err(e);
        }
        match flushed {
            Ok(flushed) => flushed.map_err(|e| PyValueError::new_err(e.to_string())),
            Err(ReportError::Write(why)) => Err(PyValueError::new_err(why)),
            Err(e) => Err(report_error(e)),
        }
    }

    /// The capture's part.
    fn capture(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_py(py, &self.inner.capture)
    }

    /// Every finding, in the report's order.
    fn findings(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_py(py, &self.inner.findings)
    }

    /// The relays, each with its matched pairs' list empty (`pairs` reads them), in its
    /// place among the keys.
    fn relays(&mut self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        let mut out = Vec::with_capacity(self.inner.relays.len());
        for relay in &mut self.inner.relays {
            let pairs = std::mem::take(&mut relay.queries);
            let item = to_py(py, relay);
            relay.queries = pairs;
            out.push(item?);
        }
        Ok(out)
    }

    /// How many matched pairs relay `relay` has.
    fn pair_count(&self, relay: usize) -> PyResult<usize> {
        Ok(self.relay(relay)?.queries.len())
    }

    /// Relay `relay`'s matched pairs at `indices` (in the order they were matched).
    fn pairs(&self, py: Python<'_>, relay: usize, indices: Vec<usize>) -> PyResult<Vec<Py<PyAny>>> {
        let pairs = &self.relay(relay)?.queries;
        let mut read = pairs.reader();
        let mut out = Vec::with_capacity(indices.len());
        for i in indices {
            if i >= pairs.len() {
                return Err(PyIndexError::new_err(format!("no pair {i}")));
            }
            let pair = guard(|| read.get(i))?.map_err(report_error)?;
            out.push(to_py(py, &pair)?);
        }
        Ok(out)
    }

    /// What ranking a relay's pairs reads of each of pairs `start` to `stop` (a chunk at a
    /// time: a storm's are many): the front leg's response bytes, the relay's cost (ms, None
    /// when unknown) and the back leg's response segments.
    fn pair_keys(
        &self,
        relay: usize,
        start: usize,
        stop: usize,
    ) -> PyResult<Vec<(u64, Option<f64>, u64)>> {
        let pairs = &self.relay(relay)?.queries;
        let mut read = pairs.reader();
        (start..stop.min(pairs.len()))
            .map(|i| {
                let p = guard(|| read.get(i))?.map_err(report_error)?;
                Ok((p.response_bytes.front, p.relay_cost_ms, p.segments_in))
            })
            .collect()
    }

    /// The report as tables ("pktflow.tables/1"): `sink` is called with each chunk of a
    /// table's rows as an Arrow record batch for pyarrow (a few thousand rows at a time, each
    /// table at least once); raises ValueError naming any field the tables do not declare.
    fn write_tables(&self, sink: &Bound<'_, PyAny>) -> PyResult<()> {
        let mut tables = pktflow_core::tables::Tables::new();
        let version = self.inner.version();
        let mut failed: Option<PyErr> = None;
        let written = guard(|| {
            tables.write_report(&self.inner, |table| {
                let handed = crate::tables::batch(table, version)
                    .and_then(|batch| sink.call1((batch,)).map(|_| ()));
                handed.map_err(|e| {
                    failed = Some(e);
                    ReportError::Write("the sink failed".into())
                })
            })
        })?;
        match (written, failed) {
            (_, Some(e)) => Err(e),
            (Ok(()), None) => Ok(()),
            (Err(e), None) => Err(report_error(e)),
        }
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// The connections' numbers, in the report's order.
    fn numbers(&self) -> Vec<u64> {
        self.inner.numbers()
    }

    /// Each connection's payload bytes both ways, in the report's order.
    fn payload(&self) -> Vec<i64> {
        self.inner.payload()
    }

    /// The ladder of connections `numbers` within capture times [t0, t1], at most `max_rows`
    /// packets: `lanes` gives each connection's (number, client lane, server lane, client's
    /// window raw, server's window raw), `owners` a pooler's marks on its requests
    /// ((connection, frame, mark)); `openers`: the lanes whose requests open exchanges (a
    /// group of repeated rows starts with one); `plots`: measure what the plots show too.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (numbers, t0, t1, max_rows, lanes, owners, openers, plots=false))]
    fn drawing(
        &self,
        numbers: Vec<u64>,
        t0: f64,
        t1: f64,
        max_rows: usize,
        lanes: Vec<(u64, u16, u16, bool, bool)>,
        owners: Vec<(u64, u64, String)>,
        openers: Vec<u16>,
        plots: bool,
    ) -> PyResult<Drawing> {
        let drawn = self.drawn(&numbers, t0, t1, max_rows)?;
        let lanes = lanes_map(lanes);
        let mut marks: Map<(u64, u64), Vec<String>> = Map::default();
        for (conn, frame, mark) in owners {
            let m = marks.entry((conn, frame)).or_default();
            if !m.contains(&mark) {
                m.push(mark);
            }
        }
        let start = self.inner.capture.first_ts.unwrap_or(0.0);
        let drawing = guard(|| CoreDrawing::new(drawn, &lanes, &marks, start, &openers, plots))?;
        crate::memory::give_back_free_pages();
        Ok(Drawing::new(drawing))
    }

    /// The plots of connections `numbers` within capture times [t0, t1] (at most `max_rows`
    /// packets), drawn as `lanes` says (see `drawing`), without the ladder's rows.
    fn plot(
        &self,
        py: Python<'_>,
        numbers: Vec<u64>,
        t0: f64,
        t1: f64,
        max_rows: usize,
        lanes: Vec<(u64, u16, u16, bool, bool)>,
    ) -> PyResult<Py<PyAny>> {
        let drawn = self.drawn(&numbers, t0, t1, max_rows)?;
        let lanes = lanes_map(lanes);
        let start = self.inner.capture.first_ts.unwrap_or(0.0);
        let plot = guard(|| {
            pktflow_core::drawing::plot::plot(&drawn.packets, &lanes, &drawn.swapped, start)
        })?;
        drop(drawn);
        crate::memory::give_back_free_pages();
        to_py(py, &plot)
    }

    /// The packets kept of connections `numbers` within capture times [t0, t1], at most
    /// `max_rows`, as the engine saw them (tests compare them with other tools').
    fn packets(
        &self,
        py: Python<'_>,
        numbers: Vec<u64>,
        t0: f64,
        t1: f64,
        max_rows: usize,
    ) -> PyResult<Py<PyAny>> {
        let d = self.drawn(&numbers, t0, t1, max_rows)?;
        let events: Vec<PacketTuple> = (d.packets.iter())
            .map(|(n, p)| {
                let t = (p.d, p.frame, p.ts, p.seq, p.end, p.ack, p.win);
                (
                    *n, t.0, t.1, t.2, t.3, t.4, t.5, t.6, p.flags, p.kind, p.sack,
                )
            })
            .collect();
        let table = &d.label_table;
        let mut labels: Vec<_> = (d.labels.iter())
            .filter_map(|(&(n, f), &l)| Some((n, f, table.get(l as usize)?.clone())))
            .collect();
        labels.sort_by_key(|x| (x.0, x.1));
        let mut details: Vec<_> = d.details.into_iter().map(|((n, f), l)| (n, f, l)).collect();
        details.sort_by_key(|x| (x.0, x.1));
        let mut partial: Vec<(u64, u64)> = d.partial.into_iter().collect();
        partial.sort_unstable();
        let mut swapped: Vec<(u64, bool)> = d.swapped.into_iter().collect();
        swapped.sort_unstable();
        #[derive(serde::Serialize)]
        struct Packets<'a> {
            events: &'a [PacketTuple],
            labels: &'a [(u64, u64, pktflow_core::drawing::Label)],
            details: &'a [(u64, u64, Vec<pktflow_core::drawing::Detail>)],
            partial: &'a [(u64, u64)],
            swapped: &'a [(u64, bool)],
            cut: bool,
        }
        to_py(
            py,
            &Packets {
                events: &events,
                labels: &labels,
                details: &details,
                partial: &partial,
                swapped: &swapped,
                cut: d.cut,
            },
        )
    }

    /// Connection `i` (in the report's order); without its listed queries (`queries` empty,
    /// `queries_total` still counting them) unless `queries`.
    #[pyo3(signature = (i, queries=true))]
    fn connection(&self, py: Python<'_>, i: usize, queries: bool) -> PyResult<Py<PyAny>> {
        if i >= self.inner.len() {
            return Err(PyIndexError::new_err(format!("no connection {i}")));
        }
        let mut record = guard(|| self.inner.connection(i))?.map_err(report_error)?;
        if let (false, Some(pg)) = (queries, record.postgres.0.as_mut()) {
            pg.queries = Vec::new();
        }
        to_py(py, &record)
    }

    /// The response bytes of connection `i`'s listed queries, in order: what a panel that
    /// shows a few of a pooler's thousands ranks them by, without decoding them into Python.
    fn query_sizes(&self, i: usize) -> PyResult<Vec<u64>> {
        if i >= self.inner.len() {
            return Err(PyIndexError::new_err(format!("no connection {i}")));
        }
        let record = guard(|| self.inner.connection(i))?.map_err(report_error)?;
        let queries = record.postgres.0.map(|pg| pg.queries).unwrap_or_default();
        Ok(queries.iter().map(|q| q.response_bytes).collect())
    }

    /// Connection `i`'s listed queries at `indexes`, in that order.
    fn queries(&self, py: Python<'_>, i: usize, indexes: Vec<usize>) -> PyResult<Py<PyAny>> {
        if i >= self.inner.len() {
            return Err(PyIndexError::new_err(format!("no connection {i}")));
        }
        let record = guard(|| self.inner.connection(i))?.map_err(report_error)?;
        let queries = record.postgres.0.map(|pg| pg.queries).unwrap_or_default();
        let chosen = (indexes.iter())
            .map(|&k| {
                (queries.get(k))
                    .ok_or_else(|| PyIndexError::new_err(format!("no query {k} in connection {i}")))
            })
            .collect::<PyResult<Vec<_>>>()?;
        to_py(py, &chosen)
    }
}
