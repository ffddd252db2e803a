//! Messages by name, in the order first seen, per side.
//!
//! DataRow and CopyData are counted apart (a segment's run at a time) and take their place
//! among the names when first counted.

use std::collections::HashMap;

use super::messages::Name;

/// Names looked up by a scan while this few; past it (authentication codes without a name can
/// make many) by a map.
const SCAN: usize = 32;

#[derive(Debug, Default)]
pub struct Counts {
    entries: Vec<(Name, u64)>,
    index: HashMap<Name, usize>, // built once entries pass SCAN
    pub rows: u64,               // DataRow
    pub copies: u64,             // CopyData
    /// Messages counted by name (all but DataRow and CopyData): who watches counts change
    /// compares this.
    pub named: u64,
}

pub const DATA_ROW: Name = Name::Known("DataRow");
pub const COPY_DATA: Name = Name::Known("CopyData");

impl Counts {
    /// The entry of a name, appended at 0 when new.
    fn slot(&mut self, name: Name) -> usize {
        let found = if self.entries.len() <= SCAN {
            self.entries.iter().position(|e| e.0 == name)
        } else {
            if self.index.is_empty() {
                self.index = self
                    .entries
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (e.0, i))
                    .collect();
            }
            self.index.get(&name).copied()
        };
        found.unwrap_or_else(|| {
            let at = self.entries.len();
            self.entries.push((name, 0));
            if !self.index.is_empty() {
                self.index.insert(name, at);
            }
            at
        })
    }

    pub fn count(&mut self, name: Name) {
        let at = self.slot(name);
        if let Some(e) = self.entries.get_mut(at) {
            e.1 += 1;
        }
        self.named += 1;
    }

    pub fn add_rows(&mut self, rows: u64) {
        if self.rows == 0 {
            self.slot(DATA_ROW);
        }
        self.rows += rows;
    }

    pub fn add_copies(&mut self, copies: u64) {
        if self.copies == 0 {
            self.slot(COPY_DATA);
        }
        self.copies += copies;
    }

    /// (name, count) in the order first seen.
    pub fn items(&self) -> impl Iterator<Item = (Name, u64)> + '_ {
        self.entries.iter().map(|&(name, n)| {
            let n = match name {
                DATA_ROW if self.rows > 0 => self.rows,
                COPY_DATA if self.copies > 0 => self.copies,
                _ => n,
            };
            (name, n)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_seen_order_and_bulk_places() {
        let mut c = Counts::default();
        c.count(Name::Known("ReadyForQuery"));
        c.add_copies(3);
        c.add_rows(2);
        c.count(Name::Known("ReadyForQuery"));
        c.add_rows(5);
        let got: Vec<_> = c.items().map(|(n, k)| (n.text(), k)).collect();
        assert_eq!(
            got,
            [
                ("ReadyForQuery".into(), 2),
                ("CopyData".into(), 3),
                ("DataRow".into(), 7)
            ]
        );
        for code in 0..1000 {
            c.count(Name::Auth(1000 + code));
            c.count(Name::Auth(1000 + code));
        }
        assert_eq!(c.items().count(), 1003);
        assert!(c.items().all(|(n, k)| k == 2 || n != Name::Auth(1500)));
    }
}
