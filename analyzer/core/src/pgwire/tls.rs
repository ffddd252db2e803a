//! A TLS ClientHello as a connection's first bytes: PostgreSQL 17's direct TLS. And the record
//! headers of a TLS stream, for a diagram's names of its segments.
//!
//! With `sslnegotiation=direct` a PostgreSQL 17 client skips the SSLRequest and starts TLS at
//! once, offering ALPN "postgresql" (the server requires it). Only the record's plaintext
//! header and the ClientHello are read, never anything encrypted.

use super::messages::be16;

const HANDSHAKE: u8 = 0x16;
const CLIENT_HELLO: u8 = 0x01;
const ALPN: u16 = 0x0010;

/// What the first bytes say of a ClientHello's ALPN list.
#[derive(Debug, PartialEq, Eq)]
pub enum Alpn<'a> {
    /// The record is not complete yet.
    NeedMore,
    /// Not a ClientHello record.
    NotTls,
    /// The names offered (none: an empty list), each cut where the handshake ends.
    List(Vec<&'a [u8]>),
}

/// A TLS handshake record header (content type 22, version 3.x).
pub fn looks_like_tls(buf: &[u8]) -> bool {
    matches!(buf, [HANDSHAKE, 3, minor, ..] if *minor <= 4)
}

/// The ALPN protocol names a ClientHello at buf[0] offers.
pub fn client_hello_alpn(buf: &[u8]) -> Alpn<'_> {
    if buf.len() < 3 {
        return match buf.first() {
            None | Some(&HANDSHAKE) => Alpn::NeedMore,
            _ => Alpn::NotTls,
        };
    }
    if !looks_like_tls(buf) {
        return Alpn::NotTls;
    }
    let Some(reclen) = be16(buf, 3) else {
        return Alpn::NeedMore;
    };
    let Some(hs) = buf.get(5..5 + usize::from(reclen)) else {
        return Alpn::NeedMore;
    };
    if hs.len() < 4 || hs.first() != Some(&CLIENT_HELLO) {
        return Alpn::NotTls;
    }
    extensions(hs).unwrap_or(Alpn::NotTls)
}

/// The ALPN list of a handshake message holding a ClientHello; None where the reference's
/// reads would fail (an index or an unpack past the end: not TLS).
fn extensions(hs: &[u8]) -> Option<Alpn<'_>> {
    // version(2) random(32), then session id, cipher suites, compression methods
    let mut i = 4 + 2 + 32;
    i += 1 + usize::from(*hs.get(i)?);
    i += 2 + usize::from(be16(hs, i)?);
    i += 1 + usize::from(*hs.get(i)?);
    if i == hs.len() {
        return Some(Alpn::List(Vec::new())); // no extensions
    }
    let ext_len = usize::from(be16(hs, i)?);
    i += 2;
    let end = hs.len().min(i + ext_len);
    while i + 4 <= end {
        let etype = be16(hs, i)?;
        let elen = usize::from(be16(hs, i + 2)?);
        i += 4;
        if etype == ALPN {
            let mut names = Vec::new();
            let stop = end.min(i + elen);
            let mut j = i + 2;
            while j < stop {
                let n = usize::from(*hs.get(j)?);
                let from = (j + 1).min(hs.len());
                names.push(hs.get(from..(j + 1 + n).min(hs.len()))?);
                j += 1 + n;
            }
            return Some(Alpn::List(names));
        }
        i += elen;
    }
    Some(Alpn::List(Vec::new()))
}

/// A name as `bytes.decode("ascii", "replace")` reads it.
pub fn ascii_text(name: &[u8]) -> String {
    name.iter()
        .map(|&b| if b < 0x80 { char::from(b) } else { '\u{fffd}' })
        .collect()
}

/// A ClientHello record offering these ALPN names (None: no ALPN extension), after an
/// extension of `pad` bytes.
/// The largest record a peer may send: 2^14 bytes of plaintext plus 2,048 of expansion.
const MAX_RECORD: usize = (1 << 14) + 2048;

/// A TLS record's name by its content type (the record header's, the "opaque type" of TLS
/// 1.3's encrypted records: ApplicationData).
pub fn record_name(content_type: u8) -> &'static str {
    match content_type {
        20 => "TLSChangeCipherSpec",
        21 => "TLSAlert",
        22 => "TLSHandshake",
        23 => "TLSApplicationData",
        24 => "TLSHeartbeat",
        _ => "TLSRecord",
    }
}

const CHANGE_CIPHER_SPEC: u8 = 20;
const SERVER_HELLO: u8 = 0x02;
const SUPPORTED_VERSIONS: u16 = 0x002b;
const KEY_SHARE: u16 = 0x0033;
/// RFC 8446 4.1.3: a ServerHello whose random is this value is a HelloRetryRequest.
const RETRY_RANDOM: [u8; 32] = [
    0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
    0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
];
/// A handshake message longer than this is not carried across records (a certificate chain
/// this long is not read; the walk stops naming messages).
const MAX_CARRY: usize = 1 << 16;

/// A plaintext handshake message a record completed: its type (RFC 8446 4, RFC 5246 7.4),
/// and what a ServerHello chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handshake {
    pub kind: u8,
    /// a ServerHello carrying RFC 8446's HelloRetryRequest random: the server asks the client
    /// to send its ClientHello again (with a key share of another group)
    pub retry: bool,
    /// a ServerHello's version: its supported_versions extension's, else its legacy field
    pub version: Option<u16>,
    /// a ServerHello's cipher suite
    pub cipher: Option<u16>,
    /// a ServerHello's key share group (a HelloRetryRequest's: the group it asks for)
    pub group: Option<u16>,
}

/// A handshake message's name by its type; None for a type without one.
pub fn handshake_name(h: &Handshake) -> Option<&'static str> {
    Some(match h.kind {
        0 => "HelloRequest",
        1 => "ClientHello",
        2 if h.retry => "HelloRetryRequest",
        2 => "ServerHello",
        4 => "NewSessionTicket",
        5 => "EndOfEarlyData",
        8 => "EncryptedExtensions",
        11 => "Certificate",
        12 => "ServerKeyExchange",
        13 => "CertificateRequest",
        14 => "ServerHelloDone",
        15 => "CertificateVerify",
        16 => "ClientKeyExchange",
        20 => "Finished",
        24 => "KeyUpdate",
        _ => return None,
    })
}

/// A version's name: "TLS 1.3" for 0x0304.
pub fn version_name(v: u16) -> String {
    match v {
        0x0300 => "SSL 3.0".to_string(),
        0x0301..=0x0304 => format!("TLS 1.{}", v - 0x0301),
        _ => format!("version 0x{v:04x}"),
    }
}

/// Key exchange groups by name (RFC 8446 4.2.7); others by number.
pub fn group_name(g: u16) -> String {
    match g {
        0x0017 => "secp256r1".to_string(),
        0x0018 => "secp384r1".to_string(),
        0x0019 => "secp521r1".to_string(),
        0x001d => "x25519".to_string(),
        0x001e => "x448".to_string(),
        _ => format!("group 0x{g:04x}"),
    }
}

/// TLS 1.3's cipher suites by name (RFC 8446 B.4); others by number.
pub fn cipher_name(c: u16) -> String {
    match c {
        0x1301 => "TLS_AES_128_GCM_SHA256".to_string(),
        0x1302 => "TLS_AES_256_GCM_SHA384".to_string(),
        0x1303 => "TLS_CHACHA20_POLY1305_SHA256".to_string(),
        0x1304 => "TLS_AES_128_CCM_SHA256".to_string(),
        0x1305 => "TLS_AES_128_CCM_8_SHA256".to_string(),
        _ => format!("cipher suite 0x{c:04x}"),
    }
}

/// A handshake message (type, 3-byte length, body) read for what a diagram names.
fn handshake(kind: u8, body: &[u8]) -> Handshake {
    let mut h = Handshake {
        kind,
        retry: false,
        version: None,
        cipher: None,
        group: None,
    };
    if kind != SERVER_HELLO {
        return h;
    }
    h.version = be16(body, 0);
    h.retry = body.get(2..34) == Some(&RETRY_RANDOM[..]);
    // legacy_session_id, then the cipher suite, compression, extensions
    let Some(sid) = body.get(34) else {
        return h;
    };
    let mut i = 35 + usize::from(*sid);
    h.cipher = be16(body, i);
    i += 3;
    let Some(ext_len) = be16(body, i) else {
        return h;
    };
    i += 2;
    let end = body.len().min(i + usize::from(ext_len));
    while i + 4 <= end {
        let (Some(etype), Some(elen)) = (be16(body, i), be16(body, i + 2)) else {
            break;
        };
        // both carry their value first: the version chosen, the group (of the share)
        if etype == SUPPORTED_VERSIONS {
            h.version = be16(body, i + 4).or(h.version);
        } else if etype == KEY_SHARE {
            h.group = be16(body, i + 4);
        }
        i += 4 + usize::from(elen);
    }
    h
}

/// The handshake messages in `buf` that are complete, and how many bytes they took.
fn messages(buf: &[u8]) -> (Vec<Handshake>, usize) {
    let mut out = Vec::new();
    let mut at = 0;
    while let (Some(&kind), Some(len)) = (buf.get(at), buf.get(at + 1..at + 4)) {
        let len = len.iter().fold(0usize, |n, &b| n << 8 | usize::from(b));
        let Some(body) = buf.get(at + 4..at + 4 + len) else {
            break;
        };
        out.push(handshake(kind, body));
        at += 4 + len;
    }
    (out, at)
}

/// A TLS stream walked by its 5-byte record headers (content type, version, length). Bodies
/// are skipped, but for plaintext handshake records, whose messages are named (a ServerHello
/// read for its version and cipher suite): nothing encrypted is ever read. A record is
/// reported when its last byte comes, as tshark shows it in the frame that completes it. A
/// header that cannot be one (a length past MAX_RECORD, a version not 3.x) or a gap ends the
/// walk: boundaries can no longer be known.
#[derive(Debug, Default)]
pub struct RecordWalk {
    head: [u8; 5],
    have: usize,
    /// body bytes of the current record still to come
    body: usize,
    dead: bool,
    /// handshake bytes kept: the current handshake record's body after a message that runs
    /// on from an earlier record
    hs: Vec<u8>,
    /// this side sent ChangeCipherSpec: TLS 1.2 encrypts its handshake records from there
    /// (TLS 1.3 sends it for middleboxes and encrypts in application_data records)
    ccs: bool,
    /// a handshake message ran past MAX_CARRY: messages are no longer named
    lost: bool,
}

impl RecordWalk {
    /// Walk `data`, calling `done` with the content type of each record it completes and the
    /// plaintext handshake messages it completed (none for other records).
    pub fn feed(&mut self, data: &[u8], mut done: impl FnMut(u8, &[Handshake])) {
        let mut pos = 0;
        while pos < data.len() && !self.dead {
            if self.have == self.head.len() {
                let take = self.body.min(data.len() - pos);
                if self.head[0] == HANDSHAKE && !self.lost {
                    self.hs
                        .extend_from_slice(data.get(pos..pos + take).unwrap_or_default());
                }
                self.body -= take;
                pos += take;
                if self.body == 0 {
                    self.complete(&mut done);
                }
                continue;
            }
            let take = (self.head.len() - self.have).min(data.len() - pos);
            if let (Some(to), Some(from)) = (
                self.head.get_mut(self.have..self.have + take),
                data.get(pos..pos + take),
            ) {
                to.copy_from_slice(from);
            }
            self.have += take;
            pos += take;
            if self.have == self.head.len() {
                let len = usize::from(u16::from_be_bytes([self.head[3], self.head[4]]));
                if self.head[1] != 3 || len > MAX_RECORD {
                    self.dead = true;
                    return;
                }
                self.body = len;
                if len == 0 {
                    self.complete(&mut done);
                }
            }
        }
    }

    /// The current record's last byte came.
    fn complete(&mut self, done: &mut impl FnMut(u8, &[Handshake])) {
        self.have = 0;
        let kind = self.head[0];
        if kind == CHANGE_CIPHER_SPEC {
            self.ccs = true;
        }
        if kind != HANDSHAKE || self.lost {
            done(kind, &[]);
            return;
        }
        let (found, used) = messages(&self.hs);
        if self.ccs {
            // encrypted (TLS 1.2's Finished) unless it reads as whole named messages (TLS
            // 1.3's ServerHello after a HelloRetryRequest and the middlebox CCS)
            let whole = used == self.hs.len() && found.iter().all(|h| handshake_name(h).is_some());
            self.hs.clear();
            done(kind, if whole { &found } else { &[] });
            return;
        }
        self.hs.drain(..used);
        let carried = self.hs.get(1..4).map_or(0, |l| {
            4 + l.iter().fold(0usize, |n, &b| n << 8 | usize::from(b))
        });
        if carried > MAX_CARRY {
            self.hs = Vec::new();
            self.lost = true;
        }
        done(kind, &found);
    }

    /// Bytes the capture missed: record boundaries are lost.
    pub fn gap(&mut self) {
        self.dead = true;
    }
}

#[cfg(test)]
pub fn tests_hello(alpn: Option<&[&[u8]]>, pad: usize) -> Vec<u8> {
    let mut ext = Vec::new();
    ext.extend_from_slice(&[0x00, 0x0a]);
    ext.extend_from_slice(&(pad as u16).to_be_bytes());
    ext.extend(std::iter::repeat_n(0u8, pad));
    if let Some(names) = alpn {
        let list: Vec<u8> = names
            .iter()
            .flat_map(|n| [&[n.len() as u8][..], n].concat())
            .collect();
        ext.extend_from_slice(&ALPN.to_be_bytes());
        ext.extend_from_slice(&(list.len() as u16 + 2).to_be_bytes());
        ext.extend_from_slice(&(list.len() as u16).to_be_bytes());
        ext.extend(list);
    }
    let mut hello = vec![3, 3];
    hello.extend([0u8; 32]);
    hello.extend([0, 0, 2, 0x13, 1, 1, 0]);
    hello.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    hello.extend(ext);
    let mut hs = vec![1];
    hs.extend_from_slice(&(hello.len() as u32).to_be_bytes()[1..]);
    hs.extend(hello);
    let mut rec = vec![0x16, 3, 1];
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend(hs);
    rec
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(t: u8, len: usize) -> Vec<u8> {
        let mut v = vec![t, 3, 3];
        v.extend_from_slice(&(len as u16).to_be_bytes());
        v.extend(std::iter::repeat_n(0xaa, len));
        v
    }

    /// Records completed by each piece of `stream` cut at `cuts`.
    fn walk(stream: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
        let mut w = RecordWalk::default();
        let mut out = Vec::new();
        let mut at = 0;
        for &c in cuts.iter().chain(std::iter::once(&stream.len())) {
            let mut got = Vec::new();
            w.feed(&stream[at..c], |t, _| got.push(t));
            out.push(got);
            at = c;
        }
        out
    }

    #[test]
    fn records_are_named_where_they_end() {
        let stream = [
            record(22, 88),
            record(20, 1),
            record(23, 300),
            record(21, 0),
        ]
        .concat();
        assert_eq!(walk(&stream, &[]), [vec![22, 20, 23, 21]]);
        // cut inside the first header, inside the third body
        assert_eq!(
            walk(&stream, &[3, 93 + 6 + 100]),
            [vec![], vec![22, 20], vec![23, 21]]
        );
        // a byte at a time: each record once, in order
        let cuts: Vec<usize> = (1..stream.len()).collect();
        let all: Vec<u8> = walk(&stream, &cuts).concat();
        assert_eq!(all, [22, 20, 23, 21]);
        assert_eq!(record_name(23), "TLSApplicationData");
        assert_eq!(record_name(99), "TLSRecord");
    }

    #[test]
    fn a_header_that_cannot_be_one_or_a_gap_ends_the_walk() {
        let mut bad = record(23, 10);
        bad[1] = 7;
        let stream = [record(22, 4), bad, record(22, 4)].concat();
        assert_eq!(walk(&stream, &[]), [vec![22]]);
        let too_long = [vec![23, 3, 3, 0xff, 0xff], vec![0; 100]].concat();
        assert_eq!(walk(&too_long, &[]), [Vec::<u8>::new()]);
        let mut w = RecordWalk::default();
        w.gap();
        let mut got = Vec::new();
        w.feed(&record(22, 4), |t, _| got.push(t));
        assert!(got.is_empty());
    }

    /// A ServerHello handshake message: random, cipher suite, supported_versions.
    fn server_hello(random: [u8; 32], cipher: u16, version: u16) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend(random);
        body.extend([1, 0x55]); // a one-byte session id
        body.extend(cipher.to_be_bytes());
        body.push(0);
        let ext = [
            &SUPPORTED_VERSIONS.to_be_bytes()[..],
            &[0, 2],
            &version.to_be_bytes(),
            &KEY_SHARE.to_be_bytes(),
            &[0, 2, 0, 0x17],
        ]
        .concat();
        body.extend((ext.len() as u16).to_be_bytes());
        body.extend(ext);
        let mut m = vec![SERVER_HELLO];
        m.extend(&(body.len() as u32).to_be_bytes()[1..]);
        m.extend(body);
        m
    }

    fn hs_record(messages: &[Vec<u8>]) -> Vec<u8> {
        let body = messages.concat();
        let mut v = vec![HANDSHAKE, 3, 3];
        v.extend((body.len() as u16).to_be_bytes());
        v.extend(body);
        v
    }

    /// (record type, handshake names) completed over the stream cut at every byte.
    fn named(stream: &[u8]) -> Vec<(u8, Vec<String>)> {
        let mut w = RecordWalk::default();
        let mut out = Vec::new();
        for b in stream.chunks(1) {
            w.feed(b, |t, hs| {
                let names = hs
                    .iter()
                    .map(|h| {
                        let mut n = handshake_name(h).unwrap_or("?").to_string();
                        if let (Some(v), Some(c)) = (h.version, h.cipher) {
                            n += &format!(" {} {}", version_name(v), cipher_name(c));
                        }
                        if let Some(g) = h.group {
                            n += &format!(" {}", group_name(g));
                        }
                        n
                    })
                    .collect();
                out.push((t, names));
            });
        }
        out
    }

    #[test]
    fn handshake_messages_are_named_and_a_retry_told_apart() {
        let hello = tests_hello(None, 0);
        let retry = server_hello(RETRY_RANDOM, 0x1302, 0x0304);
        let ccs = record(CHANGE_CIPHER_SPEC, 1);
        let real = server_hello([7; 32], 0x1302, 0x0304);
        let got = named(&[hello.clone(), hs_record(&[retry]), ccs, hs_record(&[real])].concat());
        assert_eq!(
            got,
            [
                (22, vec!["ClientHello".to_string()]),
                (
                    22,
                    vec!["HelloRetryRequest TLS 1.3 TLS_AES_256_GCM_SHA384 secp256r1".to_string()]
                ),
                (20, vec![]),
                (
                    22,
                    vec!["ServerHello TLS 1.3 TLS_AES_256_GCM_SHA384 secp256r1".to_string()]
                ),
            ]
        );
    }

    #[test]
    fn a_message_across_records_is_named_where_it_ends_and_ciphertext_never() {
        // TLS 1.2: a ServerHello and a Certificate split over two records, ServerHelloDone
        let cert = [vec![11, 0, 0, 40], vec![0xab; 40]].concat();
        let done = vec![14, 0, 0, 0];
        let both = [server_hello([1; 32], 0xc02f, 0x0303), cert, done].concat();
        let (a, b) = both.split_at(both.len() - 20);
        let rec = |body: &[u8]| hs_record(&[body.to_vec()]);
        let got = named(&[rec(a), rec(b)].concat());
        let names: Vec<Vec<String>> = got.into_iter().map(|x| x.1).collect();
        assert_eq!(
            names,
            [
                vec!["ServerHello TLS 1.2 cipher suite 0xc02f secp256r1".to_string()],
                vec!["Certificate".to_string(), "ServerHelloDone".to_string()]
            ]
        );
        // after ChangeCipherSpec, TLS 1.2's Finished is encrypted: never named
        let sealed = [vec![0x9f, 0x00, 0x00], vec![0x31; 37]].concat();
        let got = named(&[record(CHANGE_CIPHER_SPEC, 1), rec(&sealed)].concat());
        assert_eq!(got, [(20, vec![]), (22, vec![])]);
        // a message longer than what is carried: no names from there on, records still walked
        let huge = [vec![11, 0x01, 0x10, 0x00], vec![0; 32_000]].concat();
        let stream = [
            rec(&huge[..16_000]),
            rec(&huge[16_000..32_000]),
            hs_record(&[vec![14, 0, 0, 0]]),
        ]
        .concat();
        let got = named(&stream);
        assert_eq!(got.len(), 3);
        assert!(got.iter().all(|x| x.1.is_empty()), "{got:?}");
    }

    #[test]
    fn a_cut_server_hello_never_panics() {
        let full = server_hello(RETRY_RANDOM, 0x1301, 0x0304);
        for n in 0..full.len() {
            let h = handshake(SERVER_HELLO, full.get(4..n).unwrap_or_default());
            assert!(h.version.is_none() || n >= 6, "{n}");
        }
        assert_eq!(handshake_name(&handshake(99, &[])), None);
        assert_eq!(version_name(0x0300), "SSL 3.0");
        assert_eq!(version_name(0x0301), "TLS 1.0");
        assert_eq!(version_name(0x7f1c), "version 0x7f1c");
        assert_eq!(group_name(0x001d), "x25519");
        assert_eq!(group_name(0x0100), "group 0x0100");
        assert_eq!(cipher_name(0x1303), "TLS_CHACHA20_POLY1305_SHA256");
    }

    #[test]
    fn alpn_names_and_prefixes() {
        let hello = tests_hello(Some(&[b"postgresql", b"x"]), 0);
        assert_eq!(
            client_hello_alpn(&hello),
            Alpn::List(vec![&b"postgresql"[..], b"x"])
        );
        for n in 0..hello.len() {
            assert_eq!(client_hello_alpn(&hello[..n]), Alpn::NeedMore, "{n}");
        }
        assert_eq!(client_hello_alpn(&tests_hello(None, 3)), Alpn::List(vec![]));
        assert_eq!(client_hello_alpn(b"\x17\x03\x03\x00\x10"), Alpn::NotTls);
        assert_eq!(
            client_hello_alpn(b"\x16\x03\x03\x00\x04\x02\x00\x00\x00"),
            Alpn::NotTls
        );
        assert_eq!(client_hello_alpn(b"GET / HTTP/1.1"), Alpn::NotTls);
        assert_eq!(ascii_text(b"p\xffs"), "p\u{fffd}s");
    }

    #[test]
    fn cut_records_never_panic() {
        let hello = tests_hello(Some(&[b"h2", b"postgresql"]), 10);
        for n in 5..90u16 {
            let mut cut = hello.clone();
            cut[3..5].copy_from_slice(&n.to_be_bytes());
            let _ = client_hello_alpn(&cut);
        }
    }
}
