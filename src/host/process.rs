//! One plugin process without supervision: spawn, three I/O threads and an exit watcher.
//! Its lifecycle calls are in `calls.rs` and the Agent's shutdown sequence in
//! `shutdown.rs`. [`crate::host::Host`] wraps this with restarts; `executa check` drives it
//! directly to watch a plugin misbehave.

use std::io;
use std::process::ExitStatus;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::bounded;

use super::command::PluginCommand;
use super::dispatch::{Dispatcher, Handlers};
use super::exit::ExitNotify;
use super::options::HostOptions;
use super::reader;
use super::shared::{Shared, watch};
use super::stderr::{self, StderrTail};
use super::types::StdoutNoise;
use super::writer;
use crate::error::{Error, Result};
use crate::lock::lock;
use crate::sys::ProcessTree;
use crate::threads::spawn as spawn_named;

/// A running plugin process, driven the way the Agent drives it, without restarts.
///
/// Every method takes `&self` and may be called from several threads at once; many
/// requests can be in flight. Each blocking call has a timeout. When the process goes
/// away, calls in flight fail at once with [`Error::Disconnected`] naming the exit status
/// and the last stderr lines, and later calls fail the same way without blocking.
///
/// Dropping it runs [`PluginProcess::shutdown`] if that has not happened yet (which can
/// block for the whole shutdown sequence, 15 s by default, on a plugin that ignores it).
pub struct PluginProcess {
    pub(super) shared: Arc<Shared>,
    pub(super) dispatch: Dispatcher,
    pub(super) threads: Mutex<Vec<JoinHandle<()>>>,
}

impl PluginProcess {
    /// Starts the plugin with piped stdio and its three I/O threads and exit watcher, with `handlers`
    /// answering its reverse calls. Sends nothing: call [`PluginProcess::initialize`] and
    /// [`PluginProcess::describe`] next. Fails with [`Error::Io`] when the program cannot
    /// be started.
    pub fn spawn(
        cmd: &PluginCommand,
        opts: HostOptions,
        handlers: Handlers,
    ) -> Result<PluginProcess> {
        let label = opts.name.clone().unwrap_or_else(|| cmd.label());
        let dispatch = Dispatcher::start(handlers, &opts, &label)?;
        Self::spawn_with(cmd, Arc::new(opts), dispatch, None)
    }

    pub(crate) fn spawn_with(
        cmd: &PluginCommand,
        opts: Arc<HostOptions>,
        dispatch: Dispatcher,
        exit_notify: Option<ExitNotify>,
    ) -> Result<PluginProcess> {
        let label = opts.name.clone().unwrap_or_else(|| cmd.label());
        // Counted from before the spawn, so that `shutdown_all` never misses it.
        let starting = super::live::Starting::begin()?;
        let mut child = cmd.to_command().spawn().map_err(|e| {
            Error::Io(io::Error::new(
                e.kind(),
                format!("cannot start plugin `{cmd}`: {e}"),
            ))
        })?;
        // At once, before anything else: on Windows this assigns the child to a job object,
        // and a helper it starts before that is outside the job (see `ProcessTree::adopt`).
        let tree = ProcessTree::adopt(&child);
        let pipes = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let (Some(stdin), Some(stdout), Some(stderr_pipe)) = pipes else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::Io(io::Error::other("plugin stdio was not piped")));
        };
        let (stdin, writer_end) = writer::open(stdin, opts.write_queue, &label);
        let tail = Arc::new(StderrTail::new(opts.stderr_tail_lines));
        let (stop_tx, stop_rx) = bounded::<()>(1);
        let shared = Arc::new(Shared::new(
            label.clone(),
            (child, tree),
            stdin,
            opts,
            tail.clone(),
            exit_notify,
            stop_tx,
        ));
        starting.register(&shared);
        let process = PluginProcess {
            shared: shared.clone(),
            dispatch: dispatch.clone(),
            threads: Mutex::new(Vec::new()),
        };
        let relay = shared.opts.stderr;
        let writer_spin = crate::spin::effective(shared.opts.spin);
        let (l1, l2) = (label.clone(), label.clone());
        let watched = shared.clone();
        let started = [
            spawn_named(format!("executa-wait:{label}"), move || {
                watch(&watched, &stop_rx)
            }),
            spawn_named(format!("executa-wr:{label}"), move || {
                writer::run(writer_end, &l1, writer_spin)
            }),
            spawn_named(format!("executa-err:{label}"), move || {
                stderr::run(stderr_pipe, &tail, &l2, relay)
            }),
            spawn_named(format!("executa-rd:{label}"), move || {
                reader::run(stdout, shared, dispatch)
            }),
        ];
        for handle in started {
            match handle {
                Ok(h) => lock(&process.threads).push(h),
                Err(e) => {
                    // Dropping `process` runs the shutdown sequence on the half-started child.
                    return Err(Error::Io(e));
                }
            }
        }
        Ok(process)
    }

    /// The label used in logs and errors.
    pub fn label(&self) -> &str {
        &self.shared.label
    }

    /// The operating-system process id.
    pub fn pid(&self) -> u32 {
        self.shared.pid
    }
}

impl PluginProcess {
    /// The exit status if the process has exited (reaping it); never blocks.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.shared.try_status()
    }

    /// Whether the process is still running.
    pub fn is_running(&self) -> bool {
        self.shared.try_status().is_none()
    }

    /// Blocks up to `timeout` for the process to exit; its status, or `None` if it is still
    /// running.
    pub fn wait_exit(&self, timeout: Duration) -> Option<ExitStatus> {
        self.shared.wait_status(timeout)
    }

    /// Why calls now fail (exit status and stderr tail), once the process is gone.
    pub fn disconnect_reason(&self) -> Option<String> {
        self.shared.pending.closed_reason()
    }

    /// The most recent stderr lines (at most [`HostOptions::stderr_tail_lines`]).
    pub fn stderr_tail(&self) -> Vec<String> {
        self.shared.stderr.snapshot()
    }

    /// What the plugin wrote on stdout that was not a frame (it was skipped).
    pub fn stdout_noise(&self) -> StdoutNoise {
        lock(&self.shared.noise).clone()
    }

    /// Blocks until every progress event received so far has been handed to the progress
    /// callback (they are delivered on their own thread, so an invoke's reply can overtake
    /// its last events), at most `timeout`; `false` on timeout.
    pub fn sync_progress(&self, timeout: Duration) -> bool {
        self.dispatch.sync_events(timeout)
    }

    /// How many reverse calls the plugin has made.
    pub fn reverse_calls(&self) -> u64 {
        self.shared.reverse_calls.load(Ordering::Relaxed)
    }

    /// The first few reverse calls refused before reaching a handler (a capability missing
    /// from the manifest, a 1.1 session, an unknown or missing invoke id), with the reason.
    pub fn refused_reverse_calls(&self) -> Vec<String> {
        lock(&self.shared.refusals).clone()
    }

    /// How many responses the plugin has sent.
    pub fn replies_received(&self) -> u64 {
        self.shared.replies.load(Ordering::Relaxed)
    }

    /// Calls waiting for an answer right now.
    pub fn pending_calls(&self) -> usize {
        self.shared.pending.len()
    }

    /// How long ago the process was started.
    pub fn uptime(&self) -> Duration {
        self.shared.started.elapsed()
    }
}

impl std::fmt::Debug for PluginProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginProcess")
            .field("label", &self.shared.label)
            .field("pid", &self.shared.pid)
            .field("pending", &self.shared.pending.len())
            .finish()
    }
}
