//! pktflow._core: the Rust core's facts as Python values. No rule lives here: a pass is
//! opened, stepped through, and each connection's facts converted as they come.

mod pyvalue;
mod report;

use std::path::PathBuf;

use pktflow_core::events::Selection;
use pktflow_core::pass::{Pass as CorePass, PassOptions};
use pktflow_core::relay::RelayWords;
use pktflow_core::report::{judge_and_record, Assembly, CaptureWords, Words};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyTypeError, PyValueError};
use pyo3::prelude::*;

create_exception!(
    _core,
    OpenError,
    PyException,
    "The capture could not be opened: args[0] is the problem's facts (a dict)."
);
create_exception!(
    _core,
    CoreBug,
    PyException,
    "The core panicked: a bug in pktflow (the message says where)."
);
create_exception!(
    _core,
    SpoolError,
    PyException,
    "The report's temporary file could not be written (TMPDIR full or read-only): args[0] \
     says where and why."
);

thread_local! {
    /// The last panic's message and place, kept by the hook for `guard` (the default hook
    /// would print them to stderr: the command line prints one line of its own).
    static PANIC: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Runs core code with a panic turned into CoreBug: an ordinary exception, so the command
/// line reports it in one line (exit 70) rather than as PyO3's BaseException.
pub(crate) fn guard<T>(f: impl FnOnce() -> T) -> PyResult<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .map_err(|_| CoreBug::new_err(PANIC.with(|p| p.take())))
}

fn keep_panics_quiet() {
    std::panic::set_hook(Box::new(|info| {
        let what = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".to_string());
        let place = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        PANIC.with(|p| *p.borrow_mut() = format!("{what}{place}"));
    }));
}

pub(crate) fn to_py<T: serde::Serialize>(py: Python<'_>, value: &T) -> PyResult<Py<PyAny>> {
    Ok(pyvalue::to_python(py, value)?.unbind())
}

/// One pass over a capture. `step` reads the next batch of packets and returns the facts of
/// the connections finished meanwhile (a list, maybe empty), or None once the capture is done
/// and every connection has been handed out.
#[pyclass(unsendable, module = "pktflow._core")]
struct Pass {
    inner: CorePass,
    /// The report being assembled (None once `finish` took it).
    assembly: Option<Assembly>,
}

pub(crate) fn spool_error(e: impl std::fmt::Display) -> PyErr {
    SpoolError::new_err(e.to_string())
}

#[pymethods]
impl Pass {
    #[new]
    #[pyo3(signature = (path, decode_postgres=true, transfer=true, linger_s=None, settled_linger_s=None))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        decode_postgres: bool,
        transfer: bool,
        linger_s: Option<f64>,
        settled_linger_s: Option<f64>,
    ) -> PyResult<Self> {
        let options = PassOptions {
            decode_postgres,
            transfer,
            linger: linger_s,
            settled_linger: settled_linger_s,
        };
        match py.detach(|| guard(|| CorePass::open(&path, options)))? {
            Ok(inner) => Ok(Pass {
                inner,
                assembly: Some(Assembly::default()),
            }),
            Err(problem) => Err(OpenError::new_err(to_py(py, &problem)?)),
        }
    }

    /// Reads the next batch of packets; each connection retired meanwhile is judged by
    /// `judge` (a Judgement in, its Words out) and its record kept for the report. Returns
    /// the numbers of those connections, or None once the capture is done.
    fn step(&mut self, py: Python<'_>, judge: &Bound<'_, PyAny>) -> PyResult<Option<Vec<u64>>> {
        let mut done = Vec::new();
        let inner = &mut self.inner;
        if !py.detach(|| guard(|| inner.step(&mut done)))? && done.is_empty() {
            return Ok(None);
        }
        let start = self.inner.start();
        let assembly = self
            .assembly
            .as_mut()
            .ok_or_else(|| PyValueError::new_err("the pass is finished"))?;
        let mut numbers = Vec::with_capacity(done.len());
        for report in done {
            let number = report.tcp.number;
            let (judgement, mut record) = guard(|| judge_and_record(report, start))?;
            let said = judge.call1((to_py(py, &judgement)?,))?;
            let words: Words = pythonize::depythonize(&said).map_err(|e| {
                PyTypeError::new_err(format!("the judge's words for {}: {e}", judgement.id))
            })?;
            words.apply(&mut record);
            guard(|| assembly.add(number, &record))?.map_err(spool_error)?;
            numbers.push(number);
        }
        Ok(Some(numbers))
    }

    /// Once every step is done: the relays among the connections, each worded by `judge` (a
    /// RelayJudgement in, its RelayWords out) and kept for the report.
    fn relays(&mut self, py: Python<'_>, judge: &Bound<'_, PyAny>) -> PyResult<usize> {
        let assembly = self
            .assembly
            .as_mut()
            .ok_or_else(|| PyValueError::new_err("the pass is finished"))?;
        let found = guard(|| assembly.find_relays())?;
        let mut relays = Vec::with_capacity(found.len());
        for (judgement, mut record) in found {
            let said = judge.call1((to_py(py, &judgement)?,))?;
            let words: RelayWords = pythonize::depythonize(&said)
                .map_err(|e| PyTypeError::new_err(format!("the relay judge's words: {e}")))?;
            words.apply(&mut record);
            relays.push(record);
        }
        let n = relays.len();
        assembly.set_relays(relays);
        Ok(n)
    }

    /// The report, with Python's words for the capture as a whole (CaptureWords).
    fn finish(&mut self, words: &Bound<'_, PyAny>) -> PyResult<report::Report> {
        let words: CaptureWords = pythonize::depythonize(words)
            .map_err(|e| PyTypeError::new_err(format!("the capture's words: {e}")))?;
        let assembly = self
            .assembly
            .take()
            .ok_or_else(|| PyValueError::new_err("the pass is finished"))?;
        let stats = self.inner.stats();
        Ok(report::Report::new(guard(|| {
            assembly.finish(stats, words)
        })?))
    }

    /// After the last step: raises OpenError for a capture with records but none it could
    /// decode (only link types the core does not read).
    fn outcome(&self, py: Python<'_>) -> PyResult<()> {
        match self.inner.outcome() {
            Ok(()) => Ok(()),
            Err(problem) => Err(OpenError::new_err(to_py(py, &problem)?)),
        }
    }

    /// Counters about the file as a whole (so far; final once `step` returned None).
    fn stats(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_py(py, self.inner.stats())
    }

    /// Packets that came after their connection was reported, the engine's settled linger,
    /// connections numbered.
    fn engine(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_py(py, &self.inner.engine_facts())
    }

    /// Records read so far (for a progress bar).
    #[getter]
    fn records(&self) -> u64 {
        self.inner.records()
    }
}

/// The packets of connections `numbers` within capture times [t0, t1] (see core's events).
#[pyfunction]
#[pyo3(signature = (path, numbers, t0, t1, max_events, linger_s=None, settled_linger_s=None))]
#[allow(clippy::too_many_arguments)]
fn collect(
    py: Python<'_>,
    path: PathBuf,
    numbers: Vec<u64>,
    t0: f64,
    t1: f64,
    max_events: usize,
    linger_s: Option<f64>,
    settled_linger_s: Option<f64>,
) -> PyResult<Py<PyAny>> {
    let got = py.detach(|| {
        guard(|| {
            pktflow_core::events::collect(
                &path,
                &Selection {
                    numbers: &numbers,
                    t0,
                    t1,
                    max_events,
                    linger: linger_s,
                    settled_linger: settled_linger_s,
                },
            )
        })
    })?;
    match got {
        Ok(c) => to_py(py, &c),
        Err(problem) => Err(OpenError::new_err(to_py(py, &problem)?)),
    }
}

/// A statement as relay matching compares it (whitespace runs as one space, trailing
/// semicolons dropped): `compare` pairs queries across captures by the same key.
#[pyfunction]
fn sql_key(sql: &str) -> String {
    pktflow_core::relay::legs::sql_key(sql)
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    keep_panics_quiet();
    m.add_class::<Pass>()?;
    m.add_class::<report::Report>()?;
    m.add_function(wrap_pyfunction!(collect, m)?)?;
    m.add_function(wrap_pyfunction!(sql_key, m)?)?;
    // The vocabulary of the facts: TCP flag bits and the engine's payload classes.
    use pktflow_core::packet as p;
    use pktflow_core::tcp::observe as o;
    for (name, v) in [
        ("FIN", p::FIN),
        ("SYN", p::SYN),
        ("RST", p::RST),
        ("PSH", p::PSH),
        ("ACK", p::ACK),
        ("URG", p::URG),
        ("ECE", p::ECE),
        ("CWR", p::CWR),
        ("NEW", o::NEW),
        ("RETRANS", o::RETRANS),
        ("PARTIAL_RETRANS", o::PARTIAL_RETRANS),
        ("OUT_OF_ORDER", o::OUT_OF_ORDER),
        ("FILLS_HOLE", o::FILLS_HOLE),
        ("KEEPALIVE", o::KEEPALIVE),
        ("SACK_ABOVE", o::SACK_ABOVE),
        ("SACK_DUPLICATE", o::SACK_DUPLICATE),
    ] {
        m.add(name, v)?;
    }
    m.add("OpenError", m.py().get_type::<OpenError>())?;
    m.add("CoreBug", m.py().get_type::<CoreBug>())?;
    m.add("SpoolError", m.py().get_type::<SpoolError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("SCHEMA", pktflow_core::report::document::SCHEMA)?;
    Ok(())
}
