//! [`Host`]: a supervised plugin. Starts it with the full handshake, serves its calls from
//! any number of threads, restarts it after an unexpected exit, and shuts it down as the
//! Agent does.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::bounded;
use serde::Serialize;
use serde_json::value::RawValue;

use super::command::PluginCommand;
use super::context::InvokeOptions;
use super::core::{Core, HostState, HostStatus, Slot};
use super::dispatch::{Dispatcher, Handlers};
use super::exit::Event;
use super::options::HostOptions;
use super::supervisor;
use super::types::{Handshake, HealthReport, InvokeResult, ShutdownReport, StdoutNoise};
use crate::error::{Error, Result};
use crate::lock::lock;
use crate::manifest::Manifest;
use crate::threads::spawn as spawn_named;

/// Bound on queueing [`Event::Stop`] for a supervisor busy with a restart.
const STOP_SEND_WAIT: Duration = Duration::from_secs(1);

/// A supervised Executa plugin, driven the way the Agent drives it.
///
/// [`Host::start`] spawns the plugin, negotiates (`initialize`, with silent fallback to
/// 1.1) and reads its manifest (`describe`). Calls take `&self`, so one `Host` (shared by
/// reference or in an `Arc`) serves many threads with many invokes in flight. Reverse
/// calls go to the [`Handlers`] given at start, on worker threads (a quick service's, see
/// [`Service::is_quick`](super::Service::is_quick), on the reader thread).
///
/// When the process exits on its own, calls in flight fail at once with
/// [`Error::Disconnected`] naming the exit status and the last stderr lines; a supervisor
/// thread restarts it with exponential backoff ([`HostOptions::restart`]) and re-reads the
/// manifest. Calls made while no process is up fail at once the same way (use
/// [`Host::wait_ready`] to wait for a restart).
///
/// Dropping a `Host` runs [`Host::shutdown`], which blocks for at most the shutdown
/// sequence (15 s by default, only when the plugin ignores stdin EOF and `SIGTERM`).
///
/// ```no_run
/// use executa::host::{Handlers, Host, HostOptions, PluginCommand};
/// let cmd = PluginCommand::new("python3").arg("plugin.py");
/// let host = Host::start(cmd, HostOptions::default(), Handlers::dev_backends())?;
/// let result = host.invoke("echo", &serde_json::json!({"text": "hi"}))?;
/// println!("{} {}", result.success, result.data);
/// let report = host.shutdown();
/// # Ok::<(), executa::error::Error>(())
/// ```
pub struct Host {
    core: Arc<Core>,
    supervisor: Mutex<Option<JoinHandle<()>>>,
}

impl Host {
    /// Spawns the plugin, runs `initialize` (falling back silently to 1.1) and `describe`,
    /// and starts supervising it. Blocks for the handshake: at most the initialize and
    /// describe timeouts. Fails when the program cannot start, or dies or misbehaves before
    /// its manifest is read (the process is then shut down; it is not restarted).
    pub fn start(cmd: PluginCommand, opts: HostOptions, handlers: Handlers) -> Result<Host> {
        let label = opts.name.clone().unwrap_or_else(|| cmd.label());
        let dispatch = Dispatcher::start(handlers, &opts, &label)?;
        let (events, events_rx) = bounded(16);
        let core = Arc::new(Core {
            cmd,
            opts: Arc::new(opts),
            label: label.clone(),
            dispatch,
            slot: Mutex::new(Slot {
                session: None,
                state: HostState::Running,
                restarts: 0,
                attempt: 0,
                last_exit: None,
                launching: None,
                retiring: None,
            }),
            changed: Condvar::new(),
            events,
            next_generation: AtomicU64::new(1),
        });
        let session = core.launch(true)?;
        // Nobody else can have stopped a host that does not exist yet.
        let _ = core.install(session, false);
        let sup_core = core.clone();
        let handle = spawn_named(format!("executa-sup:{label}"), move || {
            supervisor::run(&sup_core, &events_rx)
        })?;
        Ok(Host {
            core,
            supervisor: Mutex::new(Some(handle)),
        })
    }

    /// The label used in logs and errors.
    pub fn label(&self) -> &str {
        &self.core.label
    }

    /// The manifest of the serving process (re-read after each restart).
    /// Fails with [`Error::Disconnected`] when no process is up.
    pub fn manifest(&self) -> Result<Arc<Manifest>> {
        Ok(self.core.session()?.manifest.clone())
    }

    /// The handshake outcome of the serving process.
    /// Fails with [`Error::Disconnected`] when no process is up.
    pub fn handshake(&self) -> Result<Handshake> {
        Ok(self.core.session()?.handshake.clone())
    }

    /// Calls a tool with default options. See [`Host::invoke_with`].
    pub fn invoke<A: Serialize + ?Sized>(&self, tool: &str, arguments: &A) -> Result<InvokeResult> {
        self.invoke_with(tool, arguments, &InvokeOptions::default())
    }

    /// Calls a tool with a fresh `context` (invoke id, credentials, `deadline_ms`, tokens).
    /// Blocks until the reply or the timeout (`opts.timeout`, else the manifest tool's
    /// `timeout`, else [`HostOptions::invoke_timeout`]). Errors: [`Error::Remote`] for an
    /// error frame, [`Error::Protocol`] for a result without `success`,
    /// [`Error::Timeout`], [`Error::FrameTooLarge`], [`Error::Disconnected`] when the
    /// process is down or dies meanwhile.
    pub fn invoke_with<A: Serialize + ?Sized>(
        &self,
        tool: &str,
        arguments: &A,
        opts: &InvokeOptions,
    ) -> Result<InvokeResult> {
        self.core.session()?.process.invoke(tool, arguments, opts)
    }

    /// Probes `health` (3 s by default); -32601 counts as healthy. Errors as for
    /// [`Host::invoke_with`].
    pub fn health(&self) -> Result<HealthReport> {
        self.core.session()?.process.health()
    }

    /// Sends any request and blocks until its raw result, an error frame, `timeout`
    /// (default [`HostOptions::request_timeout`]) or a disconnect.
    pub fn request<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
        timeout: Option<Duration>,
    ) -> Result<Box<RawValue>> {
        let timeout = timeout.unwrap_or(self.core.opts.request_timeout);
        self.core
            .session()?
            .process
            .request(method, params, timeout)
    }

    /// Sends a notification; blocks only while the write queue is full, at most
    /// [`HostOptions::request_timeout`].
    pub fn notify<P: Serialize + ?Sized>(&self, method: &str, params: &P) -> Result<()> {
        self.core
            .session()?
            .process
            .notify(method, params, self.core.opts.request_timeout)
    }

    /// Blocks until every progress event received so far has been handed to the progress
    /// callback (events are delivered on their own thread, so the reply to an invoke can
    /// overtake its last events), at most `timeout`; `false` on timeout.
    pub fn sync_progress(&self, timeout: Duration) -> bool {
        self.core.dispatch.sync_events(timeout)
    }

    /// Supervision state, restart count, last exit and pid. Never blocks for long.
    pub fn status(&self) -> HostStatus {
        let slot = lock(&self.core.slot);
        HostStatus {
            state: slot.state.clone(),
            restarts: slot.restarts,
            last_exit: slot.last_exit.clone(),
            pid: slot.session.as_ref().map(|s| s.process.pid()),
        }
    }

    /// Blocks until a process is serving (returns at once when one is), up to `timeout`.
    /// Fails with [`Error::Disconnected`] once the host has failed or stopped, and with
    /// [`Error::Timeout`] when time runs out first.
    pub fn wait_ready(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut slot = lock(&self.core.slot);
        loop {
            match (&slot.state, &slot.session) {
                (HostState::Running, Some(_)) => return Ok(()),
                (HostState::Failed(_) | HostState::Stopped, _) => {
                    return Err(Error::Disconnected(self.core.not_running(&slot)));
                }
                _ => {}
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout {
                    method: "wait_ready".to_owned(),
                    after: timeout,
                });
            }
            slot = match self.core.changed.wait_timeout(slot, left) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
    }

    /// The serving process's recent stderr lines (empty when none is up).
    pub fn stderr_tail(&self) -> Vec<String> {
        self.core
            .session()
            .map(|s| s.process.stderr_tail())
            .unwrap_or_default()
    }

    /// What the serving process wrote on stdout that was not a frame.
    pub fn stdout_noise(&self) -> StdoutNoise {
        self.core
            .session()
            .map(|s| s.process.stdout_noise())
            .unwrap_or_default()
    }

    /// Stops supervision and runs the Agent's shutdown sequence on the serving process,
    /// on the one being started by a restart, and on one that ended its session but may
    /// still run (it closed its stdout): close stdin, wait, `SIGTERM`, wait, `SIGKILL`, per
    /// [`HostOptions::shutdown`], then `SIGKILL` to what is left of its process group.
    /// Returns only once each of them has been reaped (or the sequence's last wait ran
    /// out), also when the supervisor was already stopping one: no process outlives the
    /// call. Returns how the serving (else the starting, else the ended) process ended, or
    /// `None` when there was none. Blocks for at most the shutdown sequence, run on each
    /// process in turn. Idempotent.
    pub fn shutdown(&self) -> Option<ShutdownReport> {
        let (session, launching, retiring) = {
            let mut slot = lock(&self.core.slot);
            slot.state = HostState::Stopped;
            (
                slot.session.take(),
                slot.launching.take(),
                slot.retiring.take(),
            )
        };
        self.core.changed.notify_all();
        // The supervisor also re-checks the state after every event and before every
        // launch, so a full queue only delays its exit; the bound keeps this call bounded.
        let _ = self.core.events.send_timeout(Event::Stop, STOP_SEND_WAIT);
        let serving = session.map(|s| s.process.shutdown());
        // Shutting the launching process down fails its handshake, so the supervisor
        // returns from `launch` at once, sees `Stopped`, and exits.
        let started = launching.map(|p| p.shutdown());
        // Runs the sequence, or waits for the supervisor's run of it to end (the process
        // holds its report's lock meanwhile).
        let ended = retiring.map(|p| p.shutdown());
        self.reap_supervisor();
        serving.or(started).or(ended)
    }

    /// Joins the supervisor if it has stopped within a moment; one busy with a restart
    /// handshake is left to notice [`HostState::Stopped`] and clean up by itself.
    fn reap_supervisor(&self) {
        let Some(handle) = lock(&self.supervisor).take() else {
            return;
        };
        let deadline = Instant::now() + Duration::from_millis(200);
        while !handle.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        if handle.is_finished() && handle.join().is_err() {
            log::error!(
                "[plugin:{}] the supervisor thread panicked",
                self.core.label
            );
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("label", &self.core.label)
            .field("status", &self.status())
            .finish()
    }
}
