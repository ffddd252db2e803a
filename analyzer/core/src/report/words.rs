//! What Python adds to a connection's record: its judgement and its words. The core never
//! writes a sentence; it takes these as Python hands them back (typed, checked on the way in
//! by the binding) and puts each where the report shows it.

use serde::{Deserialize, Serialize};

use super::connection::{CapturePoint, ConnectionRecord};
use super::direction::TransferRecord;
use super::round_trips::ConversationSaving;
use super::values::Maybe;
use crate::transfer::ByLimit;

/// What limited a direction's transfer, as Python's rule named it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    ReceiverWindow,
    Network,
    Loss,
    Latency,
    Sender,
    #[default]
    None,
}

/// For a receiver-window limit: a small buffer the reader kept emptying, or a reader that
/// stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Receiver {
    Buffer,
    Application,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub limit: Limit,
    /// A near-tie: the limit within a few points of `limit`'s share.
    pub mixed_with: Maybe<Limit>,
    /// Each limit's share of the transfer time; None when there was no transfer to judge.
    pub shares: Option<ByLimit<f64>>,
    pub receiver: Maybe<Receiver>,
    pub summary: String,
    pub evidence_frames: Vec<u64>,
    /// What the transfer would take less without `limit` (seconds, from the capture's own
    /// figures: pktflow/transfer/saving.py); absent where the model cannot say (`without`
    /// says why).
    #[serde(default)]
    pub saving_s: Maybe<f64>,
    /// What "without" means for the saving, or why there is none.
    #[serde(default)]
    pub without: Maybe<String>,
    /// The model's short name.
    #[serde(default)]
    pub saving_model: Maybe<String>,
}

/// A finding: what went wrong on the wire or in the capture, with its evidence.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub severity: Severity,
    pub code: String,
    pub message: String,
    pub connection: Option<String>,
    pub frames: Vec<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
    Info,
}

/// A direction's words.
#[derive(Clone, Debug, Deserialize)]
pub struct DirectionWords {
    pub pattern: String,
    pub verdict: Verdict,
    /// One per idle period listed, in order.
    pub waiting_for: Vec<String>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct DirectionsWords {
    pub client_to_server: DirectionWords,
    pub server_to_client: DirectionWords,
}

/// Everything Python says of one connection.
#[derive(Clone, Debug, Deserialize)]
pub struct Words {
    /// None without the transfer analysis.
    pub directions: Option<DirectionsWords>,
    pub capture_point: Option<CapturePoint>,
    /// The round trips' summary, when the record has round trips.
    pub round_trips: Option<String>,
    /// The round trips' what-if, when the record has round trips.
    #[serde(default)]
    pub round_trips_saving: Option<ConversationSaving>,
    /// Why decoding stopped, when it did.
    pub decode_stopped: Option<String>,
    pub findings: Vec<Finding>,
}

impl Words {
    /// Put the words where the record shows them. (`free_words` takes the same fields back
    /// out: a field added here is added there.)
    pub fn apply(self, record: &mut ConnectionRecord) {
        if let Some(dirs) = self.directions {
            let d = &mut record.directions;
            apply_direction(
                d.client_to_server.transfer.0.as_mut(),
                dirs.client_to_server,
            );
            apply_direction(
                d.server_to_client.transfer.0.as_mut(),
                dirs.server_to_client,
            );
        }
        if self.capture_point.is_some() {
            record.capture_point = Maybe(self.capture_point);
        }
        if let Some(rt) = record.round_trips.0.as_mut() {
            if let Some(summary) = self.round_trips {
                rt.summary = summary;
            }
            if let Some(saving) = self.round_trips_saving {
                rt.set_saving(saving);
            }
        }
        if let (Some(pg), Some(reason)) = (record.postgres.0.as_mut(), self.decode_stopped) {
            if let Some(stopped) = pg.decode_stopped.as_mut() {
                stopped.reason = reason;
            }
        }
    }
}

/// What `Words::apply` put into the record, taken out again and freed here: the binding calls
/// it on Python's thread, which made those words, before the rest of the record goes back to
/// be freed on the thread that built it. (glibc's malloc frees a block into the arena of the
/// thread that made it, under that arena's lock: blocks freed on the other thread made the
/// two queue at the lock.)
pub fn free_words(record: &mut ConnectionRecord) {
    let d = &mut record.directions;
    for t in [&mut d.client_to_server, &mut d.server_to_client] {
        if let Some(t) = t.transfer.0.as_mut() {
            t.pattern = String::new();
            t.verdict = Verdict::default();
            for period in t.idle_periods.first.iter_mut() {
                period.waiting_for = String::new();
            }
        }
    }
    record.capture_point = Maybe(None);
    if let Some(rt) = record.round_trips.0.as_mut() {
        rt.summary = String::new();
        rt.without = Maybe(None);
    }
    if let Some(stopped) = record
        .postgres
        .0
        .as_mut()
        .and_then(|pg| pg.decode_stopped.as_mut())
    {
        stopped.reason = String::new();
    }
}

fn apply_direction(transfer: Option<&mut TransferRecord>, words: DirectionWords) {
    let Some(t) = transfer else {
        return;
    };
    t.pattern = words.pattern;
    t.verdict = words.verdict;
    for (period, why) in t.idle_periods.first.iter_mut().zip(words.waiting_for) {
        period.waiting_for = why;
    }
}
