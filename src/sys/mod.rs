//! The one platform module: everything std has no safe or portable way to do, behind one
//! interface, so that the rest of the crate names no platform. `unix.rs` calls `libc`
//! (Linux, macOS, the BSDs); `windows.rs` calls Win32 through `windows-sys`.
//!
//! What differs, in short (the README's platform table has the figures):
//! - the stdout guard: Unix points fd 1 at stderr and fd 0 at `/dev/null` with `dup2`;
//!   Windows points the standard output and input handles at stderr and `NUL`
//!   (`SetStdHandle`) and keeps the protocol's originals out of child processes;
//! - waiting on the input with a bound (`poll`): Unix only. Where it is missing, the
//!   reader hands reading to a new reader when its own invoke calls the host, as it does
//!   for any other thread's call;
//! - the main thread's bell: a socket pair polled beside a timer on Unix, a condition
//!   variable on Windows;
//! - stop signals: SIGTERM and SIGINT on Unix; console control events (Ctrl-C,
//!   Ctrl-Break, close, logoff, shutdown) on Windows;
//! - the scheduling timer: Linux's `timerfd` (`OsTimer`); everywhere else the portable
//!   timer of `plugin/timer.rs`, which the main thread's own wait timeout runs;
//! - the host's hold on a plugin's processes: a process group and signals on Unix, a job
//!   object on Windows.

#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub(crate) use unix::*;

#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub(crate) use windows::*;

/// The byte a stop signal (Unix) or console event (Windows) rings on the main thread's bell.
pub(crate) const STOP_BYTE: u8 = b'X';

/// What [`Bell::wait`] returns for an expired timer (no thread rings it).
pub(crate) const TIMER_BYTE: u8 = b'T';

/// The protocol's private ends of stdin and stdout ([`take`]).
pub(crate) struct ProtocolStdio {
    pub input: std::fs::File,
    pub output: BlockingWrites,
}
