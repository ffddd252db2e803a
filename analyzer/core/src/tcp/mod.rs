//! The TCP engine: connections, their streams reassembled, each packet classified.

pub mod connection;
pub mod direction;
pub mod engine;
pub mod facts;
pub mod observe;
pub mod options;
mod reassembly;
mod table;

pub use connection::{Connection, ConnectionMeta};
pub use engine::{Handler, TcpEngine, MAX_LATE_FRAMES, MAX_SETTLED};
pub use facts::{ClosedBy, ConnectionFacts, DirectionFacts, Endpoint, EngineFacts, RoleSource};
pub use table::{MAX_GONE, MAX_WAITING};

#[cfg(test)]
mod tests;
