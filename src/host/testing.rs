//! Testing a plugin with `cargo test`: [`TestHost`] runs a [`Plugin`] value in-process
//! (through [`Plugin::serve`], no binary, no subprocess), answers its reverse calls from the
//! host side's in-memory backends ([`MemoryStorage`], [`ScriptedSampling`]) and returns each
//! invoke as an [`Outcome`]: its data or error, its storage writes and its progress events.
//!
//! ```
//! use executa::testing::TestHost;
//! use executa::{Plugin, Tool, ToolError};
//! use serde_json::json;
//!
//! executa::args! {
//!     struct Args {
//!         /// Who to greet
//!         name: String,
//!     }
//! }
//!
//! let plugin = Plugin::new("greeter", "0.1.0").description("Greets").tool(Tool::typed(
//!     "greet",
//!     "Says hello",
//!     |a: Args, _ctx| Ok::<_, ToolError>(json!({ "greeting": format!("Hello, {}!", a.name) })),
//! ));
//! let mut host = TestHost::start(plugin)?;
//! let out = host.invoke("greet", json!({ "name": "Ada" }))?;
//! assert_eq!(out.data(), Some(&json!({ "greeting": "Hello, Ada!" })));
//! let bad = host.invoke("greet", json!({}))?;
//! assert_eq!(bad.rpc_error().map(|e| e.code), Some(-32602));
//! # Ok::<(), executa::Error>(())
//! ```
//!
//! The same plugin is driven over MCP with the same calls by [`TestHost::mcp`] (or
//! [`TestHostBuilder::mcp`], which picks the era): each invoke is a `tools/call`, read back
//! into the same [`Outcome`], so both branches of a dual-protocol handler
//! ([`Invocation::protocol`](crate::Invocation::protocol)) are tested in-process.

mod mcp;

use std::io::{self, BufRead, BufReader, PipeReader, PipeWriter, Write};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError};
use serde_json::{Map, Value, json};

use super::backends::{MemoryStorage, ScriptedSampling};
use super::options::McpVersion;
use super::service::{ReverseCall, Service};
use crate::error::{Error, Result, RpcError, codes};
use crate::id::Id;
use crate::plugin::{Plugin, Stopped};

/// How long [`TestHost`] waits for any one line from the plugin unless told otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The test host's name, in `clientInfo` in both protocols.
const CLIENT_NAME: &str = "executa-testing";

/// `clientInfo` of the test host.
fn client_info() -> Value {
    json!({ "name": CLIENT_NAME, "version": env!("CARGO_PKG_VERSION") })
}

/// One storage write the plugin made during an invoke (`storage/set` or `storage/delete`).
#[derive(Clone, Debug, PartialEq)]
pub struct StorageWrite {
    /// `storage/set` or `storage/delete`.
    pub method: String,
    /// The scope (`user`, `app`, `tool`); `app` when the plugin sent none.
    pub scope: String,
    /// The key.
    pub key: String,
    /// The value written (`None` for a delete).
    pub value: Option<Value>,
}

/// One `executa/progress` event the plugin sent during an invoke.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgressEvent {
    /// `progress` or `tool_update`.
    pub kind: String,
    /// The event's data.
    pub data: Value,
}

/// What one invoke produced.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The `result` object (`{success, data}` or `{success: false, error}`), when the
    /// plugin answered with one. Over MCP, the `tools/call` result as the host library
    /// reads it ([`InvokeResult`](super::InvokeResult)): `isError` is `success: false`
    /// with the text as `error`; `data` is `structuredContent`, else the text content
    /// (parsed as JSON when it parses).
    pub result: Option<Value>,
    /// The JSON-RPC error, when the plugin answered with one (-32602 bad arguments, ...).
    pub rpc_error: Option<RpcError>,
    /// Storage writes, in order.
    pub storage_writes: Vec<StorageWrite>,
    /// Progress events, in order. Over MCP, each `notifications/progress` as the host
    /// library reports it: kind `progress`, data `{progress, total?, message?}`.
    pub progress: Vec<ProgressEvent>,
    /// Every reverse call's method, in order (over MCP: the client's requests, and the
    /// input requests of a 2026-07-28 call, by method).
    pub reverse_calls: Vec<String>,
}

impl Outcome {
    /// An outcome with nothing seen yet.
    fn empty() -> Outcome {
        Outcome {
            result: None,
            rpc_error: None,
            storage_writes: Vec::new(),
            progress: Vec::new(),
            reverse_calls: Vec::new(),
        }
    }

    /// Takes in what `more` saw on the way (a later round of the same call).
    fn extend(&mut self, more: Outcome) {
        self.storage_writes.extend(more.storage_writes);
        self.progress.extend(more.progress);
        self.reverse_calls.extend(more.reverse_calls);
    }

    /// The data of a successful invoke (`success: true`).
    pub fn data(&self) -> Option<&Value> {
        let r = self.result.as_ref()?;
        (r.get("success") == Some(&Value::Bool(true))).then(|| &r["data"])
    }

    /// The message of an expected failure (`success: false`, a [`ToolError`](crate::ToolError)).
    pub fn error(&self) -> Option<&str> {
        let r = self.result.as_ref()?;
        if r.get("success") == Some(&Value::Bool(false)) {
            r.get("error").and_then(Value::as_str)
        } else {
            None
        }
    }

    /// The JSON-RPC error (-32602 for arguments the handler could not take, ...).
    pub fn rpc_error(&self) -> Option<&RpcError> {
        self.rpc_error.as_ref()
    }
}

/// A plugin running in-process behind a scripted host; see the [module docs](self).
///
/// Dropping it closes the plugin's input and waits for [`Plugin::serve`] to return (it
/// drains in-flight invokes within the plugin's grace period).
pub struct TestHost {
    to_plugin: Option<PipeWriter>,
    /// The plugin's output lines, read on a thread of their own (an anonymous pipe has no
    /// read timeout), which drains the pipe until the plugin closes it.
    from_plugin: Receiver<io::Result<String>>,
    /// How long to wait for any one line.
    timeout: Duration,
    services: Vec<Arc<dyn Service>>,
    storage: Arc<MemoryStorage>,
    next_id: u64,
    serve: Option<JoinHandle<Result<Stopped>>>,
    /// The MCP session, when the host speaks MCP.
    mcp: Option<mcp::Session>,
}

/// How a [`TestHost`] starts: the protocol it speaks and the backends that answer the
/// plugin's calls. Made by [`TestHost::builder`]; [`TestHostBuilder::start`] starts it.
///
/// ```
/// # use executa::{Plugin, Tool, ToolError};
/// use executa::Scope;
/// use executa::host::{McpVersion, MemoryStorage, ScriptedSampling};
/// use executa::testing::TestHost;
/// use serde_json::json;
/// # executa::args! { struct NoArgs {} }
/// # let plugin = Plugin::new("p", "0.1.0").description("d").tool(Tool::typed(
/// #     "t", "d", |_: NoArgs, _ctx| Ok::<_, ToolError>(json!({}))));
///
/// let storage = MemoryStorage::with_entries([(Scope::User, "greeting", json!("Hi"))])?;
/// let builder = TestHost::builder(plugin)
///     .storage(storage)
///     .sampling(ScriptedSampling::echo());
/// # #[cfg(feature = "mcp")]
/// # {
/// // The MCP `initialize` handshake era; without `.mcp(..)`, Executa.
/// let mut host = builder.mcp(McpVersion::Legacy).start()?;
/// assert_eq!(host.mcp_revision(), Some("2025-11-25"));
/// assert_eq!(host.storage().value("user", "greeting"), Some(json!("Hi")));
/// # }
/// # #[cfg(not(feature = "mcp"))]
/// # drop(builder);
/// # Ok::<(), executa::Error>(())
/// ```
pub struct TestHostBuilder {
    plugin: Plugin,
    mcp: Option<McpVersion>,
    storage: MemoryStorage,
    sampling: ScriptedSampling,
    services: Vec<Arc<dyn Service>>,
    timeout: Duration,
}

impl TestHostBuilder {
    /// Speaks MCP to the plugin, in the era `version` picks as it does for
    /// [`Host`](super::Host) ([`HostOptions::mcp_version`](super::HostOptions::mcp_version)):
    /// [`McpVersion::Auto`] probes `server/discover` and adopts 2026-07-28 (what a plugin
    /// of this crate built with `mcp` answers), [`McpVersion::Legacy`] runs the
    /// `initialize` handshake (2025-11-25), [`McpVersion::Pinned`] that revision. The
    /// plugin needs the `mcp` feature; without it, [`TestHostBuilder::start`] fails.
    pub fn mcp(mut self, version: McpVersion) -> Self {
        self.mcp = Some(version);
        self
    }

    /// The storage backend (default: empty), for example a pre-filled
    /// [`MemoryStorage::with_entries`]; [`TestHost::storage`] is this store.
    pub fn storage(mut self, storage: MemoryStorage) -> Self {
        self.storage = storage;
        self
    }

    /// The sampling backend (default: [`ScriptedSampling::echo`]).
    pub fn sampling(mut self, sampling: ScriptedSampling) -> Self {
        self.sampling = sampling;
        self
    }

    /// A backend of your own (or a local one: [`DirStorage`](super::DirStorage),
    /// [`CommandSampling`](super::CommandSampling)), asked before the storage and
    /// sampling backends for the methods it [handles](Service::handles); services added
    /// earlier are asked first.
    pub fn service(mut self, service: impl Service + 'static) -> Self {
        self.services.push(Arc::new(service));
        self
    }

    /// How long to wait for any one line from the plugin (default [`DEFAULT_TIMEOUT`]).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Starts the plugin and opens the session: the Executa `initialize` (protocol 2.0,
    /// sampling offered), or the MCP era asked for (declaring `sampling`). Blocks until
    /// the plugin answers; fails with the plugin's own error when it refuses to start
    /// ([`Error::InvalidPlugin`]), [`Error::Protocol`] when the MCP era asked for is not
    /// served, or [`Error::Timeout`] after the timeout.
    pub fn start(self) -> Result<TestHost> {
        let storage = Arc::new(self.storage);
        let mut services = self.services;
        services.push(storage.clone());
        services.push(Arc::new(self.sampling));
        TestHost::launch(self.plugin, storage, services, self.mcp, self.timeout)
    }
}

impl TestHost {
    /// A [`TestHostBuilder`] for `plugin`: Executa, an empty [`MemoryStorage`], an
    /// echoing [`ScriptedSampling`] until told otherwise.
    pub fn builder(plugin: Plugin) -> TestHostBuilder {
        TestHostBuilder {
            plugin,
            mcp: None,
            storage: MemoryStorage::new(),
            sampling: ScriptedSampling::echo(),
            services: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Starts `plugin` as [`TestHost::start`] does, but drives it as an MCP client does,
    /// in the era [`Host`](super::Host) picks by default ([`McpVersion::Auto`]:
    /// 2026-07-28 with a plugin of this crate; [`TestHostBuilder::mcp`] picks another).
    /// The test API is the same: [`TestHost::invoke`] sends `tools/call` and returns the
    /// same [`Outcome`]; sampling is answered by the sampling backend (a request to the
    /// client in the handshake era, an input request in 2026-07-28), progress is
    /// collected. What MCP lacks is lacking: the plugin's storage calls are refused in the
    /// plugin, an invoke context with credentials or tokens is refused
    /// ([`Error::Refused`], -32602), and arguments the handler cannot take are a tool
    /// error ([`Outcome::error`]) rather than a JSON-RPC error, as MCP has them. Data that
    /// is not an object comes back as it is (from the text content), where Executa wraps
    /// it as `{"value": ...}`. The plugin needs the `mcp` feature.
    ///
    /// ```
    /// use executa::testing::TestHost;
    /// use executa::{Invocation, Plugin, Scope, Served, Tool, ToolError};
    /// use serde_json::{Value, json};
    ///
    /// executa::args! {
    ///     /// A note's key.
    ///     pub struct Args {
    ///         /// The key
    ///         key: String,
    ///     }
    /// }
    ///
    /// fn recall(a: Args, ctx: &Invocation) -> Result<Value, ToolError> {
    ///     let note = match ctx.protocol() {
    ///         Served::Executa => ctx.storage().get(&a.key, Scope::User)?.value,
    ///         _ => json!("(no storage over MCP)"),
    ///     };
    ///     Ok(json!({ "note": note }))
    /// }
    ///
    /// fn plugin() -> Plugin {
    ///     Plugin::new("notes", "0.1.0")
    ///         .description("Recalls notes")
    ///         .capability("aps.kv")
    ///         .tool(Tool::typed("recall", "Recalls a note", recall))
    /// }
    ///
    /// let mut executa = TestHost::start(plugin())?;
    /// executa.storage().insert(Scope::User, "todo", "write docs")?;
    /// let out = executa.invoke("recall", json!({ "key": "todo" }))?;
    /// assert_eq!(out.data(), Some(&json!({ "note": "write docs" })));
    /// # #[cfg(feature = "mcp")]
    /// # {
    /// let mut mcp = TestHost::mcp(plugin())?;
    /// let out = mcp.invoke("recall", json!({ "key": "todo" }))?;
    /// assert_eq!(out.data(), Some(&json!({ "note": "(no storage over MCP)" })));
    /// # }
    /// # Ok::<(), executa::Error>(())
    /// ```
    pub fn mcp(plugin: Plugin) -> Result<TestHost> {
        TestHost::builder(plugin).mcp(McpVersion::Auto).start()
    }

    /// Starts `plugin` with an empty [`MemoryStorage`] and an echoing
    /// [`ScriptedSampling`], and sends `initialize` (protocol 2.0, sampling offered).
    /// Blocks until the plugin answers; fails with the plugin's own error when it refuses
    /// to start ([`Error::InvalidPlugin`]), or [`Error::Timeout`] after [`DEFAULT_TIMEOUT`].
    pub fn start(plugin: Plugin) -> Result<TestHost> {
        TestHost::builder(plugin).start()
    }

    /// [`TestHost::start`] with the given backends (pre-filled storage, scripted answers).
    pub fn start_with(
        plugin: Plugin,
        storage: MemoryStorage,
        sampling: ScriptedSampling,
    ) -> Result<TestHost> {
        TestHost::builder(plugin)
            .storage(storage)
            .sampling(sampling)
            .start()
    }

    /// [`TestHost::start`] with any backends: the local ones
    /// ([`DirStorage`](super::DirStorage), [`CommandSampling`](super::CommandSampling), as
    /// `executa call --storage-dir/--sampling-cmd` use), or a [`Service`] of your own.
    /// [`TestHost::storage`] is then an empty in-memory store nobody writes to; read what
    /// the plugin stored from your backend. Blocks and fails as [`TestHost::start`] does.
    ///
    /// ```
    /// # use executa::{Plugin, Tool, ToolError, CreateMessage};
    /// use executa::host::{CommandSampling, MemoryStorage};
    /// use executa::testing::TestHost;
    /// use serde_json::json;
    ///
    /// executa::args! {
    ///     struct Args {
    ///         /// The prompt
    ///         prompt: String,
    ///     }
    /// }
    ///
    /// let plugin = Plugin::new("p", "0.1.0").description("d").capability("llm.sample").tool(
    ///     Tool::typed("ask", "Asks the model", |a: Args, ctx| {
    ///         let answer = ctx.sampling().create_message(&CreateMessage::new(a.prompt, 50))?;
    ///         Ok::<_, ToolError>(json!({ "text": answer.text() }))
    ///     }),
    /// );
    /// let sampling = CommandSampling::new("tr a-z A-Z");
    /// let mut host = TestHost::start_with_services(plugin, MemoryStorage::new(), sampling)?;
    /// let out = host.invoke("ask", json!({ "prompt": "hi" }))?;
    /// assert_eq!(out.data(), Some(&json!({ "text": "HI" })));
    /// # Ok::<(), executa::Error>(())
    /// ```
    pub fn start_with_services(
        plugin: Plugin,
        storage: impl Service + 'static,
        sampling: impl Service + 'static,
    ) -> Result<TestHost> {
        TestHost::builder(plugin)
            .service(storage)
            .service(sampling)
            .start()
    }

    fn launch(
        plugin: Plugin,
        storage: Arc<MemoryStorage>,
        services: Vec<Arc<dyn Service>>,
        mcp: Option<McpVersion>,
        timeout: Duration,
    ) -> Result<TestHost> {
        let (theirs_in, ours_in) = io::pipe()?;
        let (ours_out, theirs_out) = io::pipe()?;
        let from_plugin = read_lines(ours_out)?;
        let serve = std::thread::Builder::new()
            .name("executa-test-plugin".into())
            .spawn(move || plugin.serve(theirs_in, theirs_out))?;
        let mut host = TestHost {
            to_plugin: Some(ours_in),
            from_plugin,
            timeout,
            services,
            storage,
            next_id: 1,
            serve: Some(serve),
            mcp: None,
        };
        let opened = match mcp {
            Some(version) => host.open_mcp(&version),
            None => host.initialize(),
        };
        match opened {
            Ok(()) => Ok(host),
            Err(Error::Disconnected(why)) => {
                Err(host.stopped_error().unwrap_or(Error::Disconnected(why)))
            }
            Err(e) => Err(e),
        }
    }

    /// The Executa `initialize`: protocol 2.0, sampling offered.
    fn initialize(&mut self) -> Result<()> {
        let init = json!({
            "protocolVersion": "2.0",
            "clientInfo": client_info(),
            "capabilities": { "sampling": { "modalities": ["text"], "maxTokensPerCall": 8192 } }
        });
        self.call("initialize", init).map(drop)
    }

    /// The MCP revision spoken ([`TestHost::mcp`]); `None` for Executa.
    pub fn mcp_revision(&self) -> Option<&'static str> {
        self.mcp.as_ref().map(|m| m.revision)
    }

    /// Sets how long to wait for any one line from the plugin (default [`DEFAULT_TIMEOUT`]).
    pub fn timeout(&mut self, timeout: Duration) -> Result<()> {
        self.timeout = timeout;
        Ok(())
    }

    /// The storage backend: pre-fill it (`host.storage().insert(Scope::User, "k", 1)?`,
    /// see [`MemoryStorage::insert`]), or read what the plugin stored.
    pub fn storage(&self) -> &MemoryStorage {
        &self.storage
    }

    /// The manifest the plugin serves from `describe`; over MCP, the manifest the host
    /// library makes from `tools/list` (as `executa describe` shows it).
    pub fn describe(&mut self) -> Result<Value> {
        if self.mcp.is_some() {
            return self.describe_mcp();
        }
        let (result, _) = self.call("describe", json!({}))?;
        result.map_err(Error::Remote)
    }

    /// Invokes `tool` with `arguments` and an empty context. Blocks until the reply,
    /// answering reverse calls meanwhile; fails only when the plugin stops or is silent
    /// for the timeout.
    pub fn invoke(&mut self, tool: &str, arguments: Value) -> Result<Outcome> {
        self.invoke_with_context(tool, arguments, json!({}))
    }

    /// [`TestHost::invoke`] with a `context` object (for example
    /// `{"credentials": {"API_KEY": "..."}}`); its `invoke_id` is set when absent. Over
    /// MCP, which carries no context, credentials and tokens are refused
    /// ([`Error::Refused`], -32602, nothing sent) and the `invoke_id` is the progress token.
    pub fn invoke_with_context(
        &mut self,
        tool: &str,
        arguments: Value,
        mut context: Value,
    ) -> Result<Outcome> {
        if self.mcp.is_some() {
            return self.invoke_mcp(tool, arguments, &context);
        }
        if let Some(ctx) = context.as_object_mut() {
            ctx.entry("invoke_id")
                .or_insert_with(|| json!(format!("test-invoke-{}", self.next_id)));
        }
        let params = json!({ "tool": tool, "arguments": arguments, "context": context });
        let (result, outcome) = self.call("invoke", params)?;
        let (result, rpc_error) = match result {
            Ok(v) => (Some(v), None),
            Err(e) => (None, Some(e)),
        };
        Ok(Outcome {
            result,
            rpc_error,
            ..outcome
        })
    }

    /// Sends one request and reads until its reply, serving what comes in between.
    fn call(
        &mut self,
        method: &str,
        params: Value,
    ) -> Result<(std::result::Result<Value, RpcError>, Outcome)> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))?;
        let mut seen = Outcome::empty();
        loop {
            let frame = self.read_frame(method)?;
            let Some(m) = frame.get("method").and_then(Value::as_str) else {
                if frame.get("id") == Some(&json!(id)) {
                    return Ok((reply_of(frame)?, seen));
                }
                continue;
            };
            let m = m.to_owned();
            match frame.get("id") {
                Some(rid) if !rid.is_null() && self.mcp.is_some() => {
                    let reply = self.answer_mcp(&m, rid, frame.get("params"), &mut seen)?;
                    self.send(&reply)?;
                }
                Some(rid) if !rid.is_null() => {
                    let reply = self.answer(&m, rid, frame.get("params"), &mut seen)?;
                    self.send(&reply)?;
                }
                _ if m == "executa/progress" => seen.progress.push(progress_of(&frame)),
                _ if m == "notifications/progress" => {
                    seen.progress.push(mcp::progress_of(&frame));
                }
                _ => {}
            }
        }
    }

    fn answer(
        &self,
        method: &str,
        id: &Value,
        params: Option<&Value>,
        seen: &mut Outcome,
    ) -> Result<Value> {
        seen.reverse_calls.push(method.to_owned());
        let mut params = params.cloned().unwrap_or_else(|| json!({}));
        let routing = params.as_object_mut().map(strip_routing);
        let (invoke_id, client_timeout) = routing.unwrap_or_default();
        if method == "storage/set" || method == "storage/delete" {
            seen.storage_writes.push(storage_write(method, &params));
        }
        let call = ReverseCall {
            method: method.to_owned(),
            params,
            invoke_id,
            client_timeout,
            id: Id::from_raw(&serde_json::value::to_raw_value(id)?),
        };
        let answer = self.serve_call(&call);
        Ok(match answer {
            Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
            Err(e) => json!({ "jsonrpc": "2.0", "id": id, "error": e }),
        })
    }

    /// The answer of the first backend that handles the call's method.
    fn serve_call(&self, call: &ReverseCall) -> std::result::Result<Value, RpcError> {
        let method = call.method.as_str();
        match self.services.iter().find(|s| s.handles(method)) {
            Some(s) => s.call(call),
            None => Err(RpcError::new(
                codes::METHOD_NOT_FOUND,
                format!("the test host has no backend for `{method}`"),
            )),
        }
    }

    fn send(&mut self, frame: &Value) -> Result<()> {
        let Some(w) = self.to_plugin.as_mut() else {
            return Err(Error::Disconnected("the test host was closed".into()));
        };
        let mut line = serde_json::to_vec(frame)?;
        line.push(b'\n');
        w.write_all(&line).map_err(|e| disconnected(&e))
    }

    fn read_frame(&mut self, method: &str) -> Result<Value> {
        match self.from_plugin.recv_timeout(self.timeout) {
            Ok(Ok(line)) => serde_json::from_str(&line).map_err(|e| {
                Error::Protocol(format!(
                    "the plugin wrote a line that is not JSON ({e}): {line}"
                ))
            }),
            Ok(Err(e)) => Err(disconnected(&e)),
            Err(RecvTimeoutError::Timeout) => Err(Error::Timeout {
                method: method.to_owned(),
                after: self.timeout,
            }),
            Err(RecvTimeoutError::Disconnected) => {
                Err(Error::Disconnected("the plugin stopped".into()))
            }
        }
    }

    /// The plugin's own error once its serve thread has ended (it refused to start).
    fn stopped_error(&mut self) -> Option<Error> {
        self.to_plugin = None;
        match self.serve.take()?.join() {
            Ok(Err(e)) => Some(e),
            _ => None,
        }
    }
}

impl Drop for TestHost {
    fn drop(&mut self) {
        // EOF on the plugin's input: it drains and returns within its grace period.
        self.to_plugin = None;
        if let Some(serve) = self.serve.take() {
            let _ = serve.join();
        }
    }
}

/// Reads `pipe` line by line on a thread of its own, until its end or an error (sent on,
/// then the thread ends). Lines nobody takes any more are read and dropped, so that a
/// plugin still writing never waits for a full pipe.
fn read_lines(pipe: PipeReader) -> io::Result<Receiver<io::Result<String>>> {
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::Builder::new()
        .name("executa-test-host".into())
        .spawn(move || {
            let mut pipe = BufReader::new(pipe);
            loop {
                let mut line = String::new();
                match pipe.read_line(&mut line) {
                    Ok(0) => return,
                    Ok(_) => {
                        let _ = tx.send(Ok(line));
                    }
                    Err(e) => {
                        // A line that is not UTF-8 was read whole: the pipe still works.
                        let go_on = e.kind() == io::ErrorKind::InvalidData;
                        let _ = tx.send(Err(e));
                        if !go_on {
                            return;
                        }
                    }
                }
            }
        })?;
    Ok(rx)
}

fn disconnected(e: &std::io::Error) -> Error {
    Error::Disconnected(format!("the plugin's pipe broke: {e}"))
}

fn reply_of(mut frame: Value) -> Result<std::result::Result<Value, RpcError>> {
    if let Some(error) = frame.get_mut("error").map(Value::take) {
        return Ok(Err(serde_json::from_value(error)?));
    }
    Ok(Ok(frame
        .get_mut("result")
        .map(Value::take)
        .unwrap_or(Value::Null)))
}

fn progress_of(frame: &Value) -> ProgressEvent {
    let p = &frame["params"];
    ProgressEvent {
        kind: p["type"].as_str().unwrap_or("progress").to_owned(),
        data: p.get("data").cloned().unwrap_or(Value::Null),
    }
}

/// Removes `context` and `_clientTimeoutS`, returning the invoke id and timeout hint.
fn strip_routing(params: &mut Map<String, Value>) -> (Option<String>, Option<Duration>) {
    let invoke_id = params.remove("context").and_then(|c| {
        c.get("invoke_id")
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    let timeout = params
        .remove("_clientTimeoutS")
        .and_then(|t| t.as_f64())
        .and_then(|s| Duration::try_from_secs_f64(s).ok());
    (invoke_id, timeout)
}

fn storage_write(method: &str, params: &Value) -> StorageWrite {
    StorageWrite {
        method: method.to_owned(),
        scope: params["scope"].as_str().unwrap_or("app").to_owned(),
        key: params["key"].as_str().unwrap_or_default().to_owned(),
        value: params.get("value").cloned(),
    }
}
