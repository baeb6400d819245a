//! The writer thread: the only code that touches the plugin's stdin.
//!
//! Frames arrive whole on a bounded queue, so every write is line-atomic. They are buffered
//! and flushed only when the queue is empty: one `write(2)` per burst instead of per frame.

use std::io::{BufWriter, Write};
use std::process::ChildStdin;

use crossbeam_channel::{Receiver, TryRecvError};

/// What the writer thread is asked to do.
pub(crate) enum Outgoing {
    /// Write one complete frame (ending in `\n`).
    Frame(Vec<u8>),
    /// Flush what came before, then close stdin (the first step of shutdown).
    Close,
}

/// Runs until `Close`, until every sender is gone, or until a write fails (the plugin
/// closed its stdin or died). Dropping `rx` on the way out makes later sends fail at once,
/// which callers report as a disconnect.
pub(crate) fn run(stdin: ChildStdin, rx: Receiver<Outgoing>, label: &str) {
    let mut out = BufWriter::with_capacity(64 * 1024, stdin);
    // Blocks while the queue is empty; that is this thread's whole job. It ends when the
    // plugin's `Shared` (the last sender) is dropped.
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(msg) = next.take() {
            match msg {
                Outgoing::Frame(frame) => {
                    if let Err(e) = out.write_all(&frame) {
                        log::debug!("[plugin:{label}] stdin write failed: {e}");
                        return;
                    }
                }
                Outgoing::Close => {
                    let _ = out.flush();
                    return;
                }
            }
            next = match rx.try_recv() {
                Ok(m) => Some(m),
                Err(TryRecvError::Empty) => None,
                Err(TryRecvError::Disconnected) => {
                    let _ = out.flush();
                    return;
                }
            };
        }
        if let Err(e) = out.flush() {
            log::debug!("[plugin:{label}] stdin flush failed: {e}");
            return;
        }
    }
    let _ = out.flush();
}
