//! What a host's reverse-call handlers see and implement: one call from the plugin, one
//! progress event, and the [`Service`] trait a backend implements.

use std::marker::PhantomData;
use std::time::Duration;

use serde::Serialize;
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
    /// service that says it is quick.) If the plugin is gone by the time it returns, the
    /// answer is dropped.
    fn call(&self, call: &ReverseCall) -> Result<Value, RpcError>;

    /// Answers one call as [`Service::call`] does, but serializes the result straight into
    /// the reply frame with `out` instead of returning a `Value`, so a backend can answer
    /// without building a `Value` tree (the echoing
    /// [`ScriptedSampling`](super::ScriptedSampling) does). [`Host`](super::Host) answers
    /// every call to a service through this method; the default calls [`Service::call`]
    /// and writes its `Value`, so a service that wraps another and implements only `call`
    /// answers through `call`. Both must give the same answer. Runs where `call` would and
    /// may block as it may; on `Err` the error is sent instead, and if the plugin is gone
    /// the answer is dropped.
    fn call_into<'a>(
        &self,
        call: &ReverseCall,
        out: ResultWriter<'a>,
    ) -> Result<Written<'a>, RpcError> {
        Ok(out.write(&self.call(call)?))
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

/// Where [`Service::call_into`] writes its result: straight into the reply frame, as
/// JSON, one value (so the frame stays well formed whatever the service writes; line
/// breaks in a `RawValue` it writes become spaces, so it stays one line too).
pub struct ResultWriter<'a> {
    out: &'a mut Vec<u8>,
    /// Invariant in `'a`: a [`Written`] proves a write to this very frame.
    _frame: PhantomData<fn(&'a ()) -> &'a ()>,
}

/// Proof that a [`ResultWriter`] wrote the result; only [`ResultWriter::write`] makes one.
pub struct Written<'a>(PhantomData<fn(&'a ()) -> &'a ()>);

impl<'a> ResultWriter<'a> {
    pub(crate) fn new(out: &'a mut Vec<u8>) -> ResultWriter<'a> {
        ResultWriter {
            out,
            _frame: PhantomData,
        }
    }

    /// Serializes `value` as the call's result. A value whose `Serialize` fails is sent as
    /// `null` (and logged). Never blocks.
    pub fn write<T: Serialize + ?Sized>(self, value: &T) -> Written<'a> {
        crate::wire::serialize_into(self.out, value);
        Written(PhantomData)
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
