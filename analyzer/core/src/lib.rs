//! pktflow's mechanism: read a capture, follow its TCP connections, frame the PostgreSQL
//! protocol on them and measure how the bytes moved. It emits facts (counts, sizes, times,
//! frame numbers) and never words or report layout: interpreting them is Python's part.
//!
//! Data flows one way: `capture` -> `tcp` -> `pgwire` and `transfer` -> `pass` (which wires
//! them per connection and hands out each connection's facts once it is done).

pub mod capture;
pub mod drawing;
pub mod grow;
pub mod histogram;
pub mod packet;
pub mod pass;
pub mod pgwire;
pub mod relay;
pub mod report;
pub mod series;
pub mod tables;
pub mod tcp;
pub mod transfer;
