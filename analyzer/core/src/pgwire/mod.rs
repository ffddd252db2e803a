//! placeholder: filled in by the pgwire port
