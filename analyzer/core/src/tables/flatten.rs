//! A row of a table from one of the report's parts: a serde serializer that walks the part
//! as the JSON writer does (the same newtypes: an absent `Maybe`, an `Inline` part's fields
//! in its parent, `Digits`) and puts each value in the column its path names. Nothing is
//! written out and read back: the values go from the facts to the columns.

use serde::ser::{self, Impossible, Serialize};

use super::schema::Kind;
use super::table::{Cell, Table};
use crate::report::json;
use crate::report::values::{DIGITS, INLINE, MAYBE};

#[derive(Debug)]
pub struct Error(String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl ser::Error for Error {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Error(msg.to_string())
    }
}

type Result<T> = std::result::Result<T, Error>;

/// Walks a value at `path` in a row of `table`; fields named in `skip` (at the row's top:
/// the parts that are rows of tables of their own) are left out.
pub struct Walk<'t> {
    pub table: &'t mut Table,
    pub path: String,
    pub skip: &'static [&'static str],
}

impl Walk<'_> {
    fn enter(&mut self, key: &str) -> usize {
        let len = self.path.len();
        if !self.path.is_empty() {
            self.path.push('.');
        }
        self.path.push_str(key);
        len
    }

    fn field<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<()> {
        let len = self.enter(key);
        if !self.skip.contains(&self.path.as_str()) {
            if self.table.kind(&self.path) == Some(Kind::Json) {
                let text = json::to_string(value, None).map_err(|e| Error(e.to_string()))?;
                // an empty list is said as such; null stays null
                if text != "null" {
                    self.table.set_str(&self.path, &text);
                }
            } else {
                value.serialize(&mut *self)?;
            }
        }
        self.path.truncate(len);
        Ok(())
    }

    fn cell(&mut self, cell: Cell) -> Result<()> {
        self.table.set(&self.path, cell);
        Ok(())
    }
}

/// A key of a map as the JSON writes it: a string, or a number's digits.
struct Key;

macro_rules! key_from_display {
    ($($f:ident: $t:ty),*) => {
        $(fn $f(self, v: $t) -> Result<String> { Ok(v.to_string()) })*
    };
}

impl ser::Serializer for Key {
    type Ok = String;
    type Error = Error;
    type SerializeSeq = Impossible<String, Error>;
    type SerializeTuple = Impossible<String, Error>;
    type SerializeTupleStruct = Impossible<String, Error>;
    type SerializeTupleVariant = Impossible<String, Error>;
    type SerializeMap = Impossible<String, Error>;
    type SerializeStruct = Impossible<String, Error>;
    type SerializeStructVariant = Impossible<String, Error>;

    key_from_display!(serialize_bool: bool, serialize_i8: i8, serialize_i16: i16,
        serialize_i32: i32, serialize_i64: i64, serialize_i128: i128, serialize_u8: u8,
        serialize_u16: u16, serialize_u32: u32, serialize_u64: u64, serialize_u128: u128,
        serialize_f32: f32, serialize_f64: f64, serialize_char: char, serialize_str: &str);

    fn serialize_bytes(self, _: &[u8]) -> Result<String> {
        Err(Error("a map key of bytes".into()))
    }
    fn serialize_none(self) -> Result<String> {
        Err(Error("a map key of null".into()))
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<String> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<String> {
        Err(Error("a map key of ()".into()))
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<String> {
        Err(Error("a map key of ()".into()))
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, v: &'static str) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<String> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<String> {
        Err(Error("a map key of an enum".into()))
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq> {
        Err(Error("a map key of a list".into()))
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple> {
        Err(Error("a map key of a tuple".into()))
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct> {
        Err(Error("a map key of a tuple".into()))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant> {
        Err(Error("a map key of an enum".into()))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap> {
        Err(Error("a map key of a map".into()))
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct> {
        Err(Error("a map key of a struct".into()))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant> {
        Err(Error("a map key of an enum".into()))
    }
}

/// A scalar: what one list element or one map value is.
struct Scalar;

impl ser::Serializer for Scalar {
    type Ok = Cell;
    type Error = Error;
    type SerializeSeq = Impossible<Cell, Error>;
    type SerializeTuple = Impossible<Cell, Error>;
    type SerializeTupleStruct = Impossible<Cell, Error>;
    type SerializeTupleVariant = Impossible<Cell, Error>;
    type SerializeMap = Impossible<Cell, Error>;
    type SerializeStruct = Impossible<Cell, Error>;
    type SerializeStructVariant = Impossible<Cell, Error>;

    fn serialize_bool(self, v: bool) -> Result<Cell> {
        Ok(Cell::Bool(v))
    }
    fn serialize_i8(self, v: i8) -> Result<Cell> {
        Ok(Cell::Int(v.into()))
    }
    fn serialize_i16(self, v: i16) -> Result<Cell> {
        Ok(Cell::Int(v.into()))
    }
    fn serialize_i32(self, v: i32) -> Result<Cell> {
        Ok(Cell::Int(v.into()))
    }
    fn serialize_i64(self, v: i64) -> Result<Cell> {
        Ok(Cell::Int(v))
    }
    fn serialize_i128(self, v: i128) -> Result<Cell> {
        Ok(i64::try_from(v).map_or(Cell::Null, Cell::Int))
    }
    fn serialize_u8(self, v: u8) -> Result<Cell> {
        Ok(Cell::Int(v.into()))
    }
    fn serialize_u16(self, v: u16) -> Result<Cell> {
        Ok(Cell::Int(v.into()))
    }
    fn serialize_u32(self, v: u32) -> Result<Cell> {
        Ok(Cell::Int(v.into()))
    }
    fn serialize_u64(self, v: u64) -> Result<Cell> {
        Ok(i64::try_from(v).map_or(Cell::Null, Cell::Int))
    }
    fn serialize_u128(self, v: u128) -> Result<Cell> {
        Ok(i64::try_from(v).map_or(Cell::Null, Cell::Int))
    }
    fn serialize_f32(self, v: f32) -> Result<Cell> {
        Ok(Cell::Float(v.into()))
    }
    fn serialize_f64(self, v: f64) -> Result<Cell> {
        Ok(Cell::Float(v))
    }
    fn serialize_char(self, v: char) -> Result<Cell> {
        Ok(Cell::Text(v.to_string()))
    }
    fn serialize_str(self, v: &str) -> Result<Cell> {
        Ok(Cell::Text(v.to_string()))
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<Cell> {
        Err(Error("bytes in a table".into()))
    }
    fn serialize_none(self) -> Result<Cell> {
        Ok(Cell::Null)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<Cell> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<Cell> {
        Ok(Cell::Null)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<Cell> {
        Ok(Cell::Null)
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, v: &'static str) -> Result<Cell> {
        Ok(Cell::Text(v.to_string()))
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        v: &T,
    ) -> Result<Cell> {
        let cell = v.serialize(Scalar)?;
        Ok(match (name, cell) {
            (DIGITS, Cell::Text(d)) => d.parse::<i64>().map_or(Cell::Null, Cell::Int),
            (_, cell) => cell,
        })
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<Cell> {
        Err(Error("an enum in a list".into()))
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq> {
        Err(Error("a list in a list: declare the column as JSON".into()))
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple> {
        Err(Error("a tuple in a list".into()))
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct> {
        Err(Error("a tuple in a list".into()))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant> {
        Err(Error("an enum in a list".into()))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap> {
        Err(Error(
            "an object in a list: declare the column as JSON".into(),
        ))
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct> {
        Err(Error(
            "an object in a list: declare the column as JSON".into(),
        ))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant> {
        Err(Error("an enum in a list".into()))
    }
}

/// A list, or an object, being walked: as a list cell, a map cell, or the fields of a part.
pub enum Compound<'a, 't> {
    List(&'a mut Walk<'t>, Vec<Cell>),
    Map(&'a mut Walk<'t>, Vec<(String, Cell)>, Option<String>),
    Fields(&'a mut Walk<'t>, Option<String>),
}

impl<'a, 't> ser::Serializer for &'a mut Walk<'t> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Compound<'a, 't>;
    type SerializeTuple = Compound<'a, 't>;
    type SerializeTupleStruct = Compound<'a, 't>;
    type SerializeTupleVariant = Impossible<(), Error>;
    type SerializeMap = Compound<'a, 't>;
    type SerializeStruct = Compound<'a, 't>;
    type SerializeStructVariant = Impossible<(), Error>;

    fn serialize_bool(self, v: bool) -> Result<()> {
        self.cell(Cell::Bool(v))
    }
    fn serialize_i8(self, v: i8) -> Result<()> {
        self.cell(Cell::Int(v.into()))
    }
    fn serialize_i16(self, v: i16) -> Result<()> {
        self.cell(Cell::Int(v.into()))
    }
    fn serialize_i32(self, v: i32) -> Result<()> {
        self.cell(Cell::Int(v.into()))
    }
    fn serialize_i64(self, v: i64) -> Result<()> {
        self.cell(Cell::Int(v))
    }
    fn serialize_i128(self, v: i128) -> Result<()> {
        let cell = Scalar.serialize_i128(v)?;
        self.cell(cell)
    }
    fn serialize_u8(self, v: u8) -> Result<()> {
        self.cell(Cell::Int(v.into()))
    }
    fn serialize_u16(self, v: u16) -> Result<()> {
        self.cell(Cell::Int(v.into()))
    }
    fn serialize_u32(self, v: u32) -> Result<()> {
        self.cell(Cell::Int(v.into()))
    }
    fn serialize_u64(self, v: u64) -> Result<()> {
        let cell = Scalar.serialize_u64(v)?;
        self.cell(cell)
    }
    fn serialize_u128(self, v: u128) -> Result<()> {
        let cell = Scalar.serialize_u128(v)?;
        self.cell(cell)
    }
    fn serialize_f32(self, v: f32) -> Result<()> {
        self.cell(Cell::Float(v.into()))
    }
    fn serialize_f64(self, v: f64) -> Result<()> {
        self.cell(Cell::Float(v))
    }
    fn serialize_char(self, v: char) -> Result<()> {
        self.cell(Cell::Text(v.to_string()))
    }
    fn serialize_str(self, v: &str) -> Result<()> {
        self.table.set_str(&self.path, v);
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<()> {
        Err(Error(format!("{}: bytes in a table", self.path)))
    }
    fn serialize_none(self) -> Result<()> {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<()> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<()> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<()> {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, v: &'static str) -> Result<()> {
        self.table.set_str(&self.path, v);
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        v: &T,
    ) -> Result<()> {
        match name {
            // its fields sit in the enclosing object, as the JSON writes them
            INLINE => {
                let at = self.path.rfind('.').unwrap_or(0);
                let own = self.path.split_off(at);
                let walked = v.serialize(&mut *self);
                self.path.push_str(&own);
                walked
            }
            DIGITS => {
                let cell = Scalar.serialize_newtype_struct(DIGITS, v)?;
                self.cell(cell)
            }
            MAYBE => v.serialize(self),
            _ => v.serialize(self),
        }
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<()> {
        Err(Error(format!(
            "{}: an enum with a value in a table",
            self.path
        )))
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Compound<'a, 't>> {
        Ok(Compound::List(self, Vec::new()))
    }
    fn serialize_tuple(self, _: usize) -> Result<Compound<'a, 't>> {
        Ok(Compound::List(self, Vec::new()))
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Compound<'a, 't>> {
        Ok(Compound::List(self, Vec::new()))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant> {
        Err(Error(format!(
            "{}: an enum with values in a table",
            self.path
        )))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Compound<'a, 't>> {
        Ok(self.object())
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Compound<'a, 't>> {
        Ok(self.object())
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant> {
        Err(Error(format!(
            "{}: an enum with fields in a table",
            self.path
        )))
    }
}

impl<'a, 't> Walk<'t> {
    /// An object: a map cell where the column is declared a map, else a part whose fields
    /// each have their columns.
    fn object(&'a mut self) -> Compound<'a, 't> {
        match self.table.kind(&self.path) {
            Some(Kind::IntMap | Kind::TextMap) => Compound::Map(self, Vec::new(), None),
            _ => Compound::Fields(self, None),
        }
    }
}

impl Compound<'_, '_> {
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        match self {
            Compound::List(_, cells) => cells.push(value.serialize(Scalar)?),
            _ => return Err(Error("a list element outside a list".into())),
        }
        Ok(())
    }

    fn key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<()> {
        match self {
            Compound::Map(_, _, k) | Compound::Fields(_, k) => *k = Some(key.serialize(Key)?),
            Compound::List(..) => return Err(Error("a key in a list".into())),
        }
        Ok(())
    }

    fn value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        match self {
            Compound::Map(_, entries, k) => {
                let key = k
                    .take()
                    .ok_or_else(|| Error("a value without its key".into()))?;
                entries.push((key, value.serialize(Scalar)?));
            }
            Compound::Fields(walk, k) => {
                let key = k
                    .take()
                    .ok_or_else(|| Error("a value without its key".into()))?;
                walk.field(&key, value)?;
            }
            Compound::List(..) => return Err(Error("a map value in a list".into())),
        }
        Ok(())
    }

    fn end(self) -> Result<()> {
        match self {
            Compound::List(walk, cells) => walk.cell(Cell::List(cells)),
            Compound::Map(walk, entries, _) => walk.cell(Cell::Map(entries)),
            Compound::Fields(..) => Ok(()),
        }
    }
}

impl ser::SerializeSeq for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.element(value)
    }
    fn end(self) -> Result<()> {
        Compound::end(self)
    }
}

impl ser::SerializeTuple for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.element(value)
    }
    fn end(self) -> Result<()> {
        Compound::end(self)
    }
}

impl ser::SerializeTupleStruct for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.element(value)
    }
    fn end(self) -> Result<()> {
        Compound::end(self)
    }
}

impl ser::SerializeMap for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<()> {
        self.key(key)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.value(value)
    }
    fn end(self) -> Result<()> {
        Compound::end(self)
    }
}

impl ser::SerializeStruct for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<()> {
        match self {
            Compound::Fields(walk, _) => walk.field(key, value),
            _ => {
                self.key(key)?;
                self.value(value)
            }
        }
    }
    fn end(self) -> Result<()> {
        Compound::end(self)
    }
}
