//! What a host's reverse-call handlers see and implement: one call from the plugin, one
//! progress event, and the [`Service`] trait a backend implements.

use std::time::Duration;

use serde_json::Value;

use crate::error::RpcError;
use crate::id::Id;

/// A handler for one reverse method.
pub type HandlerFn = dyn Fn(&ReverseCall) -> Result<Value, RpcError> + Send + Sync;

/// A progress callback.
pub type ProgressFn = dyn Fn(&Progress) + Send + Sync;

/// A backend answering a family of reverse methods (for example `storage/*`).
pub trait Service: Send + Sync {
    /// Whether this service answers `method`.
    fn handles(&self, method: &str) -> bool;
    /// Answers one call. Runs on a reverse-call worker thread; it may block, but while it
    /// does that worker serves nothing else. (On the host's reader thread instead, for a
    /// service that says it is quick.)
    fn call(&self, call: &ReverseCall) -> Result<Value, RpcError>;

    /// Answers one call as [`Service::call`] does, writing the result as JSON text into
    /// `out` (the reply frame, up to its `result` member) instead of returning a `Value`.
    /// The host answers every call through this method. The default calls
    /// [`Service::call`] and serializes its `Value`; a backend may write its answer
    /// directly and spare the `Value` tree (the echoing
    /// [`ScriptedSampling`](super::ScriptedSampling) does). Write one JSON value; nothing
    /// written is sent as `null`. On `Err` whatever was written is discarded and the error
    /// is sent. Runs where `call` would, and may block as `call` may.
    fn call_into(&self, call: &ReverseCall, out: &mut Vec<u8>) -> Result<(), RpcError> {
        let value = self.call(call)?;
        crate::wire::serialize_into(out, &value);
        Ok(())
    }

    /// Whether every call returns at once, never blocking (an in-memory backend). Such a
    /// service is answered on the host's reader thread, sparing the hand-off to a worker
    /// (a thread wake-up, 20-30 µs on a VM), unless a closure given to
    /// [`Handlers::on`](super::Handlers::on) answers the method or frames wait in the
    /// write queue (then a worker answers, as for any service). A slow one there would hold
    /// up every reply from the plugin, and a call to the [`Host`](super::Host) from it waits
    /// for a reply only the reader settles: it fails at its timeout. Default `false`.
    fn is_quick(&self) -> bool {
        false
    }
}

/// One reverse call from the plugin, as a handler sees it.
#[derive(Clone, Debug)]
pub struct ReverseCall {
    /// The method, e.g. `sampling/createMessage`.
    pub method: String,
    /// The params with the routing fields `context` and `_clientTimeoutS` removed
    /// (an empty object when the plugin sent none).
    pub params: Value,
    /// The invoke this call belongs to (resolved as the Agent does; see
    /// [`HostOptions::strict_invoke_context`](super::HostOptions::strict_invoke_context)).
    pub invoke_id: Option<String>,
    /// The plugin's own timeout hint (`_clientTimeoutS`).
    pub client_timeout: Option<Duration>,
    /// The request id as the plugin sent it.
    pub id: Id,
}

/// One `executa/progress` notification.
#[derive(Clone, Debug)]
pub struct Progress {
    /// `params.context.invoke_id`, which correlates the event with its invoke.
    pub invoke_id: Option<String>,
    /// `progress` or `tool_update` (any other type is reported as `progress`, as the Agent
    /// does, so a plugin cannot fake other states).
    pub kind: String,
    /// `params.data`.
    pub data: Value,
    /// Whether `invoke_id` names an invoke in flight at the time (the Agent drops the rest).
    pub active: bool,
    /// The label of the plugin that sent it.
    pub plugin: String,
}
