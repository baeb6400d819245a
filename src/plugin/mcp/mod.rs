//! Serving MCP clients (the cargo feature `mcp`): the Model Context Protocol over stdio is
//! the same line-delimited JSON-RPC 2.0 as Executa's, so the same runtime serves it. An
//! `initialize` whose `protocolVersion` is a date makes the session an MCP one
//! (`session.rs` records the revision); `tools/list` is the manifest's tools with JSON
//! Schema (`schema.rs`); `tools/call` travels the invoke path, flagged, and only its reply,
//! its progress and its reverse calls take MCP's shapes (`call.rs`). Nothing here runs for
//! an Executa host.

mod call;
mod era;
mod flight;
mod input;
mod schema;
mod seal;
mod tools;

pub(crate) use call::{Call, RESULT_HEAD, finish, progress_params, reverse_gate, tool_error};
pub(crate) use era::{Era, MetaMemo, discover_reply, era_of, unsupported};
pub(crate) use input::{Owed, Retried, Stateless, ask, bind, on_retry};

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::session::{Negotiated, Session};
pub(crate) use flight::Flight;
pub(crate) use flight::Seen;

// The revisions served: a client offering one of them gets it back, any other date gets
// the newest (the client then decides whether it can go on).
use crate::protocol::{MCP_REVISIONS as REVISIONS, is_mcp_revision as is_dated};

/// MCP state of the connection, beside the peer.
#[derive(Default)]
pub(crate) struct State {
    /// Whether the last `initialize` read was an MCP one. Set by the reader as it reads
    /// it, so requests pipelined behind it see it: MCP's methods (`tools/call`,
    /// `tools/list`, `ping`) are served only then, and an Executa host sees none of them.
    active: AtomicBool,
    /// The `tools/list` result, made on first request from the manifest.
    tools: OnceLock<Box<RawValue>>,
    /// Seals the `requestState` of input requests (2026-07-28), with a key made on first
    /// use: a plugin that never asks its client reads no random bytes.
    sealer: OnceLock<seal::Sealer>,
    /// What retries hand the calls they resume (2026-07-28).
    resumes: input::Resumes,
    /// Whether the manifest lets a handler sample at all, read once: every 2026-07-28 call
    /// asks it.
    plugin_samples: OnceLock<bool>,
}

impl State {
    /// Reads an `initialize` (its params text) on the reader: an MCP one makes the session
    /// MCP at once (revision, the client's capabilities) and returns the revision agreed,
    /// for the reply ([`initialize_reply`]); an Executa one ends MCP serving (`None`).
    pub fn on_initialize(&self, session: &Session, params: &str) -> Option<&'static str> {
        let revision = accept(session, params);
        self.active.store(revision.is_some(), Ordering::Release);
        revision
    }

    /// The process's `requestState` sealer.
    pub fn sealer(&self) -> &seal::Sealer {
        self.sealer.get_or_init(seal::Sealer::new)
    }

    /// Whether the manifest declares what sampling needs (`declared`: its
    /// host_capabilities, the same on every call).
    pub fn plugin_samples(&self, declared: &[String]) -> bool {
        *self
            .plugin_samples
            .get_or_init(|| crate::protocol::gate("sampling/createMessage", declared, true).is_ok())
    }

    /// What retries hand the calls they resume.
    pub fn resumes(&self) -> &input::Resumes {
        &self.resumes
    }

    /// Whether the session is an MCP one.
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// The `tools/list` result (`tools.rs`): every tool with its schemas and annotations,
    /// one page, with the caching hints.
    pub fn tools_list(&self, manifest_json: &RawValue) -> &RawValue {
        self.tools.get_or_init(|| tools::list(manifest_json))
    }
}

/// The result of an MCP `initialize` already recorded by [`State::on_initialize`]:
/// `revision`, and `serverInfo` and `instructions` from the manifest.
pub(crate) fn initialize_reply(revision: &str, manifest_json: &RawValue) -> Value {
    let manifest: Value = serde_json::from_str(manifest_json.get()).unwrap_or_default();
    let mut reply = Map::new();
    reply.insert("protocolVersion".into(), Value::from(revision));
    reply.insert(
        "capabilities".into(),
        json!({ "tools": { "listChanged": false } }),
    );
    reply.insert("serverInfo".into(), server_info(&manifest));
    if let Some(text) = instructions(&manifest) {
        reply.insert("instructions".into(), text.clone());
    }
    Value::Object(reply)
}

/// The server's `{name, version, title?}`, from the manifest.
fn server_info(manifest: &Value) -> Value {
    let field = |k: &str| manifest.get(k).cloned().unwrap_or(Value::Null);
    let mut info = Map::new();
    info.insert("name".into(), field("name"));
    info.insert("version".into(), field("version"));
    if let Some(title) = manifest.get("display_name").filter(|t| t.is_string()) {
        info.insert("title".into(), title.clone());
    }
    Value::Object(info)
}

/// The instructions for the client: the manifest's description, when it has one.
fn instructions(manifest: &Value) -> Option<&Value> {
    manifest
        .get("description")
        .filter(|d| d.as_str().is_some_and(|s| !s.is_empty()))
}

/// Records an MCP `initialize` (its params text) in the session and returns the revision
/// agreed; `None`, recording nothing, for an Executa one.
fn accept(session: &Session, params: &str) -> Option<&'static str> {
    #[derive(Deserialize)]
    struct Init {
        #[serde(rename = "protocolVersion")]
        protocol_version: String,
        #[serde(default)]
        capabilities: Value,
        #[serde(default, rename = "clientInfo")]
        client_info: Value,
    }
    let init = serde_json::from_str::<Init>(params).ok()?;
    if !is_dated(&init.protocol_version) {
        return None;
    }
    let offered = init.protocol_version.as_str();
    let revision = REVISIONS
        .iter()
        .find(|r| **r == offered)
        .unwrap_or(&REVISIONS[REVISIONS.len() - 1]);
    let client_name = init.client_info.get("name").and_then(Value::as_str);
    log::debug!("executa: MCP session, revision {revision}, client {client_name:?}");
    session.set(Negotiated {
        client_name: client_name.map(str::to_owned),
        host_capabilities: match init.capabilities {
            Value::Object(m) => m,
            _ => Map::new(),
        },
        mcp: Some((*revision).to_owned()),
        ..Negotiated::default()
    });
    Some(revision)
}

/// The `requestId` of a `notifications/cancelled` (its params text), as raw JSON text.
pub(crate) fn cancelled_id(params: &str) -> Option<Box<str>> {
    #[derive(Deserialize)]
    struct Cancelled<'a> {
        #[serde(rename = "requestId", borrow)]
        request_id: &'a RawValue,
    }
    let c = serde_json::from_str::<Cancelled<'_>>(params).ok()?;
    Some(c.request_id.get().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_mcp_revisions_and_executa_versions_are_not() {
        for v in REVISIONS {
            assert!(is_dated(v));
        }
        assert!(is_dated("2026-07-28"));
        for v in [
            "2.0",
            "1.1",
            "2",
            "",
            "2025-6-18",
            "2025-06-18x",
            "20250618xx",
            "2025_06_18",
        ] {
            assert!(!is_dated(v), "{v}");
        }
    }
}
