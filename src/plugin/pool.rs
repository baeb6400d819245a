//! Thread and invoke accounting for the dispatch side.
//!
//! All request-handling threads take jobs from one MPMC queue. The permanent
//! `executa-dispatch` thread always exists; when a job is queued and no thread is idle, one
//! extra `executa-worker` is started (up to `max_concurrent_invokes + 1`, so one thread is
//! always left for `describe`/`health` while the invoke limit is in use), and it exits after
//! `worker_linger` without work. Invokes beyond the limit wait in a bounded list and are run
//! by the thread whose invoke finishes. One mutex guards the counters, so the decision to
//! start a thread and a thread's decision to exit can never both miss a queued job.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

/// Invokes that may wait for a slot; beyond this they are refused as busy.
pub(crate) const DEFERRED_CAP: usize = 256;

/// Bytes of arguments the waiting invokes may hold together; beyond this they are refused
/// as busy, so a flood of large invokes cannot exhaust memory.
pub(crate) const DEFERRED_BYTES: usize = 64 * 1024 * 1024;

/// A job that can wait in the deferred list.
pub(crate) trait Waiting {
    /// Bytes it holds while waiting.
    fn weight(&self) -> usize;
    /// Records that it waited (it no longer counts as admitted at once).
    fn defer(&mut self);
}

struct Deferred<J> {
    jobs: VecDeque<J>,
    bytes: usize,
}

#[derive(Default)]
struct State {
    queued: usize,
    idle: usize,
    threads: usize,
    running: usize,
    draining: bool,
}

impl State {
    /// Nothing queued, no invoke running or waiting, and no thread in the middle of a job
    /// (a `describe` being answered counts: its reply must be queued before the writer
    /// is closed).
    fn is_quiet(&self) -> bool {
        self.queued == 0 && self.running == 0 && self.idle == self.threads
    }
}

/// What to do with an invoke that wants to start.
pub(crate) enum Admit<J> {
    /// Run it now.
    Run(J),
    /// It waits for a slot; nothing to do.
    Deferred,
    /// The waiting list is full: refuse it.
    Refuse(J),
}

pub(crate) struct Pool<J> {
    state: Mutex<State>,
    deferred: Mutex<Deferred<J>>,
    limit: usize,
    max_threads: usize,
}

impl<J: Waiting> Pool<J> {
    pub fn new(limit: usize) -> Self {
        let limit = limit.max(1);
        Pool {
            // The permanent dispatch thread starts idle.
            state: Mutex::new(State {
                threads: 1,
                idle: 1,
                ..State::default()
            }),
            deferred: Mutex::new(Deferred {
                jobs: VecDeque::new(),
                bytes: 0,
            }),
            limit,
            max_threads: limit + 1,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        crate::lock::lock(&self.state)
    }

    fn deferred(&self) -> MutexGuard<'_, Deferred<J>> {
        crate::lock::lock(&self.deferred)
    }

    /// Counts a job about to be queued. Returns `true` when the caller must start one
    /// more worker (already counted as an idle thread).
    pub fn enqueue(&self) -> bool {
        let mut s = self.state();
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
        let mut s = self.state();
        s.queued = s.queued.saturating_sub(1);
    }

    /// Undoes the thread counted by `enqueue` when it could not be started.
    pub fn spawn_failed(&self) {
        let mut s = self.state();
        s.threads -= 1;
        s.idle -= 1;
    }

    /// A thread took a job off the queue.
    pub fn took(&self) {
        let mut s = self.state();
        s.queued = s.queued.saturating_sub(1);
        s.idle -= 1;
    }

    /// A thread finished a job and is idle again. Returns `true` when draining and
    /// everything is quiet.
    pub fn done(&self) -> bool {
        let mut s = self.state();
        s.idle += 1;
        s.draining && s.is_quiet()
    }

    /// An idle extra worker's wait ran out: it may exit unless queued work would then be
    /// left without an idle thread.
    pub fn may_exit(&self) -> bool {
        let mut s = self.state();
        if s.queued >= s.idle {
            return false;
        }
        s.idle -= 1;
        s.threads -= 1;
        true
    }

    /// A thread leaves because the queue is closed.
    pub fn exit(&self) {
        let mut s = self.state();
        s.idle -= 1;
        s.threads -= 1;
    }

    /// Asks for a slot for an invoke.
    pub fn admit(&self, mut job: J) -> Admit<J> {
        let mut s = self.state();
        if s.running < self.limit {
            s.running += 1;
            return Admit::Run(job);
        }
        let mut waiting = self.deferred();
        let weight = job.weight();
        if waiting.jobs.len() >= DEFERRED_CAP || waiting.bytes + weight > DEFERRED_BYTES {
            return Admit::Refuse(job);
        }
        job.defer();
        waiting.bytes += weight;
        waiting.jobs.push_back(job);
        Admit::Deferred
    }

    /// An invoke finished: returns the next waiting one to run in its slot, if any.
    pub fn finish(&self) -> Option<J> {
        let mut s = self.state();
        let mut waiting = self.deferred();
        let next = waiting.jobs.pop_front();
        match &next {
            Some(job) => waiting.bytes -= job.weight(),
            None => s.running -= 1,
        }
        next
    }

    /// Enters draining. Returns `true` when everything is already quiet.
    pub fn drain(&self) -> bool {
        let mut s = self.state();
        s.draining = true;
        s.is_quiet()
    }

    /// Invokes running or waiting right now.
    pub fn in_flight(&self) -> usize {
        self.state().running + self.deferred().jobs.len()
    }

    /// Threads alive (dispatch plus extra workers).
    #[cfg(test)]
    pub fn threads(&self) -> usize {
        self.state().threads
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Waiting for u32 {
        fn weight(&self) -> usize {
            *self as usize
        }
        fn defer(&mut self) {}
    }

    #[test]
    fn the_waiting_list_has_a_byte_budget() {
        let p: Pool<u32> = Pool::new(1);
        assert!(matches!(p.admit(1), Admit::Run(_)));
        assert!(matches!(
            p.admit(DEFERRED_BYTES as u32 - 10),
            Admit::Deferred
        ));
        assert!(matches!(p.admit(11), Admit::Refuse(11)));
        assert!(matches!(p.admit(10), Admit::Deferred));
    }

    #[test]
    fn spawns_only_when_no_thread_is_idle_and_caps_threads() {
        let p: Pool<u32> = Pool::new(2);
        assert!(
            !p.enqueue(),
            "the idle dispatch thread covers the first job"
        );
        assert!(p.enqueue(), "a second queued job needs a second thread");
        assert!(p.enqueue());
        assert!(!p.enqueue(), "at most limit + 1 threads");
        assert_eq!(p.threads(), 3);
    }

    #[test]
    fn invokes_beyond_the_limit_wait_and_run_in_order() {
        let p: Pool<u32> = Pool::new(1);
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
    fn an_idle_worker_stays_while_work_is_queued() {
        let p: Pool<u32> = Pool::new(2);
        p.took(); // dispatch busy
        assert!(p.enqueue()); // worker started, counted idle
        assert!(!p.may_exit(), "the queued job needs it");
        p.took();
        assert!(!p.done());
        assert!(p.may_exit());
    }

    #[test]
    fn draining_waits_for_a_thread_mid_job() {
        let p: Pool<u32> = Pool::new(2);
        assert!(!p.enqueue());
        p.took(); // dispatch is answering, say, `describe`
        assert!(!p.drain(), "a reply is still being built");
        assert!(p.done(), "quiet once the job is done");
    }
}
