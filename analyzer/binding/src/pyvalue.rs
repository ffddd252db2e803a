//! The core's serde facts as Python values: structs and maps as dicts, sequences as lists,
//! tuples as tuples, unit variants as their names, other variants as a one-key dict.
//!
//! A storm of 20,000 short connections hands over about 10 million dict keys: every struct
//! field name is made a Python string once (interned) and reused, which a general serde
//! converter cannot do (it makes a new string per key).

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;

use pktflow_core::report::values::{self, Shape as FieldShape, DIGITS};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyInt, PyList, PyString, PyTuple};
use serde::ser::{self, Serialize};

thread_local! {
    /// Field and variant names, which serde hands over as `&'static str`: keyed by address.
    static NAMES: RefCell<HashMap<(usize, usize), Py<PyString>, foldhash::fast::RandomState>> =
        RefCell::new(HashMap::default());
}

/// A Python exception raised while converting.
pub struct Error(PyErr);

impl From<PyErr> for Error {
    fn from(e: PyErr) -> Self {
        Error(e)
    }
}

impl From<std::convert::Infallible> for Error {
    fn from(never: std::convert::Infallible) -> Self {
        match never {}
    }
}

impl From<Error> for PyErr {
    fn from(e: Error) -> Self {
        e.0
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for Error {}

impl ser::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Error(PyValueError::new_err(msg.to_string()))
    }
}

type Result<T> = std::result::Result<T, Error>;

/// `value` as a Python value.
pub fn to_python<'py, T: Serialize + ?Sized>(
    py: Python<'py>,
    value: &T,
) -> PyResult<Bound<'py, PyAny>> {
    Ok(value.serialize(Converter { py })?)
}

/// A field or variant name's Python string, made once.
fn name<'py>(py: Python<'py>, text: &'static str) -> Bound<'py, PyString> {
    NAMES.with(|names| {
        names
            .borrow_mut()
            .entry((text.as_ptr() as usize, text.len()))
            .or_insert_with(|| PyString::intern(py, text).unbind())
            .bind(py)
            .clone()
    })
}

#[derive(Clone, Copy)]
struct Converter<'py> {
    py: Python<'py>,
}

/// A one-key dict {variant: value}: how a variant with data is written.
fn variant<'py>(
    py: Python<'py>,
    variant: &'static str,
    value: Bound<'py, PyAny>,
) -> Result<Bound<'py, PyAny>> {
    let dict = PyDict::new(py);
    dict.set_item(name(py, variant), value)?;
    Ok(dict.into_any())
}

impl<'py> ser::Serializer for Converter<'py> {
    type Ok = Bound<'py, PyAny>;
    type Error = Error;
    type SerializeSeq = Items<'py>;
    type SerializeTuple = Items<'py>;
    type SerializeTupleStruct = Items<'py>;
    type SerializeTupleVariant = Items<'py>;
    type SerializeMap = Map<'py>;
    type SerializeStruct = Struct<'py>;
    type SerializeStructVariant = Struct<'py>;

    fn serialize_bool(self, v: bool) -> Result<Self::Ok> {
        Ok(v.into_pyobject(self.py)?.to_owned().into_any())
    }
    fn serialize_i8(self, v: i8) -> Result<Self::Ok> {
        self.serialize_i64(v.into())
    }
    fn serialize_i16(self, v: i16) -> Result<Self::Ok> {
        self.serialize_i64(v.into())
    }
    fn serialize_i32(self, v: i32) -> Result<Self::Ok> {
        self.serialize_i64(v.into())
    }
    fn serialize_i64(self, v: i64) -> Result<Self::Ok> {
        Ok(v.into_pyobject(self.py)?.into_any())
    }
    fn serialize_i128(self, v: i128) -> Result<Self::Ok> {
        Ok(v.into_pyobject(self.py)?.into_any())
    }
    fn serialize_u8(self, v: u8) -> Result<Self::Ok> {
        self.serialize_u64(v.into())
    }
    fn serialize_u16(self, v: u16) -> Result<Self::Ok> {
        self.serialize_u64(v.into())
    }
    fn serialize_u32(self, v: u32) -> Result<Self::Ok> {
        self.serialize_u64(v.into())
    }
    fn serialize_u64(self, v: u64) -> Result<Self::Ok> {
        Ok(v.into_pyobject(self.py)?.into_any())
    }
    fn serialize_u128(self, v: u128) -> Result<Self::Ok> {
        Ok(v.into_pyobject(self.py)?.into_any())
    }
    fn serialize_f32(self, v: f32) -> Result<Self::Ok> {
        self.serialize_f64(v.into())
    }
    fn serialize_f64(self, v: f64) -> Result<Self::Ok> {
        Ok(v.into_pyobject(self.py)?.into_any())
    }
    fn serialize_char(self, v: char) -> Result<Self::Ok> {
        self.serialize_str(v.encode_utf8(&mut [0u8; 4]))
    }
    fn serialize_str(self, v: &str) -> Result<Self::Ok> {
        Ok(PyString::new(self.py, v).into_any())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<Self::Ok> {
        Ok(PyBytes::new(self.py, v).into_any())
    }
    fn serialize_none(self) -> Result<Self::Ok> {
        Ok(self.py.None().into_bound(self.py))
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<Self::Ok> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<Self::Ok> {
        self.serialize_none()
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<Self::Ok> {
        self.serialize_none()
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        v: &'static str,
    ) -> Result<Self::Ok> {
        Ok(name(self.py, v).into_any())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<Self::Ok> {
        let inner = value.serialize(self)?;
        if name == DIGITS {
            // a count past 64 bits, as its digits: Python's int reads them
            return Ok(self.py.get_type::<PyInt>().call1((inner,))?);
        }
        Ok(inner)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        v: &'static str,
        value: &T,
    ) -> Result<Self::Ok> {
        variant(self.py, v, value.serialize(self)?)
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Items<'py>> {
        Ok(Items::new(self.py, len.unwrap_or(0), Shape::List))
    }
    fn serialize_tuple(self, len: usize) -> Result<Items<'py>> {
        Ok(Items::new(self.py, len, Shape::Tuple))
    }
    fn serialize_tuple_struct(self, _name: &'static str, len: usize) -> Result<Items<'py>> {
        Ok(Items::new(self.py, len, Shape::Tuple))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        v: &'static str,
        len: usize,
    ) -> Result<Items<'py>> {
        Ok(Items::new(self.py, len, Shape::Variant(v)))
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Map<'py>> {
        Ok(Map {
            dict: PyDict::new(self.py),
            key: None,
        })
    }
    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Struct<'py>> {
        Ok(Struct {
            dict: PyDict::new(self.py),
            variant: None,
        })
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        v: &'static str,
        _len: usize,
    ) -> Result<Struct<'py>> {
        Ok(Struct {
            dict: PyDict::new(self.py),
            variant: Some(v),
        })
    }
}

enum Shape {
    List,
    Tuple,
    /// a tuple variant: {name: tuple}
    Variant(&'static str),
}

pub struct Items<'py> {
    py: Python<'py>,
    items: Vec<Bound<'py, PyAny>>,
    shape: Shape,
}

impl<'py> Items<'py> {
    fn new(py: Python<'py>, len: usize, shape: Shape) -> Self {
        Items {
            py,
            items: Vec::with_capacity(len),
            shape,
        }
    }

    fn push<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.items.push(value.serialize(Converter { py: self.py })?);
        Ok(())
    }

    fn finish(self) -> Result<Bound<'py, PyAny>> {
        match self.shape {
            Shape::List => Ok(PyList::new(self.py, self.items)?.into_any()),
            Shape::Tuple => Ok(PyTuple::new(self.py, self.items)?.into_any()),
            Shape::Variant(v) => {
                let tuple = PyTuple::new(self.py, self.items)?.into_any();
                variant(self.py, v, tuple)
            }
        }
    }
}

/// serde's four sequence traits differ only in the name of the method that adds an item.
macro_rules! items_trait {
    ($trait:ident, $add:ident) => {
        impl<'py> ser::$trait for Items<'py> {
            type Ok = Bound<'py, PyAny>;
            type Error = Error;
            fn $add<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
                self.push(value)
            }
            fn end(self) -> Result<Self::Ok> {
                self.finish()
            }
        }
    };
}

items_trait!(SerializeSeq, serialize_element);
items_trait!(SerializeTuple, serialize_element);
items_trait!(SerializeTupleStruct, serialize_field);
items_trait!(SerializeTupleVariant, serialize_field);

pub struct Map<'py> {
    dict: Bound<'py, PyDict>,
    key: Option<Bound<'py, PyAny>>,
}

impl<'py> ser::SerializeMap for Map<'py> {
    type Ok = Bound<'py, PyAny>;
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<()> {
        self.key = Some(key.serialize(Converter { py: self.dict.py() })?);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        let key = self
            .key
            .take()
            .ok_or_else(|| <Error as ser::Error>::custom("a map value without its key"))?;
        let value = value.serialize(Converter { py: self.dict.py() })?;
        self.dict.set_item(key, value)?;
        Ok(())
    }
    fn end(self) -> Result<Self::Ok> {
        Ok(self.dict.into_any())
    }
}

pub struct Struct<'py> {
    dict: Bound<'py, PyDict>,
    /// a struct variant: {name: dict}
    variant: Option<&'static str>,
}

impl<'py> Struct<'py> {
    fn field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<()> {
        let py = self.dict.py();
        let shape = values::shape(value);
        if shape == FieldShape::Absent {
            return Ok(());
        }
        let value = value.serialize(Converter { py })?;
        if shape == FieldShape::Inline {
            // an inlined part's keys go into this dict, in order (None: it has none)
            if let Ok(part) = value.cast::<PyDict>() {
                for (k, v) in part.iter() {
                    self.dict.set_item(k, v)?;
                }
            }
            return Ok(());
        }
        self.dict.set_item(name(py, key), value)?;
        Ok(())
    }

    fn finish(self) -> Result<Bound<'py, PyAny>> {
        match self.variant {
            None => Ok(self.dict.into_any()),
            Some(v) => variant(self.dict.py(), v, self.dict.into_any()),
        }
    }
}

/// A struct and a struct variant add their fields the same way.
macro_rules! struct_trait {
    ($trait:ident) => {
        impl<'py> ser::$trait for Struct<'py> {
            type Ok = Bound<'py, PyAny>;
            type Error = Error;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Result<()> {
                self.field(key, value)
            }
            fn end(self) -> Result<Self::Ok> {
                self.finish()
            }
        }
    };
}

struct_trait!(SerializeStruct);
struct_trait!(SerializeStructVariant);
