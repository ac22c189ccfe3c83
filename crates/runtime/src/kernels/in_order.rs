//! Outputs made on the iterator's pool and handed out in the order they were asked for: how
//! an operator whose own work is light (grouping rows) moves its heavy part (copying them
//! into padded batches) off its thread, while it goes on with its input.
//!
//! `bucket_by_sequence_length` pads each batch on a worker: w6 copies about 200 MB of
//! tokens into padded batches a pass, and on the bucketing thread alone that copy was a
//! third of its time while the parse workers waited for it to take their output (fresh w6
//! passes 95 → 81 ms). At most [`WINDOW_PER_WORKER`] jobs per worker are running or
//! finished but not handed out: each holds its input chunks until it is handed out.

use std::collections::VecDeque;
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Result};

use crate::pool::ThreadPool;

/// Jobs running or not yet handed out, per worker of the pool.
pub(crate) const WINDOW_PER_WORKER: usize = 2;

/// What one job makes: its outputs in order, each a chunk or an error.
pub(crate) type Outputs = Vec<Result<RecordBatch>>;

/// Outputs in order: those made, then the jobs making the next ones.
pub(crate) struct InOrder {
    /// Where jobs run; `None`: on the caller's thread, as they are given.
    pool: Option<Arc<ThreadPool>>,
    /// The operator a job's panic names.
    op: &'static str,
    made: VecDeque<Result<RecordBatch>>,
    running: VecDeque<Receiver<Outputs>>,
}

impl InOrder {
    /// Outputs of jobs run on `pool`, or on the caller's thread without one; a job's panic
    /// becomes an error naming `op`.
    pub(crate) fn new(pool: Option<Arc<ThreadPool>>, op: &'static str) -> Self {
        InOrder { pool, op, made: VecDeque::new(), running: VecDeque::new() }
    }

    /// Whether another job may be started: fewer than the window are running or waiting to
    /// be handed out.
    pub(crate) fn has_room(&self) -> bool {
        let workers = self.pool.as_ref().map_or(1, |p| p.size());
        self.running.len() < WINDOW_PER_WORKER * workers
    }

    /// Makes the outputs of `job` after those already asked for.
    pub(crate) fn push(&mut self, job: impl FnOnce() -> Outputs + Send + 'static) {
        let op = self.op;
        let guarded = move || flumen_udf::closure::guarded(op, || Ok(job())).unwrap_or_else(|e| vec![Err(e)]);
        match &self.pool {
            Some(pool) => {
                let (sender, receiver) = channel();
                // A send fails only when the operator was dropped meanwhile.
                pool.spawn(move || drop(sender.send(guarded())));
                self.running.push_back(receiver);
            }
            None => self.made.extend(guarded()),
        }
    }

    /// Puts `output`, made as it is, after those already asked for.
    pub(crate) fn push_made(&mut self, output: Result<RecordBatch>) {
        if self.running.is_empty() {
            return self.made.push_back(output);
        }
        let (sender, receiver) = channel();
        // The receiver is alive: the send cannot fail.
        drop(sender.send(vec![output]));
        self.running.push_back(receiver);
    }

    /// The next output if it is made, waiting for it when the window is full (no room for
    /// another job) or with `wait`; `None` when it is not made or there are none.
    pub(crate) fn next(&mut self, wait: bool) -> Option<Result<RecordBatch>> {
        loop {
            if let Some(output) = self.made.pop_front() {
                return Some(output);
            }
            let front = self.running.front()?;
            let outputs = match front.try_recv() {
                Ok(outputs) => outputs,
                Err(_) if !wait && self.has_room() => return None,
                Err(_) => self.wait_front(),
            };
            self.running.pop_front();
            self.made.extend(outputs);
        }
    }

    /// Waits for every running job; afterwards all outputs asked for are made.
    pub(crate) fn finish(&mut self) {
        while !self.running.is_empty() {
            let outputs = self.wait_front();
            self.running.pop_front();
            self.made.extend(outputs);
        }
    }

    /// The outputs made and not yet handed out, in order (all of them after [`finish`]).
    ///
    /// [`finish`]: Self::finish
    pub(crate) fn made(&self) -> &VecDeque<Result<RecordBatch>> {
        &self.made
    }

    /// Replaces every output with `made`, as restored from a checkpoint.
    pub(crate) fn restore(&mut self, made: VecDeque<Result<RecordBatch>>) {
        self.finish();
        self.made = made;
    }

    /// The outputs of the oldest running job, once it ends.
    fn wait_front(&self) -> Outputs {
        let front = self.running.front().expect("a running job");
        front.recv().unwrap_or_else(|_| {
            vec![Err(Error::execution(self.op, "a pool worker dropped its job without running it"))]
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Condvar, Mutex};

    use arrow::array::Int64Array;

    use super::*;

    fn chunk(v: i64) -> RecordBatch {
        RecordBatch::try_from_iter([("v", Arc::new(Int64Array::from(vec![v])) as _)]).unwrap()
    }

    fn value(output: Result<RecordBatch>) -> std::result::Result<i64, String> {
        match output {
            Ok(c) => Ok(c.column(0).as_any().downcast_ref::<Int64Array>().unwrap().value(0)),
            Err(e) => Err(e.to_string()),
        }
    }

    /// A gate jobs wait on until the test opens it.
    #[derive(Default)]
    struct Gate {
        open: Mutex<bool>,
        opened: Condvar,
    }

    impl Gate {
        fn wait(&self) {
            let mut open = self.open.lock().unwrap();
            while !*open {
                open = self.opened.wait(open).unwrap();
            }
        }

        fn open(&self) {
            *self.open.lock().unwrap() = true;
            self.opened.notify_all();
        }
    }

    #[test]
    fn outputs_come_in_the_order_asked_for_whichever_job_ends_first() {
        let pool = Arc::new(ThreadPool::new(2));
        let mut jobs = InOrder::new(Some(pool), "test");
        let gate = Arc::new(Gate::default());
        // The first job waits until the second has ended; its outputs still come first.
        let g = gate.clone();
        jobs.push(move || {
            g.wait();
            vec![Ok(chunk(1)), Ok(chunk(2))]
        });
        let (ended, second_ended) = channel();
        jobs.push(move || {
            ended.send(()).unwrap();
            vec![Ok(chunk(3))]
        });
        jobs.push_made(Err(Error::execution("test", "made in place")));
        second_ended.recv().unwrap();
        assert!(jobs.has_room(), "three outputs of a window of four");
        assert!(jobs.next(false).is_none(), "the first job has not ended");
        gate.open();
        let got: Vec<_> = std::iter::from_fn(|| jobs.next(true)).map(value).collect();
        assert_eq!(got[..3], [Ok(1), Ok(2), Ok(3)]);
        assert!(got[3].as_ref().is_err_and(|e| e.contains("made in place")), "{got:?}");
        assert_eq!(got.len(), 4);
    }

    #[test]
    fn a_full_window_waits_for_the_oldest_job() {
        let pool = Arc::new(ThreadPool::new(1));
        let mut jobs = InOrder::new(Some(pool), "test");
        for v in 0..WINDOW_PER_WORKER as i64 {
            jobs.push(move || vec![Ok(chunk(v))]);
        }
        assert!(!jobs.has_room());
        // Without waiting asked for, a full window still gives its oldest output.
        assert_eq!(jobs.next(false).map(value), Some(Ok(0)));
    }

    #[test]
    fn a_panicking_job_is_an_error_in_its_place() {
        for pool in [None, Some(Arc::new(ThreadPool::new(2)))] {
            let mut jobs = InOrder::new(pool, "bucket_by_sequence_length");
            jobs.push(|| vec![Ok(chunk(1))]);
            jobs.push(|| panic!("a pad went wrong"));
            jobs.push(|| vec![Ok(chunk(3))]);
            let got: Vec<_> = std::iter::from_fn(|| jobs.next(true)).map(value).collect();
            assert_eq!(got.len(), 3, "{got:?}");
            assert_eq!((&got[0], &got[2]), (&Ok(1), &Ok(3)));
            let error = got[1].as_ref().unwrap_err();
            assert!(error.contains("bucket_by_sequence_length") && error.contains("a pad went wrong"), "{error}");
        }
    }

    #[test]
    fn finish_makes_every_output_asked_for_and_restore_replaces_them() {
        let mut jobs = InOrder::new(Some(Arc::new(ThreadPool::new(2))), "test");
        for v in 0..3 {
            jobs.push(move || vec![Ok(chunk(v)), Ok(chunk(10 + v))]);
        }
        jobs.finish();
        let made: Vec<_> = jobs.made().iter().map(|r| value(Ok(r.as_ref().unwrap().clone()))).collect();
        assert_eq!(made, [Ok(0), Ok(10), Ok(1), Ok(11), Ok(2), Ok(12)]);
        jobs.push(|| vec![Ok(chunk(7))]);
        jobs.restore(VecDeque::from([Ok(chunk(5))]));
        let got: Vec<_> = std::iter::from_fn(|| jobs.next(true)).map(value).collect();
        assert_eq!(got, [Ok(5)]);
    }
}
