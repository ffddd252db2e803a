//! The report's facts in the report's layout ("pktflow.report/1"), owned by the core: each
//! connection's record built from its facts when the engine retires it, what Python reads to
//! judge it (`judgement`), and where Python's words go (`words`). Python adds words and
//! judgement; it never rebuilds a fact.

pub mod cancels;
pub mod connection;
pub mod conversation;
pub mod direction;
pub mod document;
pub mod json;
pub mod judgement;
pub mod numbers;
pub mod round_trips;
pub mod spool;
pub mod values;
pub mod words;

pub use connection::{CapturePoint, ConnectionRecord, Role};
pub use document::{Assembly, CaptureRecord, CaptureWords, Report, ReportError};
pub use judgement::{judge_and_record, Judged, Judgement};
pub use words::{Finding, Verdict, Words};
