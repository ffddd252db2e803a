//! The report's tables (the core's `tables`) as Arrow record batches, handed to pyarrow
//! through the Arrow C data interface: each batch is an object with `__arrow_c_array__`
//! (the PyCapsule protocol), so `pyarrow.record_batch(batch)` takes the columns as they are,
//! without a Python value per cell. Units go in each field's metadata, the schema's version
//! and the table's name in the batch's.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{ArrayBuilder, Int64Builder, ListBuilder, MapBuilder, StringBuilder};
use arrow_array::ffi::{to_ffi, FFI_ArrowArray};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Float64Array, Int64Array, StringArray, StructArray,
};
use arrow_buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::ffi::FFI_ArrowSchema;
use arrow_schema::{ArrowError, Field, Fields};
use pktflow_core::tables::schema::{Kind, SCHEMA};
use pktflow_core::tables::{Table, Values};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::exclusive::Exclusive;

/// One table's rows as an Arrow record batch, exported once (`__arrow_c_array__`).
#[pyclass(module = "pktflow._core")]
pub struct ArrowBatch {
    #[pyo3(get)]
    name: String,
    #[pyo3(get)]
    rows: usize,
    exported: Exclusive<Option<(FFI_ArrowSchema, FFI_ArrowArray)>>,
}

#[pymethods]
impl ArrowBatch {
    /// The PyCapsule protocol: the batch's schema and array, moved out (once).
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_array__<'py>(
        &mut self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<(Bound<'py, PyCapsule>, Bound<'py, PyCapsule>)> {
        let _ = requested_schema; // the batch has the one schema it has
        let (schema, array) = (self.exported.get_mut().take())
            .ok_or_else(|| PyValueError::new_err(format!("table {} was taken", self.name)))?;
        Ok((
            PyCapsule::new_with_value(py, schema, c"arrow_schema")?,
            PyCapsule::new_with_value(py, array, c"arrow_array")?,
        ))
    }
}

fn array(values: Values) -> Result<ArrayRef, ArrowError> {
    Ok(match values {
        Values::Int(v) => Arc::new(Int64Array::from(v)),
        Values::Float(v) => Arc::new(Float64Array::from(v)),
        Values::Text(t) => {
            // the column's own buffers become the array's, as they are
            let offsets = OffsetBuffer::new(ScalarBuffer::from(t.offsets));
            let nulls = NullBuffer::from(t.valid);
            Arc::new(StringArray::try_new(
                offsets,
                Buffer::from_vec(t.bytes),
                Some(nulls),
            )?)
        }
        Values::Bool(v) => Arc::new(BooleanArray::from(v)),
        Values::IntList(v) => {
            let mut b = ListBuilder::new(Int64Builder::new());
            for row in v {
                match row {
                    Some(items) => {
                        items.into_iter().for_each(|i| b.values().append_value(i));
                        b.append(true);
                    }
                    None => b.append(false),
                }
            }
            Arc::new(b.finish())
        }
        Values::TextList(v) => {
            let mut b = ListBuilder::new(StringBuilder::new());
            for row in v {
                match row {
                    Some(items) => {
                        items.iter().for_each(|s| b.values().append_value(s));
                        b.append(true);
                    }
                    None => b.append(false),
                }
            }
            Arc::new(b.finish())
        }
        Values::IntMap(v) => map_array(&v, Int64Builder::new(), |b, x| b.append_value(*x)),
        Values::TextMap(v) => map_array(&v, StringBuilder::new(), |b, x| b.append_value(x)),
    })
}

/// A map column (text keys), its values appended by `put`; None rows are null.
fn map_array<T, B: ArrayBuilder>(
    rows: &[Option<Vec<(String, T)>>],
    values: B,
    put: impl Fn(&mut B, &T),
) -> ArrayRef {
    let mut b = MapBuilder::new(None, StringBuilder::new(), values);
    for row in rows {
        if let Some(entries) = row {
            for (k, x) in entries {
                b.keys().append_value(k);
                put(b.values(), x);
            }
        }
        // a map's append fails only when keys and values differ in length: never here
        let _ = b.append(row.is_some());
    }
    Arc::new(b.finish())
}

fn field(name: &str, kind: Kind, unit: &str, array: &ArrayRef) -> Field {
    let mut meta = HashMap::new();
    if !unit.is_empty() {
        meta.insert("unit".to_string(), unit.to_string());
    }
    if kind == Kind::Json {
        meta.insert("encoding".to_string(), "json".to_string());
    }
    Field::new(name, array.data_type().clone(), true).with_metadata(meta)
}

/// A table's columns as declared: (column, path in the row, kind, unit).
type Declared = Vec<(String, &'static str, String, &'static str)>;

/// Every table's columns as declared: (table, [(column, path, kind, unit)]).
#[pyfunction]
pub fn table_schema() -> Vec<(&'static str, Declared)> {
    (pktflow_core::tables::Tables::new().tables.into_iter())
        .map(|t| {
            let cols = (t.columns.into_iter())
                .map(|c| {
                    let kind = format!("{:?}", c.kind).to_lowercase();
                    (c.name, c.path, kind, c.unit)
                })
                .collect();
            (t.name, cols)
        })
        .collect()
}

/// `table` as a batch, its metadata naming the schema, the table and pktflow's version.
pub fn batch(table: Table, version: &str) -> PyResult<ArrowBatch> {
    let name = table.name;
    let mut fields = Vec::with_capacity(table.columns.len());
    let mut arrays = Vec::with_capacity(table.columns.len());
    for column in table.columns {
        let a = array(column.values)
            .map_err(|e| PyValueError::new_err(format!("table {name}: {e}")))?;
        fields.push(field(&column.name, column.kind, column.unit, &a));
        arrays.push(a);
    }
    let fields = Fields::from(fields);
    let data = StructArray::try_new(fields.clone(), arrays, None)
        .map_err(|e| PyValueError::new_err(format!("table {name}: {e}")))?;
    let meta = HashMap::from([
        ("pktflow.schema".to_string(), SCHEMA.to_string()),
        ("pktflow.table".to_string(), name.to_string()),
        ("pktflow.version".to_string(), version.to_string()),
    ]);
    let (array, _) =
        to_ffi(&data.to_data()).map_err(|e| PyValueError::new_err(format!("table {name}: {e}")))?;
    let top = Field::new_struct("", fields, false).with_metadata(meta);
    let schema = FFI_ArrowSchema::try_from(&top)
        .map_err(|e| PyValueError::new_err(format!("table {name}: {e}")))?;
    Ok(ArrowBatch {
        name: name.to_string(),
        rows: data.len(),
        exported: Exclusive::new(Some((schema, array))),
    })
}
