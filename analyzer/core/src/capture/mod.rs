//! placeholder: filled in by the capture port
