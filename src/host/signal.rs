//! Sending `SIGTERM` / `SIGKILL` to a plugin. std can only `SIGKILL`, so the polite
//! `SIGTERM` goes through the crate's one `libc` module (`crate::sys`).
//!
//! The plugin is started as the leader of its own process group (`command.rs`), so the
//! signals go to the whole group: a plugin started through a wrapper (`sh -c '...'`, a
//! launcher script) or one that forked helpers is stopped as a whole, not just its top
//! process.

use std::io;

/// A signal the shutdown sequence sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Signal {
    Term,
    Kill,
}

#[cfg(unix)]
fn number(sig: Signal) -> i32 {
    match sig {
        Signal::Term => libc::SIGTERM,
        Signal::Kill => libc::SIGKILL,
    }
}

/// Sends `sig` to the plugin's process group, falling back to the process `pid` alone
/// when the group cannot be signalled (the plugin moved itself to another group).
///
/// The caller must hold the child unreaped (its `Child` not yet successfully waited on), so
/// that `pid` cannot have been recycled for an unrelated process: an unreaped leader keeps
/// its pid, and with it the group id, reserved.
#[cfg(unix)]
pub(crate) fn send(pid: u32, sig: Signal) -> io::Result<()> {
    crate::sys::send_signal_group(pid, number(sig))
        .or_else(|_| crate::sys::send_signal(pid, number(sig)))
}

/// Sends `SIGKILL` to whatever is left of the plugin's process group after its leader
/// ended (helpers that ignored `SIGTERM`, or that outlived a crash holding the plugin's
/// pipes). `Ok` with nothing to do when the group is empty.
///
/// The leader has been reaped by then. Linux never hands out a pid that is still some
/// live group's id, so while any member lives the group id is still the plugin's; once
/// the group is empty the call finds nobody (`ESRCH`).
#[cfg(unix)]
pub(crate) fn kill_group_remnants(pgid: u32) -> io::Result<()> {
    match crate::sys::send_signal_group(pgid, libc::SIGKILL) {
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
        other => other,
    }
}

/// Without POSIX signals there is no polite stop: report it so the caller escalates.
#[cfg(not(unix))]
pub(crate) fn send(_pid: u32, _sig: Signal) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "signals need a Unix host",
    ))
}

/// Without process groups there is nothing to clean up.
#[cfg(not(unix))]
pub(crate) fn kill_group_remnants(_pgid: u32) -> io::Result<()> {
    Ok(())
}
