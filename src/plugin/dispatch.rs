//! What the dispatch and worker threads do with each job: the lifecycle methods and the
//! invoke path.

use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::RecvTimeoutError;
use serde_json::Value;

use crate::error::{RpcError, codes};
use crate::spin::Poller;
use crate::{json_text, wire};

use super::context::Invocation;
use super::events::Event;
use super::health::Health;
use super::intake::Intake;
use super::job::{InvokeJob, InvokeParts, Job, Line, Method};
use super::pool::{Admission, Admit};
use super::reverse::InvokeLink;
use super::service::Service;

/// What a dispatch thread keeps between jobs, so the hot path reuses its buffers.
#[derive(Default)]
pub(crate) struct Scratch {
    /// The reply being built.
    pub frame: Vec<u8>,
    /// Set once this job's last reply is in hand (see `Pool::replying`).
    replying: bool,
    /// The link of this thread's last invoke, reused when no handle to it survived.
    link: Option<Arc<InvokeLink>>,
    /// `Some` for a reader thread's scratch: a line buffer, zeroed, for the reader's next
    /// copy of a line, which then takes no lock of the shared free list. The first invoke
    /// this thread runs after the reader took the last one fills it (`Some(None)` until
    /// then); the reader takes it after each run it made.
    pub line: Option<Option<Vec<u8>>>,
}

impl Scratch {
    /// The reader's scratch, which keeps a line buffer (see [`Scratch::line`]).
    pub fn for_reader() -> Scratch {
        Scratch {
            line: Some(None),
            ..Scratch::default()
        }
    }

    /// The MCP call of this thread's last invoke, emptied, when nothing else holds its
    /// link: the reader reads its next `tools/call` into it (as it copies lines into the
    /// kept buffer), so a call it runs itself allocates nothing for its MCP side.
    #[cfg(feature = "mcp")]
    pub fn take_call(&mut self) -> Option<Box<super::mcp::Call>> {
        let link = self.link.as_mut().filter(|l| l.mcp_call().is_some())?;
        let mut call = Arc::get_mut(link)?.take_mcp()?;
        *call = super::mcp::Call::default();
        Some(call)
    }
}

/// A failure of the runtime's own request handling is logged within a limit: it could
/// repeat per request.
static INTERNAL: crate::log_limit::LogLimit = crate::log_limit::LogLimit::new();

/// A reply frame grown past this is given back rather than kept for the next reply.
const KEEP_FRAME_BYTES: usize = 64 * 1024;

impl Service {
    /// Starts one extra worker thread (already counted by the pool).
    pub(crate) fn spawn_worker(self: &Arc<Self>) {
        if let Err(e) = self.start_thread(false) {
            static NO_WORKER: crate::log_limit::LogLimit = crate::log_limit::LogLimit::new();
            if NO_WORKER.allow("no worker thread") {
                log::error!("executa: could not start a worker thread: {e}");
            }
            self.pool.spawn_failed();
        }
    }

    /// Starts the permanent dispatch thread or an extra worker. (One closure for both, so
    /// the thread start-up code is compiled once.)
    pub(crate) fn start_thread(self: &Arc<Self>, permanent: bool) -> std::io::Result<()> {
        let svc = self.clone();
        let name = if permanent {
            "executa-dispatch"
        } else {
            "executa-worker"
        };
        crate::threads::spawn(name.into(), move || svc.work(permanent)).map(drop)
    }

    /// The loop of the dispatch thread (`permanent`) and of extra workers, which exit
    /// after `worker_linger` without work. Only the permanent thread polls before it sleeps
    /// (see `spin::Poller`): extra workers exist for overlap, not for latency.
    pub(crate) fn work(&self, permanent: bool) {
        let mut poller = Poller::new(self.poll);
        let mut scratch = Scratch::default();
        loop {
            let job = if permanent {
                poller
                    .recv(&self.jobs)
                    .map_err(|_| RecvTimeoutError::Disconnected)
            } else {
                self.jobs.recv_timeout(self.opts.worker_linger)
            };
            match job {
                Ok(job) => {
                    self.pool.took();
                    self.intake.release(job.weight());
                    scratch.replying = false;
                    // Handlers are already isolated; this guards the runtime's own code so
                    // a bug there cannot leave a thread counted busy forever.
                    if catch_unwind(AssertUnwindSafe(|| self.handle(job, &mut scratch))).is_err()
                        && INTERNAL.allow("internal error")
                    {
                        log::error!(
                            "executa: internal error while handling a request (see the panic above)"
                        );
                    }
                    if scratch.frame.capacity() > KEEP_FRAME_BYTES {
                        scratch.frame = Vec::new();
                    }
                    let quiet = if scratch.replying {
                        self.pool.replied()
                    } else {
                        self.pool.done()
                    };
                    if quiet {
                        self.events.notify(Event::Drained);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    if self.pool.may_exit() {
                        return;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.pool.exit();
                    return;
                }
            }
        }
    }

    /// Whether more requests wait right behind this one: then a reply goes through the
    /// writer thread, which writes a burst at once, instead of straight out.
    fn more(&self) -> bool {
        !self.jobs.is_empty()
    }

    /// Handles one job on the calling thread.
    fn handle(&self, job: Job, scratch: &mut Scratch) {
        match job {
            Job::Reject { id, error } => self.reply_error(id.as_raw().get().as_bytes(), &error),
            Job::Invoke(job) => self.invoke(job, scratch),
            Job::Request {
                line,
                id: Some(id),
                method,
            } => {
                self.request(&line, &id, method, scratch);
                self.intake.recycle(line.into_buffer());
            }
            Job::Request { id: None, .. } => {}
        }
    }

    fn request(&self, line: &Line, id: &Range<usize>, method: Method, scratch: &mut Scratch) {
        let id = line.bytes(id);
        let frame = &mut scratch.frame;
        frame.clear();
        match method {
            Method::Describe => wire::write_response_to(frame, id, &self.manifest_json),
            Method::Health => {
                let health = match &self.health {
                    Some(hook) => catch_unwind(AssertUnwindSafe(hook)).unwrap_or_else(|_| {
                        static HEALTH_PANIC: crate::log_limit::LogLimit =
                            crate::log_limit::LogLimit::new();
                        if HEALTH_PANIC.allow("health hook panicked") {
                            log::error!("executa: the health hook panicked");
                        }
                        Health::error("health hook panicked")
                    }),
                    None => Health::ready(),
                };
                wire::write_result(frame, id, &health);
            }
            #[cfg(feature = "mcp")]
            Method::ToolsList(stateless) => {
                let list = self.peer.mcp.tools_list(&self.manifest_json);
                wire::write_result_by(frame, id, |out| {
                    out.push(b'{');
                    if stateless {
                        out.extend_from_slice(br#""resultType":"complete","#);
                    }
                    // The list is an object with members (`tools` at least).
                    out.extend_from_slice(list.get().as_bytes().get(1..).unwrap_or(b"}"));
                });
            }
            #[cfg(feature = "mcp")]
            Method::Ping(stateless) => wire::write_result_by(frame, id, |out| {
                out.extend_from_slice(if stateless {
                    br#"{"resultType":"complete"}"#
                } else {
                    b"{}"
                });
            }),
            #[cfg(feature = "mcp")]
            Method::Discover => {
                let reply = super::mcp::discover_reply(&self.manifest_json);
                wire::write_result(frame, id, &reply);
            }
            Method::Other(name) => {
                let error =
                    RpcError::new(codes::METHOD_NOT_FOUND, format!("method not found: {name}"));
                wire::write_error_to(frame, id, &error);
            }
            // Only the lifecycle methods are left.
            lifecycle => {
                self.answer_lifecycle(&lifecycle, id, frame);
            }
        }
        // A reply of any kind stays within the payload cap (a request's own text is quoted
        // short; a plugin's manifest or health report could still pass it).
        self.cap(frame, id, Reply::Other);
        self.pool.replying();
        scratch.replying = true;
        self.peer.out.send_buffer(&mut scratch.frame, self.more());
    }

    /// Answers `initialize` or `shutdown`, which took effect as the reader read them, with
    /// their reply in `frame` (then `shutdown` refuses the invokes still waiting for a slot).
    /// Returns `false`, doing nothing, for any other method. The reader answers them so too
    /// when it cannot queue them: a `BUSY` would say they had no effect.
    pub(crate) fn answer_lifecycle(&self, method: &Method, id: &[u8], frame: &mut Vec<u8>) -> bool {
        match method {
            Method::Initialize(reply) => wire::write_result(frame, id, &**reply),
            #[cfg(feature = "mcp")]
            Method::McpInitialize(revision) => {
                let reply = super::mcp::initialize_reply(revision, &self.manifest_json);
                wire::write_result(frame, id, &reply);
            }
            Method::Shutdown => {
                log::info!("executa: `shutdown` received; refusing new invokes until stdin closes");
                self.refuse_waiting(self.pool.restrict(Admission::Closed), None);
                wire::write_result_by(frame, id, |out| out.extend_from_slice(b"{}"));
            }
            _ => return false,
        }
        self.cap(frame, id, Reply::Other);
        true
    }

    /// Answers `SHUTTING_DOWN` to invokes that never started, waiting for output room
    /// until `deadline` at most (`None`: as long as it takes, like any reply).
    pub(crate) fn refuse_waiting(&self, waiting: Vec<InvokeJob>, deadline: Option<Instant>) {
        for job in waiting {
            let mut frame = Vec::with_capacity(160);
            wire::write_error_to(&mut frame, job.id(), &shutting_down());
            self.intake.recycle(job.line.into_buffer());
            let sent = match deadline {
                None => self.peer.out.send(frame, true),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    self.peer.out.queue_timeout(frame, left).is_ok()
                }
            };
            static UNSENT: crate::log_limit::LogLimit = crate::log_limit::LogLimit::new();
            if !sent && log::log_enabled!(log::Level::Debug) && UNSENT.allow("refusal unsent") {
                log::debug!("executa: a SHUTTING_DOWN answer was not sent (output closed or full)");
            }
        }
    }

    /// Admits an invoke and runs it on this thread (or leaves it waiting for a slot), with
    /// the replies written as a dispatch thread writes them.
    pub(crate) fn invoke(&self, job: InvokeJob, scratch: &mut Scratch) {
        match self.pool.admit(job) {
            Admit::Run(job) => self.run_invokes(job, scratch),
            Admit::Deferred => {}
            Admit::Refuse(job) => self.refuse_waiting(vec![job], None),
        }
    }

    /// Runs an admitted invoke, then any invokes that waited for its slot.
    pub(crate) fn run_invokes(&self, first: InvokeJob, scratch: &mut Scratch) {
        let mut next = Some(first);
        while let Some(job) = next {
            self.execute(job, scratch);
            next = self.pool.finish();
            if next.is_none() {
                self.pool.replying();
                scratch.replying = true;
            }
            self.peer.out.send_buffer(&mut scratch.frame, self.more());
        }
    }

    /// Runs the handler of an invoke whose params the reader read, and builds the response
    /// frame in `scratch.frame`.
    pub(crate) fn execute(&self, job: InvokeJob, scratch: &mut Scratch) {
        // Always run: the closure agrees, so the job never comes back.
        let _ = self.execute_if(job, scratch, &mut || true);
    }

    /// As [`Service::execute`], but the handler runs only if `go` agrees (`go` may take a
    /// slot for it); otherwise the job comes back untouched. A request
    /// that fails before a handler is chosen (bad params, unknown tool) is answered in
    /// `scratch.frame` without asking `go`. Returns whether `go` was asked and agreed.
    pub(crate) fn execute_if(
        &self,
        job: InvokeJob,
        scratch: &mut Scratch,
        go: &mut dyn FnMut() -> bool,
    ) -> Result<bool, InvokeJob> {
        if job.parts.is_ok() && !go() {
            return Err(job);
        }
        let frame = &mut scratch.frame;
        frame.clear();
        #[cfg_attr(not(feature = "mcp"), allow(unused_mut))]
        let InvokeJob {
            line,
            id,
            mut parts,
        } = job;
        // An MCP call leaves the calls in flight once its reply is decided on (below).
        #[cfg(feature = "mcp")]
        let seen = parts
            .as_mut()
            .ok()
            .and_then(|p| p.mcp.as_mut())
            .and_then(|call| call.seen.take());
        let id = line.bytes(&id);
        #[cfg_attr(not(feature = "mcp"), allow(unused_variables))]
        let (ran, kind) = match parts {
            Ok(parts) => {
                let kind = Reply::of(&parts);
                self.run_tool(id, &line, parts, frame, &mut scratch.link);
                (true, kind)
            }
            Err(error) => {
                wire::write_error_to(frame, id, &error);
                (false, Reply::Invoke)
            }
        };
        // Every reply counts against the platform's payload cap, failures included.
        self.cap(frame, id, kind);
        // A 2026-07-28 call that asked its client answers the retry that resumed it.
        #[cfg(feature = "mcp")]
        if ran {
            retarget(frame, id, scratch.link.as_mut(), &self.peer);
        }
        // MCP: a request the client cancelled is not answered (the spec's SHOULD NOT).
        #[cfg(feature = "mcp")]
        if seen.is_some_and(super::mcp::Seen::finish) {
            frame.clear();
        }
        match (line.into_buffer(), &mut scratch.line) {
            (buf, Some(kept @ None)) if Intake::keeps(&buf) => *kept = Some(buf),
            (buf, _) => self.intake.recycle(buf),
        }
        Ok(ran)
    }

    fn run_tool(
        &self,
        id: &[u8],
        line: &Line,
        parts: InvokeParts,
        frame: &mut Vec<u8>,
        link: &mut Option<Arc<InvokeLink>>,
    ) {
        let tool = &self.tools[parts.tool];
        // The reader parsed this line, so the spans are JSON values, UTF-8. Only they are
        // checked again (to have them as `str` without `unsafe`), not the whole line, where
        // an MCP envelope would be read once more for nothing.
        let text = |span: Option<Range<usize>>| {
            span.and_then(|s| line.all().get(s))
                .and_then(|b| std::str::from_utf8(b).ok())
        };
        let arguments = text(parts.arguments).unwrap_or("{}");
        let cached = link.take();
        #[cfg(feature = "mcp")]
        let mcp = parts.mcp;
        #[cfg(feature = "mcp")]
        let is_mcp = mcp.is_some();
        #[cfg(feature = "mcp")]
        let stateless = mcp.as_ref().is_some_and(|c| c.is_stateless());
        // A 2026-07-28 call that may ask its client keeps what its input request binds.
        #[cfg(feature = "mcp")]
        let bound = mcp
            .as_ref()
            .and_then(|c| c.stateless.as_ref())
            .filter(|s| s.askable())
            .map(|_| (id, arguments));
        #[cfg(not(feature = "mcp"))]
        let is_mcp = false;
        frame.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
        frame.extend_from_slice(id);
        #[cfg(feature = "mcp")]
        if is_mcp {
            frame.extend_from_slice(super::mcp::RESULT_HEAD);
        }
        if !is_mcp {
            frame.extend_from_slice(b",\"result\":{\"success\":true,\"data\":");
        }
        let data_at = frame.len();
        let outcome = {
            let invocation = Invocation::new(
                tool.name.clone(),
                text(parts.context),
                parts.legacy,
                |id, deadline| {
                    InvokeLink::renew(
                        cached,
                        id,
                        deadline,
                        #[cfg(feature = "mcp")]
                        mcp,
                        #[cfg(feature = "mcp")]
                        bound,
                        &self.peer,
                    )
                },
            );
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                (tool.handler)(arguments, &tool.params, &invocation, frame)
            }));
            *link = Some(invocation.link_arc());
            outcome
            // The invoke ends here, as the invocation drops (in place: a move of it is a
            // copy): its secrets are wiped and its handles refuse new calls.
        };
        match outcome {
            #[cfg(feature = "mcp")]
            #[cfg(feature = "mcp")]
            Ok(Ok(())) if is_mcp => super::mcp::finish(frame, data_at, stateless),
            #[cfg(feature = "mcp")]
            Ok(Err(e)) if is_mcp => {
                frame.clear();
                super::mcp::tool_error(frame, id, e.message(), e.details(), stateless);
            }
            Ok(Ok(())) => {
                if frame.get(data_at) != Some(&b'{') {
                    frame.splice(data_at..data_at, b"{\"value\":".iter().copied());
                    frame.push(b'}');
                }
                frame.extend_from_slice(b"}}\n");
            }
            Ok(Err(e)) if e.is_invalid_arguments() => {
                frame.clear();
                let mut error = RpcError::new(codes::INVALID_PARAMS, e.message());
                error.data = e.details().cloned();
                wire::write_error_to(frame, id, &error);
            }
            Ok(Err(e)) => {
                frame.clear();
                wire::write_result_by(frame, id, |out| {
                    write_failure(out, e.message(), e.details(), None);
                });
            }
            Err(panic) => {
                let what = panic_message(panic.as_ref());
                // A payload may panic again as it drops; that is the handler's too.
                if let Err(again) = catch_unwind(AssertUnwindSafe(|| drop(panic))) {
                    std::mem::forget(again);
                }
                static PANICS: crate::log_limit::LogLimit = crate::log_limit::LogLimit::new();
                if PANICS.allow("tool panicked") {
                    log::error!("executa: tool `{}` panicked: {what}", tool.spec.name);
                }
                let msg = format!(
                    "tool `{}` panicked; details are in the plugin's stderr",
                    tool.spec.name
                );
                let error = RpcError::with_code(codes::INTERNAL_ERROR, "HANDLER_PANIC", msg);
                frame.clear();
                wire::write_error_to(frame, id, &error);
            }
        }
    }

    /// Replaces a reply frame over the cap: an invoke's with a failure (`success:false`,
    /// both sizes), an MCP call's with an `isError` result, any other's with a -32603
    /// `RESULT_TOO_LARGE` error. One within the cap is left as it is.
    fn cap(&self, frame: &mut Vec<u8>, id: &[u8], kind: Reply) {
        let (size, max) = (frame.len(), self.opts.max_result_bytes);
        if size <= max {
            return;
        }
        frame.clear();
        static TOO_LARGE: crate::log_limit::LogLimit = crate::log_limit::LogLimit::new();
        if TOO_LARGE.allow("reply too large") {
            log::warn!(
                "executa: a reply of {size} bytes exceeds the {max}-byte limit; sent as RESULT_TOO_LARGE"
            );
        }
        #[cfg(feature = "mcp")]
        if let Reply::Mcp(stateless) = kind {
            // MCP has no files/* to point to.
            let error = format!(
                "result too large: the response is {size} bytes, above the {max}-byte limit"
            );
            return super::mcp::tool_error(frame, id, &error, None, stateless);
        }
        let error = format!(
            "result too large: the response is {size} bytes, above the {max}-byte limit; \
             send large payloads through files/* or host/uploadFile"
        );
        if kind == Reply::Other {
            let error = RpcError::with_code(codes::INTERNAL_ERROR, "RESULT_TOO_LARGE", error);
            wire::write_error_to(frame, id, &error);
            return;
        }
        wire::write_result_by(frame, id, |out| {
            write_failure(out, &error, None, Some((size, max)));
        });
    }

    pub(crate) fn reply_error(&self, id: &[u8], error: &RpcError) {
        let mut frame = Vec::with_capacity(128);
        wire::write_error_to(&mut frame, id, error);
        self.peer.out.send(frame, self.more());
    }
}

/// Sends the reply of a 2026-07-28 call where it is owed: to the retry that resumed it
/// (the frame's `id` replaced), or nowhere when its request was answered with an input
/// request and no retry came (the handler was released at its deadline).
#[cfg(feature = "mcp")]
fn retarget(
    frame: &mut Vec<u8>,
    id: &[u8],
    link: Option<&mut Arc<InvokeLink>>,
    peer: &super::reverse::Peer,
) {
    use super::mcp::Owed;
    let Some(link) = link else { return };
    // Most calls end with no handle left to their invoke: their state is read unlocked.
    let closed = match Arc::get_mut(link) {
        Some(alone) => alone
            .mcp_call_mut()
            .and_then(|c| c.stateless.as_mut())
            .map(|s| s.close_alone(peer)),
        None => link
            .mcp_call()
            .and_then(|c| c.stateless.as_ref())
            .map(|s| s.close(peer)),
    };
    let Some((owed, cancelled)) = closed else {
        return;
    };
    if cancelled {
        // The spec's SHOULD NOT answer a cancelled request.
        frame.clear();
        return;
    }
    match owed {
        Owed::First => {}
        Owed::Asked(_) | Owed::Gone | Owed::Closed => {
            log::debug!("executa: a tools/call ended with its request answered already");
            frame.clear();
        }
        Owed::Retry(to) => {
            const HEAD: usize = b"{\"jsonrpc\":\"2.0\",\"id\":".len();
            if frame.get(HEAD..HEAD + id.len()) == Some(id) {
                frame.splice(HEAD..HEAD + id.len(), to.bytes());
            } else if !frame.is_empty() {
                log::error!("executa: internal error: a reply without its id; dropped");
                frame.clear();
            }
        }
    }
}

/// Which kind of request a reply answers, for the shape of its refusal when too large.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reply {
    /// An Executa `invoke`: a `success:false` envelope.
    Invoke,
    /// An MCP `tools/call`: an `isError` result (`true`: of 2026-07-28, which says
    /// `resultType`).
    #[cfg(feature = "mcp")]
    Mcp(bool),
    /// Anything else: a JSON-RPC error.
    Other,
}

impl Reply {
    fn of(parts: &InvokeParts) -> Reply {
        #[cfg(feature = "mcp")]
        if let Some(call) = &parts.mcp {
            return Reply::Mcp(call.is_stateless());
        }
        let _ = parts;
        Reply::Invoke
    }
}

/// Appends the envelope of a failed invoke: `{success:false, error, details?, data?}`,
/// where `data` is given for a result too large (its size and the cap).
fn write_failure(
    out: &mut Vec<u8>,
    error: &str,
    details: Option<&Value>,
    too_large: Option<(usize, usize)>,
) {
    out.extend_from_slice(b"{\"success\":false,\"error\":");
    json_text::write_str(out, error);
    if let Some(details) = details {
        out.extend_from_slice(b",\"details\":");
        json_text::write_value(out, details);
    }
    if let Some((size, max)) = too_large {
        out.extend_from_slice(
            b",\"data\":{\"errorCode\":\"RESULT_TOO_LARGE\",\"result_size_bytes\":",
        );
        wire::serialize_into(out, &size);
        out.extend_from_slice(b",\"max_payload_bytes\":");
        wire::serialize_into(out, &max);
        out.push(b'}');
    }
    out.push(b'}');
}

fn shutting_down() -> RpcError {
    RpcError::with_code(
        codes::SERVER_BUSY,
        "SHUTTING_DOWN",
        "the plugin is shutting down",
    )
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}
