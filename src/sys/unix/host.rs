//! The host side's Unix calls: a plugin's process tree (its process group, and signals),
//! its stdin made non-blocking, the file transport's `openat`, the shell for
//! `--sampling-cmd`, CPU affinity and other processes' CPU clocks.

use std::ffi::{CString, OsStr};
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command};

/// The processes a plugin (or a sampling command) started, held so that none outlives it:
/// on Unix its process group, which the child leads ([`ProcessTree::prepare`] makes it
/// the leader of a new one), and signals to the group.
///
/// The caller holds the child unreaped (its `Child` not yet successfully waited on) while
/// it sends [`ProcessTree::stop_politely`] or [`ProcessTree::kill`], so that the pid cannot
/// have been recycled for an unrelated process: an unreaped leader keeps its pid, and with
/// it the group id, reserved.
#[derive(Debug)]
pub(crate) struct ProcessTree {
    pgid: u32,
}

impl ProcessTree {
    /// Makes the child `cmd` spawns the leader of a new process group (`setpgid(0, 0)`),
    /// so that a Ctrl-C meant for the host does not hit it and signals reach its helpers.
    pub fn prepare(cmd: &mut Command) {
        cmd.process_group(0);
    }

    /// The tree of `child`, just spawned from a [prepared](ProcessTree::prepare) command:
    /// its process group, whose id is its pid. (A child that is not a group leader gets
    /// the signals alone.) Never fails.
    pub fn adopt(child: &Child) -> ProcessTree {
        ProcessTree { pgid: child.id() }
    }

    /// The tree of `child`, started elsewhere, perhaps not as a group leader: the same as
    /// [`ProcessTree::adopt`] here.
    pub fn adopt_foreign(child: &Child) -> ProcessTree {
        ProcessTree::adopt(child)
    }

    /// The polite stop: `SIGTERM` to the group, or to the process alone when the group
    /// cannot be signalled (the plugin moved itself to another group).
    pub fn stop_politely(&self) -> io::Result<()> {
        self.signal(libc::SIGTERM)
    }

    /// `SIGKILL` to the group, or to the process alone as [`ProcessTree::stop_politely`].
    pub fn kill(&self) -> io::Result<()> {
        self.signal(libc::SIGKILL)
    }

    fn signal(&self, sig: libc::c_int) -> io::Result<()> {
        send_signal_group(self.pgid, sig).or_else(|_| send_signal(self.pgid, sig))
    }

    /// `SIGKILL` to whatever is left of the group after its leader ended (helpers that
    /// ignored `SIGTERM`, or that outlived a crash holding the plugin's pipes). `Ok` with
    /// nothing to do when the group is empty.
    ///
    /// The leader has been reaped by then. Linux never hands out a pid that is still some
    /// live group's id, so while any member lives the group id is still the plugin's; once
    /// the group is empty the call finds nobody (`ESRCH`).
    pub fn kill_remnants(&self) -> io::Result<()> {
        match send_signal_group(self.pgid, libc::SIGKILL) {
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
            other => other,
        }
    }
}

/// The host's end of a child's stdin as a `File`.
pub(crate) fn stdin_file(stdin: ChildStdin) -> File {
    File::from(OwnedFd::from(stdin))
}

/// Makes `file` non-blocking when it is a pipe (FIFO), for writes of at most
/// [`ATOMIC_PIPE_WRITE`] bytes that go in whole or not at all and never wait. `Ok(true)`:
/// it is now; `Ok(false)`: not a pipe, it stays blocking.
pub(crate) fn set_nonblocking_pipe(file: &File) -> io::Result<bool> {
    if !file.metadata().is_ok_and(|m| m.file_type().is_fifo()) {
        return Ok(false);
    }
    set_nonblocking(file)?;
    Ok(true)
}

/// The largest write to a pipe that is atomic: a non-blocking write of at most this many
/// bytes writes all of them or none (`EAGAIN`), never a part (POSIX `PIPE_BUF`).
pub(crate) const ATOMIC_PIPE_WRITE: usize = libc::PIPE_BUF;

/// Makes `fd` non-blocking (`O_NONBLOCK`). The flag belongs to the open file description,
/// so this is only for descriptors this process alone uses, such as its end of a pipe to a
/// child (the child's end is another description). Never blocks.
fn set_nonblocking(fd: &impl AsRawFd) -> io::Result<()> {
    let fd = fd.as_raw_fd();
    // SAFETY: fcntl on a descriptor the caller holds open for the duration of the call.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A directory opened for looking up its entries without following links.
pub(crate) struct Dir(File);

impl Dir {
    /// Opens the directory `path`.
    pub fn open(path: &Path) -> io::Result<Dir> {
        File::open(path).map(Dir)
    }

    /// Opens its entry `name` for reading: see [`open_entry_nofollow`].
    pub fn open_entry_nofollow(&self, name: &OsStr) -> io::Result<File> {
        open_entry_nofollow(&self.0, name, libc::O_RDONLY)
    }

    /// Opens its entry `name` for reading and appending (`O_RDWR | O_APPEND`), as
    /// [`Dir::open_entry_nofollow`] opens it for reading: never through a link, never
    /// blocking on a FIFO. The caller checks that what it opened is a regular file.
    pub fn open_entry_nofollow_append(&self, name: &OsStr) -> io::Result<File> {
        open_entry_nofollow(&self.0, name, libc::O_RDWR | libc::O_APPEND)
    }
}

/// Takes an advisory lock on `file` (`flock`, shared or exclusive) without waiting:
/// `Ok(false)` when another open of the file holds one in the way. Held until
/// [`unlock_file`] or the file is closed. (std's `File::try_lock` is newer than Rust 1.88,
/// the crate's minimum.)
pub(crate) fn try_lock_file(file: &File, exclusive: bool) -> io::Result<bool> {
    let kind = if exclusive {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    };
    // SAFETY: flock on a descriptor borrowed for the call.
    if unsafe { libc::flock(file.as_raw_fd(), kind | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EWOULDBLOCK | libc::EINTR) => Ok(false),
        _ => Err(e),
    }
}

/// Releases the lock [`try_lock_file`] took.
pub(crate) fn unlock_file(file: &File) -> io::Result<()> {
    // SAFETY: flock on a descriptor borrowed for the call.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Which file an opened file or a directory entry is (device and inode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileId {
    dev: u64,
    ino: u64,
}

/// The identity and the number of links (names) of the opened `file`, whose metadata
/// (`fstat`) is `meta`.
pub(crate) fn file_identity(_file: &File, meta: &Metadata) -> io::Result<(FileId, u64)> {
    Ok((
        FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        },
        meta.nlink(),
    ))
}

/// The identity of what the directory entry `path` names now, without following a link.
pub(crate) fn entry_identity(path: &Path) -> io::Result<FileId> {
    let now = std::fs::symlink_metadata(path)?;
    Ok(FileId {
        dev: now.dev(),
        ino: now.ino(),
    })
}

/// The shell command line that runs `command` (`sh -c COMMAND`), and how to name it.
pub(crate) fn shell(command: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(command);
    cmd
}

/// The shell [`shell`] runs, as messages name it.
pub(crate) const SHELL: &str = "sh -c";

/// Opens the entry `name` of the directory `dir` with `access` (`O_RDONLY`, or `O_RDWR`
/// with `O_APPEND`), exactly once: never through a symlink (`O_NOFOLLOW`: a symlink fails
/// with `ELOOP`), never blocking on a FIFO or a device (`O_NONBLOCK`), close-on-exec, and
/// never as a controlling terminal. `name` must be one path component; anything with a `/`
/// or a NUL byte fails with `InvalidInput`. Does not block beyond the `openat(2)` call
/// itself.
fn open_entry_nofollow(dir: &File, name: &OsStr, access: libc::c_int) -> io::Result<File> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.contains(&b'/') || bytes == b"." || bytes == b".." {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a single path component",
        ));
    }
    let name = CString::new(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let flags = access | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;
    // SAFETY: `name` is a valid NUL-terminated string that outlives the call, and `dir`
    // is an open descriptor borrowed for the call's duration.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: openat just returned this descriptor, and nothing else owns it.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Whether an error from [`Dir::open_entry_nofollow`] means the entry is a symlink (`ELOOP`).
pub(crate) fn is_nofollow_refusal(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ELOOP)
}

/// Sends `signal` to the process `pid` alone.
fn send_signal(pid: u32, signal: i32) -> io::Result<()> {
    let pid = i32::try_from(pid).map_err(|_| io::Error::other("pid out of range"))?;
    // SAFETY: kill(2) has no memory-safety preconditions.
    let rc = unsafe { libc::kill(pid, signal) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Sends a signal to every process in the process group `pgid` (`kill(-pgid, signal)`).
fn send_signal_group(pgid: u32, signal: i32) -> io::Result<()> {
    let pgid = i32::try_from(pgid).map_err(|_| io::Error::other("pid out of range"))?;
    if pgid <= 1 {
        // kill(0) / kill(-1) would hit our own group or every process we may signal.
        return Err(io::Error::other("not a plugin process group"));
    }
    // SAFETY: kill(2) has no memory-safety preconditions.
    let rc = unsafe { libc::kill(-pgid, signal) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The CPUs the calling thread may run on (its affinity mask), in ascending order.
#[cfg(target_os = "linux")]
pub(crate) fn thread_affinity() -> io::Result<Vec<usize>> {
    // SAFETY: `cpu_set_t` is plain old data, so all-zero is a valid value, and
    // sched_getaffinity writes at most `size_of::<cpu_set_t>()` bytes into it.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(io::Error::last_os_error());
        }
        set
    };
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: CPU_ISSET reads one bit of a valid set; `cpu` is below its size in bits.
    Ok((0..max)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// Restricts the calling thread (and threads it starts afterwards) to `cpus`.
#[cfg(target_os = "linux")]
pub(crate) fn set_thread_affinity(cpus: &[usize]) -> io::Result<()> {
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    if cpus.is_empty() || cpus.iter().any(|&c| c >= max) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a CPU set needs 1 to {max} CPUs numbered below {max}"),
        ));
    }
    // SAFETY: `cpu_set_t` is plain old data; CPU_SET writes one bit below its size (checked
    // above); sched_setaffinity reads `size_of::<cpu_set_t>()` bytes of a valid set.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus {
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The CPU time process `pid` has used so far, all its threads together, ended ones too
/// (its `CLOCK_PROCESS_CPUTIME_ID`, read from outside through `clock_getcpuclockid`).
#[cfg(target_os = "linux")]
pub(crate) fn process_cpu_time(pid: u32) -> io::Result<std::time::Duration> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
    let mut clock: libc::clockid_t = 0;
    // SAFETY: clock_getcpuclockid writes one clockid_t into the valid `clock`.
    let rc = unsafe { libc::clock_getcpuclockid(pid, &mut clock) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    // SAFETY: `timespec` is plain old data; clock_gettime writes one into the valid `ts`.
    let ts = unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        if libc::clock_gettime(clock, &mut ts) != 0 {
            return Err(io::Error::last_os_error());
        }
        ts
    };
    Ok(std::time::Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    ))
}

/// Other processes' CPU clocks are read here only on Linux.
#[cfg(not(target_os = "linux"))]
pub(crate) fn process_cpu_time(_pid: u32) -> io::Result<std::time::Duration> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "another process's CPU clock needs Linux",
    ))
}

/// CPU affinity is Linux-only here.
#[cfg(not(target_os = "linux"))]
pub(crate) fn thread_affinity() -> io::Result<Vec<usize>> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "CPU affinity needs Linux",
    ))
}

/// CPU affinity is Linux-only here.
#[cfg(not(target_os = "linux"))]
pub(crate) fn set_thread_affinity(_cpus: &[usize]) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "CPU affinity needs Linux",
    ))
}
