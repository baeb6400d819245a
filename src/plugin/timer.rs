//! The relay's one-shot timer (`relay.rs`): one interface, two ways to keep it.
//!
//! - **Linux: `timerfd`** (`sys::OsTimer`). Arming and disarming are one system call each
//!   and wake nobody; the main thread polls the timer's descriptor beside its bell, so only
//!   an expiry wakes it.
//! - **Everywhere else: the portable timer.** The expiry is a number the main thread reads
//!   before each wait and folds into that wait's timeout. Arming it earlier than the main
//!   thread means to wake (from rest: it sleeps with no bound) rings the main thread's
//!   bell once, so it sleeps to the new expiry instead; pushing an armed expiry later, or
//!   disarming, rings nothing: the main thread wakes at the old expiry, finds the new one
//!   (or none) and sleeps on. So a lone request costs a wake-up of the main thread (two
//!   with the look at the old expiry) where `timerfd` costs none, and a pipelined stream
//!   one look per `limit` at most. macOS, the BSDs and Windows run it. Linux runs it with
//!   the cargo feature `portable-timer`, which `.ci/run` turns on for a second pass of the
//!   plugin's tests, so the code every other platform runs is tested here too.
//!
//! Both report an expiry until its owner clears it ([`Timer::clear`]), and both are set and
//! cleared under the relay's `timing` lock.

#[cfg(all(target_os = "linux", not(feature = "portable-timer")))]
pub(crate) use os::{Timer, Watch};
#[cfg(not(all(target_os = "linux", not(feature = "portable-timer"))))]
pub(crate) use portable::{Timer, Watch};

use std::io;
use std::time::{Duration, Instant};

use crate::sys::{Bell, TimerWatch};

/// Waits on `bell` (and on the OS timer behind `os`, if any) at most until `deadline`
/// (`None`: no bound; at least 1 ms at a time, so a wait never spins): the byte rung,
/// `TIMER_BYTE` for an expired OS timer, `Ok(None)` once the deadline passed.
fn wait_until(
    bell: &mut Bell,
    deadline: Option<Instant>,
    os: Option<TimerWatch>,
) -> io::Result<Option<u8>> {
    let timeout = match deadline {
        None => None,
        Some(d) => match d.checked_duration_since(Instant::now()) {
            Some(left) if !left.is_zero() => Some(left.max(Duration::from_millis(1))),
            _ => return Ok(None),
        },
    };
    bell.wait(timeout, os)
}

#[cfg(all(target_os = "linux", not(feature = "portable-timer")))]
mod os {
    use std::io;
    use std::time::{Duration, Instant};

    use crate::sys::{Bell, OsTimer, Ringer, TimerWatch};

    /// The relay's timer: a `timerfd`.
    pub(crate) struct Timer(OsTimer);

    /// What the main thread waits on for it: its descriptor.
    #[derive(Clone, Copy)]
    pub(crate) struct Watch(TimerWatch);

    impl Timer {
        /// A disarmed timer. `_poke` is the portable timer's; `timerfd` wakes by itself.
        pub fn new(_poke: &Ringer) -> io::Result<Timer> {
            OsTimer::new().map(Timer)
        }

        /// Expires once after `after` (zero: disarms). Replaces any earlier setting.
        pub fn set(&self, after: Duration) {
            self.0.set(after);
        }

        /// Clears an expiry, so it is no longer reported.
        pub fn clear(&self) {
            self.0.clear();
        }

        /// For the main thread's waits.
        pub fn watch(&self) -> Watch {
            Watch(self.0.watch())
        }

        /// Whether an expiry is pending (for tests of who arms and disarms).
        #[cfg(test)]
        pub fn is_set(&self) -> bool {
            self.0.is_set()
        }

        /// Whether it expires within `within` (for tests).
        #[cfg(test)]
        pub fn expires_within(&self, within: Duration) -> bool {
            crate::sys::wait_readable(self.0.watch(), within).unwrap_or(false)
        }
    }

    impl Watch {
        /// Waits on `bell` and on the timer, at most until `deadline` (`None`: no bound):
        /// the byte rung, `TIMER_BYTE` for an expiry, `Ok(None)` once the deadline passed.
        pub fn wait(
            timer: Option<&Watch>,
            bell: &mut Bell,
            deadline: Option<Instant>,
        ) -> io::Result<Option<u8>> {
            super::wait_until(bell, deadline, timer.map(|w| w.0))
        }
    }
}

#[cfg(not(all(target_os = "linux", not(feature = "portable-timer"))))]
mod portable {
    use std::io;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    use crate::spin::nanos;
    use crate::sys::{Bell, Ringer, TIMER_BYTE};

    /// The byte that tells the main thread to look at the expiry again (never reported).
    const POKE: u8 = b'P';

    /// "Not armed" and "sleeps with no bound".
    const NEVER: u64 = u64::MAX;

    struct Shared {
        epoch: Instant,
        /// When it expires, in ns after `epoch` (`NEVER`: disarmed).
        expires: AtomicU64,
        /// Until when the main thread sleeps, in ns after `epoch` (`NEVER`: no bound; 0: it
        /// is awake, and looks at `expires` before it sleeps again).
        sleeps_until: AtomicU64,
        poke: Ringer,
    }

    impl Shared {
        fn now(&self) -> u64 {
            nanos(self.epoch.elapsed())
        }
    }

    /// The relay's timer: an expiry the main thread's wait folds into its timeout.
    pub(crate) struct Timer(Arc<Shared>);

    /// What the main thread waits on for it.
    #[derive(Clone)]
    pub(crate) struct Watch(Arc<Shared>);

    impl Timer {
        /// A disarmed timer; `poke` rings the main thread's bell.
        pub fn new(poke: &Ringer) -> io::Result<Timer> {
            let poke = poke.try_clone()?;
            Ok(Timer(Arc::new(Shared {
                epoch: Instant::now(),
                expires: AtomicU64::new(NEVER),
                sleeps_until: AtomicU64::new(0),
                poke,
            })))
        }

        /// Expires once after `after` (zero: disarms). Replaces any earlier setting. Rings
        /// the main thread only when it sleeps past the new expiry.
        pub fn set(&self, after: Duration) {
            let s = &self.0;
            if after.is_zero() {
                s.expires.store(NEVER, Ordering::SeqCst);
                return;
            }
            let at = s.now().saturating_add(nanos(after)).min(NEVER - 1);
            s.expires.store(at, Ordering::SeqCst);
            // The main thread stores its wake-up time, then reads `expires`: one of the two
            // sides sees the other, so an earlier expiry is never slept through.
            if s.sleeps_until.load(Ordering::SeqCst) > at {
                s.poke.ring(POKE);
            }
        }

        /// Clears an expiry, so it is no longer reported (a one-shot timer is then
        /// disarmed, as an expired `timerfd` is).
        pub fn clear(&self) {
            let s = &self.0;
            if s.expires.load(Ordering::SeqCst) <= s.now() {
                s.expires.store(NEVER, Ordering::SeqCst);
            }
        }

        /// For the main thread's waits.
        pub fn watch(&self) -> Watch {
            Watch(self.0.clone())
        }

        /// Whether an expiry is pending (for tests of who arms and disarms).
        #[cfg(test)]
        pub fn is_set(&self) -> bool {
            let e = self.0.expires.load(Ordering::SeqCst);
            e != NEVER && e > self.0.now()
        }

        /// Whether it expires within `within` (for tests).
        #[cfg(test)]
        pub fn expires_within(&self, within: Duration) -> bool {
            let end = Instant::now() + within;
            loop {
                let e = self.0.expires.load(Ordering::SeqCst);
                if e != NEVER && e <= self.0.now() {
                    return true;
                }
                if Instant::now() >= end {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    impl Watch {
        /// Waits on `bell` and on the timer's expiry, at most until `deadline` (`None`: no
        /// bound): the byte rung, `TIMER_BYTE` for an expiry, `Ok(None)` once the deadline
        /// passed.
        pub fn wait(
            timer: Option<&Watch>,
            bell: &mut Bell,
            deadline: Option<Instant>,
        ) -> io::Result<Option<u8>> {
            let Some(Watch(s)) = timer else {
                return super::wait_until(bell, deadline, None);
            };
            let rung = loop {
                let until = deadline.map_or(NEVER, |d| {
                    nanos(d.saturating_duration_since(s.epoch)).min(NEVER - 1)
                });
                let wake = until.min(s.expires.load(Ordering::SeqCst));
                s.sleeps_until.store(wake, Ordering::SeqCst);
                // Read again after the store (the setter stores, then reads ours): an
                // expiry armed nearer meanwhile is seen here or rings us.
                let expires = s.expires.load(Ordering::SeqCst);
                if expires < wake {
                    continue;
                }
                let now = s.now();
                if expires <= now {
                    break Some(TIMER_BYTE);
                }
                if until <= now {
                    break None;
                }
                let timeout = (wake != NEVER)
                    .then(|| Duration::from_nanos(wake - now).max(Duration::from_millis(1)));
                match bell.wait(timeout, None)? {
                    Some(POKE) | None => {}
                    other => break other,
                }
            };
            s.sleeps_until.store(0, Ordering::SeqCst);
            Ok(rung)
        }
    }
}
