//! Stop signals: SIGTERM and SIGINT while a plugin serves, and SIGTERM, SIGINT and SIGHUP
//! for a host process that catches its interrupts (`host::Interrupts`). One `sigaction(2)`
//! of the crate's own, not signal-hook's registry (a global map behind a lock: 8,896 bytes
//! of every plugin). The handler rings [`STOP_BYTE`] on a bell, notes which signal came,
//! and then passes the signal on to the handler the process had before (a `ctrlc` or
//! `tokio::signal` handler installed earlier still sees it), as signal-hook's chaining
//! did. The default action and "ignore" are not passed on: the orderly stop replaces them.

use std::ffi::c_void;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};

use super::Ringer;
use crate::sys::STOP_BYTE;

type SigInfoHandler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void);
type PlainHandler = extern "C" fn(libc::c_int);

/// The most signals one [`Slot`] takes.
const MAX_SIGNALS: usize = 3;

/// One user of the handler: the signals it takes, where it rings, and the handlers the
/// signals had before (`SIG_DFL`: none to pass on), with whether each takes `SA_SIGINFO`'s
/// three arguments. Statics only: a signal handler can reach nothing else.
struct Slot {
    signals: &'static [libc::c_int],
    /// Whether a signal the process ignores when this is installed stays ignored: a host
    /// started under `nohup`, or as a background job of a shell that ignores SIGINT,
    /// keeps what it was given (as Go and Python do). A plugin's stop signals are always
    /// taken.
    keep_ignored: bool,
    /// The descriptor the handler writes to (`-1`: none).
    fd: AtomicI32,
    /// The last signal taken (0: none yet).
    last: AtomicI32,
    previous: [AtomicUsize; MAX_SIGNALS],
    previous_siginfo: [AtomicBool; MAX_SIGNALS],
}

impl Slot {
    const fn new(signals: &'static [libc::c_int], keep_ignored: bool) -> Slot {
        Slot {
            signals,
            keep_ignored,
            fd: AtomicI32::new(-1),
            last: AtomicI32::new(0),
            previous: [const { AtomicUsize::new(libc::SIG_DFL) }; MAX_SIGNALS],
            previous_siginfo: [const { AtomicBool::new(false) }; MAX_SIGNALS],
        }
    }

    /// The handler's body: rings [`STOP_BYTE`], then calls the previous handler.
    /// Async-signal-safe: atomics and `write(2)` to a non-blocking socket that is never
    /// closed, with `errno` kept for the code it interrupted.
    fn on_signal(&self, sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
        let saved = errno::get();
        self.last.store(sig, Ordering::SeqCst);
        let fd = self.fd.load(Ordering::SeqCst);
        if fd >= 0 {
            ring(fd);
        }
        errno::set(saved);
        let Some(i) = self.signals.iter().position(|&s| s == sig) else {
            return;
        };
        let previous = self.previous[i].load(Ordering::SeqCst);
        if previous == libc::SIG_DFL || previous == libc::SIG_IGN {
            return;
        }
        // SAFETY: `previous` is the handler `sigaction` reported for this signal, called
        // with the signature its flags declare, with the arguments the kernel gave us.
        unsafe {
            if self.previous_siginfo[i].load(Ordering::SeqCst) {
                std::mem::transmute::<usize, SigInfoHandler>(previous)(sig, info, context);
            } else {
                std::mem::transmute::<usize, PlainHandler>(previous)(sig);
            }
        }
    }
}

/// Writes [`STOP_BYTE`] to the bell's socket. Async-signal-safe. Where the system has
/// `MSG_NOSIGNAL`, a bell whose reading end is gone fails the send instead of raising
/// SIGPIPE in a program that keeps SIGPIPE's default action.
fn ring(fd: libc::c_int) {
    let byte = [STOP_BYTE];
    // SAFETY: sends or writes one byte from a live array; a bad descriptor only fails.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    unsafe {
        libc::send(fd, byte.as_ptr().cast(), 1, libc::MSG_NOSIGNAL)
    };
    // SAFETY: as above.
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    unsafe {
        libc::write(fd, byte.as_ptr().cast(), 1)
    };
}

/// A plugin's: SIGTERM and SIGINT.
static PLUGIN: Slot = Slot::new(&[libc::SIGTERM, libc::SIGINT], false);
#[cfg(feature = "host")]
/// A host process's: SIGTERM, SIGINT and SIGHUP (its terminal closing).
static HOST: Slot = Slot::new(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP], true);

extern "C" fn on_stop_signal(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    PLUGIN.on_signal(sig, info, context);
}

#[cfg(feature = "host")]
extern "C" fn on_host_signal(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    HOST.on_signal(sig, info, context);
}

/// The signals of a [`Slot`] ring [`STOP_BYTE`] on a bell while this lives; dropping it
/// gives them back to the handlers they had (unless another handler replaced ours
/// meanwhile: that one stays).
pub(crate) struct StopSignals {
    slot: &'static Slot,
    handler: usize,
    old: [Option<libc::sigaction>; MAX_SIGNALS],
}

/// Rings `ringer` with [`STOP_BYTE`] on SIGTERM and SIGINT, until the result is dropped.
pub(crate) fn stop_signals(ringer: &Ringer) -> io::Result<StopSignals> {
    install(&PLUGIN, on_stop_signal as SigInfoHandler as usize, ringer)
}

#[cfg(feature = "host")]
/// Rings `ringer` with [`STOP_BYTE`] on SIGTERM, SIGINT and SIGHUP, until the result is
/// dropped; [`last_host_signal`] says which came.
pub(crate) fn host_signals(ringer: &Ringer) -> io::Result<StopSignals> {
    install(&HOST, on_host_signal as SigInfoHandler as usize, ringer)
}

#[cfg(feature = "host")]
/// How the last signal [`host_signals`] took asks the host to stop: 0 interrupt (SIGINT),
/// 1 terminate (SIGTERM), 2 hang-up (SIGHUP); `None` before any came.
pub(crate) fn last_host_signal() -> Option<u8> {
    match HOST.last.load(Ordering::SeqCst) {
        libc::SIGINT => Some(0),
        libc::SIGTERM => Some(1),
        libc::SIGHUP => Some(2),
        _ => None,
    }
}

fn install(slot: &'static Slot, handler: usize, ringer: &Ringer) -> io::Result<StopSignals> {
    // The handler's descriptor stays open for the life of the process: a handler that
    // loaded it just before the signals are given back must never write to a reused one.
    let fd = std::os::fd::IntoRawFd::into_raw_fd(ringer.0.try_clone()?);
    slot.fd.store(fd, Ordering::SeqCst);
    let mut stop = StopSignals {
        slot,
        handler,
        old: [None; MAX_SIGNALS],
    };
    for (i, &sig) in slot.signals.iter().enumerate() {
        // SAFETY: all-zero is a valid `sigaction`; the handler is async-signal-safe and has
        // the three-argument signature that SA_SIGINFO calls.
        unsafe {
            let mut previous: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut previous) != 0 {
                return Err(io::Error::last_os_error()); // `stop` restores what it took
            }
            if slot.keep_ignored && previous.sa_sigaction == libc::SIG_IGN {
                continue; // left ignored, and nothing to give back
            }
            // Ours already (a second install): nothing to pass on, which would recurse.
            let earlier = if previous.sa_sigaction == handler {
                libc::SIG_DFL
            } else {
                previous.sa_sigaction
            };
            // Set before ours is installed, so the handler never sees a stale one.
            slot.previous[i].store(earlier, Ordering::SeqCst);
            slot.previous_siginfo[i]
                .store(previous.sa_flags & libc::SA_SIGINFO != 0, Ordering::SeqCst);
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(sig, &action, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
            stop.old[i] = Some(previous);
        }
    }
    Ok(stop)
}

impl Drop for StopSignals {
    fn drop(&mut self) {
        for (old, &sig) in self.old.iter().zip(self.slot.signals) {
            let Some(old) = old else { continue };
            // SAFETY: reads the current action into a valid `sigaction`, and restores one
            // `sigaction` returned for this signal.
            unsafe {
                let mut current: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut current) == 0
                    && current.sa_sigaction == self.handler
                {
                    libc::sigaction(sig, old, std::ptr::null_mut());
                }
            }
        }
    }
}

/// The calling thread's `errno`, kept across the handler's `write(2)`.
mod errno {
    #[cfg(any(target_os = "solaris", target_os = "illumos"))]
    use libc::___errno as location;
    #[cfg(any(target_os = "openbsd", target_os = "netbsd"))]
    use libc::__errno as location;
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "emscripten"))]
    use libc::__errno_location as location;
    #[cfg(any(
        target_vendor = "apple",
        target_os = "freebsd",
        target_os = "dragonfly"
    ))]
    use libc::__error as location;

    /// Elsewhere (no known accessor) `errno` is left as `write(2)` set it.
    #[cfg(not(any(
        target_os = "linux",
        target_os = "android",
        target_os = "emscripten",
        target_os = "openbsd",
        target_os = "netbsd",
        target_vendor = "apple",
        target_os = "freebsd",
        target_os = "dragonfly",
        target_os = "solaris",
        target_os = "illumos"
    )))]
    unsafe fn location() -> *mut libc::c_int {
        static mut SCRATCH: libc::c_int = 0;
        &raw mut SCRATCH
    }

    pub fn get() -> libc::c_int {
        // SAFETY: the thread's errno is always a valid location.
        unsafe { *location() }
    }

    pub fn set(value: libc::c_int) {
        // SAFETY: as above.
        unsafe { *location() = value };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    static EARLIER_RAN: AtomicBool = AtomicBool::new(false);

    extern "C" fn earlier(_: libc::c_int) {
        EARLIER_RAN.store(true, Ordering::SeqCst);
    }

    fn handler_of(sig: libc::c_int) -> usize {
        // SAFETY: reads the current action into a valid `sigaction`.
        unsafe {
            let mut current: libc::sigaction = std::mem::zeroed();
            assert_eq!(libc::sigaction(sig, std::ptr::null(), &mut current), 0);
            current.sa_sigaction
        }
    }

    fn install(sig: libc::c_int, handler: usize) {
        // SAFETY: installs a valid one-argument handler (or SIG_DFL) for `sig`.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler;
            libc::sigemptyset(&mut action.sa_mask);
            assert_eq!(libc::sigaction(sig, &action, std::ptr::null_mut()), 0);
        }
    }

    /// One test: SIGTERM's handler is process-wide.
    #[test]
    fn stop_signals_ring_pass_on_to_the_earlier_handler_and_are_given_back() {
        let earlier = earlier as PlainHandler as usize;
        install(libc::SIGTERM, earlier);
        let (mut bell, ringer) = super::super::bell().unwrap();
        let stop = stop_signals(&ringer).unwrap();
        assert_eq!(
            handler_of(libc::SIGTERM),
            on_stop_signal as SigInfoHandler as usize
        );
        // SAFETY: raising a signal whose handler is installed.
        assert_eq!(unsafe { libc::raise(libc::SIGTERM) }, 0);
        let rung = bell.wait(Some(Duration::from_secs(30)), None).unwrap();
        assert_eq!(rung, Some(STOP_BYTE));
        assert!(
            EARLIER_RAN.load(Ordering::SeqCst),
            "the earlier handler was not called"
        );
        drop(stop);
        assert_eq!(handler_of(libc::SIGTERM), earlier, "not given back");
        install(libc::SIGTERM, libc::SIG_DFL);

        // In the same test: the host's set takes SIGTERM too.
        #[cfg(feature = "host")]
        host_set(&mut bell, &ringer);
    }

    #[cfg(feature = "host")]
    fn host_set(bell: &mut crate::sys::Bell, ringer: &Ringer) {
        assert_eq!(last_host_signal(), None);
        let host = host_signals(ringer).unwrap();
        // SAFETY: raising a signal whose handler is installed.
        assert_eq!(unsafe { libc::raise(libc::SIGHUP) }, 0);
        let rung = bell.wait(Some(Duration::from_secs(30)), None).unwrap();
        assert_eq!((rung, last_host_signal()), (Some(STOP_BYTE), Some(2)));
        drop(host);
        assert_eq!(handler_of(libc::SIGHUP), libc::SIG_DFL, "not given back");
    }
}
