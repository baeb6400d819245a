//! Sending `SIGTERM` / `SIGKILL` to a plugin. std can only `SIGKILL`, so the polite
//! `SIGTERM` goes through the crate's one `libc` module (`crate::sys`).

use std::io;

/// A signal the shutdown sequence sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Signal {
    Term,
    Kill,
}

/// Sends `sig` to the plugin process `pid`.
///
/// The caller must hold the child unreaped (its `Child` not yet successfully waited on), so
/// that `pid` cannot have been recycled for an unrelated process.
#[cfg(unix)]
pub(crate) fn send(pid: u32, sig: Signal) -> io::Result<()> {
    let number = match sig {
        Signal::Term => libc::SIGTERM,
        Signal::Kill => libc::SIGKILL,
    };
    crate::sys::send_signal(pid, number)
}

/// Without POSIX signals there is no polite stop: report it so the caller escalates.
#[cfg(not(unix))]
pub(crate) fn send(_pid: u32, _sig: Signal) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "signals need a Unix host",
    ))
}
