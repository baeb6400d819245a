//! The state one plugin process shares between the caller-facing handle, its I/O threads
//! and its exit watcher: the pending calls, the output queue, the child, what was
//! negotiated, and how the end of the process is noticed and reported.

use std::collections::HashMap;
use std::io;
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use serde::Serialize;
use serde_json::value::RawValue;

use super::exit::{End, Event, ExitNotify};
use super::options::{HostOptions, Protocol};
use super::pending::Pending;
use super::signal::{self, Signal};
use super::stderr::StderrTail;
use super::types::{Handshake, ShutdownReport, StdoutNoise, snippet};
use super::writer::PluginStdin;
use crate::error::{Error, Result, RpcError};
use crate::id::Id;
use crate::lock::lock;
use crate::log_limit::NamedLimit;
use crate::manifest::Manifest;
use crate::protocol::ProtocolVersion;
use crate::spin::ReplyPoller;
use crate::sys::ProcessTree;
use crate::wire;
use crate::writer::SendFailure;

/// How long the reader waits, after stdout closes, for the exit status and the last stderr
/// lines, so that the error failing pending calls can name them. A process normally exits
/// within microseconds of closing stdout; this bound only matters when it does not.
pub(super) const EXIT_NOTICE_WAIT: Duration = Duration::from_millis(1000);
pub(super) const STDERR_NOTICE_WAIT: Duration = Duration::from_millis(300);
/// Bound on handing a reverse-call answer to the writer.
pub(super) const REPLY_SEND_WAIT: Duration = Duration::from_secs(5);
/// Bound on waiting for the I/O threads after the process is gone.
pub(super) const THREAD_JOIN_WAIT: Duration = Duration::from_millis(500);
/// Most stdout noise samples kept.
pub(super) const NOISE_SAMPLES: usize = 8;
/// How often the watcher thread polls for the child's exit. std has no timed or
/// non-reaping wait, and the shutdown sequence must keep signalling and reaping the same
/// `Child`, so the watcher polls `try_wait` under the child's lock instead of blocking in
/// `wait()`. This bounds how late a crash is noticed when the plugin's stdout stays open.
pub(super) const WATCH_INTERVAL: Duration = Duration::from_millis(50);
/// After the child exits, how long the watcher leaves the reader to reach stdout's end of
/// file (and so settle replies still in the pipe) before concluding that another process
/// (a helper the plugin started) holds stdout open, and reporting the exit itself.
pub(super) const STDOUT_EOF_WAIT: Duration = Duration::from_millis(300);
/// Bound on handing `Close` to the writer when the process is already gone: the writer is
/// then idle or about to fail on the broken pipe, so this only matters when some helper
/// holds stdin open and stopped reading.
pub(super) const CLOSE_WAIT: Duration = Duration::from_millis(100);
/// Answers the plugin decides how many of: their lines are limited (`crate::log_limit`).
pub(super) static ANSWER_DROPPED: NamedLimit = NamedLimit::new("reverse-call answer dropped");
pub(super) static ERROR_ANSWER_DROPPED: NamedLimit = NamedLimit::new("error answer dropped");

/// The id of `initialize`: the Agent sends it with id 0, so a plugin that mistakes a
/// falsy id for a notification shows up here as it would in production.
pub(super) const INITIALIZE_ID: u64 = 0;

/// The child and its exit status once reaped.
pub(super) struct ChildSlot {
    pub(super) child: Child,
    pub(super) status: Option<ExitStatus>,
}

/// State shared by the caller-facing handle and the I/O threads and the exit watcher.
pub(crate) struct Shared {
    pub(crate) label: String,
    pub(crate) pid: u32,
    /// What the plugin started, held so that none of it outlives the plugin (its process
    /// group on Unix, its job object on Windows, closed with this state).
    pub(super) tree: ProcessTree,
    pub(crate) opts: Arc<HostOptions>,
    pub(super) next_id: AtomicU64,
    pub(crate) pending: Pending,
    /// How callers wait for their replies: polling first only while replies come quickly.
    reply_wait: ReplyPoller,
    pub(super) out: PluginStdin,
    pub(super) child: Mutex<ChildSlot>,
    pub(crate) stderr: Arc<StderrTail>,
    pub(super) noise: Mutex<StdoutNoise>,
    pub(super) closing: AtomicBool,
    pub(super) replies: AtomicU64,
    pub(super) reverse_calls: AtomicU64,
    /// Reverse calls refused by the gates or the invoke routing (the first few).
    pub(super) refusals: Mutex<Vec<String>>,
    pub(super) negotiated: Mutex<Option<Handshake>>,
    pub(super) manifest: Mutex<Option<Arc<Manifest>>>,
    /// Invoke ids currently in flight, for routing reverse calls, with the budgets each
    /// has spent.
    pub(crate) invokes: Mutex<HashMap<String, InvokeUsage>>,
    pub(super) exit_notify: Option<ExitNotify>,
    pub(super) started: Instant,
    /// Set once the end of the process has been reported (by the reader or the watcher).
    pub(super) ended: AtomicBool,
    /// Set when the reader reaches the end of stdout.
    pub(super) stdout_closed: AtomicBool,
    /// How the shutdown sequence ended, once it has run; held while it runs.
    pub(super) report: Mutex<Option<ShutdownReport>>,
    /// Dropped when the shutdown sequence starts, which stops the watcher thread.
    pub(super) stop_watch: Mutex<Option<Sender<()>>>,
    /// Set once `initialize` has used [`INITIALIZE_ID`].
    pub(super) initialize_sent: AtomicBool,
    /// Whether the child is an MCP server: set from [`Protocol::Mcp`] at spawn, or when
    /// [`Protocol::Auto`] detects one. Decides the request shapes and how the reader's
    /// reverse requests and notifications are read.
    mcp: AtomicBool,
}

/// What one invoke in flight has spent of the budgets the Agent enforces per invoke.
#[derive(Debug, Default)]
pub(crate) struct InvokeUsage {
    /// The host's calls in flight with this invoke id (a caller may reuse one).
    pub(crate) calls: u32,
    /// `storage/*` and `files/*` calls served.
    pub(crate) storage_calls: u64,
}

impl Shared {
    /// The state of a process just spawned.
    pub(super) fn new(
        label: String,
        (child, tree): (Child, ProcessTree),
        out: PluginStdin,
        opts: Arc<HostOptions>,
        stderr: Arc<StderrTail>,
        exit_notify: Option<ExitNotify>,
        stop_watch: Sender<()>,
    ) -> Shared {
        Shared {
            report: Mutex::new(None),
            stop_watch: Mutex::new(Some(stop_watch)),
            label,
            pid: child.id(),
            tree,
            next_id: AtomicU64::new(1),
            pending: Pending::new(),
            reply_wait: ReplyPoller::new(crate::spin::effective(opts.spin)),
            out,
            child: Mutex::new(ChildSlot {
                child,
                status: None,
            }),
            stderr,
            noise: Mutex::new(StdoutNoise::default()),
            closing: AtomicBool::new(false),
            replies: AtomicU64::new(0),
            reverse_calls: AtomicU64::new(0),
            refusals: Mutex::new(Vec::new()),
            negotiated: Mutex::new(None),
            manifest: Mutex::new(None),
            invokes: Mutex::new(HashMap::new()),
            exit_notify,
            started: Instant::now(),
            ended: AtomicBool::new(false),
            stdout_closed: AtomicBool::new(false),
            initialize_sent: AtomicBool::new(false),
            mcp: AtomicBool::new(opts.protocol == Protocol::Mcp),
            opts,
        }
    }

    /// Sends a request and blocks until its reply, the timeout, or the process's end.
    pub(crate) fn request<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: Option<&P>,
        timeout: Duration,
    ) -> Result<Box<RawValue>> {
        self.request_as(self.fresh_id(), method, params, timeout)
    }

    /// A request id nobody has used (for a second `initialize`).
    pub(super) fn fresh_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// [`Shared::request`] under a chosen id (the caller keeps ids unique).
    pub(super) fn request_as<P: Serialize + ?Sized>(
        &self,
        id: u64,
        method: &str,
        params: Option<&P>,
        timeout: Duration,
    ) -> Result<Box<RawValue>> {
        let deadline = Instant::now() + timeout;
        self.refuse_if_closing()?;
        let id_json = Id::number(id);
        let mut frame = Vec::with_capacity(128);
        match params {
            // Serialized before registering: arguments that cannot be serialized are the
            // caller's error, never a request sent with `params: null`.
            Some(p) => write_request_checked(&mut frame, &id_json, method, p)?,
            None => write_bare_request(&mut frame, &id_json, method),
        }
        let rx = self.pending.register(id)?;
        if let Err(e) = self.send_frame(frame, deadline, method, timeout) {
            self.pending.cancel(id);
            return Err(e);
        }
        let sent = Instant::now();
        let left = deadline.saturating_duration_since(sent);
        match self.reply_wait.recv_timeout(&rx, sent, left) {
            Ok(reply) => reply,
            Err(RecvTimeoutError::Timeout) => {
                self.pending.cancel(id);
                // The reply may have landed between the timeout and the cancel.
                match rx.try_recv() {
                    Ok(reply) => reply,
                    Err(_) => Err(Error::Timeout {
                        method: method.to_owned(),
                        after: timeout,
                    }),
                }
            }
            Err(RecvTimeoutError::Disconnected) => Err(self.gone()),
        }
    }

    pub(super) fn refuse_if_closing(&self) -> Result<()> {
        if self.closing.load(Ordering::Acquire) {
            let why = self.pending.closed_reason();
            return Err(Error::Disconnected(why.unwrap_or_else(|| {
                format!("plugin `{}` is shutting down", self.label)
            })));
        }
        Ok(())
    }

    /// Sends a frame (straight into the pipe when nothing is queued, else through the
    /// writer's queue), waiting (until `deadline`) while the queue is full, which happens
    /// only when the plugin stops reading its stdin.
    pub(super) fn send_frame(
        &self,
        frame: Vec<u8>,
        deadline: Instant,
        method: &str,
        timeout: Duration,
    ) -> Result<()> {
        if frame.len() > self.opts.max_frame_bytes {
            return Err(Error::FrameTooLarge {
                size: frame.len(),
                max: self.opts.max_frame_bytes,
            });
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match self.out.send_timeout(frame, left) {
            Ok(()) => Ok(()),
            Err(SendFailure::Timeout) => Err(Error::Timeout {
                method: method.to_owned(),
                after: timeout,
            }),
            Err(SendFailure::Closed) => Err(self.gone()),
        }
    }

    /// Sends an answer to a reverse call, from a worker thread (as [`Shared::send_frame`],
    /// waiting at most `REPLY_SEND_WAIT` for room in the queue).
    pub(crate) fn send_reply(&self, frame: Vec<u8>) {
        if let Err(e) = self.out.send_timeout(frame, REPLY_SEND_WAIT)
            && ANSWER_DROPPED.allow()
        {
            let why = match e {
                SendFailure::Timeout => "the plugin is not reading its stdin",
                SendFailure::Closed => "its stdin is closed",
            };
            log::warn!("[plugin:{}] reverse-call answer dropped: {why}", self.label);
        }
    }

    /// Sends a frame from the reader thread, which must never wait for the plugin: straight
    /// into the pipe when it has room and nothing is queued, else queued; dropped (and
    /// logged) when the queue is full.
    pub(crate) fn try_send(&self, frame: Vec<u8>) {
        if self.out.try_send(frame).is_err() && ERROR_ANSWER_DROPPED.allow() {
            log::warn!(
                "[plugin:{}] write queue full or closed: an error answer was dropped",
                self.label
            );
        }
    }

    /// The error for a call that finds the process gone.
    pub(super) fn gone(&self) -> Error {
        Error::Disconnected(
            self.pending
                .closed_reason()
                .unwrap_or_else(|| format!("plugin `{}`: its stdin is closed", self.label)),
        )
    }

    /// The exit status, reaping the child if it has exited; never blocks.
    pub(crate) fn try_status(&self) -> Option<ExitStatus> {
        let mut slot = lock(&self.child);
        if slot.status.is_none()
            && let Ok(Some(status)) = slot.child.try_wait()
        {
            slot.status = Some(status);
        }
        slot.status
    }

    /// Polls for the exit status until `timeout` (std has no timed wait on a child).
    pub(crate) fn wait_status(&self, timeout: Duration) -> Option<ExitStatus> {
        poll_until(timeout, || self.try_status())
    }

    /// Signals the process's tree unless the leader has been reaped (holding the lock
    /// keeps the pid, and so the group id, ours). `false` when the stop could not be sent
    /// (a failed kill falls back to killing the process alone): waiting for it to work
    /// is then pointless.
    pub(super) fn signal(&self, sig: Signal) -> bool {
        let mut slot = lock(&self.child);
        if slot.status.is_some() {
            return true;
        }
        if let Ok(Some(status)) = slot.child.try_wait() {
            slot.status = Some(status);
            return true;
        }
        if let Err(e) = signal::send(&self.tree, sig) {
            log::debug!("[plugin:{}] {sig:?} failed: {e}", self.label);
            if sig == Signal::Kill {
                let _ = slot.child.kill();
            }
            return false;
        }
        true
    }

    /// Counts and samples a stdout line that was not a frame; logs the first few.
    pub(crate) fn record_noise(&self, line: &[u8], is_json: bool) {
        let text = snippet(&String::from_utf8_lossy(line));
        let mut noise = lock(&self.noise);
        if is_json {
            noise.invalid += 1;
        } else {
            noise.non_json += 1;
        }
        if noise.samples.len() < NOISE_SAMPLES {
            log::warn!(
                "[plugin:{}] skipped a stdout line that is not a JSON-RPC frame (stdout is for frames only): {text}",
                self.label
            );
            noise.samples.push(text);
        }
    }

    pub(crate) fn count_reverse_call(&self) {
        self.reverse_calls.fetch_add(1, Ordering::Relaxed);
    }

    /// Remembers why a reverse call was refused before reaching a handler.
    pub(crate) fn record_refusal(&self, method: &str, why: &RpcError) {
        let mut refusals = lock(&self.refusals);
        if refusals.len() < NOISE_SAMPLES {
            refusals.push(format!("{method}: {why}"));
        }
    }

    pub(crate) fn count_reply(&self) {
        self.replies.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether `invoke_id` names an invoke in flight.
    pub(crate) fn invoke_active(&self, invoke_id: &str) -> bool {
        lock(&self.invokes).contains_key(invoke_id)
    }

    /// Whether the child is an MCP server (see [`Shared::mcp`]).
    pub(crate) fn is_mcp(&self) -> bool {
        self.mcp.load(Ordering::Acquire)
    }

    /// Switches the session to MCP ([`Protocol::Auto`] found an MCP server).
    pub(super) fn set_mcp(&self) {
        self.mcp.store(true, Ordering::Release);
    }

    pub(crate) fn protocol(&self) -> Option<ProtocolVersion> {
        lock(&self.negotiated).as_ref().and_then(|n| n.protocol)
    }

    pub(crate) fn manifest(&self) -> Option<Arc<Manifest>> {
        lock(&self.manifest).clone()
    }

    /// Called by the reader when stdout reaches end of file or fails: fails every pending
    /// call at once with an error naming the exit status and the last stderr lines, then
    /// tells the supervisor (unless the watcher already did).
    pub(crate) fn on_stdout_closed(&self, cause: Option<io::Error>) {
        self.stdout_closed.store(true, Ordering::Release);
        if self.ended.load(Ordering::Acquire) {
            return;
        }
        let closing = self.closing.load(Ordering::Acquire);
        let status = if closing {
            self.try_status()
        } else {
            self.wait_status(EXIT_NOTICE_WAIT)
        };
        let end = match status {
            Some(status) => End::Exited(status),
            None => End::StdoutClosed(cause),
        };
        self.report_end(closing, end);
    }

    /// Called by the watcher once the child has exited (and been reaped). The reader
    /// normally reaches end of file at the same moment and reports the exit with every
    /// reply still in the pipe settled; it is given [`STDOUT_EOF_WAIT`] to do so. When
    /// stdout stays open, a process the plugin started holds it: the exit is reported
    /// from here, so pending calls fail now instead of at their timeouts.
    pub(super) fn on_child_exited(&self, status: ExitStatus, stop: &Receiver<()>) {
        let deadline = Instant::now() + STDOUT_EOF_WAIT;
        while !self.stdout_closed.load(Ordering::Acquire) && Instant::now() < deadline {
            if !matches!(
                stop.recv_timeout(Duration::from_millis(5)),
                Err(RecvTimeoutError::Timeout)
            ) {
                return; // shutdown took over
            }
        }
        if self.stdout_closed.load(Ordering::Acquire) || self.closing.load(Ordering::Acquire) {
            return;
        }
        self.report_end(false, End::ExitedStdoutHeld(status));
    }

    /// Fails every pending call with the reason the process ended and tells the
    /// supervisor; only the first report counts.
    pub(super) fn report_end(&self, closing: bool, end: End) {
        if self.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        self.stderr.wait_done(STDERR_NOTICE_WAIT);
        let uptime = self.started.elapsed().as_secs_f64();
        let label = &self.label;
        let stderr = self.stderr.describe();
        let reason = match (closing, end) {
            (true, _) => format!("plugin `{label}` was shut down"),
            (false, End::Exited(status)) => format!(
                "plugin `{label}` exited unexpectedly ({status}) after {uptime:.3}s; {stderr}"
            ),
            (false, End::ExitedStdoutHeld(status)) => format!(
                "plugin `{label}` exited unexpectedly ({status}) after {uptime:.3}s, leaving its \
                 stdout open in a process it started; {stderr}"
            ),
            (false, End::StdoutClosed(cause)) => format!(
                "plugin `{label}` closed its stdout{} but is still running; {stderr}",
                cause.map(|e| format!(" ({e})")).unwrap_or_default(),
            ),
        };
        if !closing {
            log::warn!("{reason}");
        }
        self.pending.close(&reason);
        if let Some(n) = &self.exit_notify {
            let _ = n.tx.try_send(Event::Exited(n.generation));
        }
    }
}

/// The watcher thread: polls for the child's exit every [`WATCH_INTERVAL`] until it exits
/// (then reports it, see [`Shared::on_child_exited`]) or until the shutdown sequence takes
/// over (the stop channel's sender is dropped).
pub(super) fn watch(shared: &Shared, stop: &Receiver<()>) {
    loop {
        if let Some(status) = shared.try_status() {
            return shared.on_child_exited(status, stop);
        }
        match stop.recv_timeout(WATCH_INTERVAL) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Like [`wire::write_request`], but fails instead of sending `params: null` when the
/// params cannot be serialized (a map with non-string keys, a failing `Serialize`).
pub(super) fn write_request_checked<P: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    id: &Id,
    method: &str,
    params: &P,
) -> Result<()> {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.as_str().as_bytes());
    out.extend_from_slice(b",\"method\":");
    wire::serialize_into(out, method);
    out.extend_from_slice(b",\"params\":");
    wire::write_json(out, params)?;
    out.extend_from_slice(b"}\n");
    Ok(())
}

/// `{"jsonrpc":"2.0","id":N,"method":"..."}`: the Agent sends `describe` and `health`
/// without `params`.
pub(super) fn write_bare_request(out: &mut Vec<u8>, id: &Id, method: &str) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.as_str().as_bytes());
    out.extend_from_slice(b",\"method\":");
    wire::serialize_into(out, method);
    out.extend_from_slice(b"}\n");
}

/// Asks `probe` until it has an answer or `timeout` passes, sleeping 1 ms, then twice as
/// long each time up to 20 ms (std has no timed wait on a child).
pub(crate) fn poll_until<T>(timeout: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    let mut nap = Duration::from_millis(1);
    loop {
        if let Some(found) = probe() {
            return Some(found);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        thread::sleep(nap.min(left));
        nap = (nap * 2).min(Duration::from_millis(20));
    }
}

#[cfg(test)]
impl Shared {
    /// A `Shared` for unit tests: a short-lived child (`exit 0` in the shell, reaped at once) and the
    /// given output queue, whose inbox the test holds in place of a writer.
    pub(crate) fn for_test(
        out: crate::writer::Outbox,
        opts: HostOptions,
    ) -> io::Result<Arc<Shared>> {
        let out = PluginStdin::queue_only(out);
        let child = crate::sys::shell("exit 0").spawn()?;
        let tree = ProcessTree::adopt(&child);
        let tail = Arc::new(StderrTail::new(1));
        let (stop_watch, _) = crossbeam_channel::bounded(1);
        let shared = Shared::new(
            "test".into(),
            (child, tree),
            out,
            Arc::new(opts),
            tail,
            None,
            stop_watch,
        );
        shared.wait_status(Duration::from_secs(30));
        Ok(Arc::new(shared))
    }
}
