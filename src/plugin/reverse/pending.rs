//! The table of our own outstanding requests, settled by the reader thread.
//!
//! Every call is registered before its frame is written. The reader removes the entry and
//! hands the answer straight to the waiting thread through a one-slot mailbox, never
//! through a request queue or a worker limit, so a handler that waits on its peer can
//! never deadlock the process. Removal happens under the lock, so each id completes
//! exactly once; an answer to an unknown or already-settled id is logged and dropped.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::value::RawValue;

use crate::error::RpcError;
use crate::log_limit::LogLimit;
use crate::oneshot::{self, mailbox};

use super::super::intake::Bell;
use super::super::relay::Relay;

/// What a peer answered: the raw result, or its error object.
pub(crate) type Answer = Result<Box<RawValue>, RpcError>;

/// The table's end of a call's mailbox: dropped unanswered (the table closed, or the
/// waiter gave up), it wakes the waiter with `Disconnected`.
type AnswerSender = oneshot::Sender<Answer>;

/// The waiting call's end of its mailbox.
pub(crate) type AnswerReceiver = oneshot::Receiver<Answer>;

// Answers the peer decides how many of, and a line per call while no reader thread can
// start: logged a few a second (see `crate::log_limit`).
static UNKNOWN_ANSWER: LogLimit = LogLimit::new();
static LATE_ANSWER: LogLimit = LogLimit::new();
static NO_READER: LogLimit = LogLimit::new();

/// Outstanding calls keyed by our numeric id, sent on the wire as a string with `prefix`
/// so our ids can never be confused with the peer's numeric ones.
pub(crate) struct Pending {
    prefix: &'static str,
    next: AtomicU64,
    table: Mutex<Table>,
    /// How many calls wait, readable without the lock (the reader checks it per request).
    waiting: AtomicUsize,
    /// Poked when a call is registered, so a reader waiting for queue room looks again:
    /// with a call waiting it must keep reading (the answer may be behind the flood).
    wake: Option<Arc<Bell>>,
    /// Told of every call, so a reader running an invoke itself hands its reading over
    /// (the answer comes through stdin; see `relay.rs`).
    relay: Option<Arc<Relay>>,
}

struct Table {
    open: Option<String>,
    /// Few calls wait at once (one per blocked handler), so a vector beats a hash map.
    /// The flag marks a sealed call (an MCP input request): the client answers it by a
    /// retry whose sealed state names it, never by a response with its number.
    waiting: Vec<(u64, bool, AnswerSender)>,
}

/// A registered call: its wire id and the receiver its answer arrives on. The receiver
/// reports `Disconnected` when the peer goes away.
pub(crate) struct Ticket {
    pub number: u64,
    pub wire_id: Box<RawValue>,
    pub answer: AnswerReceiver,
}

impl Table {
    /// Removes call `number` when it is sealed or not as `sealed` says (`None`: either).
    fn take(&mut self, number: u64, sealed: Option<bool>) -> Option<AnswerSender> {
        let at = self
            .waiting
            .iter()
            .position(|(k, s, _)| *k == number && sealed.is_none_or(|want| want == *s))?;
        Some(self.waiting.swap_remove(at).2)
    }
}

impl Pending {
    /// An empty table. `prefix` must be plain ASCII without quotes.
    pub fn new(prefix: &'static str, wake: Option<Arc<Bell>>, relay: Option<Arc<Relay>>) -> Self {
        Pending {
            prefix,
            next: AtomicU64::new(1),
            table: Mutex::new(Table {
                open: None,
                waiting: Vec::new(),
            }),
            waiting: AtomicUsize::new(0),
            wake,
            relay,
        }
    }

    /// Records the table's size for [`Pending::len`]; called with the lock held.
    fn counted(&self, table: &Table) {
        self.waiting.store(table.waiting.len(), Ordering::SeqCst);
    }

    /// Registers a new call. Fails with the reason when the peer is already gone.
    pub fn register(&self) -> Result<Ticket, String> {
        self.enter(false)
    }

    /// Registers a sealed call: an MCP input request, answered only through
    /// [`Pending::settle_sealed`] (a response with its id is not its answer).
    #[cfg(feature = "mcp")]
    pub fn register_sealed(&self) -> Result<Ticket, String> {
        self.enter(true)
    }

    fn enter(&self, sealed: bool) -> Result<Ticket, String> {
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        let text = format!("\"{}{number}\"", self.prefix);
        let wire_id = RawValue::from_string(text).map_err(|e| e.to_string())?;
        let (tx, rx) = mailbox();
        let mut table = self.lock();
        if let Some(why) = &table.open {
            return Err(why.clone());
        }
        table.waiting.push((number, sealed, tx));
        self.counted(&table);
        drop(table);
        if let Some(wake) = &self.wake {
            wake.ring_if_waiting();
        }
        // A call of the invoke the reader runs, on the reader itself, is read by that
        // thread (`Relay::pump`); any other call needs a reader that is not running one.
        if let Some(relay) = &self.relay
            && !relay.pumps_here()
            && relay.relieve().is_err()
            && NO_READER.allow("no reader thread")
        {
            log::error!(
                "executa: could not start a reader thread; a call to the host waits until \
                 the invoke on the reader ends or the call times out"
            );
        }
        Ok(Ticket {
            number,
            wire_id,
            answer: rx,
        })
    }

    /// Forgets a call whose waiter gave up (timeout); a late answer is then dropped.
    /// Returns `false` when it was settled already (its answer is in its mailbox).
    pub fn forget(&self, number: u64) -> bool {
        let mut table = self.lock();
        let taken = table.take(number, None).is_some();
        self.counted(&table);
        taken
    }

    /// Delivers an answer. Returns `false` (after logging) when the id is not ours or was
    /// already settled. Never blocks.
    pub fn settle(&self, id: &RawValue, answer: Answer) -> bool {
        let Some(number) = self.parse_id(id) else {
            if UNKNOWN_ANSWER.allow("answer with an unknown id") {
                log::warn!("executa: dropped an answer with unknown id {}", id.get());
            }
            return false;
        };
        let mut table = self.lock();
        let taken = table.take(number, Some(false));
        self.counted(&table);
        drop(table);
        let Some(tx) = taken else {
            if LATE_ANSWER.allow("late answer") {
                log::warn!(
                    "executa: dropped an answer for id {} (timed out or already settled)",
                    id.get()
                );
            }
            return false;
        };
        // A waiter that gave up already is fine: the answer is dropped with the box.
        tx.send(answer);
        true
    }

    /// Delivers an answer to sealed call `number` (a 2026-07-28 retry names it in its
    /// sealed state, not by id). Returns `false` when no such call waits. Never blocks.
    #[cfg(feature = "mcp")]
    pub fn settle_sealed(&self, number: u64, answer: Answer) -> bool {
        let mut table = self.lock();
        let taken = table.take(number, Some(true));
        self.counted(&table);
        drop(table);
        taken.map(|tx| tx.send(answer)).is_some()
    }

    /// Whether `id` names a call that is still waiting for a response (not a sealed one).
    pub fn is_waiting(&self, id: &RawValue) -> bool {
        self.parse_id(id).is_some_and(|n| {
            self.lock()
                .waiting
                .iter()
                .any(|(k, sealed, _)| *k == n && !sealed)
        })
    }

    /// Fails every waiting call at once and refuses new ones, with `why`.
    pub fn close(&self, why: &str) {
        let mut table = self.lock();
        table.open = Some(why.to_owned());
        // Dropping the senders wakes every waiter with `Disconnected`.
        table.waiting.clear();
        self.counted(&table);
    }

    /// The reason given to `close`, if the table is closed.
    pub fn closed_reason(&self) -> Option<String> {
        self.lock().open.clone()
    }

    /// How many calls are waiting.
    pub fn len(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// Whether `id` has the shape of our ids (waiting or not).
    pub fn is_ours(&self, id: &RawValue) -> bool {
        self.parse_id(id).is_some()
    }

    /// Our number from an id, accepting only the exact text we send (`"ex-7"`, not
    /// `"ex-07"` or `"ex-+7"`).
    fn parse_id(&self, id: &RawValue) -> Option<u64> {
        let s = id.get().strip_prefix('"')?.strip_suffix('"')?;
        let digits = s.strip_prefix(self.prefix)?;
        let n: u64 = digits.parse().ok()?;
        (digits.len() == 1 || !digits.starts_with('0'))
            .then_some(n)
            .filter(|_| digits.bytes().all(|b| b.is_ascii_digit()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        crate::lock::lock(&self.table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::RecvTimeoutError;
    use std::time::Duration;

    /// Far longer than any of these waits should take: only a failure waits this long.
    const WAIT: Duration = Duration::from_secs(10);

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    #[cfg(feature = "mcp")]
    #[test]
    fn a_sealed_call_is_settled_only_as_sealed() {
        let p = Pending::new("ex-", None, None);
        let sealed = p.register_sealed().unwrap();
        let open = p.register().unwrap();
        assert!(!p.is_waiting(&sealed.wire_id), "not waiting for a response");
        assert!(
            !p.settle(&sealed.wire_id, Ok(raw("1"))),
            "a response is not its answer"
        );
        assert!(
            !p.settle_sealed(open.number, Ok(raw("1"))),
            "nor is a retry another's"
        );
        assert!(p.settle_sealed(sealed.number, Ok(raw("2"))));
        assert_eq!(
            sealed.answer.recv_timeout(WAIT).unwrap().unwrap().get(),
            "2"
        );
        assert!(!p.settle_sealed(sealed.number, Ok(raw("3"))), "once");
        assert!(p.forget(open.number));
        assert!(!p.forget(open.number), "forgotten already");
    }

    #[test]
    fn each_id_settles_exactly_once() {
        let p = Pending::new("ex-", None, None);
        let t = p.register().unwrap();
        assert_eq!(t.wire_id.get(), format!("\"ex-{}\"", t.number));
        assert!(p.settle(&t.wire_id, Ok(raw("1"))));
        assert!(
            !p.settle(&t.wire_id, Ok(raw("2"))),
            "second answer must be dropped"
        );
        assert_eq!(t.answer.recv_timeout(WAIT).unwrap().unwrap().get(), "1");
        assert!(
            !p.settle(&raw("7"), Ok(raw("1"))),
            "numeric ids are never ours"
        );
        assert!(!p.settle(&raw("\"ex-999\""), Ok(raw("1"))));
        let t = p.register().unwrap();
        let n = t.number;
        assert!(
            !p.settle(&raw(&format!("\"ex-0{n}\"")), Ok(raw("1"))),
            "near-miss ids are not ours"
        );
        assert!(!p.settle(&raw(&format!("\"ex-+{n}\"")), Ok(raw("1"))));
        assert!(p.settle(&t.wire_id, Ok(raw("1"))));
    }

    #[test]
    fn close_wakes_waiters_and_refuses_new_calls() {
        let p = Pending::new("ex-", None, None);
        let t = p.register().unwrap();
        p.close("host closed stdin");
        assert_eq!(
            t.answer.recv_timeout(WAIT).err(),
            Some(RecvTimeoutError::Disconnected)
        );
        assert_eq!(p.register().err().unwrap(), "host closed stdin");
    }

    #[test]
    fn an_answer_wakes_its_waiter_and_silence_times_out() {
        let p = Pending::new("ex-", None, None);
        let t = p.register().unwrap();
        assert_eq!(
            t.answer.recv_timeout(Duration::from_millis(10)).err(),
            Some(RecvTimeoutError::Timeout)
        );
        let id = t.wire_id.clone();
        let waiter = std::thread::spawn(move || t.answer.recv_timeout(WAIT));
        // The waiter may be blocked already or not yet: either way the answer reaches it.
        assert!(p.settle(&id, Err(RpcError::new(-1, "no"))));
        let got = waiter.join().unwrap();
        assert_eq!(got.unwrap().unwrap_err().message, "no");
    }

    #[test]
    fn an_answer_settled_before_close_is_still_received() {
        let p = Pending::new("ex-", None, None);
        let t = p.register().unwrap();
        assert!(p.settle(&t.wire_id, Ok(raw("3"))));
        p.close("host closed stdin");
        assert_eq!(t.answer.recv_timeout(WAIT).unwrap().unwrap().get(), "3");
        assert_eq!(
            t.answer.recv_timeout(Duration::ZERO).err(),
            Some(RecvTimeoutError::Disconnected),
            "after its one answer the box reports the call gone"
        );
    }
}
