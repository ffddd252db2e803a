//! Byte strings appended and read back by number, the first megabyte or so in memory, the rest
//! in an unnamed temporary file (in TMPDIR, gone when it is closed or the process ends): where
//! a report's connection records wait, in a compact binary form, until the pass is done and
//! the report is written in connection order with each connection's relay role, and where the
//! relay stage keeps its legs' queries and its matched pairs. A storm of 80,000 connections
//! holds its records on disk, not in memory.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// Bytes held in memory before they go to the file.
const SPILL: usize = 1 << 20;

/// A reader's cached blocks of the file, and their size: items read in order, or in a few
/// runs read side by side (a relay's front legs and each of its back legs), cost a system call
/// per block rather than one per item.
const BLOCKS: usize = 8;
const BLOCK: usize = 64 << 10;

#[derive(Default)]
pub struct Spool {
    /// Where each item ends, counted from the first one's start.
    ends: Vec<u64>,
    /// The latest bytes, not yet in the file.
    buf: Vec<u8>,
    file: Option<File>,
    /// Bytes in the file.
    written: u64,
}

/// Writing or reading the temporary file failed: where, and why.
#[derive(Debug)]
pub struct SpoolError {
    pub dir: PathBuf,
    pub error: io::Error,
}

impl std::fmt::Display for SpoolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot write the report's temporary file in {} ({})",
            self.dir.display(),
            self.error
        )
    }
}

impl std::error::Error for SpoolError {}

fn unnamed_file() -> Result<File, SpoolError> {
    let dir = std::env::temp_dir();
    let fail = |error| SpoolError {
        dir: dir.clone(),
        error,
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    for attempt in 0..16u32 {
        let path = dir.join(format!(
            ".pktflow-spool-{}-{nanos}-{attempt}",
            std::process::id()
        ));
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(file) => {
                // unnamed from here on: nothing is left behind, whatever happens
                std::fs::remove_file(&path).map_err(fail)?;
                return Ok(file);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(fail(e)),
        }
    }
    Err(fail(io::Error::from(io::ErrorKind::AlreadyExists)))
}

impl Spool {
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Append an item; its number is the count of items before it.
    pub fn push(&mut self, item: &[u8]) -> Result<(), SpoolError> {
        self.buf.extend_from_slice(item);
        crate::grow::push(&mut self.ends, self.written + self.buf.len() as u64);
        if self.buf.len() >= SPILL {
            let file = match self.file.as_mut() {
                Some(f) => f,
                None => self.file.insert(unnamed_file()?),
            };
            file.write_all(&self.buf).map_err(|error| SpoolError {
                dir: std::env::temp_dir(),
                error,
            })?;
            self.written += self.buf.len() as u64;
            self.buf.clear();
        }
        Ok(())
    }

    /// Item `i`'s length in bytes.
    pub fn item_len(&self, i: usize) -> u64 {
        let (start, end) = self.span(i);
        end - start
    }

    /// Where item `i` starts and ends, counted from the first one's start.
    fn span(&self, i: usize) -> (u64, u64) {
        let start = match i.checked_sub(1) {
            Some(before) => self.ends.get(before).copied().unwrap_or(0),
            None => 0,
        };
        (start, self.ends.get(i).copied().unwrap_or(start).max(start))
    }

    /// The item's bytes when they are still in memory (an item never straddles the file and
    /// the buffer).
    fn in_memory(&self, (start, end): (u64, u64)) -> Option<&[u8]> {
        if start < self.written {
            return None;
        }
        let (a, b) = (
            (start - self.written) as usize,
            (end - self.written) as usize,
        );
        Some(self.buf.get(a..b).unwrap_or_default())
    }

    fn read_at(&self, out: &mut [u8], at: u64) -> Result<(), SpoolError> {
        let fail = |error| SpoolError {
            dir: std::env::temp_dir(),
            error,
        };
        let file = self
            .file
            .as_ref()
            .ok_or_else(|| fail(io::Error::from(io::ErrorKind::NotFound)))?;
        file.read_exact_at(out, at).map_err(fail)
    }

    /// Item `i`'s bytes into `out` (cleared first).
    pub fn read(&self, i: usize, out: &mut Vec<u8>) -> Result<(), SpoolError> {
        out.clear();
        let span = self.span(i);
        if let Some(bytes) = self.in_memory(span) {
            out.extend_from_slice(bytes);
            return Ok(());
        }
        out.resize((span.1 - span.0) as usize, 0);
        self.read_at(out, span.0)
    }

    /// A reader that keeps a few blocks of the file (BLOCKS of BLOCK bytes).
    pub fn reader(&self) -> Reader<'_> {
        Reader {
            spool: self,
            blocks: Vec::new(),
            next: 0,
        }
    }
}

/// Reads a spool's items through a few cached blocks of its file.
pub struct Reader<'a> {
    spool: &'a Spool,
    /// (where the block starts, its bytes)
    blocks: Vec<(u64, Vec<u8>)>,
    /// The block to replace next.
    next: usize,
}

impl Reader<'_> {
    /// Item `i`'s bytes into `out` (cleared first).
    pub fn read(&mut self, i: usize, out: &mut Vec<u8>) -> Result<(), SpoolError> {
        out.clear();
        let spool = self.spool;
        let (start, end) = spool.span(i);
        if let Some(bytes) = spool.in_memory((start, end)) {
            out.extend_from_slice(bytes);
            return Ok(());
        }
        let len = (end - start) as usize;
        let cached =
            (self.blocks.iter()).find(|(at, b)| *at <= start && end <= *at + b.len() as u64);
        if let Some((at, block)) = cached {
            let from = (start - at) as usize;
            out.extend_from_slice(block.get(from..from + len).unwrap_or_default());
            return Ok(());
        }
        if len > BLOCK {
            out.resize(len, 0);
            return spool.read_at(out, start);
        }
        // a block from the item on, as far as the file goes
        let size = BLOCK.min((spool.written - start) as usize);
        let slot = if self.blocks.len() < BLOCKS {
            self.blocks.push((start, Vec::new()));
            self.blocks.len() - 1
        } else {
            self.next = (self.next + 1) % BLOCKS;
            self.next
        };
        let Some((at, block)) = self.blocks.get_mut(slot) else {
            return Ok(());
        };
        *at = start;
        block.resize(size, 0);
        if let Err(e) = spool.read_at(block, start) {
            block.clear();
            return Err(e);
        }
        out.extend_from_slice(block.get(..len).unwrap_or_default());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_read_back_from_memory_and_from_the_file() {
        let mut spool = Spool::default();
        let items: Vec<Vec<u8>> = (0..3000u32)
            .map(|i| (0..(i % 977)).map(|k| (k ^ i) as u8).collect())
            .collect();
        for item in &items {
            spool.push(item).unwrap();
        }
        assert!(spool.written > 0, "past a megabyte, the file holds some");
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate().rev() {
            spool.read(i, &mut out).unwrap();
            assert_eq!(&out, item, "{i}");
        }
        // through a reader's blocks: in order, backwards, and from two runs side by side
        let mut reader = spool.reader();
        let n = items.len();
        let order = (0..n)
            .chain((0..n).rev())
            .chain((0..n / 2).flat_map(|i| [i, n / 2 + i]));
        for i in order {
            reader.read(i, &mut out).unwrap();
            assert_eq!(&out, &items[i], "{i}");
        }
    }

    #[test]
    fn an_item_larger_than_a_block_reads_whole() {
        let mut spool = Spool::default();
        let items: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; BLOCK + 1000]).collect();
        for item in &items {
            spool.push(item).unwrap();
        }
        let mut reader = spool.reader();
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            reader.read(i, &mut out).unwrap();
            assert_eq!(&out, item, "{i}");
        }
    }
}
