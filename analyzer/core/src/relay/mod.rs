//! Relays (PgBouncer, Pgpool-II, any pooler), a capture-level stage of the core: each judged
//! PostgreSQL connection is kept as a leg (`legs`, `store`: what matching reads in memory, the
//! rest spooled), relays are found and their queries paired once the pass is done
//! (`matching`), and what the relay did is measured from both legs side by side (`measure`,
//! `forwarding`; the pairs spooled, `pairs`); Python words the verdict (`record`).

pub mod forwarding;
pub mod keys;
pub mod legs;
pub mod matching;
pub mod measure;
pub mod pairs;
pub mod record;
pub mod store;

pub use legs::LegExtras;
pub use record::{RelayJudgement, RelayRecord, RelayWords};

use crate::report::spool::SpoolError;
use crate::report::{ConnectionRecord, ReportError, Role};

/// The legs of a pass, as its connections are judged.
#[derive(Default)]
pub struct RelayStage {
    legs: store::Legs,
}

/// What the stage found: each relay (its judgement and its record, words to come) and each
/// leg's part, by connection number (sorted).
pub struct Found {
    pub relays: Vec<(RelayJudgement, RelayRecord)>,
    pub roles: Vec<(u64, Role)>,
}

impl RelayStage {
    /// Keep what a judged connection can tell as a relay's leg.
    pub fn add(
        &mut self,
        record: &ConnectionRecord,
        number: u64,
        extras: LegExtras,
    ) -> Result<(), SpoolError> {
        self.legs.add(record, number, extras)
    }

    /// Find the relays among the legs kept.
    pub fn finish(mut self) -> Result<Found, ReportError> {
        let legs = &mut self.legs;
        legs.sort();
        let mut roles = Vec::new();
        let mut relays = Vec::new();
        for relay in matching::find_relays(legs) {
            for (places, role) in [(&relay.front, Role::Front), (&relay.back, Role::Back)] {
                roles.extend(places.iter().map(|&l| (legs.head(l).number, role)));
            }
            relays.push(RelayRecord::of(&relay, legs)?);
        }
        roles.sort_unstable_by_key(|&(number, _)| number);
        Ok(Found { relays, roles })
    }
}
