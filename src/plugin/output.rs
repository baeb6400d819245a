//! The plugin's output (stdout): one owner at a time.
//!
//! A frame is written by the thread that made it when the output is idle: nothing queued,
//! nothing in the writer thread's hands, nobody writing, and no more requests waiting to be
//! answered right behind it. That is one hop from the reader to the handler's thread and
//! straight out, the cheapest shape a separate reader allows. Otherwise (a burst, or a pipe
//! the host is slow to read) the frame goes to the writer thread's bounded queue, and the
//! writer writes the whole backlog with one `write(2)`.
//!
//! Order: a frame goes straight out only while nothing is queued (checked under the stream's
//! lock, and the writer holds that lock until what it took is written), so the frames of one
//! thread (progress events, then the reply) leave in the order they were sent.
//!
//! MCP progress is written alone ([`Output::progress_alone`]): the official TypeScript SDK
//! 1.x client drops a progress notification that reaches it in the same read as its call's
//! reply (typescript-sdk #2580: the reply removes the call's progress handler at once, the
//! notification's handler runs a microtask later). So the writer writes such a frame in a
//! `write(2)` of its own as soon as it takes it, and holds the next frame back until the
//! reader has read what was written. Separate writes alone are not enough (70-97% of calls
//! still lost events here): the client is often busy (1.6 ms on its first progress) while
//! the progress and the reply both arrive, and any fixed pause loses some (2 ms: 5% of
//! calls; 20 ms: 1 call in 200 on a loaded machine). Where the platform tells how much the reader has not read
//! ([`Unread`]), the writer waits until that is nothing (a client's wake-up: about 0.1 ms
//! here), at most [`ALONE_WAIT`]; elsewhere it pauses [`ALONE_GAP`]. Executa sessions never
//! write alone: their progress and replies keep batching.
//!
//! A write blocks while the host does not read its stdin and the pipe is full. That wait has
//! no bound by design: it is the backpressure, and it ends as soon as the host reads, or
//! with an error when the host closes the pipe.

use std::io::{self, BufWriter, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use crate::writer::{self, Inbox, Out, Outbox, SendFailure};

use super::events::{Event, Notifier};

/// Capacity of the buffered writer both paths write through.
const SINK_BUFFER: usize = 64 * 1024;

type Sink = BufWriter<Box<dyn Write + Send>>;

/// A probe of how many bytes written the reader has not read yet (`None`: it cannot
/// tell now). Called only while the stream is open, under its lock.
pub(crate) type Unread = Box<dyn Fn() -> Option<usize> + Send + Sync>;

/// After a frame written alone, the longest wait for the reader to read it (with an
/// [`Unread`] probe): a reader stalled longer gets the next frame anyway.
const ALONE_WAIT: Duration = Duration::from_millis(250);

/// After a frame written alone, the pause before the next frame where nothing tells what
/// the reader has read (measured with the TypeScript SDK: see the module docs).
const ALONE_GAP: Duration = Duration::from_millis(20);

/// The stream, and whether the last frame written went out alone.
struct Stream {
    /// `None` once closed: the writer drops the sink at `Close`, which closes the stream
    /// even while handles to the plugin (kept by a tool past its invoke) live on.
    sink: Option<Sink>,
    /// When the frame written alone last left, until a frame is written after it.
    alone_at: Option<Instant>,
}

pub(crate) struct Output {
    stream: Mutex<Stream>,
    queue: Outbox,
    broken: AtomicBool,
    /// Progress frames go out alone (set by the first MCP progress notification).
    progress_alone: AtomicBool,
    /// What the reader has not read yet of what was written, where the platform tells.
    unread: Option<Unread>,
    events: Notifier,
    /// Buffers of queued frames, back from the writer for the next burst.
    spares: Mutex<Vec<Vec<u8>>>,
}

/// Frame buffers kept for reuse, and the largest kept.
const SPARES: usize = 64;
const SPARE_BYTES: usize = 16 * 1024;

impl Output {
    /// An output over `out`, and the queue end for the writer thread ([`Output::write_loop`]).
    #[cfg(test)]
    pub fn new(out: Box<dyn Write + Send>, events: Notifier) -> (Output, Inbox) {
        Self::with_unread(out, None, events)
    }

    /// As [`Output::new`], with a probe of what the reader of `out` has not read yet, for
    /// a stream the platform can tell that of. It is only called while `out` is open.
    pub fn with_unread(
        out: Box<dyn Write + Send>,
        unread: Option<Unread>,
        events: Notifier,
    ) -> (Output, Inbox) {
        let (queue, inbox) = writer::channel();
        let output = Output {
            stream: Mutex::new(Stream {
                sink: Some(BufWriter::with_capacity(SINK_BUFFER, out)),
                alone_at: None,
            }),
            queue,
            broken: AtomicBool::new(false),
            progress_alone: AtomicBool::new(false),
            unread,
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
        if self.is_broken() {
            return false;
        }
        if self.progress_alone.load(Ordering::Relaxed) {
            self.queue.try_send_alone(frame)
        } else {
            self.queue.try_send(frame)
        }
    }

    /// From now on, progress frames ([`Output::try_send`]) are written alone: each in a
    /// `write(2)` of its own as soon as the writer takes it, and the next frame only once
    /// the reader has read it (see the module docs). For MCP progress notifications.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub fn progress_alone(&self) {
        if !self.progress_alone.load(Ordering::Relaxed) {
            self.progress_alone.store(true, Ordering::Relaxed);
        }
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
        let mut guard = match self.stream.try_lock() {
            Ok(stream) => stream,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        // Checked again under the lock: the writer may have taken a frame meanwhile.
        if !self.queue.is_idle() {
            return None;
        }
        let stream = &mut *guard;
        let Some(out) = stream.sink.as_mut() else {
            return Some(false);
        };
        // Right behind a frame written alone, the writer thread waits for the reader; this
        // thread (maybe the reader's) does not.
        if let Some(at) = stream.alone_at {
            if !self.settled(at) {
                return None;
            }
            stream.alone_at = None;
        }
        let written = out.write_all(frame).and_then(|()| out.flush());
        drop(guard);
        Some(match written {
            Ok(()) => true,
            Err(e) => {
                self.mark_broken(&e);
                false
            }
        })
    }

    /// Whether a frame may follow the one written alone at `at`: the reader has read
    /// everything (or the probe cannot tell), the wait is over, or nothing can be written.
    fn settled(&self, at: Instant) -> bool {
        if self.is_broken() {
            return true;
        }
        match &self.unread {
            Some(unread) => unread().is_none_or(|n| n == 0) || at.elapsed() >= ALONE_WAIT,
            None => at.elapsed() >= ALONE_GAP,
        }
    }

    /// Writes what `stream` holds buffered, then `frame` in a `write(2)` of its own. Out of
    /// the writer's loop, which the Executa hot path runs.
    #[cold]
    #[inline(never)]
    fn write_alone(&self, stream: &mut Stream, frame: &[u8]) {
        self.write(stream.sink.as_mut(), |s| {
            s.flush()?;
            s.write_all(frame)?;
            s.flush()
        });
        stream.alone_at = Some(Instant::now());
    }

    /// Before a frame goes into `stream`: after one written alone, waits until the reader
    /// has read that (see [`Output::settled`]). On the writer thread, which alone holds the
    /// stream meanwhile. A client usually reads within a wake-up, so the first looks come
    /// quickly; then one a millisecond.
    #[cold]
    #[inline(never)]
    fn follow_alone(&self, stream: &mut Stream) {
        let Some(at) = stream.alone_at.take() else {
            return;
        };
        if stream.sink.is_none() {
            return;
        }
        let mut pause = Duration::from_micros(20);
        while !self.settled(at) {
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
    }

    fn lock_stream(&self) -> MutexGuard<'_, Stream> {
        crate::lock::lock(&self.stream)
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
    /// polls (but for the reader after a frame written alone): it is only used while replies
    /// come faster than they can be written, so it rarely waits, and then a wake-up per
    /// burst is cheap.
    pub fn write_loop(&self, inbox: &Inbox) {
        while let Ok(first) = inbox.receiver().recv() {
            let mut guard = self.lock_stream();
            let stream = &mut *guard;
            let mut next = Some(first);
            while let Some(msg) = next {
                match msg {
                    Out::Frame(frame) => {
                        if stream.alone_at.is_some() {
                            self.follow_alone(stream);
                        }
                        self.write(stream.sink.as_mut(), |s| s.write_all(&frame));
                        inbox.written(frame.len());
                        self.give_back(frame);
                    }
                    Out::Alone(frame) => {
                        let frame = *frame;
                        self.write_alone(stream, &frame);
                        inbox.written(frame.len());
                        self.give_back(frame);
                    }
                    Out::Close => {
                        self.write(stream.sink.as_mut(), Write::flush);
                        // Dropping the sink closes the stream.
                        stream.sink = None;
                        return;
                    }
                }
                next = inbox.try_recv();
            }
            self.write(stream.sink.as_mut(), Write::flush);
        }
        self.lock_stream().sink = None;
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
    use std::sync::atomic::AtomicUsize;

    /// A sink that records writes (and `log`, each write as text, beside what the probes
    /// of [`reader`] saw); `fail` makes every write fail with a broken pipe.
    #[derive(Clone, Default)]
    struct Recorder {
        data: Arc<Mutex<Vec<u8>>>,
        writes: Arc<Mutex<usize>>,
        fail: Arc<AtomicBool>,
        log: Arc<Mutex<Vec<String>>>,
    }

    impl Write for Recorder {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.fail.load(Ordering::SeqCst) {
                return Err(io::ErrorKind::BrokenPipe.into());
            }
            *self.writes.lock().unwrap() += 1;
            self.data.lock().unwrap().extend_from_slice(buf);
            let text = String::from_utf8_lossy(buf).into_owned();
            self.log.lock().unwrap().push(text);
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

    /// An output whose reader has `unread` bytes left to read: each look is logged, and a
    /// look that finds some takes `reads` of them (0: the reader is stalled).
    fn reader(rec: &Recorder, unread: &Arc<AtomicUsize>, reads: usize) -> (Output, Inbox) {
        let (_events, notifier) = crate::plugin::events::channel().unwrap();
        let (log, left) = (rec.log.clone(), unread.clone());
        let probe: Unread = Box::new(move || {
            let n = left.load(Ordering::SeqCst);
            log.lock().unwrap().push(format!("unread {n}"));
            left.store(n.saturating_sub(reads), Ordering::SeqCst);
            Some(n)
        });
        Output::with_unread(Box::new(rec.clone()), Some(probe), notifier)
    }

    /// Waits until `rec` has logged `entry`, failing after a minute.
    fn logged(rec: &Recorder, entry: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !rec.log.lock().unwrap().iter().any(|e| e == entry) {
            assert!(Instant::now() < deadline, "never logged {entry:?}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn mcp_progress_leaves_alone_and_the_next_frame_waits_until_it_is_read() {
        let rec = Recorder::default();
        let unread = Arc::new(AtomicUsize::new(2));
        let (out, inbox) = reader(&rec, &unread, 1);
        out.progress_alone();
        assert!(out.send(b"a\n".to_vec(), true), "queued: more work behind");
        assert!(out.try_send(b"p1\n".to_vec()));
        assert!(out.try_send(b"p2\n".to_vec()));
        assert!(
            out.send(b"reply\n".to_vec(), false),
            "queued behind the progress"
        );
        assert!(out.close(Duration::from_secs(1)));
        out.write_loop(&inbox);
        assert_eq!(
            *rec.log.lock().unwrap(),
            [
                "a\n", "p1\n", "p2\n", "unread 2", "unread 1", "unread 0", "reply\n"
            ],
            "what was buffered, then each progress in a write of its own, then the reply \
             once the reader has read them"
        );
    }

    #[test]
    fn a_direct_write_right_behind_mcp_progress_waits_for_the_reader() {
        let rec = Recorder::default();
        let unread = Arc::new(AtomicUsize::new(0));
        let (out, inbox) = reader(&rec, &unread, 0);
        let out = Arc::new(out);
        let writer = {
            let out = out.clone();
            std::thread::spawn(move || out.write_loop(&inbox))
        };
        out.progress_alone();
        assert!(out.try_send(b"p\n".to_vec()));
        logged(&rec, "p\n");
        // The reader has not read the progress yet: the reply is not written behind it,
        // neither by this thread nor by the writer.
        unread.store(128, Ordering::SeqCst);
        assert!(out.send(b"reply\n".to_vec(), false));
        logged(&rec, "unread 128");
        assert!(!rec.log.lock().unwrap().iter().any(|e| e == "reply\n"));
        unread.store(0, Ordering::SeqCst);
        logged(&rec, "reply\n");
        assert!(out.close(Duration::from_secs(60)));
        writer.join().unwrap();
        let log = rec.log.lock().unwrap();
        let writes: Vec<&String> = log.iter().filter(|e| !e.starts_with("unread")).collect();
        assert_eq!(writes, ["p\n", "reply\n"]);
        // Closed: nothing is written, and the probe is not asked about a closed stream.
        drop(log);
        let looks = rec.log.lock().unwrap().len();
        assert!(!out.send(b"late\n".to_vec(), false), "closed now");
        assert_eq!(rec.log.lock().unwrap().len(), looks);
    }

    #[test]
    fn where_nothing_tells_what_was_read_the_next_frame_pauses() {
        let rec = Recorder::default();
        let (out, inbox) = output(&rec);
        out.progress_alone();
        assert!(out.try_send(b"p\n".to_vec()));
        assert!(out.send(b"reply\n".to_vec(), true));
        assert!(out.close(Duration::from_secs(1)));
        let started = Instant::now();
        out.write_loop(&inbox);
        assert!(
            started.elapsed() >= ALONE_GAP,
            "the reply waited the gap out"
        );
        assert_eq!(*rec.log.lock().unwrap(), ["p\n", "reply\n"]);
    }

    #[test]
    fn executa_progress_and_replies_keep_batching() {
        let rec = Recorder::default();
        let (out, inbox) = output(&rec);
        assert!(out.send(b"a\n".to_vec(), true));
        assert!(out.try_send(b"p\n".to_vec()));
        assert!(out.send(b"reply\n".to_vec(), false));
        assert!(out.close(Duration::from_secs(1)));
        out.write_loop(&inbox);
        assert_eq!(*rec.log.lock().unwrap(), ["a\np\nreply\n"], "one write");
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
