//! The per-invoke context a handler receives: credentials, tokens, invoke id, deadline, and
//! the way back to the host.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::reverse::files::Files;
use super::reverse::sampling::Sampling;
use super::reverse::storage::Storage;
use super::reverse::{InvokeHandle, InvokeLink};
use super::session::Negotiated;
use crate::json_scan;
use crate::secret::Secret;

/// One running `invoke`, as its handler sees it.
///
/// Credentials and tokens live only here: `Debug` shows their names, never their values,
/// and they are zeroed and dropped when the invoke ends (so is the request text they came
/// in: its line when the invoke ends, the reader's read buffer before it is read into
/// again; only the kernel's pipe buffer is out of reach). A context or field of the wrong
/// shape is skipped without a copy.
///
/// Reverse calls to the host ([`Invocation::call`], [`Invocation::sampling`],
/// [`Invocation::storage`], ...) are stamped with this invoke's id automatically.
pub struct Invocation {
    tool: Arc<str>,
    credentials: Vec<(String, Secret)>,
    tokens: Vec<(String, Secret)>,
    plugin_name: Option<String>,
    handle: InvokeHandle,
}

impl Invocation {
    pub(crate) fn new(
        tool: Arc<str>,
        context: Option<&str>,
        legacy: Option<Box<LegacyFields>>,
        link: impl FnOnce(Option<&str>, Option<SystemTime>) -> Arc<InvokeLink>,
    ) -> Invocation {
        // Only an object is read: serde's error for any other value would quote it, and the
        // text of an error is freed unwiped.
        let mut ctx = WireContext::default();
        if let Some(raw) = context.filter(|raw| raw.as_bytes().first() == Some(&b'{')) {
            ctx.fill(raw);
        }
        let LegacyFields {
            invoke_id: legacy_id,
            tokens: legacy_tokens,
        } = legacy.map(|b| *b).unwrap_or_default();
        let legacy_id = legacy_id.and_then(text);
        let invoke_id = ctx.invoke_id.as_deref().or(legacy_id.as_deref());
        let mut tokens = ctx.tokens;
        for (name, value) in legacy_tokens {
            if !tokens.iter().any(|(n, _)| n == name) {
                tokens.push((name.to_owned(), value));
            }
        }
        let handle = InvokeHandle::from_link(link(invoke_id, ctx.deadline_ms.and_then(epoch_ms)));
        Invocation {
            tool,
            credentials: ctx.credentials,
            tokens,
            plugin_name: ctx.plugin_name,
            handle,
        }
    }

    /// The invoke's link, for the next invoke on this thread to reuse once this one has
    /// ended (dropped) and no handle to it survived.
    pub(crate) fn link_arc(&self) -> Arc<InvokeLink> {
        self.handle.link_arc()
    }

    /// The tool being invoked.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// `context.invoke_id` (or the older top-level `invoke_id`), when the host sent one.
    pub fn invoke_id(&self) -> Option<&str> {
        self.handle.invoke_id()
    }

    /// The absolute deadline from `context.deadline_ms`, when the host sent one.
    pub fn deadline(&self) -> Option<SystemTime> {
        self.handle.deadline()
    }

    /// Time left before the deadline (zero once it passed); `None` without a deadline.
    pub fn remaining(&self) -> Option<Duration> {
        self.handle.remaining()
    }

    /// A credential's value by name (e.g. `"OPENAI_API_KEY"`). Never log it.
    pub fn credential(&self, name: &str) -> Option<&str> {
        find(&self.credentials, name)
    }

    /// The names of the credentials present in this invoke.
    pub fn credential_names(&self) -> impl Iterator<Item = &str> {
        self.credentials.iter().map(|(n, _)| n.as_str())
    }

    /// A per-invoke token by its context key (e.g. `"storage_token"`). Plugins rarely need
    /// one: the host attaches tokens to reverse calls itself, and this crate never sends
    /// them back.
    pub fn token(&self, name: &str) -> Option<&str> {
        find(&self.tokens, name)
    }

    /// What `initialize` negotiated (defaults when the host never sent it): the protocol
    /// version, the host's sampling limits, `fileTransport`, its capability offer.
    pub fn negotiated(&self) -> Negotiated {
        self.handle.negotiated()
    }

    /// Which protocol this call serves: [`Served::Executa`] for an Executa host's `invoke`
    /// (also from a host that never sent `initialize`), [`Served::Mcp`] for an MCP
    /// client's `tools/call`, with the revision of the call: the one agreed in the
    /// client's `initialize` (`2025-11-25`, ...), or `2026-07-28` for a stateless request,
    /// which has no session. Per call: one process may serve both. Without the `mcp`
    /// feature it is always [`Served::Executa`]. Cheap (no allocation): ask it where the
    /// branch is.
    ///
    /// MCP has no storage, files or agent calls (they are refused locally), and no
    /// credentials: a tool that must run in both worlds falls back there.
    ///
    /// ```
    /// use executa::{Invocation, Plugin, Scope, Served, Tool, ToolError};
    /// use serde_json::{Value, json};
    ///
    /// executa::args! {
    ///     /// Whom to greet.
    ///     pub struct Args {
    ///         /// The name
    ///         name: String,
    ///     }
    /// }
    ///
    /// fn greet(a: Args, ctx: &Invocation) -> Result<Value, ToolError> {
    ///     let greeting = match ctx.protocol() {
    ///         Served::Executa => ctx.storage().get("greeting", Scope::User)?.value,
    ///         // An MCP client offers no storage: a default instead.
    ///         _ => Value::Null,
    ///     };
    ///     let greeting = greeting.as_str().unwrap_or("Hello");
    ///     Ok(json!({ "text": format!("{greeting}, {}.", a.name) }))
    /// }
    ///
    /// fn plugin() -> Plugin {
    ///     Plugin::new("greeter", "0.1.0")
    ///         .description("Greets")
    ///         .capability("aps.kv")
    ///         .tool(Tool::typed("greet", "Greets someone", greet))
    /// }
    /// # #[cfg(all(feature = "host", feature = "mcp"))]
    /// # {
    /// // Both branches, in-process (`executa::testing`, feature `host`):
    /// use executa::testing::TestHost;
    /// let mut host = TestHost::start(plugin())?;
    /// host.storage().insert(Scope::User, "greeting", "Hi")?;
    /// let out = host.invoke("greet", json!({ "name": "Ada" }))?;
    /// assert_eq!(out.data(), Some(&json!({ "text": "Hi, Ada." })));
    /// let mut mcp = TestHost::mcp(plugin())?;
    /// let out = mcp.invoke("greet", json!({ "name": "Ada" }))?;
    /// assert_eq!(out.data(), Some(&json!({ "text": "Hello, Ada." })));
    /// # }
    /// # let _ = plugin;
    /// # Ok::<(), executa::Error>(())
    /// ```
    pub fn protocol(&self) -> Served {
        #[cfg(feature = "mcp")]
        if let Some(call) = self.handle.link().mcp_call() {
            return Served::Mcp {
                revision: mcp_revision(self.handle.link(), call),
            };
        }
        Served::Executa
    }

    /// As [`Invocation::call`], waiting at most `timeout` (still capped by the deadline).
    pub fn call_with_timeout<P: serde::Serialize + ?Sized, R: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
        timeout: Duration,
    ) -> crate::Result<R> {
        self.handle.call_with_timeout(method, params, timeout)
    }

    /// `context.plugin_name`, when sent.
    pub fn plugin_name(&self) -> Option<&str> {
        self.plugin_name.as_deref()
    }

    /// A cheap, cloneable, `'static` handle for reverse calls and progress from other
    /// threads. It carries no secrets, and fails with [`crate::Error::InvokeEnded`] once
    /// this invoke has ended.
    pub fn handle(&self) -> InvokeHandle {
        self.handle.clone()
    }

    /// The handle this invocation's reverse calls go through.
    pub fn host(&self) -> &InvokeHandle {
        &self.handle
    }

    /// Calls any whitelisted host method (`embeddings/create`, `web/search`, `agent/*`,
    /// `image/*`, `host/uploadFile`, `credentials/*`, ...) and returns the typed result.
    /// See [`InvokeHandle::call_raw`] for blocking, timeouts and errors.
    pub fn call<P: serde::Serialize + ?Sized, R: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
    ) -> crate::Result<R> {
        self.handle.call(method, params)
    }

    /// The sampling client (needs `llm.sample`).
    pub fn sampling(&self) -> Sampling<'_> {
        self.handle.sampling()
    }

    /// The key/value storage client (needs `aps.kv`).
    pub fn storage(&self) -> Storage<'_> {
        self.handle.storage()
    }

    /// The object store client (needs `aps.files`).
    pub fn files(&self) -> Files<'_> {
        self.handle.files()
    }

    /// Sends an `executa/progress` event; see [`InvokeHandle::progress`]. Never blocks.
    pub fn progress<D: serde::Serialize + ?Sized>(&self, kind: &str, data: &D) -> bool {
        self.handle.progress(kind, data)
    }
}

impl Drop for Invocation {
    fn drop(&mut self) {
        self.handle.link().end();
    }
}

impl fmt::Debug for Invocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Invocation")
            .field("tool", &self.tool)
            .field("invoke_id", &self.invoke_id())
            .field("deadline", &self.deadline())
            .field("credentials", &self.credential_names().collect::<Vec<_>>())
            .field(
                "tokens",
                &self
                    .tokens
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Which protocol a call serves, as [`Invocation::protocol`] tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Served {
    /// An Executa host's `invoke`: storage, files, credentials and the deadline are there
    /// as the host grants them.
    Executa,
    /// An MCP client's `tools/call` (the `mcp` feature): sampling (when the client offers
    /// it) and progress, but no storage, files, agent calls or credentials.
    #[non_exhaustive]
    Mcp {
        /// The MCP revision the call is served in: agreed in `initialize` (`2024-11-05`
        /// to `2025-11-25`), or named by a stateless request (`2026-07-28`).
        revision: &'static str,
    },
}

impl Served {
    /// Whether the call is an MCP client's.
    pub fn is_mcp(self) -> bool {
        matches!(self, Served::Mcp { .. })
    }

    /// The MCP revision of the call; `None` for an Executa host.
    pub fn mcp_revision(self) -> Option<&'static str> {
        match self {
            Served::Mcp { revision } => Some(revision),
            Served::Executa => None,
        }
    }
}

/// The revision an MCP call is served in. A stateless request carries its own; the one
/// stateless revision spoken is the one it named (`era.rs` refuses any other).
#[cfg(feature = "mcp")]
fn mcp_revision(link: &InvokeLink, call: &super::mcp::Call) -> &'static str {
    use crate::protocol::{MCP_MODERN_REVISIONS, MCP_REVISIONS};
    if call.is_stateless() {
        return MCP_MODERN_REVISIONS[MCP_MODERN_REVISIONS.len() - 1];
    }
    // A `tools/call` of the handshake era is served only once an MCP `initialize` was
    // recorded; an Executa `initialize` racing the call leaves none, and the newest (what
    // a client offering no known revision gets) stands in.
    link.session()
        .mcp_revision()
        .unwrap_or(MCP_REVISIONS[MCP_REVISIONS.len() - 1])
}

/// Fields older hosts put at the top level of `invoke` params (tokens wrapped as secrets
/// as soon as they are read).
#[derive(Default)]
pub(crate) struct LegacyFields {
    pub invoke_id: Option<Value>,
    pub tokens: Vec<(&'static str, Secret)>,
}

fn find<'a>(list: &'a [(String, Secret)], name: &str) -> Option<&'a str> {
    list.iter()
        .find(|(n, _)| n == name)
        .map(|(_, s)| s.expose())
}

/// `params.context`, read in one pass without building a `Value` tree: only the fields
/// the runtime uses are kept (borrowed from the request text where it has no escapes),
/// secrets go straight into [`Secret`]s, the rest is skipped.
#[derive(Default)]
struct WireContext<'a> {
    invoke_id: Option<Cow<'a, str>>,
    deadline_ms: Option<f64>,
    plugin_name: Option<String>,
    credentials: Vec<(String, Secret)>,
    tokens: Vec<(String, Secret)>,
}

impl<'de> WireContext<'de> {
    /// Reads `raw` (an object) into this (default) context in place, as the plugin's
    /// structs are moved by a slow byte copy at opt-level "z", and by hand
    /// (`json_scan.rs`; serde's visitors for it were 8 KB of every plugin). A context
    /// that is not a JSON object, or holds a string serde_json would refuse to unescape,
    /// leaves the default (what was read of it dropped, secrets wiped). A field of the
    /// wrong shape is skipped unread (no copy of it, nothing left to wipe), and the rest
    /// still counts.
    fn fill(&mut self, raw: &'de str) {
        let read = json_scan::for_each_member(raw, |key, value| {
            match &*key {
                "invoke_id" => self.invoke_id = text_of(value)?.filter(|t| !t.is_empty()),
                "deadline_ms" => {
                    self.deadline_ms = is_number(value)
                        .then(|| serde_json::from_str::<f64>(value).ok())
                        .flatten();
                }
                "plugin_name" => {
                    self.plugin_name = text_of(value)?
                        .filter(|t| !t.is_empty())
                        .map(Cow::into_owned);
                }
                "credentials" if value.as_bytes().first() == Some(&b'{') => {
                    self.credentials = credentials(value).unwrap_or_default();
                }
                k if k.ends_with("_token") => {
                    if let Some(token) = text_of(value)? {
                        self.tokens
                            .push((k.to_owned(), Secret::new(token.into_owned())));
                    }
                }
                _ => {}
            }
            Some(())
        });
        if read.is_none() {
            *self = WireContext::default();
        }
    }
}

/// `context.credentials` (an object): names and secrets, each copied once, straight into
/// a [`Secret`]; `None` (what was read dropped, secrets wiped) when it does not read.
fn credentials(raw: &str) -> Option<Vec<(String, Secret)>> {
    let mut list = Vec::new();
    json_scan::for_each_member(raw, |name, value| {
        if let Some(secret) = text_of(value)? {
            list.push((name.into_owned(), Secret::new(secret.into_owned())));
        }
        Some(())
    })?;
    Some(list)
}

/// The text of a JSON value that is a string (borrowed where it has no escapes) or a
/// number (its digits as serde_json writes them): `Some(None)` for any other value, `None`
/// for a string serde_json refuses to unescape (a lone surrogate).
fn text_of(value: &str) -> Option<Option<Cow<'_, str>>> {
    if value.as_bytes().first() == Some(&b'"') {
        return json_scan::value_text(value).map(Some);
    }
    let number = is_number(value)
        .then(|| serde_json::from_str::<Value>(value).ok())
        .flatten();
    Some(number.and_then(text).map(Cow::Owned))
}

/// Whether a JSON value (valid, trimmed) is a number.
fn is_number(value: &str) -> bool {
    matches!(value.as_bytes().first(), Some(b'-' | b'0'..=b'9'))
}

fn text(v: Value) -> Option<String> {
    match v {
        Value::String(s) if !s.is_empty() => Some(s),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// An absolute epoch-milliseconds deadline; `None` for anything unrepresentable.
fn epoch_ms(ms: f64) -> Option<SystemTime> {
    let d = Duration::try_from_secs_f64(ms / 1000.0)
        .ok()
        .filter(|d| !d.is_zero())?;
    UNIX_EPOCH.checked_add(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(ctx: &str) -> WireContext<'_> {
        let mut c = WireContext::default();
        c.fill(ctx);
        c
    }

    #[test]
    fn reads_the_fields_it_needs_and_keeps_secrets_secret() {
        let c = parse(
            r#"{"credentials":{"API_KEY":"sk-1","N":7,"GONE":null},"invoke_id":"8f1c","sampling_token":"eyJ.a",
               "storage_token":"eyJ.b","deadline_ms":1767225600000,"plugin_name":"p","extra":{"x":[1]}}"#,
        );
        assert_eq!(c.invoke_id.as_deref(), Some("8f1c"));
        assert_eq!(c.deadline_ms, Some(1_767_225_600_000.0));
        assert_eq!(c.plugin_name.as_deref(), Some("p"));
        let creds: Vec<_> = c
            .credentials
            .iter()
            .map(|(k, v)| (k.as_str(), v.expose()))
            .collect();
        assert_eq!(creds, [("API_KEY", "sk-1"), ("N", "7")]);
        let tokens: Vec<_> = c.tokens.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(tokens, ["sampling_token", "storage_token"]);
        let shown = format!("{:?}", c.tokens);
        assert!(!shown.contains("eyJ"), "{shown}");
    }

    #[test]
    fn a_bad_field_does_not_lose_the_others() {
        let c =
            parse(r#"{"credentials":[1],"invoke_id":"i","deadline_ms":1e300,"plugin_name":{}}"#);
        assert_eq!(c.invoke_id.as_deref(), Some("i"));
        assert!(c.credentials.is_empty());
        assert_eq!(
            c.deadline_ms.and_then(epoch_ms),
            None,
            "an absurd deadline is ignored, not a panic"
        );
    }

    #[test]
    fn an_unescaped_invoke_id_is_borrowed_and_an_escaped_one_decoded() {
        let c = parse(r#"{"invoke_id":"abc-1"}"#);
        assert!(matches!(c.invoke_id, Some(Cow::Borrowed("abc-1"))));
        let c = parse(r#"{"invo\u006be_id":"a\"b"}"#);
        assert_eq!(c.invoke_id.as_deref(), Some("a\"b"));
        let c = parse(r#"{"invoke_id":""}"#);
        assert_eq!(c.invoke_id, None, "an empty id is no id");
        let c = parse(r#"{"invoke_id":{"x":1},"plugin_name":"p"}"#);
        assert_eq!((c.invoke_id, c.plugin_name.as_deref()), (None, Some("p")));
    }

    /// Secrets of the wrong shape are skipped without being copied (nothing to wipe), and
    /// the rest of the context still counts.
    #[test]
    fn wrongly_shaped_secrets_are_skipped_unread() {
        let c = parse(
            r#"{"credentials":"sk-bare","storage_token":{"x":"sk-n"},"sampling_token":["sk-a"],"invoke_id":"i"}"#,
        );
        assert!(c.credentials.is_empty() && c.tokens.is_empty());
        assert_eq!(c.invoke_id.as_deref(), Some("i"));
        let c = parse(r#"{"credentials":{"B":{"n":"sk"},"A":"a","C":[1],"D":true,"E":1.5}}"#);
        let creds: Vec<_> = c
            .credentials
            .iter()
            .map(|(k, v)| (k.as_str(), v.expose()))
            .collect();
        assert_eq!(creds, [("A", "a"), ("E", "1.5")]);
    }

    /// A field whose number is out of range, or whose string does not unescape, is
    /// skipped; the rest of the context still counts. (Before the hand reader such a
    /// field reset the whole context.)
    #[test]
    fn an_unreadable_field_is_skipped_and_the_rest_counts() {
        let c = parse(
            r#"{"invoke_id":"i","deadline_ms":1e400,"plugin_name":1e400,"credentials":{"A":"a","B":1e400}}"#,
        );
        assert_eq!(c.invoke_id.as_deref(), Some("i"));
        assert_eq!((c.deadline_ms, c.plugin_name), (None, None));
        let creds: Vec<_> = c.credentials.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(creds, ["A"]);
        let c = parse(r#"{"invoke_id":"i","sampling_token":"t\uD800"}"#);
        assert_eq!(
            c.invoke_id, None,
            "a string serde would refuse resets the context"
        );
    }

    #[test]
    fn numeric_invoke_id_and_missing_fields() {
        let c = parse(r#"{"invoke_id":12}"#);
        assert_eq!(c.invoke_id.as_deref(), Some("12"));
        assert!(c.deadline_ms.is_none() && c.credentials.is_empty() && c.tokens.is_empty());
    }
}
