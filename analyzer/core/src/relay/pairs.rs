//! A relay's matched pairs (`relays[].queries`), spooled as they are measured: a storm's tens
//! of thousands of pairs wait in the spool's file until the report is written, each read back
//! then, or when a renderer asks for it.

use serde::ser::{Error as _, SerializeSeq};
use serde::{Serialize, Serializer};

use super::measure::Pair;
use crate::report::spool::{self, Spool, SpoolError};
use crate::report::ReportError;

#[derive(Default)]
pub struct Pairs {
    spool: Spool,
    scratch: Vec<u8>,
}

impl std::fmt::Debug for Pairs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pairs({})", self.len())
    }
}

impl Pairs {
    pub fn push(&mut self, pair: &Pair) -> Result<(), SpoolError> {
        self.scratch.clear();
        // a Pair always serializes; a failure here would be a bug, said as an I/O one
        let bytes = postcard::to_extend(pair, std::mem::take(&mut self.scratch)).map_err(|e| {
            SpoolError {
                dir: std::env::temp_dir(),
                error: std::io::Error::other(e.to_string()),
            }
        })?;
        self.spool.push(&bytes)?;
        self.scratch = bytes;
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.spool.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spool.is_empty()
    }

    /// Reads pairs back, near ones cheaply.
    pub fn reader(&self) -> Reader<'_> {
        Reader {
            spool: self.spool.reader(),
            buf: Vec::new(),
        }
    }
}

pub struct Reader<'a> {
    spool: spool::Reader<'a>,
    buf: Vec<u8>,
}

impl Reader<'_> {
    /// Pair `i` (in the order they were matched).
    pub fn get(&mut self, i: usize) -> Result<Pair, ReportError> {
        self.spool.read(i, &mut self.buf)?;
        postcard::from_bytes(&self.buf).map_err(|e| ReportError::Decode(e.to_string()))
    }
}

/// A list, each pair read back as it is written.
impl Serialize for Pairs {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.len()))?;
        let mut read = self.reader();
        for i in 0..self.len() {
            seq.serialize_element(&read.get(i).map_err(S::Error::custom)?)?;
        }
        seq.end()
    }
}
