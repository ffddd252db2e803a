//! The core's errors as Python exceptions, mapped in one place: each way a capture cannot be
//! opened is a class of its own (a subclass of OpenError) carrying its facts as attributes,
//! so Python picks its words and exit code by class, not by re-reading a dict's strings.

use pktflow_core::capture::{NoFileWhy, OpenError as CoreOpenError};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

use crate::to_py;

create_exception!(
    _core,
    OpenError,
    PyException,
    "The capture could not be opened (a subclass says how)."
);
create_exception!(
    _core,
    NoFile,
    OpenError,
    "The path names no readable file: `why` (directory, missing, permission_denied, os) and \
     the OS's `errno` for os."
);
create_exception!(
    _core,
    EmptyCapture,
    OpenError,
    "Zero bytes (after decompression, when gzipped)."
);
create_exception!(
    _core,
    BadGzip,
    OpenError,
    "Gzip magic, but the stream broke before 4 decompressed bytes: `fault`."
);
create_exception!(
    _core,
    UnknownMagic,
    OpenError,
    "Neither pcap nor pcapng: `head`, the first (up to 4) bytes."
);
create_exception!(
    _core,
    Unsupported,
    OpenError,
    "Records were read, none was TCP and none had a link type pktflow decodes: `link_types`."
);
create_exception!(
    _core,
    ReadFailed,
    OpenError,
    "Reading the first bytes of an opened file failed: the OS's `errno`."
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

/// An exception of class `E` with `attrs` set on it.
fn raised<E: pyo3::PyTypeInfo>(py: Python<'_>, attrs: &[(&str, Py<PyAny>)]) -> PyResult<PyErr> {
    let err = PyErr::new::<E, _>(());
    let value = err.value(py);
    for (name, v) in attrs {
        value.setattr(*name, v)?;
    }
    Ok(err)
}

/// The Python exception for a capture that could not be opened.
pub fn open_error(py: Python<'_>, e: CoreOpenError) -> PyErr {
    let made = match e {
        CoreOpenError::NoFile { why, errno } => {
            let why = match why {
                NoFileWhy::Directory => "directory",
                NoFileWhy::Missing => "missing",
                NoFileWhy::PermissionDenied => "permission_denied",
                NoFileWhy::Os => "os",
            };
            to_py(py, &why)
                .and_then(|w| raised::<NoFile>(py, &[("why", w), ("errno", to_py(py, &errno)?)]))
        }
        CoreOpenError::Empty => Ok(PyErr::new::<EmptyCapture, _>(())),
        CoreOpenError::BadGzip { fault } => {
            to_py(py, &fault).and_then(|f| raised::<BadGzip>(py, &[("fault", f)]))
        }
        CoreOpenError::UnknownMagic { head } => {
            let head = pyo3::types::PyBytes::new(py, &head).into_any().unbind();
            raised::<UnknownMagic>(py, &[("head", head)])
        }
        CoreOpenError::Unsupported { link_types } => {
            to_py(py, &link_types).and_then(|l| raised::<Unsupported>(py, &[("link_types", l)]))
        }
        CoreOpenError::ReadFailed { errno } => {
            to_py(py, &errno).and_then(|n| raised::<ReadFailed>(py, &[("errno", n)]))
        }
    };
    made.unwrap_or_else(|e| e)
}

pub fn add(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("OpenError", py.get_type::<OpenError>())?;
    m.add("NoFile", py.get_type::<NoFile>())?;
    m.add("EmptyCapture", py.get_type::<EmptyCapture>())?;
    m.add("BadGzip", py.get_type::<BadGzip>())?;
    m.add("UnknownMagic", py.get_type::<UnknownMagic>())?;
    m.add("Unsupported", py.get_type::<Unsupported>())?;
    m.add("ReadFailed", py.get_type::<ReadFailed>())?;
    m.add("CoreBug", py.get_type::<CoreBug>())?;
    m.add("SpoolError", py.get_type::<SpoolError>())?;
    Ok(())
}
