//! The reading role, and how it is handed over when an invoke the reader runs itself turns
//! out to wait on the host.
//!
//! The reader thread runs quick invokes itself (see `quick.rs`): no hand-off, no second
//! wake-up. While it does, nobody reads stdin, so the reader first parks its reading state
//! here. If any thread then starts a call to the host (the handler itself, a thread it
//! spawned, or another handler it might wait for), the answer could only come through stdin:
//! that call takes the parked state and starts a new `executa-reader` thread with it, which
//! reads on while the call waits. The old reader finishes its invoke, replies, and ends.
//!
//! A run that waits for something behind it in stdin (a later request: a long poll, a
//! rendezvous of two invokes) is handed over the same way by the main thread, which looks
//! every [`STALL`] while the reader is in a run and finds it still in the same one. When
//! the reader is not in a run at a look, the main thread stops looking until the next run
//! starts (which wakes it), so an idle plugin uses no CPU: at most one look follows the
//! last invoke.
//!
//! The check is race-free: the reader parks and then looks for waiting calls; a call
//! registers and then looks for a parked reader (both sequentially consistent), so at least
//! one of them sees the other and the state is never left parked while an answer is due.

use std::any::Any;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::events::{Event, Notifier};

/// How often the main thread looks for a run on the reader that lasts too long: such a run
/// is handed over after one to two of these.
pub(crate) const STALL: Duration = Duration::from_secs(1);

thread_local! {
    /// Whether this thread is a reader running an invoke with its state parked.
    static RUNNING_HERE: Cell<bool> = const { Cell::new(false) };
    /// How long this thread waited on the host since the last [`take_waited`].
    static WAITED: Cell<Duration> = const { Cell::new(Duration::ZERO) };
}

/// Marks the calling (reader) thread as running an invoke with its state parked, or not.
pub(crate) fn running_here(on: bool) {
    RUNNING_HERE.with(|r| r.set(on));
}

/// Counts time the calling thread spent waiting on the host (it is not the handler's own
/// work when its tool is judged quick or slow).
pub(crate) fn add_waited(d: Duration) {
    WAITED.with(|w| w.set(w.get().saturating_add(d)));
}

/// The time counted by [`add_waited`] since the last call.
pub(crate) fn take_waited() -> Duration {
    WAITED.with(|w| w.replace(Duration::ZERO))
}

/// The reading state: a reader loop's input and bookkeeping.
pub(crate) trait ReadRole: Any + Send {
    /// Reads and handles frames on the calling thread (never running invokes itself)
    /// until `done` says so, `until` passes (`None`: no bound), or the input ends. Needs a
    /// pollable input.
    fn pump(&mut self, done: &dyn Fn() -> bool, until: Option<Instant>);

    /// Starts a new reader thread, which takes the parked state from the relay (unless the
    /// old reader took it back first: then the new thread just ends).
    fn start_reader(&self) -> std::io::Result<()>;

    /// For taking the concrete state back.
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

#[derive(Default)]
pub(crate) struct Relay {
    parked: Mutex<Option<Box<dyn ReadRole>>>,
    /// Whether the reader runs an invoke with its state parked and no new reader has been
    /// asked for yet; read without the lock on every call to the host.
    inline: AtomicBool,
    /// Parks (and ends of pumps) so far: the main thread tells a long run from a new one
    /// by it.
    parks: AtomicUsize,
    /// Whether the main thread has stopped looking (the reader ran nothing for a while).
    unwatched: AtomicBool,
    /// Wakes the main thread when it must look again.
    watch: OnceLock<Notifier>,
    /// Whether the input can be waited on with a timeout (`poll`), so the reader may read
    /// the answers to its own calls (see [`Relay::pump`]).
    pumpable: AtomicBool,
}

impl Relay {
    /// Parks the reading state while the reader runs an invoke (waking the main thread's
    /// watch if it stopped looking).
    pub fn park(&self, role: Box<dyn ReadRole>) {
        *crate::lock::lock(&self.parked) = Some(role);
        self.parked_again();
    }

    /// The state is parked (again): calls may relieve it, and the watch looks at it. After
    /// a pump too, the watch counts a new run: the reader read until now.
    fn parked_again(&self) {
        self.parks.fetch_add(1, Ordering::SeqCst);
        self.inline.store(true, Ordering::SeqCst);
        if self.unwatched.load(Ordering::SeqCst)
            && self.unwatched.swap(false, Ordering::SeqCst)
            && let Some(watch) = self.watch.get()
        {
            watch.notify(Event::Watch);
        }
    }

    /// Gives the relay its way to wake the main thread (once, at start).
    pub fn set_watch(&self, watch: Notifier) {
        let _ = self.watch.set(watch);
    }

    /// For the main thread, before it waits: whether to look again after [`STALL`]
    /// (`seen`: the count of parks now, for the next look). Only while the reader is in a
    /// run; otherwise the main thread waits without a bound, and the next [`Relay::park`]
    /// asks for a wake-up.
    pub fn keep_watching(&self, seen: &mut usize) -> bool {
        *seen = self.parks.load(Ordering::SeqCst);
        if self.inline.load(Ordering::SeqCst) {
            return true;
        }
        // Then look again: a park stores `inline` and then looks at `unwatched`, so either
        // it sees this store and wakes the watch, or this look sees its run.
        self.unwatched.store(true, Ordering::SeqCst);
        if !self.inline.load(Ordering::SeqCst) {
            return false;
        }
        // A park raced with the store above and may not have seen it: watch that run.
        self.unwatched.store(false, Ordering::SeqCst);
        *seen = self.parks.load(Ordering::SeqCst);
        true
    }

    /// After a look's wait: hands reading over if the reader is still in the run it was in
    /// at the last look (`seen`), which has then lasted at least [`STALL`].
    pub fn relieve_stalled(&self, seen: usize) {
        if self.parks.load(Ordering::SeqCst) == seen && self.relieve().is_err() {
            log::error!("executa: could not start a reader thread for a stalled invoke");
        }
    }

    /// Says whether the input is pollable (set once, at start).
    pub fn set_pumpable(&self, on: bool) {
        self.pumpable.store(on, Ordering::SeqCst);
    }

    /// Whether the input is pollable.
    pub fn pumpable(&self) -> bool {
        self.pumpable.load(Ordering::SeqCst)
    }

    /// Whether a call made on this thread is read by this thread itself ([`Relay::pump`]),
    /// so no new reader is needed for it.
    pub fn pumps_here(&self) -> bool {
        self.pumpable() && RUNNING_HERE.with(Cell::get)
    }

    /// For a call to the host made by the invoke the reader runs, on the reader's own
    /// thread: instead of waking another thread to read the answer and then being woken
    /// by it, the reader reads on itself until `done` (the answer is in) or `until` (`None`:
    /// no bound), then parks its state again. Returns `false` when it cannot (not this
    /// thread, or the state moved to a new reader): then the caller waits as any handler
    /// does.
    pub fn pump(&self, done: &dyn Fn() -> bool, until: Option<Instant>) -> bool {
        if !self.pumps_here() {
            return false;
        }
        let Some(mut role) = crate::lock::lock(&self.parked).take() else {
            return false;
        };
        // Not parked while it reads: a call of another thread now waits for this reader.
        self.inline.store(false, Ordering::SeqCst);
        role.pump(done, until);
        self.park(role);
        true
    }

    /// Takes the parked state: the reader after its invoke (`None` then means a new reader
    /// took it, and the caller's thread should end), or the new reader as it starts.
    pub fn take(&self) -> Option<Box<dyn Any>> {
        self.inline.store(false, Ordering::SeqCst);
        let role = crate::lock::lock(&self.parked).take();
        role.map(ReadRole::into_any)
    }

    /// Called when a call to the host is registered (and once at start, to start the
    /// first reader): if a state is parked, a new reader takes over. Cheap otherwise (one
    /// atomic load). Fails when the thread cannot be started: then the state stays parked
    /// (a call to the host waits until the running invoke ends or the call times out).
    pub fn relieve(&self) -> std::io::Result<()> {
        if !self.inline.swap(false, Ordering::SeqCst) {
            return Ok(());
        }
        let parked = crate::lock::lock(&self.parked);
        let Some(role) = parked.as_ref() else {
            return Ok(());
        };
        role.start_reader()
            .inspect_err(|_| self.inline.store(true, Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    struct Role(Arc<AtomicUsize>);

    impl ReadRole for Role {
        fn pump(&mut self, _: &dyn Fn() -> bool, _: Option<Instant>) {}
        fn start_reader(&self) -> std::io::Result<()> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
        fn into_any(self: Box<Self>) -> Box<dyn Any> {
            self
        }
    }

    #[test]
    fn a_call_while_parked_starts_one_new_reader() {
        let resumed = Arc::new(AtomicUsize::new(0));
        let relay = Relay::default();
        relay.relieve().unwrap();
        relay.park(Box::new(Role(resumed.clone())));
        relay.relieve().unwrap();
        relay.relieve().unwrap();
        assert_eq!(resumed.load(Ordering::SeqCst), 1, "one new reader");
        assert!(relay.take().is_some(), "the new reader takes the state");
        assert!(relay.take().is_none(), "and the old one finds it gone");
    }

    #[test]
    fn without_a_call_the_reader_gets_its_own_state_back() {
        let resumed = Arc::new(AtomicUsize::new(0));
        let relay = Relay::default();
        relay.park(Box::new(Role(resumed.clone())));
        let back = relay.take().expect("still parked");
        assert!(back.downcast::<Role>().is_ok());
        relay.relieve().unwrap();
        assert_eq!(resumed.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn the_watch_sleeps_when_the_reader_is_not_in_a_run_and_a_park_wakes_it() {
        let resumed = Arc::new(AtomicUsize::new(0));
        let relay = Relay::default();
        let mut seen = usize::MAX;
        assert!(!relay.keep_watching(&mut seen), "no run: sleep");
        relay.park(Box::new(Role(resumed.clone())));
        assert!(
            !relay.unwatched.load(Ordering::SeqCst),
            "the sleeping watch is woken"
        );
        assert!(relay.keep_watching(&mut seen), "a run is going on");
        relay.relieve_stalled(seen);
        assert_eq!(
            resumed.load(Ordering::SeqCst),
            1,
            "the same run a look later"
        );
        assert!(relay.take().is_some());
        assert!(!relay.keep_watching(&mut seen), "no run now");
    }

    /// The watch going to sleep and a park at the same moment: whatever the interleaving,
    /// either the watch keeps looking or the park wakes it (a parked run nobody watches
    /// could wait forever for a request nobody reads). Repeated, since it is a race.
    #[test]
    fn a_park_racing_with_the_watch_going_to_sleep_is_always_watched() {
        use std::sync::Barrier;
        const ROUNDS: usize = 100_000;
        let (_events, notifier) = super::super::events::channel().unwrap();
        let relay = Relay::default();
        relay.set_watch(notifier);
        let resumed = Arc::new(AtomicUsize::new(0));
        let (start, end) = (Barrier::new(2), Barrier::new(2));
        let mut lost = 0;
        std::thread::scope(|s| {
            s.spawn(|| {
                for round in 0..ROUNDS {
                    let role = Box::new(Role(resumed.clone()));
                    start.wait();
                    // Sweeps the park across the watch's look, a few cycles at a time.
                    for _ in 0..round % 256 {
                        std::hint::spin_loop();
                    }
                    relay.park(role);
                    end.wait();
                }
            });
            for _ in 0..ROUNDS {
                relay.unwatched.store(false, Ordering::SeqCst);
                let mut seen = 0;
                start.wait();
                for _ in 0..128 {
                    std::hint::spin_loop();
                }
                let watching = relay.keep_watching(&mut seen);
                end.wait();
                // Parked now: a watch that went to sleep must have been woken.
                if !watching && relay.unwatched.load(Ordering::SeqCst) {
                    lost += 1;
                }
                relay.take();
            }
        });
        assert_eq!(lost, 0, "parked runs left unwatched in {ROUNDS} rounds");
    }

    #[test]
    fn a_new_run_since_the_last_look_is_not_stalled() {
        let resumed = Arc::new(AtomicUsize::new(0));
        let relay = Relay::default();
        let mut seen = usize::MAX;
        relay.park(Box::new(Role(resumed.clone())));
        assert!(relay.keep_watching(&mut seen));
        relay.take();
        relay.park(Box::new(Role(resumed.clone())));
        relay.relieve_stalled(seen);
        assert_eq!(
            resumed.load(Ordering::SeqCst),
            0,
            "another run: not stalled"
        );
        assert!(relay.keep_watching(&mut seen), "but it is watched");
        relay.relieve_stalled(seen);
        assert_eq!(resumed.load(Ordering::SeqCst), 1);
    }
}
