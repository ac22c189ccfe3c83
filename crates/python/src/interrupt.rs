//! Ctrl-C while `next()` waits on the pipeline.
//!
//! Python runs signal handlers on its main thread between bytecodes, so a main thread
//! blocked in a long `next()` (the GIL released, the pipeline's threads working) would not
//! see `KeyboardInterrupt` until the pull ends, which for a filter that keeps nothing may be
//! never. flumen therefore chains its own SIGINT handler in front of Python's: it calls
//! Python's handler as before, then counts the signal and wakes a watcher thread through a
//! pipe (both async-signal-safe). The watcher cancels the iterators whose `next()` runs on the
//! main thread; that `next()` returns, takes the GIL back and lets Python raise
//! `KeyboardInterrupt`. The iterator stays cancelled.
//!
//! The handler is (re)installed by each `next()` on the main thread whenever SIGINT's
//! handler is a plain function that is not already flumen's (Python's own, or one a later
//! `signal.signal` installed), so it survives handler changes; where SIGINT is ignored or
//! left at its default nothing is installed. After a `fork` the child starts its own
//! watcher. Unix only; elsewhere `next()` simply is not interruptible.

#[cfg(unix)]
pub use unix::{watch, Watch};

#[cfg(not(unix))]
pub use other::{watch, Watch};

#[cfg(unix)]
mod unix {
    use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
    use std::sync::Mutex;

    use flumen::CancelHandle;

    /// SIGINTs seen so far.
    static SIGNALS: AtomicU64 = AtomicU64::new(0);
    /// The handler flumen's chains to.
    static PREVIOUS: AtomicUsize = AtomicUsize::new(0);
    /// The watcher pipe's writing end; -1 before it exists.
    static PIPE: AtomicI32 = AtomicI32::new(-1);
    /// The process that made the pipe and watcher (a forked child makes its own).
    static OWNER: Mutex<u32> = Mutex::new(0);
    /// The `next()` calls running on the main thread: the call, the SIGINTs seen when it
    /// began, its iterator's cancel handle.
    static WAITING: Mutex<Vec<(u64, u64, CancelHandle)>> = Mutex::new(Vec::new());
    /// Numbers the watched calls.
    static CALLS: AtomicU64 = AtomicU64::new(0);

    /// A `next()` on the main thread, cancelled by a SIGINT until dropped.
    pub struct Watch {
        call: u64,
        signals: u64,
    }

    impl Watch {
        /// Whether a SIGINT came since the watch began.
        pub fn interrupted(&self) -> bool {
            SIGNALS.load(Ordering::Acquire) != self.signals
        }
    }

    impl Drop for Watch {
        fn drop(&mut self) {
            WAITING.lock().expect("interrupt watch").retain(|(call, _, _)| *call != self.call);
        }
    }

    /// Watches for Ctrl-C while `cancel`'s iterator is pulled, when called on the process's
    /// main thread (where Python runs signal handlers); `None` elsewhere or where no
    /// handler could be chained.
    pub fn watch(cancel: &CancelHandle) -> Option<Watch> {
        if !on_main_thread() || !install() {
            return None;
        }
        let signals = SIGNALS.load(Ordering::Acquire);
        let call = CALLS.fetch_add(1, Ordering::Relaxed);
        WAITING.lock().expect("interrupt watch").push((call, signals, cancel.clone()));
        let watch = Watch { call, signals };
        // A signal between the caller's last check and the registration: the watcher may
        // have looked before this call was listed.
        if watch.interrupted() {
            cancel.cancel();
        }
        Some(watch)
    }

    #[cfg(target_os = "linux")]
    fn on_main_thread() -> bool {
        // SAFETY: plain system calls without arguments.
        unsafe { libc::gettid() == libc::getpid() }
    }

    #[cfg(not(target_os = "linux"))]
    fn on_main_thread() -> bool {
        // SAFETY: no arguments; answers for the calling thread.
        unsafe { libc::pthread_main_np() == 1 }
    }

    /// Puts flumen's handler in front of SIGINT's current one and starts the watcher;
    /// whether flumen's handler is in place.
    fn install() -> bool {
        let ours = on_sigint as extern "C" fn(libc::c_int) as usize;
        // SAFETY: querying and setting a signal's disposition with valid pointers.
        unsafe {
            let mut current: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGINT, std::ptr::null(), &mut current) != 0 {
                return false;
            }
            if current.sa_sigaction == ours {
                return start_watcher();
            }
            let plain = current.sa_flags & libc::SA_SIGINFO == 0;
            if !plain || current.sa_sigaction == libc::SIG_IGN || current.sa_sigaction == libc::SIG_DFL {
                return false;
            }
            if !start_watcher() {
                return false;
            }
            PREVIOUS.store(current.sa_sigaction, Ordering::Release);
            let mut chained = current;
            chained.sa_sigaction = ours;
            libc::sigaction(libc::SIGINT, &chained, std::ptr::null_mut()) == 0
        }
    }

    /// The SIGINT handler: runs the handler it replaced, then counts and wakes the watcher.
    /// In that order: the signal may land on any thread, and once the watcher has cancelled
    /// the iterator, `next()` returns and asks Python for pending signals, which Python's
    /// handler must already have recorded (else `next()` says cancelled, and the
    /// `KeyboardInterrupt` comes later, wherever Python next checks).
    extern "C" fn on_sigint(signal: libc::c_int) {
        let previous = PREVIOUS.load(Ordering::Acquire);
        if previous != 0 {
            // SAFETY: `previous` was SIGINT's plain (non-SA_SIGINFO) handler function.
            let previous: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(previous) };
            previous(signal);
        }
        SIGNALS.fetch_add(1, Ordering::AcqRel);
        let pipe = PIPE.load(Ordering::Acquire);
        if pipe >= 0 {
            // SAFETY: write(2) is async-signal-safe; a full pipe already holds a wake-up.
            unsafe { libc::write(pipe, [1u8].as_ptr().cast(), 1) };
        }
    }

    /// Makes the pipe and the watcher thread once per process; whether they exist.
    fn start_watcher() -> bool {
        let mut owner = OWNER.lock().expect("interrupt watcher");
        let pid = std::process::id();
        if *owner == pid {
            return true;
        }
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return false;
        }
        for fd in fds {
            // SAFETY: descriptors just made; close-on-exec keeps them out of child programs.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        }
        // SAFETY: the writing end is non-blocking so that the handler never waits.
        unsafe { libc::fcntl(fds[1], libc::F_SETFL, libc::O_NONBLOCK) };
        let read = fds[0];
        let spawned = std::thread::Builder::new().name("flumen-sigint".into()).spawn(move || loop {
            let mut buf = [0u8; 64];
            // SAFETY: reading into a local buffer of its length.
            let n = unsafe { libc::read(read, buf.as_mut_ptr().cast(), buf.len()) };
            if n > 0 {
                // Only the calls that began before the latest signal: the watcher may wake
                // after the main thread has handled it and started another `next()`.
                let now = SIGNALS.load(Ordering::Acquire);
                for (_, _, cancel) in WAITING.lock().expect("interrupt watch").iter().filter(|(_, seen, _)| *seen < now)
                {
                    cancel.cancel();
                }
            } else if n == 0 {
                return;
            }
        });
        if spawned.is_err() {
            return false;
        }
        PIPE.store(fds[1], Ordering::Release);
        *owner = pid;
        true
    }
}

#[cfg(not(unix))]
mod other {
    use flumen::CancelHandle;

    /// Nothing to watch where signals are not Unix's.
    pub struct Watch;

    impl Watch {
        /// Never.
        pub fn interrupted(&self) -> bool {
            false
        }
    }

    /// `None`: `next()` is not interruptible here.
    pub fn watch(_cancel: &CancelHandle) -> Option<Watch> {
        None
    }
}
