//! A value only `&mut self` methods of a Python object reach. PyO3 asks a class to be Sync:
//! the object may be used, and dropped, on any thread that holds it (a Dask worker's profiler
//! holds a task's frames for a moment, and a report or a pass left in them was dropped on the
//! profiler's thread, which an `unsendable` class refuses: it leaks instead, and says so). A
//! Mutex makes a Send value Sync; exclusive access never takes its lock.

use std::sync::Mutex;

pub struct Exclusive<T>(Mutex<T>);

impl<T> Exclusive<T> {
    pub fn new(value: T) -> Self {
        Exclusive(Mutex::new(value))
    }

    /// The value: `&mut self` is exclusive already, so no lock is taken (a panic while it was
    /// borrowed poisons nothing here: the value is taken as it stands).
    pub fn get_mut(&mut self) -> &mut T {
        self.0.get_mut().unwrap_or_else(|p| p.into_inner())
    }
}
