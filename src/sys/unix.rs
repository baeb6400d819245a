//! Unix (Linux, macOS, the BSDs): the only file that calls `libc`. std has no safe `dup2`,
//! `poll`, `kill` or `openat`, and its CPU count (`available_parallelism`, which also parses
//! cgroup files) costs 5 KB of binary.
//!
//! The stdout guard: while a plugin serves, nothing but protocol frames may reach the host.
//! The runtime keeps private duplicates of the original stdin and stdout (close-on-exec, so
//! child processes never inherit them), points fd 1 at stderr so a stray `println!` from the
//! author or a dependency lands in the log, and points fd 0 at `/dev/null` so a child process
//! cannot swallow protocol input.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use super::ProtocolStdio;

// The host's process trees (process groups and signals), the file transport's `openat`,
// CPU affinity and clocks.
#[cfg(feature = "host")]
mod host;
#[cfg(feature = "host")]
pub(crate) use host::*;

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
        output: BlockingWrites(File::from(output)),
    })
}

/// Waits until `fd` has something to read (data, or its writer's end), at most `timeout`
/// (rounded up to whole milliseconds). `Ok(false)`: the time ran out first.
pub(crate) fn wait_readable(fd: i32, timeout: std::time::Duration) -> io::Result<bool> {
    wait_for(fd, libc::POLLIN, timeout)
}

fn wait_for(fd: i32, events: libc::c_short, timeout: std::time::Duration) -> io::Result<bool> {
    let mut fds = [pollfd(fd, events)];
    poll(&mut fds, Some(timeout)).map(|ready| ready > 0)
}

fn pollfd(fd: i32, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

/// `poll(2)` on `fds` for at most `timeout` (rounded up to whole milliseconds; `None`: no
/// bound), again after a signal interrupts it. Returns how many are ready.
fn poll(fds: &mut [libc::pollfd], timeout: Option<std::time::Duration>) -> io::Result<usize> {
    let ms = timeout.map_or(-1, |t| {
        t.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
    });
    loop {
        // SAFETY: `fds` is a valid array of `fds.len()` `pollfd`s for the whole call (poll
        // ignores a negative fd).
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if rc >= 0 {
            return Ok(rc as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Where `byte` first occurs in `haystack`: libc's `memchr`, vectorized, where a loop over
/// the bytes costs 6 instructions a byte at opt-level "z" (callgrind: a third of the
/// reader's work on a 64 KiB frame).
pub(crate) fn find_byte(haystack: &[u8], byte: u8) -> Option<usize> {
    // SAFETY: reads at most `haystack.len()` bytes of a live slice; the result, if not
    // null, points into it.
    let found = unsafe { libc::memchr(haystack.as_ptr().cast(), i32::from(byte), haystack.len()) };
    (!found.is_null()).then(|| found as usize - haystack.as_ptr() as usize)
}

/// A one-shot timer whose expiry makes a descriptor readable (Linux `timerfd`), for the
/// main thread to wait on beside its bell ([`Bell::wait`]): arming and disarming are one
/// system call each (0.5-0.9 µs on a 2-vCPU VM) and wake nobody; only an expiry does.
#[cfg(target_os = "linux")]
#[cfg_attr(feature = "portable-timer", allow(dead_code))]
pub(crate) struct OsTimer(OwnedFd);

#[cfg(target_os = "linux")]
#[cfg_attr(feature = "portable-timer", allow(dead_code))]
impl OsTimer {
    pub fn new() -> io::Result<OsTimer> {
        // SAFETY: plain system call; a valid descriptor is owned below.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_CLOEXEC | libc::TFD_NONBLOCK,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned by nobody else.
        Ok(OsTimer(unsafe {
            <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd)
        }))
    }

    /// Expires once after `after` (zero: disarms). Replaces any earlier setting.
    pub fn set(&self, after: std::time::Duration) {
        let value = libc::timespec {
            tv_sec: after.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: after.subsec_nanos() as libc::c_long,
        };
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: value,
        };
        // SAFETY: a valid timer descriptor and a valid `itimerspec`; the old value is not
        // asked for. It cannot fail with valid arguments.
        unsafe { libc::timerfd_settime(self.0.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
    }

    /// Clears an expiry (so the descriptor stops being readable).
    pub fn clear(&self) {
        let mut count = [0u8; 8];
        // SAFETY: reads at most 8 bytes into an 8-byte buffer; non-blocking.
        unsafe { libc::read(self.0.as_raw_fd(), count.as_mut_ptr().cast(), 8) };
    }

    pub fn watch(&self) -> TimerWatch {
        self.0.as_raw_fd()
    }

    /// Whether an expiry is pending (for tests of who arms and disarms).
    #[cfg(test)]
    pub fn is_set(&self) -> bool {
        // SAFETY: all-zero is a valid `itimerspec`.
        let mut spec: libc::itimerspec = unsafe { std::mem::zeroed() };
        // SAFETY: a valid timer descriptor and a valid out-pointer.
        unsafe { libc::timerfd_gettime(self.0.as_raw_fd(), &mut spec) };
        spec.it_value.tv_sec != 0 || spec.it_value.tv_nsec != 0
    }
}

/// The receiving end of the main thread's bell: a non-blocking socket pair, which the
/// runtime's threads and the signal handler (signal-hook's self-pipe) write single bytes
/// into, and which the main thread waits on with `poll(2)`, beside a timer.
pub(crate) struct Bell(UnixStream);

/// The ringing end of a [`Bell`]: cloned into every thread that reports.
pub(crate) struct Ringer(UnixStream);

/// A bell and the ringer to clone.
pub(crate) fn bell() -> io::Result<(Bell, Ringer)> {
    let (rx, tx) = UnixStream::pair()?;
    tx.set_nonblocking(true)?;
    rx.set_nonblocking(true)?;
    Ok((Bell(rx), Ringer(tx)))
}

impl Ringer {
    /// Rings `byte`. Never blocks: a full socket (bytes nobody has read yet, which wake the
    /// main thread anyway) drops it.
    pub fn ring(&self, byte: u8) {
        let _ = (&self.0).write(&[byte]);
    }

    /// Another handle to the same bell.
    pub fn try_clone(&self) -> io::Result<Ringer> {
        Ok(Ringer(self.0.try_clone()?))
    }
}

impl Bell {
    /// Blocks until a byte is rung or the timer behind `timer` is expired
    /// ([`TIMER_BYTE`]), at most `timeout` (`None`: no bound). `Ok(None)`: the time ran
    /// out. A rung byte comes before an expired timer; an expired timer is reported until
    /// its owner clears it.
    pub fn wait(
        &mut self,
        timeout: Option<std::time::Duration>,
        timer: Option<TimerWatch>,
    ) -> io::Result<Option<u8>> {
        use std::io::Read;
        loop {
            let mut fds = [
                pollfd(self.0.as_raw_fd(), libc::POLLIN),
                pollfd(timer.unwrap_or(-1), libc::POLLIN),
            ];
            poll(&mut fds, timeout)?;
            if fds[0].revents == 0 {
                return Ok((fds[1].revents != 0).then_some(super::TIMER_BYTE));
            }
            let mut byte = [0u8; 1];
            match self.0.read(&mut byte) {
                Ok(0) => return Err(io::Error::other("the bell's socket closed")),
                Ok(_) => return Ok(Some(byte[0])),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// What the main thread waits on for an OS timer: its descriptor (only Linux has one, its
/// `timerfd`; elsewhere the portable timer folds its deadline into the wait's timeout).
pub(crate) type TimerWatch = RawFd;

mod signals;
pub(crate) use signals::stop_signals;
#[cfg(feature = "host")]
pub(crate) use signals::{StopSignals as HostSignals, host_signals, last_host_signal};

/// An input the reader can wait on with a bound: its descriptor.
pub(crate) type Waitable = RawFd;

/// The descriptor of an input of a type known to have one (`File`: stdin as the runtime
/// takes it; a pipe's or socket's end), for `poll`.
pub(crate) fn waitable(input: &dyn std::any::Any) -> Option<Waitable> {
    if let Some(f) = input.downcast_ref::<File>() {
        Some(f.as_raw_fd())
    } else if let Some(s) = input.downcast_ref::<UnixStream>() {
        Some(s.as_raw_fd())
    } else if let Some(p) = input.downcast_ref::<io::PipeReader>() {
        Some(p.as_raw_fd())
    } else {
        input
            .downcast_ref::<std::process::ChildStdout>()
            .map(AsRawFd::as_raw_fd)
    }
}

/// A probe of what was written to `output` (the protocol's stdout, or a test's socket)
/// that its reader has not read yet, for MCP progress (`plugin/output.rs`): on Linux,
/// `FIONREAD` on a pipe (bytes in the pipe, from either end) and `SIOCOUTQ` on a Unix
/// socket (the memory of what the peer has not read: 0 once it has read everything; Node
/// gives its children socket pairs). `None` for anything else. The probe keeps only the
/// descriptor's number: call it while `output` is open.
#[cfg(target_os = "linux")]
pub(crate) fn unread_probe(
    output: &dyn std::any::Any,
) -> Option<Box<dyn Fn() -> Option<usize> + Send + Sync>> {
    let fd = if let Some(w) = output.downcast_ref::<BlockingWrites>() {
        w.0.as_raw_fd()
    } else {
        output.downcast_ref::<UnixStream>()?.as_raw_fd()
    };
    // SAFETY: fstat on a descriptor `output` owns, into a zeroed struct it fills.
    let st = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        (libc::fstat(fd, &mut st) == 0).then_some(st)
    }?;
    let request = match st.st_mode & libc::S_IFMT {
        libc::S_IFSOCK => libc::TIOCOUTQ,
        libc::S_IFIFO => libc::FIONREAD,
        _ => return None,
    };
    Some(Box::new(move || {
        let mut n: libc::c_int = 0;
        // SAFETY: an ioctl that writes one int, on a descriptor the caller keeps open.
        let rc = unsafe { libc::ioctl(fd, request, &mut n) };
        (rc == 0).then(|| usize::try_from(n).unwrap_or(0))
    }))
}

/// None here: macOS and the BSDs have no call known to tell, from a pipe's write end or
/// a socket's sending side, what the reader has left (not tried on a Mac); MCP progress
/// falls back to a pause there.
#[cfg(not(target_os = "linux"))]
pub(crate) fn unread_probe(
    _output: &dyn std::any::Any,
) -> Option<Box<dyn Fn() -> Option<usize> + Send + Sync>> {
    None
}

/// Whether a write to stderr (fd 2) of at most `PIPE_BUF` bytes would not block now:
/// `poll(2)` with no wait. A pipe reports room once it has a free page, which takes such a
/// write whole. `false` on any error (the line is then dropped, which is all the logger
/// needs). fd 2 is never made non-blocking: the flag would be shared with the parent.
pub(crate) fn stderr_has_room() -> bool {
    let mut fds = [pollfd(2, libc::POLLOUT)];
    matches!(poll(&mut fds, Some(std::time::Duration::ZERO)), Ok(1..))
        && fds[0].revents & libc::POLLOUT != 0
}

/// Seconds on a monotonic clock that is cheap to read (on Linux the coarse clock, read
/// without a system call), for windows of a second; wraps after 136 years.
pub(crate) fn coarse_secs() -> u32 {
    #[cfg(target_os = "linux")]
    const CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC_COARSE;
    #[cfg(not(target_os = "linux"))]
    const CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one `timespec`, which lives for the whole call.
    unsafe { libc::clock_gettime(CLOCK, &mut ts) };
    ts.tv_sec as u32
}

/// A descriptor written as a blocking one is even when it is not: a write that would block
/// waits for room instead of failing. The plugin's protocol output needs it: stdout is
/// shared with whoever started the plugin, which may have made it non-blocking
/// (`O_NONBLOCK`, as event-loop runtimes do with their own stdio), and a failed write would
/// close the output and lose the replies. The host's writer thread needs it for its end of
/// a plugin's stdin, which the host makes non-blocking itself (`host/writer.rs`). The wait
/// has no bound, as a blocking write has none: it is the backpressure, and ends when the
/// other side reads, or with an error when it closes the pipe.
pub(crate) struct BlockingWrites<F = File>(pub F);

/// How long one look for room lasts before the write is tried again.
const ROOM_LOOK: std::time::Duration = std::time::Duration::from_secs(60);

impl<F: Write + AsFd> Write for BlockingWrites<F> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            match self.0.write(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    wait_for(self.0.as_fd().as_raw_fd(), libc::POLLOUT, ROOM_LOOK)?;
                }
                other => return other,
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
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

/// How many CPUs the calling thread may run on (its affinity mask, which the threads it
/// starts inherit; for a program that never pins a thread, the process's), at least 1.
#[cfg(target_os = "linux")]
pub(crate) fn usable_cpus() -> usize {
    // SAFETY: `cpu_set_t` is plain old data, so all-zero is a valid value, and
    // sched_getaffinity writes at most `size_of::<cpu_set_t>()` bytes into it.
    let count = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
            libc::CPU_COUNT(&set)
        } else {
            1
        }
    };
    usize::try_from(count).unwrap_or(1).max(1)
}

/// How many CPUs this process may run on, at least 1.
#[cfg(not(target_os = "linux"))]
pub(crate) fn usable_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
