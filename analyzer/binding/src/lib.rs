//! pktflow._core: the Rust core's facts as Python values. No rule lives here: a pass is
//! opened, stepped through, and each connection's facts converted as they come.

mod json;
mod pyvalue;

use std::path::PathBuf;

use pktflow_core::events::Selection;
use pktflow_core::pass::{Pass as CorePass, PassOptions};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
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

thread_local! {
    /// The last panic's message and place, kept by the hook for `guard` (the default hook
    /// would print them to stderr: the command line prints one line of its own).
    static PANIC: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Runs core code with a panic turned into CoreBug: an ordinary exception, so the command
/// line reports it in one line (exit 70) rather than as PyO3's BaseException.
fn guard<T>(f: impl FnOnce() -> T) -> PyResult<T> {
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

fn to_py<T: serde::Serialize>(py: Python<'_>, value: &T) -> PyResult<Py<PyAny>> {
    Ok(pyvalue::to_python(py, value)?.unbind())
}

/// One pass over a capture. `step` reads the next batch of packets and returns the facts of
/// the connections finished meanwhile (a list, maybe empty), or None once the capture is done
/// and every connection has been handed out.
#[pyclass(unsendable, module = "pktflow._core")]
struct Pass {
    inner: CorePass,
}

/// The connections one step finished, converted to Python values one at a time as they are
/// iterated: a step can retire thousands at once (a storm's connections linger, then go
/// together), and as Python values each is ~30 KB, as the core's facts a fraction of that.
#[pyclass(unsendable, module = "pktflow._core")]
struct Finished {
    left: std::collections::VecDeque<pktflow_core::pass::ConnectionReport>,
}

#[pymethods]
impl Finished {
    fn __len__(&self) -> usize {
        self.left.len()
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.left.pop_front().map(|c| to_py(py, &c)).transpose()
    }
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
            Ok(inner) => Ok(Pass { inner }),
            Err(problem) => Err(OpenError::new_err(to_py(py, &problem)?)),
        }
    }

    fn step(&mut self, py: Python<'_>) -> PyResult<Option<Finished>> {
        let mut done = Vec::new();
        let inner = &mut self.inner;
        if !py.detach(|| guard(|| inner.step(&mut done)))? && done.is_empty() {
            return Ok(None);
        }
        Ok(Some(Finished { left: done.into() }))
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

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    keep_panics_quiet();
    m.add_class::<Pass>()?;
    m.add_class::<Finished>()?;
    m.add_function(wrap_pyfunction!(collect, m)?)?;
    m.add_function(wrap_pyfunction!(json::json_text, m)?)?;
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
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
