//! Statements as matching compares them (`sql_key`), each distinct one given a number: equal
//! numbers, equal keys. The keys themselves wait in a spool; what stays in memory is a 64-bit
//! hash per distinct key and its number. A key whose hash is already known is compared with
//! the key kept under that hash, byte for byte, so two statements that merely hash alike
//! never share a number.

use std::collections::HashMap;
use std::hash::BuildHasher;

use crate::report::spool::{Spool, SpoolError};

/// Keys compared lately, kept in memory (a statement repeated on every connection is then
/// read from the spool once), within these bounds.
const RECENT_KEYS: usize = 1024;
const RECENT_BYTES: usize = 1 << 20;

#[derive(Default)]
pub struct SqlKeys {
    hasher: foldhash::quality::RandomState,
    /// Each distinct key, by its number.
    spool: Spool,
    /// A hash -> the first key's number with that hash.
    first: HashMap<u64, u64, foldhash::fast::RandomState>,
    /// A hash -> the numbers of the other keys with that hash (they almost never exist).
    more: HashMap<u64, Vec<u64>>,
    recent: HashMap<u64, Box<[u8]>, foldhash::fast::RandomState>,
    recent_bytes: usize,
    buf: Vec<u8>,
}

impl SqlKeys {
    /// The number of `key`: the one it was given before, or a new one.
    pub fn number(&mut self, key: &str) -> Result<u64, SpoolError> {
        let hash = self.hasher.hash_one(key.as_bytes());
        let Some(&first) = self.first.get(&hash) else {
            let n = self.push(key)?;
            self.first.insert(hash, n);
            return Ok(n);
        };
        if self.is(first, key)? {
            return Ok(first);
        }
        let others = self.more.get(&hash).cloned().unwrap_or_default();
        for n in others {
            if self.is(n, key)? {
                return Ok(n);
            }
        }
        let n = self.push(key)?;
        self.more.entry(hash).or_default().push(n);
        Ok(n)
    }

    fn push(&mut self, key: &str) -> Result<u64, SpoolError> {
        let n = self.spool.len() as u64;
        self.spool.push(key.as_bytes())?;
        Ok(n)
    }

    /// Whether key number `n` is `key`.
    fn is(&mut self, n: u64, key: &str) -> Result<bool, SpoolError> {
        if let Some(known) = self.recent.get(&n) {
            return Ok(**known == *key.as_bytes());
        }
        let at = usize::try_from(n).unwrap_or(usize::MAX);
        self.spool.read(at, &mut self.buf)?;
        let same = self.buf == key.as_bytes();
        if self.recent.len() >= RECENT_KEYS || self.recent_bytes + self.buf.len() > RECENT_BYTES {
            self.recent.clear();
            self.recent_bytes = 0;
        }
        self.recent_bytes += self.buf.len();
        self.recent.insert(n, self.buf.as_slice().into());
        Ok(same)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_keys_share_a_number_and_others_do_not() {
        let mut keys = SqlKeys::default();
        let texts: Vec<String> = (0..5000).map(|i| format!("SELECT {}", i % 1700)).collect();
        let numbers: Vec<u64> = texts.iter().map(|t| keys.number(t).unwrap()).collect();
        for (i, a) in numbers.iter().enumerate().step_by(7) {
            for (j, b) in numbers.iter().enumerate().step_by(11) {
                assert_eq!(a == b, texts[i] == texts[j], "{} {}", texts[i], texts[j]);
            }
        }
    }

    #[test]
    fn keys_that_hash_alike_are_told_apart_by_their_bytes() {
        let mut keys = SqlKeys::default();
        let begin = keys.number("BEGIN").unwrap();
        // as if "END" hashed as "BEGIN" does: its hash names BEGIN's number
        keys.first
            .insert(keys.hasher.hash_one("END".as_bytes()), begin);
        keys.recent.clear();
        let end = keys.number("END").unwrap();
        assert_ne!(end, begin, "the bytes differ: a number of its own");
        assert_eq!(keys.number("END").unwrap(), end);
        assert_eq!(keys.number("BEGIN").unwrap(), begin);
    }
}
