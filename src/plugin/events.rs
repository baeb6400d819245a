//! Wake-ups for the supervising (main) thread, without polling.
//!
//! Signals (through signal-hook's self-pipe, which writes `b'X'`) and the runtime's own
//! threads write single bytes into one socket pair; the main thread blocks reading it.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// Something the main thread waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// SIGTERM or SIGINT.
    Signal,
    /// The reader saw end of input (or a read error).
    InputClosed,
    /// The writer could not write (host gone).
    OutputBroken,
    /// No work is queued or running any more (only sent while draining).
    Drained,
    /// The writer flushed and stopped.
    WriterDone,
    /// The relay's timer expired: a run on the reader may have lasted too long (see
    /// `relay.rs`). Not a byte on the socket: the timer's own descriptor.
    Timer,
}

impl Event {
    fn byte(self) -> u8 {
        match self {
            Event::Signal => b'X',
            Event::InputClosed => b'E',
            Event::OutputBroken => b'O',
            Event::Drained => b'D',
            Event::WriterDone => b'W',
            Event::Timer => b'T',
        }
    }

    fn from_byte(b: u8) -> Option<Event> {
        Some(match b {
            b'X' => Event::Signal,
            b'E' => Event::InputClosed,
            b'O' => Event::OutputBroken,
            b'D' => Event::Drained,
            b'W' => Event::WriterDone,
            _ => return None,
        })
    }
}

/// The sending side, cloned into every thread that reports.
pub(crate) struct Notifier(UnixStream);

impl Notifier {
    /// Reports an event. Never blocks: the socket is non-blocking and holds at most a
    /// few bytes at a time (each event is written a handful of times over a plugin's life).
    pub fn notify(&self, event: Event) {
        let _ = (&self.0).write(&[event.byte()]);
    }

    /// Another handle to the same socket.
    pub fn try_clone(&self) -> io::Result<Notifier> {
        Ok(Notifier(self.0.try_clone()?))
    }

    /// The raw socket, for signal-hook's pipe registration.
    pub fn socket(&self) -> io::Result<UnixStream> {
        self.0.try_clone()
    }
}

/// The receiving side, owned by the main thread: the socket, and the descriptor of a
/// timer (`-1`: none) that reports [`Event::Timer`] while it is expired.
pub(crate) struct Events(UnixStream, i32);

/// A socket pair: the receiver for main, and a notifier to clone.
pub(crate) fn channel() -> io::Result<(Events, Notifier)> {
    let (rx, tx) = UnixStream::pair()?;
    tx.set_nonblocking(true)?;
    rx.set_nonblocking(true)?;
    Ok((Events(rx, -1), Notifier(tx)))
}

impl Events {
    /// Also waits for the timer behind `fd` (it must outlive this receiver's waits).
    pub fn watch_timer(&mut self, fd: i32) {
        self.1 = fd;
    }

    /// Blocks until an event arrives or `deadline` passes (`None`: no deadline, used only
    /// while serving, when some thread always reports eventually). Returns `None` on
    /// timeout. An expired timer is reported until whoever handles it clears it.
    pub fn wait(&mut self, deadline: Option<Instant>) -> io::Result<Option<Event>> {
        loop {
            let timeout = match deadline {
                None => None,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left.max(Duration::from_millis(1))),
                    _ => return Ok(None),
                },
            };
            let (socket, timer) =
                crate::sys::wait_either(std::os::fd::AsRawFd::as_raw_fd(&self.0), self.1, timeout)?;
            if !socket {
                return Ok(timer.then_some(Event::Timer));
            }
            let mut byte = [0u8; 1];
            match self.0.read(&mut byte) {
                Ok(0) => return Err(io::Error::other("event socket closed")),
                Ok(_) => {
                    if let Some(ev) = Event::from_byte(byte[0]) {
                        return Ok(Some(ev));
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(e),
            }
        }
    }
}
