//! The plugin's output (stdout): one owner at a time.
//!
//! A frame is written by the thread that made it when the output is idle: nothing queued,
//! nothing in the writer thread's hands, nobody writing, and no more requests waiting to be
//! answered right behind it. That is one hop from the reader to the handler's thread and
//! straight out, the cheapest shape a separate reader allows. Otherwise (a burst, or a pipe
//! the host is slow to read) the frame goes to the writer thread's bounded queue, and the
//! writer writes the whole backlog with one `write(2)`.
//!
//! Order: a frame goes straight out only while nothing is queued (checked under the sink's
//! lock, and the writer holds that lock until what it took is written), so the frames of one
//! thread (progress events, then the reply) leave in the order they were sent.
//!
//! A write blocks while the host does not read its stdin and the pipe is full. That wait has
//! no bound by design: it is the backpressure, and it ends as soon as the host reads, or
//! with an error when the host closes the pipe.

use std::io::{self, BufWriter, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::Duration;

use crate::writer::{self, Inbox, Out, Outbox, SendFailure};

use super::events::{Event, Notifier};

/// Capacity of the buffered writer both paths write through.
const SINK_BUFFER: usize = 64 * 1024;

type Sink = BufWriter<Box<dyn Write + Send>>;

pub(crate) struct Output {
    /// `None` once closed: the writer drops the sink at `Close`, which closes the stream
    /// even while handles to the plugin (kept by a tool past its invoke) live on.
    sink: Mutex<Option<Sink>>,
    queue: Outbox,
    broken: AtomicBool,
    events: Notifier,
    /// Buffers of queued frames, back from the writer for the next burst.
    spares: Mutex<Vec<Vec<u8>>>,
}

/// Frame buffers kept for reuse, and the largest kept.
const SPARES: usize = 64;
const SPARE_BYTES: usize = 16 * 1024;

impl Output {
    /// An output over `out`, and the queue end for the writer thread ([`Output::write_loop`]).
    pub fn new(out: Box<dyn Write + Send>, events: Notifier) -> (Output, Inbox) {
        let (queue, inbox) = writer::channel();
        let output = Output {
            sink: Mutex::new(Some(BufWriter::with_capacity(SINK_BUFFER, out))),
            queue,
            broken: AtomicBool::new(false),
            events,
            spares: Mutex::new(Vec::new()),
        };
        (output, inbox)
    }

    /// Whether the host closed our stdout (nothing can be written any more).
    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::SeqCst)
    }

    /// Sends a frame: straight out when the output is idle and `more` is false (no more
    /// work right behind it), else through the writer's queue, waiting for room while the
    /// host is not reading. Returns `false` when the output is closed (the frame is lost,
    /// and logged at debug level).
    pub fn send(&self, frame: Vec<u8>, more: bool) -> bool {
        if self.is_broken() {
            return lost();
        }
        if !more && let Some(written) = self.try_direct(&frame) {
            return written;
        }
        self.queue.send(frame) || lost()
    }

    /// As [`Output::send`] for a frame in the caller's reused buffer. Written straight out
    /// it stays there; queued, the buffer goes with it and the caller gets a spare one back
    /// (the writer returns buffers it has written), so a burst allocates nothing.
    pub fn send_buffer(&self, frame: &mut Vec<u8>, more: bool) -> bool {
        if self.is_broken() {
            return lost();
        }
        if !more && let Some(written) = self.try_direct(frame) {
            return written;
        }
        let spare = self.spares().pop().unwrap_or_default();
        self.queue.send(std::mem::replace(frame, spare)) || lost()
    }

    fn spares(&self) -> MutexGuard<'_, Vec<Vec<u8>>> {
        crate::lock::lock(&self.spares)
    }

    /// Keeps a written frame's buffer for reuse (a few, and none that grew large).
    fn give_back(&self, mut frame: Vec<u8>) {
        if frame.capacity() <= SPARE_BYTES {
            let mut spares = self.spares();
            if spares.len() < SPARES {
                frame.clear();
                spares.push(frame);
            }
        }
    }

    /// Sends a frame, waiting at most `wait` for room in the queue (a direct write may
    /// still block on a full pipe; see the module docs).
    pub fn send_timeout(&self, frame: Vec<u8>, wait: Duration) -> Result<(), SendFailure> {
        if self.is_broken() {
            return Err(SendFailure::Closed);
        }
        match self.try_direct(&frame) {
            Some(true) => Ok(()),
            Some(false) => Err(SendFailure::Closed),
            None => self.queue.send_timeout(frame, wait),
        }
    }

    /// Queues a frame for the writer thread (never a direct write, which could block on
    /// a full pipe), waiting at most `wait` for room. For callers that must keep a deadline.
    pub fn queue_timeout(&self, frame: Vec<u8>, wait: Duration) -> Result<(), SendFailure> {
        if self.is_broken() {
            return Err(SendFailure::Closed);
        }
        self.queue.send_timeout(frame, wait)
    }

    /// Queues a frame without ever blocking; `false` when the queue is full or the output
    /// closed (the caller decides what a dropped frame means: progress events are dropped
    /// and counted).
    pub fn try_send(&self, frame: Vec<u8>) -> bool {
        !self.is_broken() && self.queue.try_send(frame)
    }

    /// Asks the writer thread to flush and stop, waiting at most `wait` for queue room.
    pub fn close(&self, wait: Duration) -> bool {
        self.queue.close(wait)
    }

    /// Writes `frame` now if the output is idle; `None` when it is not (the caller queues).
    fn try_direct(&self, frame: &[u8]) -> Option<bool> {
        if !self.queue.is_idle() {
            return None;
        }
        let mut sink = match self.sink.try_lock() {
            Ok(sink) => sink,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        // Checked again under the lock: the writer may have taken a frame meanwhile.
        if !self.queue.is_idle() {
            return None;
        }
        let Some(out) = sink.as_mut() else {
            return Some(false);
        };
        let written = out.write_all(frame).and_then(|()| out.flush());
        drop(sink);
        Some(match written {
            Ok(()) => true,
            Err(e) => {
                self.mark_broken(&e);
                false
            }
        })
    }

    fn lock_sink(&self) -> MutexGuard<'_, Option<Sink>> {
        crate::lock::lock(&self.sink)
    }

    /// Runs one write on the sink unless the output is broken or closed.
    fn write(&self, sink: Option<&mut Sink>, op: impl FnOnce(&mut Sink) -> io::Result<()>) {
        if let Some(sink) = sink
            && !self.is_broken()
            && let Err(e) = op(sink)
        {
            self.mark_broken(&e);
        }
    }

    fn mark_broken(&self, e: &io::Error) {
        if !self.broken.swap(true, Ordering::SeqCst) {
            if e.kind() == io::ErrorKind::BrokenPipe {
                log::info!("executa: host closed our stdout; stopping");
            } else {
                log::error!("executa: writing to the host failed: {e}");
            }
            self.events.notify(Event::OutputBroken);
        }
    }

    /// The writer thread: writes queued frames, a burst at a time, flushing when the queue
    /// runs empty, until `Close` or until every sender is gone. After a failed write it keeps
    /// taking (and dropping) frames, so no producer stays blocked on a full queue. It never
    /// polls: it is only used while replies come faster than they can be written, so it
    /// rarely waits, and then a wake-up per burst is cheap.
    pub fn write_loop(&self, inbox: &Inbox) {
        while let Ok(first) = inbox.receiver().recv() {
            let mut guard = self.lock_sink();
            let mut next = Some(first);
            while let Some(msg) = next {
                match msg {
                    Out::Frame(frame) => {
                        self.write(guard.as_mut(), |s| s.write_all(&frame));
                        inbox.written(frame.len());
                        self.give_back(frame);
                    }
                    Out::Close => {
                        self.write(guard.as_mut(), Write::flush);
                        // Dropping the sink closes the stream.
                        *guard = None;
                        return;
                    }
                }
                next = inbox.try_recv();
            }
            self.write(guard.as_mut(), Write::flush);
        }
        *self.lock_sink() = None;
    }
}

/// Notes a frame that could not be sent because the output is closed (the one way a
/// reply may go missing); returns `false` for the caller.
#[cold]
fn lost() -> bool {
    log::debug!("executa: a frame was not sent: the output is closed");
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A sink that records writes; `fail` makes every write fail with a broken pipe.
    #[derive(Clone, Default)]
    struct Recorder {
        data: Arc<Mutex<Vec<u8>>>,
        writes: Arc<Mutex<usize>>,
        fail: Arc<AtomicBool>,
    }

    impl Write for Recorder {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.fail.load(Ordering::SeqCst) {
                return Err(io::ErrorKind::BrokenPipe.into());
            }
            *self.writes.lock().unwrap() += 1;
            self.data.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn output(rec: &Recorder) -> (Output, Inbox) {
        let (_events, notifier) = crate::plugin::events::channel().unwrap();
        Output::new(Box::new(rec.clone()), notifier)
    }

    #[test]
    fn an_idle_output_is_written_at_once_without_the_writer_thread() {
        let rec = Recorder::default();
        let (out, _inbox) = output(&rec);
        assert!(out.send(b"one\n".to_vec(), false));
        let mut two = b"two\n".to_vec();
        assert!(out.send_buffer(&mut two, false));
        assert_eq!(two, b"two\n", "written straight out: the buffer stays");
        assert_eq!(&*rec.data.lock().unwrap(), b"one\ntwo\n");
    }

    #[test]
    fn under_backlog_frames_queue_in_order_and_leave_in_one_write() {
        let rec = Recorder::default();
        let (out, inbox) = output(&rec);
        assert!(out.send(b"a\n".to_vec(), true), "more work behind: queued");
        assert!(
            out.send(b"b\n".to_vec(), false),
            "something queued: queued too"
        );
        assert!(rec.data.lock().unwrap().is_empty());
        assert!(out.close(Duration::from_secs(1)));
        out.write_loop(&inbox);
        assert_eq!(&*rec.data.lock().unwrap(), b"a\nb\n");
        assert_eq!(*rec.writes.lock().unwrap(), 1, "one write for the burst");
        assert_eq!(
            out.spares().len(),
            2,
            "the written buffers come back for reuse"
        );
    }

    #[test]
    fn a_queued_buffer_is_replaced_by_a_spare() {
        let rec = Recorder::default();
        let (out, inbox) = output(&rec);
        let mut frame = Vec::with_capacity(64);
        frame.extend_from_slice(b"x\n");
        let ptr = frame.as_ptr();
        assert!(out.send_buffer(&mut frame, true));
        assert!(frame.is_empty(), "the frame went with the queue");
        assert!(out.close(Duration::from_secs(1)));
        out.write_loop(&inbox);
        let mut next = Vec::new();
        assert!(out.send_buffer(&mut next, true));
        assert_eq!(
            next.as_ptr(),
            ptr,
            "the written buffer came back as the spare"
        );
    }

    #[test]
    fn a_broken_output_refuses_at_once_and_the_writer_keeps_draining() {
        let rec = Recorder::default();
        rec.fail.store(true, Ordering::SeqCst);
        let (out, inbox) = output(&rec);
        assert!(!out.send(b"x\n".to_vec(), false));
        assert!(out.is_broken());
        assert!(!out.send(b"y\n".to_vec(), true), "closed: not even queued");
        assert!(!out.try_send(b"z\n".to_vec()));
        assert!(out.close(Duration::from_secs(1)));
        out.write_loop(&inbox);
    }
}
