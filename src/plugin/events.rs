//! Wake-ups for the supervising (main) thread, without polling.
//!
//! Stop signals (`sys::stop_signals`) and the runtime's own threads ring single bytes on
//! one bell (`sys::Bell`: a socket pair on Unix, a condition variable on Windows); the main
//! thread blocks on it, and on the relay's timer (`timer.rs`).

use std::io;
use std::time::Instant;

use crate::sys::{self, Bell, Ringer};

use super::timer::Watch;

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
            Event::Signal => sys::STOP_BYTE,
            Event::InputClosed => b'E',
            Event::OutputBroken => b'O',
            Event::Drained => b'D',
            Event::WriterDone => b'W',
            Event::Timer => sys::TIMER_BYTE,
        }
    }

    fn from_byte(b: u8) -> Option<Event> {
        Some(match b {
            sys::STOP_BYTE => Event::Signal,
            b'E' => Event::InputClosed,
            b'O' => Event::OutputBroken,
            b'D' => Event::Drained,
            b'W' => Event::WriterDone,
            sys::TIMER_BYTE => Event::Timer,
            _ => return None,
        })
    }
}

/// The sending side, cloned into every thread that reports.
pub(crate) struct Notifier(Ringer);

impl Notifier {
    /// Reports an event. Never blocks: the bell holds a few bytes at a time (each event is
    /// rung a handful of times over a plugin's life) and drops what does not fit.
    pub fn notify(&self, event: Event) {
        self.0.ring(event.byte());
    }

    /// Another handle to the same bell.
    pub fn try_clone(&self) -> io::Result<Notifier> {
        Ok(Notifier(self.0.try_clone()?))
    }

    /// The bell's ringer, for the stop signals and the relay's timer.
    pub fn ringer(&self) -> &Ringer {
        &self.0
    }
}

/// The receiving side, owned by the main thread: the bell, and the relay's timer (if any),
/// which reports [`Event::Timer`] while it is expired.
pub(crate) struct Events(Bell, Option<Watch>);

/// A bell: the receiver for main, and a notifier to clone.
pub(crate) fn channel() -> io::Result<(Events, Notifier)> {
    let (bell, ringer) = sys::bell()?;
    Ok((Events(bell, None), Notifier(ringer)))
}

impl Events {
    /// Also waits for `timer`.
    pub fn watch_timer(&mut self, timer: Option<Watch>) {
        self.1 = timer;
    }

    /// Blocks until an event arrives or `deadline` passes (`None`: no deadline, used only
    /// while serving, when some thread always reports eventually). Returns `None` on
    /// timeout. An expired timer is reported until whoever handles it clears it.
    pub fn wait(&mut self, deadline: Option<Instant>) -> io::Result<Option<Event>> {
        loop {
            let Some(byte) = Watch::wait(self.1.as_ref(), &mut self.0, deadline)? else {
                return Ok(None);
            };
            if let Some(ev) = Event::from_byte(byte) {
                return Ok(Some(ev));
            }
        }
    }
}
