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

/// A TLS stream walked by its 5-byte record headers (content type, version, length), bodies
/// skipped and never read. A record is reported when its last byte comes, as tshark shows it
/// in the frame that completes it. A header that cannot be one (a length past MAX_RECORD, a
/// version not 3.x) or a gap ends the walk: boundaries can no longer be known.
#[derive(Debug, Default)]
pub struct RecordWalk {
    head: [u8; 5],
    have: usize,
    /// body bytes of the current record still to come
    body: usize,
    dead: bool,
}

impl RecordWalk {
    /// Walk `data`, calling `done` with the content type of each record it completes.
    pub fn feed(&mut self, data: &[u8], mut done: impl FnMut(u8)) {
        let mut pos = 0;
        while pos < data.len() && !self.dead {
            if self.have == self.head.len() {
                let take = self.body.min(data.len() - pos);
                self.body -= take;
                pos += take;
                if self.body == 0 {
                    done(self.head[0]);
                    self.have = 0;
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
                    done(self.head[0]);
                    self.have = 0;
                }
            }
        }
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
            w.feed(&stream[at..c], |t| got.push(t));
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
        w.feed(&record(22, 4), |t| got.push(t));
        assert!(got.is_empty());
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
