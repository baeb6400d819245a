//! The Agent's shutdown sequence for one plugin process: close stdin, wait, `SIGTERM`,
//! wait, `SIGKILL`, then reap and join its threads (on Windows: Ctrl-Break, then the job
//! object terminated; see `signal.rs`).

use std::io;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use super::options::ShutdownPolicy;
use super::process::PluginProcess;
use super::shared::{self, CLOSE_WAIT, Shared, THREAD_JOIN_WAIT};
use super::signal::{self, Signal};
use super::types::{ExitStage, ShutdownReport};
use super::{dispatch, reader, writer};
use crate::lock::lock;
use crate::sys;

impl PluginProcess {
    /// Runs the Agent's shutdown sequence with [`HostOptions::shutdown`](super::HostOptions::shutdown): close stdin, wait,
    /// `SIGTERM`, wait, `SIGKILL`. See [`PluginProcess::shutdown_with`].
    pub fn shutdown(&self) -> ShutdownReport {
        let policy = self.shared.opts.shutdown.clone();
        self.shutdown_with(&policy)
    }

    /// Closes stdin, waits up to `stdin_grace`; sends `SIGTERM`, waits up to `term_grace`;
    /// sends `SIGKILL`, waits up to `kill_wait`. The signals go to the plugin's whole
    /// process group, and whatever is left of the group once the plugin has ended gets
    /// `SIGKILL`. Returns which step ended the process and its exit status. Calls still pending fail with [`Error::Disconnected`](crate::error::Error::Disconnected). Idempotent:
    /// a second call returns the first report without blocking.
    pub fn shutdown_with(&self, policy: &ShutdownPolicy) -> ShutdownReport {
        let (report, first) = self.shared.shut_down(policy);
        if first {
            self.join_threads(THREAD_JOIN_WAIT);
        }
        report
    }
}

impl Shared {
    /// The sequence of [`PluginProcess::shutdown_with`] without the joining of the I/O
    /// threads (which the `PluginProcess` owns); whether this call ran it. A call while
    /// another runs it waits for that one's report.
    pub(super) fn shut_down(&self, policy: &ShutdownPolicy) -> (ShutdownReport, bool) {
        let mut report = lock(&self.report);
        if let Some(r) = *report {
            return (r, false);
        }
        // The shutdown sequence owns the child from here: stop the watcher.
        drop(lock(&self.stop_watch).take());
        let r = self.run_shutdown(policy);
        // Nothing the plugin started in its process group outlives it: a helper that
        // ignored SIGTERM, or survived a crash, would stay orphaned holding its pipes.
        if let Err(e) = signal::kill_group_remnants(&self.tree) {
            log::debug!("[plugin:{}] group cleanup failed: {e}", self.label);
        }
        self.pending
            .close(&format!("plugin `{}` was shut down", self.label));
        report_suppressed();
        *report = Some(r);
        (r, true)
    }

    fn run_shutdown(&self, policy: &ShutdownPolicy) -> ShutdownReport {
        let s = self;
        let start = Instant::now();
        s.closing.store(true, Ordering::Release);
        let done = |stage, status| ShutdownReport {
            stage,
            status,
            elapsed: start.elapsed(),
        };
        if let Some(status) = s.try_status() {
            // Tell the writer to stop too, so the I/O threads can be joined at once.
            let _ = s.out.close(CLOSE_WAIT);
            return done(ExitStage::AlreadyExited, Some(status));
        }
        // A writer stuck on a full pipe takes `Close` only once the plugin reads again.
        let _ = s.out.close(policy.stdin_grace);
        if let Some(status) = s.wait_status(policy.stdin_grace.saturating_sub(start.elapsed())) {
            return done(ExitStage::StdinClosed, Some(status));
        }
        log::debug!(
            "[plugin:{}] still running {:?} after stdin closed: SIGTERM",
            s.label,
            policy.stdin_grace
        );
        // Without a polite stop to wait for (on Windows a Ctrl-Break needs a console the
        // host shares with the plugin), straight on to the kill.
        if s.signal(Signal::Term) {
            if let Some(status) = s.wait_status(policy.term_grace) {
                return done(ExitStage::Terminated, Some(status));
            }
            log::debug!(
                "[plugin:{}] ignored SIGTERM for {:?}: SIGKILL",
                s.label,
                policy.term_grace
            );
        }
        s.signal(Signal::Kill);
        done(ExitStage::Killed, s.wait_status(policy.kill_wait))
    }
}

impl PluginProcess {
    /// Joins the I/O threads that have finished within `timeout`; the others are left
    /// detached (a reader blocked on a pipe some grandchild still holds cannot be woken).
    fn join_threads(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut threads = std::mem::take(&mut *lock(&self.threads));
        while !threads.is_empty() && Instant::now() < deadline {
            let (done, running): (Vec<_>, Vec<_>) =
                threads.into_iter().partition(|h| h.is_finished());
            for h in done {
                if h.join().is_err() {
                    log::error!("[plugin:{}] an I/O thread panicked", self.shared.label);
                }
            }
            threads = running;
            if !threads.is_empty() {
                thread::sleep(Duration::from_millis(2));
            }
        }
    }
}

/// A child process and whatever it starts, held as one tree so that none of it outlives
/// the child, for a tool that drives a plugin's pipes itself (as `executa bench` does):
/// on Unix the child leads a process group of its own; on Windows it leads a console
/// process group of its own and runs in a job object that kills what is left in it when
/// this is dropped (`JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE`). [`ProcessTree::shutdown`] runs
/// the Agent's shutdown sequence on it.
#[derive(Debug)]
pub struct ProcessTree(sys::ProcessTree);

impl ProcessTree {
    /// Spawns `cmd` as the root of a tree of its own. On Windows the child is assigned to
    /// the job object right after it starts: a process it starts in that first moment,
    /// before the assignment, is outside the job (std cannot start a child suspended).
    ///
    /// Keep the tree as long as the child should live: on Windows dropping it closes the
    /// job, which kills every process in it at once (`let (child, _) = ...` kills the
    /// child on the spot). On Unix dropping it does nothing.
    pub fn spawn(cmd: &mut Command) -> io::Result<(Child, ProcessTree)> {
        sys::ProcessTree::prepare(cmd);
        let child = cmd.spawn()?;
        let tree = sys::ProcessTree::adopt(&child);
        Ok((child, ProcessTree(tree)))
    }

    /// Runs the Agent's shutdown sequence on `child`, the root of this tree: close its
    /// stdin first; then this waits up to `stdin_grace` for it to exit, sends `SIGTERM`
    /// (Windows: Ctrl-Break, which fails without a console the host shares with it, and
    /// then the sequence goes straight on), waits up to `term_grace`, sends `SIGKILL`
    /// (Windows: terminates the job), waits up to `kill_wait`, and finally kills whatever is
    /// left of the tree (helpers that ignored the polite stop or outlived it). Returns once
    /// it has been reaped (or the last wait ran out), with the step that ended it.
    pub fn shutdown(&self, child: &mut Child, policy: &ShutdownPolicy) -> ShutdownReport {
        shutdown_tree(child, &self.0, policy)
    }

    /// Kills what is left of the tree once its root has exited (and been reaped): helpers
    /// it started in the background. Never blocks; a failure is logged.
    pub(crate) fn kill_remnants(&self) {
        if let Err(e) = signal::kill_group_remnants(&self.0) {
            log::debug!("killing what is left of a process tree failed: {e}");
        }
    }
}

/// Runs the Agent's shutdown sequence on a plugin process started without
/// [`PluginProcess`] (a tool that drives the pipes itself). Close its stdin first; then
/// this waits up to `stdin_grace` for it to exit, sends `SIGTERM`, waits up to
/// `term_grace`, sends `SIGKILL`, waits up to `kill_wait`, and finally sends `SIGKILL` to
/// whatever is left of its process group (helpers that ignored `SIGTERM` or outlived it).
/// The signals go to its process group, so start it as the leader of one
/// ([`CommandExt::process_group(0)`](std::os::unix::process::CommandExt::process_group));
/// one that is not gets them alone. On Windows there is no polite stop for a child
/// started elsewhere, and only the child itself is killed: start it with
/// [`ProcessTree::spawn`] to reach its whole tree. Returns once it has been reaped (or the
/// last wait ran out), with the step that ended it.
pub fn shutdown_child(child: &mut Child, policy: &ShutdownPolicy) -> ShutdownReport {
    shutdown_tree(child, &sys::ProcessTree::adopt_foreign(child), policy)
}

fn shutdown_tree(
    child: &mut Child,
    tree: &sys::ProcessTree,
    policy: &ShutdownPolicy,
) -> ShutdownReport {
    let start = Instant::now();
    let done = |stage, status| ShutdownReport {
        stage,
        status,
        elapsed: start.elapsed(),
    };
    let report = if let Ok(Some(status)) = child.try_wait() {
        done(ExitStage::AlreadyExited, Some(status))
    } else if let Some(status) = wait_child(child, policy.stdin_grace) {
        done(ExitStage::StdinClosed, Some(status))
    } else {
        // Still unreaped here (`wait_child` said so), so the pid and its group are its.
        // Without a polite stop to wait for, straight on to the kill.
        let polite = signal::send(tree, Signal::Term).is_ok();
        match polite
            .then(|| wait_child(child, policy.term_grace))
            .flatten()
        {
            Some(status) => done(ExitStage::Terminated, Some(status)),
            None => {
                if signal::send(tree, Signal::Kill).is_err() {
                    let _ = child.kill();
                }
                done(ExitStage::Killed, wait_child(child, policy.kill_wait))
            }
        }
    };
    if report.status.is_some() {
        let _ = signal::kill_group_remnants(tree);
    }
    report
}

/// Polls for the child's exit until `timeout`.
fn wait_child(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    shared::poll_until(timeout, || child.try_wait().ok().flatten())
}

/// Logs how many lines the host's log limits left out so far (`crate::log_limit`): a
/// plugin's flood often ends with its process, and no later window would report them.
fn report_suppressed() {
    for limit in [
        &reader::DROPPED_NOTIFICATION,
        &reader::NULL_REPLY,
        &reader::UNKNOWN_REPLY,
        &reader::OVERSIZED,
        &shared::ANSWER_DROPPED,
        &shared::ERROR_ANSWER_DROPPED,
        &dispatch::QUICK_ANSWER_DROPPED,
        &dispatch::PROGRESS_DROPPED,
        &dispatch::PROGRESS_PANICKED,
        &writer::PARTIAL,
    ] {
        limit.flush();
    }
}

impl Drop for PluginProcess {
    fn drop(&mut self) {
        self.shutdown();
    }
}
