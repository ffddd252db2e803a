//! Round trips of a conversation: a client that runs its statements one after another pays a
//! round trip per statement before the server can start the next answer, however fast the
//! data flows (mechanics.md: pg_dump's catalogue queries at 10 ms). The numbers: the queries,
//! the path's round trip, what they cost, against the time the responses took to move.

use serde::{Deserialize, Serialize};

use super::connection::Directions;
use super::conversation::QueryRecord;
use super::numbers::round_to;
use super::values::Maybe;

/// A response this large is bulk data.
pub const BULK_BYTES: u64 = 64 * 1024;

/// Where the round trip came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RttFrom {
    /// SYN to the ACK of the SYN-ACK: both halves, wherever the capture sits.
    #[serde(rename = "handshake")]
    Handshake,
    /// The larger of the two directions' least RTT samples: the one measured across the path
    /// from the capture point.
    #[serde(rename = "rtt samples")]
    RttSamples,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RoundTrips {
    pub queries: u64,
    pub rtt_ms: Option<f64>,
    pub rtt_from: Option<RttFrom>,
    /// queries x rtt_ms
    pub round_trips_ms: Option<f64>,
    /// From the first query sent to the last response.
    pub span_ms: f64,
    pub responses_ms: f64,
    pub bulk_ms: f64,
    pub share: Option<f64>,
    /// Python's words.
    pub summary: String,
    /// Python's what-if (pktflow/transfer/round_trips.py): seconds saved with the client next
    /// to the server, and with the queries pipelined; absent where the round trip is unknown.
    #[serde(default)]
    pub saving_s: Maybe<f64>,
    #[serde(default)]
    pub pipelined_saving_s: Maybe<f64>,
    /// What "without" means, or why there is no saving.
    #[serde(default)]
    pub without: Maybe<String>,
}

/// Python's what-if for a conversation, put into its RoundTrips.
#[derive(Clone, Debug, Deserialize)]
pub struct ConversationSaving {
    pub saving_s: Option<f64>,
    pub pipelined_saving_s: Option<f64>,
    pub without: String,
}

impl RoundTrips {
    /// Put Python's what-if in.
    pub fn set_saving(&mut self, s: ConversationSaving) {
        self.saving_s = Maybe(s.saving_s);
        self.pipelined_saving_s = Maybe(s.pipelined_saving_s);
        self.without = Maybe(Some(s.without));
    }
}

/// The path's round trip between the two ends, and where it came from.
pub fn path_rtt_ms(dirs: &Directions) -> (Option<f64>, Option<RttFrom>) {
    if let Some(hs) = &dirs.client_to_server.handshake_ms.0 {
        return (
            Some(round_to(hs.syn_to_synack + hs.synack_to_ack, 3)),
            Some(RttFrom::Handshake),
        );
    }
    let least = [&dirs.client_to_server, &dirs.server_to_client]
        .into_iter()
        .filter_map(|d| d.transfer.0.as_ref()?.rtt_ms.as_ref().map(|r| r.min))
        .reduce(f64::max);
    match least {
        Some(ms) => (Some(ms), Some(RttFrom::RttSamples)),
        None => (None, None),
    }
}

impl RoundTrips {
    /// The conversation's round trips, from the report's own (rounded) times; None for fewer
    /// than two queries whose times are known: one is no conversation (most connections of a
    /// storm have one or two).
    pub fn of(queries: &[QueryRecord], path: (Option<f64>, Option<RttFrom>)) -> Option<Self> {
        let timed: Vec<(&QueryRecord, f64)> = queries
            .iter()
            .filter_map(|q| Some((q, q.last_response_s?)))
            .collect();
        let (first, _) = timed.first()?;
        if timed.len() < 2 {
            return None;
        }
        let (rtt, source) = path;
        let last = timed
            .iter()
            .map(|(_, t)| *t)
            .fold(f64::NEG_INFINITY, f64::max);
        let span = (last - first.sent_s) * 1e3;
        let (mut moving, mut bulk) = (0.0, 0.0);
        for (q, last) in &timed {
            let took = q.first_response_s.map_or(0.0, |f| (last - f) * 1e3);
            moving += took;
            if q.response_bytes >= BULK_BYTES {
                bulk += took;
            }
        }
        let n = timed.len() as u64;
        let cost = rtt.map(|r| round_to(n as f64 * r, 3));
        Some(RoundTrips {
            queries: n,
            rtt_ms: rtt,
            rtt_from: source,
            round_trips_ms: cost,
            span_ms: round_to(span, 3),
            responses_ms: round_to(moving, 3),
            bulk_ms: round_to(bulk, 3),
            share: cost.filter(|_| span > 0.0).map(|c| round_to(c / span, 3)),
            summary: String::new(),
            saving_s: Maybe(None),
            pipelined_saving_s: Maybe(None),
            without: Maybe(None),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pgwire::query::QueryKind;
    use crate::report::direction::Counts;

    fn query(sent: f64, first: Option<f64>, last: Option<f64>, bytes: u64) -> QueryRecord {
        QueryRecord {
            sql: "SELECT 1".into(),
            sql_truncated: false,
            kind: QueryKind::Simple,
            command_tag: None,
            rows: None,
            data_rows: 0,
            copy_data: 0,
            response_bytes: bytes,
            response_messages: 2,
            sent_s: sent,
            first_response_s: first,
            last_response_s: last,
            sent_frame: 1,
            first_frame: None,
            last_frame: None,
            delivered: Maybe(None),
            error: None,
            notices: Vec::new(),
            notices_total: 0,
            columns: None,
            column_count: None,
            data_row_bytes: 0,
            cancelled_by: None,
            incomplete: false,
            response_segments: 1,
            response_segment_median: None,
            response_segment_max: None,
            response_segment_sizes: Counts::default(),
            goodput_bps: None,
        }
    }

    fn five() -> Vec<QueryRecord> {
        (0..5)
            .map(|i| {
                let t = i as f64 * 0.01;
                query(t, Some(t + 0.001), Some(t + 0.002), 100)
            })
            .collect()
    }

    #[test]
    fn without_a_handshake_the_rtt_samples_serve_and_without_them_nothing() {
        let rt = RoundTrips::of(&five(), (Some(8.0), Some(RttFrom::RttSamples))).unwrap();
        assert_eq!(
            (rt.rtt_from, rt.round_trips_ms),
            (Some(RttFrom::RttSamples), Some(40.0))
        );
        let rt = RoundTrips::of(&five(), (None, None)).unwrap();
        assert_eq!((rt.round_trips_ms, rt.share), (None, None));
        assert!(RoundTrips::of(&five()[..1], (Some(8.0), None)).is_none());
    }

    #[test]
    fn a_conversation_the_clock_gives_no_time_has_no_share() {
        // found by fuzzing: queries whose times are all equal (or run backwards)
        let qs: Vec<_> = (0..3)
            .map(|_| query(1.0, Some(1.0), Some(1.0), 100))
            .collect();
        let rt = RoundTrips::of(&qs, (Some(8.0), Some(RttFrom::Handshake))).unwrap();
        assert_eq!(
            (rt.share, rt.round_trips_ms, rt.span_ms),
            (None, Some(24.0), 0.0)
        );
    }

    #[test]
    fn bulk_responses_count_apart() {
        let mut qs = five();
        qs[2].response_bytes = BULK_BYTES;
        let rt = RoundTrips::of(&qs, (Some(1.0), Some(RttFrom::Handshake))).unwrap();
        assert_eq!((rt.responses_ms, rt.bulk_ms), (5.0, 1.0));
        assert_eq!(rt.span_ms, 42.0);
    }
}
