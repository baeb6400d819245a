//! A one-slot mailbox: where the answer to one call is left for the thread that waits for
//! it (a plugin's call to its host, a host's call to its plugin).
//!
//! Not a channel. A channel per call allocates its queue, and a crossbeam sender wakes the
//! receiver while it holds the channel's own lock: on one CPU the woken caller runs at
//! once, finds that lock taken and sleeps again, which `strace` showed as three more
//! system calls on every reply the host settled. Here the answer is left under a mutex
//! and the waiter is woken only if it sleeps (a condition variable's notify always makes a
//! system call, and a waiter that polls, or reads its own answers, does not need one).

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crossbeam_channel::{RecvTimeoutError, TryRecvError};

use crate::lock::lock;

struct Mailbox<T> {
    slot: Mutex<Slot<T>>,
    arrived: Condvar,
}

struct Slot<T> {
    mail: Mail<T>,
    /// Whether the waiter sleeps on `arrived`.
    asleep: bool,
}

enum Mail<T> {
    Empty,
    Full(T),
    /// The sender let go of the call unanswered, or the waiter took its one answer.
    Gone,
}

/// The answering end: delivers at most one value; dropped without one, it wakes the waiter
/// with `Disconnected`.
pub(crate) struct Sender<T>(Arc<Mailbox<T>>);

/// The waiting end.
pub(crate) struct Receiver<T>(Arc<Mailbox<T>>);

/// A new, empty mailbox.
pub(crate) fn mailbox<T>() -> (Sender<T>, Receiver<T>) {
    let mailbox = Arc::new(Mailbox {
        slot: Mutex::new(Slot {
            mail: Mail::Empty,
            asleep: false,
        }),
        arrived: Condvar::new(),
    });
    (Sender(mailbox.clone()), Receiver(mailbox))
}

impl<T> Mailbox<T> {
    /// Fills the box if it is empty (the first of a value and a drop wins) and wakes the
    /// waiter if it sleeps. Never blocks but for the slot's lock, held only briefly.
    fn put(&self, mail: Mail<T>) {
        let mut slot = lock(&self.slot);
        if matches!(slot.mail, Mail::Empty) {
            slot.mail = mail;
            if slot.asleep {
                self.arrived.notify_one();
            }
        }
    }
}

impl<T> Sender<T> {
    /// Delivers the value. A waiter that gave up already is fine: the value is dropped
    /// with the box.
    pub fn send(self, value: T) {
        self.0.put(Mail::Full(value));
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        self.0.put(Mail::Gone);
    }
}

impl<T> Receiver<T> {
    /// Whether the value (or the news that none will come) is in.
    pub fn is_ready(&self) -> bool {
        !matches!(lock(&self.0.slot).mail, Mail::Empty)
    }

    /// Takes the value without waiting: `Empty` when none is in yet, `Disconnected` when
    /// none will come (or it was taken already).
    #[cfg_attr(not(feature = "host"), allow(dead_code))] // a host's callers poll with it
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        let mut slot = lock(&self.0.slot);
        take(&mut slot).unwrap_or(Err(TryRecvError::Empty))
    }

    /// Blocks until the value arrives (even after the sender is dropped, a value left in
    /// the box comes first), the sender is dropped without one (`Disconnected`), or
    /// `timeout` passes (`Timeout`; a timeout too large for the clock waits without one).
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        let deadline = Instant::now().checked_add(timeout);
        let mut slot = lock(&self.0.slot);
        loop {
            match take(&mut slot) {
                Some(Ok(value)) => return Ok(value),
                Some(Err(_)) => return Err(RecvTimeoutError::Disconnected),
                None => {}
            }
            let now = Instant::now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                return Err(RecvTimeoutError::Timeout);
            }
            slot.asleep = true;
            slot = match deadline {
                Some(deadline) => {
                    let waited = self.0.arrived.wait_timeout(slot, deadline - now);
                    waited.unwrap_or_else(PoisonError::into_inner).0
                }
                None => (self.0.arrived.wait(slot)).unwrap_or_else(PoisonError::into_inner),
            };
            slot.asleep = false;
        }
    }
}

/// The value, or `Disconnected`, once the box is no longer empty; `None` while it is. A
/// value is taken once: the box then reports the call gone.
fn take<T>(slot: &mut Slot<T>) -> Option<Result<T, TryRecvError>> {
    match std::mem::replace(&mut slot.mail, Mail::Gone) {
        Mail::Full(value) => Some(Ok(value)),
        Mail::Gone => Some(Err(TryRecvError::Disconnected)),
        Mail::Empty => {
            slot.mail = Mail::Empty;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Far longer than any of these waits should take: only a failure waits this long.
    const WAIT: Duration = Duration::from_secs(10);

    #[test]
    fn a_value_wakes_a_sleeping_waiter_once() {
        let (tx, rx) = mailbox();
        let waiter = std::thread::spawn(move || {
            let first = rx.recv_timeout(WAIT);
            (first, rx.try_recv())
        });
        tx.send(7);
        let (first, second) = waiter.join().unwrap();
        assert_eq!(first, Ok(7));
        assert_eq!(second, Err(TryRecvError::Disconnected), "taken once");
    }

    #[test]
    fn a_dropped_sender_disconnects_but_a_value_sent_first_comes_first() {
        let (tx, rx) = mailbox::<u8>();
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        assert!(!rx.is_ready());
        drop(tx);
        assert!(rx.is_ready());
        assert_eq!(rx.recv_timeout(WAIT), Err(RecvTimeoutError::Disconnected));

        let (tx, rx) = mailbox();
        tx.send("answer");
        assert_eq!(rx.recv_timeout(Duration::ZERO), Ok("answer"));
    }

    #[test]
    fn silence_times_out_and_a_later_value_is_still_received() {
        let (tx, rx) = mailbox();
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(10)),
            Err(RecvTimeoutError::Timeout)
        );
        let sender = std::thread::spawn(move || tx.send(1));
        assert_eq!(rx.recv_timeout(WAIT), Ok(1));
        sender.join().unwrap();
    }
}
