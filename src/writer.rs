//! The bounded queue (by frames and by bytes) in front of a writer thread, shared by both
//! sides: the plugin's output (`plugin/output.rs`) and the host's writer to a plugin's
//! stdin (`host/writer.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, SendTimeoutError, Sender, bounded};

/// Frames the outgoing queue holds: enough run-ahead that a burst of replies is written
/// with one `write(2)`.
pub(crate) const OUT_QUEUE: usize = 256;

/// Bytes the outgoing queue holds at most, so a host that stops reading cannot make the
/// plugin buffer 1024 large results.
pub(crate) const OUT_BYTES: usize = 64 * 1024 * 1024;

/// A message for the writer.
pub(crate) enum Out {
    /// One complete frame, ending in `\n`.
    Frame(Vec<u8>),
    /// A frame that must reach the peer in a `write(2)` of its own, apart from the frames
    /// around it: an MCP progress notification (see `plugin/output.rs`). Only the plugin's
    /// output sends it; the host's writer never receives one.
    // Boxed so that `Out` stays the size of a `Vec` (24 bytes, not 32: two unboxed `Vec`
    // variants need a tag) for every frame of the hot path; the extra allocation is paid
    // by MCP progress alone.
    #[allow(clippy::box_collection)]
    Alone(Box<Vec<u8>>),
    /// Flush and stop.
    Close,
}

/// Why a bounded send did not happen.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SendFailure {
    /// The queue stayed full until the deadline.
    Timeout,
    /// The writer has stopped.
    Closed,
}

/// The sending side of the writer's queue.
#[derive(Clone)]
pub(crate) struct Outbox {
    tx: Sender<Out>,
    queued_bytes: Arc<AtomicUsize>,
}

/// The writer's end of the queue.
pub(crate) struct Inbox {
    rx: Receiver<Out>,
    queued_bytes: Arc<AtomicUsize>,
}

impl Inbox {
    /// The next message if one is queued.
    pub fn try_recv(&self) -> Option<Out> {
        self.rx.try_recv().ok()
    }

    /// The underlying receiver, for polling before a blocking wait.
    pub fn receiver(&self) -> &Receiver<Out> {
        &self.rx
    }

    /// Marks a frame of `len` bytes as written (it no longer counts as queued).
    pub fn written(&self, len: usize) {
        self.queued_bytes.fetch_sub(len, Ordering::SeqCst);
    }
}

/// A bounded queue (by frames and by bytes) between producers and the writer.
pub(crate) fn channel() -> (Outbox, Inbox) {
    channel_with(OUT_QUEUE)
}

/// As [`channel`], holding at most `frames` frames.
pub(crate) fn channel_with(frames: usize) -> (Outbox, Inbox) {
    let (tx, rx) = bounded(frames.max(1));
    let queued_bytes = Arc::new(AtomicUsize::new(0));
    (
        Outbox {
            tx,
            queued_bytes: queued_bytes.clone(),
        },
        Inbox { rx, queued_bytes },
    )
}

impl Outbox {
    /// Queues a frame, blocking while the queue is full: the host is not reading, and
    /// waiting is the documented backpressure. Returns `false` when the writer has stopped.
    pub fn send(&self, frame: Vec<u8>) -> bool {
        self.send_before(frame, None).is_ok()
    }

    /// Queues a frame, waiting at most `wait` for room (a wait too large for the clock
    /// has no bound).
    pub fn send_timeout(&self, frame: Vec<u8>, wait: Duration) -> Result<(), SendFailure> {
        self.send_before(frame, Instant::now().checked_add(wait))
    }

    /// Queues a frame without blocking. Returns `false` when the queue is full (by frames or
    /// bytes) or the writer has stopped; the caller decides what a dropped frame means.
    pub fn try_send(&self, frame: Vec<u8>) -> bool {
        self.try_send_as(frame, Out::Frame)
    }

    /// As [`Outbox::try_send`], handing the frame back when it was not queued.
    #[cfg(feature = "host")]
    pub fn try_queue(&self, frame: Vec<u8>) -> Result<(), Vec<u8>> {
        use crossbeam_channel::TrySendError;
        let len = frame.len();
        if !self.reserve(len) {
            return Err(frame);
        }
        match self.tx.try_send(Out::Frame(frame)) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(out) | TrySendError::Disconnected(out)) => {
                self.queued_bytes.fetch_sub(len, Ordering::SeqCst);
                match out {
                    Out::Frame(frame) => Err(frame),
                    // Never: only plain frames are sent here.
                    Out::Alone(_) | Out::Close => Err(Vec::new()),
                }
            }
        }
    }

    /// As [`Outbox::try_send`], for a frame the writer must write alone ([`Out::Alone`]).
    pub fn try_send_alone(&self, frame: Vec<u8>) -> bool {
        self.try_send_as(frame, |frame| Out::Alone(Box::new(frame)))
    }

    // Inlined into both callers: `try_send` is the path of every progress event.
    #[inline(always)]
    fn try_send_as(&self, frame: Vec<u8>, wrap: impl FnOnce(Vec<u8>) -> Out) -> bool {
        let len = frame.len();
        if !self.reserve(len) {
            return false;
        }
        let queued = self.tx.try_send(wrap(frame)).is_ok();
        if !queued {
            self.queued_bytes.fetch_sub(len, Ordering::SeqCst);
        }
        queued
    }

    /// Whether nothing is queued or in the writer's hands (a frame counts until written).
    pub fn is_idle(&self) -> bool {
        self.queued_bytes.load(Ordering::SeqCst) == 0
    }

    /// Asks the writer to flush and stop, waiting at most `wait` for room in the queue.
    pub fn close(&self, wait: Duration) -> bool {
        self.tx.send_timeout(Out::Close, wait).is_ok()
    }

    fn send_before(&self, frame: Vec<u8>, deadline: Option<Instant>) -> Result<(), SendFailure> {
        let len = frame.len();
        // Over the byte budget only while the host is not reading at all; a short sleep
        // between checks is cheap there, and the deadline (if any) bounds it.
        while !self.reserve(len) {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(SendFailure::Timeout);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let sent = match deadline {
            None => self
                .tx
                .send(Out::Frame(frame))
                .map_err(|_| SendFailure::Closed),
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                self.tx
                    .send_timeout(Out::Frame(frame), left)
                    .map_err(|e| match e {
                        SendTimeoutError::Timeout(_) => SendFailure::Timeout,
                        SendTimeoutError::Disconnected(_) => SendFailure::Closed,
                    })
            }
        };
        if sent.is_err() {
            self.queued_bytes.fetch_sub(len, Ordering::SeqCst);
        }
        sent
    }

    /// Counts `len` bytes in, unless that would pass the budget. An empty queue always
    /// takes one frame, however large, so no frame can be refused forever.
    fn reserve(&self, len: usize) -> bool {
        let mut queued = self.queued_bytes.load(Ordering::SeqCst);
        loop {
            if queued > 0 && queued + len > OUT_BYTES {
                return false;
            }
            match self.queued_bytes.compare_exchange_weak(
                queued,
                queued + len,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return true,
                Err(now) => queued = now,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_the_size_of_a_vec() {
        assert_eq!(size_of::<Out>(), size_of::<Vec<u8>>());
    }

    #[test]
    fn the_byte_budget_refuses_only_when_something_is_queued() {
        let (out, inbox) = channel();
        assert!(
            out.try_send(vec![b'x'; OUT_BYTES + 10]),
            "an empty queue takes any frame"
        );
        assert!(!out.is_idle());
        assert!(!out.try_send(vec![b'y'; 10]), "over budget");
        assert_eq!(
            out.send_timeout(vec![b'z'; 10], Duration::from_millis(5)),
            Err(SendFailure::Timeout)
        );
        let Some(Out::Frame(frame)) = inbox.try_recv() else {
            panic!("the frame is queued");
        };
        inbox.written(frame.len());
        assert!(out.is_idle(), "written: nothing counts as queued");
        assert!(out.try_send(vec![b'y'; 10]), "room again");
    }

    #[test]
    fn a_frame_to_write_alone_is_queued_as_one_within_the_same_budget() {
        let (out, inbox) = channel_with(1);
        assert!(out.try_send_alone(b"p\n".to_vec()));
        assert!(!out.try_send_alone(b"q\n".to_vec()), "the queue is full");
        let Some(Out::Alone(frame)) = inbox.try_recv() else {
            panic!("queued as a frame to write alone");
        };
        assert_eq!(*frame, b"p\n");
        assert!(!out.is_idle(), "in the writer's hands until written");
        inbox.written(frame.len());
        assert!(out.is_idle());
    }
}
