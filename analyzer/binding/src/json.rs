//! A report's values as the text `json.dumps(value, indent=2)` writes, byte for byte, for the
//! report writers. Python's encoder runs its pure-Python path whenever there is an indent (a
//! generator step per value: most of a connection storm's time); this walks the same values
//! once. Everything that decides how a value looks is Python's: floats and large ints are
//! written by their own `__repr__`, a string that is not valid UTF-8 (a lone surrogate) by
//! json's own `encode_basestring_ascii`, and any other type is refused as json.dumps refuses it.

use std::fmt::Write;

use pktflow_core::report::numbers::float_repr;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

/// Indentation is copied from here, a slice per line.
const SPACES: &str = "                                                                ";

/// Deeper than this is refused: json.dumps would hit Python's recursion limit about here.
const MAX_DEPTH: usize = 900;

struct Writer<'py> {
    py: Python<'py>,
    out: String,
    /// None: compact, as json.dumps(value, separators=(",", ":")); Some(n): indented two
    /// spaces per level, the value itself nested n levels deep.
    base: Option<usize>,
}

impl<'py> Writer<'py> {
    fn newline(&mut self, level: usize) {
        self.out.push('\n');
        let mut rest = 2 * level;
        while rest > 0 {
            let n = rest.min(SPACES.len());
            self.out.push_str(SPACES.get(..n).unwrap_or_default());
            rest -= n;
        }
    }

    fn string(&mut self, s: &Bound<'py, PyString>) -> PyResult<()> {
        match s.to_str() {
            Ok(text) => {
                escape_ascii(text, &mut self.out);
                Ok(())
            }
            // not UTF-8 (a lone surrogate): json's own escaping
            Err(_) => {
                let encoded = self
                    .py
                    .import("json.encoder")?
                    .getattr("encode_basestring_ascii")?
                    .call1((s,))?;
                self.out.push_str(encoded.cast::<PyString>()?.to_str()?);
                Ok(())
            }
        }
    }

    fn int(&mut self, value: &Bound<'py, PyAny>) -> PyResult<()> {
        match value.extract::<i64>() {
            Ok(n) => {
                push_int(n, &mut self.out);
                Ok(())
            }
            Err(_) => {
                // int.__repr__, as json.dumps writes ints (an int subclass too)
                let text = self
                    .py
                    .get_type::<PyInt>()
                    .getattr("__repr__")?
                    .call1((value,))?;
                self.out.push_str(text.cast::<PyString>()?.to_str()?);
                Ok(())
            }
        }
    }

    fn float(&mut self, value: &Bound<'py, PyAny>) -> PyResult<()> {
        let f: f64 = value.extract()?;
        if f.is_nan() {
            self.out.push_str("NaN");
        } else if f.is_infinite() {
            self.out
                .push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
        } else {
            float_repr(f, &mut self.out);
        }
        Ok(())
    }

    /// A dict key as json.dumps writes it: str as is; float, bool, None and int as text.
    fn key(&mut self, key: &Bound<'py, PyAny>) -> PyResult<()> {
        if let Ok(s) = key.cast::<PyString>() {
            return self.string(s);
        }
        self.out.push('"');
        if key.is_instance_of::<PyFloat>() {
            self.float(key)?;
        } else if key.is_instance_of::<PyBool>() {
            self.out
                .push_str(if key.is_truthy()? { "true" } else { "false" });
        } else if key.is_none() {
            self.out.push_str("null");
        } else if key.is_instance_of::<PyInt>() {
            self.int(key)?;
        } else {
            let kind = key.get_type().name()?;
            return Err(PyTypeError::new_err(format!(
                "keys must be str, int, float, bool or None, not {kind}"
            )));
        }
        self.out.push('"');
        Ok(())
    }

    fn value(&mut self, value: &Bound<'py, PyAny>, level: usize) -> PyResult<()> {
        if level > MAX_DEPTH {
            return Err(PyValueError::new_err("value nested too deep for a report"));
        }
        // the order json's encoder tests types in
        if let Ok(s) = value.cast::<PyString>() {
            self.string(s)
        } else if value.is_none() {
            self.out.push_str("null");
            Ok(())
        } else if value.is_instance_of::<PyBool>() {
            self.out
                .push_str(if value.is_truthy()? { "true" } else { "false" });
            Ok(())
        } else if value.is_instance_of::<PyInt>() {
            self.int(value)
        } else if value.is_instance_of::<PyFloat>() {
            self.float(value)
        } else if let Ok(list) = value.cast::<PyList>() {
            self.items(list.iter(), list.len(), level)
        } else if let Ok(tuple) = value.cast::<PyTuple>() {
            self.items(tuple.iter(), tuple.len(), level)
        } else if let Ok(dict) = value.cast::<PyDict>() {
            self.dict(dict, level)
        } else {
            let kind = value.get_type().name()?;
            Err(PyTypeError::new_err(format!(
                "Object of type {kind} is not JSON serializable"
            )))
        }
    }

    fn separator(&mut self, first: bool, level: usize) {
        if !first {
            self.out.push(',');
        }
        if let Some(base) = self.base {
            self.newline(base + level + 1);
        }
    }

    fn close(&mut self, level: usize, bracket: char) {
        if let Some(base) = self.base {
            self.newline(base + level);
        }
        self.out.push(bracket);
    }

    fn items(
        &mut self,
        items: impl Iterator<Item = Bound<'py, PyAny>>,
        len: usize,
        level: usize,
    ) -> PyResult<()> {
        if len == 0 {
            self.out.push_str("[]");
            return Ok(());
        }
        self.out.push('[');
        for (i, item) in items.enumerate() {
            self.separator(i == 0, level);
            self.value(&item, level + 1)?;
        }
        self.close(level, ']');
        Ok(())
    }

    fn dict(&mut self, dict: &Bound<'py, PyDict>, level: usize) -> PyResult<()> {
        if dict.is_empty() {
            self.out.push_str("{}");
            return Ok(());
        }
        self.out.push('{');
        for (i, (k, v)) in dict.iter().enumerate() {
            self.separator(i == 0, level);
            self.key(&k)?;
            self.out
                .push_str(if self.base.is_some() { ": " } else { ":" });
            self.value(&v, level + 1)?;
        }
        self.close(level, '}');
        Ok(())
    }
}

/// `s` quoted and escaped as json's encode_basestring_ascii does: printable ASCII as is, the
/// short escapes, everything else as \uXXXX (UTF-16 surrogate pairs above the BMP).
fn escape_ascii(s: &str, out: &mut String) {
    out.push('"');
    if s.bytes()
        .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\')
    {
        // most keys and values: nothing to escape
        out.push_str(s);
        out.push('"');
        return;
    }
    let mut start = 0;
    for (i, c) in s.char_indices() {
        let plain = (' '..='~').contains(&c) && c != '"' && c != '\\';
        if plain {
            continue;
        }
        out.push_str(s.get(start..i).unwrap_or_default());
        start = i + c.len_utf8();
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push_str(s.get(start..).unwrap_or_default());
    out.push('"');
}

/// n in decimal, as int.__repr__ writes it (without core::fmt's machinery: a report has
/// hundreds of thousands of counters).
fn push_int(n: i64, out: &mut String) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = n.unsigned_abs();
    loop {
        at -= 1;
        if let Some(d) = digits.get_mut(at) {
            *d = b'0' + (rest % 10) as u8;
        }
        rest /= 10;
        if rest == 0 || at == 0 {
            break;
        }
    }
    if n < 0 {
        out.push('-');
    }
    out.push_str(std::str::from_utf8(digits.get(at..).unwrap_or_default()).unwrap_or("0"));
}

/// json.dumps(value, indent=2) with every line after the first indented 2 * depth spaces more
/// (the value nested `depth` levels inside an indented document); with depth None,
/// json.dumps(value, separators=(",", ":")).
#[pyfunction]
#[pyo3(signature = (value, depth=None))]
pub fn json_text(
    py: Python<'_>,
    value: &Bound<'_, PyAny>,
    depth: Option<usize>,
) -> PyResult<String> {
    let mut writer = Writer {
        py,
        // a container (a connection's report) is kilobytes: fewer regrowths
        out: String::with_capacity(if value.is_instance_of::<PyDict>() {
            16 << 10
        } else {
            64
        }),
        base: depth,
    };
    writer.value(value, 0)?;
    Ok(writer.out)
}
