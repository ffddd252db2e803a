//! A serde Serializer that writes nothing and fails on a float that is NaN or infinite:
//! serde_json writes those as `null` without a word, so a broken measurement would pass
//! unseen. The error names the field path where it sits.

use std::fmt;

use serde::ser::{self, Serialize};

#[derive(Debug)]
pub struct NotFinite(pub String);

impl fmt::Display for NotFinite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotFinite {}

impl ser::Error for NotFinite {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        NotFinite(msg.to_string())
    }
}

/// Every float in `value` is finite; else where the first one is not.
pub fn check<T: Serialize + ?Sized>(value: &T) -> Result<(), NotFinite> {
    value.serialize(Finite)
}

pub struct Finite;

type Done = Result<(), NotFinite>;

fn at<T: Serialize + ?Sized>(key: &str, value: &T) -> Done {
    value.serialize(Finite).map_err(|e| {
        let sep = if e.0.starts_with(' ') { "" } else { "." };
        NotFinite(format!("{key}{sep}{}", e.0))
    })
}

impl ser::Serializer for Finite {
    type Ok = ();
    type Error = NotFinite;
    type SerializeSeq = Finite;
    type SerializeTuple = Finite;
    type SerializeTupleStruct = Finite;
    type SerializeTupleVariant = Finite;
    type SerializeMap = Finite;
    type SerializeStruct = Finite;
    type SerializeStructVariant = Finite;

    fn serialize_bool(self, _: bool) -> Done {
        Ok(())
    }
    fn serialize_i8(self, _: i8) -> Done {
        Ok(())
    }
    fn serialize_i16(self, _: i16) -> Done {
        Ok(())
    }
    fn serialize_i32(self, _: i32) -> Done {
        Ok(())
    }
    fn serialize_i64(self, _: i64) -> Done {
        Ok(())
    }
    fn serialize_i128(self, _: i128) -> Done {
        Ok(())
    }
    fn serialize_u8(self, _: u8) -> Done {
        Ok(())
    }
    fn serialize_u16(self, _: u16) -> Done {
        Ok(())
    }
    fn serialize_u32(self, _: u32) -> Done {
        Ok(())
    }
    fn serialize_u64(self, _: u64) -> Done {
        Ok(())
    }
    fn serialize_u128(self, _: u128) -> Done {
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Done {
        self.serialize_f64(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Done {
        if v.is_finite() {
            Ok(())
        } else {
            Err(NotFinite(format!(" = {v}")))
        }
    }
    fn serialize_char(self, _: char) -> Done {
        Ok(())
    }
    fn serialize_str(self, _: &str) -> Done {
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> Done {
        Ok(())
    }
    fn serialize_none(self) -> Done {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Done {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Done {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Done {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Done {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, v: &T) -> Done {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        v: &T,
    ) -> Done {
        at(variant, v)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Finite, NotFinite> {
        Ok(self)
    }
    fn serialize_tuple(self, _: usize) -> Result<Finite, NotFinite> {
        Ok(self)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Finite, NotFinite> {
        Ok(self)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Finite, NotFinite> {
        Ok(self)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Finite, NotFinite> {
        Ok(self)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Finite, NotFinite> {
        Ok(self)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Finite, NotFinite> {
        Ok(self)
    }
}

impl ser::SerializeSeq for Finite {
    type Ok = ();
    type Error = NotFinite;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Done {
        at("[]", v)
    }
    fn end(self) -> Done {
        Ok(())
    }
}

impl ser::SerializeTuple for Finite {
    type Ok = ();
    type Error = NotFinite;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Done {
        at("()", v)
    }
    fn end(self) -> Done {
        Ok(())
    }
}

impl ser::SerializeTupleStruct for Finite {
    type Ok = ();
    type Error = NotFinite;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, v: &T) -> Done {
        at("()", v)
    }
    fn end(self) -> Done {
        Ok(())
    }
}

impl ser::SerializeTupleVariant for Finite {
    type Ok = ();
    type Error = NotFinite;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, v: &T) -> Done {
        at("()", v)
    }
    fn end(self) -> Done {
        Ok(())
    }
}

impl ser::SerializeMap for Finite {
    type Ok = ();
    type Error = NotFinite;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, k: &T) -> Done {
        at("{key}", k)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Done {
        at("{}", v)
    }
    fn end(self) -> Done {
        Ok(())
    }
}

impl ser::SerializeStruct for Finite {
    type Ok = ();
    type Error = NotFinite;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, v: &T) -> Done {
        at(key, v)
    }
    fn end(self) -> Done {
        Ok(())
    }
}

impl ser::SerializeStructVariant for Finite {
    type Ok = ();
    type Error = NotFinite;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, v: &T) -> Done {
        at(key, v)
    }
    fn end(self) -> Done {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn finds_a_nan_and_names_where() {
        #[derive(serde::Serialize)]
        struct Inner {
            t: Option<f64>,
        }
        #[derive(serde::Serialize)]
        struct Outer {
            ok: f64,
            rows: Vec<Inner>,
        }
        let good = Outer {
            ok: 1.5,
            rows: vec![Inner { t: None }, Inner { t: Some(2.0) }],
        };
        assert!(check(&good).is_ok());
        let bad = Outer {
            ok: 1.5,
            rows: vec![Inner { t: Some(f64::NAN) }],
        };
        let e = check(&bad).err().map(|e| e.0);
        assert_eq!(e.as_deref(), Some("rows.[].t = NaN"));
        assert!(check(&f64::INFINITY).is_err());
    }
}
