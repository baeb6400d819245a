//! One plugin process without supervision: spawn, three I/O threads and an exit watcher, requests with timeouts,
//! the lifecycle calls, and the Agent's shutdown sequence. [`crate::host::Host`] wraps this
//! with restarts; `executa check` drives it directly to watch a plugin misbehave.

use std::collections::HashSet;
use std::io;
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, bounded};
use serde::Serialize;
use serde_json::json;
use serde_json::value::RawValue;

use super::command::PluginCommand;
use super::context::{Context, InvokeOptions, InvokeParams, SecretMap, deadline_ms, new_invoke_id};
use super::dispatch::{Dispatcher, Handlers};
use super::options::{HostOptions, ShutdownPolicy};
use super::pending::{Pending, Reply};
use super::signal::{self, Signal};
use super::stderr::{self, StderrTail};
use super::supervisor::Event;
use super::types::{
    ExitStage, Handshake, HealthReport, InvokeResult, ShutdownReport, StdoutNoise, snippet,
};
use super::writer;
use super::{lock, reader, spawn_named};
use crate::Secret;
use crate::error::{Error, Result, RpcError, codes};
use crate::id::Id;
use crate::manifest::Manifest;
use crate::session::ProtocolVersion;
use crate::wire;
use crate::writer::{Outbox, SendFailure};

/// How long the reader waits, after stdout closes, for the exit status and the last stderr
/// lines, so that the error failing pending calls can name them. A process normally exits
/// within microseconds of closing stdout; this bound only matters when it does not.
const EXIT_NOTICE_WAIT: Duration = Duration::from_millis(1000);
const STDERR_NOTICE_WAIT: Duration = Duration::from_millis(300);
/// Bound on handing a reverse-call answer to the writer.
const REPLY_SEND_WAIT: Duration = Duration::from_secs(5);
/// Bound on waiting for the I/O threads after the process is gone.
const THREAD_JOIN_WAIT: Duration = Duration::from_millis(500);
/// Most stdout noise samples kept.
const NOISE_SAMPLES: usize = 8;
/// How often the watcher thread polls for the child's exit. std has no timed or
/// non-reaping wait, and the shutdown sequence must keep signalling and reaping the same
/// `Child`, so the watcher polls `try_wait` under the child's lock instead of blocking in
/// `wait()`. This bounds how late a crash is noticed when the plugin's stdout stays open.
const WATCH_INTERVAL: Duration = Duration::from_millis(50);
/// After the child exits, how long the watcher leaves the reader to reach stdout's end of
/// file (and so settle replies still in the pipe) before concluding that another process
/// (a helper the plugin started) holds stdout open, and reporting the exit itself.
const STDOUT_EOF_WAIT: Duration = Duration::from_millis(300);
/// Bound on handing `Close` to the writer when the process is already gone: the writer is
/// then idle or about to fail on the broken pipe, so this only matters when some helper
/// holds stdin open and stopped reading.
const CLOSE_WAIT: Duration = Duration::from_millis(100);
/// The id of `initialize`: the Agent sends it with id 0, so a plugin that mistakes a
/// falsy id for a notification shows up here as it would in production.
const INITIALIZE_ID: u64 = 0;

/// The child and its exit status once reaped.
struct ChildSlot {
    child: Child,
    status: Option<ExitStatus>,
}

/// Where to report this process's end (the supervisor), tagged with its generation.
pub(crate) struct ExitNotify {
    pub(crate) tx: Sender<Event>,
    pub(crate) generation: u64,
}

/// State shared by the caller-facing handle and the I/O threads and the exit watcher.
pub(crate) struct Shared {
    pub(crate) label: String,
    pub(crate) pid: u32,
    pub(crate) opts: Arc<HostOptions>,
    next_id: AtomicU64,
    pub(crate) pending: Pending,
    out: Outbox,
    child: Mutex<ChildSlot>,
    pub(crate) stderr: Arc<StderrTail>,
    noise: Mutex<StdoutNoise>,
    closing: AtomicBool,
    replies: AtomicU64,
    reverse_calls: AtomicU64,
    /// Reverse calls refused by the gates or the invoke routing (the first few).
    refusals: Mutex<Vec<String>>,
    negotiated: Mutex<Option<Handshake>>,
    manifest: Mutex<Option<Arc<Manifest>>>,
    /// Invoke ids currently in flight, for routing reverse calls.
    pub(crate) invokes: Mutex<HashSet<String>>,
    exit_notify: Option<ExitNotify>,
    started: Instant,
    /// Set once the end of the process has been reported (by the reader or the watcher).
    ended: AtomicBool,
    /// Set when the reader reaches the end of stdout.
    stdout_closed: AtomicBool,
    /// Set once `initialize` has used [`INITIALIZE_ID`].
    initialize_sent: AtomicBool,
}

impl Shared {
    /// Sends a request and blocks until its reply, the timeout, or the process's end.
    pub(crate) fn request<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: Option<&P>,
        timeout: Duration,
    ) -> Result<Box<RawValue>> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.request_as(id, method, params, timeout)
    }

    /// [`Shared::request`] under a chosen id (the caller keeps ids unique).
    fn request_as<P: Serialize + ?Sized>(
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
        let spin = crate::spin::effective(self.opts.spin);
        let left = deadline.saturating_duration_since(Instant::now());
        match crate::spin::recv_timeout(&rx, spin, left) {
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

    fn refuse_if_closing(&self) -> Result<()> {
        if self.closing.load(Ordering::Acquire) {
            let why = self.pending.closed_reason();
            return Err(Error::Disconnected(why.unwrap_or_else(|| {
                format!("plugin `{}` is shutting down", self.label)
            })));
        }
        Ok(())
    }

    /// Queues a frame for the writer, waiting (until `deadline`) while the queue is full,
    /// which happens only when the plugin stops reading its stdin.
    fn send_frame(
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

    /// Queues an answer to a reverse call, from a worker thread.
    pub(crate) fn send_reply(&self, frame: Vec<u8>) {
        if let Err(e) = self.out.send_timeout(frame, REPLY_SEND_WAIT) {
            let why = match e {
                SendFailure::Timeout => "the plugin is not reading its stdin",
                SendFailure::Closed => "its stdin is closed",
            };
            log::warn!("[plugin:{}] reverse-call answer dropped: {why}", self.label);
        }
    }

    /// Queues a frame from the reader thread, which must never block: dropped when full.
    pub(crate) fn try_send(&self, frame: Vec<u8>) {
        if !self.out.try_send(frame) {
            log::warn!(
                "[plugin:{}] write queue full or closed: an error answer was dropped",
                self.label
            );
        }
    }

    /// The error for a call that finds the process gone.
    fn gone(&self) -> Error {
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
        let deadline = Instant::now() + timeout;
        let mut nap = Duration::from_millis(1);
        loop {
            if let Some(s) = self.try_status() {
                return Some(s);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            thread::sleep(nap.min(left));
            nap = (nap * 2).min(Duration::from_millis(20));
        }
    }

    /// Signals the process's group unless the leader has been reaped (holding the lock
    /// keeps the pid, and so the group id, ours).
    fn signal(&self, sig: Signal) {
        let mut slot = lock(&self.child);
        if slot.status.is_some() {
            return;
        }
        if let Ok(Some(status)) = slot.child.try_wait() {
            slot.status = Some(status);
            return;
        }
        if let Err(e) = signal::send(self.pid, sig) {
            log::debug!("[plugin:{}] {sig:?} failed: {e}", self.label);
            if sig == Signal::Kill {
                let _ = slot.child.kill();
            }
        }
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
    fn on_child_exited(&self, status: ExitStatus, stop: &Receiver<()>) {
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
    fn report_end(&self, closing: bool, end: End) {
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

/// How the end of a process was noticed.
enum End {
    /// Stdout closed and the process had exited.
    Exited(ExitStatus),
    /// The process exited but something else still holds its stdout.
    ExitedStdoutHeld(ExitStatus),
    /// Stdout closed (or failed) but the process is still running.
    StdoutClosed(Option<io::Error>),
}

/// The watcher thread: polls for the child's exit every [`WATCH_INTERVAL`] until it exits
/// (then reports it, see [`Shared::on_child_exited`]) or until the shutdown sequence takes
/// over (the stop channel's sender is dropped).
fn watch(shared: &Shared, stop: &Receiver<()>) {
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
fn write_request_checked<P: Serialize + ?Sized>(
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
    serde_json::to_writer(&mut *out, params)?;
    out.extend_from_slice(b"}\n");
    Ok(())
}

/// `{"jsonrpc":"2.0","id":N,"method":"..."}`: the Agent sends `describe` and `health`
/// without `params`.
fn write_bare_request(out: &mut Vec<u8>, id: &Id, method: &str) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.as_str().as_bytes());
    out.extend_from_slice(b",\"method\":");
    wire::serialize_into(out, method);
    out.extend_from_slice(b"}\n");
}

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
    shared: Arc<Shared>,
    dispatch: Dispatcher,
    threads: Mutex<Vec<JoinHandle<()>>>,
    report: Mutex<Option<ShutdownReport>>,
    /// Dropped when the shutdown sequence starts, which stops the watcher thread.
    stop_watch: Mutex<Option<Sender<()>>>,
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
        let mut child = cmd.to_command().spawn().map_err(|e| {
            Error::Io(io::Error::new(
                e.kind(),
                format!("cannot start plugin `{cmd}`: {e}"),
            ))
        })?;
        let pipes = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let (Some(stdin), Some(stdout), Some(stderr_pipe)) = pipes else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::Io(io::Error::other("plugin stdio was not piped")));
        };
        let (out_tx, out_rx) = crate::writer::channel_with(opts.write_queue);
        let tail = Arc::new(StderrTail::new(opts.stderr_tail_lines));
        let shared = Arc::new(Shared {
            label: label.clone(),
            pid: child.id(),
            next_id: AtomicU64::new(1),
            pending: Pending::new(),
            out: out_tx,
            child: Mutex::new(ChildSlot {
                child,
                status: None,
            }),
            stderr: tail.clone(),
            noise: Mutex::new(StdoutNoise::default()),
            closing: AtomicBool::new(false),
            replies: AtomicU64::new(0),
            reverse_calls: AtomicU64::new(0),
            refusals: Mutex::new(Vec::new()),
            negotiated: Mutex::new(None),
            manifest: Mutex::new(None),
            invokes: Mutex::new(HashSet::new()),
            exit_notify,
            started: Instant::now(),
            ended: AtomicBool::new(false),
            stdout_closed: AtomicBool::new(false),
            initialize_sent: AtomicBool::new(false),
            opts,
        });
        let (stop_tx, stop_rx) = bounded::<()>(1);
        let process = PluginProcess {
            shared: shared.clone(),
            dispatch: dispatch.clone(),
            threads: Mutex::new(Vec::new()),
            report: Mutex::new(None),
            stop_watch: Mutex::new(Some(stop_tx)),
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
                writer::run(stdin, out_rx, &l1, writer_spin)
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

    /// Runs the v2 handshake with the Agent's request shape, waiting at most
    /// [`HostOptions::initialize_timeout`]. A timeout, -32601, any other error frame or an
    /// unreadable answer silently gives a 1.1 session, with the reason recorded in
    /// [`Handshake::fallback`]. Fails only when the process is gone
    /// ([`Error::Disconnected`]) or the request cannot be written.
    pub fn initialize(&self) -> Result<Handshake> {
        let opts = &self.shared.opts;
        let params = json!({
            "protocolVersion": "2.0",
            "clientInfo": { "name": opts.client_name, "version": opts.client_version },
            "capabilities": {
                "sampling": {
                    "modalities": ["text"],
                    "maxTokensPerCall": 8192,
                    "maxCallsPerInvoke": 8,
                    "responseFormat": ["json_object", "json_schema"]
                },
                "fileTransport": opts.file_transport
            }
        });
        let start = Instant::now();
        let timeout = opts.initialize_timeout;
        // Id 0 as the Agent sends it; a second initialize (never sent by the host itself)
        // takes a fresh id so that ids stay unique.
        let id = if self.shared.initialize_sent.swap(true, Ordering::AcqRel) {
            self.shared.next_id.fetch_add(1, Ordering::Relaxed)
        } else {
            INITIALIZE_ID
        };
        let negotiated = match self
            .shared
            .request_as(id, "initialize", Some(&params), timeout)
        {
            Ok(raw) => Handshake::from_result(&raw, start.elapsed()),
            Err(Error::Timeout { .. }) => Handshake::fell_back(
                format!(
                    "no answer to initialize within {:.3}s",
                    timeout.as_secs_f64()
                ),
                start.elapsed(),
            ),
            Err(Error::Remote(e)) if e.code == codes::METHOD_NOT_FOUND => {
                Handshake::fell_back(format!("initialize not implemented: {e}"), start.elapsed())
            }
            Err(Error::Remote(e)) => Handshake::fell_back(
                format!("initialize answered with an error frame: {e}"),
                start.elapsed(),
            ),
            Err(e @ (Error::Protocol(_) | Error::FrameTooLarge { .. } | Error::Json(_))) => {
                Handshake::fell_back(
                    format!("unreadable answer to initialize: {e}"),
                    start.elapsed(),
                )
            }
            Err(e) => return Err(e),
        };
        if let Some(why) = &negotiated.fallback {
            log::debug!("[plugin:{}] protocol 1.1: {why}", self.shared.label);
        }
        *lock(&self.shared.negotiated) = Some(negotiated.clone());
        Ok(negotiated)
    }

    /// Records a session without `initialize` (what the dev hosts do).
    pub(crate) fn skip_initialize(&self) -> Handshake {
        let n = Handshake::skipped();
        *lock(&self.shared.negotiated) = Some(n.clone());
        n
    }

    /// Sends `describe` with the configured timeout (the first-launch allowance when
    /// [`HostOptions::first_launch`] is set), parses the manifest and caches it for
    /// [`PluginProcess::invoke`]'s per-tool timeouts and reverse-call gating. A wrapped
    /// `{"manifest":{...}}` or a non-object answer is an [`Error::Protocol`].
    pub fn describe(&self) -> Result<Arc<Manifest>> {
        self.describe_within(self.shared.opts.effective_describe_timeout())
    }

    /// [`PluginProcess::describe`] with an explicit timeout (the supervisor allows the
    /// first-launch timeout on the first launch only).
    pub(crate) fn describe_within(&self, timeout: Duration) -> Result<Arc<Manifest>> {
        let raw = self.describe_raw(timeout)?;
        let manifest = Arc::new(parse_manifest(&raw)?);
        *lock(&self.shared.manifest) = Some(manifest.clone());
        Ok(manifest)
    }

    /// Caches a manifest read by other means (the check lints the raw answer itself).
    pub(crate) fn remember_manifest(&self, manifest: Arc<Manifest>) {
        *lock(&self.shared.manifest) = Some(manifest);
    }

    /// Sends `describe` and returns the answer unparsed, for linting.
    pub fn describe_raw(&self, timeout: Duration) -> Result<Box<RawValue>> {
        self.shared.request::<()>("describe", None, timeout)
    }

    /// The session negotiated by [`PluginProcess::initialize`], if it ran.
    pub fn handshake(&self) -> Option<Handshake> {
        lock(&self.shared.negotiated).clone()
    }

    /// The manifest cached by [`PluginProcess::describe`], if it ran.
    pub fn manifest(&self) -> Option<Arc<Manifest>> {
        self.shared.manifest()
    }

    /// Calls a tool and parses the `{success, data, error}` envelope. Blocks until the
    /// reply or the timeout: `opts.timeout`, else the manifest tool's `timeout`, else
    /// [`HostOptions::invoke_timeout`]. A JSON-RPC error frame is [`Error::Remote`]; a
    /// result without a boolean `success` is [`Error::Protocol`].
    pub fn invoke<A: Serialize + ?Sized>(
        &self,
        tool: &str,
        arguments: &A,
        opts: &InvokeOptions,
    ) -> Result<InvokeResult> {
        let start = Instant::now();
        let (invoke_id, raw) = self.invoke_raw(tool, arguments, opts)?;
        InvokeResult::parse(raw, invoke_id, start.elapsed())
    }

    /// Like [`PluginProcess::invoke`] but returns the minted invoke id and the result
    /// exactly as sent, without checking its shape.
    pub fn invoke_raw<A: Serialize + ?Sized>(
        &self,
        tool: &str,
        arguments: &A,
        opts: &InvokeOptions,
    ) -> Result<(String, Box<RawValue>)> {
        let manifest = self.shared.manifest();
        let timeout = opts.timeout.unwrap_or_else(|| {
            manifest
                .as_ref()
                .and_then(|m| m.tools.iter().find(|t| t.name == tool))
                .and_then(|t| t.timeout)
                .filter(|&s| s > 0)
                .map_or(self.shared.opts.invoke_timeout, Duration::from_secs)
        });
        let invoke_id = opts.invoke_id.clone().unwrap_or_else(new_invoke_id);
        let minted = self.dev_tokens(&invoke_id, manifest.as_deref(), opts);
        let mut tokens = SecretMap(minted.iter().map(|(k, v)| (*k, v)).collect());
        tokens
            .0
            .extend(opts.tokens.iter().map(|(k, v)| (k.as_str(), v)));
        let params = InvokeParams {
            tool,
            arguments,
            context: Context {
                invoke_id: &invoke_id,
                deadline_ms: deadline_ms(timeout),
                credentials: SecretMap::of(&opts.credentials),
                tokens,
            },
        };
        let _active = ActiveInvoke::register(&self.shared, &invoke_id);
        let raw = self.shared.request("invoke", Some(&params), timeout)?;
        Ok((invoke_id, raw))
    }

    /// Placeholder tokens for local runs ([`HostOptions::dev_tokens`]).
    fn dev_tokens(
        &self,
        invoke_id: &str,
        manifest: Option<&Manifest>,
        opts: &InvokeOptions,
    ) -> Vec<(&'static str, Secret)> {
        let protocol = self.shared.protocol();
        if !self.shared.opts.dev_tokens || protocol == Some(ProtocolVersion::V1) {
            return Vec::new();
        }
        let caps = manifest
            .map(|m| m.host_capabilities.as_slice())
            .unwrap_or_default();
        let mut out = Vec::new();
        if caps.iter().any(|c| c == "llm.sample") && !opts.tokens.contains_key("sampling_token") {
            out.push((
                "sampling_token",
                Secret::new(format!("dev-sampling-{invoke_id}")),
            ));
        }
        if caps.iter().any(|c| super::dispatch::grants_storage(c))
            && !opts.tokens.contains_key("storage_token")
        {
            out.push((
                "storage_token",
                Secret::new(format!("dev-storage-{invoke_id}")),
            ));
        }
        out
    }

    /// Probes `health` with [`HostOptions::health_timeout`]. A plugin answering -32601 is
    /// healthy with [`HealthReport::implemented`] `false`, as the Agent treats it.
    pub fn health(&self) -> Result<HealthReport> {
        match self
            .shared
            .request::<()>("health", None, self.shared.opts.health_timeout)
        {
            Ok(raw) => HealthReport::from_result(&raw),
            Err(Error::Remote(e)) if e.code == codes::METHOD_NOT_FOUND => {
                Ok(HealthReport::unimplemented())
            }
            Err(e) => Err(e),
        }
    }

    /// Sends any request and blocks until its raw result, an error frame
    /// ([`Error::Remote`]), the timeout, or the process's end.
    pub fn request<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
        timeout: Duration,
    ) -> Result<Box<RawValue>> {
        self.shared.request(method, Some(params), timeout)
    }

    /// Sends a notification (no id, no answer). Blocks only while the write queue is full,
    /// at most `timeout`.
    pub fn notify<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
        timeout: Duration,
    ) -> Result<()> {
        self.shared.refuse_if_closing()?;
        let mut frame = Vec::with_capacity(128);
        wire::write_request(&mut frame, None, method, params);
        self.shared
            .send_frame(frame, Instant::now() + timeout, method, timeout)
    }

    /// A conformance probe: writes `line` as is (a newline is added) and waits up to
    /// `timeout` for an `id: null` error frame, the JSON-RPC answer to a line that cannot
    /// be parsed. Returns that error object; [`Error::Timeout`] if nothing came,
    /// [`Error::Protocol`] if a result came instead, [`Error::Disconnected`] if the plugin
    /// died.
    pub fn probe_malformed(&self, line: &[u8], timeout: Duration) -> Result<RpcError> {
        self.shared.refuse_if_closing()?;
        let deadline = Instant::now() + timeout;
        let rx = self.shared.pending.register_null()?;
        let mut frame = line.to_vec();
        frame.push(b'\n');
        if let Err(e) = self
            .shared
            .send_frame(frame, deadline, "<malformed line>", timeout)
        {
            self.shared.pending.cancel_null();
            return Err(e);
        }
        let reply: Reply = match rx.recv_deadline(deadline) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => {
                self.shared.pending.cancel_null();
                return Err(Error::Timeout {
                    method: "<malformed line>".to_owned(),
                    after: timeout,
                });
            }
            Err(RecvTimeoutError::Disconnected) => return Err(self.shared.gone()),
        };
        match reply {
            Err(Error::Remote(e)) => Ok(e),
            Ok(raw) => Err(Error::Protocol(format!(
                "a malformed line was answered with a result: {}",
                snippet(raw.get())
            ))),
            Err(e) => Err(e),
        }
    }

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

    /// Runs the Agent's shutdown sequence with [`HostOptions::shutdown`]: close stdin, wait,
    /// `SIGTERM`, wait, `SIGKILL`. See [`PluginProcess::shutdown_with`].
    pub fn shutdown(&self) -> ShutdownReport {
        let policy = self.shared.opts.shutdown.clone();
        self.shutdown_with(&policy)
    }

    /// Closes stdin, waits up to `stdin_grace`; sends `SIGTERM`, waits up to `term_grace`;
    /// sends `SIGKILL`, waits up to `kill_wait`. The signals go to the plugin's whole
    /// process group, and whatever is left of the group once the plugin has ended gets
    /// `SIGKILL`. Returns which step ended the process and its exit status. Calls still pending fail with [`Error::Disconnected`]. Idempotent:
    /// a second call returns the first report without blocking.
    pub fn shutdown_with(&self, policy: &ShutdownPolicy) -> ShutdownReport {
        let mut report = lock(&self.report);
        if let Some(r) = *report {
            return r;
        }
        // The shutdown sequence owns the child from here: stop the watcher.
        drop(lock(&self.stop_watch).take());
        let r = self.run_shutdown(policy);
        // Nothing the plugin started in its process group outlives it: a helper that
        // ignored SIGTERM, or survived a crash, would stay orphaned holding its pipes.
        if let Err(e) = signal::kill_group_remnants(self.shared.pid) {
            log::debug!("[plugin:{}] group cleanup failed: {e}", self.shared.label);
        }
        self.shared
            .pending
            .close(&format!("plugin `{}` was shut down", self.shared.label));
        self.join_threads(THREAD_JOIN_WAIT);
        *report = Some(r);
        r
    }

    fn run_shutdown(&self, policy: &ShutdownPolicy) -> ShutdownReport {
        let s = &self.shared;
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
        s.signal(Signal::Term);
        if let Some(status) = s.wait_status(policy.term_grace) {
            return done(ExitStage::Terminated, Some(status));
        }
        log::debug!(
            "[plugin:{}] ignored SIGTERM for {:?}: SIGKILL",
            s.label,
            policy.term_grace
        );
        s.signal(Signal::Kill);
        done(ExitStage::Killed, s.wait_status(policy.kill_wait))
    }

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

impl Drop for PluginProcess {
    fn drop(&mut self) {
        self.shutdown();
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

/// Marks an invoke id active for reverse-call routing while the invoke is in flight.
struct ActiveInvoke<'a> {
    shared: &'a Shared,
    id: String,
}

impl<'a> ActiveInvoke<'a> {
    fn register(shared: &'a Shared, id: &str) -> Self {
        lock(&shared.invokes).insert(id.to_owned());
        ActiveInvoke {
            shared,
            id: id.to_owned(),
        }
    }
}

impl Drop for ActiveInvoke<'_> {
    fn drop(&mut self) {
        lock(&self.shared.invokes).remove(&self.id);
    }
}

/// Parses a `describe` answer, refusing the wrapped form the Agent cannot read.
fn parse_manifest(raw: &RawValue) -> Result<Manifest> {
    let value: serde_json::Value = serde_json::from_str(raw.get())?;
    let Some(map) = value.as_object() else {
        return Err(Error::Protocol(format!(
            "describe must return the manifest object, got {}",
            snippet(raw.get())
        )));
    };
    if map
        .get("manifest")
        .is_some_and(serde_json::Value::is_object)
        && !map.contains_key("tools")
    {
        return Err(Error::Protocol(
            "describe returned a wrapped {\"manifest\": {...}}; the Agent needs the bare manifest object (pitfall #5)"
                .to_owned(),
        ));
    }
    Ok(serde_json::from_value(value)?)
}
