//! The core of a supervised plugin, shared by the [`Host`](super::Host) handle and its
//! supervisor thread: the slot holding the live process and its state, and the launch of a
//! process with its handshake.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use crossbeam_channel::Sender;

use super::command::PluginCommand;
use super::dispatch::Dispatcher;
use super::exit::{Event, ExitNotify};
use super::options::HostOptions;
use super::process::PluginProcess;
use super::types::Handshake;
use crate::error::{Error, Result};
use crate::lock::lock;
use crate::manifest::Manifest;

/// Where a [`Host`](super::Host) stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostState {
    /// A process is serving (as far as the supervisor knows).
    Running,
    /// The process exited unexpectedly; a restart is pending or under way.
    Restarting {
        /// The attempt being made (1-based).
        attempt: u32,
        /// The attempt budget.
        of: u32,
    },
    /// The plugin is down for good (restarts disabled or exhausted); the text says why.
    Failed(String),
    /// [`Host::shutdown`](super::Host::shutdown) ran.
    Stopped,
}

/// A snapshot of a [`Host`](super::Host)'s supervision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostStatus {
    /// The current state.
    pub state: HostState,
    /// Successful restarts so far.
    pub restarts: u32,
    /// How the last process ended (exit status and stderr tail), if one did.
    pub last_exit: Option<String>,
    /// The pid of the serving process.
    pub pid: Option<u32>,
}

/// One live process with its handshake results.
pub(crate) struct Session {
    pub(crate) process: Arc<PluginProcess>,
    pub(crate) handshake: Handshake,
    pub(crate) manifest: Arc<Manifest>,
    pub(crate) generation: u64,
    pub(crate) started: Instant,
}

pub(crate) struct Slot {
    pub(crate) session: Option<Arc<Session>>,
    pub(crate) state: HostState,
    pub(crate) restarts: u32,
    /// Restart attempts spent since the last stable run.
    pub(crate) attempt: u32,
    pub(crate) last_exit: Option<String>,
    /// A process still in its handshake (first start or restart), kept here so that
    /// [`Host::shutdown`](super::Host::shutdown) can stop it instead of leaving it running untracked.
    pub(crate) launching: Option<Arc<PluginProcess>>,
    /// A process that ended its session (it exited, or closed its stdout and may still
    /// run) while the supervisor runs its shutdown sequence, kept here so that
    /// [`Host::shutdown`](super::Host::shutdown) waits for that sequence to end: the
    /// supervisor's thread does not outlive the program, and a process it was still
    /// stopping would be left running.
    pub(crate) retiring: Option<Arc<PluginProcess>>,
}

/// Everything the supervisor thread shares with the [`Host`](super::Host) handle.
pub(crate) struct Core {
    pub(crate) cmd: PluginCommand,
    pub(crate) opts: Arc<HostOptions>,
    pub(crate) label: String,
    pub(crate) dispatch: Dispatcher,
    pub(crate) slot: Mutex<Slot>,
    pub(crate) changed: Condvar,
    pub(super) events: Sender<Event>,
    pub(super) next_generation: AtomicU64,
}

impl Core {
    /// Spawns a process and runs `initialize` and `describe` (with the first-launch
    /// allowance only when `first` and [`HostOptions::first_launch`]). On failure the
    /// process is shut down and the error says why (with its exit status when it died).
    /// While the handshake runs the process sits in [`Slot::launching`], where
    /// [`Host::shutdown`](super::Host::shutdown) finds it.
    pub(crate) fn launch(&self, first: bool) -> Result<Arc<Session>> {
        let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
        let notify = ExitNotify {
            tx: self.events.clone(),
            generation,
        };
        let process = Arc::new(PluginProcess::spawn_with(
            &self.cmd,
            self.opts.clone(),
            self.dispatch.clone(),
            Some(notify),
        )?);
        {
            let mut slot = lock(&self.slot);
            if slot.state == HostState::Stopped {
                drop(slot);
                process.shutdown();
                return Err(Error::Disconnected(format!(
                    "plugin `{}` was shut down",
                    self.label
                )));
            }
            slot.launching = Some(process.clone());
        }
        let describe_timeout = if first {
            self.opts.effective_describe_timeout()
        } else {
            self.opts.describe_timeout
        };
        let handshake = (|| {
            let handshake = if self.opts.skip_initialize {
                process.skip_initialize()
            } else {
                process.initialize()?
            };
            let manifest = process.describe_within(describe_timeout)?;
            Ok::<_, Error>((handshake, manifest))
        })();
        match handshake {
            Ok((handshake, manifest)) => Ok(Arc::new(Session {
                process,
                handshake,
                manifest,
                generation,
                started: Instant::now(),
            })),
            Err(e) => {
                lock(&self.slot).launching = None;
                let report = process.shutdown();
                log::debug!("[plugin:{}] start failed ({e}); {report}", self.label);
                Err(e)
            }
        }
    }

    /// Installs a session and wakes [`Host::wait_ready`](super::Host::wait_ready) callers. Hands the session back
    /// when the host was stopped meanwhile.
    pub(crate) fn install(
        &self,
        session: Arc<Session>,
        restarted: bool,
    ) -> Result<(), Arc<Session>> {
        let mut slot = lock(&self.slot);
        // In the same step as the install, so that the process is always reachable.
        slot.launching = None;
        if slot.state == HostState::Stopped {
            return Err(session);
        }
        slot.session = Some(session);
        slot.state = HostState::Running;
        slot.restarts += u32::from(restarted);
        drop(slot);
        self.changed.notify_all();
        Ok(())
    }

    /// Moves to `state` unless the host was stopped; `false` when it was.
    pub(crate) fn set_state(&self, state: HostState) -> bool {
        let mut slot = lock(&self.slot);
        if slot.state == HostState::Stopped {
            return false;
        }
        slot.state = state;
        drop(slot);
        self.changed.notify_all();
        true
    }

    pub(super) fn session(&self) -> Result<Arc<Session>> {
        let slot = lock(&self.slot);
        match &slot.session {
            Some(s) => Ok(s.clone()),
            None => Err(Error::Disconnected(self.not_running(&slot))),
        }
    }

    pub(super) fn not_running(&self, slot: &Slot) -> String {
        let last = slot.last_exit.as_deref().unwrap_or("no exit recorded");
        match &slot.state {
            HostState::Restarting { attempt, of } => {
                format!(
                    "plugin `{}` is restarting (attempt {attempt} of {of}) after: {last}",
                    self.label
                )
            }
            HostState::Failed(why) => format!("plugin `{}` is down: {why}", self.label),
            HostState::Stopped => format!("plugin `{}` was shut down", self.label),
            HostState::Running => format!("plugin `{}` is not running: {last}", self.label),
        }
    }
}
