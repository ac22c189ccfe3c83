//! The per-pipeline thread pool: where parallel operators run user functions and batch copies.
//!
//! Each iterator owns its pool (not rayon's global one), so one pipeline's compute cannot be
//! starved by another's, and blocking reads never occupy it: operators that wait on input
//! (prefetch producers, interleave readers) run on threads of their own, and pool jobs only
//! compute. Workers start with the first job, so a sequential pipeline starts no thread, and
//! dropping the last handle stops and joins them all: no thread outlives its iterator.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

type Job = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    shutdown: bool,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
}

/// A fixed-size pool of worker threads running jobs in submission order.
pub struct ThreadPool {
    size: usize,
    shared: Arc<Shared>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadPool").field("size", &self.size).finish()
    }
}

impl ThreadPool {
    /// A pool of `size` workers (at least one), started on the first job.
    pub fn new(size: usize) -> Self {
        ThreadPool { size: size.max(1), shared: Arc::default(), workers: Mutex::default() }
    }

    /// The number of workers.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Runs `job` on a worker. A job must not block waiting for other jobs of the pool.
    pub fn spawn(&self, job: impl FnOnce() + Send + 'static) {
        self.start();
        let mut queue = self.shared.queue.lock().expect("pool queue");
        queue.jobs.push_back(Box::new(job));
        drop(queue);
        self.shared.ready.notify_one();
    }

    fn start(&self) {
        let mut workers = self.workers.lock().expect("pool workers");
        while workers.len() < self.size {
            let shared = self.shared.clone();
            let name = format!("flumen-pool-{}", workers.len());
            let handle = std::thread::Builder::new().name(name).spawn(move || work(&shared));
            match handle {
                Ok(handle) => workers.push(handle),
                // Out of threads: the workers already running take the jobs.
                Err(_) if !workers.is_empty() => break,
                Err(e) => panic!("flumen: cannot start a pool thread: {e}"),
            }
        }
    }
}

fn work(shared: &Shared) {
    loop {
        let job = {
            let mut queue = shared.queue.lock().expect("pool queue");
            loop {
                if queue.shutdown {
                    return;
                }
                if let Some(job) = queue.jobs.pop_front() {
                    break job;
                }
                queue = shared.ready.wait(queue).expect("pool queue");
            }
        };
        // Jobs report their own failures; a panic that escapes one must not kill the worker.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        // Queued jobs are dropped unrun: their results have no reader any more.
        self.shared.queue.lock().expect("pool queue").shutdown = true;
        self.shared.ready.notify_all();
        for handle in self.workers.get_mut().expect("pool workers").drain(..) {
            let _ = handle.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

    use super::*;

    #[test]
    fn runs_every_job_and_joins_on_drop() {
        let pool = ThreadPool::new(3);
        let done = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = mpsc::channel();
        for i in 0..100 {
            let done = done.clone();
            let tx = tx.clone();
            pool.spawn(move || {
                done.fetch_add(1, Ordering::SeqCst);
                tx.send(i).unwrap();
            });
        }
        let mut got: Vec<i32> = rx.iter().take(100).collect();
        got.sort();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
        drop(pool);
        assert_eq!(done.load(Ordering::SeqCst), 100);
    }

    #[test]
    fn a_panicking_job_leaves_the_worker_alive() {
        let pool = ThreadPool::new(1);
        pool.spawn(|| panic!("job failure"));
        let (tx, rx) = mpsc::channel();
        pool.spawn(move || tx.send(7).unwrap());
        assert_eq!(rx.recv().unwrap(), 7);
    }

    #[test]
    fn starts_no_thread_before_the_first_job() {
        let pool = ThreadPool::new(4);
        assert!(pool.workers.lock().unwrap().is_empty());
    }
}
