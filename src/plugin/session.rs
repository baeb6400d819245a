//! What `initialize` negotiated, recorded for the whole process.
//!
//! Both documented request shapes are accepted: the current one
//! (`{protocolVersion, clientInfo, capabilities:{sampling:{...}, fileTransport}}`) and the
//! older one (`{protocolVersion, host_capabilities:{"llm.sample":true}}`). The reply carries
//! both key spellings the sources use (`server_info`/`serverInfo`,
//! `capabilities`/`client_capabilities`) with the same content, since which one a host reads
//! is undocumented.

use std::sync::Mutex;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::protocol::ProtocolVersion;

/// What the host offered in `initialize` and what was agreed.
#[derive(Clone, Debug, Default)]
pub struct Negotiated {
    /// `None` until `initialize` arrives (dev hosts never send it). `V1` also when the host
    /// offered a version other than "2.0": reverse RPC is then off.
    pub version: Option<ProtocolVersion>,
    /// `clientInfo.name`, when given.
    pub client_name: Option<String>,
    /// The host's capability offer (current shape), as sent.
    pub host_capabilities: Map<String, Value>,
    /// `capabilities.sampling.maxCallsPerInvoke`, when offered.
    pub max_sampling_calls: Option<u64>,
    /// `capabilities.sampling.maxTokensPerCall`, when offered.
    pub max_tokens_per_call: Option<u64>,
    /// `capabilities.fileTransport`.
    pub file_transport: bool,
    /// The MCP revision agreed (`2025-06-18`, ...) when the client is an MCP client (the
    /// `mcp` feature); always `None` for an Executa host and without the feature (the
    /// field is there either way, so that turning the feature on changes no type). An MCP
    /// client's `capabilities` are in `host_capabilities`.
    pub mcp: Option<String>,
}

impl Negotiated {
    /// Whether reverse RPC may be attempted: anything but an explicitly negotiated v1.
    pub fn reverse_rpc_allowed(&self) -> bool {
        self.version != Some(ProtocolVersion::V1)
    }
}

/// Process-wide session state.
#[derive(Default)]
pub(crate) struct Session(Mutex<Negotiated>);

impl Session {
    fn lock(&self) -> std::sync::MutexGuard<'_, Negotiated> {
        crate::lock::lock(&self.0)
    }

    /// Records a session negotiated elsewhere (an MCP `initialize`).
    #[cfg(feature = "mcp")]
    pub fn set(&self, n: Negotiated) {
        *self.lock() = n;
    }

    /// Whether the client is an MCP client that declared the `sampling` capability.
    #[cfg(feature = "mcp")]
    pub fn mcp_client_samples(&self) -> bool {
        let n = self.lock();
        n.mcp.is_some()
            && n.host_capabilities
                .get("sampling")
                .is_some_and(Value::is_object)
    }

    /// The MCP revision of a handshake session, as the static text of the revision (read
    /// by `ctx.protocol()`, which must not allocate); `None` for an Executa host.
    #[cfg(feature = "mcp")]
    pub fn mcp_revision(&self) -> Option<&'static str> {
        let n = self.lock();
        let agreed = n.mcp.as_deref()?;
        crate::protocol::MCP_REVISIONS
            .iter()
            .copied()
            .find(|r| *r == agreed)
    }

    /// A copy of everything negotiated.
    pub fn get(&self) -> Negotiated {
        self.lock().clone()
    }

    /// Whether reverse RPC may be attempted (cheap: no copy).
    pub fn reverse_rpc_allowed(&self) -> bool {
        self.lock().reverse_rpc_allowed()
    }

    /// The host's sampling limits: (calls per invoke, tokens per call), when offered.
    pub fn sampling_limits(&self) -> (Option<u64>, Option<u64>) {
        let n = self.lock();
        (n.max_sampling_calls, n.max_tokens_per_call)
    }

    /// Handles `initialize` params and builds the reply.
    pub fn initialize(&self, params: &str, name: &str, version: &str, uses: &[&str]) -> Value {
        let req = InitRequest::parse(params);
        let offered = req.protocol_version.as_ref().map(version_text);
        let (agreed, text) = negotiate(offered.as_deref());
        let offer = offered_keys(&req);
        let mut caps = Map::new();
        for key in uses {
            if offer.iter().any(|k| k == key) {
                caps.insert((*key).to_owned(), json!({}));
            }
        }
        let sampling = req.capabilities.get("sampling");
        let n = Negotiated {
            version: Some(agreed),
            client_name: req
                .client_info
                .and_then(|c| c.get("name")?.as_str().map(str::to_owned)),
            max_sampling_calls: sampling.and_then(|s| s.get("maxCallsPerInvoke")?.as_u64()),
            max_tokens_per_call: sampling.and_then(|s| s.get("maxTokensPerCall")?.as_u64()),
            file_transport: req
                .capabilities
                .get("fileTransport")
                .and_then(Value::as_bool)
                == Some(true),
            host_capabilities: req.capabilities,
            mcp: None,
        };
        log::debug!(
            "executa: negotiated {:?} with {:?}",
            n.version,
            n.client_name
        );
        *self.lock() = n;
        // Built by hand rather than through `serde_json::to_value`, which would compile a
        // second serializer into every plugin for this one reply.
        let mut info = Map::new();
        info.insert("name".to_owned(), Value::from(name));
        info.insert("version".to_owned(), Value::from(version));
        let info = Value::Object(info);
        let caps = Value::Object(caps);
        // Both key spellings, same content: which one a host reads is undocumented.
        let mut reply = Map::new();
        reply.insert("protocolVersion".to_owned(), Value::from(text));
        reply.insert("server_info".to_owned(), info.clone());
        reply.insert("serverInfo".to_owned(), info);
        reply.insert("capabilities".to_owned(), caps.clone());
        reply.insert("client_capabilities".to_owned(), caps);
        Value::Object(reply)
    }
}

#[derive(Default)]
struct InitRequest {
    protocol_version: Option<Value>,
    client_info: Option<Value>,
    capabilities: Map<String, Value>,
    /// The older shape: capability strings mapped to booleans.
    host_capabilities: Map<String, Value>,
}

impl InitRequest {
    /// The params as sent; params of any other shape count as none at all.
    fn parse(params: &str) -> InitRequest {
        // The maps are read as `Value`s and checked here: a `Map` field would compile a
        // deserializer of its own next to `Value`'s.
        #[derive(Deserialize)]
        struct Wire {
            #[serde(default, rename = "protocolVersion")]
            protocol_version: Option<Value>,
            #[serde(default, rename = "clientInfo")]
            client_info: Option<Value>,
            #[serde(default = "no_map")]
            capabilities: Value,
            #[serde(default = "no_map")]
            host_capabilities: Value,
        }
        fn no_map() -> Value {
            Value::Object(Map::new())
        }
        match serde_json::from_str::<Wire>(params) {
            Ok(Wire {
                protocol_version,
                client_info,
                capabilities: Value::Object(capabilities),
                host_capabilities: Value::Object(host_capabilities),
            }) => InitRequest {
                protocol_version,
                client_info,
                capabilities,
                host_capabilities,
            },
            _ => InitRequest::default(),
        }
    }
}

/// "2.0" (or no offer) is v2. A 1.x offer is answered "1.1". Anything else is answered
/// "2.0", the newest this crate speaks, but reverse RPC stays off as in the official SDKs,
/// which disable their reverse clients whenever the host offers anything but "2.0".
fn negotiate(offered: Option<&str>) -> (ProtocolVersion, &'static str) {
    match offered {
        None | Some("2.0" | "2") => (ProtocolVersion::V2, "2.0"),
        Some(v) if v.starts_with("1.") || v == "1" => (ProtocolVersion::V1, "1.1"),
        Some(_) => (ProtocolVersion::V1, "2.0"),
    }
}

fn version_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => crate::wire::json_text(other),
    }
}

/// The `initialize` capability keys the host offered, from either request shape.
fn offered_keys(req: &InitRequest) -> Vec<String> {
    let truthy = |v: &Value| !matches!(v, Value::Null | Value::Bool(false));
    let mut keys: Vec<String> = req
        .capabilities
        .iter()
        .filter(|(_, v)| truthy(v))
        .map(|(k, _)| k.clone())
        .collect();
    for (cap, v) in &req.host_capabilities {
        if let Some(key) = init_key(cap).filter(|_| truthy(v)) {
            keys.push(key.to_owned());
        }
    }
    keys
}

/// The `initialize` capability key that goes with a manifest `host_capabilities` string.
pub(crate) fn init_key(capability: &str) -> Option<&'static str> {
    Some(match capability {
        "llm.sample" | "llm.complete" => "sampling",
        "aps" | "aps.kv" | "aps.files" => "storage",
        c if c.starts_with("aps.scope.") => "storage",
        "host.upload" => "upload",
        "llm.image" => "image",
        "llm.image.edit" => "image.edit",
        "llm.video" => "video",
        "llm.audio.speak" => "audio.speak",
        "llm.embed" => "embeddings",
        "llm.agent.auto" | "llm.agent.fixed" => "agent",
        c if c.starts_with("web.") => "web",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_shape_negotiates_v2_and_the_used_subset() {
        let s = Session::default();
        let params = r#"{"protocolVersion":"2.0","clientInfo":{"name":"matrix-agent","version":"1.0"},
            "capabilities":{"sampling":{"maxTokensPerCall":8192,"maxCallsPerInvoke":8},"fileTransport":true}}"#;
        let reply = s.initialize(params, "demo", "0.1.0", &["sampling", "storage"]);
        assert_eq!(reply["protocolVersion"], "2.0");
        assert_eq!(
            reply["server_info"],
            json!({"name":"demo","version":"0.1.0"})
        );
        assert_eq!(reply["serverInfo"], reply["server_info"]);
        assert_eq!(reply["capabilities"], json!({"sampling":{}}));
        assert_eq!(reply["client_capabilities"], reply["capabilities"]);
        let n = s.get();
        assert_eq!(n.version, Some(ProtocolVersion::V2));
        assert_eq!(n.max_sampling_calls, Some(8));
        assert!(n.file_transport);
        assert_eq!(n.client_name.as_deref(), Some("matrix-agent"));
    }

    #[test]
    fn params_of_another_shape_count_as_none() {
        let s = Session::default();
        let version =
            |params: &str| s.initialize(params, "demo", "1.0.0", &[])["protocolVersion"].clone();
        // A capability map that is not an object voids the whole request (v2 by default).
        assert_eq!(
            version(r#"{"protocolVersion":"1.1","capabilities":null}"#),
            "2.0"
        );
        assert_eq!(
            version(r#"{"protocolVersion":"1.1","host_capabilities":[true]}"#),
            "2.0"
        );
        assert_eq!(
            version(r#"{"protocolVersion":"1.1","capabilities":{},"host_capabilities":{}}"#),
            "1.1"
        );
        // The positional form serde accepts for structs, and its length limit.
        assert_eq!(version(r#"["1.1", null, {"sampling": {}}]"#), "1.1");
        assert_eq!(version(r#"["1.1", null, 3]"#), "2.0");
        assert_eq!(version(r#"["1.1", null, {}, {}, 5]"#), "2.0");
        // A field given twice is refused by serde, so the request counts as none.
        assert_eq!(
            version(r#"{"protocolVersion":"1.1","protocolVersion":"1.1"}"#),
            "2.0"
        );
        assert_eq!(version(r#"{"protocolVersion":7}"#), "2.0");
        assert!(!s.get().reverse_rpc_allowed(), "7 is not an offer of 2.0");
    }

    #[test]
    fn older_shape_and_v1() {
        let s = Session::default();
        let reply = s.initialize(
            r#"{"protocolVersion":"2.0","host_capabilities":{"llm.sample":true,"aps.kv":false}}"#,
            "demo",
            "1.0.0",
            &["sampling", "storage"],
        );
        assert_eq!(reply["capabilities"], json!({"sampling":{}}));
        let reply = s.initialize(r#"{"protocolVersion":"1.1"}"#, "demo", "1.0.0", &[]);
        assert_eq!(reply["protocolVersion"], "1.1");
        assert!(!s.get().reverse_rpc_allowed());
        let reply = s.initialize(r#"{"protocolVersion":"1.0"}"#, "demo", "1.0.0", &[]);
        assert_eq!(reply["protocolVersion"], "1.1");
        assert!(!s.get().reverse_rpc_allowed());
        let reply = s.initialize(r#"{"protocolVersion":"3.0"}"#, "demo", "1.0.0", &[]);
        assert_eq!(reply["protocolVersion"], "2.0");
        assert!(
            !s.get().reverse_rpc_allowed(),
            "only an offer of 2.0 unlocks reverse RPC"
        );
        let reply = s.initialize("null", "demo", "1.0.0", &[]);
        assert_eq!(reply["protocolVersion"], "2.0");
        assert!(s.get().reverse_rpc_allowed());
    }
}
