//! Three shapes the report's JSON has that plain serde structs do not: a key that is absent
//! (not null) when there is nothing to say, a part whose keys sit in its parent's object, and
//! a count too large for 64 bits. Each is a newtype with a name of its own: the report's
//! writers (`report::json`, the binding's converter) look for the name and shape the output;
//! every other serializer (the spool's) sees a plain newtype around its value.

use serde::de::{Deserialize, Deserializer};
use serde::ser::{Serialize, Serializer};

/// The newtype names the writers look for.
pub const MAYBE: &str = "pktflow::Maybe";
pub const INLINE: &str = "pktflow::Inline";
pub const DIGITS: &str = "pktflow::Digits";

/// A field written only when it holds a value: `Maybe(None)` leaves the key out.
#[derive(Clone, Debug, PartialEq)]
pub struct Maybe<T>(pub Option<T>);

impl<T> Default for Maybe<T> {
    fn default() -> Self {
        Maybe(None)
    }
}

impl<T: Serialize> Serialize for Maybe<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_newtype_struct(MAYBE, &self.0)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Maybe<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Option::deserialize(d).map(Maybe)
    }
}

impl<T> From<Option<T>> for Maybe<T> {
    fn from(v: Option<T>) -> Self {
        Maybe(v)
    }
}

/// A struct whose fields are written into the enclosing object, as if declared there; with
/// None, none of them is.
#[derive(Clone, Debug, PartialEq)]
pub struct Inline<T>(pub Option<T>);

impl<T> Default for Inline<T> {
    fn default() -> Self {
        Inline(None)
    }
}

impl<T: Serialize> Serialize for Inline<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_newtype_struct(INLINE, &self.0)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Inline<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Option::deserialize(d).map(Inline)
    }
}

/// A non-negative integer as its decimal digits: written as a JSON number however long (a
/// command tag's row count has no bound), made a Python int by the binding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Digits(pub String);

impl Serialize for Digits {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_newtype_struct(DIGITS, &self.0)
    }
}

impl<'de> Deserialize<'de> for Digits {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Digits)
    }
}

/// How a writer treats a field's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Written under its key.
    Plain,
    /// An empty `Maybe`: the key is left out.
    Absent,
    /// An `Inline`: its fields are written into the enclosing object.
    Inline,
}

/// The shape of a field's value, found before its key is written: a serializer that answers
/// that and nothing else (it stops at the value's outermost layer).
pub fn shape<T: Serialize + ?Sized>(value: &T) -> Shape {
    value
        .serialize(Probe { in_maybe: false })
        .unwrap_or(Shape::Plain)
}

/// Inside a Maybe, serialize_none means absent.
struct Probe {
    in_maybe: bool,
}

#[derive(Debug)]
struct NotAbsent;

impl std::fmt::Display for NotAbsent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("not a shaped value")
    }
}

impl std::error::Error for NotAbsent {}

impl serde::ser::Error for NotAbsent {
    fn custom<M: std::fmt::Display>(_: M) -> Self {
        NotAbsent
    }
}

type Compound = serde::ser::Impossible<Shape, NotAbsent>;

/// Serializer methods that answer "plain" at once, whatever the value.
macro_rules! no {
    ($($name:ident($($t:ty),*);)*) => {
        $(fn $name(self, $(_: $t),*) -> Result<Shape, NotAbsent> { Ok(Shape::Plain) })*
    };
}

macro_rules! refuse {
    ($($name:ident($($t:ty),*) -> $r:ty;)*) => {
        $(fn $name(self, $(_: $t),*) -> Result<$r, NotAbsent> { Err(NotAbsent) })*
    };
}

impl Serializer for Probe {
    type Ok = Shape;
    type Error = NotAbsent;
    type SerializeSeq = Compound;
    type SerializeTuple = Compound;
    type SerializeTupleStruct = Compound;
    type SerializeTupleVariant = Compound;
    type SerializeMap = Compound;
    type SerializeStruct = Compound;
    type SerializeStructVariant = Compound;

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<Shape, NotAbsent> {
        if self.in_maybe {
            return Ok(Shape::Plain);
        }
        match name {
            MAYBE => value.serialize(Probe { in_maybe: true }),
            INLINE => Ok(Shape::Inline),
            _ => Ok(Shape::Plain),
        }
    }

    fn serialize_none(self) -> Result<Shape, NotAbsent> {
        Ok(if self.in_maybe {
            Shape::Absent
        } else {
            Shape::Plain
        })
    }

    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<Shape, NotAbsent> {
        Ok(Shape::Plain)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<Shape, NotAbsent> {
        Ok(Shape::Plain)
    }

    no! {
        serialize_bool(bool); serialize_i8(i8); serialize_i16(i16); serialize_i32(i32);
        serialize_i64(i64); serialize_u8(u8); serialize_u16(u16); serialize_u32(u32);
        serialize_u64(u64); serialize_f32(f32); serialize_f64(f64); serialize_char(char);
        serialize_str(&str); serialize_bytes(&[u8]); serialize_unit();
        serialize_unit_struct(&'static str);
        serialize_unit_variant(&'static str, u32, &'static str);
    }

    refuse! {
        serialize_seq(Option<usize>) -> Compound;
        serialize_tuple(usize) -> Compound;
        serialize_tuple_struct(&'static str, usize) -> Compound;
        serialize_tuple_variant(&'static str, u32, &'static str, usize) -> Compound;
        serialize_map(Option<usize>) -> Compound;
        serialize_struct(&'static str, usize) -> Compound;
        serialize_struct_variant(&'static str, u32, &'static str, usize) -> Compound;
    }
}
