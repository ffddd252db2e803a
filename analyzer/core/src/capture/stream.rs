//! A capture read from a pipe (standard input: `tcpdump -w - | pktflow analyze -`).
//!
//! A thread of its own does the blocking reads and hands the bytes over in chunks through a
//! bounded channel, so that the pass can be told to stop (SIGINT) while the pipe is silent:
//! a stop ends the stream where it stands, as a clean end, not as damage. Nothing is kept
//! beyond the channel's few chunks: an endless stream takes no more memory than a file.
//!
//! Read as a file: each refill of the reader's window is filled whole (the same batches as
//! the same bytes in a file, so `cat x.pcap | pktflow analyze -` reports what the file does).
//! Live: a refill takes what the pipe has, so a slow capture's packets are analysed as they
//! come rather than once 128 KiB have gathered.

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

/// Bytes per read of the pipe, and chunks in flight between the threads.
const CHUNK: usize = 1 << 16;
const QUEUED: usize = 16;
/// How often a wait for the pipe looks at the stop flag.
const POLL: Duration = Duration::from_millis(100);

pub struct Stream {
    rx: Receiver<std::io::Result<Vec<u8>>>,
    /// The chunk being handed out, from `at`.
    chunk: Vec<u8>,
    at: usize,
    /// Set from outside (SIGINT): the stream ends at the next read.
    stop: Arc<AtomicBool>,
    stopped: bool,
    ended: bool,
    pub(crate) live: bool,
}

impl Stream {
    /// Read `source` on a thread of its own until it ends or `stop` is set.
    pub fn spawn<R: Read + Send + 'static>(
        mut source: R,
        live: bool,
        stop: Arc<AtomicBool>,
    ) -> Self {
        let (tx, rx) = sync_channel(QUEUED);
        // no thread to be had: the channel is closed at once and the stream reads as empty
        let _ = std::thread::Builder::new()
            .name("pktflow-stdin".into())
            .spawn(move || loop {
                let mut buf = vec![0u8; CHUNK];
                match source.read(&mut buf) {
                    Ok(0) => return,
                    Ok(k) => {
                        buf.truncate(k);
                        if tx.send(Ok(buf)).is_err() {
                            return; // the pass is gone
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                }
            });
        Stream {
            rx,
            chunk: Vec::new(),
            at: 0,
            stop,
            stopped: false,
            ended: false,
            live,
        }
    }

    /// Whether the stream ended because it was told to stop.
    pub(crate) fn stopped(&self) -> bool {
        self.stopped
    }

    /// Bytes already taken from the pipe (its first, to tell the format) go first again.
    pub(crate) fn unread(&mut self, head: &[u8]) {
        let mut chunk = head.to_vec();
        chunk.extend_from_slice(self.chunk.get(self.at..).unwrap_or(&[]));
        self.chunk = chunk;
        self.at = 0;
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at >= self.chunk.len() {
            if self.ended {
                return Ok(0);
            }
            if self.stop.load(Ordering::Relaxed) {
                self.stopped = true;
                self.ended = true;
                return Ok(0);
            }
            match self.rx.recv_timeout(POLL) {
                Ok(Ok(chunk)) => {
                    self.chunk = chunk;
                    self.at = 0;
                }
                Ok(Err(e)) => {
                    self.ended = true;
                    return Err(e);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => self.ended = true,
            }
        }
        let rest = self.chunk.get(self.at..).unwrap_or(&[]);
        let n = rest.len().min(buf.len());
        if let (Some(d), Some(s)) = (buf.get_mut(..n), rest.get(..n)) {
            d.copy_from_slice(s);
        }
        self.at += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn all(mut s: Stream) -> Vec<u8> {
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        out
    }

    #[test]
    fn hands_out_every_byte_with_the_head_first() {
        let data: Vec<u8> = (0..(3 * CHUNK + 5)).map(|i| (i % 251) as u8).collect();
        let mut s = Stream::spawn(
            Cursor::new(data[4..].to_vec()),
            true,
            Arc::new(AtomicBool::new(false)),
        );
        s.unread(&data[..4]);
        assert_eq!(all(s), data);
    }

    #[test]
    fn a_stop_ends_a_silent_stream_as_stopped() {
        // a reader that never returns: the pipe is open and silent
        struct Silent;
        impl Read for Silent {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                std::thread::sleep(Duration::from_secs(3600));
                Ok(0)
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut s = Stream::spawn(Silent, true, Arc::clone(&stop));
        stop.store(true, Ordering::Relaxed);
        let mut buf = [0u8; 16];
        assert_eq!(s.read(&mut buf).ok(), Some(0));
        assert!(s.stopped());
    }
}
