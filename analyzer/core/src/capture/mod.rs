//! Reading captures: link layers and IP/TCP headers first.

pub mod ip;
pub mod link;
