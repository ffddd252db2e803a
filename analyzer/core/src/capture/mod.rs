//! Reading captures: the facts about problems, the read-ahead window over a plain or
//! gzipped file, link layers and IP/TCP headers.

pub mod error;
mod gzip;
pub mod ip;
pub mod link;
pub mod stats;
mod window;
