//! Asking a running pipeline to stop early, from any thread.
//!
//! An iterator's operators share one [`Cancel`]. Once it is set, producers start no more
//! work (no pull, no task, no read), and a consumer waiting in `next` is woken and gets
//! [`Error::Cancelled`] instead of waiting for the work in flight. A call already running (a
//! user function, a read) is not interrupted: it finishes, and its result is dropped.
//!
//! Operators that wait on a condition variable register a [`Wake`] so that cancelling wakes
//! them; they hold it weakly, so an operator that is gone (a finished `repeat` epoch)
//! costs nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use flumen_ir::{Error, Result};

/// Something waiting on a condition that cancelling must wake.
pub trait Wake: Send + Sync {
    /// Wakes every thread waiting on the condition (taking its lock first, so that a waiter
    /// that checked the flag before it was set is already waiting).
    fn wake(&self);
}

/// An iterator's stop request, shared by its operators.
#[derive(Default)]
pub struct Cancel {
    cancelled: AtomicBool,
    waiters: Mutex<Vec<Weak<dyn Wake>>>,
}

impl std::fmt::Debug for Cancel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cancel").field("cancelled", &self.is_cancelled()).finish()
    }
}

impl Cancel {
    /// A request not yet made.
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Whether the pipeline has been asked to stop.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }

    /// [`Error::Cancelled`] once the pipeline has been asked to stop.
    pub fn check(&self) -> Result<()> {
        match self.is_cancelled() {
            true => Err(Error::Cancelled),
            false => Ok(()),
        }
    }

    /// Asks the pipeline to stop and wakes whatever waits in it; later calls do nothing.
    pub fn cancel(&self) {
        if self.cancelled.swap(true, Ordering::AcqRel) {
            return;
        }
        let waiters = std::mem::take(&mut *self.waiters.lock().expect("cancel waiters"));
        for waiter in waiters.iter().filter_map(Weak::upgrade) {
            waiter.wake();
        }
    }

    /// Wakes `waiter` when the pipeline is asked to stop. One registered after that is
    /// not woken: it sees the flag before it waits.
    pub fn register(&self, waiter: Weak<dyn Wake>) {
        let mut waiters = self.waiters.lock().expect("cancel waiters");
        waiters.retain(|w| w.strong_count() > 0);
        waiters.push(waiter);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    struct Counter(AtomicUsize);

    impl Wake for Counter {
        fn wake(&self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn cancelling_wakes_live_waiters_once_and_forgets_dropped_ones() {
        let cancel = Cancel::new();
        let live = Arc::new(Counter(AtomicUsize::new(0)));
        cancel.register(Arc::downgrade(&live) as Weak<dyn Wake>);
        for _ in 0..3 {
            let gone = Arc::new(Counter(AtomicUsize::new(0)));
            cancel.register(Arc::downgrade(&gone) as Weak<dyn Wake>);
        }
        // Registering prunes the dropped ones: the list does not grow with every epoch.
        assert_eq!(cancel.waiters.lock().unwrap().len(), 2);
        assert!(cancel.check().is_ok());
        cancel.cancel();
        cancel.cancel();
        assert_eq!(live.0.load(Ordering::Relaxed), 1);
        assert!(matches!(cancel.check(), Err(Error::Cancelled)));
    }
}
