//! Receiving with a short poll before sleeping, where it pays.
//!
//! On a VM, waking a thread that sleeps on another vCPU costs 20-25 µs, several times the
//! work of a whole round trip. A thread that polls its queue for a few tens of
//! microseconds is still awake when the next message comes in a busy exchange, and the hop
//! costs well under a microsecond; at a paced load or with slow tools the same poll only
//! burns CPU. So a thread polls only while its messages have recently come faster than
//! that ([`Poller`] for one receiving thread, `ReplyPoller` for callers waiting for
//! replies). A poll yields the CPU on every turn and is skipped where only one CPU is
//! usable (there it would only delay the thread it waits for); a caller waiting for a
//! reply still yields a few times before it sleeps (`YIELDS`).

#[cfg(feature = "host")]
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[cfg(feature = "host")]
use crossbeam_channel::RecvTimeoutError;
use crossbeam_channel::{Receiver, RecvError, TryRecvError};

/// How long to poll, given the configured value and the CPUs the calling thread may use
/// now (its threads inherit that mask). Asked once per plugin, or per plugin process a
/// host starts, so a program that pins itself before starting a host gets the right one.
pub(crate) fn effective(spin: Duration) -> Duration {
    if crate::sys::usable_cpus() > 1 {
        spin
    } else {
        Duration::ZERO
    }
}

/// What can be polled: a queue, or a caller's mailbox.
trait TryRecv<T> {
    fn try_recv(&self) -> Result<T, TryRecvError>;
}

impl<T> TryRecv<T> for Receiver<T> {
    fn try_recv(&self) -> Result<T, TryRecvError> {
        Receiver::try_recv(self)
    }
}

#[cfg(feature = "host")]
impl<T> TryRecv<T> for crate::oneshot::Receiver<T> {
    fn try_recv(&self) -> Result<T, TryRecvError> {
        crate::oneshot::Receiver::try_recv(self)
    }
}

/// One look at `rx`: the value, `Err` once it is closed, `None` while it is empty.
fn look<T>(rx: &impl TryRecv<T>) -> Option<Result<T, ()>> {
    match rx.try_recv() {
        Ok(v) => Some(Ok(v)),
        Err(TryRecvError::Disconnected) => Some(Err(())),
        Err(TryRecvError::Empty) => None,
    }
}

/// Polls `rx` for at most `window`, yielding the CPU on every turn; `None` when nothing
/// came (and the queue is still open).
fn poll_for<T>(rx: &impl TryRecv<T>, window: Duration) -> Option<Result<T, ()>> {
    let start = Instant::now();
    loop {
        let got = look(rx);
        if got.is_some() || start.elapsed() >= window {
            return got;
        }
        std::thread::yield_now();
    }
}

/// Yields the CPU up to [`YIELDS`] times, looking at `rx` after each; `None` when nothing
/// came (and it is still open).
#[cfg(feature = "host")]
fn yield_for<T>(rx: &impl TryRecv<T>) -> Option<Result<T, ()>> {
    (0..YIELDS).find_map(|_| {
        std::thread::yield_now();
        look(rx)
    })
}

/// After its poll window (or without one), a caller waiting for a reply yields the CPU up
/// to this many times, looking for its reply after each, before it sleeps. Where the plugin
/// shares the caller's CPU (one usable CPU, or both pinned to one), a yield runs the plugin
/// and the host's reader, and the reply is in when the caller comes back: no sleep and no
/// wake-up. With both pinned to one CPU, going to sleep at once made invokes through the
/// host about a quarter slower (`echo` p50 38.5-39.5 µs against 29.5-30.7 µs with the
/// yields, in the same spell; a scratch loop of 3,000 alternating `echo` and `sample`
/// invokes). Where nothing else is ready to run, a yield returns at once: one system call.
#[cfg(feature = "host")]
const YIELDS: usize = 4;

/// Adaptive polling for callers waiting for their replies (any number of threads): poll
/// only while replies come back faster than a wake-up costs.
///
/// Each reply updates a moving average of the time from sending a request to its reply. A
/// caller polls for its reply only while that average is below `max`, for at most twice the
/// average and never more than `max`, and only one caller polls at a time (several callers
/// in flight keep the host busy anyway). A host calling tools that take a millisecond
/// learns it within a few calls and then sleeps (after the [`YIELDS`]), costing little
/// more than its work; one in a lock-step exchange with a quick tool saves the wake-up on
/// every reply.
#[cfg(feature = "host")]
pub(crate) struct ReplyPoller {
    max: Duration,
    /// Moving average of the reply time, in nanoseconds (`u64::MAX`: none seen yet).
    /// Updated without a lock: a lost update only delays the average by one reply.
    avg_ns: AtomicU64,
    polling: AtomicBool,
}

#[cfg(feature = "host")]
impl ReplyPoller {
    /// A poller that polls at most `max` for a reply (`Duration::ZERO`: never).
    pub fn new(max: Duration) -> ReplyPoller {
        ReplyPoller {
            max,
            avg_ns: AtomicU64::new(u64::MAX),
            polling: AtomicBool::new(false),
        }
    }

    /// Waits for the reply to a request sent at `sent`: polls for the window recent replies
    /// earn (unless another caller is polling), yields a few times, then blocks for what is
    /// left of `timeout`.
    pub fn recv_timeout<T>(
        &self,
        rx: &crate::oneshot::Receiver<T>,
        sent: Instant,
        timeout: Duration,
    ) -> Result<T, RecvTimeoutError> {
        let window = self.window().min(timeout);
        let polled = if !window.is_zero() && !self.polling.swap(true, Ordering::Acquire) {
            let got = poll_for(rx, window);
            self.polling.store(false, Ordering::Release);
            got
        } else {
            None
        };
        let polled = polled.or_else(|| yield_for(rx));
        let got = match polled {
            Some(Ok(v)) => Ok(v),
            Some(Err(())) => Err(RecvTimeoutError::Disconnected),
            None => rx.recv_timeout(timeout.saturating_sub(sent.elapsed())),
        };
        if got.is_ok() {
            self.replied(sent.elapsed());
        }
        got
    }

    /// How long a caller may poll now.
    fn window(&self) -> Duration {
        let avg = self.avg_ns.load(Ordering::Relaxed);
        if self.max.is_zero() || avg >= nanos(self.max) {
            return Duration::ZERO;
        }
        self.max.min(Duration::from_nanos(avg.saturating_mul(2)))
    }

    fn replied(&self, took: Duration) {
        let took = nanos(took);
        let avg = self.avg_ns.load(Ordering::Relaxed);
        let next = if avg == u64::MAX {
            took
        } else {
            (avg.saturating_mul(3).saturating_add(took)) / 4
        };
        self.avg_ns.store(next, Ordering::Relaxed);
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
        let got = poll_for(rx, window);
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
pub(crate) fn nanos(d: Duration) -> u64 {
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

    #[cfg(feature = "host")]
    #[test]
    fn callers_poll_only_while_replies_come_back_quickly() {
        let micros = Duration::from_micros;
        let p = ReplyPoller::new(micros(100));
        assert_eq!(p.window(), Duration::ZERO, "no reply seen yet");
        for _ in 0..4 {
            p.replied(micros(20));
        }
        assert_eq!(p.window(), micros(40), "twice the average reply time");
        for _ in 0..4 {
            p.replied(Duration::from_millis(1));
        }
        assert_eq!(p.window(), Duration::ZERO, "slow tools: sleep at once");
        assert_eq!(ReplyPoller::new(Duration::ZERO).window(), Duration::ZERO);
    }

    #[cfg(feature = "host")]
    #[test]
    fn a_reply_is_received_and_counted() {
        let p = ReplyPoller::new(Duration::from_micros(100));
        let (tx, rx) = crate::oneshot::mailbox();
        tx.send(7);
        let got = p.recv_timeout(&rx, Instant::now(), Duration::from_secs(5));
        assert_eq!(got, Ok(7));
        let counted = p.avg_ns.load(Ordering::Relaxed);
        assert_ne!(counted, u64::MAX, "the reply's time went into the average");
        let (tx, rx) = crate::oneshot::mailbox::<u8>();
        drop(tx);
        let gone = p.recv_timeout(&rx, Instant::now(), Duration::from_secs(5));
        assert_eq!(gone, Err(RecvTimeoutError::Disconnected));
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
