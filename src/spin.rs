//! Receiving with a short poll before sleeping.
//!
//! On a VM, waking a thread that sleeps on another vCPU costs 20-25 µs, several times the
//! work of a whole round trip. A thread that polls its queue for a few tens of
//! microseconds after each message is still awake when the next one comes in a busy
//! exchange, and the hop costs well under a microsecond. The poll yields the CPU on every
//! turn, ends after `spin`, and is skipped where only one CPU is usable (there it would
//! only delay the thread it waits for).

use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvError, RecvTimeoutError, TryRecvError};

/// How long to poll, given the configured value and the CPUs this process may use.
pub(crate) fn effective(spin: Duration) -> Duration {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    if *CPUS.get_or_init(crate::sys::usable_cpus) > 1 {
        spin
    } else {
        Duration::ZERO
    }
}

/// Polls for up to `spin`, then blocks (no bound: the caller's queue closes at shutdown).
pub(crate) fn recv<T>(rx: &Receiver<T>, spin: Duration) -> Result<T, RecvError> {
    match poll(rx, spin) {
        Some(Ok(v)) => Ok(v),
        Some(Err(())) => Err(RecvError),
        None => rx.recv(),
    }
}

/// Polls for up to `spin`, then blocks for up to `timeout`.
pub(crate) fn recv_timeout<T>(
    rx: &Receiver<T>,
    spin: Duration,
    timeout: Duration,
) -> Result<T, RecvTimeoutError> {
    match poll(rx, spin) {
        Some(Ok(v)) => Ok(v),
        Some(Err(())) => Err(RecvTimeoutError::Disconnected),
        None => rx.recv_timeout(timeout),
    }
}

fn poll<T>(rx: &Receiver<T>, spin: Duration) -> Option<Result<T, ()>> {
    if spin.is_zero() {
        return None;
    }
    let start = Instant::now();
    loop {
        match rx.try_recv() {
            Ok(v) => return Some(Ok(v)),
            Err(TryRecvError::Disconnected) => return Some(Err(())),
            Err(TryRecvError::Empty) if start.elapsed() >= spin => return None,
            Err(TryRecvError::Empty) => std::thread::yield_now(),
        }
    }
}
