//! `executa bench`'s plumbing around a session: the watchdog that ends a plugin that
//! stalls (and redraws the progress line), the count of open sessions an interrupt's
//! teardown waits for, and the bounded line reads and checked writes on the pipes.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdout};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{RecvTimeoutError, bounded};
use executa::host::{ProcessTree, ShutdownPolicy};
use executa::wire::DEFAULT_MAX_FRAME_BYTES;

/// A session's plugin: its process and its tree, which the watchdog ends.
pub type Plugin<'a> = (&'a mut Child, &'a ProcessTree);

/// How many sessions are open, and its changes: an interrupt's teardown waits for them
/// to close (the watchdog of the one running ends its plugin; `bench` then closes it).
static OPEN: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

/// How long an interrupt's teardown waits for the sessions to close: the watchdog's
/// sequence (SIGTERM, 5 s, SIGKILL, 5 s) and the close's own, with room to spare.
const CLOSE_WAIT: Duration = Duration::from_secs(30);

/// One open session, counted until dropped.
pub struct OpenSession(());

impl OpenSession {
    /// Counts a session about to start; refused once an interrupt's teardown runs.
    pub fn new() -> Result<OpenSession, String> {
        static WAIT_REGISTERED: std::sync::Once = std::sync::Once::new();
        WAIT_REGISTERED.call_once(|| crate::interrupt::at_end(|| wait_closed(CLOSE_WAIT)));
        let mut open = OPEN.0.lock().unwrap_or_else(|e| e.into_inner());
        if crate::interrupt::interrupted() {
            return Err("interrupted".to_owned());
        }
        *open += 1;
        Ok(OpenSession(()))
    }
}

impl Drop for OpenSession {
    fn drop(&mut self) {
        *OPEN.0.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        OPEN.1.notify_all();
    }
}

/// Waits until no session is open, at most `limit`.
fn wait_closed(limit: Duration) {
    let open = OPEN.0.lock().unwrap_or_else(|e| e.into_inner());
    drop(OPEN.1.wait_timeout_while(open, limit, |n| *n > 0));
}

/// Runs `work` on this thread while a second thread redraws the progress line (when
/// asked) and kills the plugin if `work` has not finished and `done` has not moved for
/// `stall`: the kill closes the plugin's stdout, so a blocked read returns. The second
/// thread naps 20 ms at a time, and wakes at once when `work` ends.
pub fn with_watchdog<T>(
    (child, tree): Plugin<'_>,
    stall: Duration,
    done: &AtomicUsize,
    progress: Option<usize>,
    work: impl FnOnce() -> Result<T, String>,
) -> Result<T, String> {
    let killed = AtomicBool::new(false);
    let interrupted = AtomicBool::new(false);
    // Nothing is ever sent: dropping the sender is the signal that `work` is over.
    let (over, is_over) = bounded::<()>(1);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut last = (usize::MAX, Instant::now());
            let mut err = std::io::stderr();
            loop {
                let n = done.load(Ordering::Relaxed);
                if let Some(total) = progress {
                    let _ = write!(err, "\rbench: {n}/{total} ({}%)", n * 100 / total.max(1));
                    let _ = err.flush();
                }
                if crate::interrupt::interrupted() {
                    interrupted.store(true, Ordering::Release);
                    // Its stdin is `work`'s, so the sequence starts at SIGTERM; the kill
                    // closes its stdout, and `work` returns.
                    let policy = ShutdownPolicy {
                        stdin_grace: Duration::ZERO,
                        ..ShutdownPolicy::default()
                    };
                    tree.shutdown(child, &policy);
                    return;
                }
                if n != last.0 {
                    last = (n, Instant::now());
                } else if last.1.elapsed() >= stall {
                    killed.store(true, Ordering::Release);
                    let _ = child.kill();
                    return;
                }
                match is_over.recv_timeout(Duration::from_millis(20)) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => break,
                }
            }
            if let Some(total) = progress {
                let _ = writeln!(err, "\rbench: {total}/{total} (100%)");
            }
        });
        let out = work();
        drop(over);
        match out {
            Err(_) if interrupted.load(Ordering::Acquire) => {
                Err("interrupted: the plugin was stopped".to_owned())
            }
            Err(e) if killed.load(Ordering::Acquire) => Err(format!(
                "no reply for {:.1} s, the plugin was stopped ({e})",
                stall.as_secs_f64()
            )),
            other => other,
        }
    })
}

/// Appends `n` in decimal (`write!` costs more at the binary's opt-level "z").
pub fn push_u64(buf: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[at..]);
}

/// Reads one line of the plugin's stdout into `line`, at most the frame cap
/// ([`DEFAULT_MAX_FRAME_BYTES`]): a longer one is an error, so a plugin writing an endless
/// line costs the bench 16 MiB, not all the memory there is.
pub fn read_line(r: &mut BufReader<ChildStdout>, line: &mut Vec<u8>) -> Result<(), String> {
    line.clear();
    let cap = DEFAULT_MAX_FRAME_BYTES as u64;
    match r.by_ref().take(cap + 1).read_until(b'\n', line) {
        Ok(0) => Err("the plugin closed its stdout".into()),
        Ok(n) if n as u64 > cap => Err(format!(
            "the plugin wrote a line over {cap} bytes (the frame cap)"
        )),
        Ok(_) => Ok(()),
        Err(e) => Err(format!("reading the plugin's stdout: {e}")),
    }
}

pub fn write_all(w: &mut impl Write, bytes: &[u8]) -> Result<(), String> {
    w.write_all(bytes)
        .map_err(|e| format!("writing to the plugin: {e}"))
}

pub fn flush(w: &mut impl Write) -> Result<(), String> {
    w.flush().map_err(|e| format!("writing to the plugin: {e}"))
}
