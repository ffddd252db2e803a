//! PostgreSQL protocol 3.0 message types, named as in the PostgreSQL documentation, and the
//! parsers for the few bodies pktflow reads. DataRow and CopyData bodies are never parsed.
//!
//! Text is decoded as the reference decodes it (UTF-8 with replacement characters) and split
//! as Python's `str.split()` splits, since the report shows what those produce.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

/// Which side of the protocol a byte stream speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Frontend,
    Backend,
}

pub const PROTOCOL_3: u32 = 196_608;
pub const SSL_REQUEST: u32 = 80_877_103;
pub const GSSENC_REQUEST: u32 = 80_877_104;
pub const CANCEL_REQUEST: u32 = 80_877_102;

/// A message name as the counts key it (the documentation's names; untyped first messages and
/// an encryption refusal have names of their own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Name {
    Known(&'static str),
    /// An authentication request of a code without a name: "Authentication<code>".
    Auth(u32),
}

impl Name {
    pub fn text(self) -> String {
        self.label().into_owned()
    }

    /// The name without an allocation where it is static.
    pub fn label(self) -> Cow<'static, str> {
        match self {
            Name::Known(s) => Cow::Borrowed(s),
            Name::Auth(code) => Cow::Owned(format!("Authentication{code}")),
        }
    }
}

/// The frontend's message of type byte t.
pub fn frontend_name(t: u8) -> Option<&'static str> {
    Some(match t {
        b'Q' => "Query",
        b'P' => "Parse",
        b'B' => "Bind",
        b'E' => "Execute",
        b'D' => "Describe",
        b'S' => "Sync",
        b'H' => "Flush",
        b'C' => "Close",
        b'd' => "CopyData",
        b'c' => "CopyDone",
        b'f' => "CopyFail",
        b'F' => "FunctionCall",
        b'X' => "Terminate",
        b'p' => "PasswordMessage",
        _ => return None,
    })
}

/// The backend's message of type byte t.
pub fn backend_name(t: u8) -> Option<&'static str> {
    Some(match t {
        b'R' => "Authentication",
        b'K' => "BackendKeyData",
        b'S' => "ParameterStatus",
        b'Z' => "ReadyForQuery",
        b'T' => "RowDescription",
        b'D' => "DataRow",
        b'C' => "CommandComplete",
        b'I' => "EmptyQueryResponse",
        b'E' => "ErrorResponse",
        b'N' => "NoticeResponse",
        b'A' => "NotificationResponse",
        b'1' => "ParseComplete",
        b'2' => "BindComplete",
        b'3' => "CloseComplete",
        b't' => "ParameterDescription",
        b'n' => "NoData",
        b's' => "PortalSuspended",
        b'G' => "CopyInResponse",
        b'H' => "CopyOutResponse",
        b'W' => "CopyBothResponse",
        b'd' => "CopyData",
        b'c' => "CopyDone",
        b'V' => "FunctionCallResponse",
        b'v' => "NegotiateProtocolVersion",
        _ => return None,
    })
}

pub fn name_of(role: Role, t: u8) -> Option<&'static str> {
    match role {
        Role::Frontend => frontend_name(t),
        Role::Backend => backend_name(t),
    }
}

/// The name of an authentication request.
pub fn auth_name(code: u32) -> Name {
    Name::Known(match code {
        0 => "AuthenticationOk",
        2 => "AuthenticationKerberosV5",
        3 => "AuthenticationCleartextPassword",
        5 => "AuthenticationMD5Password",
        7 => "AuthenticationGSS",
        8 => "AuthenticationGSSContinue",
        9 => "AuthenticationSSPI",
        10 => "AuthenticationSASL",
        11 => "AuthenticationSASLContinue",
        12 => "AuthenticationSASLFinal",
        _ => return Name::Auth(code),
    })
}

/// What the frontend's 'p' message is, given the last authentication request.
pub fn password_reply(auth: u32) -> &'static str {
    match auth {
        7..=9 => "GSSResponse",
        10 => "SASLInitialResponse",
        11 => "SASLResponse",
        _ => "PasswordMessage",
    }
}

pub fn be32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

pub fn be16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([s[0], s[1]]))
}

/// bytes.decode("utf-8", "replace")
pub fn decode(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The same, borrowed when b is valid UTF-8 (a key to look up, a text to share).
pub fn lossy(b: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(b)
}

/// b up to its first NUL (all of it without one).
pub fn upto_nul(b: &[u8]) -> &[u8] {
    match b.iter().position(|&c| c == 0) {
        Some(i) => b.get(..i).unwrap_or(b),
        None => b,
    }
}

/// The first two NUL-separated strings of a body (`cstrings(body, 2)` with two parts): None
/// without a NUL. The second runs to the next NUL or the end.
pub fn two_cstrings(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let i = b.iter().position(|&c| c == 0)?;
    let rest = b.get(i + 1..).unwrap_or(&[]);
    Some((b.get(..i).unwrap_or(&[]), upto_nul(rest)))
}

/// b without its trailing NULs (`bytes.rstrip(b"\0")`).
pub fn rstrip_nul(b: &[u8]) -> &[u8] {
    let mut n = b.len();
    while n > 0 && b.get(n - 1) == Some(&0) {
        n -= 1;
    }
    b.get(..n).unwrap_or(b)
}

/// user, database and application_name of a StartupMessage body (after the protocol
/// number), as `startup_params(body).get(key)`: pairs among the first 64 NUL-separated
/// strings, the last of each key winning.
pub fn startup_values(body: &[u8]) -> [Option<String>; 3] {
    const KEYS: [&[u8]; 3] = [b"user", b"database", b"application_name"];
    // body.split(b"\0", 64): items 0..63 lie between NULs; item 64 (the rest) is never a key
    // or a value
    let mut items: Vec<&[u8]> = Vec::new();
    let mut rest = body;
    loop {
        let item = upto_nul(rest);
        items.push(item);
        if item.len() == rest.len() || items.len() == 65 {
            break;
        }
        rest = rest.get(item.len() + 1..).unwrap_or(&[]);
    }
    let mut out: [Option<String>; 3] = [None, None, None];
    let mut i = 0;
    while i + 1 < items.len() {
        if let (Some(k), Some(v)) = (items.get(i), items.get(i + 1)) {
            for (slot, key) in out.iter_mut().zip(KEYS) {
                if *k == key {
                    *slot = Some(decode(v));
                }
            }
        }
        i += 2;
    }
    out
}

/// The fields of an ErrorResponse a report reads: the last of each letter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorFields {
    pub code: Option<String>,
    pub message: Option<String>,
    pub severity: Option<String>,
    pub detail: Option<String>,
    pub hint: Option<String>,
    pub position: Option<String>,
}

pub fn error_fields(body: &[u8]) -> ErrorFields {
    let mut out = ErrorFields::default();
    for item in body.split(|&c| c == 0) {
        let (Some(&letter), Some(value)) = (item.first(), item.get(1..)) else {
            continue;
        };
        let slot = match letter {
            b'C' => &mut out.code,
            b'M' => &mut out.message,
            b'V' => &mut out.severity,
            b'D' => &mut out.detail,
            b'H' => &mut out.hint,
            b'P' => &mut out.position,
            _ => continue,
        };
        *slot = Some(decode(value));
    }
    out
}

/// Python's `str.isspace()`, which `str.split()` splits on.
pub fn py_space(c: char) -> bool {
    matches!(
        c,
        '\t'..='\r'
            | '\x1c'..='\x1f'
            | ' '
            | '\u{85}'
            | '\u{a0}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200a}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202f}'
            | '\u{205f}'
            | '\u{3000}'
    )
}

/// The row count's digits of a CommandComplete tag ('SELECT 5', 'COPY 7', 'INSERT 0 3'):
/// ASCII digits only, as PostgreSQL writes them (str.isdigit() also takes "²").
pub fn command_rows(tag: &str) -> Option<&str> {
    let mut words = tag.split(py_space).filter(|w| !w.is_empty());
    let first = words.next()?;
    let last = words.next_back()?;
    let digits = last.bytes().all(|c| c.is_ascii_digit());
    let counts_rows = matches!(
        first,
        "SELECT" | "COPY" | "INSERT" | "UPDATE" | "DELETE" | "MERGE" | "FETCH" | "MOVE"
    );
    (digits && counts_rows).then_some(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_tag_rows() {
        assert_eq!(command_rows("SELECT 5"), Some("5"));
        assert_eq!(command_rows("INSERT 0 3"), Some("3"));
        assert_eq!(command_rows("COPY 1500000"), Some("1500000"));
        assert_eq!(command_rows("  SELECT \t 3  "), Some("3"));
        assert_eq!(command_rows("SELECT\x1c12"), Some("12"));
        assert_eq!(command_rows("SELECT\u{2003}5"), Some("5"));
        assert_eq!(command_rows("CREATE TABLE"), None);
        assert_eq!(command_rows("SELECT"), None);
        assert_eq!(command_rows("SELECT ²"), None);
        assert_eq!(command_rows("SELECT ٣"), None);
        assert_eq!(command_rows("select 5"), None);
        assert_eq!(command_rows("SELECT -1"), None);
        assert_eq!(command_rows(""), None);
    }

    #[test]
    fn startup_pairs_last_wins_first_64() {
        let mut body = b"user\0alice\0database\0shop\0user\0bob\0\0".to_vec();
        assert_eq!(
            startup_values(&body),
            [Some("bob".into()), Some("shop".into()), None]
        );
        body.clear();
        for i in 0..40 {
            body.extend_from_slice(format!("k{i}\0v{i}\0").as_bytes());
        }
        body.extend_from_slice(b"user\0late\0\0");
        assert_eq!(startup_values(&body)[0], None); // past the 64 strings read
    }

    #[test]
    fn error_fields_last_of_each_letter() {
        let e = error_fields(b"C1\0C2\0M\xff\0Zz\0\0");
        assert_eq!(e.code.as_deref(), Some("2"));
        assert_eq!(e.message.as_deref(), Some("\u{fffd}"));
        assert_eq!(error_fields(b""), ErrorFields::default());
    }

    #[test]
    fn cstrings() {
        assert_eq!(two_cstrings(b"noname"), None);
        assert_eq!(
            two_cstrings(b"s\0SELECT\0x"),
            Some((&b"s"[..], &b"SELECT"[..]))
        );
        assert_eq!(two_cstrings(b"s\0tail"), Some((&b"s"[..], &b"tail"[..])));
        assert_eq!(rstrip_nul(b"a\0\0"), b"a");
        assert_eq!(rstrip_nul(b"\0"), b"");
    }
}
