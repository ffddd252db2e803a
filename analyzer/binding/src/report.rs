//! A finished report as Python holds it: the core writes its JSON, and hands renderers the
//! parts they draw (a connection, a relay's pairs) one at a time, as they ask.

use std::io::Write;

use pktflow_core::relay::RelayRecord;
use pktflow_core::report::{Report as CoreReport, ReportError};
use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::errors::CoreBug;
use crate::{guard, spool_error, to_py};

#[pyclass(unsendable, module = "pktflow._core")]
pub struct Report {
    inner: CoreReport,
}

impl Report {
    pub fn new(inner: CoreReport) -> Self {
        Report { inner }
    }
}

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
        // the report is ASCII (its writer escapes everything else)
        let text = std::str::from_utf8(&self.buf).map_err(std::io::Error::other)?;
        let chunk = PyString::new(self.stream.py(), text);
        if let Err(e) = self.stream.call_method1("write", (chunk,)) {
            self.failed = Some(e);
            return Err(std::io::Error::other("the stream's write failed"));
        }
        self.buf.clear();
        Ok(())
    }
}

impl Write for PyStream<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
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
        let out = PyStream {
            stream: stream.clone(),
            buf: Vec::with_capacity(CHUNK + (64 << 10)),
            failed: None,
        };
        let written = guard(|| self.inner.write_json(out, indented))?;
        match written {
            Ok(mut out) => {
                let flushed = out.flush();
                match out.failed.take() {
                    Some(e) => Err(e),
                    None => flushed.map_err(|e| PyValueError::new_err(e.to_string())),
                }
            }
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
}
