//! The plugin processes this program has started, so that all of them can be ended at
//! once when it is interrupted ([`shutdown_all`]), and so that none starts after that.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread;
use std::time::Duration;

use super::shared::Shared;
use super::signal::Signal;
use crate::lock::lock;

/// The plugin processes of this program, for [`shutdown_all`]: those started and not yet
/// dropped (dead entries are swept at each registration, so it holds about as many as
/// live at once), how many are being started, and whether [`shutdown_all`] has run (then
/// no more are started).
struct Live {
    processes: Vec<Weak<Shared>>,
    starting: usize,
    closed: bool,
}

static LIVE: Mutex<Live> = Mutex::new(Live {
    processes: Vec::new(),
    starting: 0,
    closed: false,
});
static STARTED: Condvar = Condvar::new();

/// How long [`shutdown_all`] waits for processes being started to be registered: a spawn
/// takes milliseconds.
const START_WAIT: Duration = Duration::from_secs(5);

/// A process being started: counted from before its spawn until it is registered (or its
/// start fails), so that [`shutdown_all`] never misses one.
pub(super) struct Starting(());

impl Starting {
    /// Counts a start; fails once [`shutdown_all`] has run.
    pub(super) fn begin() -> crate::error::Result<Starting> {
        let mut live = lock(&LIVE);
        if live.closed {
            return Err(crate::error::Error::Io(io::Error::other(
                "this program is ending (its plugins were shut down): no plugin is started",
            )));
        }
        live.starting += 1;
        Ok(Starting(()))
    }

    /// Notes the process just spawned, for [`shutdown_all`].
    pub(super) fn register(self, shared: &Arc<Shared>) {
        let mut live = lock(&LIVE);
        live.processes.retain(|w| w.strong_count() > 0);
        live.processes.push(Arc::downgrade(shared));
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        lock(&LIVE).starting -= 1;
        STARTED.notify_all();
    }
}

/// Whether [`shutdown_all`] has run: a supervisor does not restart a plugin then.
pub(super) fn is_final() -> bool {
    lock(&LIVE).closed
}

/// Runs the Agent's shutdown sequence (each with its own
/// [`HostOptions::shutdown`](super::options::HostOptions::shutdown)) on every plugin
/// process this program started with [`PluginProcess`](super::process::PluginProcess), [`Host`](super::client::Host) or
/// [`check`](super::check) and has not shut down yet, all at once; returns how many
/// sequences it ran (one its owner runs meanwhile is waited for, not counted). For a host
/// ending on an interrupt ([`Interrupts`](super::interrupts::Interrupts)), from any
/// thread. Blocks for about one sequence (15 s by default, only for a plugin that ignores
/// stdin EOF and `SIGTERM`; [`kill_all`] cuts it short). A [`ProcessTree`](super::shutdown::ProcessTree) is not reached:
/// its owner holds the child.
///
/// Final: from the call on, this program starts no plugin process
/// ([`PluginProcess::spawn`](super::process::PluginProcess::spawn) and [`Host::start`](super::client::Host::start) fail with
/// [`Error::Io`](crate::error::Error::Io), and a `Host` does not restart its plugin).
pub fn shutdown_all() -> usize {
    let live: Vec<Arc<Shared>> = {
        let mut live = lock(&LIVE);
        live.closed = true;
        live = STARTED
            .wait_timeout_while(live, START_WAIT, |l| l.starting > 0)
            .unwrap_or_else(|e| e.into_inner())
            .0;
        if live.starting > 0 {
            log::warn!("a plugin being started was not registered in time: not shut down");
        }
        live.processes.iter().filter_map(Weak::upgrade).collect()
    };
    let ran = AtomicUsize::new(0);
    let end = |s: &Shared| {
        if s.shut_down(&s.opts.shutdown.clone()).1 {
            ran.fetch_add(1, Ordering::Relaxed);
        }
    };
    thread::scope(|scope| {
        for s in &live {
            // No thread to spare: this one runs it, one sequence after another.
            if let Err(e) = thread::Builder::new().spawn_scoped(scope, || end(s)) {
                log::debug!("no thread for a shutdown sequence ({e}); running it here");
                end(s);
            }
        }
    });
    ran.into_inner()
}

/// `SIGKILL` now to every plugin process this program started that is still running, and
/// to its process group (its job object on Windows): for a second interrupt while
/// [`shutdown_all`] waits out a plugin's grace periods. A shutdown sequence under way then
/// ends at once. Returns how many were signalled. Blocks only for a lock per process; a
/// process already reaped is left alone (its pid may be another's by now).
pub fn kill_all() -> usize {
    let live: Vec<Arc<Shared>> = lock(&LIVE)
        .processes
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    live.iter()
        .filter(|s| s.try_status().is_none() && s.signal(Signal::Kill))
        .count()
}
