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

/// The lengths a message of this type may have (its length field, which counts itself): the
/// types whose body is fixed have one, and any other is malformed framing, not that message (a
/// MySQL server greeting of 73 bytes starts `I 00 00 00 0a`: no EmptyQueryResponse is 10
/// bytes long). BackendKeyData's secret key is 4 bytes up to protocol 3.1, up to 256 from 3.2;
/// `minor` is the protocol minor version the startup asked for (None: not seen).
pub fn expected_length(role: Role, t: u8, minor: Option<u16>) -> Option<(i64, i64)> {
    match (role, t) {
        // EmptyQueryResponse, ParseComplete, BindComplete, CloseComplete, NoData,
        // PortalSuspended, CopyDone: no body
        (Role::Backend, b'I' | b'1' | b'2' | b'3' | b'n' | b's' | b'c') => Some((4, 4)),
        // ReadyForQuery: the transaction status byte
        (Role::Backend, b'Z') => Some((5, 5)),
        // BackendKeyData: the process id and the secret key
        (Role::Backend, b'K') => match minor {
            Some(0 | 1) => Some((12, 12)),
            _ => Some((12, 8 + 256)),
        },
        // Sync, Flush, Terminate, CopyDone
        (Role::Frontend, b'S' | b'H' | b'X' | b'c') => Some((4, 4)),
        _ => None,
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

/// The authentication method an authentication request asks for; None for AuthenticationOk
/// and for the continuations of a method already asked (GSS, SASL).
pub fn auth_method(code: u32) -> Option<Cow<'static, str>> {
    Some(Cow::Borrowed(match code {
        0 | 8 | 11 | 12 => return None,
        2 => "kerberos-v5",
        3 => "cleartext-password",
        5 => "md5",
        6 => "scm-credential",
        7 => "gss",
        9 => "sspi",
        10 => "sasl",
        _ => return Some(Cow::Owned(format!("code {code}"))),
    }))
}

/// A name the client or server sent about authentication (a SASL mechanism): at most this
/// many bytes kept.
pub const AUTH_NAME_CAP: usize = 64;

/// The NUL-terminated names of a list that ends with an empty one (AuthenticationSASL's
/// mechanisms): at most `max`, each cut at AUTH_NAME_CAP bytes.
pub fn name_list(b: &[u8], max: usize) -> Vec<String> {
    (b.split(|&c| c == 0))
        .take_while(|n| !n.is_empty())
        .take(max)
        .map(|n| decode(n.get(..AUTH_NAME_CAP).unwrap_or(n)))
        .collect()
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

/// The parameters of a StartupMessage body (after the protocol number), as
/// `startup_params(body)` reads them: pairs among the first 64 NUL-separated strings, in the
/// order first seen, the last value of each key winning.
pub fn startup_params(body: &[u8]) -> Vec<(String, String)> {
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
    let mut out: Vec<(String, String)> = Vec::new();
    for pair in items.chunks_exact(2).take(32) {
        let (Some(k), Some(v)) = (pair.first(), pair.get(1)) else {
            continue;
        };
        if k.is_empty() {
            break; // the list's terminator: what may follow is no parameter
        }
        let (k, v) = (lossy(k), decode(v));
        match out.iter_mut().find(|p| p.0 == *k) {
            Some(p) => p.1 = v,
            None => out.push((k.into_owned(), v)),
        }
    }
    out
}

/// The fields of an ErrorResponse or a NoticeResponse, by the letters the protocol's Error
/// and Notice Message Fields section gives them: the last of each letter. Unknown letters are
/// skipped (the protocol allows more to be added).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorFields {
    /// C: the SQLSTATE
    pub code: Option<String>,
    /// M: the primary message
    pub message: Option<String>,
    /// V: the severity, never localized (ERROR, FATAL, PANIC, WARNING, NOTICE, DEBUG, INFO,
    /// LOG); PostgreSQL 9.6 and later
    pub severity: Option<String>,
    /// D: detail
    pub detail: Option<String>,
    /// H: hint
    pub hint: Option<String>,
    /// P: a position in the query string, in characters from 1
    pub position: Option<String>,
    /// S: the severity as the server's language says it
    pub localized_severity: Option<String>,
    /// p and q: a position in an internally generated command, and that command
    pub internal_position: Option<String>,
    pub internal_query: Option<String>,
    /// W: the call stack (a PL/pgSQL function's line, an SQL function's statement)
    pub r#where: Option<String>,
    /// s, t, c, d, n: the object the error is about
    pub schema: Option<String>,
    pub table: Option<String>,
    pub column: Option<String>,
    pub data_type: Option<String>,
    pub constraint: Option<String>,
    /// F, L, R: where in PostgreSQL's source the error was raised
    pub file: Option<String>,
    pub line: Option<String>,
    pub routine: Option<String>,
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
            b'S' => &mut out.localized_severity,
            b'p' => &mut out.internal_position,
            b'q' => &mut out.internal_query,
            b'W' => &mut out.r#where,
            b's' => &mut out.schema,
            b't' => &mut out.table,
            b'c' => &mut out.column,
            b'd' => &mut out.data_type,
            b'n' => &mut out.constraint,
            b'F' => &mut out.file,
            b'L' => &mut out.line,
            b'R' => &mut out.routine,
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
        let value =
            |p: &[(String, String)], k: &str| p.iter().find(|e| e.0 == k).map(|e| e.1.clone());
        let mut body = b"user\0alice\0database\0shop\0user\0bob\0\0".to_vec();
        let p = startup_params(&body);
        assert_eq!(
            p,
            [
                ("user".into(), "bob".into()),
                ("database".into(), "shop".into())
            ]
        );
        body.clear();
        for i in 0..40 {
            body.extend_from_slice(format!("k{i}\0v{i}\0").as_bytes());
        }
        body.extend_from_slice(b"user\0late\0\0");
        let p = startup_params(&body);
        assert_eq!((p.len(), value(&p, "user")), (32, None)); // past the 64 strings read
                                                              // every parameter, as sent: options, replication, a GUC
        let body = b"user\0u\0options\0-c geqo=off\0replication\0database\0DateStyle\0ISO\0\0";
        let p = startup_params(body);
        assert_eq!(value(&p, "options").as_deref(), Some("-c geqo=off"));
        assert_eq!(value(&p, "replication").as_deref(), Some("database"));
        assert_eq!(p.len(), 4);
    }

    #[test]
    fn error_fields_every_letter() {
        let mut body = Vec::new();
        for (letter, value) in [
            ('S', "ERROR"),
            ('V', "ERROR"),
            ('C', "23503"),
            ('M', "m"),
            ('D', "d"),
            ('H', "h"),
            ('P', "7"),
            ('p', "3"),
            ('q', "SELECT 1"),
            ('W', "PL/pgSQL function f() line 3"),
            ('s', "public"),
            ('t', "orders"),
            ('c', "customer"),
            ('d', "int4"),
            ('n', "orders_customer_fkey"),
            ('F', "ri_triggers.c"),
            ('L', "2608"),
            ('R', "ri_ReportViolation"),
            ('Z', "a letter of a later protocol"),
        ] {
            body.push(letter as u8);
            body.extend_from_slice(value.as_bytes());
            body.push(0);
        }
        body.push(0);
        let e = error_fields(&body);
        let got = [
            &e.localized_severity,
            &e.severity,
            &e.code,
            &e.message,
            &e.detail,
            &e.hint,
            &e.position,
            &e.internal_position,
            &e.internal_query,
            &e.r#where,
            &e.schema,
            &e.table,
            &e.column,
            &e.data_type,
            &e.constraint,
            &e.file,
            &e.line,
            &e.routine,
        ];
        assert!(got.iter().all(|v| v.is_some()));
        assert_eq!(e.constraint.as_deref(), Some("orders_customer_fkey"));
        assert_eq!(e.line.as_deref(), Some("2608"));
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
