//! What the dispatch and worker threads do with each job: the lifecycle methods and the
//! invoke path.

use std::borrow::Cow;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crossbeam_channel::RecvTimeoutError;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::error::{RpcError, codes};
use crate::id::Id;
use crate::secret::wipe;
use crate::{spin, wire};

use super::context::{Invocation, LegacyFields};
use super::events::Event;
use super::health::Health;
use super::job::{InvokeJob, Job, Method};
use super::pool::Admit;
use super::reverse::InvokeLink;
use super::service::Service;

#[derive(Deserialize)]
struct InvokeParams<'a> {
    #[serde(borrow, alias = "name")]
    tool: Cow<'a, str>,
    #[serde(default, borrow)]
    arguments: Option<&'a RawValue>,
    #[serde(default, borrow)]
    context: Option<&'a RawValue>,
    #[serde(default)]
    invoke_id: Option<Value>,
    #[serde(default)]
    sampling_token: Option<String>,
    #[serde(default)]
    storage_token: Option<String>,
}

impl Service {
    /// Starts one extra worker thread (already counted by the pool).
    pub(crate) fn spawn_worker(self: &Arc<Self>) {
        let rt = self.clone();
        if let Err(e) = crate::threads::spawn("executa-worker".into(), move || rt.work(false)) {
            log::error!("executa: could not start a worker thread: {e}");
            self.pool.spawn_failed();
        }
    }

    /// The loop of the dispatch thread (`permanent`) and of extra workers, which exit
    /// after `worker_linger` without work.
    pub(crate) fn work(&self, permanent: bool) {
        loop {
            let job = if permanent {
                spin::recv(&self.jobs, self.spin).map_err(|_| RecvTimeoutError::Disconnected)
            } else {
                spin::recv_timeout(&self.jobs, self.spin, self.opts.worker_linger)
            };
            match job {
                Ok(job) => {
                    self.pool.took();
                    // Handlers are already isolated; this guards the runtime's own code so
                    // a bug there cannot leave a thread counted busy forever.
                    if catch_unwind(AssertUnwindSafe(|| self.handle(job))).is_err() {
                        log::error!(
                            "executa: internal error while handling a request (see the panic above)"
                        );
                    }
                    if self.pool.done() {
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

    /// Handles one job on the calling thread.
    pub(crate) fn handle(&self, job: Job) {
        match job {
            Job::Reject { id, error } => self.reply_error(&id, &error),
            Job::Request {
                id: None, method, ..
            } => {
                log::debug!("executa: ignoring notification {method:?}");
            }
            Job::Request {
                id: Some(id),
                method,
                params,
            } => self.request(id, method, params),
        }
    }

    fn request(&self, id: Id, method: Method, params: Option<Box<RawValue>>) {
        let params_text = params.as_deref().map_or("null", RawValue::get);
        match method {
            Method::Invoke => self.invoke(id, params),
            Method::Describe => self.reply(&id, &self.manifest_json),
            Method::Health => {
                let health = match &self.health {
                    Some(hook) => catch_unwind(AssertUnwindSafe(hook)).unwrap_or_else(|_| {
                        log::error!("executa: the health hook panicked");
                        Health::error("health hook panicked")
                    }),
                    None => Health::ready(),
                };
                self.reply_value(&id, &health);
            }
            Method::Initialize => {
                let reply = self.peer.session.initialize(
                    params_text,
                    &self.name,
                    &self.version,
                    &self.uses,
                );
                self.reply_value(&id, &reply);
            }
            Method::Shutdown => {
                self.accepting.store(false, Ordering::Release);
                log::info!("executa: `shutdown` received; refusing new invokes until stdin closes");
                self.reply_value(&id, &Empty {});
            }
            Method::Other(name) => {
                let error =
                    RpcError::new(codes::METHOD_NOT_FOUND, format!("method not found: {name}"));
                self.reply_error(&id, &error);
            }
        }
    }

    fn invoke(&self, id: Id, params: Option<Box<RawValue>>) {
        let job = if self.accepting.load(Ordering::Acquire) {
            self.prepare_invoke(id, params.as_deref())
        } else {
            Err((id, shutting_down()))
        };
        // The params text held the context's secrets: wipe it now that they are copied
        // into the invocation (where they are wiped again when it ends).
        if let Some(p) = params {
            wipe(String::from(Box::<str>::from(p)));
        }
        let job = match job {
            Ok(job) => job,
            Err((id, error)) => return self.reply_error(&id, &error),
        };
        match self.pool.admit(job) {
            Admit::Run(job) => self.run_invokes(job),
            Admit::Deferred => {}
            Admit::Refuse(job) => {
                let error = RpcError::with_code(
                    codes::SERVER_BUSY,
                    "BUSY",
                    "too many invokes waiting; retry later",
                );
                self.reply_error(&job.id, &error);
            }
        }
    }

    fn prepare_invoke(
        &self,
        id: Id,
        params: Option<&RawValue>,
    ) -> Result<InvokeJob, (Id, RpcError)> {
        let text = params.map_or("null", RawValue::get);
        let p: InvokeParams<'_> = match serde_json::from_str(text) {
            Ok(p) => p,
            Err(e) => {
                let msg =
                    format!("invalid invoke params (expected {{tool, arguments, context}}): {e}");
                return Err((id, RpcError::new(codes::INVALID_PARAMS, msg)));
            }
        };
        let Some(tool) = self.tool_index(&p.tool) else {
            let msg = format!("unknown tool: {}", p.tool);
            return Err((
                id,
                RpcError::with_code(codes::METHOD_NOT_FOUND, "TOOL_NOT_FOUND", msg),
            ));
        };
        let arguments = match p.arguments {
            Some(a) if a.get() != "null" => a.to_owned(),
            _ => RawValue::from_string("{}".to_owned()).map_err(|e| (id.clone(), internal(e)))?,
        };
        let mut legacy = LegacyFields {
            invoke_id: p.invoke_id,
            tokens: Vec::new(),
        };
        if let Some(t) = p.sampling_token {
            legacy.tokens.push(("sampling_token", t));
        }
        if let Some(t) = p.storage_token {
            legacy.tokens.push(("storage_token", t));
        }
        let name = self.tools[tool].name.clone();
        let peer = &self.peer;
        let invocation = Invocation::new(name, p.context, legacy, |invoke_id, deadline| {
            InvokeLink::new(invoke_id, deadline, peer.clone())
        });
        Ok(InvokeJob {
            id,
            tool,
            arguments,
            invocation,
            admitted_early: true,
        })
    }

    /// Runs an admitted invoke, then any invokes that waited for its slot.
    fn run_invokes(&self, first: InvokeJob) {
        let mut next = Some(first);
        while let Some(job) = next {
            // Invokes that waited for a slot are refused once a signal stopped intake.
            let frame = if self.accepting.load(Ordering::Acquire) || job.admitted_early {
                self.execute(job)
            } else {
                let mut frame = Vec::with_capacity(128);
                wire::write_error(&mut frame, job.id.as_raw(), &shutting_down());
                frame
            };
            if !self.peer.out.send(frame) {
                log::debug!("executa: an invoke reply was lost: the output is closed");
            }
            next = self.pool.finish();
        }
    }

    /// Runs the handler and builds the response frame.
    fn execute(&self, job: InvokeJob) -> Vec<u8> {
        let InvokeJob {
            id,
            tool,
            arguments,
            invocation,
            ..
        } = job;
        let tool = &self.tools[tool];
        let mut frame = Vec::with_capacity(256);
        frame.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
        frame.extend_from_slice(id.as_str().as_bytes());
        frame.extend_from_slice(b",\"result\":{\"success\":true,\"data\":");
        let data_at = frame.len();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            (tool.handler)(&arguments, &tool.params, &invocation, &mut frame)
        }));
        // The invoke ends here: its secrets are wiped and its handles refuse new calls.
        drop(invocation);
        let frame = match outcome {
            Ok(Ok(())) => {
                if frame.get(data_at) != Some(&b'{') {
                    frame.splice(data_at..data_at, b"{\"value\":".iter().copied());
                    frame.push(b'}');
                }
                frame.extend_from_slice(b"}}\n");
                frame
            }
            Ok(Err(e)) if e.is_invalid_arguments() => {
                frame.clear();
                let error = RpcError::new(codes::INVALID_PARAMS, e.message());
                wire::write_error(&mut frame, id.as_raw(), &error);
                frame
            }
            Ok(Err(e)) => {
                let body = Failure {
                    success: false,
                    error: e.message(),
                    details: e.details(),
                    data: None,
                };
                value_frame(&id, &body)
            }
            Err(panic) => {
                let what = panic_message(panic.as_ref());
                log::error!("executa: tool `{}` panicked: {what}", tool.spec.name);
                let msg = format!(
                    "tool `{}` panicked; details are in the plugin's stderr",
                    tool.spec.name
                );
                let error = RpcError::with_code(codes::INTERNAL_ERROR, "HANDLER_PANIC", msg);
                frame.clear();
                wire::write_error(&mut frame, id.as_raw(), &error);
                frame
            }
        };
        // Every reply counts against the platform's payload cap, failures included.
        if frame.len() > self.opts.max_result_bytes {
            return self.too_large(&id, frame.len());
        }
        frame
    }

    fn too_large(&self, id: &Id, size: usize) -> Vec<u8> {
        let max = self.opts.max_result_bytes;
        log::warn!(
            "executa: a result of {size} bytes exceeds the {max}-byte limit; sent as a failure"
        );
        let error = format!(
            "result too large: the response is {size} bytes, above the {max}-byte limit; \
             send large payloads through files/* or host/uploadFile"
        );
        let data = TooLarge {
            error_code: "RESULT_TOO_LARGE",
            result_size_bytes: size,
            max_payload_bytes: max,
        };
        value_frame(
            id,
            &Failure {
                success: false,
                error: &error,
                details: None,
                data: Some(data),
            },
        )
    }

    fn reply(&self, id: &Id, result: &RawValue) {
        let mut frame = Vec::with_capacity(result.get().len() + 48);
        wire::write_response(&mut frame, id.as_raw(), result);
        self.peer.out.send(frame);
    }

    fn reply_value<T: Serialize>(&self, id: &Id, result: &T) {
        self.peer.out.send(value_frame(id, result));
    }

    pub(crate) fn reply_error(&self, id: &Id, error: &RpcError) {
        let mut frame = Vec::with_capacity(128);
        wire::write_error(&mut frame, id.as_raw(), error);
        self.peer.out.send(frame);
    }
}

/// Serializes as `{}`.
#[derive(Serialize)]
struct Empty {}

/// The envelope of a failed invoke: `{success:false, error, details?, data?}`.
#[derive(Serialize)]
struct Failure<'a> {
    success: bool,
    error: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<TooLarge>,
}

#[derive(Serialize)]
struct TooLarge {
    #[serde(rename = "errorCode")]
    error_code: &'static str,
    result_size_bytes: usize,
    max_payload_bytes: usize,
}

/// A response frame whose result is any serializable value.
fn value_frame<T: Serialize + ?Sized>(id: &Id, result: &T) -> Vec<u8> {
    let mut frame = Vec::with_capacity(128);
    frame.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    frame.extend_from_slice(id.as_str().as_bytes());
    frame.extend_from_slice(b",\"result\":");
    wire::serialize_into(&mut frame, result);
    frame.extend_from_slice(b"}\n");
    frame
}

fn shutting_down() -> RpcError {
    RpcError::with_code(
        codes::SERVER_BUSY,
        "SHUTTING_DOWN",
        "the plugin is shutting down",
    )
}

fn internal(e: impl std::fmt::Display) -> RpcError {
    RpcError::new(codes::INTERNAL_ERROR, e.to_string())
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
