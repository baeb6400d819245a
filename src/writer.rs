//! The writer thread: the only code that touches the protocol output.

use std::io::{self, BufWriter, Write};

use crossbeam_channel::{Receiver, Sender, TrySendError};

use crate::events::{Event, Notifier};

/// Capacity of the outgoing queue: enough run-ahead that a burst of replies is written
/// with one `write(2)`, small enough to bound memory while a host is not reading.
pub(crate) const OUT_QUEUE: usize = 1024;

/// A message for the writer.
pub(crate) enum Out {
    /// One complete frame, ending in `\n`.
    Frame(Vec<u8>),
    /// Flush and stop.
    Close,
}

/// The sending side of the writer's queue.
#[derive(Clone)]
pub(crate) struct Outbox(pub Sender<Out>);

impl Outbox {
    /// Queues a frame, blocking while the queue is full (the host is not reading: the
    /// documented backpressure). Returns `false` when the writer has stopped.
    pub fn send(&self, frame: Vec<u8>) -> bool {
        self.0.send(Out::Frame(frame)).is_ok()
    }

    /// Queues a frame without blocking. Returns `false` when the queue is full or the
    /// writer has stopped; the caller decides what a dropped frame means.
    pub fn try_send(&self, frame: Vec<u8>) -> bool {
        match self.0.try_send(Out::Frame(frame)) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
        }
    }
}

/// Runs the writer loop until `Close`, until every sender is gone, or until a write fails.
/// Flushes whenever the queue is empty, so a burst of frames costs one write.
pub(crate) fn run<W: Write>(output: W, rx: Receiver<Out>, events: Notifier) {
    let mut out = BufWriter::with_capacity(64 * 1024, output);
    match pump(&mut out, &rx) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
            log::info!("executa: host closed our stdout; stopping");
            events.notify(Event::OutputBroken);
        }
        Err(e) => {
            log::error!("executa: writing to the host failed: {e}");
            events.notify(Event::OutputBroken);
        }
    }
    events.notify(Event::WriterDone);
}

fn pump<W: Write>(out: &mut BufWriter<W>, rx: &Receiver<Out>) -> io::Result<()> {
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(msg) = next {
            match msg {
                Out::Frame(frame) => out.write_all(&frame)?,
                Out::Close => return out.flush(),
            }
            next = rx.try_recv().ok();
        }
        out.flush()?;
    }
    out.flush()
}
