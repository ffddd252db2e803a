//! placeholder: filled in by the tcp port

pub mod observe;
