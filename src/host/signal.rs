//! Sending `SIGTERM` / `SIGKILL` to a plugin. std can only `SIGKILL` a single process, so
//! this is the crate's one small use of `libc` on the host side.

use std::io;

/// A signal the shutdown sequence sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Signal {
    Term,
    Kill,
}

/// Sends `sig` to the process group led by `pid` (plugins are spawned as group leaders, so
/// a launcher such as `uv run` and its child both get it), falling back to the process
/// alone when the group is gone.
///
/// The caller must hold the child unreaped (the `Child` not yet waited on successfully),
/// so that `pid` cannot have been recycled for an unrelated process.
#[cfg(unix)]
pub(crate) fn send(pid: u32, sig: Signal) -> io::Result<()> {
    let number = match sig {
        Signal::Term => libc::SIGTERM,
        Signal::Kill => libc::SIGKILL,
    };
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
    if raw_kill(-pid, number).is_ok() {
        return Ok(());
    }
    raw_kill(pid, number)
}

#[cfg(unix)]
fn raw_kill(target: libc::pid_t, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: kill(2) takes two integers and touches no memory of ours; it cannot violate
    // memory safety whatever the arguments. The pid-reuse hazard is handled by the caller
    // (see `send`).
    let rc = unsafe { libc::kill(target, sig) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
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
