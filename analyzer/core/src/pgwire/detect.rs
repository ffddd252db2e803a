//! Whether a connection whose start the capture did not show is PostgreSQL: proof, not a
//! guess.
//!
//! Its bytes are decoded as they come, but the connection is taken as PostgreSQL only once
//! the two directions together show the protocol's order: a request answered by its kind of
//! response (a Query by a RowDescription, CommandComplete, ErrorResponse...; a Parse by
//! ParseComplete) at the start of the server's next segment, every message of both
//! directions well framed and of the shape its type allows (shape.rs), and then a
//! ReadyForQuery (5 bytes, status I, T or E) closing that cycle, or a second request answered
//! (a short snapshot length keeps only each segment's first bytes, and with them the
//! ReadyForQuery is lost). Until then nothing is reported of it; at
//! the end, a connection without that proof is not PostgreSQL as far as the capture shows.
//!
//! The roles are those TCP gave (the handshake, or the ports): a frontend's bytes are read as a
//! frontend's, never swapped.
//!
//! Other protocols are recognised where a segment starts: a TLS record header (content type
//! 20-24, version 3.0-3.4, a length a record can have, followed by the next record or the
//! segment's end), an HTTP request or status line, BGP's 16-byte marker, SSH's banner.

use serde::Serialize;

/// A TLS record is at most 2^14 bytes of plaintext, plus what encryption adds.
const MAX_TLS_RECORD: usize = (1 << 14) + 2048;
/// BGP messages are at least 19 and at most 4,096 bytes (RFC 4271; 65,535 with RFC 8654).
const BGP_MIN: usize = 19;
/// HTTP/1 methods (RFC 9110 and WebDAV's common ones).
const HTTP_METHODS: [&[u8]; 12] = [
    b"GET",
    b"POST",
    b"PUT",
    b"HEAD",
    b"DELETE",
    b"OPTIONS",
    b"PATCH",
    b"CONNECT",
    b"TRACE",
    b"PROPFIND",
    b"MKCOL",
    b"PRI",
];

/// Another protocol, recognised at the start of a segment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OtherProtocol {
    /// "TLS", "HTTP", "BGP" or "SSH".
    pub protocol: &'static str,
    /// What was recognised, as text: the record's content type and version, the request or
    /// status line, BGP's message type, SSH's banner (at most 80 characters).
    pub seen: String,
}

/// The protocol `buf` (the start of a segment) begins with, when it is one of these.
pub fn other_protocol(buf: &[u8]) -> Option<OtherProtocol> {
    tls(buf)
        .or_else(|| http(buf))
        .or_else(|| bgp(buf))
        .or_else(|| ssh(buf))
}

fn tls_header(buf: &[u8], at: usize) -> Option<(u8, u8, usize)> {
    let h = buf.get(at..at.checked_add(5)?)?;
    let (kind, major, minor) = (h[0], h[1], h[2]);
    let len = usize::from(u16::from_be_bytes([h[3], h[4]]));
    ((20..=24).contains(&kind) && major == 3 && minor <= 4 && (1..=MAX_TLS_RECORD).contains(&len))
        .then_some((kind, minor, len))
}

/// A TLS record header, and after its record either the next header or the segment's end
/// (a record may continue into the next segment only when it is the segment's last).
fn tls(buf: &[u8]) -> Option<OtherProtocol> {
    let (kind, minor, len) = tls_header(buf, 0)?;
    let next = 5 + len;
    if next < buf.len() && tls_header(buf, next).is_none() {
        return None;
    }
    let name = match kind {
        20 => "ChangeCipherSpec",
        21 => "Alert",
        22 => "Handshake",
        23 => "ApplicationData",
        _ => "Heartbeat",
    };
    Some(OtherProtocol {
        protocol: "TLS",
        seen: format!("a {name} record (content type {kind}, version 3.{minor}, {len} bytes)"),
    })
}

/// The first line, when it ends within the buffer and is printable text.
fn first_line(buf: &[u8]) -> Option<&[u8]> {
    let end = buf.windows(2).position(|w| w == b"\r\n")?;
    let line = buf.get(..end)?;
    line.iter()
        .all(|&c| (0x20..0x7f).contains(&c) || c == b'\t')
        .then_some(line)
}

fn clip(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(line);
    match text.char_indices().nth(80) {
        Some((at, _)) => format!("{}…", text.get(..at).unwrap_or(&text)),
        None => text.into_owned(),
    }
}

/// A request line (method, target, HTTP/1.x or HTTP/2.0) or a status line (HTTP/1.x, code).
fn http(buf: &[u8]) -> Option<OtherProtocol> {
    let line = first_line(buf)?;
    let words: Vec<&[u8]> = line.split(|&c| c == b' ').collect();
    let request = words.len() == 3
        && HTTP_METHODS.contains(&words[0])
        && (words[2].starts_with(b"HTTP/1.") || words[2] == b"HTTP/2.0");
    let status = words.len() >= 2
        && words[0].starts_with(b"HTTP/")
        && words[1].len() == 3
        && words[1].iter().all(u8::is_ascii_digit);
    (request || status).then(|| OtherProtocol {
        protocol: "HTTP",
        seen: format!("\"{}\"", clip(line)),
    })
}

/// BGP's marker: 16 bytes of 0xFF, then a length and a message type 1-5.
fn bgp(buf: &[u8]) -> Option<OtherProtocol> {
    let head = buf.get(..19)?;
    if head[..16].iter().any(|&b| b != 0xFF) {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([head[16], head[17]]));
    let name = match head[18] {
        1 => "OPEN",
        2 => "UPDATE",
        3 => "NOTIFICATION",
        4 => "KEEPALIVE",
        5 => "ROUTE-REFRESH",
        _ => return None,
    };
    (len >= BGP_MIN).then(|| OtherProtocol {
        protocol: "BGP",
        seen: format!("a {name} message ({len} bytes)"),
    })
}

/// SSH's identification string (RFC 4253): "SSH-2.0-..." or "SSH-1.99-...".
fn ssh(buf: &[u8]) -> Option<OtherProtocol> {
    if !(buf.starts_with(b"SSH-2.0-") || buf.starts_with(b"SSH-1.99-")) {
        return None;
    }
    let line = first_line(buf).unwrap_or(buf.get(..buf.len().min(80)).unwrap_or(buf));
    Some(OtherProtocol {
        protocol: "SSH",
        seen: format!("\"{}\"", clip(line)),
    })
}

/// The first backend message a request of type `request` draws (asynchronous messages
/// aside): Some(true) when `response` is one, Some(false) when it cannot be; None for a
/// request that draws nothing to judge by (Flush, Terminate, CopyData).
pub fn draws(request: u8, response: u8) -> Option<bool> {
    Some(answers(request)?.contains(&response))
}

/// The kinds of first answer a request draws; None for one that draws nothing to judge by.
fn answers(request: u8) -> Option<&'static [u8]> {
    Some(match request {
        b'Q' => b"TCEIGHW",
        b'P' => b"1E",
        b'B' => b"2E",
        b'D' => b"tTnE",
        b'E' => b"DCIsEGHW",
        b'C' => b"3E",
        b'S' => b"ZE",
        b'F' => b"VE",
        b'p' => b"RE",
        b'c' | b'f' => b"CE",
        _ => return None,
    })
}

/// Messages a backend may send at any time: they answer nothing.
pub fn asynchronous(t: u8) -> bool {
    matches!(t, b'N' | b'S' | b'A')
}

/// A request answered by its kind of response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Exchange {
    pub request: u8,
    pub request_frame: u64,
    pub response: u8,
    pub response_frame: u64,
}

/// What a connection seen mid-stream has shown so far.
///
/// A request is judged by the segments: a client writes its request (a Query; an extended
/// batch from its Parse) and waits, the server reads it and writes its answer, so the
/// backend's next segment after the frontend's starts with the answer's first message.
/// That message, at the segment's start (after asynchronous ones), must be of the kinds the
/// request draws. A segment that starts inside a message is no answer to judge (the tail of
/// an earlier one, or bytes the capture cut).
#[derive(Debug, Default)]
pub struct Evidence {
    /// The request leading the frontend's last segment, not judged yet.
    lead: Option<(u8, u64)>,
    /// The request the backend's current segment may answer, until its first message.
    answering: Option<(u8, u64)>,
    /// Only asynchronous messages led the backend's segment so far.
    after_async: bool,
    /// An exchange since the last ReadyForQuery.
    open: bool,
    pub first: Option<Exchange>,
    pub exchanges: u32,
    /// Requests answered by a message they never draw.
    pub misfits: u32,
    /// The ReadyForQuery that closed a cycle after an exchange.
    pub closed: Option<u64>,
    /// Well-formed messages per side (frontend, backend).
    pub messages: [u64; 2],
}

impl Evidence {
    /// A frontend message; `leads`: it starts the segment.
    pub fn frontend(&mut self, t: u8, frame: u64, leads: bool) {
        self.messages[0] += 1;
        if leads && answers(t).is_some() {
            self.lead = Some((t, frame));
        }
    }

    /// The backend's next segment begins: it may answer the frontend's last request.
    pub fn backend_segment(&mut self) {
        self.answering = self.lead.take();
        self.after_async = false;
    }

    /// A backend message; `leads`: it starts its segment (or follows only asynchronous
    /// messages there).
    pub fn backend(&mut self, t: u8, frame: u64, leads: bool) {
        self.messages[1] += 1;
        let leads = leads || self.after_async;
        self.after_async = false;
        if let Some((request, request_frame)) = self.answering.take() {
            if leads && asynchronous(t) {
                self.answering = Some((request, request_frame));
                self.after_async = true;
            } else if leads && draws(request, t) == Some(true) {
                self.exchanges += 1;
                self.open = true;
                self.first.get_or_insert(Exchange {
                    request,
                    request_frame,
                    response: t,
                    response_frame: frame,
                });
            } else if leads {
                self.misfits += 1;
            }
        }
        if t == b'Z' && self.open {
            self.closed.get_or_insert(frame);
            self.open = false;
        }
    }

    /// A request answered and its cycle closed, or two requests answered.
    pub fn proven(&self) -> bool {
        self.exchanges >= 2 || (self.exchanges >= 1 && self.closed.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_records_need_a_plausible_header_and_their_successor() {
        let mut two = vec![23, 3, 3, 0, 4, 1, 2, 3, 4, 23, 3, 3, 0, 2, 9, 9];
        assert_eq!(other_protocol(&two).map(|o| o.protocol), Some("TLS"));
        two[9] = 0x51; // not a record after the first: not TLS
        assert_eq!(other_protocol(&two), None);
        // a record continuing past the segment
        let cut = [22, 3, 1, 0x02, 0x00, 1, 0, 1, 0xfc];
        assert!(other_protocol(&cut).is_some_and(|o| o.seen.contains("Handshake")));
        assert_eq!(other_protocol(&[23, 3, 9, 0, 4, 0, 0, 0, 0]), None);
        assert_eq!(other_protocol(&[23, 3, 3, 0x48, 0x01]), None);
    }

    #[test]
    fn http_lines() {
        let req = other_protocol(b"GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(
            req.map(|o| (o.protocol, o.seen)),
            Some(("HTTP", "\"GET /index.html HTTP/1.1\"".into()))
        );
        assert!(other_protocol(b"HTTP/1.1 200 OK\r\n").is_some());
        assert!(other_protocol(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").is_some());
        assert_eq!(other_protocol(b"GET /index.html HTTP/1.1"), None); // no line end yet
        assert_eq!(other_protocol(b"Q\0\0\0\x0dGET / HTTP/1.1\r\n"), None);
    }

    #[test]
    fn bgp_and_ssh() {
        let mut open = vec![0xFF; 16];
        open.extend([0, 29, 1]);
        assert!(other_protocol(&open).is_some_and(|o| o.seen == "a OPEN message (29 bytes)"));
        open[18] = 9;
        assert_eq!(other_protocol(&open), None);
        assert!(other_protocol(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")
            .is_some_and(|o| o.protocol == "SSH"));
        assert_eq!(other_protocol(b"SSH-3.0-x\r\n"), None);
    }

    #[test]
    fn a_query_answered_and_closed_is_proof() {
        let mut e = Evidence::default();
        e.frontend(b'Q', 1, true);
        e.backend_segment();
        assert!(!e.proven());
        e.backend(b'T', 2, true);
        e.backend(b'D', 2, false);
        assert!(!e.proven());
        e.backend(b'C', 2, false);
        e.backend(b'Z', 2, false);
        assert!(e.proven());
        assert_eq!(
            e.first,
            Some(Exchange {
                request: b'Q',
                request_frame: 1,
                response: b'T',
                response_frame: 2
            })
        );
        assert_eq!(e.closed, Some(2));
    }

    #[test]
    fn two_requests_answered_prove_it_without_a_ready_for_query() {
        // a short snapshot length: each segment's first bytes only
        let mut e = Evidence::default();
        for (i, (ask, answer)) in [(b'Q', b'C'), (b'P', b'1')].into_iter().enumerate() {
            e.frontend(ask, 2 * i as u64, true);
            e.backend_segment();
            e.backend(answer, 2 * i as u64 + 1, true);
        }
        assert!(e.proven() && e.closed.is_none());
    }

    #[test]
    fn answers_that_do_not_fit_or_do_not_lead_prove_nothing() {
        let mut e = Evidence::default();
        e.frontend(b'Q', 1, true);
        e.backend_segment();
        e.backend(b'1', 2, true); // ParseComplete answers a Parse, never a Query
        e.backend(b'Z', 2, false);
        assert!(!e.proven());
        assert_eq!((e.exchanges, e.misfits, e.closed), (0, 1, None));
        // the backend's segment starts inside a message: its first whole one answers nothing
        let mut e = Evidence::default();
        e.frontend(b'Q', 1, true);
        e.backend_segment();
        e.backend(b'C', 2, false);
        e.backend(b'Z', 2, false);
        assert_eq!((e.exchanges, e.misfits), (0, 0));
        // a request not leading its segment is not judged
        let mut e = Evidence::default();
        e.frontend(b'Q', 1, false);
        e.backend_segment();
        e.backend(b'T', 2, true);
        assert_eq!(e.exchanges, 0);
    }

    #[test]
    fn notices_before_the_answer_are_passed_over() {
        let mut e = Evidence::default();
        for t in *b"PBDES" {
            e.frontend(t, 2, t == b'P');
        }
        e.backend_segment();
        e.backend(b'N', 3, true);
        e.backend(b'1', 3, false);
        for t in *b"2TDCZ" {
            e.backend(t, 3, false);
        }
        assert!(e.proven());
        assert_eq!(e.first.map(|x| (x.request, x.response)), Some((b'P', b'1')));
    }
}
