//! The stderr drain: reads the plugin's stderr line by line on its own thread, so a chatty
//! plugin can never fill the pipe and wedge, relays each line with a `[plugin:<name>] `
//! prefix, and keeps the last few lines for error messages.

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use super::options::StderrRelay;
use crate::lock::lock;

/// Longest stderr line kept or relayed (a relay to our own stderr cuts it again, at
/// 2 KiB: see `logger::write_line`); the rest of a longer line is drained and counted.
const MAX_LINE: usize = 8 * 1024;
/// Longest line kept in the tail used for error messages.
const TAIL_LINE: usize = 1024;

/// The most recent stderr lines, and whether stderr has reached end of file.
pub(crate) struct StderrTail {
    lines: Mutex<VecDeque<String>>,
    cap: usize,
    done: Mutex<bool>,
    done_cv: Condvar,
}

impl StderrTail {
    pub(crate) fn new(cap: usize) -> Self {
        StderrTail {
            lines: Mutex::new(VecDeque::with_capacity(cap.min(64))),
            cap,
            done: Mutex::new(false),
            done_cv: Condvar::new(),
        }
    }

    fn push(&self, line: &str) {
        if self.cap == 0 {
            return;
        }
        let mut kept = line.to_owned();
        if kept.len() > TAIL_LINE {
            let cut = (0..=TAIL_LINE)
                .rev()
                .find(|&i| kept.is_char_boundary(i))
                .unwrap_or(0);
            kept.truncate(cut);
            kept.push('…');
        }
        let mut lines = lock(&self.lines);
        if lines.len() == self.cap {
            lines.pop_front();
        }
        lines.push_back(kept);
    }

    /// A copy of the kept lines, oldest first.
    pub(crate) fn snapshot(&self) -> Vec<String> {
        lock(&self.lines).iter().cloned().collect()
    }

    fn mark_done(&self) {
        *lock(&self.done) = true;
        self.done_cv.notify_all();
    }

    /// Waits up to `timeout` for stderr to reach end of file, so an error message can include
    /// the plugin's last words; `false` if it is still open (a child may hold it).
    pub(crate) fn wait_done(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut done = lock(&self.done);
        while !*done {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            done = match self.done_cv.wait_timeout(done, left) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        true
    }

    /// The kept lines joined for an error message, or a note that there were none.
    pub(crate) fn describe(&self) -> String {
        let lines = self.snapshot();
        if lines.is_empty() {
            return "no stderr output".to_owned();
        }
        let skip = lines.len().saturating_sub(5);
        format!("last stderr lines: {}", lines[skip..].join(" | "))
    }
}

/// Runs until the plugin's stderr reaches end of file or fails. It blocks reading the
/// pipe, which is its whole job; draining it promptly is what keeps a chatty plugin from
/// blocking on a full stderr pipe.
pub(crate) fn run<R: Read>(stderr: R, tail: &StderrTail, label: &str, relay: StderrRelay) {
    let mut input = BufReader::with_capacity(16 * 1024, stderr);
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        match read_capped_line(&mut input, &mut line) {
            Ok(None) => break,
            Ok(Some(size)) => {
                let mut text = String::from_utf8_lossy(&line)
                    .trim_end_matches(['\r', '\n'])
                    .to_owned();
                if size > MAX_LINE {
                    text.push_str(&format!("… ({size} bytes)"));
                }
                relay_line(relay, label, &text);
                tail.push(&text);
            }
            Err(e) => {
                log::debug!("[plugin:{label}] stderr read failed: {e}");
                break;
            }
        }
    }
    tail.mark_done();
}

/// Reads one line, keeping at most `MAX_LINE` bytes; returns its full length, or `None` at
/// end of file with nothing read.
fn read_capped_line<R: BufRead>(input: &mut R, line: &mut Vec<u8>) -> io::Result<Option<usize>> {
    let mut size = 0usize;
    loop {
        let chunk = match input.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok((size > 0).then_some(size));
        }
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (chunk.len(), false),
        };
        let room = MAX_LINE.saturating_sub(line.len());
        line.extend_from_slice(&chunk[..take.min(room)]);
        size += take;
        input.consume(take + usize::from(done));
        if done {
            // An empty line still counts as a line.
            return Ok(Some(size.max(1)));
        }
    }
}

fn relay_line(relay: StderrRelay, label: &str, text: &str) {
    let to_log = match relay {
        StderrRelay::Quiet => return,
        StderrRelay::Log => true,
        StderrRelay::Stderr => false,
        StderrRelay::Auto => log::log_enabled!(target: "executa::relay", log::Level::Info),
    };
    if to_log {
        log::info!(target: "executa::relay", "[plugin:{label}] {text}");
    } else {
        // Never waits for our stderr: were nobody to read it, this thread would stop
        // draining the plugin's stderr, and a plugin that logs would stop too. A line that
        // finds no room is dropped and counted, as the logger's are.
        crate::logger::write_line(format!("[plugin:{label}] {text}\n"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_tail_and_marks_done() {
        let tail = StderrTail::new(2);
        run(
            &b"one\n  two indented\nthree\r\n"[..],
            &tail,
            "t",
            StderrRelay::Quiet,
        );
        assert_eq!(tail.snapshot(), vec!["  two indented", "three"]);
        assert!(tail.wait_done(Duration::ZERO));
        assert!(tail.describe().contains("two indented | three"));
    }

    #[test]
    fn long_lines_are_capped() {
        let mut input = vec![b'x'; MAX_LINE * 3];
        input.extend_from_slice(b"\nnext\n");
        let tail = StderrTail::new(4);
        run(&input[..], &tail, "t", StderrRelay::Quiet);
        let lines = tail.snapshot();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].len() <= TAIL_LINE + 4);
        assert_eq!(lines[1], "next");
    }
}
