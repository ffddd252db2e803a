//! Messages by name, in the order first seen, per side.
//!
//! DataRow and CopyData are counted apart (a segment's run at a time) and take their place
//! among the names when first counted.
//!
//! A diagram also wants the messages in wire order: a side can keep a trail of them (off by
//! default, so the analysis pass pays nothing), drained as segments are fed.

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
    /// The messages in wire order since last drained, when a diagram asked for them.
    pub trail: Option<Box<Trail>>,
}

/// What a trail held since its last drain: messages in order, and the details kept.
pub type Drained = (Vec<(Name, u64)>, Vec<Detail>);

/// Longest text kept of a command tag or an error's message in a trail.
pub const DETAIL_CAP: usize = 200;
/// Details kept between two drains; more are dropped (a segment of 10,000 empty statements).
pub const MAX_DETAILS: usize = 16;

/// Messages in the order they completed, consecutive repeats folded, and what a reader of a
/// diagram wants of a few of them: a command tag, an error's SQLSTATE and message.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Trail {
    pub steps: Vec<(Name, u64)>,
    pub details: Vec<Detail>,
    /// A message whose header was counted but whose body runs into later bytes: it joins the
    /// trail when those bytes complete it (a message belongs to the segment that ends it).
    pub held: Option<Name>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detail {
    pub name: Name,
    /// The severity of an ErrorResponse or NoticeResponse, never localized (V)
    pub severity: Option<String>,
    /// SQLSTATE of an ErrorResponse or NoticeResponse
    pub code: Option<String>,
    /// the command tag, or the error's or notice's message, cut at DETAIL_CAP characters
    pub text: String,
}

impl Trail {
    pub fn push(&mut self, name: Name, n: u64) {
        if n == 0 {
            return;
        }
        match self.steps.last_mut() {
            Some((last, k)) if *last == name => *k += n,
            _ => self.steps.push((name, n)),
        }
    }

    /// The last message counted is not complete yet: take it back until it is.
    pub fn hold_last(&mut self) {
        let Some((name, k)) = self.steps.last_mut() else {
            return;
        };
        let name = *name;
        *k -= 1;
        if *k == 0 {
            self.steps.pop();
        }
        self.held = Some(name);
    }

    /// The held message's last bytes came.
    pub fn complete_held(&mut self) {
        if let Some(name) = self.held.take() {
            self.push(name, 1);
        }
    }

    pub fn detail(
        &mut self,
        name: Name,
        severity: Option<String>,
        code: Option<String>,
        text: &str,
    ) {
        if self.details.len() >= MAX_DETAILS {
            return;
        }
        let text = match text.char_indices().nth(DETAIL_CAP) {
            Some((at, _)) => format!("{}…", text.get(..at).unwrap_or(text)),
            None => text.to_string(),
        };
        self.details.push(Detail {
            name,
            severity,
            code,
            text,
        });
    }

    /// What was completed since the last drain (a held message stays held).
    pub fn drain(&mut self) -> Drained {
        (
            std::mem::take(&mut self.steps),
            std::mem::take(&mut self.details),
        )
    }
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
        if let Some(t) = self.trail.as_mut() {
            t.push(name, 1);
        }
    }

    pub fn add_rows(&mut self, rows: u64) {
        if self.rows == 0 {
            self.slot(DATA_ROW);
        }
        self.rows += rows;
        if let Some(t) = self.trail.as_mut() {
            t.push(DATA_ROW, rows);
        }
    }

    pub fn add_copies(&mut self, copies: u64) {
        if self.copies == 0 {
            self.slot(COPY_DATA);
        }
        self.copies += copies;
        if let Some(t) = self.trail.as_mut() {
            t.push(COPY_DATA, copies);
        }
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
        assert!(c.trail.is_none(), "no trail unless asked for");
    }

    fn names(steps: &[(Name, u64)]) -> Vec<(String, u64)> {
        steps.iter().map(|(n, k)| (n.text(), *k)).collect()
    }

    #[test]
    fn trail_keeps_wire_order_and_folds_only_consecutive_repeats() {
        let mut c = Counts {
            trail: Some(Box::default()),
            ..Counts::default()
        };
        c.add_rows(3);
        c.count(Name::Known("CommandComplete"));
        c.count(Name::Known("ReadyForQuery"));
        c.add_rows(1);
        c.add_rows(2);
        c.count(Name::Known("CommandComplete"));
        let t = c.trail.as_mut().map(|t| t.drain());
        let (steps, _) = t.unwrap_or_default();
        assert_eq!(
            names(&steps),
            [
                ("DataRow".into(), 3),
                ("CommandComplete".into(), 1),
                ("ReadyForQuery".into(), 1),
                ("DataRow".into(), 3),
                ("CommandComplete".into(), 1)
            ]
        );
        assert_eq!(c.trail.as_mut().map(|t| t.drain().0.len()), Some(0));
    }

    #[test]
    fn a_held_message_joins_the_drain_that_completes_it() {
        let mut t = Trail::default();
        t.push(DATA_ROW, 2);
        t.hold_last();
        assert_eq!(names(&t.drain().0), [("DataRow".into(), 1)]);
        t.hold_last(); // nothing to hold: no panic, nothing held anew
        t.complete_held();
        t.push(DATA_ROW, 4);
        t.push(Name::Known("CommandComplete"), 1);
        assert_eq!(
            names(&t.drain().0),
            [("DataRow".into(), 5), ("CommandComplete".into(), 1)]
        );
        t.push(DATA_ROW, 1);
        t.hold_last();
        assert!(t.drain().0.is_empty());
        assert_eq!(t.held, Some(DATA_ROW));
    }

    #[test]
    fn details_are_bounded() {
        let mut t = Trail::default();
        let long = "é".repeat(DETAIL_CAP + 50);
        for _ in 0..MAX_DETAILS + 5 {
            t.detail(Name::Known("CommandComplete"), None, None, &long);
        }
        let (_, details) = t.drain();
        assert_eq!(details.len(), MAX_DETAILS);
        assert_eq!(details[0].text.chars().count(), DETAIL_CAP + 1);
        assert!(details[0].text.ends_with('…'));
    }
}
