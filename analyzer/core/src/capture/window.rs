//! The read-ahead window over the file (capture/formats.py's _Buffer): `need(n)` makes n
//! bytes available at `pos`, refilling one reused buffer, so memory does not grow with the
//! file. Where a refill happens decides where the reference's batches end, so the window's
//! size and refill rule are the reference's exactly.
//!
//! A plain file is read by a thread of its own, a few chunks ahead ([`ReadAhead`]): the
//! kernel's copy out of the page cache was a third of the pass on a large capture, and it
//! runs beside the pass instead. The window then ends where the reference's would, inside
//! the chunk: the bytes past its end wait for the next refill.

use std::fs::File;
use std::io::{Cursor, Read};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender};

use super::error::StreamFault;
use super::gzip::{read_full, GzipStream};
use super::stream::Stream;

/// Bytes per read; the buffer holds twice that (larger was measured no faster).
pub const BLOCK: usize = 1 << 17;

/// Where the bytes come from: the file itself or its decompressed stream; or bytes in
/// memory, read as a file's would be (Capture::from_bytes).
pub(crate) enum Source {
    /// A plain file read ahead on a thread of its own.
    Ahead(ReadAhead),
    /// A plain file read where the window needs it (no thread to be had).
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
            // the window takes the read-ahead's chunks whole (Window::refill_ahead)
            Source::Ahead(_) => Ok(0),
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
    /// The window's end in buf: bytes past it are not handed out until the next refill.
    len: usize,
    /// Bytes of buf read from the source: past len only for a read-ahead.
    filled: usize,
    /// The window's size: two blocks, or a need's size and a block after a larger record.
    size: usize,
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
            filled: n,
            size: 2 * BLOCK,
            pos: 0,
            base,
            fault: None,
            refills: 0,
        }
    }

    /// Whether n bytes are available at pos, reading more when they are not: the window then
    /// starts at pos and is `size` bytes long (the size grows to n + BLOCK when n needs it).
    pub(crate) fn need(&mut self, n: usize) -> bool {
        if self.len - self.pos >= n {
            return true;
        }
        self.refills += 1;
        self.size = self.size.max(n.saturating_add(BLOCK));
        if matches!(self.src, Source::Ahead(_)) {
            self.refill_ahead();
        } else {
            self.refill(n);
        }
        self.len - self.pos >= n
    }

    /// The unread tail moves to the front and the source fills the buffer behind it.
    fn refill(&mut self, n: usize) {
        self.buf.copy_within(self.pos..self.len, 0);
        self.base += self.pos as u64;
        self.len -= self.pos;
        self.pos = 0;
        if self.size > self.buf.len() {
            self.buf.resize(self.size, 0);
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
        self.filled = self.len;
    }

    /// The read-ahead's chunks are taken until `size` bytes follow pos (or the file ends);
    /// the window ends there, as a refill of a buffer of that size would.
    fn refill_ahead(&mut self) {
        while self.filled - self.pos < self.size {
            let Source::Ahead(ahead) = &mut self.src else {
                break;
            };
            match ahead.chunks.recv() {
                Ok(Ok(chunk)) => self.take(chunk),
                Ok(Err(f)) => {
                    self.fault = Some(f);
                    break;
                }
                Err(_) => break, // the file ended
            }
        }
        self.len = self.filled.min(self.pos.saturating_add(self.size));
    }

    /// A chunk of the read-ahead becomes the buffer, the unread tail copied into the room
    /// before its bytes; the old buffer goes back to the reader. A tail too large for the
    /// room (after a record larger than a block) is kept, and the chunk appended to it.
    fn take(&mut self, mut chunk: Vec<u8>) {
        let tail = self.filled - self.pos;
        let offset = self.offset();
        let old = if tail <= ROOM {
            let at = ROOM - tail;
            if let (Some(d), Some(s)) =
                (chunk.get_mut(at..ROOM), self.buf.get(self.pos..self.filled))
            {
                d.copy_from_slice(s);
            }
            self.pos = at;
            std::mem::replace(&mut self.buf, chunk)
        } else {
            self.buf.copy_within(self.pos..self.filled, 0);
            self.buf.truncate(tail);
            self.buf.extend_from_slice(chunk.get(ROOM..).unwrap_or(&[]));
            self.pos = 0;
            chunk
        };
        // a file offset less the room can be "negative" near the start: offset() adds it back
        self.base = offset.wrapping_sub(self.pos as u64);
        self.filled = self.buf.len();
        if let Source::Ahead(ahead) = &self.src {
            let _ = ahead.spare.send(old); // the reader is gone: the buffer is dropped
        }
    }

    /// Whether reading ended because the source was told to stop.
    pub(crate) fn stopped(&self) -> bool {
        self.src.stopped()
    }

    /// File offset of pos.
    pub(crate) fn offset(&self) -> u64 {
        self.base.wrapping_add(self.pos as u64)
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

/// Bytes per chunk of the read-ahead, the room before each for the window's unread tail
/// (less than a window), and chunks queued ahead of the pass: a few MiB in all.
const CHUNK: usize = 1 << 19;
const ROOM: usize = 2 * BLOCK;
const QUEUED: usize = 1;

/// A file read on a thread of its own, in chunks that each leave ROOM bytes free in front.
/// Chunks the window is done with come back to be filled again.
pub(crate) struct ReadAhead {
    chunks: Receiver<Result<Vec<u8>, StreamFault>>,
    spare: Sender<Vec<u8>>,
}

impl ReadAhead {
    /// Start reading `source` ahead; Err when no thread is to be had.
    pub(crate) fn spawn<R: Read + Send + 'static>(mut source: R) -> std::io::Result<Self> {
        let (tx, chunks) = sync_channel(QUEUED);
        let (spare, spares) = channel::<Vec<u8>>();
        std::thread::Builder::new()
            .name("pktflow-read".into())
            .spawn(move || loop {
                let mut chunk = spares.try_recv().unwrap_or_default();
                chunk.resize(ROOM + CHUNK, 0);
                match read_full(&mut source, chunk.get_mut(ROOM..).unwrap_or(&mut [])) {
                    Ok(0) => return,
                    Ok(k) => {
                        chunk.truncate(ROOM + k);
                        if tx.send(Ok(chunk)).is_err() || k < CHUNK {
                            return; // the pass is gone, or the file ended
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(StreamFault::io(&e)));
                        return;
                    }
                }
            })?;
        Ok(ReadAhead { chunks, spare })
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

    /// The same needs on a read-ahead window and a plain one: the same bytes, window ends
    /// and refills, across chunk ends, records larger than the room, and the file's end.
    #[test]
    fn a_read_ahead_window_ends_where_a_read_one_does() {
        let data: Vec<u8> = (0..(3 * CHUNK + 12_345))
            .map(|i| (i * 13 % 241) as u8)
            .collect();
        let head = &data[..4];
        let mut plain = Window::new(Source::Bytes(Cursor::new(data[4..].to_vec())), 0, head);
        let ahead = ReadAhead::spawn(Cursor::new(data[4..].to_vec()));
        let mut ahead = Window::new(Source::Ahead(ahead.expect("a thread")), 0, head);
        let mut steps = [16usize, 1514, 70_000, 3 * BLOCK + 5, 40, 9 * BLOCK, 65_535]
            .iter()
            .cycle();
        loop {
            let n = *steps.next().unwrap_or(&1);
            let (p, a) = (plain.need(n), ahead.need(n));
            assert_eq!(p, a);
            assert_eq!(
                (plain.offset(), plain.available(), plain.refills),
                (ahead.offset(), ahead.available(), ahead.refills)
            );
            assert_eq!(plain.rest(), ahead.rest());
            if !p {
                break;
            }
            let step = n / 3 + 1;
            plain.pos += step;
            ahead.pos += step;
        }
        assert_eq!(ahead.offset() as usize + ahead.available(), data.len());
        assert!(ahead.fault.is_none());
    }
}
