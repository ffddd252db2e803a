//! The core's pass on a thread of its own, running ahead of Python: it reads the capture,
//! runs the engine and the analyses, and builds each retired connection's judgement and record,
//! while the Python thread judges the connections before them. A step of the pass is sent as
//! chunks of at most CHUNK connections, at most QUEUED chunks ahead: a storm's burst of
//! retirements never waits whole in memory.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use pktflow_core::capture::CaptureStats;
use pktflow_core::pass::Pass;
use pktflow_core::report::{judge_and_record, ConnectionRecord, Judged, Judgement};
use pktflow_core::tcp::EngineFacts;

const CHUNK: usize = 256;
const QUEUED: usize = 8;

/// A retired connection, its number, judgement and record.
pub type Judging = (u64, Judgement, ConnectionRecord);

/// Where the pass stood after a step: what `records`, `engine` and `stats` say then.
#[derive(Clone)]
pub struct Snapshot {
    pub records: u64,
    pub engine: EngineFacts,
    pub stats: CaptureStats,
}

pub enum Message {
    /// Connections of the current step.
    Chunk(Vec<Judging>),
    /// The step is over: where the pass stands; `more` false once the capture is done.
    StepEnd { snapshot: Box<Snapshot>, more: bool },
    /// The core panicked: where and why.
    Panicked(String),
}

pub struct Producer {
    rx: Option<Receiver<Message>>,
    handle: Option<JoinHandle<Pass>>,
}

fn snapshot(pass: &Pass) -> Box<Snapshot> {
    Box::new(Snapshot {
        records: pass.records(),
        engine: pass.engine_facts(),
        stats: pass.stats().clone(),
    })
}

fn run(mut pass: Pass, judged: Judged, tx: SyncSender<Message>) -> Pass {
    let mut done = Vec::new();
    loop {
        let step = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let more = pass.step(&mut done);
            let start = pass.start();
            let judging: Vec<Judging> = done
                .drain(..)
                .map(|report| {
                    let number = report.tcp.number;
                    let (judgement, record) = judge_and_record(report, start, judged);
                    (number, judgement, record)
                })
                .collect();
            (more, judging)
        }));
        let (more, judging) = match step {
            Ok(stepped) => stepped,
            Err(_) => {
                let _ = tx.send(Message::Panicked(crate::PANIC.with(|p| p.take())));
                return pass;
            }
        };
        let mut judging = judging.into_iter().peekable();
        while judging.peek().is_some() {
            let chunk: Vec<Judging> = judging.by_ref().take(CHUNK).collect();
            if tx.send(Message::Chunk(chunk)).is_err() {
                return pass; // the reader is gone (an exception in Python)
            }
        }
        let end = Message::StepEnd {
            snapshot: snapshot(&pass),
            more,
        };
        if tx.send(end).is_err() || !more {
            return pass;
        }
    }
}

impl Producer {
    pub fn start(pass: Pass, judged: Judged) -> Self {
        let (tx, rx) = sync_channel(QUEUED);
        let handle = std::thread::Builder::new()
            .name("pktflow-pass".into())
            .spawn(move || run(pass, judged, tx));
        match handle {
            Ok(handle) => Producer {
                rx: Some(rx),
                handle: Some(handle),
            },
            // no thread to be had: nothing runs, and the first receive says so
            Err(_) => Producer {
                rx: None,
                handle: None,
            },
        }
    }

    /// The next message; None once the pass thread is gone without a word (it could not
    /// start, or it stopped).
    pub fn next(&self) -> Option<Message> {
        self.rx.as_ref()?.recv().ok()
    }

    /// The pass back, once its thread has ended.
    pub fn join(mut self) -> Option<Pass> {
        self.rx = None;
        self.handle.take()?.join().ok()
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        // the sender's next send fails and the thread ends
        self.rx = None;
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}
