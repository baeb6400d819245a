//! Serving the plugin's reverse calls and progress notifications.
//!
//! The host author supplies [`Handlers`]: closures per method and/or [`Service`]s (such as
//! the in-memory backends). Reverse calls run on a small pool of worker threads, so a slow
//! handler cannot stall replies to other calls; only a service that declares itself quick
//! ([`Service::is_quick`]: the in-memory backends) is answered on the reader thread, while
//! the write queue is idle. Progress events go to one event thread, in order, through a
//! bounded queue (dropped when full: progress is best-effort on the platform too).

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, bounded};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::mcp_reverse::{self, SAMPLING};
use super::options::HostOptions;
use super::service::{HandlerFn, Progress, ProgressFn, ResultWriter, ReverseCall, Service};
use super::shared::Shared;
use crate::error::{RpcError, codes};
use crate::id::Id;
use crate::lock::lock;
use crate::log_limit::NamedLimit;
use crate::protocol::{MAX_STORAGE_CALLS_PER_INVOKE, ProtocolVersion};
use crate::threads::spawn as spawn_named;
use crate::wire;

// The plugin decides how many calls and events arrive: their lines are limited
// (`crate::log_limit`).
pub(super) static QUICK_ANSWER_DROPPED: NamedLimit = NamedLimit::new("quick answer dropped");
pub(super) static PROGRESS_DROPPED: NamedLimit = NamedLimit::new("progress event dropped");
pub(super) static PROGRESS_PANICKED: NamedLimit = NamedLimit::new("progress callback panicked");

/// The reverse-call handlers and progress callback of a host.
#[derive(Clone, Default)]
pub struct Handlers {
    methods: HashMap<String, Arc<HandlerFn>>,
    services: Vec<Arc<dyn Service>>,
    progress: Option<Arc<ProgressFn>>,
}

impl Handlers {
    /// No handlers: every reverse call is answered -32601, progress is dropped.
    pub fn new() -> Self {
        Handlers::default()
    }

    /// The in-memory development backends: [`MemoryStorage`](super::MemoryStorage) for
    /// `storage/*` and an echoing [`ScriptedSampling`](super::ScriptedSampling).
    pub fn dev_backends() -> Self {
        Handlers::new()
            .service(Arc::new(super::backends::MemoryStorage::new()))
            .service(Arc::new(super::backends::ScriptedSampling::echo()))
    }

    /// Answers `method` with `f` (takes precedence over services).
    pub fn on<F>(mut self, method: impl Into<String>, f: F) -> Self
    where
        F: Fn(&ReverseCall) -> Result<Value, RpcError> + Send + Sync + 'static,
    {
        self.methods.insert(method.into(), Arc::new(f));
        self
    }

    /// Adds a service; services are asked in the order added.
    pub fn service(mut self, service: Arc<dyn Service>) -> Self {
        self.services.push(service);
        self
    }

    /// Delivers `executa/progress` notifications to `f`, in order, on one event thread.
    pub fn on_progress<F>(mut self, f: F) -> Self
    where
        F: Fn(&Progress) + Send + Sync + 'static,
    {
        self.progress = Some(Arc::new(f));
        self
    }

    /// Answers `call`, writing its result's JSON into `out` (see [`Service::call_into`]).
    fn call_into(&self, call: &ReverseCall, out: &mut Vec<u8>) -> Result<(), RpcError> {
        let out = ResultWriter::new(out);
        if let Some(f) = self.methods.get(&call.method) {
            out.write(&f(call)?);
            return Ok(());
        }
        match self.services.iter().find(|s| s.handles(&call.method)) {
            Some(s) => s.call_into(call, out).map(drop),
            None => Err(no_handler(&call.method)),
        }
    }

    /// Answers `call` on the calling thread, as a [`Host`](super::Host)'s reader answers a
    /// quick service's call (the result serialized straight into the frame with
    /// [`Service::call_into`]), but without the gates and invoke routing a `Host` applies
    /// first: appends the whole answer frame to `out`, `{"jsonrpc":"2.0","id":..,"result":..}`
    /// or the error (-32601 when nothing answers `call.method`, -32603 when a handler
    /// panics), newline-terminated. For drivers that read the plugin's pipes themselves
    /// (`executa bench`). Blocks as long as the handler does.
    pub fn answer_into(&self, call: &ReverseCall, out: &mut Vec<u8>) {
        write_answer(out, &call.id, &call.method, |frame| {
            self.call_into(call, frame)
        });
    }

    /// Answers `call` as a `Value` (a closure's, else the first service's that handles
    /// it): for an answer that is reshaped before it is sent (an MCP server's sampling).
    fn call_value(&self, call: &ReverseCall) -> Result<Value, RpcError> {
        if let Some(f) = self.methods.get(&call.method) {
            return f(call);
        }
        match self.services.iter().find(|s| s.handles(&call.method)) {
            Some(s) => s.call(call),
            None => Err(no_handler(&call.method)),
        }
    }

    /// Whether `method` is answered by a quick service (not a closure, whose cost nobody
    /// declared).
    fn is_quick(&self, method: &str) -> bool {
        !self.methods.contains_key(method)
            && self
                .services
                .iter()
                .find(|s| s.handles(method))
                .is_some_and(|s| s.is_quick())
    }

    /// Whether a closure or a service answers `method`.
    fn handles(&self, method: &str) -> bool {
        self.methods.contains_key(method) || self.services.iter().any(|s| s.handles(method))
    }
}

fn no_handler(method: &str) -> RpcError {
    RpcError::with_code(
        codes::METHOD_NOT_FOUND,
        "METHOD_NOT_FOUND",
        format!("the host has no handler for `{method}`"),
    )
}

impl fmt::Debug for Handlers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut methods: Vec<_> = self.methods.keys().collect();
        methods.sort();
        f.debug_struct("Handlers")
            .field("methods", &methods)
            .field("services", &self.services.len())
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

/// A reverse request waiting for a worker.
pub(crate) struct Job {
    pub(crate) shared: Arc<Shared>,
    pub(crate) id: Id,
    pub(crate) method: String,
    pub(crate) params: Option<Box<RawValue>>,
}

/// The worker pool and event thread of one host, shared by its successive processes.
/// The threads end when the last clone is dropped (their queues disconnect).
#[derive(Clone)]
pub(crate) struct Dispatcher {
    jobs: Sender<Task>,
    events: Option<Sender<EventMsg>>,
    handlers: Arc<Handlers>,
}

/// What a worker receives: a call to serve, or the answer to a quick call that the reader
/// could not queue without waiting (another thread filled the write queue meanwhile).
enum Task {
    Serve(Job),
    Send(Job, Vec<u8>),
}

/// What the event thread receives: an event, or a marker to acknowledge once every event
/// queued before it has been delivered.
enum EventMsg {
    Progress(Progress),
    Sync(Sender<()>),
}

impl Dispatcher {
    pub(crate) fn start(handlers: Handlers, opts: &HostOptions, label: &str) -> io::Result<Self> {
        let progress = handlers.progress.clone();
        let handlers = Arc::new(handlers);
        let (jobs, rx) = bounded::<Task>(opts.reverse_queue.max(1));
        for i in 0..opts.reverse_workers.max(1) {
            let (rx, handlers) = (rx.clone(), handlers.clone());
            spawn_named(format!("executa-rpc{i}:{label}"), move || {
                worker(&rx, &handlers)
            })?;
        }
        let events = match progress {
            Some(cb) => {
                let (tx, rx) = bounded::<EventMsg>(opts.progress_queue.max(1));
                spawn_named(format!("executa-evt:{label}"), move || {
                    event_loop(&rx, &*cb)
                })?;
                Some(tx)
            }
            None => None,
        };
        Ok(Dispatcher {
            jobs,
            events,
            handlers,
        })
    }

    /// Answers a reverse call on the calling (reader) thread when a quick service answers
    /// it and the write queue is empty; hands it back otherwise, for the workers. Never
    /// waits: an answer that finds the queue filled meanwhile goes to a worker, which
    /// waits for room (dropped, with a warning, only when the pool is full too).
    pub(crate) fn serve_quick(&self, job: Job) -> Result<(), Job> {
        // `is_quick` asks the host author's services: a panic there leaves the call to
        // a worker, which answers it -32603.
        let quick = catch_unwind(AssertUnwindSafe(|| self.handlers.is_quick(&job.method)));
        if !(quick.unwrap_or(false) && job.shared.out.is_idle()) {
            return Err(job);
        }
        let frame = answer(&self.handlers, &job);
        if let Err(frame) = job.shared.out.try_send(frame)
            && let Err(e) = self.jobs.try_send(Task::Send(job, frame))
            && let Task::Send(job, _) | Task::Serve(job) = e.into_inner()
            && QUICK_ANSWER_DROPPED.allow()
        {
            log::warn!(
                "[plugin:{}] write queue and reverse-call pool full: an answer was dropped",
                job.shared.label
            );
        }
        Ok(())
    }

    /// Queues a reverse call without blocking; hands it back when the pool is saturated.
    pub(crate) fn submit(&self, job: Job) -> Result<(), Job> {
        self.jobs
            .try_send(Task::Serve(job))
            .map_err(|e| match e.into_inner() {
                Task::Serve(job) | Task::Send(job, _) => job,
            })
    }

    /// Queues a progress event without blocking; dropped when nobody listens or the queue
    /// is full.
    pub(crate) fn progress(&self, shared: &Shared, params: Option<&RawValue>) {
        let Some(events) = &self.events else { return };
        let params: Value = params
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or(Value::Null);
        let invoke_id = params
            .pointer("/context/invoke_id")
            .or_else(|| params.get("invoke_id"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let kind = match params.get("type").and_then(Value::as_str) {
            Some("tool_update") => "tool_update",
            _ => "progress",
        };
        let active = invoke_id
            .as_ref()
            .is_some_and(|id| shared.invoke_active(id));
        let event = Progress {
            invoke_id,
            kind: kind.to_owned(),
            data: params.get("data").cloned().unwrap_or(Value::Null),
            active,
            plugin: shared.label.clone(),
        };
        deliver(events, shared, event);
    }

    /// Queues an MCP server's `notifications/progress` as a progress event, as
    /// [`Dispatcher::progress`] does an Executa plugin's.
    pub(crate) fn progress_mcp(&self, shared: &Shared, params: Option<&RawValue>) {
        if let Some(events) = &self.events {
            deliver(
                events,
                shared,
                super::mcp_reverse::progress_event(shared, params),
            );
        }
    }

    /// Whether a progress callback is set (an MCP `tools/call` then asks for progress).
    pub(crate) fn has_progress(&self) -> bool {
        self.events.is_some()
    }

    /// Whether a closure or a service answers `method`; a service that panics there
    /// answers nothing.
    pub(crate) fn handles(&self, method: &str) -> bool {
        catch_unwind(AssertUnwindSafe(|| self.handlers.handles(method))).unwrap_or(false)
    }

    /// Answers `call` as a `Value` on the calling thread (a panicking handler is -32603):
    /// an MCP 2026-07-28 server's sampling request, which comes embedded in a
    /// `tools/call` result and is fulfilled by the thread that made the call. Blocks as
    /// long as the handler does.
    pub(crate) fn call_value(&self, call: &ReverseCall) -> Result<Value, RpcError> {
        catch_unwind(AssertUnwindSafe(|| self.handlers.call_value(call))).unwrap_or_else(|panic| {
            Err(RpcError::new(
                codes::INTERNAL_ERROR,
                format!(
                    "the host's handler for `{}` panicked: {}",
                    call.method,
                    panic_text(&*panic)
                ),
            ))
        })
    }
}

/// Queues an event without blocking; dropped (and logged, limited) when the queue is full.
fn deliver(events: &Sender<EventMsg>, shared: &Shared, event: Progress) {
    if events.try_send(EventMsg::Progress(event)).is_err()
        && log::log_enabled!(log::Level::Debug)
        && PROGRESS_DROPPED.allow()
    {
        log::debug!(
            "[plugin:{}] progress event dropped (queue full)",
            shared.label
        );
    }
}

impl Dispatcher {
    /// Waits until every progress event queued so far has reached the callback, at most
    /// `timeout`; `false` on timeout. Returns at once when there is no callback.
    pub(crate) fn sync_events(&self, timeout: Duration) -> bool {
        let Some(events) = &self.events else {
            return true;
        };
        let (tx, rx) = bounded(1);
        let deadline = std::time::Instant::now() + timeout;
        events.send_deadline(EventMsg::Sync(tx), deadline).is_ok()
            && rx.recv_deadline(deadline).is_ok()
    }
}

/// Blocks on the job queue; ends when every [`Dispatcher`] clone is gone.
fn worker(rx: &Receiver<Task>, handlers: &Handlers) {
    for task in rx {
        match task {
            Task::Serve(job) => serve(handlers, job),
            Task::Send(job, frame) => job.shared.send_reply(frame),
        }
    }
}

/// Blocks on the event queue; ends when every [`Dispatcher`] clone is gone.
fn event_loop(rx: &Receiver<EventMsg>, cb: &ProgressFn) {
    for msg in rx {
        match msg {
            EventMsg::Progress(event) => {
                if catch_unwind(AssertUnwindSafe(|| cb(&event))).is_err()
                    && PROGRESS_PANICKED.allow()
                {
                    log::error!("executa host: the progress callback panicked; event dropped");
                }
            }
            EventMsg::Sync(done) => {
                let _ = done.try_send(());
            }
        }
    }
}

fn serve(handlers: &Handlers, job: Job) {
    let frame = answer(handlers, &job);
    job.shared.send_reply(frame);
}

/// Runs the gates, the routing and the handler for one call: its answer frame.
fn answer(handlers: &Handlers, job: &Job) -> Vec<u8> {
    job.shared.count_reverse_call();
    let mut frame = Vec::with_capacity(256);
    write_answer(&mut frame, &job.id, &job.method, |out| {
        handle(handlers, job, out)
    });
    frame
}

/// Appends the answer frame to the call `id`: the result `write` writes straight into it,
/// or the error it returns, or -32603 when it panics. The host author's code runs in
/// `write` (`handles` too, not only `call`), maybe on the reader: a panic costs this call
/// its answer, never the thread.
fn write_answer(
    frame: &mut Vec<u8>,
    id: &Id,
    method: &str,
    write: impl FnOnce(&mut Vec<u8>) -> Result<(), RpcError>,
) {
    let mark = frame.len();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        wire::write_result_with(frame, id.as_raw().get().as_bytes(), write)
    }))
    .unwrap_or_else(|panic| {
        Err(RpcError::new(
            codes::INTERNAL_ERROR,
            format!(
                "the host's handler for `{method}` panicked: {}",
                panic_text(&*panic)
            ),
        ))
    });
    if let Err(e) = outcome {
        // Also what a panic left half written goes.
        frame.truncate(mark);
        wire::write_error(frame, id.as_raw(), &e);
    }
}

/// The gates, the routing and the handler for one call, its result written into `out`.
fn handle(handlers: &Handlers, job: &Job, out: &mut Vec<u8>) -> Result<(), RpcError> {
    if job.shared.is_mcp() {
        return handle_mcp(handlers, job, out);
    }
    let params: Value = job
        .params
        .as_ref()
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or(Value::Null);
    let prepared = prepare(&job.shared, handlers, &job.method, params, &job.id);
    // A method with no handler is not a refusal by the Agent's gates or routing.
    if let Err(refusal) = &prepared
        && (refusal.code != codes::METHOD_NOT_FOUND || handlers.handles(&job.method))
    {
        job.shared.record_refusal(&job.method, refusal);
    }
    handlers.call_into(&prepared?, out)
}

/// An MCP server's request: `ping` is answered `{}`, `sampling/createMessage` by the
/// sampling handler (the shapes mapped both ways by `mcp_reverse`), anything else -32601.
/// The Executa gates and invoke routing do not apply: MCP requests carry no context.
fn handle_mcp(handlers: &Handlers, job: &Job, out: &mut Vec<u8>) -> Result<(), RpcError> {
    match job.method.as_str() {
        "ping" => out.extend_from_slice(b"{}"),
        SAMPLING if handlers.handles(SAMPLING) => {
            let call = mcp_reverse::sampling_call(&job.shared, job.params.as_deref(), &job.id);
            let answer = mcp_reverse::sampling_result(&handlers.call_value(&call)?)?;
            wire::serialize_into(out, &answer);
        }
        method => return Err(mcp_reverse::not_served(method)),
    }
    Ok(())
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned())
}

/// Applies the Agent's gates and invoke routing, and strips the routing fields.
fn prepare(
    shared: &Shared,
    handlers: &Handlers,
    method: &str,
    params: Value,
    id: &Id,
) -> Result<ReverseCall, RpcError> {
    if shared.opts.gate_reverse_calls {
        gate(shared, method)?;
    }
    // A method nobody answers is -32601 whatever its context: routing errors (-32602)
    // are only for calls that could have been served.
    if !handlers.handles(method) {
        return Err(no_handler(method));
    }
    let (params, claimed, client_timeout) = match params {
        Value::Object(mut m) => {
            let context = m.remove("context");
            let hint = m.remove("_clientTimeoutS").and_then(|v| v.as_f64());
            let claimed = context
                .as_ref()
                .and_then(|c| c.get("invoke_id"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            (
                Value::Object(m),
                claimed,
                hint.and_then(|s| Duration::try_from_secs_f64(s).ok()),
            )
        }
        Value::Null => (Value::Object(Map::new()), None, None),
        other => (other, None, None),
    };
    let invoke_id = if shared.opts.strict_invoke_context {
        route(shared, claimed)?
    } else {
        claimed
    };
    if shared.opts.gate_reverse_calls {
        charge(shared, method, invoke_id.as_deref())?;
    }
    Ok(ReverseCall {
        method: method.to_owned(),
        params,
        invoke_id,
        client_timeout,
        id: id.clone(),
    })
}

/// Whether a capability string makes the platform mint a `storage_token` (one predicate
/// for the mint: `aps`, `aps.kv`, `aps.files` or any `aps.scope.*`).
pub(crate) fn grants_storage(cap: &str) -> bool {
    matches!(cap, "aps" | "aps.kv" | "aps.files") || cap.starts_with("aps.scope.")
}

/// Refuses a reverse call the Agent would refuse, by the same rule and with the same codes
/// as the plugin side checks before sending (`crate::protocol::gate`), so `executa check`
/// never passes a call the plugin's own runtime would refuse, or the other way round.
fn gate(shared: &Shared, method: &str) -> Result<(), RpcError> {
    let v2 = shared.protocol() != Some(ProtocolVersion::V1);
    match shared.manifest() {
        Some(manifest) => crate::protocol::gate(method, &manifest.host_capabilities, v2),
        None if !v2 => crate::protocol::gate(method, &[], false),
        None => Ok(()),
    }
}

/// Counts a call against its invoke's budget, as the Agent does, refusing it once spent:
/// `storage/*` and `files/*` share [`MAX_STORAGE_CALLS_PER_INVOKE`] (the `storage_token`'s
/// `max_calls`), -32024 `QUOTA_EXCEEDED` past it, final for the invoke. (The sampling
/// budgets depend on the answers' token counts, so the sampling backends keep them.) A
/// call that names no invoke in flight has no budget to spend.
fn charge(shared: &Shared, method: &str, invoke_id: Option<&str>) -> Result<(), RpcError> {
    if !crate::protocol::spends_storage_budget(method) {
        return Ok(());
    }
    let mut active = lock(&shared.invokes);
    let Some(usage) = invoke_id.and_then(|id| active.get_mut(id)) else {
        return Ok(());
    };
    if usage.storage_calls >= MAX_STORAGE_CALLS_PER_INVOKE {
        return Err(crate::protocol::storage_budget_spent());
    }
    usage.storage_calls += 1;
    Ok(())
}

/// The Agent's routing table for `params.context.invoke_id`.
fn route(shared: &Shared, claimed: Option<String>) -> Result<Option<String>, RpcError> {
    let active = lock(&shared.invokes);
    let err = |sym: &str, why: String| RpcError::with_code(codes::INVALID_PARAMS, sym, why);
    match claimed {
        Some(id) if active.contains_key(&id) => Ok(Some(id)),
        Some(id) => Err(err(
            "UNKNOWN_INVOKE_CONTEXT",
            format!("invoke_id {id:?} is not an invoke in flight"),
        )),
        None => match active.len() {
            1 => Ok(active.keys().next().cloned()),
            0 => Err(err(
                "UNKNOWN_INVOKE_CONTEXT",
                "reverse calls are served only while an invoke is in flight".into(),
            )),
            _ => Err(err(
                "MISSING_INVOKE_CONTEXT",
                "params.context.invoke_id is missing and several invokes are in flight".into(),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::service::Written;
    use crate::writer::{Out, Outbox, channel_with};

    /// A quick service whose call queues a frame of its own first: it stands in for
    /// another thread (a caller, a worker) filling the write queue while the reader runs
    /// a quick handler, which no check made before the handler can rule out.
    struct FillsTheQueue(Outbox);

    impl Service for FillsTheQueue {
        fn handles(&self, method: &str) -> bool {
            method == "test/quick"
        }
        fn call(&self, _: &ReverseCall) -> Result<Value, RpcError> {
            assert!(self.0.try_send(b"{\"other\":1}\n".to_vec()));
            Ok(Value::from("answered"))
        }
        fn is_quick(&self) -> bool {
            true
        }
    }

    /// Writes part of its result, then fails: by panicking halfway through the value
    /// (`test/panic`) or by returning an error after writing it whole (`test/error`); or
    /// answers a raw value laid out on several lines (`test/raw`).
    struct HalfWrites;

    struct PanicsHalfway;

    impl serde::Serialize for PanicsHalfway {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeMap;
            let mut map = s.serialize_map(None)?;
            map.serialize_entry("partial", &1)?;
            panic!("halfway");
        }
    }

    impl Service for HalfWrites {
        fn handles(&self, method: &str) -> bool {
            method.starts_with("test/")
        }
        fn call(&self, _: &ReverseCall) -> Result<Value, RpcError> {
            unreachable!("answered through call_into")
        }
        fn call_into<'a>(
            &self,
            call: &ReverseCall,
            out: ResultWriter<'a>,
        ) -> Result<Written<'a>, RpcError> {
            if call.method == "test/panic" {
                return Ok(out.write(&PanicsHalfway));
            }
            if call.method == "test/raw" {
                let raw = RawValue::from_string("{\r\n  \"a\": \"x\\ny\"\n}".to_owned());
                return Ok(out.write(&raw.expect("valid JSON")));
            }
            let _ = out.write("partial");
            Err(RpcError::new(-32001, "failed after writing"))
        }
    }

    /// A raw value's line breaks (white space) do not end the frame; one inside a string
    /// is escaped and stays.
    #[test]
    fn a_raw_value_on_several_lines_is_answered_on_one() {
        let (out, _inbox) = channel_with(4);
        let handlers = Handlers::new().service(Arc::new(HalfWrites));
        let frame = answer(&handlers, &quick_job("test/raw", out));
        let text = String::from_utf8(frame).expect("UTF-8");
        assert_eq!(text.matches('\n').count(), 1, "{text}");
        let reply: Value = serde_json::from_str(&text).expect("one JSON frame");
        assert_eq!(reply["result"]["a"], "x\ny", "{text}");
    }

    /// Whatever a failing service wrote stays out of the frame: only the error goes.
    #[test]
    fn a_service_failing_after_it_wrote_sends_only_its_error() {
        let (out, _inbox) = channel_with(4);
        let handlers = Handlers::new().service(Arc::new(HalfWrites));
        for (method, error) in [
            ("test/panic", "panicked: halfway"),
            ("test/error", "failed"),
        ] {
            let frame = String::from_utf8(answer(&handlers, &quick_job(method, out.clone())))
                .expect("UTF-8");
            assert!(
                frame.starts_with(r#"{"jsonrpc":"2.0","id":7,"error":{"#),
                "{frame}"
            );
            assert!(
                frame.contains(error) && !frame.contains("partial"),
                "{frame}"
            );
            assert!(
                frame.ends_with("}\n") && frame.matches('\n').count() == 1,
                "{frame}"
            );
        }
    }

    fn quick_job(method: &str, out: Outbox) -> Job {
        let opts = HostOptions {
            strict_invoke_context: false,
            ..HostOptions::default()
        };
        Job {
            shared: Shared::for_test(out, opts).expect("spawn `true`"),
            id: Id::number(7),
            method: method.into(),
            params: None,
        }
    }

    #[test]
    fn the_reader_never_waits_for_room_and_the_quick_answer_still_goes_out() {
        let (out, inbox) = channel_with(1);
        let handlers = Handlers::new().service(Arc::new(FillsTheQueue(out.clone())));
        let dispatch = Dispatcher::start(handlers, &HostOptions::default(), "t").unwrap();
        let job = quick_job("test/quick", out);
        let (done_tx, done_rx) = bounded(1);
        std::thread::spawn(move || {
            let _ = done_tx.send(dispatch.serve_quick(job).is_ok());
        });
        // The queue stays full until the reader is back: waiting there would be the
        // reader waiting for the plugin to read its stdin (which may be waiting for us to
        // read its stdout), and the answer dropped after REPLY_SEND_WAIT.
        let served = done_rx.recv_timeout(Duration::from_secs(60));
        assert_eq!(served, Ok(true), "the reader returned, the call taken");
        let mut frames = Vec::new();
        while frames.len() < 2 {
            match inbox.receiver().recv_timeout(Duration::from_secs(30)) {
                Ok(Out::Frame(f)) => {
                    inbox.written(f.len());
                    frames.push(String::from_utf8(f).unwrap());
                }
                other => panic!(
                    "the answer was lost ({:?}); queued: {frames:?}",
                    other.is_ok()
                ),
            }
        }
        assert!(frames[1].contains(r#""id":7"#), "{frames:?}");
        assert!(frames[1].contains("answered"), "{frames:?}");
    }
}
