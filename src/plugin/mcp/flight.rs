//! The `tools/call` requests in flight: what a `notifications/cancelled` may name. The MCP
//! spec has a cancellation for a request not seen (or answered already) ignored, so one
//! counts only for a call read before it and not answered yet.
//!
//! A call is entered as the reader reads it, with a flag its [`Seen`] shares: the entry and
//! the `Seen` hold it together, so the call is in flight while the flag has two owners.
//! The `Seen` travels in the call's job: whatever ends the call (its reply, a refusal as
//! `BUSY` or `SHUTTING_DOWN`, a panic, the plugin exiting) drops the job and so ends the
//! entry, with no code of its own on that path. Ending a call takes no lock.
//!
//! An ended entry is taken again, flag and all, by a call read later (the hot path of
//! `tools/call` allocates nothing once warm): the search starts at the last entry taken,
//! so it stops at once when calls come one at a time, and past the calls still in flight
//! after it when they overlap; calls that run long at the front of the list are not
//! passed over by every call. The list grows only when every entry is in flight, so it
//! holds at most as many entries as calls were ever in flight at once, and those are
//! bounded by the intake budget (`intake.rs`, `pool.rs`); ended entries at its end beyond
//! [`SWEEP_AT`] are dropped as calls are entered, so a burst's go with it.

use std::cell::{RefCell, RefMut};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering, fence};

/// Ended entries at the end of the list are dropped only beyond this length.
const SWEEP_AT: usize = 64;

/// The calls in flight, and entries of calls that ended, kept for the next. The reader's
/// alone (it enters calls as it reads them, and reads their cancellations): no lock.
#[derive(Default)]
pub(crate) struct Flight(RefCell<Calls>);

#[derive(Default)]
struct Calls {
    /// Raw id text, and the call's cancellation flag (shared with its `Seen` while the
    /// call is in flight).
    entries: Vec<(IdText, Arc<AtomicBool>)>,
    /// Where the search for an ended entry starts.
    next: usize,
}

/// Whether the call of an entry has ended: its `Seen` dropped its share of the flag.
fn ended(flag: &Arc<AtomicBool>) -> bool {
    Arc::strong_count(flag) == 1
}

impl Flight {
    /// Enters the call with raw id `id`; it is in flight until the returned [`Seen`] drops.
    pub fn seen(&self, id: &str) -> Seen {
        let mut calls = self.lock();
        let Calls { entries, next } = &mut *calls;
        // A burst's ended entries go first, so the search does not keep to the list's end.
        while entries.len() > SWEEP_AT && entries.last().is_some_and(|(_, f)| ended(f)) {
            entries.pop();
        }
        let len = entries.len();
        let start = (*next).min(len);
        let free = (start..len)
            .chain(0..start)
            .find(|&at| entries.get(at).is_some_and(|(_, flag)| ended(flag)));
        let flag = match free.and_then(|at| Some((at, entries.get_mut(at)?))) {
            Some((at, (text, flag))) => {
                *next = at;
                // The `Seen` that held it dropped its share with a release: its last look
                // at the flag comes before this reset.
                fence(Ordering::Acquire);
                flag.store(false, Ordering::Relaxed);
                text.set(id);
                flag.clone()
            }
            None => {
                let flag = Arc::new(AtomicBool::new(false));
                entries.push((IdText::new(id), flag.clone()));
                *next = entries.len() - 1;
                flag
            }
        };
        Seen(flag)
    }

    /// Records `notifications/cancelled` for raw id `id`: the reply to that call, if it is
    /// in flight, is not sent. Returns `false`, changing nothing, when no such call is in
    /// flight (not read yet, or answered already): the spec has that cancellation ignored.
    pub fn cancel(&self, id: &str) -> bool {
        let calls = self.lock();
        let mut found = false;
        for (_, flag) in calls.entries.iter().filter(|(seen, _)| seen.is(id)) {
            // An ended entry's flag is reset when it is taken again (under this lock).
            if !ended(flag) {
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

    fn lock(&self) -> RefMut<'_, Calls> {
        self.0.borrow_mut()
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

    /// Makes this the text of `id`, in place where it fits.
    fn set(&mut self, id: &str) {
        match self {
            IdText::Short(len, bytes) if id.len() <= SHORT_ID => {
                bytes[..id.len()].copy_from_slice(id.as_bytes());
                *len = id.len() as u8;
            }
            _ => *self = IdText::new(id),
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
    fn an_ended_entry_is_taken_again_uncancelled_under_its_new_id() {
        let flight = Flight::default();
        let one = flight.seen("1");
        assert!(flight.cancel("1"));
        assert!(one.finish());
        let two = flight.seen("2");
        assert_eq!(flight.kept(), 1, "the ended entry was taken again");
        assert!(!two.is_cancelled(), "its flag starts afresh");
        assert!(!flight.cancel("1"), "the old id is gone with its call");
        assert!(flight.cancel("2"));
        assert!(two.finish());
        // With calls in flight, a new one gets an entry of its own.
        let calls: Vec<Seen> = (0..3).map(|i| flight.seen(&i.to_string())).collect();
        assert_eq!(flight.kept(), 3);
        assert!(flight.cancel("1"));
        assert_eq!(
            calls.iter().map(Seen::is_cancelled).collect::<Vec<_>>(),
            [false, true, false]
        );
    }

    #[test]
    fn calls_one_at_a_time_behind_long_ones_start_their_search_at_their_entry() {
        let flight = Flight::default();
        let long: Vec<Seen> = (0..8)
            .map(|i| flight.seen(&format!("\"long{i}\"")))
            .collect();
        for i in 0..100 {
            drop(flight.seen(&i.to_string()));
            let calls = flight.lock();
            assert_eq!((calls.entries.len(), calls.next), (9, 8), "call {i}");
        }
        assert!(flight.cancel("\"long3\""));
        assert!(long[3].is_cancelled());
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
