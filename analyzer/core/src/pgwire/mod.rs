//! The PostgreSQL wire protocol on one connection: framing, messages, queries and their
//! responses, rebuilt from the two byte streams the TCP engine hands over. Facts only
//! (facts.rs); Python turns them into the report's keys and findings.

pub mod conversation;
pub mod counts;
pub mod detect;
pub mod facts;
pub mod framing;
mod handle;
pub mod held;
pub mod messages;
mod names;
pub mod query;
mod segments;
pub mod shape;
mod start;
pub mod tls;
mod walk;

#[cfg(test)]
mod tests;

pub use conversation::{Conversation, LiveQueries};
pub use facts::{ConversationFacts, Event, QueryFacts, StopReason};
