//! What the reader may hold in the request queue, and how a waiting reader is woken.
//!
//! Requests read but not yet taken by a dispatch thread hold at most [`INTAKE_BYTES`]
//! (their lines plus a fixed overhead each, so a flood of tiny frames is bounded too; no
//! count is, so tiny requests are kept up to the same budget as large ones). When it is
//! spent the reader stops reading stdin until dispatch threads take jobs, so a flood waits
//! in the pipe. It is woken, not polling, by whoever changes what it waits for: a dispatch
//! thread taking a job, or a handler starting a call to the host (then the reader must keep
//! reading, because the answer may be right behind the flood; see `reader.rs`).
//!
//! The line buffers travel with the jobs and come back through a small free list (an
//! invoke the reader ran gives its buffer straight back to the reader instead: see
//! `Scratch::line`), so a request costs no allocation for its line once the plugin is warm.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

/// Bytes of queued requests (lines plus overhead) the reader may hold.
pub(crate) const INTAKE_BYTES: usize = 8 * 1024 * 1024;

/// Line buffers kept for reuse.
const FREE_BUFFERS: usize = 64;

/// A buffer that grew past this is freed rather than kept, so one large frame does not
/// stay resident.
const KEEP_BUFFER_BYTES: usize = 16 * 1024;

/// The longest a waiting reader sleeps before it looks again. Wake-ups are sent for every
/// change it waits for, so this only bounds the cost of a wake-up lost to a bug.
const WAIT_BOUND: Duration = Duration::from_millis(100);

pub(crate) struct Intake {
    /// Bytes held by queued jobs: a waiting reader is woken only once half of the budget is
    /// free, so it reads a burst per wake-up instead of one frame per job taken.
    held: AtomicUsize,
    bell: Arc<Bell>,
    free: Mutex<Vec<Vec<u8>>>,
}

/// A wake-up that is never lost: a rung bell stays rung until the waiter hears it.
/// (A mutex and a condition variable rather than a channel: this crate's channels are for
/// work, and each channel type adds its own code to every plugin binary.)
#[derive(Default)]
pub(crate) struct Bell {
    rung: Mutex<bool>,
    heard: Condvar,
    /// Whether the reader is in [`Intake::wait_unless`]. A ring is only needed then, and
    /// costs a system call (a condition variable's notify always makes one).
    waiting: AtomicBool,
}

impl Bell {
    /// Wakes the waiter, or makes its next wait return at once.
    fn ring(&self) {
        *self.rung.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.heard.notify_one();
    }

    /// Wakes the reader if it waits in [`Intake::wait_unless`]; one atomic load when it
    /// does not (for example when the reader itself is the caller, running an invoke).
    /// The caller changes what the reader waits for first: the reader marks itself
    /// waiting before it looks (both `SeqCst`), so one of the two always sees the other.
    pub fn ring_if_waiting(&self) {
        if self.waiting.load(Ordering::SeqCst) {
            self.ring();
        }
    }

    /// For tests: marks a waiter present, and whether the bell was rung since (cleared).
    #[cfg(test)]
    pub fn rung_while_waiting(&self) -> bool {
        self.waiting.store(true, Ordering::SeqCst);
        std::mem::take(&mut *self.rung.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Waits for a ring, at most `bound`.
    fn wait(&self, bound: Duration) {
        let rung = self.rung.lock().unwrap_or_else(PoisonError::into_inner);
        let (mut rung, _) = self
            .heard
            .wait_timeout_while(rung, bound, |rung| !*rung)
            .unwrap_or_else(PoisonError::into_inner);
        *rung = false;
    }
}

impl Intake {
    pub fn new() -> Intake {
        Intake {
            held: AtomicUsize::new(0),
            bell: Arc::default(),
            free: Mutex::new(Vec::new()),
        }
    }

    /// A sender that wakes a waiting reader (given to the pending table, which pokes it
    /// when a handler starts a call to the host).
    pub fn waker(&self) -> Arc<Bell> {
        self.bell.clone()
    }

    /// Counts `weight` bytes in, unless that would pass the budget. Nothing held always
    /// admits one job, however large, so no frame is refused forever.
    pub fn try_reserve(&self, weight: usize) -> bool {
        let mut held = self.held.load(Ordering::SeqCst);
        loop {
            if held > 0 && held.saturating_add(weight) > INTAKE_BYTES {
                return false;
            }
            match self.held.compare_exchange_weak(
                held,
                held + weight,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return true,
                Err(now) => held = now,
            }
        }
    }

    /// Whether a waiting reader should go on: the queue is at most half full.
    pub fn drained(&self) -> bool {
        self.held.load(Ordering::SeqCst) <= INTAKE_BYTES / 2
    }

    /// Gives back what a job held (it left the queue) and wakes a waiting reader once the
    /// queue is half empty.
    pub fn release(&self, weight: usize) {
        self.held.fetch_sub(weight, Ordering::SeqCst);
        if self.drained() {
            self.wake();
        }
    }

    /// Wakes the reader if it waits. Cheap when it does not: one atomic load.
    pub fn wake(&self) {
        self.bell.ring_if_waiting();
    }

    /// Blocks the reader until a wake-up (or [`WAIT_BOUND`]), unless `ready` says there is
    /// no need. `ready` is checked after the reader is marked waiting, so a change made
    /// between the caller's check and the sleep is never missed.
    pub fn wait_unless(&self, ready: impl Fn() -> bool) {
        self.bell.waiting.store(true, Ordering::SeqCst);
        if !ready() {
            self.bell.wait(WAIT_BOUND);
        }
        self.bell.waiting.store(false, Ordering::SeqCst);
    }

    /// A buffer for the next line, reused when one is free.
    pub fn buffer(&self, len: usize) -> Vec<u8> {
        let kept = self
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let mut buf = kept.unwrap_or_default();
        buf.reserve(len);
        buf
    }

    /// Whether a buffer is small enough to keep for reuse.
    pub fn keeps(buf: &Vec<u8>) -> bool {
        buf.capacity() <= KEEP_BUFFER_BYTES
    }

    /// Takes back a zeroed buffer for reuse; a large one is freed instead.
    pub fn recycle(&self, buf: Vec<u8>) {
        if Intake::keeps(&buf) {
            let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
            if free.len() < FREE_BUFFERS {
                free.push(buf);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_admits_one_job_of_any_size_and_then_holds_the_line() {
        let intake = Intake::new();
        assert!(
            intake.try_reserve(INTAKE_BYTES * 2),
            "nothing held: admitted"
        );
        assert!(!intake.try_reserve(1), "over budget");
        intake.release(INTAKE_BYTES * 2);
        assert!(intake.try_reserve(INTAKE_BYTES - 10));
        assert!(intake.try_reserve(10));
        assert!(!intake.try_reserve(1));
    }

    #[test]
    fn a_release_wakes_a_waiting_reader() {
        let intake = std::sync::Arc::new(Intake::new());
        assert!(intake.try_reserve(INTAKE_BYTES));
        let other = intake.clone();
        let t = std::thread::spawn(move || {
            while !other.bell.waiting.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            other.release(INTAKE_BYTES);
        });
        // Waits for the release (the bound is 100 ms; the loop below would spin forever
        // if wake-ups were lost and the bound were removed).
        while !intake.try_reserve(1) {
            intake.wait_unless(|| false);
        }
        t.join().unwrap();
    }

    #[test]
    fn buffers_are_reused_and_large_ones_freed() {
        let intake = Intake::new();
        let mut b = intake.buffer(100);
        b.extend_from_slice(b"abc");
        let ptr = b.as_ptr();
        b.clear();
        intake.recycle(b);
        let again = intake.buffer(10);
        assert_eq!(again.as_ptr(), ptr, "the same allocation comes back");
        intake.recycle(Vec::with_capacity(KEEP_BUFFER_BYTES + 1));
        assert!(
            intake.free.lock().unwrap().is_empty(),
            "a large buffer is not kept"
        );
    }
}
