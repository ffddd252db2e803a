//! placeholder: filled in by the transfer port
