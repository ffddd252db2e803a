//! The engine fed crafted packets: the substance of the reference's tests/test_tcp_engine.py
//! and tests/test_retire.py, and bounds and hostile input besides.

mod bounds;
mod engine;
mod facts;
mod flow;
mod retire;
