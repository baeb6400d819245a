//! The host's writer thread: the only code that touches a plugin's stdin: whole frames
//! from a bounded queue (`crate::writer`), buffered, flushed when the queue runs empty.

use std::io::{self, BufWriter, Write};
use std::process::ChildStdin;
use std::time::Duration;

use crate::writer::{Inbox, Out};

/// Runs until `Close`, until every sender is gone, or until a write fails (the plugin
/// closed its stdin or died). Dropping the inbox on the way out makes later sends fail at
/// once, which callers report as a disconnect.
pub(crate) fn run(stdin: ChildStdin, inbox: Inbox, label: &str, spin: Duration) {
    let mut out = BufWriter::with_capacity(64 * 1024, stdin);
    if let Err(e) = pump(&mut out, &inbox, spin) {
        log::debug!("[plugin:{label}] stdin write failed: {e}");
    }
}

/// Writes frames until `Close` or until every sender is gone, flushing whenever the queue
/// runs empty, so a burst of frames costs one write.
fn pump<W: Write>(out: &mut BufWriter<W>, inbox: &Inbox, spin: Duration) -> io::Result<()> {
    while let Ok(first) = crate::spin::recv(inbox.receiver(), spin) {
        let mut next = Some(first);
        while let Some(msg) = next {
            match msg {
                Out::Frame(frame) => {
                    let written = out.write_all(&frame);
                    inbox.written(frame.len());
                    written?;
                }
                Out::Close => return out.flush(),
            }
            next = inbox.try_recv();
        }
        out.flush()?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_written_in_order_and_the_queue_ends_empty() {
        let (out, inbox) = crate::writer::channel();
        assert!(out.try_send(b"a\n".to_vec()));
        assert!(out.try_send(b"b\n".to_vec()));
        drop(out);
        let mut sink = BufWriter::new(Vec::new());
        pump(&mut sink, &inbox, Duration::ZERO).unwrap();
        assert_eq!(sink.get_ref(), b"a\nb\n");
    }
}
