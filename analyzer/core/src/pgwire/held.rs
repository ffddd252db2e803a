//! Where a long conversation's finished queries wait for its report: spooled in batches,
//! not held in memory. A pooler's server connection can stay open for the whole capture and
//! list its MAX_QUERIES queries; kept as `Query` values, sixteen of them hold tens of
//! megabytes until the capture ends. Once final and referred to by nothing, a batch of them
//! is made into facts (which no later message changes) and written to a spool the pass
//! shares among its conversations; the report reads each batch back, in order.

use std::sync::{Arc, Mutex};

use super::facts::QueryFacts;
use crate::report::spool::{Spool, SpoolError};
use crate::series::Series;

/// Queries handed over at a time: a connection with fewer keeps them all in memory, and a
/// batch costs the spool one item.
pub const HOLD_BATCH: usize = 256;

/// The pass's spool of finished queries, shared by its conversations (the pass may run on
/// a thread of its own, hence the lock; it is taken once per batch).
#[derive(Clone, Default)]
pub struct QuerySpool(Arc<Mutex<Spool>>);

impl std::fmt::Debug for QuerySpool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QuerySpool")
    }
}

fn failed(error: std::io::Error) -> SpoolError {
    SpoolError {
        dir: std::env::temp_dir(),
        error,
    }
}

impl QuerySpool {
    /// Spool a batch; its item number.
    fn put(&self, batch: &[QueryFacts]) -> Result<usize, SpoolError> {
        // the facts' types all serialize; a failure here would be a bug, said as an I/O one
        let bytes = postcard::to_allocvec(batch)
            .map_err(|e| failed(std::io::Error::other(e.to_string())))?;
        let mut spool = (self.0.lock()).map_err(|_| failed(std::io::Error::other("poisoned")))?;
        let item = spool.len();
        spool.push(&bytes)?;
        Ok(item)
    }

    fn get(&self, item: usize, out: &mut Vec<QueryFacts>) -> Result<(), SpoolError> {
        let mut bytes = Vec::new();
        {
            let spool = (self.0.lock()).map_err(|_| failed(std::io::Error::other("poisoned")))?;
            spool.read(item, &mut bytes)?;
        }
        let batch: Vec<QueryFacts> = postcard::from_bytes(&bytes)
            .map_err(|e| failed(std::io::Error::other(e.to_string())))?;
        out.extend(batch);
        Ok(())
    }
}

/// A batch of queries handed over: spooled, or kept in memory when the spool could not be
/// written (the report's own spool then fails too, and says where).
#[derive(Debug)]
enum Batch {
    Spooled(usize),
    Kept(Vec<QueryFacts>),
}

/// One conversation's queries handed over: the spool, its batches in order, and the bulk
/// series of those queries (kept in memory: a few, each bounded, and the report takes them
/// with their queries).
#[derive(Debug)]
pub struct Held {
    spool: QuerySpool,
    batches: Vec<Batch>,
    /// Queries handed over: the first `count` listed ones.
    pub count: u64,
    series: Vec<(u64, Box<Series>)>,
}

impl Held {
    pub fn new(spool: QuerySpool) -> Self {
        Held {
            spool,
            batches: Vec::new(),
            count: 0,
            series: Vec::new(),
        }
    }

    /// Hand over the next queries, in order, and the bulk series of those that have one (by
    /// their number among the listed queries).
    pub fn hand_over(&mut self, batch: Vec<QueryFacts>, series: Vec<(u64, Box<Series>)>) {
        self.count += batch.len() as u64;
        self.series.extend(series);
        self.batches.push(match self.spool.put(&batch) {
            Ok(item) => Batch::Spooled(item),
            Err(_) => Batch::Kept(batch),
        });
    }

    /// Every query handed over, in order, with its series.
    pub fn take(&mut self) -> Result<Vec<QueryFacts>, SpoolError> {
        let mut out = Vec::with_capacity(usize::try_from(self.count).unwrap_or(0));
        for batch in std::mem::take(&mut self.batches) {
            match batch {
                Batch::Spooled(item) => self.spool.get(item, &mut out)?,
                Batch::Kept(queries) => out.extend(queries),
            }
        }
        for (i, s) in self.series.drain(..) {
            if let Some(q) = usize::try_from(i).ok().and_then(|i| out.get_mut(i)) {
                q.series = Some(s);
            }
        }
        self.count = 0;
        Ok(out)
    }

    /// Forget what was handed over (the conversation started again, or is not PostgreSQL).
    pub fn clear(&mut self) {
        self.batches.clear();
        self.series.clear();
        self.count = 0;
    }
}
