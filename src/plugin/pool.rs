//! Thread and invoke accounting for the dispatch side.
//!
//! All request-handling threads take jobs from one MPMC queue. The permanent
//! `executa-dispatch` thread always exists; when a job is queued and no thread is idle, one
//! extra `executa-worker` is started (up to `max_concurrent_invokes + 1`, so one thread is
//! always left for `describe`/`health` while the invoke limit is in use), and it exits after
//! `worker_linger` without work. One mutex guards the thread counters, so the decision to
//! start a thread and a thread's decision to exit can never both miss a queued job.
//!
//! Invokes beyond the limit wait in a list with a byte budget ([`WAITING_BYTES`]) and are
//! run by the thread whose invoke finishes. When the list is full, the thread that took the
//! next invoke waits for room: it stops taking jobs, the request queue fills, and the reader
//! stops reading stdin, so a flood waits in the pipe rather than in memory.
//!
//! At shutdown the list is emptied at once (its invokes are answered `SHUTTING_DOWN` by the
//! caller) and a thread waiting for room is released with its invoke refused the same way.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::intake::Bell;

/// Bytes the waiting invokes may hold together (their lines plus overhead each). Past this
/// the next invoke waits for room, which holds the flood back at the pipe.
pub(crate) const WAITING_BYTES: usize = 8 * 1024 * 1024;

/// A job that can wait in the list.
pub(crate) trait Waiting {
    /// Bytes it holds while waiting.
    fn weight(&self) -> usize;
}

/// Which invokes may still start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// All of them: beyond the limit they wait.
    Open,
    /// Those that find a free slot; none may wait (stdin closed: nothing more is coming,
    /// and an invoke left waiting could outlive the host's patience).
    NoWaiting,
    /// None (a signal, `shutdown`, or a closed output).
    Closed,
}

#[derive(Default)]
struct Threads {
    queued: usize,
    idle: usize,
    threads: usize,
    /// Threads already counted idle that are still writing their last reply.
    writing: usize,
    draining: bool,
}

struct Slots<J> {
    running: usize,
    waiting: VecDeque<J>,
    bytes: usize,
    intake: Admission,
    /// Threads waiting in [`Pool::admit`] for room in the list.
    blocked: usize,
}

/// What to do with an invoke that wants to start.
pub(crate) enum Admit<J> {
    /// Run it now.
    Run(J),
    /// It waits for a slot; nothing to do.
    Deferred,
    /// Intake is closed: answer it `SHUTTING_DOWN`.
    Refuse(J),
}

pub(crate) struct Pool<J> {
    /// Rung when a thread starts waiting in [`Pool::admit`]: a reader waiting for queue
    /// room while a handler waits on the host must then refuse instead (`reader.rs`).
    blocked_bell: Option<Arc<Bell>>,
    threads: Mutex<Threads>,
    slots: Mutex<Slots<J>>,
    /// Signalled when the waiting list shrinks or intake changes.
    room: Condvar,
    limit: usize,
    max_threads: usize,
}

impl<J: Waiting> Pool<J> {
    pub fn new(limit: usize, blocked_bell: Option<Arc<Bell>>) -> Self {
        let limit = limit.max(1);
        Pool {
            blocked_bell,
            // The permanent dispatch thread starts idle.
            threads: Mutex::new(Threads {
                threads: 1,
                idle: 1,
                ..Threads::default()
            }),
            slots: Mutex::new(Slots {
                running: 0,
                waiting: VecDeque::new(),
                bytes: 0,
                intake: Admission::Open,
                blocked: 0,
            }),
            room: Condvar::new(),
            limit,
            max_threads: limit + 1,
        }
    }

    fn threads(&self) -> MutexGuard<'_, Threads> {
        crate::lock::lock(&self.threads)
    }

    fn slots(&self) -> MutexGuard<'_, Slots<J>> {
        crate::lock::lock(&self.slots)
    }

    /// Counts a job about to be queued. Returns `true` when the caller must start one
    /// more worker (already counted as an idle thread).
    pub fn enqueue(&self) -> bool {
        let mut s = self.threads();
        s.queued += 1;
        let spawn = s.queued > s.idle && s.threads < self.max_threads;
        if spawn {
            s.threads += 1;
            s.idle += 1;
        }
        spawn
    }

    /// Undoes `enqueue` for a job that could not be queued.
    pub fn unqueue(&self) {
        let mut s = self.threads();
        s.queued = s.queued.saturating_sub(1);
    }

    /// Undoes the thread counted by `enqueue` when it could not be started.
    pub fn spawn_failed(&self) {
        let mut s = self.threads();
        s.threads -= 1;
        s.idle -= 1;
    }

    /// A thread took a job off the queue.
    pub fn took(&self) {
        let mut s = self.threads();
        s.queued = s.queued.saturating_sub(1);
        s.idle -= 1;
    }

    /// A thread finished a job and is idle again. Returns `true` when draining and the
    /// main thread should look again (see `settled`).
    pub fn done(&self) -> bool {
        let mut s = self.threads();
        s.idle += 1;
        self.look_again(&s)
    }

    /// A thread has its last reply in hand and only has to write it: it counts as idle
    /// from now on (so the next request does not start a worker for a thread that is
    /// microseconds from being free), but not as quiet until [`Pool::replied`].
    pub fn replying(&self) {
        let mut s = self.threads();
        s.idle += 1;
        s.writing += 1;
    }

    /// The reply announced by [`Pool::replying`] is written. Returns `true` when draining
    /// and the main thread should look again (see `settled`).
    pub fn replied(&self) -> bool {
        let mut s = self.threads();
        s.writing -= 1;
        self.look_again(&s)
    }

    /// The reader holds replies to write as one batch (see `reader.rs`): the plugin is not
    /// quiet until [`Pool::written`].
    pub fn holding(&self) {
        self.threads().writing += 1;
    }

    /// The batch counted by [`Pool::holding`] is written. Returns `true` when draining and
    /// the main thread should look again (see `settled`).
    pub fn written(&self) -> bool {
        let mut s = self.threads();
        s.writing -= 1;
        self.look_again(&s)
    }

    /// A reader thread's invoke ended after reading moved to another thread (its slot is
    /// given back by [`Pool::finish`]), and the thread ends. Returns `true` when draining
    /// and the main thread should look again (see `settled`).
    pub fn ran_off(&self) -> bool {
        let s = self.threads();
        self.look_again(&s)
    }

    /// An idle extra worker's wait ran out: it may exit unless queued work would then be
    /// left without an idle thread.
    pub fn may_exit(&self) -> bool {
        let mut s = self.threads();
        if s.queued >= s.idle {
            return false;
        }
        s.idle -= 1;
        s.threads -= 1;
        true
    }

    /// A thread leaves because the queue is closed.
    pub fn exit(&self) {
        let mut s = self.threads();
        s.idle -= 1;
        s.threads -= 1;
    }

    /// Asks for a slot for an invoke. Blocks while the waiting list is over its budget,
    /// until a running invoke finishes or intake closes; that wait is the backpressure and
    /// lasts as long as the handlers ahead of it.
    pub fn admit(&self, job: J) -> Admit<J> {
        let mut slots = self.slots();
        loop {
            if slots.intake == Admission::Closed {
                return Admit::Refuse(job);
            }
            if slots.running < self.limit {
                slots.running += 1;
                return Admit::Run(job);
            }
            if slots.intake == Admission::NoWaiting {
                return Admit::Refuse(job);
            }
            let weight = job.weight();
            if slots.waiting.is_empty() || slots.bytes + weight <= WAITING_BYTES {
                slots.bytes += weight;
                slots.waiting.push_back(job);
                return Admit::Deferred;
            }
            slots.blocked += 1;
            if slots.blocked == 1
                && let Some(bell) = &self.blocked_bell
            {
                bell.ring_if_waiting();
            }
            slots = self
                .room
                .wait(slots)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            slots.blocked -= 1;
        }
    }

    /// Whether a thread waits for room in the waiting list: the list's budget is spent.
    pub fn admit_blocked(&self) -> bool {
        self.slots().blocked > 0
    }

    /// Takes a slot for an invoke the reader runs itself, only when one is free at once
    /// and no invoke waits for one (the reader never waits, nor jumps the line).
    pub fn try_start(&self) -> bool {
        let mut slots = self.slots();
        let free = slots.intake != Admission::Closed
            && slots.waiting.is_empty()
            && slots.running < self.limit;
        if free {
            slots.running += 1;
        }
        free
    }

    /// An invoke finished: returns the next waiting one to run in its slot, if any.
    pub fn finish(&self) -> Option<J> {
        let mut slots = self.slots();
        let next = slots.waiting.pop_front();
        match &next {
            Some(job) => {
                slots.bytes -= job.weight();
                self.room.notify_all();
            }
            None => slots.running -= 1,
        }
        next
    }

    /// Narrows which invokes may start, and hands back every invoke still waiting for a
    /// slot (none of them has started), for the caller to refuse. Wakes a thread waiting
    /// for room. Intake never widens again.
    pub fn restrict(&self, intake: Admission) -> Vec<J> {
        let mut slots = self.slots();
        if intake_rank(intake) > intake_rank(slots.intake) {
            slots.intake = intake;
        }
        slots.bytes = 0;
        let waiting = std::mem::take(&mut slots.waiting);
        self.room.notify_all();
        waiting.into()
    }

    /// Enters draining. Returns `true` when everything is already quiet.
    pub fn drain(&self) -> bool {
        let mut s = self.threads();
        s.draining = true;
        self.quiet(&s)
    }

    /// What the draining main thread waits for: everything quiet, or no handler running
    /// (which is all it waits for once the output is gone, while the host may still be
    /// writing requests that keep the queue from ever running empty).
    fn settled(&self, s: &Threads) -> bool {
        self.quiet(s) || self.slots().running == 0
    }

    /// Whether the main thread, if draining, should look again now (see `settled`).
    fn look_again(&self, s: &Threads) -> bool {
        s.draining && self.settled(s)
    }

    /// Nothing queued, no invoke running or waiting, and no thread in the middle of a job
    /// (a `describe` being answered counts: its reply must be queued before the writer is
    /// closed).
    fn quiet(&self, s: &Threads) -> bool {
        let slots = self.slots();
        s.queued == 0
            && s.idle == s.threads
            && s.writing == 0
            && slots.running == 0
            && slots.waiting.is_empty()
    }

    /// Invokes running or waiting right now.
    pub fn in_flight(&self) -> usize {
        let slots = self.slots();
        slots.running + slots.waiting.len()
    }

    /// Invokes whose handlers are running right now.
    pub fn running(&self) -> usize {
        self.slots().running
    }

    /// Threads alive (dispatch plus extra workers).
    #[cfg(test)]
    pub fn thread_count(&self) -> usize {
        self.threads().threads
    }
}

fn intake_rank(i: Admission) -> u8 {
    match i {
        Admission::Open => 0,
        Admission::NoWaiting => 1,
        Admission::Closed => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Waiting for u32 {
        fn weight(&self) -> usize {
            *self as usize
        }
    }

    #[test]
    fn invokes_beyond_the_limit_wait_and_run_in_order() {
        let p: Pool<u32> = Pool::new(1, None);
        assert!(matches!(p.admit(1), Admit::Run(1)));
        assert!(matches!(p.admit(2), Admit::Deferred));
        assert!(matches!(p.admit(3), Admit::Deferred));
        assert_eq!(p.in_flight(), 3);
        assert_eq!(p.finish(), Some(2));
        assert_eq!(p.finish(), Some(3));
        assert_eq!(p.finish(), None);
        assert_eq!(p.in_flight(), 0);
    }

    #[test]
    fn a_full_waiting_list_blocks_the_next_invoke_until_one_finishes() {
        let p: Arc<Pool<u32>> = Arc::new(Pool::new(1, None));
        assert!(matches!(p.admit(1), Admit::Run(_)));
        assert!(matches!(p.admit(WAITING_BYTES as u32), Admit::Deferred));
        let other = p.clone();
        let blocked = std::thread::spawn(move || matches!(other.admit(7), Admit::Deferred));
        // The admit above waits for room; finishing the running invoke pops the big one.
        while p.in_flight() < 2 {
            std::thread::yield_now();
        }
        assert_eq!(p.finish(), Some(WAITING_BYTES as u32));
        assert!(blocked.join().unwrap(), "admitted once there was room");
        assert_eq!(p.finish(), Some(7));
    }

    /// A reader waiting for queue room while a handler waits on the host must refuse once a
    /// dispatch thread waits for room in the list: it is woken then, not at its next look.
    #[test]
    fn a_thread_blocking_in_admit_rings_the_readers_bell() {
        let bell = Arc::new(Bell::default());
        let p: Arc<Pool<u32>> = Arc::new(Pool::new(1, Some(bell.clone())));
        assert!(!bell.rung_while_waiting());
        assert!(matches!(p.admit(1), Admit::Run(_)));
        assert!(matches!(p.admit(WAITING_BYTES as u32), Admit::Deferred));
        assert!(!p.admit_blocked());
        let other = p.clone();
        let blocked = std::thread::spawn(move || matches!(other.admit(7), Admit::Deferred));
        while !p.admit_blocked() {
            std::thread::yield_now();
        }
        assert!(
            bell.rung_while_waiting(),
            "the bell rang as the thread blocked"
        );
        assert_eq!(p.finish(), Some(WAITING_BYTES as u32));
        assert!(blocked.join().unwrap());
    }

    #[test]
    fn restricting_intake_hands_back_the_waiting_and_releases_a_blocked_thread() {
        let p: Arc<Pool<u32>> = Arc::new(Pool::new(1, None));
        assert!(matches!(p.admit(1), Admit::Run(_)));
        assert!(matches!(p.admit(WAITING_BYTES as u32), Admit::Deferred));
        let other = p.clone();
        let blocked = std::thread::spawn(move || matches!(other.admit(7), Admit::Refuse(7)));
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(p.restrict(Admission::Closed), vec![WAITING_BYTES as u32]);
        assert!(blocked.join().unwrap(), "refused, not left waiting");
        assert!(matches!(p.admit(9), Admit::Refuse(9)));
        assert_eq!(p.finish(), None);
        assert_eq!(p.in_flight(), 0);
    }

    #[test]
    fn without_waiting_an_invoke_runs_only_in_a_free_slot() {
        let p: Pool<u32> = Pool::new(1, None);
        assert!(p.restrict(Admission::NoWaiting).is_empty());
        assert!(matches!(p.admit(1), Admit::Run(1)));
        assert!(matches!(p.admit(2), Admit::Refuse(2)));
        assert!(p.restrict(Admission::Open).is_empty());
        assert!(
            matches!(p.admit(3), Admit::Refuse(3)),
            "intake never widens"
        );
    }

    #[test]
    fn spawns_only_when_no_thread_is_idle_and_caps_threads() {
        let p: Pool<u32> = Pool::new(2, None);
        assert!(
            !p.enqueue(),
            "the idle dispatch thread covers the first job"
        );
        assert!(p.enqueue(), "a second queued job needs a second thread");
        assert!(p.enqueue());
        assert!(!p.enqueue(), "at most limit + 1 threads");
        assert_eq!(p.thread_count(), 3);
    }

    #[test]
    fn an_idle_worker_stays_while_work_is_queued() {
        let p: Pool<u32> = Pool::new(2, None);
        p.took(); // dispatch busy
        assert!(p.enqueue()); // worker started, counted idle
        assert!(!p.may_exit(), "the queued job needs it");
        p.took();
        assert!(!p.done());
        assert!(p.may_exit());
    }

    #[test]
    fn draining_waits_for_a_thread_mid_job() {
        let p: Pool<u32> = Pool::new(2, None);
        assert!(!p.enqueue());
        p.took(); // dispatch is answering, say, `describe`
        assert!(!p.drain(), "a reply is still being built");
        assert!(p.done(), "quiet once the job is done");
    }
}
