//! The reading role, and how it moves to a new thread when the reader cannot read.
//!
//! The reader thread runs an invoke itself when a slot is free and nothing else needs it
//! (see `reader.rs`): no hand-off, no second wake-up. While it does, nobody reads stdin, so
//! it first parks its reading state here. Two things hand the parked state to a new
//! `executa-reader` thread, which reads on while the old one finishes its invoke, replies,
//! and ends:
//! - a call to the host from any thread but the reader itself (its answer can only come
//!   through stdin; the reader's own calls are read by the reader, [`Relay::pump`]);
//! - the timer: a run still going [`Relay::new`]'s `limit` after it was parked
//!   (`Options::inline`), whatever it waits for (its own work, a lock, a later request).
//!
//! So no request waits behind a handler on the reader for longer than `limit`, whatever
//! the tool did before: the bound is a clock, not a record.
//!
//! The timer (`timer.rs`: a `timerfd` the main thread waits on beside its events on Linux,
//! the main thread's own wait timeout elsewhere) is set
//! to expire `limit` after a run is parked when it is not armed, or when what is left of
//! it is under two thirds of `limit`; otherwise the run keeps the expiry of an earlier
//! one, which comes sooner than its own. So while runs follow each other more closely
//! than `limit/3` the expiry keeps moving ahead, once per `limit/3` at most, and never
//! comes: a pipelined stream costs one system call per 2 ms (with the default 6 ms
//! limit), a request every 0.5 ms 0.2 per request (`perf stat`), no thread is woken, and
//! a run after a catch-up starts with the pending expiry more than 4 ms (a scheduler
//! tick) away, where a nearer one costs CPU on every request (see `Options::inline`). A
//! run that follows another without the reader catching up in between (the frames read
//! with the first still wait) keeps the expiry, near or not, and is timed from the first
//! run: what waits behind a series of runs waits `limit` in all ([`Relay::park_since`]).
//! The reader disarms it when it is about to wait for input only if it last caught up
//! `limit/3` ago or more ([`Relay::rest_after`]): at a request every 5 ms, a lone request
//! costs an arming and a disarming (one system call each), and an idle plugin sees one
//! expiry at most after its last request, since an expiry wakes the main thread, which
//! costs more than both calls. When it expires, the main thread looks
//! ([`Relay::on_timer`]): the run parked for `limit` is handed over; a later run gets the
//! timer again for what is left of its `limit`.
//!
//! The checks are race-free: the reader parks and then looks for waiting calls; a call
//! registers and then looks for a parked reader (both sequentially consistent), so at least
//! one of them sees the other and the state is never left parked while an answer is due.
//! Likewise a park arms the timer unless it sees it armed, and the main thread disarms and
//! then looks for a parked run, so no run is left without a timer. The flag and the timer
//! change together, under one small lock (`timing`; a park that keeps the timer only reads
//! and takes no lock): a reader disarming and the main thread arming at the same moment
//! could otherwise leave the flag set on a disarmed timer, and the runs after it would
//! keep an expiry that never comes.

use std::any::Any;
use std::cell::Cell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::log_limit::LogLimit;
use crate::spin::nanos;
use crate::sys::Ringer;

use super::timer::{Timer, Watch};

/// A failure to start a reader thread is logged within a limit: it may recur per run.
static NO_READER: LogLimit = LogLimit::new();

thread_local! {
    /// Whether this thread is a reader running an invoke with its state parked.
    static RUNNING_HERE: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling (reader) thread as running an invoke with its state parked, or not.
pub(crate) fn running_here(on: bool) {
    RUNNING_HERE.with(|r| r.set(on));
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

pub(crate) struct Relay {
    parked: Mutex<Option<Box<dyn ReadRole>>>,
    /// Whether the reader runs an invoke with its state parked and no new reader has been
    /// asked for yet; read without the lock on every call to the host.
    inline: AtomicBool,
    /// When the state was last parked, in nanoseconds since `epoch`.
    since: AtomicU64,
    epoch: Instant,
    /// The longest a parked run keeps the reading role.
    limit: Duration,
    /// `None` when the reader may not run invokes (`limit` zero, or no timer could be made).
    timer: Option<Timer>,
    /// Whether the timer is set (or about to be).
    armed: AtomicBool,
    /// Held while `armed` and the timer are changed together, so that they agree: a
    /// reader disarming (`rest`) and the main thread arming (`on_timer`) at the same moment
    /// could otherwise leave the flag set on a disarmed timer, and the next run would keep
    /// an expiry that never comes.
    timing: Mutex<()>,
    /// When the timer was last set to expire, in nanoseconds after `epoch` (a hint: a park
    /// that finds it near sets the timer again; the main thread's look bounds every run).
    expires: AtomicU64,
    /// Whether the input can be waited on with a timeout (`poll`), so the reader may read
    /// the answers to its own calls (see [`Relay::pump`]).
    pumpable: AtomicBool,
}

impl Relay {
    /// A relay whose parked runs are handed over after `limit` (zero: the reader never
    /// runs invokes, and only the first reader is started through it). `poke` rings the
    /// main thread's bell (the portable timer's wake-up).
    pub fn new(limit: Duration, poke: &Ringer) -> Relay {
        let timer = if limit.is_zero() {
            None
        } else {
            Timer::new(poke).ok()
        };
        Relay {
            parked: Mutex::new(None),
            inline: AtomicBool::new(false),
            since: AtomicU64::new(0),
            epoch: Instant::now(),
            limit,
            timer,
            armed: AtomicBool::new(false),
            timing: Mutex::new(()),
            expires: AtomicU64::new(0),
            pumpable: AtomicBool::new(false),
        }
    }

    /// Whether the reader may run invokes itself (a timer bounds every run).
    pub fn enabled(&self) -> bool {
        self.timer.is_some()
    }

    /// The timer, for the main thread to wait on (`None`: none).
    pub fn timer_watch(&self) -> Option<Watch> {
        self.timer.as_ref().map(Timer::watch)
    }

    /// The relay's clock: nanoseconds since it was made. The reader keeps its own times
    /// on it as integers: a run reads it twice (each read is one `Instant` subtraction,
    /// about 56 instructions at opt-level "z", callgrind) and does no other `Instant` or
    /// `Duration` arithmetic, where it did three subtractions and a sum before.
    pub fn now(&self) -> u64 {
        nanos(self.epoch.elapsed())
    }

    /// Parks the reading state while the reader runs an invoke, and sees that a timer
    /// runs for it.
    pub fn park(&self, role: Box<dyn ReadRole>) {
        self.park_since(role, self.now(), true);
    }

    /// As [`Relay::park`], for a run that started at `start` ([`Relay::now`], read by the
    /// caller already: a clock read costs as much as the rest of a park). `fresh`: the reader
    /// caught up with its input since its last run. A run that is not fresh follows one
    /// whose read frames still wait behind it, so it is timed from the first run of that
    /// series, not from its own start: it keeps the armed expiry, near or not (it was set
    /// at most `limit` after that first run started), and the main thread's look measures
    /// from that first run too. So what waits behind a series of runs waits `limit` at
    /// most, not `limit` per run.
    pub fn park_since(&self, role: Box<dyn ReadRole>, start: u64, fresh: bool) {
        *crate::lock::lock(&self.parked) = Some(role);
        if fresh {
            self.since.store(start, Ordering::SeqCst);
        }
        self.inline.store(true, Ordering::SeqCst);
        let Some(timer) = &self.timer else { return };
        // Armed, with at least two thirds of `limit` left: that expiry comes before this
        // run's own, and the main thread's look sets it again for what the run has left.
        let near = fresh && self.expires.load(Ordering::SeqCst) < start.saturating_add(self.keep());
        if self.armed.load(Ordering::SeqCst) && !near {
            return;
        }
        let _timing = crate::lock::lock(&self.timing);
        if !self.armed.swap(true, Ordering::SeqCst) || near {
            self.set(timer, start, self.left(start));
        }
    }

    /// What is left of `limit` at `now` for the series of runs parked since `since`
    /// (never zero, which would disarm).
    fn left(&self, now: u64) -> Duration {
        let ran = now.saturating_sub(self.since.load(Ordering::SeqCst));
        Duration::from_nanos(nanos(self.limit).saturating_sub(ran).max(1_000))
    }

    /// What must be left of an armed timer for a run after a catch-up to keep it, in ns:
    /// all but a third of `limit`, so that while runs come closer than a third of `limit`
    /// apart, each such run starts with the expiry more than two thirds of `limit` away
    /// (with the default 6 ms, more than one 4 ms tick: see `Options::inline`).
    fn keep(&self) -> u64 {
        let limit = nanos(self.limit);
        limit - limit / 3
    }

    /// Sets the timer to expire `after` past `from` (ns after `epoch`, about now).
    fn set(&self, timer: &Timer, from: u64, after: Duration) {
        self.expires
            .store(from.saturating_add(nanos(after)), Ordering::SeqCst);
        timer.set(after);
    }

    /// For the reader about to wait for input, `gap` nanoseconds after it last caught up
    /// before: a gap of a third of `limit` or more disarms the timer ([`Relay::rest`]);
    /// after a shorter one the next request is likely to come before the expiry, and its
    /// run pushes it ahead (one system call, where a disarm and a re-arm are two).
    pub fn rest_after(&self, gap: u64) {
        if gap >= nanos(self.limit) / 3 {
            self.rest();
        }
    }

    /// For the reader about to wait for input: no run needs the timer now.
    pub fn rest(&self) {
        let Some(timer) = &self.timer else { return };
        let _timing = crate::lock::lock(&self.timing);
        if self.armed.swap(false, Ordering::SeqCst) {
            timer.set(Duration::ZERO);
        }
    }

    /// For the main thread, when the timer expired: hands the reading role over from a run
    /// parked `limit` ago; sets the timer again for a younger one.
    pub fn on_timer(&self) {
        let Some(timer) = &self.timer else { return };
        let overdue = {
            let _timing = crate::lock::lock(&self.timing);
            timer.clear();
            let parked = self.inline.load(Ordering::SeqCst);
            if parked {
                let now = self.now();
                if now.saturating_sub(self.since.load(Ordering::SeqCst)) < nanos(self.limit) {
                    self.set(timer, now, self.left(now));
                    return;
                }
            }
            parked
        };
        // A thread start is slow: not under the lock a park may wait for.
        if overdue && self.relieve().is_err() && NO_READER.allow("no reader thread") {
            log::error!("executa: could not start a reader thread for a long invoke");
        }
        // Then look again: a park stores `inline` and then arms unless armed, so either it
        // sees this store and arms, or this look sees its run.
        let _timing = crate::lock::lock(&self.timing);
        self.armed.store(false, Ordering::SeqCst);
        if self.inline.load(Ordering::SeqCst) && !self.armed.swap(true, Ordering::SeqCst) {
            let now = self.now();
            self.set(timer, now, self.left(now));
        }
    }

    /// Says whether the input is pollable (set once, at start).
    pub fn set_pumpable(&self, on: bool) {
        self.pumpable.store(on, Ordering::SeqCst);
    }

    /// Whether a call made on this thread is read by this thread itself ([`Relay::pump`]),
    /// so no new reader is needed for it.
    pub fn pumps_here(&self) -> bool {
        self.pumpable.load(Ordering::SeqCst) && RUNNING_HERE.with(Cell::get)
    }

    /// For a call to the host made by the invoke the reader runs, on the reader's own
    /// thread: instead of waking another thread to read the answer and then being woken
    /// by it, the reader reads on itself until `done` (the answer is in) or `until` (`None`:
    /// no bound), then parks its state again (a new run for the timer: the time it read
    /// was not its handler's). Returns `false` when it cannot (not this thread, or the
    /// state moved to a new reader): then the caller waits as any handler does.
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

    /// Called when a call to the host is registered, when the timer finds a run too long,
    /// and once at start (to start the first reader): if a state is parked, a new reader
    /// takes over. Cheap otherwise (one atomic swap). Fails when the thread cannot be
    /// started: then the state stays parked (a call to the host waits until the running
    /// invoke ends or the call times out; the timer tries again).
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

    /// Long enough that a test stalled between two adjacent calls (a loaded machine) does
    /// not see a run it just parked as overdue: several tests park and look at once.
    const LIMIT: Duration = Duration::from_millis(200);

    /// Whether the timer expires within `within`.
    fn expires(relay: &Relay, within: Duration) -> bool {
        relay
            .timer
            .as_ref()
            .expect("a timer")
            .expires_within(within)
    }

    /// A relay with a timer whose pokes ring a bell nobody waits on.
    fn relay(limit: Duration) -> Relay {
        let (_bell, ringer) = crate::sys::bell().unwrap();
        Relay::new(limit, &ringer)
    }

    #[test]
    fn a_call_while_parked_starts_one_new_reader() {
        let resumed = Arc::new(AtomicUsize::new(0));
        let relay = relay(LIMIT);
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
        let relay = relay(LIMIT);
        relay.park(Box::new(Role(resumed.clone())));
        let back = relay.take().expect("still parked");
        assert!(back.downcast::<Role>().is_ok());
        relay.relieve().unwrap();
        assert_eq!(resumed.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_run_parked_past_the_limit_is_handed_over_when_the_timer_expires() {
        let resumed = Arc::new(AtomicUsize::new(0));
        let relay = relay(LIMIT);
        assert!(relay.enabled());
        relay.park(Box::new(Role(resumed.clone())));
        assert!(
            expires(&relay, Duration::from_secs(10)),
            "the park armed the timer"
        );
        relay.on_timer();
        assert_eq!(resumed.load(Ordering::SeqCst), 1, "handed over");
        assert!(!relay.armed.load(Ordering::SeqCst), "nothing left to time");
    }

    #[test]
    fn a_younger_run_gets_the_timer_again_and_a_resting_reader_none() {
        let resumed = Arc::new(AtomicUsize::new(0));
        let relay = relay(LIMIT);
        relay.park(Box::new(Role(resumed.clone())));
        assert!(expires(&relay, Duration::from_secs(10)));
        // The first run ended and a second began just now, before the main thread looked.
        relay.take();
        relay.park(Box::new(Role(resumed.clone())));
        relay.on_timer();
        assert_eq!(resumed.load(Ordering::SeqCst), 0, "not the same run: kept");
        assert!(relay.armed.load(Ordering::SeqCst), "but timed");
        assert!(expires(&relay, Duration::from_secs(10)));
        relay.on_timer();
        assert_eq!(
            resumed.load(Ordering::SeqCst),
            1,
            "handed over at its own limit"
        );
        // A reader about to wait for input disarms: no expiry, no look.
        relay.take();
        relay.park(Box::new(Role(resumed.clone())));
        relay.take();
        relay.rest();
        assert!(!expires(&relay, LIMIT * 3), "disarmed");
    }

    /// Runs in quick succession keep one arming while more than two thirds of it is left,
    /// and push it ahead once it is nearer: no system call per run, no expiry while they
    /// come, and the expiry never nearer than two thirds of the limit at a run's start.
    #[test]
    fn a_run_keeps_a_far_expiry_and_pushes_a_near_one_ahead() {
        let relay = relay(Duration::from_secs(3600));
        // A run parked with the expiry at `expires` (None: as the last run left it);
        // returns the expiry it leaves.
        let park_with = |expires: Option<u64>| {
            if let Some(at) = expires {
                relay.expires.store(at, Ordering::SeqCst);
            }
            relay.park(Box::new(Role(Arc::default())));
            relay.take();
            relay.expires.load(Ordering::SeqCst)
        };
        let first = park_with(None);
        assert_eq!(park_with(None), first, "kept: far ahead");
        // As if 17 minutes had passed since the arming: 43 of the 60 left, over two thirds.
        let at = first - 1_020_000_000_000;
        assert_eq!(park_with(Some(at)), at, "kept: 43 min left");
        // 27 minutes after the arming: 33 of the 60 left, more than half but under two
        // thirds; such an expiry would sit within a tick of a run with the default limit.
        let pushed = park_with(Some(first - 1_620_000_000_000));
        assert!(
            pushed >= first,
            "set again, a full limit ahead: {pushed} < {first}"
        );
        assert!(relay.armed.load(Ordering::SeqCst));
        relay.rest();
        assert!(
            !relay.armed.load(Ordering::SeqCst),
            "a resting reader disarms"
        );
    }

    /// A reader about to wait keeps the timer after a short gap (the next run pushes it)
    /// and disarms it after a third of the limit or more.
    #[test]
    fn a_reader_rests_only_after_a_third_of_the_limit() {
        let relay = relay(Duration::from_secs(3));
        relay.park(Box::new(Role(Arc::default())));
        relay.take();
        relay.rest_after(999_000_000);
        assert!(relay.armed.load(Ordering::SeqCst), "kept after 999 ms");
        relay.rest_after(1_000_000_000);
        assert!(!relay.armed.load(Ordering::SeqCst), "disarmed after 1 s");
    }

    /// Runs read together wait for each other: a run that follows another without the
    /// reader catching up in between is timed from the first, so what waits behind both
    /// waits `limit` in all, not `limit` per run.
    #[test]
    fn a_series_of_runs_is_timed_from_its_first() {
        for fresh in [false, true] {
            let resumed = Arc::new(AtomicUsize::new(0));
            let relay = relay(LIMIT);
            relay.park(Box::new(Role(resumed.clone())));
            let first = relay.expires.load(Ordering::SeqCst);
            relay.take();
            std::thread::sleep(LIMIT * 3 / 2);
            relay.park_since(Box::new(Role(resumed.clone())), relay.now(), fresh);
            if fresh {
                assert!(relay.expires.load(Ordering::SeqCst) > first, "a new expiry");
            } else {
                assert_eq!(relay.expires.load(Ordering::SeqCst), first, "kept");
            }
            relay.on_timer();
            let handed = resumed.load(Ordering::SeqCst);
            assert_eq!(
                handed,
                usize::from(!fresh),
                "fresh {fresh}: handed over {handed}"
            );
        }
    }

    /// A reader that parks, ends a short run and rests while the main thread looks after
    /// an expiry: whatever the interleaving, the flag is never left set on a disarmed timer
    /// (the next run would keep an expiry that never comes).
    #[test]
    fn a_resting_reader_and_the_main_threads_look_leave_flag_and_timer_agreeing() {
        use std::sync::Barrier;
        const ROUNDS: usize = 20_000;
        let relay = relay(Duration::from_secs(3600));
        let timer = relay.timer.as_ref().expect("a timer");
        let (start, end) = (Barrier::new(2), Barrier::new(2));
        let mut disagreed = 0;
        std::thread::scope(|s| {
            s.spawn(|| {
                for round in 0..ROUNDS {
                    start.wait();
                    for _ in 0..round % 64 {
                        std::hint::spin_loop();
                    }
                    relay.park(Box::new(Role(Arc::default())));
                    relay.take();
                    relay.rest();
                    end.wait();
                }
            });
            for round in 0..ROUNDS {
                start.wait();
                for _ in 0..(round / 64) % 64 {
                    std::hint::spin_loop();
                }
                relay.on_timer();
                end.wait();
                // The flag set on a disarmed timer is the harm; the other way round an
                // expiry finds nothing, once.
                if relay.armed.load(Ordering::SeqCst) && !timer.is_set() {
                    disagreed += 1;
                }
                relay.armed.store(true, Ordering::SeqCst);
                relay.rest();
            }
        });
        assert_eq!(
            disagreed, 0,
            "flag set on a disarmed timer in {ROUNDS} rounds"
        );
    }

    #[test]
    fn with_a_zero_limit_nothing_is_timed() {
        let relay = relay(Duration::ZERO);
        assert!(!relay.enabled());
        assert!(relay.timer_watch().is_none());
        relay.park(Box::new(Role(Arc::default())));
        relay.on_timer();
        assert!(relay.take().is_some());
    }

    /// The main thread disarming after an expiry and a park at the same moment: whatever
    /// the interleaving, the parked run ends up with the timer armed (a run nobody times
    /// could hold the reading role forever). Repeated, since it is a race.
    #[test]
    fn a_park_racing_with_the_disarming_main_thread_is_always_timed() {
        use std::sync::Barrier;
        const ROUNDS: usize = 20_000;
        let relay = relay(Duration::from_secs(3600));
        let (start, end) = (Barrier::new(2), Barrier::new(2));
        let mut lost = 0;
        std::thread::scope(|s| {
            s.spawn(|| {
                for round in 0..ROUNDS {
                    let role = Box::new(Role(Arc::default()));
                    start.wait();
                    for _ in 0..round % 256 {
                        std::hint::spin_loop();
                    }
                    relay.park(role);
                    end.wait();
                }
            });
            for _ in 0..ROUNDS {
                relay.armed.store(true, Ordering::SeqCst);
                start.wait();
                for _ in 0..128 {
                    std::hint::spin_loop();
                }
                relay.on_timer();
                end.wait();
                if !relay.armed.load(Ordering::SeqCst) {
                    lost += 1;
                }
                relay.take();
                relay.rest();
            }
        });
        assert_eq!(
            lost, 0,
            "parked runs left without a timer in {ROUNDS} rounds"
        );
    }
}
