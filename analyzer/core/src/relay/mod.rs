//! Relays (PgBouncer, Pgpool-II, any pooler), a capture-level stage of the core: each judged
//! PostgreSQL connection is kept as a leg (`legs`), relays are found and their queries paired
//! once the pass is done (`matching`), and what the relay did is measured from both legs side
//! by side (`measure`); Python words the verdict (`record`).

pub mod forwarding;
pub mod legs;
pub mod matching;
pub mod measure;
pub mod record;

use std::collections::HashMap;

pub use legs::{Leg, LegExtras};
pub use record::{RelayJudgement, RelayRecord, RelayWords};

use crate::report::{ConnectionRecord, Role};

/// The legs of a pass, as its connections are judged.
#[derive(Default)]
pub struct RelayStage {
    legs: Vec<Leg>,
}

/// What the stage found: each relay (its judgement and its record, words to come) and each
/// leg's part, by connection number.
pub struct Found {
    pub relays: Vec<(RelayJudgement, RelayRecord)>,
    pub roles: HashMap<u64, Role>,
}

impl RelayStage {
    /// Keep what a judged connection can tell as a relay's leg.
    pub fn add(&mut self, record: &ConnectionRecord, number: u64, extras: LegExtras) {
        if let Some(leg) = Leg::of(record, number, extras) {
            self.legs.push(leg);
        }
    }

    /// Find the relays among the legs kept.
    pub fn finish(mut self) -> Found {
        // connections retire in any order; matching reads them in the order they opened
        self.legs.sort_by_key(|l| l.number);
        let mut roles = HashMap::new();
        let mut relays = Vec::new();
        for relay in matching::find_relays(&self.legs) {
            for &i in &relay.front {
                roles.insert(self.legs[i].number, Role::Front);
            }
            for &i in &relay.back {
                roles.insert(self.legs[i].number, Role::Back);
            }
            relays.push(RelayRecord::of(&relay, &self.legs));
        }
        Found { relays, roles }
    }
}
