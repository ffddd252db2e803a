//! One table being filled: its declared columns, each a vector of optional values, a row at a
//! time. A value at a path no column declares is remembered (`unknown`): a field the schema
//! does not know yet, which a test turns into a failure rather than a silent loss.

use std::collections::BTreeSet;

use foldhash::{HashMap, HashMapExt};

use super::schema::{Column, Kind};

/// One value as the walk found it.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    Null,
    Int(i64),
    Float(f64),
    Text(String),
    Bool(bool),
    List(Vec<Cell>),
    Map(Vec<(String, Cell)>),
}

/// A text column as Arrow lays strings out: the rows' bytes one after another, where each
/// row starts and ends, and which rows hold a value. A cell is appended where the walk finds
/// it and the column goes to Arrow whole: no String per cell, no copy (profiled on the storm
/// to Parquet, the tables' time went mostly to allocating, copying and freeing those).
#[derive(Clone, Debug, PartialEq)]
pub struct Texts {
    pub bytes: Vec<u8>,
    /// Row i is bytes[offsets[i]..offsets[i + 1]].
    pub offsets: Vec<i32>,
    pub valid: Vec<bool>,
}

impl Default for Texts {
    fn default() -> Self {
        Texts {
            bytes: Vec::new(),
            offsets: vec![0],
            valid: Vec::new(),
        }
    }
}

impl Texts {
    fn push_null(&mut self) {
        self.offsets.push(self.offsets.last().copied().unwrap_or(0));
        self.valid.push(false);
    }

    /// The last row's text set to `text`; false without a row, or past Arrow's 2 GiB of
    /// text in one chunk.
    fn set_last(&mut self, text: &str) -> bool {
        let n = self.offsets.len();
        let Some(start) = n.checked_sub(2).and_then(|i| self.offsets.get(i)).copied() else {
            return false;
        };
        let Some(end) = usize::try_from(start)
            .ok()
            .and_then(|s| s.checked_add(text.len()))
            .and_then(|e| i32::try_from(e).ok())
        else {
            return false;
        };
        self.bytes.truncate(start as usize); // a value set twice: the last one stands
        self.bytes.extend_from_slice(text.as_bytes());
        if let (Some(o), Some(v)) = (self.offsets.last_mut(), self.valid.last_mut()) {
            *o = end;
            *v = true;
        }
        true
    }

    /// Each row's text (None: null).
    pub fn rows(&self) -> Vec<Option<&str>> {
        (self.offsets.windows(2).zip(&self.valid))
            .map(|(w, &valid)| match (valid, w) {
                (true, &[a, b]) => (self.bytes.get(a as usize..b as usize))
                    .and_then(|b| std::str::from_utf8(b).ok()),
                _ => None,
            })
            .collect()
    }
}

/// A column's values, one per row (None: null).
#[derive(Clone, Debug, PartialEq)]
pub enum Values {
    Int(Vec<Option<i64>>),
    Float(Vec<Option<f64>>),
    Text(Texts),
    Bool(Vec<Option<bool>>),
    IntList(Vec<Option<Vec<i64>>>),
    TextList(Vec<Option<Vec<String>>>),
    IntMap(Vec<Option<Vec<(String, i64)>>>),
    TextMap(Vec<Option<Vec<(String, String)>>>),
}

impl Values {
    fn of(kind: Kind) -> Self {
        match kind {
            Kind::Int => Values::Int(Vec::new()),
            Kind::Float => Values::Float(Vec::new()),
            Kind::Text | Kind::Json => Values::Text(Texts::default()),
            Kind::Bool => Values::Bool(Vec::new()),
            Kind::IntList => Values::IntList(Vec::new()),
            Kind::TextList => Values::TextList(Vec::new()),
            Kind::IntMap => Values::IntMap(Vec::new()),
            Kind::TextMap => Values::TextMap(Vec::new()),
        }
    }

    fn push_null(&mut self) {
        match self {
            Values::Int(v) => v.push(None),
            Values::Float(v) => v.push(None),
            Values::Text(t) => t.push_null(),
            Values::Bool(v) => v.push(None),
            Values::IntList(v) => v.push(None),
            Values::TextList(v) => v.push(None),
            Values::IntMap(v) => v.push(None),
            Values::TextMap(v) => v.push(None),
        }
    }

    /// The last row's value set to `cell`; false when the cell does not fit the column.
    fn set_last(&mut self, cell: Cell) -> bool {
        fn last<T>(v: &mut [Option<T>], value: T) -> bool {
            match v.last_mut() {
                Some(slot) => {
                    *slot = Some(value);
                    true
                }
                None => false,
            }
        }
        match (self, cell) {
            (_, Cell::Null) => true,
            (Values::Int(v), Cell::Int(x)) => last(v, x),
            (Values::Float(v), Cell::Float(x)) => last(v, x),
            // a float column's whole numbers may come as integers (JSON has one number type)
            (Values::Float(v), Cell::Int(x)) => last(v, x as f64),
            (Values::Text(t), Cell::Text(x)) => t.set_last(&x),
            (Values::Bool(v), Cell::Bool(x)) => last(v, x),
            (Values::IntList(v), Cell::List(xs)) => {
                let ints: Option<Vec<i64>> = (xs.into_iter())
                    .map(|c| match c {
                        Cell::Int(i) => Some(i),
                        _ => None,
                    })
                    .collect();
                ints.is_some_and(|ints| last(v, ints))
            }
            (Values::TextList(v), Cell::List(xs)) => {
                let texts: Option<Vec<String>> = (xs.into_iter())
                    .map(|c| match c {
                        Cell::Text(t) => Some(t),
                        _ => None,
                    })
                    .collect();
                texts.is_some_and(|texts| last(v, texts))
            }
            (Values::IntMap(v), Cell::Map(entries)) => {
                let ints: Option<Vec<(String, i64)>> = (entries.into_iter())
                    .map(|(k, c)| match c {
                        Cell::Int(i) => Some((k, i)),
                        _ => None,
                    })
                    .collect();
                ints.is_some_and(|ints| last(v, ints))
            }
            (Values::TextMap(v), Cell::Map(entries)) => {
                let texts: Option<Vec<(String, String)>> = (entries.into_iter())
                    .map(|(k, c)| match c {
                        Cell::Text(t) => Some((k, t)),
                        _ => None,
                    })
                    .collect();
                texts.is_some_and(|texts| last(v, texts))
            }
            _ => false,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Values::Int(v) => v.len(),
            Values::Float(v) => v.len(),
            Values::Text(t) => t.valid.len(),
            Values::Bool(v) => v.len(),
            Values::IntList(v) => v.len(),
            Values::TextList(v) => v.len(),
            Values::IntMap(v) => v.len(),
            Values::TextMap(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One declared column and its values.
#[derive(Clone, Debug)]
pub struct ColumnValues {
    pub name: String,
    /// Where in a row the value is (the JSON's nesting, `.`-separated).
    pub path: &'static str,
    pub kind: Kind,
    pub unit: &'static str,
    pub values: Values,
}

#[derive(Clone, Debug)]
pub struct Table {
    pub name: &'static str,
    pub columns: Vec<ColumnValues>,
    /// A column by its path.
    index: HashMap<&'static str, usize>,
    /// The column looked up last: a row's fields come in its columns' order, so the next
    /// path is most often its own or the next column's, compared without hashing.
    last: usize,
    pub rows: usize,
    /// Paths that held a value but have no column; and values that did not fit their column.
    pub unknown: BTreeSet<String>,
}

impl Table {
    /// An empty table with `keys` and then `own` columns.
    pub fn new(name: &'static str, keys: &[Column], own: &[Column]) -> Self {
        let mut columns = Vec::new();
        let mut index = HashMap::with_capacity(keys.len() + own.len());
        for &(spec, kind, unit) in keys.iter().chain(own) {
            let (path, name) = match spec.split_once('|') {
                Some((path, name)) => (path, name.to_string()),
                None => (spec, spec.replace('.', "_")),
            };
            index.insert(path, columns.len());
            columns.push(ColumnValues {
                name,
                path,
                kind,
                unit,
                values: Values::of(kind),
            });
        }
        Table {
            name,
            columns,
            index,
            last: 0,
            rows: 0,
            unknown: BTreeSet::new(),
        }
    }

    /// The rows so far, as a table of their own; this one goes on empty, with the same
    /// columns (a report's rows are handed on in chunks, so memory stays bounded).
    pub fn take(&mut self) -> Table {
        let empty = Table {
            name: self.name,
            columns: (self.columns.iter())
                .map(|c| ColumnValues {
                    name: c.name.clone(),
                    path: c.path,
                    kind: c.kind,
                    unit: c.unit,
                    values: Values::of(c.kind),
                })
                .collect(),
            index: self.index.clone(),
            last: 0,
            rows: 0,
            unknown: std::mem::take(&mut self.unknown),
        };
        std::mem::replace(self, empty)
    }

    /// The kind of the column at `path`, when one is declared.
    pub fn kind(&mut self, path: &str) -> Option<Kind> {
        let i = self.slot(path)?;
        self.columns.get(i).map(|c| c.kind)
    }

    fn slot(&mut self, path: &str) -> Option<usize> {
        for i in [self.last, self.last + 1] {
            if self.columns.get(i).is_some_and(|c| c.path == path) {
                self.last = i;
                return Some(i);
            }
        }
        let i = *self.index.get(path)?;
        self.last = i;
        Some(i)
    }

    /// A new row, every column null until set.
    pub fn begin_row(&mut self) {
        for c in &mut self.columns {
            c.values.push_null();
        }
        self.rows += 1;
    }

    /// The current row's text at `path`: appended to a text column as it is (no String made
    /// for it); any other column takes it as a cell.
    pub fn set_str(&mut self, path: &str, text: &str) {
        let i = self.slot(path);
        match i
            .and_then(|i| self.columns.get_mut(i))
            .map(|c| &mut c.values)
        {
            Some(Values::Text(t)) => {
                if !t.set_last(text) {
                    self.unknown.insert(format!("{path} (too long a text)"));
                }
            }
            _ => self.set(path, Cell::Text(text.to_string())),
        }
    }

    /// The current row's value at `path`.
    pub fn set(&mut self, path: &str, cell: Cell) {
        if cell == Cell::Null {
            return;
        }
        let fitted = (self.slot(path))
            .and_then(|i| self.columns.get_mut(i))
            .map(|c| c.values.set_last(cell));
        match fitted {
            Some(true) => {}
            Some(false) => {
                self.unknown
                    .insert(format!("{path} (a value of another type)"));
            }
            None => {
                self.unknown.insert(path.to_string());
            }
        }
    }
}
