//! The report's JSON, written by the core from its serde structs: the text Python's
//! `json.dumps(report, indent=2)` (or compact, `separators=(",", ":")`) wrote, byte for byte
//! for the same values: floats in Python's repr, every non-ASCII character escaped, empty
//! containers as `[]` and `{}`. It honours the report's shapes (values.rs): an empty Maybe's
//! key is left out, an Inline's fields are written into the enclosing object, Digits are a
//! number however long.

use std::fmt::Write as _;
use std::io::Write;

use serde::ser::{self, Serialize};

use super::numbers::{float_repr, int_text};
use super::values::{shape, Shape, DIGITS, INLINE};

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

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error(format!("writing the report: {e}"))
    }
}

type Result<T> = std::result::Result<T, Error>;

/// The newtype name of a value this module has written already.
const WRITTEN: &str = "pktflow::Written";

/// A value's JSON text, written by a Writer at the depth it is written into (a document's
/// parts rendered on other threads): the Writer copies it as it is.
pub struct Written<'a>(pub &'a str);

impl Serialize for Written<'_> {
    fn serialize<S: ser::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_newtype_struct(WRITTEN, self.0)
    }
}

/// `value`'s JSON text appended to `out`, as a Writer nested `depth` levels deep writes it
/// (indented), or compact.
pub fn append<T: Serialize + ?Sized>(
    value: &T,
    indented: Option<usize>,
    out: Vec<u8>,
) -> Result<Vec<u8>> {
    let mut w = match indented {
        Some(depth) => Writer::indented(out, depth),
        None => Writer::compact(out),
    };
    value.serialize(&mut w)?;
    w.into_inner()
}

/// Indentation is copied from here.
const SPACES: &[u8; 64] = b"                                                                ";

/// Text is gathered here and handed to the writer in pieces of about this size.
const PIECE: usize = 64 << 10;

pub struct Writer<W: Write> {
    out: W,
    /// What is not yet handed to `out`.
    buf: Vec<u8>,
    /// None: compact; Some(n): indented two spaces a level, the value itself n levels deep.
    base: Option<usize>,
    level: usize,
    /// Scratch for floats and escaped strings.
    text: String,
}

impl<W: Write> Writer<W> {
    pub fn compact(out: W) -> Self {
        Self::new(out, None)
    }

    /// Indented as json.dumps(..., indent=2) indents a value nested `depth` levels deep.
    pub fn indented(out: W, depth: usize) -> Self {
        Self::new(out, Some(depth))
    }

    fn new(out: W, base: Option<usize>) -> Self {
        Writer {
            out,
            buf: Vec::with_capacity(PIECE + 4096),
            base,
            level: 0,
            text: String::new(),
        }
    }

    /// Everything written so far handed to the writer; the writer back.
    pub fn into_inner(mut self) -> Result<W> {
        self.out.write_all(&self.buf)?;
        Ok(self.out)
    }

    /// Hand the gathered text on once there is a piece of it.
    fn pass_on(&mut self) -> Result<()> {
        if self.buf.len() >= PIECE {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Raw text, as is (the document's own punctuation).
    pub fn raw(&mut self, text: &[u8]) -> Result<()> {
        if text.len() < PIECE {
            self.buf.extend_from_slice(text);
        } else {
            // a long connection's written record: handed on as it is, not copied first
            self.out.write_all(&self.buf)?;
            self.buf.clear();
            self.out.write_all(text)?;
        }
        Ok(())
    }

    fn newline(&mut self, level: usize) {
        if let Some(base) = self.base {
            self.buf.push(b'\n');
            let mut rest = 2 * (base + level);
            while rest > 0 {
                let n = rest.min(SPACES.len());
                self.buf
                    .extend_from_slice(SPACES.get(..n).unwrap_or_default());
                rest -= n;
            }
        }
    }

    fn string(&mut self, s: &str) -> Result<()> {
        if s.bytes().all(plain) {
            self.buf.push(b'"');
            self.buf.extend_from_slice(s.as_bytes());
            self.buf.push(b'"');
        } else {
            self.text.clear();
            escape_ascii(s, &mut self.text);
            self.buf.extend_from_slice(self.text.as_bytes());
        }
        Ok(())
    }

    fn float(&mut self, f: f64) -> Result<()> {
        self.text.clear();
        if f.is_nan() {
            self.text.push_str("NaN");
        } else if f.is_infinite() {
            self.text
                .push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
        } else {
            float_repr(f, &mut self.text);
        }
        self.buf.extend_from_slice(self.text.as_bytes());
        Ok(())
    }

    fn int(&mut self, v: impl Into<i128>) -> Result<()> {
        let mut digits = [0u8; 40];
        self.buf
            .extend_from_slice(int_text(v.into(), &mut digits).as_bytes());
        Ok(())
    }

    fn display(&mut self, v: impl std::fmt::Display) -> Result<()> {
        self.text.clear();
        let _ = write!(self.text, "{v}");
        self.buf.extend_from_slice(self.text.as_bytes());
        Ok(())
    }

    /// Before an item of a container opened at `level`: its separator and line.
    fn item(&mut self, first: bool) -> Result<()> {
        self.pass_on()?;
        if !first {
            self.buf.push(b',');
        }
        self.newline(self.level);
        Ok(())
    }

    fn close(&mut self, empty: bool, bracket: &[u8]) -> Result<()> {
        self.level -= 1;
        if !empty {
            self.newline(self.level);
        }
        self.buf.extend_from_slice(bracket);
        Ok(())
    }

    fn colon(&mut self) -> Result<()> {
        self.buf
            .extend_from_slice(if self.base.is_some() { b": " } else { b":" });
        Ok(())
    }
}

/// A byte written as it is inside a JSON string: printable ASCII but the quote and backslash.
fn plain(b: u8) -> bool {
    (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\'
}

/// `s` quoted and escaped as json's encode_basestring_ascii does: printable ASCII as is, the
/// short escapes, everything else as \uXXXX (UTF-16 surrogate pairs above the BMP).
pub fn escape_ascii(s: &str, out: &mut String) {
    out.push('"');
    if s.bytes().all(plain) {
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

/// An open array or object.
pub struct Compound<'a, W: Write> {
    w: &'a mut Writer<W>,
    first: bool,
    /// Closed with this bracket (a newtype variant's object closes twice).
    close: &'static [u8],
}

impl<'a, W: Write> Compound<'a, W> {
    fn open(w: &'a mut Writer<W>, bracket: &[u8], close: &'static [u8]) -> Result<Self> {
        w.buf.extend_from_slice(bracket);
        w.level += 1;
        Ok(Compound {
            w,
            first: true,
            close,
        })
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.w.item(self.first)?;
        self.first = false;
        value.serialize(&mut *self.w)
    }

    fn field<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<()> {
        match shape(value) {
            Shape::Absent => Ok(()),
            Shape::Inline => value.serialize(Inliner { into: self }),
            Shape::Plain => {
                self.w.item(self.first)?;
                self.first = false;
                self.w.string(key)?;
                self.w.colon()?;
                value.serialize(&mut *self.w)
            }
        }
    }

    fn finish(self) -> Result<()> {
        self.w.close(self.first, self.close)
    }
}

impl<'a, W: Write> ser::Serializer for &'a mut Writer<W> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Compound<'a, W>;
    type SerializeTuple = Compound<'a, W>;
    type SerializeTupleStruct = Compound<'a, W>;
    type SerializeTupleVariant = Compound<'a, W>;
    type SerializeMap = Compound<'a, W>;
    type SerializeStruct = Compound<'a, W>;
    type SerializeStructVariant = Compound<'a, W>;

    fn serialize_bool(self, v: bool) -> Result<()> {
        self.raw(if v { b"true" } else { b"false" })
    }
    fn serialize_i8(self, v: i8) -> Result<()> {
        self.int(v)
    }
    fn serialize_i16(self, v: i16) -> Result<()> {
        self.int(v)
    }
    fn serialize_i32(self, v: i32) -> Result<()> {
        self.int(v)
    }
    fn serialize_i64(self, v: i64) -> Result<()> {
        self.int(v)
    }
    fn serialize_i128(self, v: i128) -> Result<()> {
        self.display(v)
    }
    fn serialize_u8(self, v: u8) -> Result<()> {
        self.int(v)
    }
    fn serialize_u16(self, v: u16) -> Result<()> {
        self.int(v)
    }
    fn serialize_u32(self, v: u32) -> Result<()> {
        self.int(v)
    }
    fn serialize_u64(self, v: u64) -> Result<()> {
        self.int(v)
    }
    fn serialize_u128(self, v: u128) -> Result<()> {
        self.display(v)
    }
    fn serialize_f32(self, v: f32) -> Result<()> {
        self.float(v.into())
    }
    fn serialize_f64(self, v: f64) -> Result<()> {
        self.float(v)
    }
    fn serialize_char(self, v: char) -> Result<()> {
        self.string(v.encode_utf8(&mut [0u8; 4]))
    }
    fn serialize_str(self, v: &str) -> Result<()> {
        self.string(v)
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<()> {
        let mut seq = ser::Serializer::serialize_seq(self, Some(v.len()))?;
        for b in v {
            ser::SerializeSeq::serialize_element(&mut seq, b)?;
        }
        ser::SerializeSeq::end(seq)
    }
    fn serialize_none(self) -> Result<()> {
        self.raw(b"null")
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<()> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<()> {
        self.raw(b"null")
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<()> {
        self.raw(b"null")
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result<()> {
        self.string(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<()> {
        match name {
            DIGITS => value.serialize(RawText {
                w: self,
                digits: true,
            }),
            WRITTEN => value.serialize(RawText {
                w: self,
                digits: false,
            }),
            _ => value.serialize(self),
        }
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<()> {
        let mut c = Compound::open(self, b"{", b"}")?;
        c.field(variant, value)?;
        c.finish()
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Compound<'a, W>> {
        Compound::open(self, b"[", b"]")
    }
    fn serialize_tuple(self, _: usize) -> Result<Compound<'a, W>> {
        Compound::open(self, b"[", b"]")
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Compound<'a, W>> {
        Compound::open(self, b"[", b"]")
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Compound<'a, W>> {
        Err(Error("tuple variants have no place in the report".into()))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Compound<'a, W>> {
        Compound::open(self, b"{", b"}")
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Compound<'a, W>> {
        Compound::open(self, b"{", b"}")
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Compound<'a, W>> {
        Err(Error("struct variants have no place in the report".into()))
    }
}

impl<W: Write> ser::SerializeSeq for Compound<'_, W> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.element(value)
    }
    fn end(self) -> Result<()> {
        self.finish()
    }
}

impl<W: Write> ser::SerializeTuple for Compound<'_, W> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.element(value)
    }
    fn end(self) -> Result<()> {
        self.finish()
    }
}

impl<W: Write> ser::SerializeTupleStruct for Compound<'_, W> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.element(value)
    }
    fn end(self) -> Result<()> {
        self.finish()
    }
}

impl<W: Write> ser::SerializeTupleVariant for Compound<'_, W> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.element(value)
    }
    fn end(self) -> Result<()> {
        self.finish()
    }
}

impl<W: Write> ser::SerializeMap for Compound<'_, W> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<()> {
        self.w.item(self.first)?;
        self.first = false;
        key.serialize(KeyText { w: &mut *self.w })?;
        self.w.colon()
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        value.serialize(&mut *self.w)
    }
    fn end(self) -> Result<()> {
        self.finish()
    }
}

impl<W: Write> ser::SerializeStruct for Compound<'_, W> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<()> {
        self.field(key, value)
    }
    fn end(self) -> Result<()> {
        self.finish()
    }
}

impl<W: Write> ser::SerializeStructVariant for Compound<'_, W> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<()> {
        self.field(key, value)
    }
    fn end(self) -> Result<()> {
        self.finish()
    }
}

/// Serializer methods a restricted serializer refuses: what it is given has no place there.
macro_rules! refuse {
    ($what:literal; $($name:ident($($t:ty),*) -> $r:ty;)*) => {
        $(fn $name(self, $(_: $t),*) -> Result<$r> { Err(Error($what.into())) })*
    };
}

macro_rules! refuse_values {
    ($what:literal) => {
        refuse! { $what;
            serialize_bool(bool) -> (); serialize_i8(i8) -> (); serialize_i16(i16) -> ();
            serialize_i32(i32) -> (); serialize_f32(f32) -> (); serialize_f64(f64) -> ();
            serialize_char(char) -> (); serialize_bytes(&[u8]) -> (); serialize_unit() -> ();
            serialize_unit_struct(&'static str) -> ();
            serialize_seq(Option<usize>) -> Self::SerializeSeq;
            serialize_tuple(usize) -> Self::SerializeTuple;
            serialize_tuple_struct(&'static str, usize) -> Self::SerializeTupleStruct;
            serialize_tuple_variant(&'static str, u32, &'static str, usize)
                -> Self::SerializeTupleVariant;
            serialize_map(Option<usize>) -> Self::SerializeMap;
            serialize_struct_variant(&'static str, u32, &'static str, usize)
                -> Self::SerializeStructVariant;
        }
        fn serialize_newtype_variant<T: Serialize + ?Sized>(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: &T,
        ) -> Result<()> {
            Err(Error($what.into()))
        }
    };
}

type Refused = ser::Impossible<(), Error>;

/// A map key: JSON's keys are strings, so numbers are written as their text (as json.dumps
/// writes an int key).
struct KeyText<'a, W: Write> {
    w: &'a mut Writer<W>,
}

impl<W: Write> ser::Serializer for KeyText<'_, W> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Refused;
    type SerializeTuple = Refused;
    type SerializeTupleStruct = Refused;
    type SerializeTupleVariant = Refused;
    type SerializeMap = Refused;
    type SerializeStruct = Refused;
    type SerializeStructVariant = Refused;

    fn serialize_str(self, v: &str) -> Result<()> {
        self.w.string(v)
    }
    fn serialize_i64(self, v: i64) -> Result<()> {
        self.w.raw(b"\"")?;
        self.w.display(v)?;
        self.w.raw(b"\"")
    }
    fn serialize_u8(self, v: u8) -> Result<()> {
        self.serialize_u64(v.into())
    }
    fn serialize_u16(self, v: u16) -> Result<()> {
        self.serialize_u64(v.into())
    }
    fn serialize_u32(self, v: u32) -> Result<()> {
        self.serialize_u64(v.into())
    }
    fn serialize_u64(self, v: u64) -> Result<()> {
        self.w.raw(b"\"")?;
        self.w.display(v)?;
        self.w.raw(b"\"")
    }
    fn serialize_none(self) -> Result<()> {
        self.w.raw(b"\"null\"")
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<()> {
        value.serialize(self)
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result<()> {
        self.w.string(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<()> {
        value.serialize(self)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Refused> {
        Err(Error("a map key must be a string or a number".into()))
    }
    refuse_values!("a map key must be a string or a number");
}

/// Digits written as they are: a number of any length; or a Written value's text.
struct RawText<'a, W: Write> {
    w: &'a mut Writer<W>,
    digits: bool,
}

impl<W: Write> ser::Serializer for RawText<'_, W> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Refused;
    type SerializeTuple = Refused;
    type SerializeTupleStruct = Refused;
    type SerializeTupleVariant = Refused;
    type SerializeMap = Refused;
    type SerializeStruct = Refused;
    type SerializeStructVariant = Refused;

    fn serialize_str(self, v: &str) -> Result<()> {
        if self.digits && (v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit())) {
            return Err(Error(format!("not a count: {v:?}")));
        }
        self.w.raw(v.as_bytes())
    }
    fn serialize_i64(self, v: i64) -> Result<()> {
        self.w.display(v)
    }
    fn serialize_u8(self, v: u8) -> Result<()> {
        self.w.display(v)
    }
    fn serialize_u16(self, v: u16) -> Result<()> {
        self.w.display(v)
    }
    fn serialize_u32(self, v: u32) -> Result<()> {
        self.w.display(v)
    }
    fn serialize_u64(self, v: u64) -> Result<()> {
        self.w.display(v)
    }
    fn serialize_none(self) -> Result<()> {
        self.w.raw(b"null")
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<()> {
        value.serialize(self)
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<()> {
        Err(Error("not a count".into()))
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<()> {
        value.serialize(self)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Refused> {
        Err(Error("not a count".into()))
    }
    refuse_values!("not a count");
}

/// An Inline's value: its struct's fields go to the enclosing object; None writes nothing.
struct Inliner<'a, 'b, W: Write> {
    into: &'a mut Compound<'b, W>,
}

/// The fields of an inlined struct, added to the enclosing object.
struct Inlined<'a, 'b, W: Write> {
    into: &'a mut Compound<'b, W>,
}

impl<W: Write> ser::SerializeStruct for Inlined<'_, '_, W> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<()> {
        self.into.field(key, value)
    }
    fn end(self) -> Result<()> {
        Ok(())
    }
}

impl<'a, 'b, W: Write> ser::Serializer for Inliner<'a, 'b, W> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Refused;
    type SerializeTuple = Refused;
    type SerializeTupleStruct = Refused;
    type SerializeTupleVariant = Refused;
    type SerializeMap = Refused;
    type SerializeStruct = Inlined<'a, 'b, W>;
    type SerializeStructVariant = Refused;

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<()> {
        if name != INLINE {
            return Err(Error("only an Inline is inlined".into()));
        }
        value.serialize(self)
    }
    fn serialize_none(self) -> Result<()> {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<()> {
        value.serialize(self)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Inlined<'a, 'b, W>> {
        Ok(Inlined { into: self.into })
    }
    fn serialize_str(self, _: &str) -> Result<()> {
        Err(Error("only a struct is inlined".into()))
    }
    fn serialize_i64(self, _: i64) -> Result<()> {
        Err(Error("only a struct is inlined".into()))
    }
    fn serialize_u8(self, _: u8) -> Result<()> {
        Err(Error("only a struct is inlined".into()))
    }
    fn serialize_u16(self, _: u16) -> Result<()> {
        Err(Error("only a struct is inlined".into()))
    }
    fn serialize_u32(self, _: u32) -> Result<()> {
        Err(Error("only a struct is inlined".into()))
    }
    fn serialize_u64(self, _: u64) -> Result<()> {
        Err(Error("only a struct is inlined".into()))
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<()> {
        Err(Error("only a struct is inlined".into()))
    }
    refuse_values!("only a struct is inlined");
}

/// `value` as JSON text: compact, or indented as nested `depth` levels deep.
pub fn to_string<T: Serialize + ?Sized>(value: &T, depth: Option<usize>) -> Result<String> {
    let mut w = match depth {
        Some(d) => Writer::indented(Vec::new(), d),
        None => Writer::compact(Vec::new()),
    };
    value.serialize(&mut w)?;
    String::from_utf8(w.into_inner()?).map_err(|e| Error(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::values::{Digits, Inline, Maybe};
    use serde::Serialize;

    #[derive(Serialize)]
    struct Part {
        a: u32,
        b: Maybe<u32>,
    }

    #[derive(Serialize)]
    struct Whole {
        x: Option<f64>,
        part: Inline<Part>,
        none: Inline<Part>,
        gone: Maybe<String>,
        here: Maybe<String>,
        n: Digits,
        list: Vec<u8>,
        empty: Vec<u8>,
        text: &'static str,
    }

    fn whole() -> Whole {
        Whole {
            x: Some(7.5e-05),
            part: Inline(Some(Part {
                a: 1,
                b: Maybe(None),
            })),
            none: Inline(None),
            gone: Maybe(None),
            here: Maybe(Some("é\u{1F600}\"".into())),
            n: Digits("123456789012345678901234567890".into()),
            list: vec![1, 2],
            empty: vec![],
            text: "tab\there",
        }
    }

    #[test]
    fn compact_as_json_dumps_writes_it() {
        // json.dumps(v, separators=(",", ":")) of the same value
        assert_eq!(
            to_string(&whole(), None).unwrap(),
            r#"{"x":7.5e-05,"a":1,"here":"\u00e9\ud83d\ude00\"","n":123456789012345678901234567890,"list":[1,2],"empty":[],"text":"tab\there"}"#
        );
    }

    #[test]
    fn indented_as_json_dumps_writes_it() {
        // json.dumps(v, indent=2) of the same value
        let want = "{\n  \"x\": 7.5e-05,\n  \"a\": 1,\n  \"here\": \"\\u00e9\\ud83d\\ude00\\\"\",\n  \"n\": 123456789012345678901234567890,\n  \"list\": [\n    1,\n    2\n  ],\n  \"empty\": [],\n  \"text\": \"tab\\there\"\n}";
        assert_eq!(to_string(&whole(), Some(0)).unwrap(), want);
        // nested a level deep: every line after the first two spaces more
        let deeper = to_string(&whole(), Some(1)).unwrap();
        assert_eq!(deeper, want.replace('\n', "\n  "));
    }

    #[test]
    fn an_object_with_every_field_absent_is_empty() {
        #[derive(Serialize)]
        struct Nothing {
            a: Maybe<u8>,
        }
        assert_eq!(
            to_string(&Nothing { a: Maybe(None) }, Some(0)).unwrap(),
            "{}"
        );
    }
}
