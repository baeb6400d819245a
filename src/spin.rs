//! Receiving with a short poll before sleeping.
//!
//! On a VM, waking a thread that sleeps on another vCPU costs 20-25 µs, several times the
//! work of a whole round trip. A thread that polls its queue for a few tens of
//! microseconds after each message is still awake when the next one comes in a busy
//! exchange, and the hop costs well under a microsecond. The poll yields the CPU on every
//! turn, ends after `spin`, and is skipped where only one CPU is usable (there it would
//! only delay the thread it waits for).

use std::time::{Duration, Instant};

#[cfg(feature = "host")]
use crossbeam_channel::RecvTimeoutError;
use crossbeam_channel::{Receiver, RecvError, TryRecvError};

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
#[cfg(feature = "host")]
pub(crate) fn recv<T>(rx: &Receiver<T>, spin: Duration) -> Result<T, RecvError> {
    match poll(rx, spin) {
        Some(Ok(v)) => Ok(v),
        Some(Err(())) => Err(RecvError),
        None => rx.recv(),
    }
}

/// Polls for up to `spin`, then blocks for up to `timeout`.
#[cfg(feature = "host")]
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

#[cfg(feature = "host")]
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

/// Adaptive polling for one thread: poll only while messages arrive faster than a
/// wake-up costs, and never for more than a fixed share of the time.
///
/// Each arrival updates a moving average of the gap between messages. The thread polls
/// after a message only when that average is below `max` (a busy exchange, where the next
/// message will likely come before a sleeping thread could be woken), for at most twice the
/// average gap and never more than `max`. A token bucket caps the polling at
/// one part in [`POLL_SHARE`] of the wall time (at most [`POLL_BURST`] at once), so a pattern that
/// defeats the average still cannot burn more than that. At a paced load (a message every
/// 0.5 ms, say) the average gap is far above `max`: the thread sleeps at once and costs only
/// its work.
pub(crate) struct Poller {
    max: Duration,
    last: Option<Instant>,
    /// Moving average of the gap between arrivals, in nanoseconds.
    gap_ns: u64,
    /// Polling time still allowed, in nanoseconds, and when it was last topped up.
    tokens_ns: u64,
    topped: Instant,
}

/// The share of wall time a thread may spend polling: one part in this many.
pub(crate) const POLL_SHARE: u64 = 4;

/// The most polling time a thread may save up.
pub(crate) const POLL_BURST: Duration = Duration::from_micros(500);

impl Poller {
    /// A poller that polls at most `max` after a message (`Duration::ZERO`: never).
    pub fn new(max: Duration) -> Poller {
        Poller {
            max,
            last: None,
            gap_ns: u64::MAX,
            tokens_ns: 0,
            topped: Instant::now(),
        }
    }

    /// Receives the next message: polls for the window the recent traffic earns, then
    /// blocks (no bound: the queue closes at shutdown).
    pub fn recv<T>(&mut self, rx: &Receiver<T>) -> Result<T, RecvError> {
        if let Some(got) = self.poll(rx) {
            return got.map_err(|()| RecvError);
        }
        let got = rx.recv();
        self.arrived(Instant::now());
        got
    }

    /// The window the recent traffic earns now.
    fn window(&mut self, now: Instant) -> Duration {
        if self.max.is_zero() || self.gap_ns >= nanos(self.max) {
            return Duration::ZERO;
        }
        let earned = nanos(now.duration_since(self.topped)) / POLL_SHARE;
        self.tokens_ns = (self.tokens_ns + earned).min(nanos(POLL_BURST));
        self.topped = now;
        let want = self
            .max
            .min(Duration::from_nanos(self.gap_ns.saturating_mul(2)));
        want.min(Duration::from_nanos(self.tokens_ns))
    }

    fn poll<T>(&mut self, rx: &Receiver<T>) -> Option<Result<T, ()>> {
        match rx.try_recv() {
            Ok(v) => {
                self.arrived(Instant::now());
                return Some(Ok(v));
            }
            Err(TryRecvError::Disconnected) => return Some(Err(())),
            Err(TryRecvError::Empty) => {}
        }
        let start = Instant::now();
        let window = self.window(start);
        if window.is_zero() {
            return None;
        }
        let got = loop {
            match rx.try_recv() {
                Ok(v) => break Some(Ok(v)),
                Err(TryRecvError::Disconnected) => break Some(Err(())),
                Err(TryRecvError::Empty) if start.elapsed() >= window => break None,
                Err(TryRecvError::Empty) => std::thread::yield_now(),
            }
        };
        let now = Instant::now();
        let spent = nanos(now.duration_since(start));
        self.tokens_ns = self.tokens_ns.saturating_sub(spent);
        if got.is_some() {
            self.arrived(now);
        }
        got
    }

    fn arrived(&mut self, now: Instant) {
        if let Some(last) = self.last {
            let gap = nanos(now.duration_since(last));
            self.gap_ns = if self.gap_ns == u64::MAX {
                gap
            } else {
                (self.gap_ns * 3 + gap) / 4
            };
        }
        self.last = Some(now);
    }
}

/// Nanoseconds in 64 bits (plenty for the gaps measured here; saturates past 584 years).
fn nanos(d: Duration) -> u64 {
    d.as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(d.subsec_nanos()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paced_stream_earns_no_polling() {
        let mut p = Poller::new(Duration::from_micros(50));
        let t0 = Instant::now();
        for i in 0..10u32 {
            p.arrived(t0 + Duration::from_micros(500) * i);
        }
        assert_eq!(p.window(t0 + Duration::from_millis(10)), Duration::ZERO);
    }

    #[test]
    fn a_busy_stream_polls_within_the_budget() {
        let mut p = Poller::new(Duration::from_micros(50));
        let t0 = Instant::now();
        for i in 0..10u32 {
            p.arrived(t0 + Duration::from_micros(10) * i);
        }
        // 100 µs of wall time earned 25 µs of polling; the gap allows 20.
        let w = p.window(t0 + Duration::from_micros(100));
        assert!(
            w > Duration::ZERO && w <= Duration::from_micros(20),
            "{w:?}"
        );
        // Spending the budget leaves nothing until more time passes.
        p.tokens_ns = 0;
        let w = p.window(t0 + Duration::from_micros(100));
        assert_eq!(w, Duration::ZERO);
    }

    #[test]
    fn zero_never_polls() {
        let mut p = Poller::new(Duration::ZERO);
        let t0 = Instant::now();
        p.arrived(t0);
        p.arrived(t0 + Duration::from_nanos(10));
        assert_eq!(p.window(t0 + Duration::from_secs(1)), Duration::ZERO);
    }
}
