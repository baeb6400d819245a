//! The host's requests to an MCP stdio server (Model Context Protocol): the `initialize`
//! handshake and the recognition of an MCP server under [`Protocol::Auto`], `tools/list`
//! (every page) for `describe`, `tools/call` for `invoke` and its result read as an
//! [`InvokeResult`], and `ping` for `health`. What lies under the requests (framing, the
//! frame cap, the pending table, timeouts, the shutdown sequence) is the code the
//! Executa requests use (`shared.rs`); what the server sends back unasked is read in
//! `mcp_reverse.rs`.
//!
//! [`Protocol::Auto`]: super::Protocol::Auto

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::context::InvokeOptions;
use super::mcp_reverse::SAMPLING;
use super::process::PluginProcess;
use super::types::{Handshake, HealthReport, InvokeResult, snippet};
use crate::error::{Error, Result, RpcError, codes};
use crate::protocol::ProtocolVersion;

pub(crate) use crate::protocol::{MCP_REVISIONS as REVISIONS, is_mcp_revision as is_dated};
/// The revision the host proposes in its MCP `initialize`.
pub const PROPOSED: &str = REVISIONS[REVISIONS.len() - 1];
/// Most `tools/list` pages read for one `describe`: a server whose cursors never end
/// cannot keep the host reading (each page is bounded by the frame cap).
pub const MAX_PAGES: usize = 100;
/// Most bytes of `tools/list` results read for one `describe`, all pages together (the
/// JSON text of each page's `result`). The page that crosses it is the last one read
/// (a page is bounded by the frame cap, `HostOptions::max_frame_bytes`), so the host
/// reads at most this plus one frame.
pub const MAX_TOOLS_LIST_BYTES: usize = 16 * 1024 * 1024;
/// Most tools read for one `describe`, all pages together.
pub const MAX_TOOLS: usize = 10_000;
/// Most memory the manifest made from `tools/list` may take, as estimated before it is
/// built: each tool's JSON tree (kept in the tool's `extra`) and the parameter lists made
/// from the schemas (where a `$ref` is expanded, its every use counts). A JSON tree costs
/// 10 to 100 times its text (a small object is a whole B-tree node), so this cap, not
/// [`MAX_TOOLS_LIST_BYTES`], is what bounds a list of many small schemas; it keeps the
/// host's memory within a few times [`MAX_TOOLS_LIST_BYTES`].
pub const MAX_TOOLS_HEAP_BYTES: usize = 64 * 1024 * 1024;

/// What an `initialize` answer says about the protocol, read the same way by the host
/// and by drivers that own the pipes (`executa bench`).
#[derive(Debug, PartialEq, Eq)]
pub enum Revision {
    /// No dated `protocolVersion`: an Executa plugin's answer.
    None,
    /// A dated revision spoken here ([`REVISIONS`]): the session is MCP.
    Spoken(String),
    /// A dated revision not spoken here (an MCP server answers a revision it does not know,
    /// such as Executa's `2.0`, with its own newest): propose [`PROPOSED`] in an MCP
    /// `initialize`.
    Other(String),
}

/// The revision an `initialize` result names. Never blocks.
pub fn revision(result: &RawValue) -> Revision {
    #[derive(serde::Deserialize)]
    struct Answer {
        #[serde(rename = "protocolVersion")]
        version: Option<String>,
    }
    let version = serde_json::from_str::<Answer>(result.get())
        .ok()
        .and_then(|a| a.version);
    match version {
        Some(v) if REVISIONS.contains(&v.as_str()) => Revision::Spoken(v),
        Some(v) if is_dated(&v) => Revision::Other(v),
        _ => Revision::None,
    }
}

/// `tools/list` read page by page, the same way by the host and by drivers that own the
/// pipes (`executa bench`): the params of each request, and each page's result taken in,
/// following `nextCursor` within the caps named in `src/host/mcp.rs`: `MAX_PAGES` (100)
/// pages, `MAX_TOOLS_LIST_BYTES` (16 MiB) of results, `MAX_TOOLS` (10,000) tools, and
/// `MAX_TOOLS_HEAP_BYTES` (64 MiB), the memory the manifest made from them would take.
/// Each tool is kept as the JSON text the server sent, never as a tree: the page is
/// dropped once taken.
#[derive(Default)]
pub struct ToolsPager {
    tools: Vec<Box<RawValue>>,
    cursor: Option<String>,
    pages: usize,
    bytes: usize,
    heap: usize,
}

/// A `tools/list` result, borrowed from the page's text.
#[derive(Deserialize)]
struct Page<'a> {
    #[serde(borrow)]
    tools: Option<&'a RawValue>,
    #[serde(borrow, rename = "nextCursor")]
    next_cursor: Option<&'a RawValue>,
}

impl ToolsPager {
    /// The params of the next `tools/list` request (`{}`, then `{"cursor": ...}`).
    pub fn params(&self) -> Value {
        match &self.cursor {
            Some(c) => json!({ "cursor": c }),
            None => json!({}),
        }
    }

    /// Takes in one page's result: `Ok(true)` when it was the last, `Ok(false)` when the
    /// next must be asked for. A page without a `tools` array, a cursor repeated, more
    /// than `MAX_PAGES` pages, or a list past `MAX_TOOLS_LIST_BYTES`, `MAX_TOOLS` or
    /// `MAX_TOOLS_HEAP_BYTES` are [`Error::Protocol`]s naming what was crossed. Never
    /// blocks.
    pub fn take(&mut self, result: &RawValue) -> Result<bool> {
        self.bytes = self.bytes.saturating_add(result.get().len());
        self.pages += 1;
        if self.bytes > MAX_TOOLS_LIST_BYTES {
            return Err(past_cap(
                format!("{} bytes in {} pages", self.bytes, self.pages),
                MAX_TOOLS_LIST_BYTES,
                "MAX_TOOLS_LIST_BYTES",
            ));
        }
        let room = MAX_TOOLS - self.tools.len();
        let Some((list, next)) = read_page(result, room)? else {
            return Err(past_cap(
                format!("more than {room} tools on page {}", self.pages),
                MAX_TOOLS,
                "MAX_TOOLS",
            ));
        };
        self.keep(&list)?;
        match next {
            Some(next) if self.cursor.as_deref() == Some(next.as_str()) => {
                Err(Error::Protocol(format!(
                    "tools/list returned the cursor {next:?} it was given: the pages never end"
                )))
            }
            Some(next) if !next.is_empty() && self.pages == MAX_PAGES => Err(Error::Protocol(
                format!("tools/list: more than {MAX_PAGES} pages (MAX_PAGES); stopped reading"),
            )),
            Some(next) if !next.is_empty() => {
                self.cursor = Some(next);
                Ok(false)
            }
            _ => Ok(true),
        }
    }

    /// Copies a page's tools, counting the memory their trees will take.
    fn keep(&mut self, list: &[&RawValue]) -> Result<()> {
        for tool in list {
            self.heap = self.heap.saturating_add(super::json_cost::tree_cost(tool)?);
            if self.heap > MAX_TOOLS_HEAP_BYTES {
                return Err(past_heap_cap(self.heap));
            }
        }
        self.tools.extend(list.iter().map(|t| (*t).to_owned()));
        Ok(())
    }

    /// The tools of every page taken, in order, each the JSON text the server sent.
    pub fn into_tools(self) -> Vec<Box<RawValue>> {
        self.tools
    }
}

/// A page's tools (borrowed) and its `nextCursor` when that is a string; `None` when it
/// has more than `room` tools (counted as they are read: no list past it is made).
fn read_page(result: &RawValue, room: usize) -> Result<Option<(Vec<&RawValue>, Option<String>)>> {
    // Serde would also read a struct from an array (`[tools, nextCursor]`): not a page.
    let is_object = result.get().trim_start().starts_with('{');
    let page = serde_json::from_str::<Page>(result.get())
        .ok()
        .filter(|_| is_object);
    let crowded = std::cell::Cell::new(false);
    let list = page.as_ref().and_then(|p| p.tools).and_then(|t| {
        let mut de = serde_json::Deserializer::from_str(t.get());
        serde::de::DeserializeSeed::deserialize(AtMost(room, &crowded), &mut de).ok()
    });
    if crowded.get() {
        return Ok(None);
    }
    let Some(list) = list else {
        return Err(Error::Protocol(format!(
            "tools/list result has no `tools` array: {}",
            snippet(result.get())
        )));
    };
    let next = page
        .and_then(|p| p.next_cursor)
        .and_then(|c| serde_json::from_str::<String>(c.get()).ok());
    Ok(Some((list, next)))
}

/// Reads a JSON array of at most `.0` elements, each as its text; past that it stops and
/// notes it in `.1`.
struct AtMost<'c>(usize, &'c std::cell::Cell<bool>);

impl<'de> serde::de::DeserializeSeed<'de> for AtMost<'_> {
    type Value = Vec<&'de RawValue>;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for AtMost<'_> {
    type Value = Vec<&'de RawValue>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "an array of at most {} tools", self.0)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<&RawValue>()? {
            if items.len() == self.0 {
                self.1.set(true);
                return Err(serde::de::Error::custom("too many tools"));
            }
            items.push(item);
        }
        Ok(items)
    }
}

/// The error for a `tools/list` past one of its caps: what was read, the cap and its name.
fn past_cap(what: String, cap: usize, name: &str) -> Error {
    Error::Protocol(format!(
        "tools/list: {what}, past the cap of {cap} ({name}); stopped reading"
    ))
}

/// The error for a `tools/list` whose manifest would take more than
/// [`MAX_TOOLS_HEAP_BYTES`].
pub(super) fn past_heap_cap(estimate: usize) -> Error {
    Error::Protocol(format!(
        "tools/list: the manifest made from these tools would take more than {estimate} \
         bytes of memory, past the cap of {MAX_TOOLS_HEAP_BYTES} (MAX_TOOLS_HEAP_BYTES); \
         refused"
    ))
}

/// Every tool as one `{"tools": [...]}`, each tool's text as the server sent it; each is
/// freed once copied.
fn join_tools(tools: Vec<Box<RawValue>>) -> Result<Box<RawValue>> {
    let len = tools.iter().map(|t| t.get().len() + 1).sum::<usize>();
    let mut text = String::with_capacity(len + 16);
    text.push_str("{\"tools\":[");
    for (i, tool) in tools.into_iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str(tool.get());
    }
    text.push_str("]}");
    Ok(RawValue::from_string(text)?)
}

/// Whether an error answering the Executa `initialize` reads like a refusal of its
/// version ("unsupported protocol version"), which an MCP server may send instead of
/// naming its own revision: [`Protocol::Auto`](super::Protocol::Auto) then retries once
/// in MCP form. Never blocks.
pub fn suggests_version(e: &RpcError) -> bool {
    e.message.to_ascii_lowercase().contains("version")
}

/// `params` of `tools/call`.
#[derive(Serialize)]
struct CallParams<'a, A: ?Sized + Serialize> {
    name: &'a str,
    arguments: &'a A,
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    meta: Option<CallMeta<'a>>,
}

#[derive(Serialize)]
struct CallMeta<'a> {
    /// The invoke id: progress notifications carrying it are the invoke's.
    #[serde(rename = "progressToken")]
    progress_token: &'a str,
}

impl PluginProcess {
    /// The MCP session under `id` (the first request's), in the era
    /// [`HostOptions::mcp_version`](super::HostOptions::mcp_version) chooses (see
    /// `mcp_modern.rs`): by default a `server/discover` probe, then this handshake.
    /// Every failure is an error (an MCP session has no fallback to Executa).
    pub(super) fn initialize_mcp(&self, id: u64, start: Instant) -> Result<Handshake> {
        self.negotiate_mcp(id, start)
    }

    /// The MCP `initialize` under `id`: proposes `pinned`, else [`PROPOSED`], declares
    /// `sampling` only when a handler answers `sampling/createMessage`, and adopts the
    /// answer (see [`PluginProcess::adopt_mcp`]), which must name `pinned` when one is.
    /// Blocks up to the initialize timeout.
    pub(super) fn handshake_mcp(
        &self,
        id: u64,
        pinned: Option<&str>,
        start: Instant,
    ) -> Result<Handshake> {
        let opts = &self.shared.opts;
        let mut capabilities = Map::new();
        if self.dispatch.handles(SAMPLING) {
            capabilities.insert("sampling".to_owned(), json!({}));
        }
        let params = json!({
            "protocolVersion": pinned.unwrap_or(PROPOSED),
            "capabilities": capabilities,
            "clientInfo": { "name": opts.client_name, "version": opts.client_version },
        });
        let raw =
            self.shared
                .request_as(id, "initialize", Some(&params), opts.initialize_timeout)?;
        self.adopt_mcp(&raw, pinned, start)
    }

    /// Reads an MCP `initialize` result, switches the session to MCP and sends
    /// `notifications/initialized`. A revision the host does not speak, or another than
    /// the one `pinned`, is an [`Error::Protocol`] naming it (the spec has the client
    /// disconnect then).
    pub(super) fn adopt_mcp(
        &self,
        raw: &RawValue,
        pinned: Option<&str>,
        start: Instant,
    ) -> Result<Handshake> {
        let shake = read_handshake(raw, start.elapsed())?;
        if let Some(pinned) = pinned.filter(|p| shake.mcp_revision.as_deref() != Some(*p)) {
            return Err(Error::Protocol(format!(
                "MCP {pinned} was asked for (pinned), but the server answered initialize with \
                 {}",
                shake.mcp_revision.as_deref().unwrap_or("another revision")
            )));
        }
        self.shared.set_mcp();
        self.notify(
            "notifications/initialized",
            &json!({}),
            self.shared.opts.request_timeout,
        )?;
        Ok(shake)
    }

    /// Under [`Protocol::Auto`](super::Protocol::Auto): the answer to the Executa
    /// `initialize` names a dated revision, so the peer is an MCP server. A revision the
    /// host speaks is adopted (unless another one is pinned); otherwise (the server
    /// answered its newest because "2.0" means nothing to it, or a pin wants another)
    /// the MCP session is settled again as [`PluginProcess::initialize_mcp`] settles it.
    pub(super) fn switch_to_mcp(
        &self,
        raw: &RawValue,
        revision: Revision,
        start: Instant,
    ) -> Result<Handshake> {
        let pinned = self.shared.opts.mcp_version.pinned();
        let answered = match revision {
            Revision::Spoken(v) if pinned.is_none_or(|p| p == v) => {
                return self.adopt_mcp(raw, None, start);
            }
            Revision::Spoken(v) | Revision::Other(v) => v,
            Revision::None => String::new(),
        };
        log::debug!(
            "[plugin:{}] MCP server answered revision {answered}; settling the session again",
            self.shared.label
        );
        self.initialize_mcp(self.shared.fresh_id(), start)
    }

    /// `tools/list`, following `nextCursor` within the caps of [`ToolsPager`], all within
    /// `timeout`: the tools of every page as one `{"tools": [...]}`, each tool's text as
    /// the server sent it. A page without a `tools` array, a cursor repeated or a list
    /// past a cap is an [`Error::Protocol`].
    pub(super) fn list_tools(&self, timeout: Duration) -> Result<Box<RawValue>> {
        let deadline = Instant::now() + timeout;
        let mut pager = ToolsPager::default();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout {
                    method: "tools/list".to_owned(),
                    after: timeout,
                });
            }
            let mut params = pager.params();
            if let Some(envelope) = self.envelope() {
                params["_meta"] = serde_json::to_value(envelope)?;
            }
            let raw = self.shared.request("tools/list", Some(&params), left)?;
            if pager.take(&raw)? {
                drop(raw);
                return join_tools(pager.into_tools());
            }
        }
    }

    /// `tools/call {name, arguments}` under `invoke_id`, which is also the
    /// `_meta.progressToken` when a progress callback is set. MCP has no invoke context:
    /// credentials or tokens in `opts` are refused ([`Error::Refused`], -32602) rather
    /// than dropped unseen. Blocks until the reply or `timeout`.
    pub(super) fn call_tool<A: Serialize + ?Sized>(
        &self,
        tool: &str,
        arguments: &A,
        opts: &InvokeOptions,
        invoke_id: &str,
        timeout: Duration,
    ) -> Result<Box<RawValue>> {
        if !opts.credentials.is_empty() || !opts.tokens.is_empty() {
            return Err(Error::Refused(RpcError::new(
                codes::INVALID_PARAMS,
                "an MCP server has no invoke context: credentials and tokens cannot be sent to it",
            )));
        }
        if let Some(envelope) = self.envelope() {
            return self.call_tool_stateless(tool, arguments, invoke_id, envelope, timeout);
        }
        let params = CallParams {
            name: tool,
            arguments,
            meta: self.dispatch.has_progress().then_some(CallMeta {
                progress_token: invoke_id,
            }),
        };
        self.shared.request("tools/call", Some(&params), timeout)
    }

    /// `ping` with the health timeout: an empty answer is `ready`; -32601 counts as
    /// healthy, as for an Executa plugin without `health`. A stateless session has no
    /// `ping`: it is asked `server/discover` instead.
    pub(super) fn ping(&self) -> Result<HealthReport> {
        if let Some(envelope) = self.envelope() {
            return self.discover_health(envelope);
        }
        match self
            .shared
            .request::<()>("ping", None, self.shared.opts.health_timeout)
        {
            Ok(_) => Ok(HealthReport {
                status: "ready".to_owned(),
                message: String::new(),
                details: Value::Null,
                implemented: true,
            }),
            Err(Error::Remote(e)) if e.code == codes::METHOD_NOT_FOUND => {
                Ok(HealthReport::unimplemented())
            }
            Err(e) => Err(e),
        }
    }
}

/// An MCP `initialize` result as a [`Handshake`]: the revision (one of [`REVISIONS`],
/// else an [`Error::Protocol`]), `serverInfo`, the server's `capabilities` and its
/// `instructions`.
pub(super) fn read_handshake(raw: &RawValue, elapsed: Duration) -> Result<Handshake> {
    let v: Value = serde_json::from_str(raw.get())?;
    let revision = v.get("protocolVersion").and_then(Value::as_str);
    let Some(revision) = revision.filter(|r| REVISIONS.contains(r)) else {
        return Err(Error::Protocol(format!(
            "the MCP server answered initialize with protocolVersion {}, which this host does \
             not speak (it speaks {})",
            revision.map_or_else(|| "(none)".to_owned(), |r| format!("{r:?}")),
            REVISIONS.join(", ")
        )));
    };
    Ok(Handshake {
        protocol: Some(ProtocolVersion::V2),
        fallback: None,
        server_info: v.get("serverInfo").cloned(),
        capabilities: v
            .get("capabilities")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default(),
        echoed_version: Some(revision.to_owned()),
        mcp_revision: Some(revision.to_owned()),
        instructions: v
            .get("instructions")
            .and_then(Value::as_str)
            .map(str::to_owned),
        elapsed,
    })
}

impl InvokeResult {
    /// Reads a `tools/call` result. `isError: true` is a failure whose message is the
    /// text content; otherwise the data is `structuredContent` when present, else the
    /// text content parsed as JSON when it parses, else that text as a JSON string (see
    /// [`content_data`]). The rest of the result (`content`, `_meta`, ...) is kept in
    /// [`InvokeResult::extra`]. A result that is not an object is an [`Error::Protocol`].
    pub(crate) fn from_mcp(
        raw: Box<RawValue>,
        invoke_id: String,
        elapsed: Duration,
    ) -> Result<Self> {
        let Value::Object(mut map) = serde_json::from_str(raw.get())? else {
            return Err(Error::Protocol(format!(
                "tools/call result must be an object {{content, ...}}, got {}",
                snippet(raw.get())
            )));
        };
        let failed = map
            .remove("isError")
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        let structured = map.remove("structuredContent").filter(|v| !v.is_null());
        let content = map.get("content").and_then(Value::as_array);
        let (data, error) = if failed {
            let text = content.map(|c| texts(c).join("\n")).unwrap_or_default();
            let text = if text.is_empty() {
                "the MCP tool reported an error without text".to_owned()
            } else {
                text
            };
            (Value::Null, Some(text))
        } else {
            let data = match structured {
                Some(s) => s,
                None => content.map_or(Value::Null, |c| content_data(c)),
            };
            (data, None)
        };
        Ok(InvokeResult {
            success: !failed,
            data,
            error,
            details: None,
            duration_ms: None,
            extra: map,
            invoke_id,
            elapsed,
            raw,
        })
    }
}

/// The text of each `text` block.
fn texts(content: &[Value]) -> Vec<&str> {
    content
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect()
}

/// The data of a successful result without `structuredContent`: one text block parsed
/// as JSON when it parses, else its text as a string; several text blocks (what some
/// servers send for a list) an array of their values when each parses, else their text
/// joined by newlines; no text block at all, the content blocks themselves (images,
/// resources), or `null` when there are none.
fn content_data(content: &[Value]) -> Value {
    let texts = texts(content);
    match texts.as_slice() {
        [] if content.is_empty() => Value::Null,
        [] => Value::Array(content.to_vec()),
        [one] => serde_json::from_str(one).unwrap_or_else(|_| Value::from(*one)),
        many => many
            .iter()
            .map(|t| serde_json::from_str::<Value>(t).ok())
            .collect::<Option<Vec<_>>>()
            .map_or_else(|| Value::from(many.join("\n")), Value::Array),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(json: &str) -> InvokeResult {
        let raw = RawValue::from_string(json.to_owned()).expect("JSON");
        InvokeResult::from_mcp(raw, "inv".into(), Duration::ZERO).expect("an object")
    }

    #[test]
    fn dated_revisions_are_mcp_and_only_known_ones_are_spoken() {
        let raw = |v: Value| serde_json::value::to_raw_value(&v).expect("JSON");
        for v in REVISIONS {
            let r = revision(&raw(json!({"protocolVersion": v})));
            assert_eq!(r, Revision::Spoken(v.to_owned()));
        }
        let newer = revision(&raw(json!({"protocolVersion": "2099-01-01"})));
        assert_eq!(newer, Revision::Other("2099-01-01".to_owned()));
        for executa in [json!({"protocolVersion": "2.0"}), json!({}), json!([])] {
            assert_eq!(revision(&raw(executa)), Revision::None);
        }
    }

    #[test]
    fn the_pager_follows_cursors_and_refuses_pages_without_end() {
        let raw = |v: Value| serde_json::value::to_raw_value(&v).expect("JSON");
        let mut pager = ToolsPager::default();
        assert_eq!(pager.params(), json!({}));
        let first = raw(json!({"tools": [{"name": "a"}], "nextCursor": "p2"}));
        assert!(!pager.take(&first).expect("a page"));
        assert_eq!(pager.params(), json!({"cursor": "p2"}));
        assert!(
            pager
                .take(&raw(json!({"tools": [{"name": "b"}]})))
                .expect("the last page")
        );
        let tools = pager.into_tools();
        let tools: Vec<&str> = tools.iter().map(|t| t.get()).collect();
        assert_eq!(tools, [r#"{"name":"a"}"#, r#"{"name":"b"}"#]);
        let mut pager = ToolsPager::default();
        assert!(!pager.take(&first).expect("a page"));
        assert!(
            matches!(pager.take(&first), Err(Error::Protocol(_))),
            "a cursor repeated"
        );
        let mut pager = ToolsPager::default();
        let pages = (0..MAX_PAGES)
            .map(|i| pager.take(&raw(json!({"tools": [], "nextCursor": format!("c{i}")}))))
            .collect::<Vec<_>>();
        assert!(
            pages[..MAX_PAGES - 1]
                .iter()
                .all(|p| matches!(p, Ok(false)))
        );
        assert!(
            matches!(pages[MAX_PAGES - 1], Err(Error::Protocol(_))),
            "past the cap"
        );
        let no_lists = [
            json!({"items": []}),
            json!({"tools": {}}),
            json!([]),
            json!([[{"name": "a"}]]),
        ];
        for no_list in no_lists {
            assert!(matches!(
                ToolsPager::default().take(&raw(no_list)),
                Err(Error::Protocol(_))
            ));
        }
        let mut pager = ToolsPager::default();
        let odd_cursor = raw(json!({"tools": [], "nextCursor": 7}));
        assert!(
            pager
                .take(&odd_cursor)
                .expect("a cursor not a string ends the list")
        );
    }

    /// The text is kept as sent: a page's tools are the server's bytes, spaces and all.
    #[test]
    fn the_pager_keeps_each_tool_as_sent_and_joins_them() {
        let page = RawValue::from_string(
            r#"{"tools": [ {"name": "a", "inputSchema": {"type": "object"}} ,{"name":"b"}]}"#
                .to_owned(),
        )
        .expect("JSON");
        let mut pager = ToolsPager::default();
        assert!(pager.take(&page).expect("a page"));
        let joined = join_tools(pager.into_tools()).expect("joined");
        assert_eq!(
            joined.get(),
            r#"{"tools":[{"name": "a", "inputSchema": {"type": "object"}},{"name":"b"}]}"#
        );
        let empty = join_tools(ToolsPager::default().into_tools()).expect("joined");
        assert_eq!(empty.get(), r#"{"tools":[]}"#);
    }

    fn error_text<T: std::fmt::Debug>(r: Result<T>) -> String {
        match r {
            Err(Error::Protocol(why)) => why,
            other => panic!("expected a protocol error, got {other:?}"),
        }
    }

    #[test]
    fn the_pager_refuses_a_list_past_its_bytes_or_its_count_by_name() {
        let text = "x".repeat(MAX_TOOLS_LIST_BYTES / 4);
        let page = |cursor: &str| {
            let tools = json!([{"name": "t", "description": text}]);
            serde_json::value::to_raw_value(&json!({"tools": tools, "nextCursor": cursor}))
                .expect("JSON")
        };
        let mut pager = ToolsPager::default();
        for i in 0..3 {
            assert!(!pager.take(&page(&format!("c{i}"))).expect("under the cap"));
        }
        let why = error_text(pager.take(&page("c3")));
        assert!(
            why.contains("MAX_TOOLS_LIST_BYTES") && why.contains("4 pages"),
            "{why}"
        );

        let many: Vec<Value> = (0..=MAX_TOOLS)
            .map(|i| json!({"name": i.to_string()}))
            .collect();
        let many = serde_json::value::to_raw_value(&json!({"tools": many})).expect("JSON");
        let why = error_text(ToolsPager::default().take(&many));
        assert!(
            why.contains("MAX_TOOLS") && why.contains("more than 10000 tools"),
            "{why}"
        );
    }

    /// A page of small objects is a few MiB of text but a tree many times that: refused
    /// from the estimate, before any tree is built.
    #[test]
    fn the_pager_refuses_tools_whose_trees_pass_the_heap_cap() {
        let tool = json!({"name": "t", "inputSchema": {"type": "object", "properties":
            (0..400).map(|i| (format!("p{i}"), json!({"type": "integer"})))
                .collect::<Map<String, Value>>()}});
        let page = json!({"tools": vec![tool; 400]});
        let page = serde_json::value::to_raw_value(&page).expect("JSON");
        assert!(page.get().len() < MAX_TOOLS_LIST_BYTES / 2);
        let why = error_text(ToolsPager::default().take(&page));
        assert!(why.contains("MAX_TOOLS_HEAP_BYTES"), "{why}");
    }

    #[test]
    fn dated_versions_are_mcp_and_executa_versions_are_not() {
        assert!(is_dated("2025-06-18") && is_dated("2026-07-28"));
        assert!(!is_dated("2.0") && !is_dated("1.1") && !is_dated("2025-6-18"));
        assert!(!is_dated("2025-06-18x") && !is_dated("abcd-ef-gh"));
    }

    #[test]
    fn a_result_maps_to_structured_content_then_parsed_text_then_text() {
        let r = result(
            r#"{"content":[{"type":"text","text":"{}"}],"structuredContent":{"a":1},"isError":false}"#,
        );
        assert!(r.success && r.data == json!({"a": 1}) && r.extra.contains_key("content"));
        let r = result(r#"{"content":[{"type":"text","text":"[1, 2]"}]}"#);
        assert_eq!(r.data, json!([1, 2]));
        let r = result(r#"{"content":[{"type":"text","text":"plain words"}]}"#);
        assert_eq!(r.data, json!("plain words"));
        let r = result(r#"{"content":[{"type":"text","text":"1"},{"type":"text","text":"x"}]}"#);
        assert_eq!(r.data, json!("1\nx"));
        let r = result(r#"{"content":[{"type":"text","text":"1"},{"type":"text","text":"2"}]}"#);
        assert_eq!(r.data, json!([1, 2]));
        let r = result(r#"{"content":[{"type":"image","data":"AA==","mimeType":"image/png"}]}"#);
        assert_eq!(r.data[0]["type"], "image");
    }

    #[test]
    fn an_error_result_is_a_failure_with_its_text() {
        let r = result(r#"{"content":[{"type":"text","text":"bad input"}],"isError":true}"#);
        assert!(!r.success && r.data.is_null());
        assert_eq!(r.error.as_deref(), Some("bad input"));
        let r = result(r#"{"content":[],"isError":true}"#);
        assert!(r.error.is_some_and(|e| e.contains("without text")));
    }

    #[test]
    fn an_unspoken_revision_is_refused_by_name() {
        let raw =
            RawValue::from_string(r#"{"protocolVersion":"2030-01-01"}"#.to_owned()).expect("JSON");
        let e = read_handshake(&raw, Duration::ZERO).expect_err("refused");
        assert!(e.to_string().contains("2030-01-01"), "{e}");
        let raw = RawValue::from_string(
            r#"{"protocolVersion":"2025-06-18","serverInfo":{"name":"s"},"instructions":"hi"}"#
                .to_owned(),
        )
        .expect("JSON");
        let h = read_handshake(&raw, Duration::ZERO).expect("spoken");
        assert_eq!(h.mcp_revision.as_deref(), Some("2025-06-18"));
        assert_eq!(
            (h.version_str(), h.instructions.as_deref()),
            ("mcp", Some("hi"))
        );
    }
}
