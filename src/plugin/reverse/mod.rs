//! Reverse RPC: calls from a tool handler to the host, correlated by request id, and the
//! limits this crate checks before sending (the same the host enforces).
//!
//! A call is gated and budget-checked locally first (so the author gets a precise error
//! and nothing is sent), then registered in the pending table, then written. The reader
//! thread settles the answer straight into the waiting call. Every wait is bounded by the
//! smaller of the method's default timeout, the caller's, and the invoke's deadline; when
//! stdin closes, every waiting call fails at once.

pub mod files;
pub(crate) mod pending;
pub mod sampling;
pub mod storage;

pub use crate::protocol::{
    DEFAULT_MAX_SAMPLING_CALLS, DEFAULT_MAX_TOKENS_PER_CALL, MAX_PROGRESS_BYTES,
    MAX_PROGRESS_PER_SECOND, MAX_SAMPLING_TOKENS_PER_INVOKE, MAX_STORAGE_CALLS_PER_INVOKE,
    default_timeout,
};

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::RecvTimeoutError;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::error::{Error, Result, RpcError, codes};
use crate::protocol::gate;
use crate::wire;
use crate::writer::SendFailure;

use super::output::Output;
use super::relay::Relay;
use super::session::{Negotiated, Session};
use pending::Pending;

/// The plugin's connection to its host, shared by the reader and every invoke.
pub(crate) struct Peer {
    pub out: Output,
    pub pending: Pending,
    /// Where the reader parks its reading while it runs an invoke (`relay.rs`).
    pub relay: Arc<Relay>,
    pub session: Session,
    /// The manifest's `host_capabilities`.
    pub capabilities: Vec<String>,
    /// What serving an MCP client needs kept (the `mcp` feature).
    #[cfg(feature = "mcp")]
    pub mcp: super::mcp::State,
}

/// What one invoke has used so far.
#[derive(Default)]
struct Usage {
    /// Calls to the host of any kind.
    calls: u64,
    sampling_calls: u64,
    sampling_tokens: u64,
    storage_calls: u64,
    progress_sent: VecDeque<Instant>,
    progress_dropped: u64,
    /// The last `progress` value sent to an MCP client (it must increase).
    #[cfg(feature = "mcp")]
    mcp_progress: f64,
}

/// The shared state behind an [`InvokeHandle`]. It holds no secrets.
pub(crate) struct InvokeLink {
    invoke_id: Option<String>,
    deadline: Option<SystemTime>,
    pub ended: AtomicBool,
    usage: Mutex<Usage>,
    peer: Arc<Peer>,
    /// Set when the invoke is an MCP `tools/call`.
    #[cfg(feature = "mcp")]
    mcp: Option<Box<super::mcp::Call>>,
    /// What a 2026-07-28 call's input request needs of it (request id, arguments),
    /// when it may make one: kept in the link, whose buffer the next invoke reuses.
    #[cfg(feature = "mcp")]
    bound: Vec<u8>,
}

impl InvokeLink {
    /// The link of a new invoke. `cached` is the link of an earlier invoke on the same
    /// thread: when no handle to it survived its invoke, it is reset and reused, so the hot
    /// path allocates no link (nor its invoke id) once warm.
    pub fn renew(
        cached: Option<Arc<InvokeLink>>,
        invoke_id: Option<&str>,
        deadline: Option<SystemTime>,
        #[cfg(feature = "mcp")] mcp: Option<Box<super::mcp::Call>>,
        #[cfg(feature = "mcp")] bound: Option<(&[u8], &str)>,
        peer: &Arc<Peer>,
    ) -> Arc<Self> {
        if let Some(mut link) = cached
            && let Some(l) = Arc::get_mut(&mut link)
        {
            match (invoke_id, &mut l.invoke_id) {
                (Some(id), Some(kept)) => {
                    kept.clear();
                    kept.push_str(id);
                }
                (id, kept) => *kept = id.map(str::to_owned),
            }
            l.deadline = deadline;
            #[cfg(feature = "mcp")]
            {
                l.mcp = mcp;
                l.bound.clear();
                if let Some((id, arguments)) = bound {
                    super::mcp::bind(&mut l.bound, id, arguments);
                }
            }
            *l.ended.get_mut() = false;
            let usage = l.usage.get_mut().unwrap_or_else(PoisonError::into_inner);
            let mut sent = std::mem::take(&mut usage.progress_sent);
            sent.clear();
            *usage = Usage {
                progress_sent: sent,
                ..Usage::default()
            };
            return link;
        }
        Arc::new(InvokeLink {
            invoke_id: invoke_id.map(str::to_owned),
            deadline,
            ended: AtomicBool::new(false),
            usage: Mutex::new(Usage::default()),
            peer: peer.clone(),
            #[cfg(feature = "mcp")]
            mcp,
            #[cfg(feature = "mcp")]
            bound: bound.map_or_else(Vec::new, |(id, arguments)| {
                let mut text = Vec::new();
                super::mcp::bind(&mut text, id, arguments);
                text
            }),
        })
    }

    fn usage(&self) -> MutexGuard<'_, Usage> {
        crate::lock::lock(&self.usage)
    }

    /// The MCP side of the invoke, when it is a `tools/call`.
    #[cfg(feature = "mcp")]
    pub fn mcp_call(&self) -> Option<&super::mcp::Call> {
        self.mcp.as_deref()
    }

    /// The MCP side of a link no handle shares any more.
    #[cfg(feature = "mcp")]
    pub fn mcp_call_mut(&mut self) -> Option<&mut super::mcp::Call> {
        self.mcp.as_deref_mut()
    }

    /// Takes the MCP side out of a link no handle shares any more (its invoke ended).
    #[cfg(feature = "mcp")]
    pub fn take_mcp(&mut self) -> Option<Box<super::mcp::Call>> {
        self.mcp.take()
    }

    /// What `initialize` negotiated for the connection the invoke came on.
    #[cfg(feature = "mcp")]
    pub fn session(&self) -> &Session {
        &self.peer.session
    }

    /// Marks the invoke ended, under the usage lock that progress is sent under (see
    /// `InvokeHandle::send_progress_locked`).
    pub fn end(&self) {
        let _usage = self.usage();
        self.ended.store(true, Ordering::Release);
    }
}

/// A cloneable, `Send`, `'static` handle to one invoke, for reverse calls and progress,
/// also from threads the handler spawns. Every call fails with [`Error::InvokeEnded`]
/// once the invoke has ended.
#[derive(Clone)]
pub struct InvokeHandle(Arc<InvokeLink>);

impl std::fmt::Debug for InvokeHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InvokeHandle")
            .field("invoke_id", &self.0.invoke_id)
            .finish()
    }
}

impl InvokeHandle {
    pub(crate) fn from_link(link: Arc<InvokeLink>) -> Self {
        InvokeHandle(link)
    }

    pub(crate) fn link(&self) -> &InvokeLink {
        &self.0
    }

    pub(crate) fn link_arc(&self) -> Arc<InvokeLink> {
        self.0.clone()
    }

    /// The invoke's id, when the host sent one.
    pub fn invoke_id(&self) -> Option<&str> {
        self.0.invoke_id.as_deref()
    }

    /// The invoke's absolute deadline, when the host sent one.
    pub fn deadline(&self) -> Option<SystemTime> {
        self.0.deadline
    }

    /// Time left before the deadline (zero once passed); `None` without a deadline.
    pub fn remaining(&self) -> Option<Duration> {
        let d = self.0.deadline?;
        Some(
            d.duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO),
        )
    }

    /// Whether the invoke has ended.
    pub fn is_ended(&self) -> bool {
        self.0.ended.load(Ordering::Acquire)
    }

    /// Calls `method` on the host with the method's default timeout and returns the typed
    /// result. See [`InvokeHandle::call_raw`] for blocking and errors.
    pub fn call<P: Serialize + ?Sized, R: DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<R> {
        let raw = self.call_raw(method, params, None)?;
        Ok(serde_json::from_str(raw.get())?)
    }

    /// As [`InvokeHandle::call`], waiting at most `timeout` (still capped by the deadline).
    pub fn call_with_timeout<P: Serialize + ?Sized, R: DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
        timeout: Duration,
    ) -> Result<R> {
        let raw = self.call_raw(method, params, Some(timeout))?;
        Ok(serde_json::from_str(raw.get())?)
    }

    /// What `initialize` negotiated (all defaults when the host never sent it).
    pub fn negotiated(&self) -> Negotiated {
        self.0.peer.session.get()
    }

    /// Calls `method` on the host and returns its raw `result`.
    ///
    /// `params` must serialize to a JSON object; `context.invoke_id` and `_clientTimeoutS`
    /// are added. Blocks until the answer, bounded by the smallest of `timeout` (or the
    /// method's default, see [`default_timeout`]) and the time
    /// left before the invoke's deadline (writing the frame counts against the same bound
    /// when the output queue is full). Returns [`Error::Refused`] without sending
    /// anything when the capability is not declared, the session is v1 or a budget is
    /// spent; [`Error::Remote`] with the host's error; [`Error::Timeout`] (a late answer is
    /// dropped); [`Error::Disconnected`] at once when the host closes stdin or the plugin
    /// shuts down; [`Error::InvokeEnded`] after the invoke has ended.
    pub fn call_raw<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
        timeout: Option<Duration>,
    ) -> Result<Box<RawValue>> {
        let answer = self.exchange(method, params, timeout, None)?;
        if method == SAMPLING {
            self.record_tokens(&answer);
        }
        Ok(answer)
    }

    /// A sampling call whose answer is parsed once, for the caller and the token budget
    /// (a malformed answer still counts whatever usage it reports).
    fn create_message(
        &self,
        request: &sampling::CreateMessage,
        timeout: Option<Duration>,
    ) -> Result<sampling::SamplingResult> {
        let raw = self.exchange(SAMPLING, request, timeout, Some(request.max_tokens))?;
        match serde_json::from_str::<sampling::SamplingResult>(raw.get()) {
            Ok(result) => {
                // `TokenUsage` reads an absent `totalTokens` as 0.
                if let Some(u) = &result.usage {
                    let total = Some(u.total_tokens).filter(|&t| t > 0);
                    self.add_usage(total, u.input_tokens, u.output_tokens);
                }
                Ok(result)
            }
            Err(e) => {
                self.record_tokens(&raw);
                Err(e.into())
            }
        }
    }

    /// One call, without counting a sampling answer's tokens (the caller does, from the
    /// answer it parses anyway). `max_tokens`: a sampling request's `maxTokens` when the
    /// caller knows it, else it is read from the rendered params.
    fn exchange<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
        timeout: Option<Duration>,
        max_tokens: Option<u64>,
    ) -> Result<Box<RawValue>> {
        if self.is_ended() {
            return Err(Error::InvokeEnded);
        }
        let mut body = Vec::with_capacity(256);
        wire::write_json(&mut body, params)?;
        let mut body = object_params(method, body)?;
        let peer = &self.0.peer;
        self.gate(method).map_err(Error::Refused)?;
        let wait = self.wait_for(method, timeout);
        if wait.is_zero() {
            return Err(Error::Timeout {
                method: method.to_owned(),
                after: Duration::ZERO,
            });
        }
        let asked = match max_tokens {
            Some(n) => n,
            None if method == SAMPLING => asked_tokens(&body),
            None => 0,
        };
        self.charge(method, asked)?;
        // A typed sampling request (`max_tokens` given) has no such key to drop.
        if max_tokens.is_none() {
            drop_stamped_keys(&mut body)?;
        }
        let body = self.stamp(body, wait);
        #[cfg(feature = "mcp")]
        if let Some(stateless) = self.0.mcp.as_ref().and_then(|c| c.stateless.as_ref()) {
            return super::mcp::ask(peer, stateless, &self.0.bound, method, &body, wait);
        }
        send_and_wait(peer, method, &body, wait)
    }

    /// Refuses a call the host (or an MCP client) would refuse, before anything is sent.
    fn gate(&self, method: &str) -> std::result::Result<(), RpcError> {
        let peer = &self.0.peer;
        #[cfg(feature = "mcp")]
        if let Some(call) = &self.0.mcp {
            let samples = match &call.stateless {
                Some(s) => s.samples,
                None => peer.session.mcp_client_samples(),
            };
            return super::mcp::reverse_gate(method, &peer.capabilities, samples);
        }
        gate(
            method,
            &peer.capabilities,
            peer.session.reverse_rpc_allowed(),
        )
    }

    /// Appends `context.invoke_id` and `_clientTimeoutS` to rendered params, an object
    /// without either key (see `drop_stamped_keys`). An MCP client is sent the params as
    /// they are: both keys are Executa's.
    fn stamp(&self, mut body: Vec<u8>, wait: Duration) -> Vec<u8> {
        #[cfg(feature = "mcp")]
        if self.0.mcp.is_some() {
            return body;
        }
        body.pop();
        let mut comma = body.len() > 1;
        if let Some(id) = &self.0.invoke_id {
            if comma {
                body.push(b',');
            }
            body.extend_from_slice(b"\"context\":{\"invoke_id\":");
            wire::serialize_into(&mut body, id);
            body.push(b'}');
            comma = true;
        }
        if comma {
            body.push(b',');
        }
        body.extend_from_slice(b"\"_clientTimeoutS\":");
        wire::serialize_into(&mut body, &wait.as_secs_f64());
        body.push(b'}');
        body
    }

    /// Sends an `executa/progress` notification `{type, data, context:{invoke_id}}`.
    ///
    /// Never blocks and never fails loudly: it returns `false` and counts the event as
    /// dropped when the invoke has ended or has no invoke id (the host would drop it), the
    /// session is v1, `data` fails to serialize, more than 50 events were sent in the last
    /// second, the event exceeds 8 KiB, or the output queue is full.
    pub fn progress<D: Serialize + ?Sized>(&self, kind: &str, data: &D) -> bool {
        let sent = self.try_progress(kind, data);
        if !sent {
            self.0.usage().progress_dropped += 1;
        }
        sent
    }

    /// How many progress events of this invoke were dropped so far.
    pub fn progress_dropped(&self) -> u64 {
        self.0.usage().progress_dropped
    }

    fn try_progress<D: Serialize + ?Sized>(&self, kind: &str, data: &D) -> bool {
        // An MCP call needs no session: a 2026-07-28 one has none.
        #[cfg(feature = "mcp")]
        if let Some(call) = &self.0.mcp {
            return !self.is_ended() && self.mcp_progress(call, kind, data);
        }
        if self.is_ended() || !self.0.peer.session.reverse_rpc_allowed() {
            return false;
        }
        let (Some(id), Ok(data)) = (&self.0.invoke_id, serde_json::to_value(data)) else {
            return false;
        };
        let mut params = Map::new();
        params.insert("type".into(), json!(kind));
        params.insert("data".into(), data);
        params.insert("context".into(), json!({ "invoke_id": id }));
        let mut frame = Vec::with_capacity(256);
        wire::write_request(&mut frame, None, "executa/progress", &params);
        frame.len() <= MAX_PROGRESS_BYTES && self.send_progress(frame)
    }

    /// Progress to an MCP client: `notifications/progress` with the call's `progressToken`
    /// (none given: nothing is sent), within the same limits as Executa's events.
    #[cfg(feature = "mcp")]
    fn mcp_progress<D: Serialize + ?Sized>(
        &self,
        call: &super::mcp::Call,
        kind: &str,
        data: &D,
    ) -> bool {
        // A 2026-07-28 call's token is its current request's: none while it waits for
        // its client's retry (the request it came with was answered).
        let token = match &call.stateless {
            Some(stateless) => stateless.token(call.progress_token.as_deref()),
            None => call.progress_token.clone(),
        };
        let (Some(token), Ok(data)) = (token, serde_json::to_value(data)) else {
            return false;
        };
        // The last value sent is read and advanced under the same lock as the send, so
        // two threads of one invoke never send a decreasing `progress`.
        let mut usage = self.0.usage();
        let mut last = usage.mcp_progress;
        let params = super::mcp::progress_params(&token, kind, &data, &mut last);
        let mut frame = Vec::with_capacity(params.len() + 64);
        wire::write_request_raw(&mut frame, None, "notifications/progress", &params);
        // Each in a write of its own, apart from the reply (see `Output::progress_alone`).
        self.0.peer.out.progress_alone();
        let sent =
            frame.len() <= MAX_PROGRESS_BYTES && self.send_progress_locked(&mut usage, frame);
        if sent {
            usage.mcp_progress = last;
        }
        sent
    }

    /// Sends a progress frame unless the invoke has ended or the window is full.
    fn send_progress(&self, frame: Vec<u8>) -> bool {
        let mut usage = self.0.usage();
        self.send_progress_locked(&mut usage, frame)
    }

    /// As [`InvokeHandle::send_progress`], under the usage lock the invoke's end takes
    /// too ([`InvokeLink::end`]): a handle on another thread can never send progress after
    /// the reply, which MCP forbids. Admits at most `MAX_PROGRESS_PER_SECOND` events in any
    /// one-second window.
    fn send_progress_locked(&self, usage: &mut Usage, frame: Vec<u8>) -> bool {
        if self.is_ended() {
            return false;
        }
        let now = Instant::now();
        let window = &mut usage.progress_sent;
        while window
            .front()
            .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(1))
        {
            window.pop_front();
        }
        if window.len() >= MAX_PROGRESS_PER_SECOND {
            return false;
        }
        window.push_back(now);
        self.0.peer.out.try_send(frame)
    }

    fn wait_for(&self, method: &str, timeout: Option<Duration>) -> Duration {
        let wait = timeout.unwrap_or_else(|| default_timeout(method));
        match self.remaining() {
            Some(left) => wait.min(left),
            None => wait,
        }
    }

    /// Checks and counts the per-invoke budgets the host enforces, before sending.
    fn charge(&self, method: &str, asked: u64) -> Result<()> {
        let (calls, tokens) = self.0.peer.session.sampling_limits();
        let mut usage = self.0.usage();
        usage.calls += 1;
        if method == SAMPLING {
            let max_calls = calls.unwrap_or(DEFAULT_MAX_SAMPLING_CALLS);
            if usage.sampling_calls >= max_calls {
                return Err(refused(
                    codes::SAMPLING_MAX_CALLS_EXCEEDED,
                    "MAX_CALLS_EXCEEDED",
                    format!("sampling budget spent: at most {max_calls} calls per invoke"),
                ));
            }
            let per_call = tokens.unwrap_or(DEFAULT_MAX_TOKENS_PER_CALL);
            if asked > per_call {
                return Err(refused(
                    codes::SAMPLING_MAX_TOKENS_EXCEEDED,
                    "MAX_TOKENS_EXCEEDED",
                    format!("maxTokens {asked} is above the host's {per_call} per call"),
                ));
            }
            if usage.sampling_tokens >= MAX_SAMPLING_TOKENS_PER_INVOKE {
                return Err(refused(
                    codes::SAMPLING_MAX_TOKENS_EXCEEDED,
                    "MAX_TOKENS_EXCEEDED",
                    format!(
                        "sampling token budget spent: {} of {MAX_SAMPLING_TOKENS_PER_INVOKE} tokens used in this invoke",
                        usage.sampling_tokens
                    ),
                ));
            }
            usage.sampling_calls += 1;
        } else if crate::protocol::spends_storage_budget(method) {
            if usage.storage_calls >= MAX_STORAGE_CALLS_PER_INVOKE {
                return Err(Error::Refused(crate::protocol::storage_budget_spent()));
            }
            usage.storage_calls += 1;
        }
        Ok(())
    }

    /// Counts a sampling answer's tokens against the invoke's budget, from its raw text.
    fn record_tokens(&self, answer: &RawValue) {
        #[derive(serde::Deserialize)]
        struct Usage {
            #[serde(default, rename = "totalTokens")]
            total: Option<u64>,
            #[serde(default, rename = "inputTokens")]
            input: u64,
            #[serde(default, rename = "outputTokens")]
            output: u64,
        }
        #[derive(serde::Deserialize)]
        struct Answer {
            usage: Option<Usage>,
        }
        if let Ok(Answer { usage: Some(u) }) = serde_json::from_str(answer.get()) {
            self.add_usage(u.total, u.input, u.output);
        }
    }

    /// Counts a sampling answer's tokens against the invoke's budget: `totalTokens`, or
    /// input plus output when it is absent.
    fn add_usage(&self, total: Option<u64>, input: u64, output: u64) {
        let used = total.unwrap_or(input.saturating_add(output));
        let mut usage = self.0.usage();
        usage.sampling_tokens = usage.sampling_tokens.saturating_add(used);
    }
}

/// The method whose answers count against the invoke's token budget.
const SAMPLING: &str = "sampling/createMessage";

/// `maxTokens` of rendered sampling params (0 when absent or not a count).
fn asked_tokens(body: &[u8]) -> u64 {
    #[derive(serde::Deserialize)]
    struct Asked {
        #[serde(rename = "maxTokens")]
        max_tokens: Option<Value>,
    }
    serde_json::from_slice::<Asked>(body)
        .ok()
        .and_then(|a| a.max_tokens)
        .and_then(|v| v.as_u64())
        .unwrap_or(0)
}

/// Whether `needle` (a quoted key) occurs in `hay`: a cheap scan for its opening quote.
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.iter()
        .enumerate()
        .filter(|&(_, &b)| b == b'"')
        .any(|(at, _)| hay[at..].starts_with(needle))
}

/// Checks that rendered params are a JSON object; `null` counts as `{}`.
fn object_params(method: &str, body: Vec<u8>) -> Result<Vec<u8>> {
    if body == b"null" {
        Ok(b"{}".to_vec())
    } else if body.first() == Some(&b'{') && body.last() == Some(&b'}') {
        Ok(body)
    } else {
        Err(Error::Protocol(format!(
            "params of `{method}` must be a JSON object"
        )))
    }
}

/// Drops `context` and `_clientTimeoutS` from rendered params that name them (through a
/// map, the rare slow path), so the stamped ones are never sent twice.
fn drop_stamped_keys(body: &mut Vec<u8>) -> Result<()> {
    if contains(body, b"\"context\"") || contains(body, b"\"_clientTimeoutS\"") {
        let mut map: Map<String, Value> = serde_json::from_slice(body)?;
        map.remove("context");
        map.remove("_clientTimeoutS");
        body.clear();
        wire::serialize_into(body, &map);
    }
    Ok(())
}

fn refused(code: i64, symbol: &str, message: String) -> Error {
    Error::Refused(RpcError::with_code(code, symbol, message))
}

/// Registers, writes and waits: the one place a reverse call crosses the wire.
fn send_and_wait(
    peer: &Peer,
    method: &str,
    params: &[u8],
    wait: Duration,
) -> Result<Box<RawValue>> {
    let started = Instant::now();
    let ticket = peer.pending.register().map_err(Error::Disconnected)?;
    let mut frame = Vec::with_capacity(params.len() + 96);
    wire::write_request_raw(&mut frame, Some(&ticket.wire_id), method, params);
    if let Err(sent) = peer.out.send_timeout(frame, wait) {
        peer.pending.forget(ticket.number);
        return Err(match sent {
            SendFailure::Timeout => Error::Timeout {
                method: method.to_owned(),
                after: wait,
            },
            SendFailure::Closed => Error::Disconnected("the plugin's output is closed".into()),
        });
    }
    wait_for_answer(peer, ticket, method, started, wait)
}

/// Waits for the answer to `ticket`, a call to `method` started at `started`, until `wait`
/// after it at most: [`Error::Remote`] with the peer's error, [`Error::Timeout`] (the
/// call is forgotten: a late answer is dropped), [`Error::Disconnected`] when the peer
/// goes away.
pub(crate) fn wait_for_answer(
    peer: &Peer,
    ticket: pending::Ticket,
    method: &str,
    started: Instant,
    wait: Duration,
) -> Result<Box<RawValue>> {
    // On the reader's own thread (the invoke runs there), the answer is read right here.
    // A wait too large for the clock has no bound, as in `recv_timeout`.
    if peer
        .relay
        .pump(&|| ticket.answer.is_ready(), started.checked_add(wait))
    {
        // Calls other threads made meanwhile found no parked reader to hand over.
        let ours = usize::from(!ticket.answer.is_ready());
        if peer.pending.len() > ours {
            let _ = peer.relay.relieve();
        }
    }
    let mut answer = ticket
        .answer
        .recv_timeout(wait.saturating_sub(started.elapsed()));
    // An answer settled between the timeout and the forgetting is taken: the settling
    // thread removed the call and is sending it now, with nothing to wait for between
    // (the bound is only a guard).
    if matches!(answer, Err(RecvTimeoutError::Timeout)) && !peer.pending.forget(ticket.number) {
        answer = ticket.answer.recv_timeout(Duration::from_secs(1));
    }
    match answer {
        Ok(Ok(result)) => Ok(result),
        Ok(Err(error)) => Err(Error::Remote(error)),
        Err(RecvTimeoutError::Timeout) => {
            peer.pending.forget(ticket.number);
            Err(Error::Timeout {
                method: method.to_owned(),
                after: wait,
            })
        }
        Err(RecvTimeoutError::Disconnected) => Err(Error::Disconnected(
            peer.pending
                .closed_reason()
                .unwrap_or_else(|| "the host went away".into()),
        )),
    }
}
