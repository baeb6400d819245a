//! A plugin's stdin: written by the thread that made a frame when it is idle, else by the
//! writer thread.
//!
//! A frame goes straight into the pipe from the thread that made it (a caller, or the reader
//! answering a quick reverse call) when the stdin is idle: nothing queued and nothing in the
//! writer thread's hands. That saves a hop to the writer thread, a wake-up per frame, which
//! is most of the cost of a frame on a VM.
//!
//! That direct write never waits for the plugin. The host's end of the pipe is non-blocking,
//! and a frame of at most `PIPE_BUF` bytes goes into a pipe whole or not at all, so a full
//! pipe sends the frame to the queue instead. (Windows has no non-blocking anonymous
//! pipes: there every frame goes through the writer thread.) The reader depends on it: were it to wait on a
//! plugin that is itself waiting for its stdout to be read, both would wait for ever.
//!
//! Otherwise (a burst, a larger frame, a full pipe) the frame goes to the bounded queue
//! (`crate::writer`), and the writer thread writes the backlog, gathered into writes of up
//! to 64 KiB. While the pipe is full it waits for room; that wait has no bound, as a blocking write has none: it is the backpressure, and it
//! ends when the plugin reads, or with an error when it exits.
//!
//! Direct writes take no lock between them: writes of at most `PIPE_BUF` bytes to a pipe
//! never mix, whoever makes them. A thread that sends while another is still inside its
//! write (on one core, a caller that the plugin's wake-up preempted right after its write)
//! writes all the same. The writer thread waits until no direct write is under way before
//! it writes a burst, whose writes are larger and could otherwise be split by one.
//!
//! Order: a frame goes straight out only while nothing is queued (checked after the thread
//! has said it is writing; a queued frame counts until the writer thread has written it
//! whole), so the frames of one thread leave in the order it sent them.

use std::fs::File;
use std::io::{self, Write};
use std::process::ChildStdin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::lock::lock;
use crate::sys::{self, ATOMIC_PIPE_WRITE, BlockingWrites};
use crate::writer::{Inbox, Out, Outbox, SendFailure};

/// A pipe that took part of an atomic write (never seen; logged within a limit, and
/// flushed at shutdown with the host's other limits).
pub(super) static PARTIAL: crate::log_limit::NamedLimit =
    crate::log_limit::NamedLimit::new("partial atomic write");

/// Bytes of queued frames gathered into one write.
const BURST: usize = 64 * 1024;

/// The pipe as direct writers see it.
struct Pipe {
    /// `None` once the writer thread has closed the pipe. A direct writer clones the handle
    /// (the lock is held for that alone) and writes with its clone.
    file: Mutex<Option<Arc<File>>>,
    /// Direct writes under way.
    writing: AtomicUsize,
}

/// Where frames for a plugin's stdin go.
pub(crate) struct PluginStdin {
    queue: Outbox,
    pipe: Arc<Pipe>,
    /// Whether frames may be written straight out: the stdin is a pipe, made non-blocking.
    direct: bool,
}

/// The writer thread's ends: the queue and the pipe.
pub(crate) struct WriterEnd {
    inbox: Inbox,
    pipe: Arc<Pipe>,
    file: Arc<File>,
}

/// A stdin over `stdin`, queueing at most `frames` frames, and the writer thread's ends
/// (for [`run`]). Never blocks.
pub(crate) fn open(stdin: ChildStdin, frames: usize, label: &str) -> (PluginStdin, WriterEnd) {
    let (queue, inbox) = crate::writer::channel_with(frames);
    let file = Arc::new(sys::stdin_file(stdin));
    // Windows has no non-blocking anonymous pipes: every frame goes through the writer
    // thread there.
    let direct = sys::set_nonblocking_pipe(&file)
        .inspect_err(|e| log::debug!("[plugin:{label}] stdin stays blocking: {e}"))
        .unwrap_or(false);
    let pipe = Arc::new(Pipe {
        file: Mutex::new(Some(file.clone())),
        writing: AtomicUsize::new(0),
    });
    let stdin = PluginStdin {
        queue,
        pipe: pipe.clone(),
        direct,
    };
    (stdin, WriterEnd { inbox, pipe, file })
}

impl PluginStdin {
    /// A stdin that only queues, for tests that hold the writer's inbox themselves.
    #[cfg(test)]
    pub(crate) fn queue_only(queue: Outbox) -> PluginStdin {
        let pipe = Arc::new(Pipe {
            file: Mutex::new(None),
            writing: AtomicUsize::new(0),
        });
        PluginStdin {
            queue,
            pipe,
            direct: false,
        }
    }

    /// Whether nothing is queued or in the writer thread's hands.
    pub fn is_idle(&self) -> bool {
        self.queue.is_idle()
    }

    /// Sends a frame: straight out when the stdin is idle, else through the queue, waiting
    /// at most `wait` for room there (the plugin is not reading). Fails with `Closed` once the
    /// writer thread has stopped (the plugin closed its stdin or exited).
    pub fn send_timeout(&self, frame: Vec<u8>, wait: Duration) -> Result<(), SendFailure> {
        match self.try_direct(frame) {
            Ok(()) => Ok(()),
            Err(frame) => self.queue.send_timeout(frame, wait),
        }
    }

    /// Sends a frame without waiting for the plugin (straight out, or queued); hands it back
    /// when the queue is full or the writer thread has stopped.
    pub fn try_send(&self, frame: Vec<u8>) -> Result<(), Vec<u8>> {
        self.try_direct(frame)
            .or_else(|frame| self.queue.try_queue(frame))
    }

    /// Asks the writer thread to close the pipe once the queue is written, waiting at most
    /// `wait` for room in the queue. `false` when there was none, or the writer has stopped.
    pub fn close(&self, wait: Duration) -> bool {
        self.queue.close(wait)
    }

    /// Writes `frame` now if the stdin is idle and the pipe has room for all of it; hands it
    /// back otherwise (the caller queues it). Never waits for the plugin.
    fn try_direct(&self, frame: Vec<u8>) -> Result<(), Vec<u8>> {
        if !self.direct || frame.len() > ATOMIC_PIPE_WRITE || !self.queue.is_idle() {
            return Err(frame);
        }
        let _writing = Writing::enter(&self.pipe);
        // Checked again now that the writer thread can see this write: a frame queued
        // meanwhile must go first.
        if !self.queue.is_idle() {
            return Err(frame);
        }
        let Some(file) = lock(&self.pipe.file).clone() else {
            return Err(frame);
        };
        match (&*file).write(&frame) {
            Ok(n) if n == frame.len() => Ok(()),
            // Never happens: a pipe takes a write of at most PIPE_BUF bytes whole or not at
            // all (POSIX), and `direct` is only set for a pipe. Were it to, the rest would
            // have to go now, before any other frame, waiting for room if need be.
            Ok(n) => {
                if PARTIAL.allow() {
                    log::error!(
                        "a pipe took part of an atomic write ({n} of {})",
                        frame.len()
                    );
                }
                if let Err(e) = write_with_room(&file, &frame[n..])
                    && PARTIAL.allow()
                {
                    log::error!("stdin write failed: {e}");
                }
                Ok(())
            }
            // A full pipe, a signal, or a plugin gone: the writer thread waits for room, or
            // finds out and stops (which makes later sends fail at once).
            Err(_) => Err(frame),
        }
    }
}

/// A direct write under way, for as long as it lives.
struct Writing<'a>(&'a Pipe);

impl<'a> Writing<'a> {
    fn enter(pipe: &'a Pipe) -> Writing<'a> {
        pipe.writing.fetch_add(1, Ordering::SeqCst);
        Writing(pipe)
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.0.writing.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Pipe {
    /// Waits until no direct write is under way. Call with frames in hand: they count as
    /// queued, so no direct write starts after this returns. The wait is for other threads'
    /// single non-blocking writes; yielding lets a preempted one finish on one core.
    fn quiesce(&self) {
        while self.writing.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
    }
}

/// The writer thread: runs until `Close`, until every sender is gone, or until a write fails
/// (the plugin closed its stdin or died), then closes the pipe (dropping `end`). Dropping the
/// inbox on the way out makes later sends fail at once, which callers report as a
/// disconnect.
pub(crate) fn run(end: WriterEnd, label: &str, spin: Duration) {
    if let Err(e) = pump(&end, spin) {
        log::debug!("[plugin:{label}] stdin write failed: {e}");
    }
}

impl Drop for WriterEnd {
    /// Closes the pipe, also when the writer thread never ran or panicked: it closes when
    /// the last clone is dropped, here or after a direct write that took its clone before.
    fn drop(&mut self) {
        lock(&self.pipe.file).take();
    }
}

/// Writes frames until `Close` or until every sender is gone, gathering what is queued into
/// writes of up to [`BURST`] bytes.
fn pump(end: &WriterEnd, spin: Duration) -> io::Result<()> {
    let mut gathered = Vec::new();
    let mut poller = crate::spin::Poller::new(spin);
    while let Ok(first) = poller.recv(end.inbox.receiver()) {
        end.pipe.quiesce();
        let mut written = Written {
            inbox: &end.inbox,
            held: false,
        };
        let mut next = Some(first);
        let mut closing = false;
        while let Some(msg) = next {
            let Out::Frame(frame) = msg else {
                closing = true;
                break;
            };
            if gathered.len() + frame.len() > BURST {
                write_with_room(&end.file, &gathered)?;
                written.give(gathered.len());
                gathered.clear();
            }
            if frame.len() > BURST {
                write_with_room(&end.file, &frame)?;
                written.give(frame.len());
            } else {
                gathered.extend_from_slice(&frame);
            }
            next = end.inbox.try_recv();
        }
        write_with_room(&end.file, &gathered)?;
        written.give(gathered.len());
        gathered.clear();
        written.end();
        if closing {
            break;
        }
    }
    Ok(())
}

/// Gives a burst's bytes back to the queue's count as they reach the pipe, so its byte
/// budget counts only what is still to be written, but holds one back until the burst
/// ends: the queue must not look idle, which lets direct writes in, while the writer is
/// still writing. After a failed write nothing more is given back, so it never looks idle
/// again (and sends fail once the writer thread has stopped).
struct Written<'a> {
    inbox: &'a Inbox,
    held: bool,
}

impl Written<'_> {
    fn give(&mut self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let now = if self.held { bytes } else { bytes - 1 };
        self.held = true;
        self.inbox.written(now);
    }

    fn end(self) {
        if self.held {
            self.inbox.written(1);
        }
    }
}

/// Writes all of `bytes`, waiting for room whenever the pipe is full (see
/// [`BlockingWrites`]: the wait has no bound, it is the backpressure).
fn write_with_room(file: &File, bytes: &[u8]) -> io::Result<()> {
    BlockingWrites(file).write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(unix)]
    use std::io::Read;
    #[cfg(unix)]
    use std::process::{Child, Command, Stdio};

    /// A child that echoes its stdin back (`cat`), and the host's ends of its stdin.
    #[cfg(unix)]
    fn cat() -> (Child, PluginStdin, WriterEnd) {
        let mut child = Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn cat");
        let stdin = child.stdin.take().expect("piped stdin");
        let (out, end) = open(stdin, 16, "t");
        (child, out, end)
    }

    #[cfg(unix)] // `cat`; the first two also need direct writes
    #[test]
    fn an_idle_stdin_is_written_without_the_writer_thread() {
        let (mut child, out, end) = cat();
        assert!(out.try_send(b"one\n".to_vec()).is_ok());
        assert!(out.is_idle(), "written straight out, nothing queued");
        let mut stdout = child.stdout.take().expect("piped stdout");
        let mut got = [0u8; 4];
        stdout.read_exact(&mut got).expect("cat echoes");
        assert_eq!(&got, b"one\n");
        drop(out);
        run(end, "t", Duration::ZERO);
        assert!(child.wait().expect("cat exits").success(), "stdin closed");
    }

    #[cfg(unix)] // `cat`; the first two also need direct writes
    #[test]
    fn a_full_pipe_sends_frames_to_the_queue_and_the_writer_keeps_their_order() {
        let (mut child, out, end) = cat();
        // Nobody reads `cat`, so its pipes fill; no send may wait for it.
        let mut want = Vec::new();
        while out.is_idle() {
            let mut frame = vec![b'x'; ATOMIC_PIPE_WRITE - 1];
            frame.push(b'\n');
            want.extend_from_slice(&frame);
            assert!(out.try_send(frame).is_ok());
        }
        for frame in [vec![b'y'; 3 * BURST], b"last\n".to_vec()] {
            want.extend_from_slice(&frame);
            assert!(out.try_send(frame).is_ok(), "queued behind");
        }
        assert!(out.close(Duration::from_secs(5)));
        let mut stdout = child.stdout.take().expect("piped stdout");
        let writer = std::thread::spawn(move || run(end, "t", Duration::ZERO));
        let mut all = Vec::new();
        stdout.read_to_end(&mut all).expect("cat's output");
        writer.join().expect("writer");
        assert!(all == want, "every frame whole and in the order sent");
        assert!(child.wait().expect("cat exits").success());
    }

    #[test]
    fn a_burst_gives_its_bytes_back_as_written_but_looks_busy_until_it_ends() {
        let (queue, inbox) = crate::writer::channel();
        let out = PluginStdin::queue_only(queue);
        assert!(out.try_send(vec![b'a'; 10]).is_ok());
        assert!(out.try_send(vec![b'b'; 10]).is_ok());
        let mut written = Written {
            inbox: &inbox,
            held: false,
        };
        written.give(10);
        written.give(10);
        assert!(!out.is_idle(), "one byte held back while the burst lasts");
        written.end();
        assert!(out.is_idle(), "and given back at its end");
    }

    #[cfg(unix)] // `cat`; the first two also need direct writes
    #[test]
    fn a_closed_pipe_fails_the_writer_and_later_sends() {
        let (mut child, out, end) = cat();
        child.kill().expect("kill cat");
        child.wait().expect("reap cat");
        let writer = std::thread::spawn(move || run(end, "t", Duration::ZERO));
        // The plugin is gone: a direct write fails, the frame is queued, the writer's write
        // fails and it stops, and sends fail from then on. A child another test is starting
        // may still hold a copy of the pipe's read end until it execs (the copy is
        // close-on-exec), and a write meanwhile succeeds: so send until one fails.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            match out.send_timeout(b"late\n".to_vec(), Duration::from_secs(5)) {
                Err(SendFailure::Closed) => break,
                sent => assert!(
                    std::time::Instant::now() < deadline,
                    "sends still {sent:?} a minute after the plugin was gone"
                ),
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        writer.join().expect("the writer stopped");
    }
}
