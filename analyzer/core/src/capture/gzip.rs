//! Gzip-compressed captures, read as the stream of their decompressed bytes, streaming.
//!
//! As the reference (capture/gz.py) does, and unlike a plain gzip decoder: every decodable
//! byte before damage is handed out (a member's CRC is checked once its data was handed out,
//! a cut or corrupt stream hands out what decoded before the fault); members follow one
//! another and zero padding after the last is allowed. The compressed bytes are inflated
//! STEP at a time and each step's output is one chunk: the reader's windows (and so the
//! batches) end where the reference's do, so the chunking is kept exactly.

use std::io::Read;

use flate2::{Crc, Decompress, FlushDecompress, Status};

use super::error::StreamFault;

/// Compressed bytes per file read.
const READ: usize = 1 << 17;
/// Compressed bytes per inflate call: corrupt data loses at most this much.
const STEP: usize = 1 << 15;
const FHCRC: u8 = 0x02;
const FEXTRA: u8 = 0x04;
const FNAME: u8 = 0x08;
const FCOMMENT: u8 = 0x10;

pub(crate) struct GzipStream<R> {
    file: R,
    /// Compressed bytes read; those from `at` on are not used yet.
    input: Vec<u8>,
    at: usize,
    /// Compressed offset of input[at], for the faults' offsets.
    used: u64,
    inflater: Decompress,
    /// Inside a member (its header read, its trailer not yet).
    in_member: bool,
    crc: Crc,
    /// The current step's output, handed out from `out_at`.
    out: Vec<u8>,
    out_at: usize,
    /// Raised once `out` is handed out.
    fault: Option<StreamFault>,
    done: bool,
}

impl<R: Read> GzipStream<R> {
    pub(crate) fn new(file: R) -> Self {
        GzipStream {
            file,
            input: Vec::new(),
            at: 0,
            used: 0,
            inflater: Decompress::new(false),
            in_member: false,
            crc: Crc::new(),
            out: Vec::new(),
            out_at: 0,
            fault: None,
            done: false,
        }
    }

    /// The compressed source.
    pub(crate) fn inner(&self) -> &R {
        &self.file
    }

    /// What the stream has now, at most `buf.len()` bytes (0 at the end); a fault once every
    /// byte decoded before it was handed out, then 0 ever after.
    pub(crate) fn read_some(&mut self, buf: &mut [u8]) -> Result<usize, StreamFault> {
        while self.out_at >= self.out.len() {
            if let Some(f) = self.fault.take() {
                self.done = true;
                return Err(f);
            }
            if self.done {
                return Ok(0);
            }
            if let Err(f) = self.decode() {
                self.out.clear();
                self.out_at = 0;
                self.fault = Some(f);
            }
        }
        let rest = self.out.get(self.out_at..).unwrap_or(&[]);
        let n = buf.len().min(rest.len());
        if let (Some(dst), Some(src)) = (buf.get_mut(..n), rest.get(..n)) {
            dst.copy_from_slice(src);
        }
        self.out_at += n;
        Ok(n)
    }

    /// At least n unused compressed bytes from input[0] on, unless the file ends first.
    fn more(&mut self, n: usize) -> Result<bool, StreamFault> {
        if self.at > 0 {
            self.input.drain(..self.at);
            self.at = 0;
        }
        while self.input.len() < n {
            let want = READ.max(n - self.input.len());
            let start = self.input.len();
            self.input.resize(start + want, 0);
            let got = read_full(
                &mut self.file,
                self.input.get_mut(start..).unwrap_or(&mut []),
            );
            match got {
                Ok(k) => {
                    self.input.truncate(start + k);
                    if k == 0 {
                        return Ok(false);
                    }
                }
                Err(e) => {
                    self.input.truncate(start);
                    return Err(StreamFault::io(&e));
                }
            }
        }
        Ok(true)
    }

    /// Start the next member; false at the end of the file (zero padding allowed).
    fn header(&mut self) -> Result<bool, StreamFault> {
        loop {
            if !self.more(1)? {
                return Ok(false);
            }
            let zeros = self.input.iter().take_while(|&&b| b == 0).count();
            self.used += zeros as u64;
            self.input.drain(..zeros);
            if !self.input.is_empty() {
                break;
            }
        }
        self.more(10)?;
        let lead = self.input.get(..self.input.len().min(3)).unwrap_or(&[]);
        if !b"\x1f\x8b\x08".starts_with(lead) {
            return Err(StreamFault::NoMember { at: self.used });
        }
        let Some(&flags) = self.input.get(3).filter(|_| self.input.len() >= 10) else {
            return Err(StreamFault::HeaderCut);
        };
        let mut at = 10usize;
        if flags & FEXTRA != 0 {
            if !self.more(at + 2)? {
                return Err(StreamFault::HeaderCut);
            }
            let xlen = match self.input.get(at..at + 2) {
                Some(b) => u16::from_le_bytes([b[0], b[1]]) as usize,
                None => return Err(StreamFault::HeaderCut),
            };
            at += 2 + xlen;
        }
        for flag in [FNAME, FCOMMENT] {
            if flags & flag != 0 {
                loop {
                    let found = self
                        .input
                        .get(at..)
                        .and_then(|s| s.iter().position(|&b| b == 0));
                    if let Some(k) = found {
                        at += k + 1;
                        break;
                    }
                    if !self.more(self.input.len() + 1)? {
                        return Err(StreamFault::HeaderCut);
                    }
                }
            }
        }
        if flags & FHCRC != 0 {
            at += 2;
        }
        if !self.more(at)? {
            return Err(StreamFault::HeaderCut);
        }
        self.at = at;
        self.used += at as u64;
        self.inflater.reset(false);
        self.crc.reset();
        self.in_member = true;
        Ok(true)
    }

    /// The next decompressed bytes into `out` (never empty), or empty and `done` at the end.
    fn decode(&mut self) -> Result<(), StreamFault> {
        self.out.clear();
        self.out_at = 0;
        loop {
            if !self.in_member && !self.header()? {
                self.done = true;
                return Ok(());
            }
            if self.at == self.input.len() && !self.more(1)? {
                return Err(StreamFault::DataCut);
            }
            let start = self.used;
            let end = self.input.len().min(self.at + STEP);
            let piece_len = end - self.at;
            self.used += piece_len as u64;
            let (taken, ended) = self.inflate_piece(end).map_err(|()| StreamFault::Corrupt {
                start,
                end: start + piece_len as u64,
            })?;
            self.at += taken;
            let produced = self.out.get(..).unwrap_or(&[]);
            self.crc.update(produced);
            if ended {
                // the piece's bytes after the member go back for the next member
                let rest = piece_len - taken;
                self.used -= rest as u64;
                self.in_member = false;
                self.trailer()?;
            } else {
                self.at = end;
            }
            if !self.out.is_empty() {
                return Ok(());
            }
        }
    }

    /// Inflate input[at..end] into `out`, all of it: the bytes of input used (all of them
    /// unless the member ended inside) and whether it ended. Err on corrupt data.
    fn inflate_piece(&mut self, end: usize) -> Result<(usize, bool), ()> {
        let mut used = 0usize;
        loop {
            let input = self.input.get(self.at + used..end).unwrap_or(&[]);
            if self.out.capacity() - self.out.len() < STEP {
                self.out.reserve(4 * STEP);
            }
            let (in0, out0) = (self.inflater.total_in(), self.inflater.total_out());
            let status = self
                .inflater
                .decompress_vec(input, &mut self.out, FlushDecompress::Sync)
                .map_err(|_| ())?;
            let took = (self.inflater.total_in() - in0) as usize;
            let gave = (self.inflater.total_out() - out0) as usize;
            used += took;
            match status {
                Status::StreamEnd => return Ok((used, true)),
                _ if took == 0 && gave == 0 => return Ok((used, false)),
                _ if self.at + used >= end && self.out.len() < self.out.capacity() => {
                    return Ok((used, false))
                }
                _ => {}
            }
        }
    }

    /// Check the member's CRC and length. On a mismatch the data is still handed out: the
    /// fault waits in `fault` when there is output, else it is raised now.
    fn trailer(&mut self) -> Result<(), StreamFault> {
        let at = self.used;
        let fault = if !self.more(8)? {
            Some(StreamFault::TrailerCut)
        } else {
            let t = self.input.get(..8).unwrap_or(&[0; 8]);
            let crc = u32::from_le_bytes([t[0], t[1], t[2], t[3]]);
            let size = u32::from_le_bytes([t[4], t[5], t[6], t[7]]);
            self.at = 8;
            self.used += 8;
            (crc != self.crc.sum() || size != self.crc.amount())
                .then_some(StreamFault::CheckFailed { at })
        };
        match fault {
            Some(f) if self.out.is_empty() => Err(f),
            Some(f) => {
                self.fault = Some(f);
                Ok(())
            }
            None => Ok(()),
        }
    }
}

/// Fill `buf` from `r` unless the file ends first: the count read.
pub(crate) fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(buf.get_mut(got..).unwrap_or(&mut [])) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}
