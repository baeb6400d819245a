//! The table of requests waiting for an answer: one-slot mailboxes (`crate::oneshot`)
//! keyed by id.
//!
//! The reader settles a reply straight into the waiting caller's mailbox, never through a
//! queue shared with requests, so a busy reverse-call pool can never hold a reply back.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::value::RawValue;

use crate::error::{Error, Result};
use crate::lock::lock;
use crate::oneshot::{Receiver, Sender, mailbox};

/// What a waiting caller receives: the raw `result`, or the error that ended the call.
pub(crate) type Reply = Result<Box<RawValue>>;

/// Pending calls of one plugin process.
pub(crate) struct Pending {
    table: Mutex<Table>,
}

struct Table {
    calls: HashMap<u64, Sender<Reply>>,
    /// One waiter for a reply whose id is `null` (the answer to a malformed line).
    null_waiter: Option<Sender<Reply>>,
    /// Set once the process is gone; later registrations fail with this reason.
    closed: Option<String>,
}

impl Pending {
    pub(crate) fn new() -> Self {
        Pending {
            table: Mutex::new(Table {
                calls: HashMap::new(),
                null_waiter: None,
                closed: None,
            }),
        }
    }

    /// Registers `id` and returns the channel its reply will arrive on; fails with
    /// [`Error::Disconnected`] when the process is already gone.
    pub(crate) fn register(&self, id: u64) -> Result<Receiver<Reply>> {
        let (tx, rx) = mailbox();
        let mut t = lock(&self.table);
        if let Some(why) = &t.closed {
            return Err(Error::Disconnected(why.clone()));
        }
        t.calls.insert(id, tx);
        Ok(rx)
    }

    /// Registers the single waiter for an `id: null` reply.
    pub(crate) fn register_null(&self) -> Result<Receiver<Reply>> {
        let (tx, rx) = mailbox();
        let mut t = lock(&self.table);
        if let Some(why) = &t.closed {
            return Err(Error::Disconnected(why.clone()));
        }
        t.null_waiter = Some(tx);
        Ok(rx)
    }

    /// Delivers a reply; `false` when nobody waits for `id` (timed out, or never ours).
    pub(crate) fn settle(&self, id: u64, reply: Reply) -> bool {
        let tx = lock(&self.table).calls.remove(&id);
        tx.map(|tx| tx.send(reply)).is_some()
    }

    /// Delivers an `id: null` reply to its waiter, if any.
    pub(crate) fn settle_null(&self, reply: Reply) -> bool {
        let tx = lock(&self.table).null_waiter.take();
        tx.map(|tx| tx.send(reply)).is_some()
    }

    /// Whether a call with this id is waiting.
    pub(crate) fn contains(&self, id: u64) -> bool {
        lock(&self.table).calls.contains_key(&id)
    }

    /// Forgets a call (its caller gave up); a late reply is then dropped.
    pub(crate) fn cancel(&self, id: u64) {
        lock(&self.table).calls.remove(&id);
    }

    /// Forgets the `id: null` waiter.
    pub(crate) fn cancel_null(&self) {
        lock(&self.table).null_waiter = None;
    }

    /// Number of calls waiting.
    pub(crate) fn len(&self) -> usize {
        lock(&self.table).calls.len()
    }

    /// Fails every waiting call at once with `Disconnected(reason)` and refuses new ones.
    /// Only the first reason is kept.
    pub(crate) fn close(&self, reason: &str) {
        let (calls, null) = {
            let mut t = lock(&self.table);
            if t.closed.is_none() {
                t.closed = Some(reason.to_owned());
            }
            (std::mem::take(&mut t.calls), t.null_waiter.take())
        };
        let why = self.closed_reason().unwrap_or_else(|| reason.to_owned());
        for tx in calls.into_values().chain(null) {
            tx.send(Err(Error::Disconnected(why.clone())));
        }
    }

    /// Why the table was closed, if it was.
    pub(crate) fn closed_reason(&self) -> Option<String> {
        lock(&self.table).closed.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settle_cancel_close() {
        let p = Pending::new();
        let rx = p.register(1).unwrap();
        assert!(p.settle(1, Ok(RawValue::NULL.to_owned())));
        assert_eq!(rx.try_recv().unwrap().unwrap().get(), "null");
        assert!(
            !p.settle(1, Ok(RawValue::NULL.to_owned())),
            "settled once only"
        );

        let _rx2 = p.register(2).unwrap();
        p.cancel(2);
        assert!(!p.settle(2, Ok(RawValue::NULL.to_owned())));

        let rx3 = p.register(3).unwrap();
        p.close("gone: exit status 3");
        assert!(
            matches!(rx3.try_recv().unwrap(), Err(Error::Disconnected(w)) if w.contains("exit status 3"))
        );
        assert!(matches!(p.register(4), Err(Error::Disconnected(_))));
        p.close("second reason is ignored");
        assert_eq!(p.closed_reason().unwrap(), "gone: exit status 3");
    }
}
