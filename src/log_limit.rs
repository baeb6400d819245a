//! One limiter for every log line written per frame or per request, on both sides.
//!
//! A peer decides how many frames arrive, so a line per frame lets it decide how much we
//! write to stderr: 2,000 answers to unknown ids once wedged a plugin whose stderr nobody
//! read, and a host printed a million identical lines in 6 s. Each such line has a
//! `static` [`LogLimit`] of its own kind: at most [`BURST`] lines of that kind per second
//! of the monotonic clock, then, when a later second opens a window, one warning with the
//! count of those left out (``executa: 37 more `answer with an unknown id` lines
//! suppressed``).
//!
//! ```ignore
//! static UNKNOWN_ANSWER: LogLimit = LogLimit::new();
//! if UNKNOWN_ANSWER.allow("answer with an unknown id") {
//!     log::warn!("executa: dropped an answer with unknown id {id}");
//! }
//! // Below `warn`, look at the level first, so that nothing is counted (and no count
//! // reported) while the line is off:
//! if log::log_enabled!(log::Level::Debug) && DROPPED_REPLY.allow("..") { .. }
//! ```
//!
//! The kind is given where the line is logged, not kept in the static: a static holding a
//! `&str` costs every plugin binary 48 bytes (the pointer and its relocation), one of a
//! single zeroed word nothing (`.bss`); measured, 34 bytes a line on the quickstart plugin.
//! Give a static the same kind wherever it is used. The host, which has no such budget,
//! keeps its kinds with its limits ([`NamedLimit`]) to report them at shutdown.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Lines of one kind written per window; past it they are counted.
pub(crate) const BURST: u32 = 4;

/// The limit of one kind of line: a `static` per kind. Cheap: a read of the coarse clock
/// and an atomic operation or two; nothing at all while logging is off.
pub(crate) struct LogLimit {
    /// The second of the current window (`sys::coarse_secs`) in the high half, and how
    /// many lines were asked for in it, written or not, in the low half. One word, so that
    /// opening a window and counting in it never race. It starts at 0: the first line
    /// opens a window (unless the clock is still in its first second, when it counts in
    /// that one).
    window: AtomicU64,
}

impl LogLimit {
    /// A limit with nothing counted yet.
    pub(crate) const fn new() -> Self {
        LogLimit {
            window: AtomicU64::new(0),
        }
    }

    /// Whether a line of `kind` (a few words naming it, quoted in the count) may be
    /// written. Counts it either way; when it opens a window after lines were left out,
    /// first logs how many (as a warning). `false` at once while logging is off.
    pub(crate) fn allow(&self, kind: &'static str) -> bool {
        if log::max_level() == log::LevelFilter::Off {
            return false;
        }
        let (allowed, suppressed) = self.count(crate::sys::coarse_secs());
        report(suppressed, kind);
        allowed
    }

    /// Counts a line asked for in second `now`: whether it may be written, and how many
    /// lines the window it closes left out (0 when it opens none).
    fn count(&self, now: u32) -> (bool, u32) {
        let window = self.window.load(Relaxed);
        if now != (window >> 32) as u32
            && self
                .window
                .compare_exchange(window, u64::from(now) << 32 | 1, Relaxed, Relaxed)
                .is_ok()
        {
            // This thread opened the window; one racing with it counts in it below.
            return (true, (window as u32).saturating_sub(BURST));
        }
        // The count cannot reach the high half: that would take 4 billion lines a second.
        ((self.window.fetch_add(1, Relaxed) as u32) < BURST, 0)
    }

    /// Logs the count of lines of `kind` left out of the current window so far, if any,
    /// and counts them as reported: for the end of a run, after which no window may open
    /// to report them. (The plugin side never calls it: the code would cost its binary.)
    #[cfg(feature = "host")]
    fn flush(&self, kind: &'static str) {
        let window = self.window.load(Relaxed);
        let asked = window as u32;
        if asked > BURST
            && self
                .window
                .compare_exchange(window, window - u64::from(asked - BURST), Relaxed, Relaxed)
                .is_ok()
        {
            report(asked - BURST, kind);
        }
    }
}

/// A [`LogLimit`] that keeps its kind, for the host side: its lines are allowed without
/// naming the kind again, and [`NamedLimit::flush`] reports what is left at shutdown.
#[cfg(feature = "host")]
pub(crate) struct NamedLimit {
    limit: LogLimit,
    kind: &'static str,
}

#[cfg(feature = "host")]
impl NamedLimit {
    /// A limit for lines of `kind`.
    pub(crate) const fn new(kind: &'static str) -> Self {
        NamedLimit {
            limit: LogLimit::new(),
            kind,
        }
    }

    /// [`LogLimit::allow`] for this limit's kind.
    pub(crate) fn allow(&self) -> bool {
        self.limit.allow(self.kind)
    }

    /// Logs the count of lines left out of the current window so far, if any (see
    /// [`LogLimit`]): at the end of a run, after which no window may open to report them.
    pub(crate) fn flush(&self) {
        self.limit.flush(self.kind);
    }
}

/// Logs that `suppressed` lines of `kind` were left out, if any were.
pub(crate) fn report(suppressed: u32, kind: &str) {
    if suppressed > 0 {
        log::warn!("executa: {suppressed} more `{kind}` lines suppressed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_writes_a_burst_and_the_next_one_reports_the_rest() {
        let limit = LogLimit::new();
        let first: Vec<_> = (0..10).map(|_| limit.count(100)).collect();
        let allowed = first.iter().filter(|(ok, _)| *ok).count();
        assert_eq!(allowed, BURST as usize, "{first:?}");
        assert!(
            first[..BURST as usize].iter().all(|&(ok, _)| ok),
            "{first:?}"
        );
        assert!(first.iter().all(|&(_, n)| n == 0), "{first:?}");
        // The next second opens a window: its first line goes, after the count of the 6.
        assert_eq!(limit.count(101), (true, 6));
        for _ in 1..BURST {
            assert_eq!(limit.count(101), (true, 0));
        }
        assert_eq!(limit.count(101), (false, 0));
        // A later second (not the next one) reports the one left out; a window that
        // stayed within its burst has nothing to report.
        assert_eq!(limit.count(107), (true, 1));
        assert_eq!(limit.count(108), (true, 0));
    }

    #[test]
    fn racing_threads_share_one_burst_and_every_line_is_counted() {
        static LIMIT: LogLimit = LogLimit::new();
        let threads: Vec<_> = (0..8)
            .map(|_| {
                std::thread::spawn(|| {
                    (0..1000)
                        .map(|_| LIMIT.count(5))
                        .filter(|&(ok, n)| {
                            assert_eq!(n, 0);
                            ok
                        })
                        .count()
                })
            })
            .collect();
        let allowed: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(allowed, BURST as usize);
        assert_eq!(LIMIT.count(6), (true, 8000 - BURST));
    }

    #[test]
    fn the_clock_moves_on_and_logging_off_costs_no_count() {
        let a = crate::sys::coarse_secs();
        let b = crate::sys::coarse_secs();
        assert!(b.wrapping_sub(a) < 2, "{a} then {b}");
        // No logger in this test binary: the level is off, and nothing is counted.
        assert_eq!(log::max_level(), log::LevelFilter::Off);
        static OFF: LogLimit = LogLimit::new();
        assert!(!OFF.allow("off"));
        assert_eq!(OFF.window.load(Relaxed), 0);
    }

    #[cfg(feature = "host")]
    #[test]
    fn a_flush_reports_what_was_left_out_once() {
        let limit = NamedLimit::new("flushed");
        for _ in 0..BURST + 3 {
            limit.limit.count(40);
        }
        limit.flush();
        // The 3 were reported and are not counted again: the window still writes
        // nothing, and the next one reports only the line left out after the flush.
        assert_eq!(limit.limit.count(40), (false, 0));
        assert_eq!(limit.limit.count(41), (true, 1));
    }
}
