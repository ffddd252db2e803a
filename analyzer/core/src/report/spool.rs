//! Byte strings appended and read back by number, the first megabyte or so in memory, the rest
//! in an unnamed temporary file (in TMPDIR, gone when it is closed or the process ends): where
//! a report's connection records wait, in a compact binary form, until the pass is done and
//! the report is written in connection order with each connection's relay role. A storm of
//! 80,000 connections holds its records on disk, not in memory.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// Bytes held in memory before they go to the file.
const SPILL: usize = 1 << 20;

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
        self.ends.push(self.written + self.buf.len() as u64);
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

    /// Item `i`'s bytes into `out` (cleared first).
    pub fn read(&self, i: usize, out: &mut Vec<u8>) -> Result<(), SpoolError> {
        out.clear();
        let start = match i.checked_sub(1) {
            Some(before) => self.ends.get(before).copied().unwrap_or(0),
            None => 0,
        };
        let end = self.ends.get(i).copied().unwrap_or(start);
        if start >= self.written {
            // still in memory (an item never straddles the file and the buffer)
            let (a, b) = (
                (start - self.written) as usize,
                (end - self.written) as usize,
            );
            out.extend_from_slice(self.buf.get(a..b).unwrap_or_default());
            return Ok(());
        }
        out.resize((end - start) as usize, 0);
        let fail = |error| SpoolError {
            dir: std::env::temp_dir(),
            error,
        };
        let file = self
            .file
            .as_ref()
            .ok_or_else(|| fail(io::Error::from(io::ErrorKind::NotFound)))?;
        file.read_exact_at(out, start).map_err(fail)
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
    }
}
