//! pktflow._core: the Rust core's facts as Python values. No rule lives here: a pass is
//! opened, stepped through, and each connection's facts converted as they come.

mod drawing;
mod errors;
mod exclusive;
mod memory;
mod producer;
mod pyvalue;
mod report;
mod tables;

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use errors::{CoreBug, SpoolError};
use exclusive::Exclusive;
use pktflow_core::capture::Stream;
use pktflow_core::pass::{Pass as CorePass, PassOptions};
use pktflow_core::relay::RelayWords;
use pktflow_core::report::json;
use pktflow_core::report::live::{LiveConnection, LiveQuery};
use pktflow_core::report::{Assembly, CaptureWords, Judged, Words};
use producer::{Judging, Message, Producer, Snapshot};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

/// How often a step waiting for the pass thread lets Python's signal handlers run.
const SIGNALS: std::time::Duration = std::time::Duration::from_millis(100);

thread_local! {
    /// The last panic's message and place, kept by the hook for `guard` (the default hook
    /// would print them to stderr: the command line prints one line of its own).
    pub(crate) static PANIC: std::cell::RefCell<String> =
        const { std::cell::RefCell::new(String::new()) };
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

/// One pass over a capture, the core running ahead on a thread of its own while Python
/// judges (producer.rs). `step` judges the connections the next batch of packets retired.
#[pyclass(module = "pktflow._core")]
struct Pass {
    state: Exclusive<State>,
    /// The report being assembled (None once `finish` took it).
    assembly: Option<Assembly>,
    /// Where the pass stood after the last step judged.
    now: Box<Snapshot>,
    /// Following a stream: each query once final and each connection once judged, as JSON
    /// lines (`json`) or values, until Python takes them (`take_live`).
    follow: Option<Follow>,
    live: Vec<(&'static str, Py<PyAny>)>,
}

#[derive(Clone, Copy, PartialEq)]
enum Follow {
    Json,
    Values,
}

enum State {
    /// Opened, no step yet.
    Ready(CorePass),
    Running(Producer),
    /// Every step done: the pass back from its thread.
    Done(CorePass),
    /// The pass thread panicked or stopped.
    Broken,
}

pub(crate) fn spool_error(e: impl std::fmt::Display) -> PyErr {
    SpoolError::new_err(e.to_string())
}

/// The least a transfer carries for the judge to read its limits, as the judge says
/// (`min_bytes`, `min_segments`); a judge that does not say reads every transfer's.
fn judged(judge: &Bound<'_, PyAny>) -> Judged {
    let attr = |name: &str| -> u64 {
        judge
            .getattr(name)
            .and_then(|v| v.extract::<u64>())
            .unwrap_or(0)
    };
    Judged {
        min_bytes: i64::try_from(attr("min_bytes")).unwrap_or(i64::MAX),
        min_segments: attr("min_segments"),
    }
}

/// A followed event as the caller asked: its JSON line (the report's writer, compact) or its
/// value.
fn live_item<T: serde::Serialize>(py: Python<'_>, follow: Follow, said: &T) -> PyResult<Py<PyAny>> {
    match follow {
        Follow::Json => {
            let line = guard(|| json::to_string(said, None))?
                .map_err(|e| PyValueError::new_err(e.to_string()))?;
            Ok(pyo3::types::PyString::new(py, &line).into_any().unbind())
        }
        Follow::Values => to_py(py, said),
    }
}

impl Pass {
    fn judge_chunk(
        &mut self,
        py: Python<'_>,
        judge: &Bound<'_, PyAny>,
        chunk: Vec<Judging>,
        numbers: &mut Vec<u64>,
    ) -> PyResult<()> {
        let assembly = self
            .assembly
            .as_mut()
            .ok_or_else(|| PyValueError::new_err("the pass is finished"))?;
        let mut spent = Vec::with_capacity(chunk.len());
        for (number, judgement, mut record, extras) in chunk {
            let said = judge.call1((to_py(py, &judgement)?,))?;
            let words: Words = pythonize::depythonize(&said).map_err(|e| {
                PyTypeError::new_err(format!("the judge's words for {}: {e}", judgement.id))
            })?;
            words.apply(&mut record);
            if let Some(follow) = self.follow {
                let said = LiveConnection::new(&record);
                self.live
                    .push(("connection", live_item(py, follow, &said)?));
            }
            guard(|| assembly.add(number, &record, extras))?.map_err(spool_error)?;
            numbers.push(number);
            pktflow_core::report::words::free_words(&mut record);
            spent.push((judgement, record));
        }
        if let State::Running(producer) = self.state.get_mut() {
            producer.give_back(spent);
        }
        Ok(())
    }

    fn pass(&mut self) -> PyResult<&CorePass> {
        match self.state.get_mut() {
            State::Ready(p) | State::Done(p) => Ok(p),
            _ => Err(PyValueError::new_err("the pass is still running")),
        }
    }
}

#[pymethods]
impl Pass {
    /// `path` "-" reads standard input (`live`: each refill takes what the pipe has, rather
    /// than reading it as a file's whole blocks); `stop` ends such a stream where it stands.
    /// `follow` ("json" or "values"): each query is said once final and each connection once
    /// judged (`take_live`), and no connection is kept for the report.
    #[new]
    /// `record`: keep every connection's packets, for a diagram (Report.drawing).
    #[pyo3(signature = (path, decode_postgres=true, transfer=true, linger_s=None, settled_linger_s=None, record=false, live=false, stop=None, follow=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        decode_postgres: bool,
        transfer: bool,
        linger_s: Option<f64>,
        settled_linger_s: Option<f64>,
        record: bool,
        live: bool,
        stop: Option<PyRef<'_, Stopper>>,
        follow: Option<&str>,
    ) -> PyResult<Self> {
        let follow = match follow {
            None => None,
            Some("json") => Some(Follow::Json),
            Some("values") => Some(Follow::Values),
            Some(other) => {
                return Err(PyValueError::new_err(format!(
                    "follow is \"json\" or \"values\", not {other:?}"
                )))
            }
        };
        let options = PassOptions {
            decode_postgres,
            transfer,
            linger: linger_s,
            settled_linger: settled_linger_s,
            record,
        };
        let stop = stop.map_or_else(Arc::default, |s| Arc::clone(&s.flag));
        let opened = if path.as_os_str() == "-" {
            let stdin = std::io::stdin()
                .as_fd()
                .try_clone_to_owned()
                .map(std::fs::File::from)
                .map_err(|e| PyValueError::new_err(format!("standard input: {e}")))?;
            py.detach(|| {
                guard(|| CorePass::open_stream("-", Stream::spawn(stdin, live, stop), options))
            })?
        } else {
            py.detach(|| guard(|| CorePass::open(&path, options)))?
        };
        match opened {
            Ok(mut inner) => Ok(Pass {
                now: Box::new(Snapshot {
                    records: inner.records(),
                    engine: inner.engine_facts(),
                    stats: inner.stats().clone(),
                }),
                assembly: Some(match follow {
                    Some(_) => {
                        inner.follow();
                        Assembly::following()
                    }
                    None => Assembly::default(),
                }),
                state: Exclusive::new(State::Ready(inner)),
                follow,
                live: Vec::new(),
            }),
            Err(problem) => Err(errors::open_error(py, problem)),
        }
    }

    /// Judges the connections the next batch of packets retired: each by `judge` (a
    /// Judgement in, its Words out), its record kept for the report. Returns their numbers,
    /// or None once the capture is done.
    fn step(&mut self, py: Python<'_>, judge: &Bound<'_, PyAny>) -> PyResult<Option<Vec<u64>>> {
        match std::mem::replace(self.state.get_mut(), State::Broken) {
            State::Ready(pass) => {
                let producer = Producer::start(pass, judged(judge));
                producer.ask();
                *self.state.get_mut() = State::Running(producer);
            }
            State::Running(producer) => {
                producer.ask();
                *self.state.get_mut() = State::Running(producer);
            }
            State::Done(pass) => {
                *self.state.get_mut() = State::Done(pass);
                return Ok(None);
            }
            State::Broken => return Err(CoreBug::new_err("the pass stopped")),
        }
        let mut numbers = Vec::new();
        loop {
            let State::Running(producer) = std::mem::replace(self.state.get_mut(), State::Broken)
            else {
                return Err(CoreBug::new_err("the pass stopped"));
            };
            // wait for the pass thread without the GIL (it needs none; Python may run), and
            // now and then run Python's signal handlers: a pipe may stay silent for long, and
            // SIGINT must still reach the handler that stops it
            let (waited, producer) = py.detach(move || (producer.next_within(SIGNALS), producer));
            let message = match waited {
                Ok(m) => Some(m),
                Err(true) => {
                    *self.state.get_mut() = State::Running(producer);
                    py.check_signals()?;
                    continue;
                }
                Err(false) => None,
            };
            match message {
                Some(Message::Chunk(chunk)) => {
                    *self.state.get_mut() = State::Running(producer);
                    self.judge_chunk(py, judge, chunk, &mut numbers)?;
                }
                Some(Message::Queries(queries)) => {
                    *self.state.get_mut() = State::Running(producer);
                    if let Some(follow) = self.follow {
                        for (number, query, limits) in &queries {
                            let said = LiveQuery::new(*number, query, *limits);
                            self.live.push(("query", live_item(py, follow, &said)?));
                        }
                    }
                }
                Some(Message::StepEnd { snapshot, more }) => {
                    self.now = snapshot;
                    if more {
                        *self.state.get_mut() = State::Running(producer);
                        return Ok(Some(numbers));
                    }
                    let pass = py
                        .detach(move || producer.join())
                        .ok_or_else(|| CoreBug::new_err("the pass thread failed"))?;
                    *self.state.get_mut() = State::Done(pass);
                    return Ok(if numbers.is_empty() {
                        None
                    } else {
                        Some(numbers)
                    });
                }
                Some(Message::Panicked(why)) => return Err(CoreBug::new_err(why)),
                Some(Message::Spool(e)) => return Err(spool_error(e)),
                None => return Err(CoreBug::new_err("the pass thread stopped")),
            }
        }
    }

    /// Once every step is done: the relays among the connections, each worded by `judge` (a
    /// RelayJudgement in, its RelayWords out) and kept for the report.
    fn relays(&mut self, py: Python<'_>, judge: &Bound<'_, PyAny>) -> PyResult<usize> {
        let assembly = self
            .assembly
            .as_mut()
            .ok_or_else(|| PyValueError::new_err("the pass is finished"))?;
        let found = guard(|| assembly.find_relays())?.map_err(report::report_error)?;
        let mut relays = Vec::with_capacity(found.len());
        let mut inherited = Vec::new();
        for (judgement, mut record) in found {
            let said = judge.call1((to_py(py, &judgement)?,))?;
            let words: RelayWords = pythonize::depythonize(&said)
                .map_err(|e| PyTypeError::new_err(format!("the relay judge's words: {e}")))?;
            inherited.extend(words.apply(&mut record));
            relays.push(record);
        }
        let n = relays.len();
        assembly.set_relays(relays, inherited);
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
        let recording = self.pass()?.recording();
        let stats = &self.now.stats;
        Ok(report::Report::new(
            guard(|| assembly.finish(stats, words))?,
            recording,
        ))
    }

    /// After the last step: raises OpenError for a capture with records but none it could
    /// decode (only link types the core does not read).
    fn outcome(&mut self, py: Python<'_>) -> PyResult<()> {
        match self.pass()?.outcome() {
            Ok(()) => Ok(()),
            Err(problem) => Err(errors::open_error(py, problem)),
        }
    }

    /// Counters about the file as a whole, as they stood after the last step judged (final
    /// once `step` returned None).
    fn stats(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_py(py, &self.now.stats)
    }

    /// Packets that came after their connection was reported, the engine's settled linger,
    /// connections numbered: after the last step judged.
    fn engine(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_py(py, &self.now.engine)
    }

    /// Following a stream: what was said since the last take, in order, each as
    /// (`"query"` or `"connection"`, its JSON line or its value).
    fn take_live(&mut self) -> Vec<(&'static str, Py<PyAny>)> {
        std::mem::take(&mut self.live)
    }

    /// Records read by the last step judged (for a progress bar).
    #[getter]
    fn records(&self) -> u64 {
        self.now.records
    }
}

/// Ends a pass over a pipe where it stands (SIGINT): shared with the pass, set from a signal
/// handler while the pass is stepping.
#[pyclass(module = "pktflow._core")]
#[derive(Default)]
struct Stopper {
    flag: Arc<AtomicBool>,
}

#[pymethods]
impl Stopper {
    #[new]
    fn new() -> Self {
        Stopper::default()
    }

    fn stop(&self) {
        self.flag.store(true, Ordering::Relaxed);
    }

    #[getter]
    fn stopped(&self) -> bool {
        self.flag.load(Ordering::Relaxed)
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
    memory::map_large_buffers_apart();
    m.add_class::<Pass>()?;
    m.add_class::<Stopper>()?;
    m.add_class::<report::Report>()?;
    m.add_class::<drawing::Drawing>()?;
    m.add_function(wrap_pyfunction!(sql_key, m)?)?;
    m.add_function(wrap_pyfunction!(tables::table_schema, m)?)?;
    m.add_class::<tables::ArrowBatch>()?;
    m.add("TABLES_SCHEMA", pktflow_core::tables::schema::SCHEMA)?;
    m.add("FOLLOW_SCHEMA", pktflow_core::report::live::FOLLOW_SCHEMA)?;
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
    errors::add(m)?;
    // the engine's reassembly bounds, named in a finding's sentence
    use pktflow_core::tcp::direction as td;
    m.add("MAX_BUFFERED_BYTES", td::MAX_BUFFERED_BYTES)?;
    m.add("MAX_BUFFERED_SEGMENTS", td::MAX_BUFFERED_SEGMENTS)?;
    m.add("MAX_HOLES", td::MAX_HOLES)?;
    // how close in time two copies of a packet are (a finding's sentence)
    m.add("DUP_WINDOW_S", pktflow_core::capture::DUP_WINDOW_S)?;
    // a step back in time smaller than this is jitter, not counted
    m.add("JITTER_S", pktflow_core::capture::JITTER_S)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("SCHEMA", pktflow_core::report::document::SCHEMA)?;
    Ok(())
}
