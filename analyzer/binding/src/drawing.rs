//! A selection drawn, as Python's ladder reads it: its rows as tuples (ladder.Row's fields),
//! made a slice at a time as a renderer asks, with the values many rows share (message
//! labels, marks, connection names) made Python objects once; how the rows fold; the
//! totals of a folded span.

use std::collections::HashMap;

use pktflow_core::drawing::fold::{self, Folded, Item};
use pktflow_core::drawing::teach;
use pktflow_core::drawing::{Drawing as CoreDrawing, Row};
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

use crate::to_py;

#[pyclass(module = "pktflow._core")]
pub struct Drawing {
    inner: CoreDrawing,
    /// Python objects of the values rows share, made once.
    labels: Vec<Option<Py<PyTuple>>>,
    details: Vec<Option<Py<PyTuple>>>,
    marks: HashMap<(u8, u32), Py<PyTuple>>,
    conns: HashMap<u64, Py<PyString>>,
}

impl Drawing {
    pub fn new(inner: CoreDrawing) -> Self {
        Drawing {
            labels: (0..inner.rows.labels.len()).map(|_| None).collect(),
            details: (0..inner.rows.details.len()).map(|_| None).collect(),
            marks: HashMap::new(),
            conns: HashMap::new(),
            inner,
        }
    }

    fn label<'py>(&mut self, py: Python<'py>, i: u32) -> PyResult<Bound<'py, PyTuple>> {
        if let Some(Some(t)) = self.labels.get(i as usize) {
            return Ok(t.bind(py).clone());
        }
        let label = self.inner.rows.labels.get(i as usize);
        let items: Vec<(&str, u64)> = (label.into_iter().flatten())
            .map(|(n, c)| (n.as_str(), *c))
            .collect();
        let t = PyTuple::new(py, items)?;
        if let Some(slot) = self.labels.get_mut(i as usize) {
            *slot = Some(t.clone().unbind());
        }
        Ok(t)
    }

    fn detail<'py>(&mut self, py: Python<'py>, i: u32) -> PyResult<Bound<'py, PyTuple>> {
        if let Some(Some(t)) = self.details.get(i as usize) {
            return Ok(t.bind(py).clone());
        }
        let details = self.inner.rows.details.get(i as usize);
        // as legend.Detail holds them: name, SQLSTATE, text, severity
        let items: Vec<(&str, Option<&str>, &str, Option<&str>)> = (details.into_iter().flatten())
            .map(|d| {
                let name = d.name.as_str();
                (
                    name,
                    d.code.as_deref(),
                    d.text.as_str(),
                    d.severity.as_deref(),
                )
            })
            .collect();
        let t = PyTuple::new(py, items)?;
        if let Some(slot) = self.details.get_mut(i as usize) {
            *slot = Some(t.clone().unbind());
        }
        Ok(t)
    }

    fn row<'py>(&mut self, py: Python<'py>, r: &Row) -> PyResult<Bound<'py, PyTuple>> {
        let conn = self
            .conns
            .entry(r.conn)
            .or_insert_with(|| PyString::new(py, &format!("c{}", r.conn)).unbind())
            .bind(py)
            .clone();
        let marks = match self.marks.get(&(r.marks, r.owners)) {
            Some(m) => m.bind(py).clone(),
            None => {
                let words: Vec<&str> = r.mark_words(&self.inner.rows).collect();
                let m = PyTuple::new(py, words)?;
                self.marks.insert((r.marks, r.owners), m.clone().unbind());
                m
            }
        };
        let msgs = self.label(py, r.msgs)?;
        let details = self.detail(py, r.details)?;
        // ladder.Row's fields, in order
        let fields: [Bound<'py, PyAny>; 18] = [
            r.t.into_pyobject(py)?.into_any(),
            r.frame.into_pyobject(py)?.into_any(),
            conn.into_any(),
            r.src.into_pyobject(py)?.into_any(),
            r.dst.into_pyobject(py)?.into_any(),
            PyString::intern(py, r.kind.name()).into_any(),
            r.nbytes.into_pyobject(py)?.into_any(),
            r.win.into_pyobject(py)?.into_any(),
            msgs.into_any(),
            pyo3::types::PyBool::new(py, r.partial)
                .to_owned()
                .into_any(),
            marks.into_any(),
            pyo3::types::PyBool::new(py, r.win_raw)
                .to_owned()
                .into_any(),
            details.into_any(),
            pyo3::types::PyBool::new(py, r.to_server)
                .to_owned()
                .into_any(),
            PyString::intern(py, r.acks.name()).into_any(),
            pyo3::types::PyBool::new(py, r.push).to_owned().into_any(),
            r.seq.into_pyobject(py)?.into_any(),
            r.ack.into_pyobject(py)?.into_any(),
        ];
        PyTuple::new(py, fields)
    }
}

impl Drop for Drawing {
    fn drop(&mut self) {
        // the rows go back to the system, not only to the allocator (glibc keeps freed memory
        // for the process otherwise): what follows (a page's plots) is drawn in their room
        self.inner.rows = Default::default();
        self.inner.items = Vec::new();
        self.inner.phases = Vec::new();
        self.labels.clear();
        self.details.clear();
        crate::memory::give_back_free_pages();
    }
}

fn item(it: &Item) -> (usize, usize, usize) {
    match it {
        Item::Row(i) => (*i, 1, 1),
        Item::Group(g) => (g.start, g.period, g.reps),
    }
}

#[pymethods]
impl Drawing {
    fn __len__(&self) -> usize {
        self.inner.rows.rows.len()
    }

    /// Rows start..end, each a tuple of ladder.Row's fields.
    fn rows<'py>(
        &mut self,
        py: Python<'py>,
        start: usize,
        end: usize,
    ) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        let n = self.inner.rows.rows.len();
        let (start, end) = (start.min(n), end.min(n));
        let chosen: Vec<Row> = self
            .inner
            .rows
            .rows
            .get(start..end.max(start))
            .unwrap_or_default()
            .to_vec();
        chosen.iter().map(|r| self.row(py, r)).collect()
    }

    /// The rows of start..end with a mark: the first `limit`, and how many there are.
    fn marked<'py>(
        &mut self,
        py: Python<'py>,
        start: usize,
        end: usize,
        limit: usize,
    ) -> PyResult<(Vec<Bound<'py, PyTuple>>, usize)> {
        let (first, n) = fold::marked(&self.inner.rows, start, end, limit);
        let rows: Vec<Row> = (first.iter())
            .filter_map(|&i| self.inner.rows.rows.get(i).copied())
            .collect();
        let out = rows
            .iter()
            .map(|r| self.row(py, r))
            .collect::<PyResult<_>>()?;
        Ok((out, n))
    }

    /// Rows and groups of repeated blocks, in order: (start, period, repetitions); a row on
    /// its own is (i, 1, 1).
    fn items(&self) -> Vec<(usize, usize, usize)> {
        self.inner.items.iter().map(item).collect()
    }

    /// The items with bulk transfers folded: ("item", start, period, repetitions) or
    /// ("phase", start, end, its most repeated group or None).
    fn phases<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        self.inner
            .phases
            .iter()
            .map(|f| match f {
                Folded::Item(it) => {
                    let (a, b, c) = item(it);
                    ("item", a, b, c).into_pyobject(py)
                }
                Folded::Phase {
                    start,
                    end,
                    dominant,
                } => (
                    "phase",
                    *start,
                    *end,
                    dominant.map(|g| (g.start, g.period, g.reps)),
                )
                    .into_pyobject(py),
            })
            .collect()
    }

    /// Where the rows of group (start, period, repetitions) differ in size, step by step
    /// (at most `listed` of the others named).
    fn group_sizes(
        &self,
        py: Python<'_>,
        start: usize,
        period: usize,
        reps: usize,
        listed: usize,
    ) -> PyResult<Py<PyAny>> {
        let g = fold::Group {
            start,
            period,
            reps,
        };
        to_py(py, &fold::group_sizes(&self.inner.rows, &g, listed))
    }

    /// What rows start..end hold (None when empty).
    fn totals(&self, py: Python<'_>, start: usize, end: usize) -> PyResult<Py<PyAny>> {
        to_py(py, &fold::totals(&self.inner.rows, start, end))
    }

    /// Per arrow direction with data in rows start..end.
    fn breakdown(&self, py: Python<'_>, start: usize, end: usize) -> PyResult<Py<PyAny>> {
        to_py(py, &fold::breakdown(&self.inner.rows, start, end))
    }

    /// The messages of rows start..end per arrow direction.
    fn legs(&self, py: Python<'_>, start: usize, end: usize) -> PyResult<Py<PyAny>> {
        to_py(py, &fold::legs(&self.inner.rows, start, end))
    }

    /// What the legend explains, in the order first drawn: (toward the server, message
    /// name) of each message, and each kind of packet and mark.
    fn symbols(&self) -> (Vec<(bool, String)>, Vec<String>) {
        fold::symbols(&self.inner.rows)
    }

    /// The kinds of row drawn ("data", "ack"...), in the order first drawn.
    fn kinds(&self) -> Vec<&'static str> {
        fold::kinds(&self.inner.rows)
    }

    /// (frame, microseconds) where a row's time is earlier than the row's before it.
    fn times_back(&self) -> Vec<(u64, i64)> {
        fold::times_back(&self.inner.rows)
    }

    /// What the plots show (None unless the drawing was made with `plots`): the directions
    /// carrying the most data, each series cut to what a pixel column shows, and the time
    /// span the panels share.
    fn plot(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_py(py, &self.inner.plot)
    }

    /// The rows teaching mode's walk reads: ("row", a row) or ("run", a run of plain bulk
    /// segments past its first `keep` rows, summed up, at most `cap` of its frames listed).
    fn walk_view<'py>(
        &mut self,
        py: Python<'py>,
        keep: usize,
        cap: usize,
    ) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        let view = teach::walk_view(&self.inner.rows, keep, cap);
        let mut out = Vec::with_capacity(view.len());
        for step in view {
            let item = match step {
                teach::Step::Row(i) => {
                    let Some(r) = self.inner.rows.rows.get(i).copied() else {
                        continue;
                    };
                    ("row", self.row(py, &r)?).into_pyobject(py)?
                }
                teach::Step::Run(run) => ("run", to_py(py, &run)?).into_pyobject(py)?,
            };
            out.push(item);
        }
        Ok(out)
    }

    /// The facts of teaching mode's TCP notes, at the thresholds given.
    #[allow(clippy::too_many_arguments)]
    fn tcp_facts(
        &self,
        py: Python<'_>,
        max_ways: usize,
        min_segments: usize,
        max_losses: usize,
        held_factor: i64,
        coalesced_factor: i64,
        delayed_s: (f64, f64),
        frames: usize,
    ) -> PyResult<Py<PyAny>> {
        let rules = teach::Rules {
            max_ways,
            min_segments,
            max_losses,
            held_factor,
            coalesced_factor,
            delayed_s,
            frames,
        };
        to_py(py, &teach::tcp_facts(&self.inner.rows, &rules))
    }

    /// A direction's segments in rounds, a new one after a pause of `gap_ms` or more: each
    /// round's segment count and first frame.
    fn rounds(&self, conn: u64, src: u16, dst: u16, gap_ms: f64) -> Vec<(usize, u64)> {
        teach::rounds(&self.inner.rows, (conn, src, dst), gap_ms)
    }

    /// The selection had more packets than were kept.
    #[getter]
    fn cut(&self) -> bool {
        self.inner.cut
    }
}
