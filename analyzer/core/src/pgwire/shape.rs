//! What each message type's body must look like, as the protocol chapter's Message Formats
//! lay it out: fixed lengths (`messages::expected_length`, which decoding checks too),
//! strings that end where the message ends, counts whose items fill the body exactly (a
//! RowDescription's fields, a DataRow's columns). Detection reads it: a message that does not
//! fit its shape is not evidence of PostgreSQL. A body the capture cut (a short snapshot
//! length) fits when what was captured is consistent with the shape.

use super::messages::{expected_length, Role};

/// The body of a message (after type and length) or its captured start, read front to back.
struct Body<'a> {
    b: &'a [u8],
    at: usize,
    /// The body's length as its header says: `b` is its start when shorter.
    len: usize,
}

/// Reading stopped: the shape is broken, or the captured bytes ran out before it could tell.
#[derive(Debug, PartialEq, Eq)]
enum Stop {
    Broken,
    Cut,
}

type Read<T> = Result<T, Stop>;

impl Body<'_> {
    /// `n` more bytes, within the body's length and the captured bytes.
    fn take(&mut self, n: usize) -> Read<&[u8]> {
        let end = self.at.checked_add(n).ok_or(Stop::Broken)?;
        if end > self.len {
            return Err(Stop::Broken);
        }
        let got = self.b.get(self.at..end).ok_or(Stop::Cut)?;
        self.at = end;
        Ok(got)
    }

    fn i16(&mut self) -> Read<i16> {
        let s = self.take(2)?;
        Ok(i16::from_be_bytes([s[0], s[1]]))
    }

    fn i32(&mut self) -> Read<i32> {
        let s = self.take(4)?;
        Ok(i32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }

    /// A count (0 or more; `max` at most).
    fn count(&mut self, max: i16) -> Read<usize> {
        let n = self.i16()?;
        if !(0..=max).contains(&n) {
            return Err(Stop::Broken);
        }
        Ok(n as usize)
    }

    /// A NUL-terminated string, within the body.
    fn cstring(&mut self) -> Read<&[u8]> {
        let rest = self
            .b
            .get(self.at..self.len.min(self.b.len()))
            .unwrap_or(&[]);
        match rest.iter().position(|&c| c == 0) {
            Some(i) => {
                let s = rest.get(..i).unwrap_or(&[]);
                self.at += i + 1;
                Ok(s)
            }
            // no NUL before the body's end: broken; before the captured bytes' end: cut
            None if self.b.len() >= self.len => Err(Stop::Broken),
            None => Err(Stop::Cut),
        }
    }

    /// A byte string of a length field (-1: NULL).
    fn value(&mut self) -> Read<()> {
        let n = self.i32()?;
        if n < -1 {
            return Err(Stop::Broken);
        }
        if n > 0 {
            self.take(n as usize)?;
        }
        Ok(())
    }

    /// Format codes: 0 text, 1 binary.
    fn formats(&mut self, n: usize) -> Read<()> {
        for _ in 0..n {
            if !(0..=1).contains(&self.i16()?) {
                return Err(Stop::Broken);
            }
        }
        Ok(())
    }

    /// The body ends here.
    fn end(&self) -> Read<()> {
        if self.at == self.len {
            Ok(())
        } else {
            Err(Stop::Broken)
        }
    }
}

/// A table has at most 1,664 columns; a statement's parameters are counted in an int16.
const MAX_COLUMNS: i16 = 1664;
const MAX_COUNT: i16 = i16::MAX;
/// Authentication request codes PostgreSQL sends (AuthenticationOk .. SASLFinal).
const AUTH_CODES: [i32; 10] = [0, 2, 3, 5, 7, 8, 9, 10, 11, 12];

/// Whether a message of type `t` from `role`, `len` bytes long as its header says (counting
/// itself), with `body` its body or the body's captured start, fits its type's shape.
pub fn fits(role: Role, t: u8, len: i64, body: &[u8]) -> bool {
    if expected_length(role, t, None).is_some_and(|(lo, hi)| !(lo..=hi).contains(&len)) {
        return false;
    }
    let Some(blen) = len.checked_sub(4).and_then(|n| usize::try_from(n).ok()) else {
        return false;
    };
    let mut r = Body {
        b: body.get(..blen.min(body.len())).unwrap_or(body),
        at: 0,
        len: blen,
    };
    let read = match role {
        Role::Frontend => frontend(t, &mut r),
        Role::Backend => backend(t, &mut r),
    };
    read != Err(Stop::Broken)
}

fn frontend(t: u8, r: &mut Body<'_>) -> Read<()> {
    match t {
        b'Q' | b'f' => {
            r.cstring()?;
        }
        b'P' => {
            r.cstring()?;
            r.cstring()?;
            let n = r.count(MAX_COUNT)?;
            for _ in 0..n {
                r.i32()?;
            }
        }
        b'B' => {
            r.cstring()?;
            r.cstring()?;
            let n = r.count(MAX_COUNT)?;
            r.formats(n)?;
            for _ in 0..r.count(MAX_COUNT)? {
                r.value()?;
            }
            let n = r.count(MAX_COUNT)?;
            r.formats(n)?;
        }
        b'E' => {
            r.cstring()?;
            if r.i32()? < 0 {
                return Err(Stop::Broken);
            }
        }
        b'D' | b'C' => {
            if !matches!(r.take(1)?, [b'S' | b'P']) {
                return Err(Stop::Broken);
            }
            r.cstring()?;
        }
        b'S' | b'H' | b'X' | b'c' => {} // no body: the length is checked in `fits`
        b'F' => {
            r.i32()?;
            let n = r.count(MAX_COUNT)?;
            r.formats(n)?;
            for _ in 0..r.count(MAX_COUNT)? {
                r.value()?;
            }
            r.formats(1)?;
        }
        // CopyData, and the password, SASL or GSS responses: any bytes
        b'd' | b'p' => {
            r.at = r.len;
        }
        _ => return Err(Stop::Broken),
    }
    r.end()
}

fn backend(t: u8, r: &mut Body<'_>) -> Read<()> {
    match t {
        b'R' => {
            let code = r.i32()?;
            if !AUTH_CODES.contains(&code) {
                return Err(Stop::Broken);
            }
            match code {
                5 => {
                    r.take(4)?; // the MD5 salt
                }
                10 => {
                    // SASL mechanisms, a list ended by an empty string
                    while !r.cstring()?.is_empty() {}
                }
                7..=9 | 11 | 12 => r.at = r.len, // GSS or SASL data
                _ => {}
            }
        }
        b'K' => {
            r.i32()?; // the process id, then the secret key (its length checked in `fits`)
            r.at = r.len;
        }
        b'S' => {
            r.cstring()?;
            r.cstring()?;
        }
        b'Z' => {
            if !matches!(r.take(1)?, [b'I' | b'T' | b'E']) {
                return Err(Stop::Broken);
            }
        }
        b'T' => {
            for _ in 0..r.count(MAX_COLUMNS)? {
                r.cstring()?;
                r.take(16)?; // table OID, column number, type OID, type size, type modifier
                r.formats(1)?;
            }
        }
        b'D' => {
            for _ in 0..r.count(MAX_COLUMNS)? {
                r.value()?;
            }
        }
        b'C' => {
            r.cstring()?;
        }
        b'I' | b'1' | b'2' | b'3' | b'n' | b's' | b'c' => {}
        b'E' | b'N' => loop {
            // fields: a code byte and a string each, then a NUL
            if r.take(1)? == [0] {
                break;
            }
            r.cstring()?;
        },
        b'A' => {
            r.i32()?;
            r.cstring()?;
            r.cstring()?;
        }
        b't' => {
            for _ in 0..r.count(MAX_COUNT)? {
                r.i32()?;
            }
        }
        b'G' | b'H' | b'W' => {
            r.formats(1)?;
            let n = r.count(MAX_COLUMNS)?;
            r.formats(n)?;
        }
        b'd' => r.at = r.len,
        b'V' => r.value()?,
        b'v' => {
            r.i32()?;
            let n = r.i32()?;
            if n < 0 {
                return Err(Stop::Broken);
            }
            for _ in 0..n {
                r.cstring()?;
            }
        }
        _ => return Err(Stop::Broken),
    }
    r.end()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    fn whole(role: Role, t: u8, b: &[u8]) -> bool {
        fits(role, t, b.len() as i64 + 4, b)
    }

    #[test]
    fn fixed_lengths() {
        for t in *b"SHXc" {
            assert!(whole(Role::Frontend, t, b""));
            assert!(!whole(Role::Frontend, t, b"x"));
        }
        for t in *b"I123nsc" {
            assert!(whole(Role::Backend, t, b""));
            assert!(!whole(Role::Backend, t, b"\0"));
        }
        assert!(whole(Role::Backend, b'Z', b"I") && whole(Role::Backend, b'Z', b"E"));
        assert!(!whole(Role::Backend, b'Z', b"X") && !whole(Role::Backend, b'Z', b"II"));
        assert!(whole(Role::Backend, b'K', &[0; 8]) && !whole(Role::Backend, b'K', &[0; 7]));
    }

    #[test]
    fn strings_end_where_the_message_ends() {
        assert!(whole(Role::Frontend, b'Q', b"SELECT 1\0"));
        assert!(!whole(Role::Frontend, b'Q', b"SELECT 1"));
        assert!(!whole(Role::Frontend, b'Q', b"SELECT\x001\0"));
        assert!(whole(Role::Backend, b'C', b"SELECT 1\0"));
        assert!(whole(Role::Backend, b'S', b"TimeZone\0UTC\0"));
        assert!(!whole(Role::Backend, b'S', b"TimeZone\0UTC"));
        assert!(whole(
            Role::Backend,
            b'E',
            b"SERROR\0C22012\0Mdivision by zero\0\0"
        ));
        assert!(!whole(Role::Backend, b'E', b"SERROR\0C22012\0"));
    }

    #[test]
    fn counts_fill_the_body() {
        let row = body(&[&[0, 2], &3i32.to_be_bytes(), b"abc", &(-1i32).to_be_bytes()]);
        assert!(whole(Role::Backend, b'D', &row));
        assert!(!whole(Role::Backend, b'D', &[&row[..], b"x"].concat()));
        assert!(!whole(Role::Backend, b'D', &row[..row.len() - 1]));
        let field = body(&[b"id\0", &[0; 16], &[0, 0]]);
        assert!(whole(Role::Backend, b'T', &body(&[&[0, 1], &field])));
        assert!(!whole(Role::Backend, b'T', &body(&[&[0, 2], &field])));
        let parse = body(&[b"s1\0SELECT $1\0", &[0, 1], &23i32.to_be_bytes()]);
        assert!(whole(Role::Frontend, b'P', &parse));
        let bind = body(&[
            b"\0s1\0",
            &[0, 1, 0, 0],
            &[0, 1],
            &1i32.to_be_bytes(),
            b"7",
            &[0, 0],
        ]);
        assert!(whole(Role::Frontend, b'B', &bind));
        assert!(!whole(Role::Frontend, b'B', &[&bind[..], b"\0"].concat()));
        assert!(whole(Role::Frontend, b'E', b"\0\0\0\0\0"));
        assert!(whole(Role::Frontend, b'D', b"Ps1\0") && !whole(Role::Frontend, b'D', b"Xs1\0"));
    }

    #[test]
    fn a_cut_body_fits_when_its_start_does() {
        let q = b"SELECT * FROM t10k\0";
        for n in 0..q.len() {
            assert!(fits(Role::Frontend, b'Q', q.len() as i64 + 4, &q[..n]));
        }
        // a NUL inside the captured start of a Query, before its end, is not a Query
        assert!(!fits(Role::Frontend, b'Q', 40, b"SEL\0ECT"));
        // a RowDescription whose count claims more columns than a table holds
        assert!(!fits(Role::Backend, b'T', 4000, &[0x7f, 0xff]));
        assert!(fits(Role::Backend, b'T', 4000, &[0, 2, b'i']));
        assert!(!fits(Role::Backend, b'R', 12, &99i32.to_be_bytes()));
        assert!(fits(Role::Backend, b'R', 12, &5i32.to_be_bytes()));
    }

    #[test]
    fn lengths_below_the_header_never_fit() {
        assert!(!fits(Role::Frontend, b'S', 3, b""));
        assert!(!fits(Role::Backend, b'Z', -1, b""));
    }
}
