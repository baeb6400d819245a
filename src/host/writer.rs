//! The host's writer thread: the only code that touches a plugin's stdin. It runs the
//! same loop as the plugin side's writer (`crate::writer::pump`): whole frames from a
//! bounded queue, buffered, flushed when the queue runs empty.

use std::io::BufWriter;
use std::process::ChildStdin;
use std::time::Duration;

use crate::writer::{Inbox, pump};

/// Runs until `Close`, until every sender is gone, or until a write fails (the plugin
/// closed its stdin or died). Dropping the inbox on the way out makes later sends fail at
/// once, which callers report as a disconnect.
pub(crate) fn run(stdin: ChildStdin, inbox: Inbox, label: &str, spin: Duration) {
    let mut out = BufWriter::with_capacity(64 * 1024, stdin);
    if let Err(e) = pump(&mut out, &inbox, spin) {
        log::debug!("[plugin:{label}] stdin write failed: {e}");
    }
}
