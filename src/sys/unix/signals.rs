//! SIGTERM and SIGINT while a plugin serves: one `sigaction(2)` of the crate's own, not
//! signal-hook's registry (a global map behind a lock: 8,896 bytes of every plugin). The
//! handler rings [`STOP_BYTE`] on the main thread's bell and then passes the signal on to
//! the handler the process had before (a `ctrlc` or `tokio::signal` handler installed
//! before `Plugin::run` still sees it), as signal-hook's chaining did. The default action
//! and "ignore" are not passed on: the runtime's orderly stop replaces them.

use std::ffi::c_void;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};

use super::Ringer;
use crate::sys::STOP_BYTE;

/// The descriptor the handler writes to (`-1`: none).
static STOP_FD: AtomicI32 = AtomicI32::new(-1);

/// The signals taken, in the order of [`PREVIOUS`].
const STOP_SIGNALS: [libc::c_int; 2] = [libc::SIGTERM, libc::SIGINT];

/// The handler each signal had before ours (`SIG_DFL`: none to pass on), and whether it
/// takes `SA_SIGINFO`'s three arguments.
static PREVIOUS: [AtomicUsize; 2] = [const { AtomicUsize::new(libc::SIG_DFL) }; 2];
static PREVIOUS_SIGINFO: [AtomicBool; 2] = [const { AtomicBool::new(false) }; 2];

type SigInfoHandler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void);
type PlainHandler = extern "C" fn(libc::c_int);

/// The handler: rings [`STOP_BYTE`], then calls the previous handler. Async-signal-safe:
/// atomic loads and `write(2)` to a non-blocking socket that is never closed, with `errno`
/// kept for the code it interrupted.
extern "C" fn on_stop_signal(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    let saved = errno::get();
    let fd = STOP_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        // SAFETY: writes one byte from a live array; a bad descriptor only fails.
        unsafe { libc::write(fd, [STOP_BYTE].as_ptr().cast(), 1) };
    }
    errno::set(saved);
    let i = usize::from(sig != STOP_SIGNALS[0]);
    let previous = PREVIOUS[i].load(Ordering::SeqCst);
    if previous == libc::SIG_DFL || previous == libc::SIG_IGN {
        return;
    }
    // SAFETY: `previous` is the handler `sigaction` reported for this signal, called with
    // the signature its flags declare, with the arguments the kernel gave us.
    unsafe {
        if PREVIOUS_SIGINFO[i].load(Ordering::SeqCst) {
            std::mem::transmute::<usize, SigInfoHandler>(previous)(sig, info, context);
        } else {
            std::mem::transmute::<usize, PlainHandler>(previous)(sig);
        }
    }
}

/// SIGTERM and SIGINT ring [`STOP_BYTE`] on a bell while this lives; dropping it gives
/// them back to the handlers they had (unless another handler replaced ours meanwhile:
/// that one stays).
pub(crate) struct StopSignals {
    old: [Option<libc::sigaction>; 2],
}

/// Rings `ringer` with [`STOP_BYTE`] on SIGTERM and SIGINT, until the result is dropped.
pub(crate) fn stop_signals(ringer: &Ringer) -> io::Result<StopSignals> {
    // The handler's descriptor stays open for the life of the process: a handler that
    // loaded it just before the signals are given back must never write to a reused one.
    let fd = std::os::fd::IntoRawFd::into_raw_fd(ringer.0.try_clone()?);
    STOP_FD.store(fd, Ordering::SeqCst);
    let mut stop = StopSignals { old: [None; 2] };
    for (i, sig) in STOP_SIGNALS.into_iter().enumerate() {
        // SAFETY: all-zero is a valid `sigaction`; the handler is async-signal-safe and has
        // the three-argument signature that SA_SIGINFO calls.
        unsafe {
            let mut previous: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut previous) != 0 {
                return Err(io::Error::last_os_error()); // `stop` restores what it took
            }
            // Set before ours is installed, so the handler never sees a stale one.
            PREVIOUS[i].store(previous.sa_sigaction, Ordering::SeqCst);
            PREVIOUS_SIGINFO[i].store(previous.sa_flags & libc::SA_SIGINFO != 0, Ordering::SeqCst);
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_stop_signal as SigInfoHandler as usize;
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
        for (old, sig) in self.old.iter().zip(STOP_SIGNALS) {
            let Some(old) = old else { continue };
            // SAFETY: reads the current action into a valid `sigaction`, and restores one
            // `sigaction` returned for this signal.
            unsafe {
                let mut current: libc::sigaction = std::mem::zeroed();
                let ours = on_stop_signal as SigInfoHandler as usize;
                if libc::sigaction(sig, std::ptr::null(), &mut current) == 0
                    && current.sa_sigaction == ours
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
    fn sigterm_rings_passes_on_to_the_earlier_handler_and_gives_it_back() {
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
    }
}
