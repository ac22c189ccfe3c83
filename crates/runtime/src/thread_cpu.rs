//! The CPU time the calling thread has used, to tell a task that computes from one that
//! waits (a read, a remote call, a sleep): the autotuner charges only the first against the
//! cores.

use std::time::Duration;

/// The CPU time the calling thread has used so far (`CLOCK_THREAD_CPUTIME_ID`); `None`
/// where the platform does not say.
#[cfg(unix)]
pub fn thread_cpu_time() -> Option<Duration> {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid timespec for the call to fill.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } == 0;
    ok.then(|| Duration::new(t.tv_sec as u64, t.tv_nsec as u32))
}

/// The CPU time the calling thread has used so far; `None` where the platform does not say.
#[cfg(not(unix))]
pub fn thread_cpu_time() -> Option<Duration> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_uses_no_cpu_and_computing_does() {
        let Some(start) = thread_cpu_time() else { return };
        let mut x = 1.0f64;
        // Computing moves this thread's clock by 10 ms, however loaded the machine is (a
        // wall-clock budget would not: other work may take the core); a clock that does not
        // follow computing never gets there, and the generous wall-time cap fails instead.
        let begin = std::time::Instant::now();
        while thread_cpu_time().unwrap() - start < Duration::from_millis(10) {
            x = std::hint::black_box((x * x + 1.0).sqrt());
            assert!(begin.elapsed() < Duration::from_secs(60), "the thread's CPU clock does not follow computing");
        }
        let before = thread_cpu_time().unwrap();
        // Blocked on a channel nobody sends to, for a bounded time: no CPU used.
        let (_tx, rx) = std::sync::mpsc::channel::<()>();
        let _ = rx.recv_timeout(Duration::from_millis(20));
        assert!(thread_cpu_time().unwrap() - before < Duration::from_millis(10));
    }
}
