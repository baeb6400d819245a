//! Which tools are quick enough for the reader thread to run their invokes itself.
//!
//! Handing an invoke to another thread costs a wake-up: 20-30 µs of CPU on a VM, more than
//! most handlers take. So a tool whose recent runs were all quick ([`Options::inline`])
//! runs on the reader, one read, one parse and one write per request like a
//! single-threaded loop. Every run is timed (two clock reads), minus the time it
//! waited on the host: with a pollable input the reader reads the answers to its own calls
//! (`relay.rs`), so waiting on the host stalls nothing. A slow run elsewhere only restarts
//! the streak; a slow run on the reader, a run whose reading had to move to a new reader
//! thread, or (without a pollable input) any call to the host sends the tool back to the
//! dispatch side. The first time for [`FIRST_PENALTY`] runs, doubling with each later
//! penalty up to [`PENALTY`]: a tool's first runs on the reader are often slow once (code
//! and data not yet in cache, a lazy initialisation), which should not cost it hundreds of
//! runs, while a tool that is only sometimes slow soon stalls the reader at most once per
//! [`PENALTY`] + [`STREAK`] invokes.
//!
//! [`Options::inline`]: super::Options::inline

use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// Quick runs in a row before a tool runs on the reader.
pub(crate) const STREAK: i32 = 8;

/// Runs on the dispatch side after a slow run or a call to the host, at most.
pub(crate) const PENALTY: i32 = 256;

/// The first penalty; each later one doubles, up to [`PENALTY`].
pub(crate) const FIRST_PENALTY: i32 = 16;

/// A tool's recent record: quick runs in a row, negative while it serves a penalty; and
/// the length of its next penalty.
pub(crate) struct Quickness(AtomicI32, AtomicI32);

impl Default for Quickness {
    fn default() -> Self {
        Quickness(AtomicI32::new(0), AtomicI32::new(FIRST_PENALTY))
    }
}

impl Quickness {
    /// Whether the next invoke may run on the reader.
    pub fn is_quick(&self) -> bool {
        self.0.load(Ordering::Relaxed) >= STREAK
    }

    /// Sends the tool back to the dispatch side (a run on the reader that had to hand
    /// reading over), for twice as long as the last time, at most [`PENALTY`] runs.
    pub fn penalize(&self) {
        self.0.store(-self.next_penalty(), Ordering::Relaxed);
    }

    fn next_penalty(&self) -> i32 {
        let len = self.1.load(Ordering::Relaxed);
        self.1.store((len * 2).min(PENALTY), Ordering::Relaxed);
        len
    }

    /// Records one run (`on_reader`: the reader ran it). Racing updates from several
    /// threads may lose a count, which only shifts when a tool changes sides by a run or two.
    pub fn record(&self, took: Duration, called_host: bool, limit: Duration, on_reader: bool) {
        let now = self.0.load(Ordering::Relaxed);
        let slow = took > limit;
        let next = if called_host || (slow && on_reader) {
            -self.next_penalty()
        } else if slow {
            now.min(0)
        } else {
            now.saturating_add(1).min(STREAK)
        };
        if next != now {
            self.0.store(next, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_micros(50);
    const FAST: Duration = Duration::from_micros(5);

    const SLOW: Duration = Duration::from_millis(1);

    fn streak(q: &Quickness, runs: i32) {
        for _ in 0..runs {
            q.record(FAST, false, LIMIT, false);
        }
    }

    #[test]
    fn a_tool_turns_quick_after_a_streak_and_back_after_one_slow_run_on_the_reader() {
        let q = Quickness::default();
        streak(&q, STREAK - 1);
        assert!(!q.is_quick());
        q.record(FAST, false, LIMIT, true);
        assert!(q.is_quick());
        q.record(SLOW, false, LIMIT, true);
        assert!(!q.is_quick());
        streak(&q, FIRST_PENALTY + STREAK - 1);
        assert!(!q.is_quick(), "the penalty is served first");
        streak(&q, 1);
        assert!(q.is_quick());
    }

    #[test]
    fn each_penalty_doubles_up_to_the_longest() {
        let q = Quickness::default();
        let mut len = FIRST_PENALTY;
        for _ in 0..8 {
            streak(&q, STREAK);
            assert!(q.is_quick());
            q.record(SLOW, false, LIMIT, true);
            streak(&q, len + STREAK - 1);
            assert!(!q.is_quick(), "a penalty of {len} runs is served first");
            streak(&q, 1);
            assert!(q.is_quick(), "and is {len} runs long");
            len = (len * 2).min(PENALTY);
        }
        assert_eq!(len, PENALTY, "the penalty stops growing at its longest");
        q.penalize();
        streak(&q, PENALTY + STREAK - 1);
        assert!(!q.is_quick(), "a hand-over costs the longest penalty too");
    }

    #[test]
    fn a_slow_run_elsewhere_only_restarts_the_streak() {
        let q = Quickness::default();
        streak(&q, STREAK);
        q.record(SLOW, false, LIMIT, false);
        assert!(!q.is_quick());
        streak(&q, STREAK);
        assert!(q.is_quick(), "no penalty: the reader was never stalled");
    }

    #[test]
    fn a_call_to_the_host_is_never_quick() {
        let q = Quickness::default();
        streak(&q, STREAK);
        q.record(FAST, true, LIMIT, false);
        assert!(!q.is_quick());
        streak(&q, STREAK);
        assert!(!q.is_quick(), "a penalty, wherever it ran");
    }
}
