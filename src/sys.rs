//! The only module that calls `libc`, because std has no safe `dup2` or `kill`.
//!
//! The stdout guard: while a plugin serves, nothing but protocol frames may reach the host.
//! The runtime keeps private duplicates of the original stdin and stdout (close-on-exec, so
//! child processes never inherit them), points fd 1 at stderr so a stray `println!` from the
//! author or a dependency lands in the log, and points fd 0 at `/dev/null` so a child process
//! cannot swallow protocol input.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// The protocol's private ends of stdin and stdout.
pub(crate) struct ProtocolStdio {
    pub input: File,
    pub output: File,
}

/// Takes the protocol streams. With `guard`, also redirects fd 1 to stderr and fd 0 to
/// `/dev/null`; without it, fds 0 and 1 stay as they are.
pub(crate) fn take(guard: bool) -> io::Result<ProtocolStdio> {
    io::stdout().flush()?;
    let input: OwnedFd = io::stdin().as_fd().try_clone_to_owned()?;
    let output: OwnedFd = io::stdout().as_fd().try_clone_to_owned()?;
    if guard {
        redirect(io::stderr().as_fd().as_raw_fd(), 1)?;
        let null = File::open("/dev/null")?;
        redirect(null.as_raw_fd(), 0)?;
    }
    Ok(ProtocolStdio {
        input: File::from(input),
        output: File::from(output),
    })
}

fn redirect(from: i32, to: i32) -> io::Result<()> {
    // SAFETY: dup2 on two descriptors this process owns; fd `to` is atomically replaced
    // and std's handles for 0/1 keep working on the new target.
    let rc = unsafe { libc::dup2(from, to) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Sends SIGTERM/SIGKILL-style signals to a child process (used by the host side).
pub(crate) fn send_signal(pid: u32, signal: i32) -> io::Result<()> {
    let pid = i32::try_from(pid).map_err(|_| io::Error::other("pid out of range"))?;
    // SAFETY: kill(2) has no memory-safety preconditions.
    let rc = unsafe { libc::kill(pid, signal) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
