//! The core's pass on a thread of its own, running ahead of Python: it reads the capture,
//! runs the engine and the analyses, and builds each retired connection's judgement and record,
//! while the Python thread judges the connections before them. A step of the pass is sent as
//! chunks of at most CHUNK connections or about CHUNK_QUERIES queries, each built as it is
//! sent, at most QUEUED chunks ahead: a storm's burst of retirements never waits whole as
//! judgements, nor do a pooler's long server connections, which the capture's end retires
//! together, wait whole as facts and records (up to 10,000 queries each). The capture's end (which
//! retires every connection still open, the largest burst of all) is taken only once Python
//! asks for the step that holds it, as a pass on one thread would.

use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use pktflow_core::capture::CaptureStats;
use pktflow_core::pass::{Pass, Retired};
use pktflow_core::relay::LegExtras;
use pktflow_core::report::conversation::QueryRecord;
use pktflow_core::report::spool::SpoolError;
use pktflow_core::report::{judge_and_record, ConnectionRecord, Judged, Judgement};
use pktflow_core::tcp::EngineFacts;
use pktflow_core::transfer::LIMITS;

const CHUNK: usize = 256;
/// A chunk closes once its connections list this many queries (each counting one more).
const CHUNK_QUERIES: usize = 4_096;
/// Two chunks ahead keep both threads busy; each more held a storm's 256 records and
/// judgements (about 6 MB at the 4x storm's peak) for no time gained.
const QUEUED: usize = 2;

/// A retired connection: its number, judgement, record, and what only the relay stage reads.
pub type Judging = (u64, Judgement, ConnectionRecord, LegExtras);

/// Judgements and records Python is done with, sent back to be freed on the pass thread that
/// built them. Freed on Python's thread, each block went back to the pass thread's malloc
/// arena under that arena's lock, and the two threads queued at the lock: a storm's run made
/// 3,500 to 16,000 context switches, and took 0.87 s or 1.44 s as the threads happened to meet.
pub type Spent = Vec<(Judgement, ConnectionRecord)>;

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
    /// Following a stream: the queries said final during the step, by connection number, with
    /// the seconds their responses gave to each limit.
    Queries(Vec<(u64, QueryRecord, Option<[f64; LIMITS]>)>),
    /// The step is over: where the pass stands; `more` false once the capture is done.
    StepEnd { snapshot: Box<Snapshot>, more: bool },
    /// The core panicked: where and why.
    Panicked(String),
    /// A long connection's queries could not be read back from the spool.
    Spool(SpoolError),
}

/// How many steps Python has asked for, and whether it has gone: the pass thread waits on
/// it before taking the capture's end.
#[derive(Default)]
struct Gate {
    state: Mutex<(u64, bool)>,
    changed: Condvar,
}

impl Gate {
    fn ask(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.0 += 1;
            self.changed.notify_all();
        }
    }

    fn cancel(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.1 = true;
            self.changed.notify_all();
        }
    }

    /// Wait until step `n` (counted from 1) is asked for; false when Python has gone.
    fn wait_for(&self, n: u64) -> bool {
        let Ok(mut s) = self.state.lock() else {
            return false;
        };
        while s.0 < n && !s.1 {
            s = match self.changed.wait(s) {
                Ok(s) => s,
                Err(_) => return false,
            };
        }
        !s.1
    }
}

pub struct Producer {
    rx: Option<Receiver<Message>>,
    spent: Sender<Spent>,
    handle: Option<JoinHandle<Pass>>,
    gate: Arc<Gate>,
}

fn snapshot(pass: &Pass) -> Box<Snapshot> {
    Box::new(Snapshot {
        records: pass.records(),
        engine: pass.engine_facts(),
        stats: pass.stats().clone(),
    })
}

/// Step `n` of the pass: feed a batch (at the capture's end, once asked for, end it) and
/// take the connections it retired. Whether more steps follow; None when Python has gone.
fn step(pass: &mut Pass, gate: &Gate, n: u64, done: &mut Vec<Retired>) -> Option<bool> {
    let more = pass.feed();
    if !more {
        if !gate.wait_for(n) {
            return None;
        }
        crate::memory::give_back_free_pages();
        pass.end();
    }
    pass.take_retired(done);
    Some(more)
}

/// `f` with a panic sent to Python as a message (None then).
fn unwound<T>(tx: &SyncSender<Message>, f: impl FnOnce() -> T) -> Option<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(v) => Some(v),
        Err(_) => {
            let _ = tx.send(Message::Panicked(crate::PANIC.with(|p| p.take())));
            None
        }
    }
}

fn run(
    mut pass: Pass,
    judged: Judged,
    tx: SyncSender<Message>,
    spent: Receiver<Spent>,
    gate: Arc<Gate>,
) -> Pass {
    let mut done = Vec::new();
    for n in 1.. {
        let Some(Some(more)) = unwound(&tx, || step(&mut pass, &gate, n, &mut done)) else {
            return pass;
        };
        let start = pass.start();
        let finals = pass.take_final_queries();
        if !finals.is_empty() {
            let queries = (finals.into_iter())
                .map(|(number, facts, limits)| (number, QueryRecord::of(facts, start), limits))
                .collect();
            if tx.send(Message::Queries(queries)).is_err() {
                return pass;
            }
        }
        let mut reports = done.drain(..);
        loop {
            spent.try_iter().for_each(drop);
            let built = unwound(&tx, || {
                let mut chunk: Vec<Judging> = Vec::new();
                let mut weight = 0;
                while chunk.len() < CHUNK && weight < CHUNK_QUERIES {
                    let Some(retired) = reports.next() else {
                        break;
                    };
                    weight += retired.queries() + 1;
                    let report = retired.report()?;
                    let number = report.tcp.number;
                    let (judgement, record, extras) = judge_and_record(report, start, judged);
                    chunk.push((number, judgement, record, extras));
                }
                Ok(chunk)
            });
            let chunk = match built {
                Some(Ok(chunk)) => chunk,
                Some(Err(e)) => {
                    let _ = tx.send(Message::Spool(e));
                    return pass;
                }
                None => return pass,
            };
            if chunk.is_empty() {
                break;
            }
            if tx.send(Message::Chunk(chunk)).is_err() {
                return pass; // the reader is gone (an exception in Python)
            }
        }
        drop(reports);
        let end = Message::StepEnd {
            snapshot: snapshot(&pass),
            more,
        };
        if tx.send(end).is_err() || !more {
            return pass;
        }
    }
    pass
}

impl Producer {
    pub fn start(pass: Pass, judged: Judged) -> Self {
        let (tx, rx) = sync_channel(QUEUED);
        let (spent, spent_rx) = channel();
        let gate = Arc::new(Gate::default());
        let theirs = Arc::clone(&gate);
        let handle = std::thread::Builder::new()
            .name("pktflow-pass".into())
            .spawn(move || run(pass, judged, tx, spent_rx, theirs));
        Producer {
            // no thread to be had: nothing runs, and the first receive says so
            rx: handle.is_ok().then_some(rx),
            spent,
            handle: handle.ok(),
            gate,
        }
    }

    /// What Python is done with, to be freed by the pass thread (once it has gone, here).
    pub fn give_back(&self, spent: Spent) {
        let _ = self.spent.send(spent);
    }

    /// Python asks for the next step (counted, so the capture's end waits for its own).
    pub fn ask(&self) {
        self.gate.ask();
    }

    /// The next message if one comes within `wait` (so that the caller can look at signals
    /// meanwhile): Err(true) when none came yet, Err(false) once the thread is gone.
    pub fn next_within(&self, wait: std::time::Duration) -> Result<Message, bool> {
        let rx = self.rx.as_ref().ok_or(false)?;
        rx.recv_timeout(wait)
            .map_err(|e| matches!(e, std::sync::mpsc::RecvTimeoutError::Timeout))
    }

    /// The pass back, once its thread has ended.
    pub fn join(mut self) -> Option<Pass> {
        self.rx = None;
        self.handle.take()?.join().ok()
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        // the sender's next send fails, a wait for the end gives up, and the thread ends
        self.rx = None;
        self.gate.cancel();
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}
