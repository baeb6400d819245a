//! The requests to stop that a host process gets from outside (a Ctrl-C, a `kill`, its
//! terminal closing), caught so that it can end the plugins it started before it exits:
//! a plugin leads a process group (on Windows: a console process group) of its own, so a
//! Ctrl-C at the host's terminal never reaches it, and a host that dies of a signal leaves
//! it running with parent 1.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::sys;

/// How a host process was asked to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interrupt {
    /// `SIGINT` (Windows: Ctrl-C).
    Interrupt,
    /// `SIGTERM` (Windows: Ctrl-Break).
    Terminate,
    /// `SIGHUP`: the terminal closed (Windows: the console closed, logoff or shutdown).
    HangUp,
}

impl Interrupt {
    /// The exit status a shell gives a process ended by this signal: 128 + its number
    /// (130, 143, 129), on Windows too.
    pub fn exit_code(self) -> u8 {
        match self {
            Interrupt::Interrupt => 130,
            Interrupt::Terminate => 143,
            Interrupt::HangUp => 129,
        }
    }

    /// The signal's name (`SIGINT`, `SIGTERM`, `SIGHUP`).
    pub fn name(self) -> &'static str {
        match self {
            Interrupt::Interrupt => "SIGINT",
            Interrupt::Terminate => "SIGTERM",
            Interrupt::HangUp => "SIGHUP",
        }
    }
}

/// Whether an [`Interrupts`] lives: the handlers are process-wide, so one at a time.
static CAUGHT: AtomicBool = AtomicBool::new(false);

/// `SIGINT`, `SIGTERM` and `SIGHUP` caught for a host process (on Windows: Ctrl-C,
/// Ctrl-Break and the console's close, logoff and shutdown events), from
/// [`Interrupts::catch`] until this is dropped; [`Interrupts::wait`] hands them over.
/// While caught they no longer end the process: its owner ends the plugins it started
/// (their shutdown sequence: [`Host::shutdown`](super::client::Host::shutdown)) and then exits,
/// with [`Interrupt::exit_code`] as a shell expects.
///
/// A handler the process had before is still called after ours, as the plugin runtime's
/// own stop signals do. On Windows a close event holds the process at most 10 s (Windows
/// ends it after 5 s whatever the handler does; the plugins' job objects then end them).
///
/// ```no_run
/// use executa::host::{Handlers, Host, HostOptions, Interrupts, PluginCommand};
/// let mut interrupts = Interrupts::catch()?;
/// let host = std::sync::Arc::new(Host::start(
///     PluginCommand::new("./my-plugin"),
///     HostOptions::default(),
///     Handlers::dev_backends(),
/// )?);
/// let watched = host.clone();
/// std::thread::spawn(move || {
///     if let Some(signal) = interrupts.wait() {
///         watched.shutdown();
///         std::process::exit(signal.exit_code().into());
///     }
/// });
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Interrupts {
    /// Given back first when this is dropped, while the bell still listens.
    signals: Option<sys::HostSignals>,
    bell: sys::Bell,
    _ringer: sys::Ringer,
}

impl Interrupts {
    /// Catches them from now on. Never blocks. Fails with
    /// [`io::ErrorKind::AlreadyExists`] while another `Interrupts` lives, and with the
    /// system's error when the handlers cannot be installed.
    pub fn catch() -> io::Result<Interrupts> {
        if CAUGHT.swap(true, Ordering::SeqCst) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "this process already catches its interrupts",
            ));
        }
        let caught = sys::bell().and_then(|(bell, ringer)| {
            let signals = sys::host_signals(&ringer)?;
            Ok(Interrupts {
                signals: Some(signals),
                bell,
                _ringer: ringer,
            })
        });
        if caught.is_err() {
            CAUGHT.store(false, Ordering::SeqCst);
        }
        caught
    }

    /// Blocks until an interrupt arrives and returns it. No bound: a host waits on this
    /// on a thread of its own for its whole life. `None` only if the wait itself fails
    /// (it cannot in practice: the bell is a socket pair, or a condition variable on
    /// Windows, that this owns).
    pub fn wait(&mut self) -> Option<Interrupt> {
        self.wait_timeout(None)
    }

    /// [`Interrupts::wait`], for at most `timeout` (`None`: no bound); `None` when the
    /// time ran out.
    pub fn wait_timeout(&mut self, timeout: Option<Duration>) -> Option<Interrupt> {
        match self.bell.wait(timeout, None) {
            Ok(Some(_)) => Some(match sys::last_host_signal() {
                Some(0) => Interrupt::Interrupt,
                Some(2) => Interrupt::HangUp,
                _ => Interrupt::Terminate,
            }),
            Ok(None) => None,
            Err(e) => {
                log::error!("executa: waiting for interrupts failed: {e}");
                None
            }
        }
    }
}

impl Drop for Interrupts {
    fn drop(&mut self) {
        // The handlers go before the bell, and a new `Interrupts` may be caught only
        // once they are gone (it would take ours for the process's own).
        drop(self.signals.take());
        CAUGHT.store(false, Ordering::SeqCst);
    }
}

impl std::fmt::Debug for Interrupts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interrupts").finish_non_exhaustive()
    }
}
