//! The `tools/call` requests in flight: what a `notifications/cancelled` may name. The MCP
//! spec has a cancellation for a request not seen (or answered already) ignored, so one
//! counts only for a call read before it and not answered yet.
//!
//! A call is entered as the reader reads it, with a flag its [`Seen`] shares; the entry
//! holds the flag weakly, so it is dead as soon as the `Seen` drops, which travels in the
//! call's job: whatever ends the call (its reply, a refusal as `BUSY` or `SHUTTING_DOWN`, a
//! panic, the plugin exiting) drops the job and so ends the entry, with no code of its own
//! on that path. Dead entries are swept out as the list grows: it holds at most twice the
//! calls alive at the last sweep (and at least [`SWEEP_AT`]), and those are as many as the
//! calls held in the request queue, the waiting list and the running handlers, which the
//! intake budget bounds (`intake.rs`, `pool.rs`). Ending a call takes no lock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// The list is swept no sooner than at this length.
const SWEEP_AT: usize = 64;

/// The calls in flight, and some that ended since the last sweep.
#[derive(Default)]
pub(crate) struct Flight(Mutex<Calls>);

#[derive(Default)]
struct Calls {
    /// Raw id text, and the call's cancellation flag (dead once the call ended).
    entries: Vec<(IdText, Weak<AtomicBool>)>,
    /// The length at which the next sweep runs.
    sweep_at: usize,
}

impl Flight {
    /// Enters the call with raw id `id`; it is in flight until the returned [`Seen`] drops.
    pub fn seen(&self, id: &str) -> Seen {
        let flag = Arc::new(AtomicBool::new(false));
        let mut calls = self.lock();
        if calls.entries.len() >= calls.sweep_at.max(SWEEP_AT) {
            calls.entries.retain(|(_, flag)| flag.strong_count() > 0);
            calls.sweep_at = 2 * calls.entries.len();
        }
        calls.entries.push((IdText::new(id), Arc::downgrade(&flag)));
        Seen(flag)
    }

    /// Marks the calls in flight with raw id `id` cancelled; `false` when there is none.
    pub fn cancel(&self, id: &str) -> bool {
        let calls = self.lock();
        let mut found = false;
        for (_, flag) in calls.entries.iter().filter(|(seen, _)| seen.is(id)) {
            if let Some(flag) = flag.upgrade() {
                flag.store(true, Ordering::Release);
                found = true;
            }
        }
        found
    }

    /// Entries kept, in flight or not swept yet.
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.lock().entries.len()
    }

    fn lock(&self) -> MutexGuard<'_, Calls> {
        crate::lock::lock(&self.0)
    }
}

/// A raw id's text, kept in the entry when short (most ids are a counter or a UUID: no
/// allocation per call for them on the `tools/call` path).
enum IdText {
    Short(u8, [u8; SHORT_ID]),
    Long(Box<str>),
}

/// The longest id kept without an allocation: a quoted UUID fits.
const SHORT_ID: usize = 38;

impl IdText {
    fn new(id: &str) -> IdText {
        let mut short = [0; SHORT_ID];
        match (short.get_mut(..id.len()), u8::try_from(id.len())) {
            (Some(room), Ok(len)) => {
                room.copy_from_slice(id.as_bytes());
                IdText::Short(len, short)
            }
            _ => IdText::Long(id.into()),
        }
    }

    fn is(&self, id: &str) -> bool {
        match self {
            IdText::Short(len, bytes) => bytes.get(..usize::from(*len)) == Some(id.as_bytes()),
            IdText::Long(text) => **text == *id,
        }
    }
}

/// One call in flight; it ends when this drops.
#[derive(Debug)]
pub(crate) struct Seen(Arc<AtomicBool>);

impl Seen {
    /// Ends the call: whether it was cancelled (its reply is then not sent).
    pub fn finish(self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// Whether the call was cancelled so far.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_call_in_flight_is_cancelled() {
        let flight = Flight::default();
        assert!(!flight.cancel("7"), "not seen yet: ignored");
        let seven = flight.seen("7");
        assert!(
            !seven.finish(),
            "the early cancellation left nothing behind"
        );
        assert!(!flight.cancel("7"), "answered already: ignored");
        let seven = flight.seen("7");
        assert!(flight.cancel("7"));
        assert!(seven.finish());
    }

    #[test]
    fn a_call_ended_any_other_way_ends_too_and_is_swept() {
        let flight = Flight::default();
        let calls: Vec<Seen> = (0..1000).map(|i| flight.seen(&i.to_string())).collect();
        assert_eq!(flight.kept(), 1000, "all alive: none swept");
        // Refused, or dropped with its job by a panic: no longer in flight.
        drop(calls);
        assert!(!flight.cancel("5"));
        for i in 0..10_000 {
            drop(flight.seen(&i.to_string()));
            assert!(flight.kept() <= 2000, "{} kept", flight.kept());
        }
        let alive = flight.seen("alive");
        for i in 0..200 {
            drop(flight.seen(&i.to_string()));
        }
        assert!(flight.kept() <= 2 * SWEEP_AT, "{} kept", flight.kept());
        assert!(flight.cancel("alive"), "a call alive is never swept");
        assert!(alive.finish());
    }

    #[test]
    fn long_and_short_ids_are_matched_whole() {
        let flight = Flight::default();
        let long = format!("\"{}\"", "x".repeat(100));
        let exact = format!("\"{}\"", "y".repeat(SHORT_ID - 2));
        let calls = [flight.seen(&long), flight.seen(&exact), flight.seen("1")];
        assert!(!flight.cancel(&long[..long.len() - 1]));
        assert!(!flight.cancel("12"));
        assert!(flight.cancel(&long) && flight.cancel(&exact) && flight.cancel("1"));
        assert!(calls.into_iter().all(Seen::finish));
    }

    #[test]
    fn calls_sharing_an_id_are_told_apart() {
        let flight = Flight::default();
        let first = flight.seen("\"a\"");
        assert!(flight.cancel("\"a\""));
        let second = flight.seen("\"a\"");
        assert!(!second.finish(), "read after the cancellation");
        assert!(first.finish());
    }
}
