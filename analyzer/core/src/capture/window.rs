//! The read-ahead window over the file (capture/formats.py's _Buffer): `need(n)` makes n
//! bytes available at `pos`, refilling one reused buffer, so memory does not grow with the
//! file. Where a refill happens decides where the reference's batches end, so the window's
//! size and refill rule are the reference's exactly.

use std::fs::File;
use std::io::{Cursor, Read};

use super::error::StreamFault;
use super::gzip::{read_full, GzipStream};
use super::stream::Stream;

/// Bytes per read; the buffer holds twice that (larger was measured no faster).
pub const BLOCK: usize = 1 << 17;

/// Where the bytes come from: the file itself or its decompressed stream; or bytes in
/// memory, read as a file's would be (Capture::from_bytes).
pub(crate) enum Source {
    Plain(File),
    Gzip(Box<GzipStream<File>>),
    Bytes(Cursor<Vec<u8>>),
    GzipBytes(Box<GzipStream<Cursor<Vec<u8>>>>),
    /// A pipe (standard input), plain or gzipped.
    Stream(Box<Stream>),
    GzipStream(Box<GzipStream<Stream>>),
}

impl Source {
    /// What the source has now, up to buf.len() bytes: a plain file fills the buffer (as one
    /// read of a regular file does), a gzip stream gives at most one step's output.
    pub(crate) fn read_some(&mut self, buf: &mut [u8]) -> Result<usize, StreamFault> {
        match self {
            Source::Plain(f) => read_full(f, buf).map_err(|e| StreamFault::io(&e)),
            Source::Gzip(g) => g.read_some(buf),
            Source::Bytes(c) => read_full(c, buf).map_err(|e| StreamFault::io(&e)),
            Source::GzipBytes(g) => g.read_some(buf),
            // live: what the pipe has now; otherwise a file's whole refill
            Source::Stream(s) if s.live => s.read(buf).map_err(|e| StreamFault::io(&e)),
            Source::Stream(s) => read_full(s.as_mut(), buf).map_err(|e| StreamFault::io(&e)),
            Source::GzipStream(g) => g.read_some(buf),
        }
    }

    /// Whether the source ended because it was told to stop (a pipe on SIGINT).
    pub(crate) fn stopped(&self) -> bool {
        match self {
            Source::Stream(s) => s.stopped(),
            Source::GzipStream(g) => g.inner().stopped(),
            _ => false,
        }
    }
}

pub(crate) struct Window {
    src: Source,
    buf: Vec<u8>,
    /// Valid bytes in buf.
    len: usize,
    pub(crate) pos: usize,
    /// File offset of buf[0].
    base: u64,
    /// The stream broke during a refill; reads stop.
    pub(crate) fault: Option<StreamFault>,
    /// Refills so far: a batch of the reference ends at each.
    pub(crate) refills: u64,
}

impl Window {
    /// A window at file offset `base`, holding `head` (bytes already read) first.
    pub(crate) fn new(src: Source, base: u64, head: &[u8]) -> Self {
        let mut buf = vec![0u8; 2 * BLOCK];
        let n = head.len().min(buf.len());
        if let (Some(d), Some(s)) = (buf.get_mut(..n), head.get(..n)) {
            d.copy_from_slice(s);
        }
        Window {
            src,
            buf,
            len: n,
            pos: 0,
            base,
            fault: None,
            refills: 0,
        }
    }

    /// Whether n bytes are available at pos, reading more when they are not (the unread
    /// tail moves to the front; the buffer grows to n + BLOCK when n needs it).
    pub(crate) fn need(&mut self, n: usize) -> bool {
        let have = self.len - self.pos;
        if have >= n {
            return true;
        }
        self.refills += 1;
        self.buf.copy_within(self.pos..self.len, 0);
        self.base += self.pos as u64;
        self.pos = 0;
        self.len = have;
        if n.saturating_add(BLOCK) > self.buf.len() {
            self.buf.resize(n.saturating_add(BLOCK), 0);
        }
        while self.len < n {
            let space = self.buf.get_mut(self.len..).unwrap_or(&mut []);
            match self.src.read_some(space) {
                Ok(0) => break,
                Ok(k) => self.len += k,
                Err(f) => {
                    self.fault = Some(f);
                    break;
                }
            }
        }
        self.len >= n
    }

    /// Whether reading ended because the source was told to stop.
    pub(crate) fn stopped(&self) -> bool {
        self.src.stopped()
    }

    /// File offset of pos.
    pub(crate) fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Unread bytes in the window (no read).
    pub(crate) fn available(&self) -> usize {
        self.len - self.pos
    }

    /// The unread bytes, from pos on.
    pub(crate) fn rest(&self) -> &[u8] {
        self.buf.get(self.pos..self.len).unwrap_or(&[])
    }

    /// buf[pos + from .. pos + to], empty when out of the window.
    pub(crate) fn at(&self, from: usize, to: usize) -> &[u8] {
        self.rest().get(from..to).unwrap_or(&[])
    }

    /// buf[from..to] by absolute index (valid until the next `need`), empty when outside.
    pub(crate) fn abs(&self, from: usize, to: usize) -> &[u8] {
        self.buf
            .get(..self.len)
            .and_then(|b| b.get(from..to))
            .unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(data: &[u8]) -> Window {
        Window::new(Source::Bytes(Cursor::new(data.to_vec())), 0, &[])
    }

    #[test]
    fn need_keeps_the_file_bytes_at_offset() {
        let data: Vec<u8> = (0..(5 * BLOCK + 77)).map(|i| (i * 7 % 251) as u8).collect();
        let mut w = window(&data);
        let mut steps = [1usize, 16, 1500, BLOCK - 7, 2 * BLOCK + 3, 5 * BLOCK]
            .iter()
            .cycle();
        loop {
            let n = *steps.next().unwrap_or(&1);
            if !w.need(n) {
                assert_eq!(w.rest(), &data[w.offset() as usize..]);
                break;
            }
            let at = w.offset() as usize;
            assert_eq!(w.at(0, n), &data[at..at + n]);
            w.pos += n / 2 + 1;
        }
        assert!(w.fault.is_none());
    }

    #[test]
    fn a_window_is_two_blocks_unless_a_need_is_larger() {
        let data = vec![1u8; 8 * BLOCK];
        let mut w = window(&data);
        assert!(w.need(10));
        assert_eq!(w.available(), 2 * BLOCK);
        w.pos = 2 * BLOCK - 5;
        assert!(w.need(BLOCK));
        assert_eq!(
            (w.available(), w.offset()),
            (2 * BLOCK, 2 * BLOCK as u64 - 5)
        );
        w.pos = 2 * BLOCK - 5;
        assert!(w.need(2 * BLOCK));
        assert_eq!(w.available(), 3 * BLOCK);
        assert_eq!(w.refills, 3);
    }
}
