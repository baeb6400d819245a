//! Protocol vocabulary both sides share: the protocol versions, the reverse-call families
//! with the capability each needs, the per-invoke limits and the default timeouts. The
//! plugin checks these before sending a reverse call and the host (and `executa check`)
//! enforces the same rules, so the two can never disagree.

use std::time::Duration;

use crate::error::{RpcError, codes};

/// The protocol version a session runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtocolVersion {
    /// v1.1: no reverse RPC.
    V1,
    /// v2.0: reverse RPC available.
    V2,
}

/// Sampling: calls per invoke when the host did not say (`maxCallsPerInvoke`).
pub const DEFAULT_MAX_SAMPLING_CALLS: u64 = 8;
/// Sampling: `maxTokens` per call when the host did not say (`maxTokensPerCall`).
pub const DEFAULT_MAX_TOKENS_PER_CALL: u64 = 8192;
/// Sampling: total tokens per invoke.
pub const MAX_SAMPLING_TOKENS_PER_INVOKE: u64 = 32_000;
/// Storage and files: calls per invoke (the `storage_token`'s `max_calls`).
pub const MAX_STORAGE_CALLS_PER_INVOKE: u64 = 200;
/// Progress: events per second per invoke; more are dropped.
pub const MAX_PROGRESS_PER_SECOND: usize = 50;
/// Progress: bytes per event; a larger one is dropped.
pub const MAX_PROGRESS_BYTES: usize = 8 * 1024;

/// Whether `method` spends the storage budget ([`MAX_STORAGE_CALLS_PER_INVOKE`]):
/// `storage/*` and `files/*` share it.
pub(crate) fn spends_storage_budget(method: &str) -> bool {
    method.starts_with("storage/") || method.starts_with("files/")
}

/// The refusal of a call past [`MAX_STORAGE_CALLS_PER_INVOKE`], the same from both sides:
/// -32024 `QUOTA_EXCEEDED`.
pub(crate) fn storage_budget_spent() -> RpcError {
    RpcError::with_code(
        codes::STORAGE_QUOTA_EXCEEDED,
        "QUOTA_EXCEEDED",
        format!("storage budget spent: at most {MAX_STORAGE_CALLS_PER_INVOKE} calls per invoke"),
    )
}

/// The default timeout of a reverse method, as the official SDKs use.
pub fn default_timeout(method: &str) -> Duration {
    let secs = match method.split('/').next().unwrap_or("") {
        "sampling" | "agent" => 90,
        "storage" | "embeddings" => 30,
        "host" => 120,
        _ => 60,
    };
    Duration::from_secs(secs)
}

/// A capability family: which manifest strings unlock it and how the host refuses it.
struct Family {
    prefix: &'static str,
    needs: &'static [&'static str],
    code: i64,
    symbol: &'static str,
}

const FAMILIES: &[Family] = &[
    Family {
        prefix: "sampling/",
        needs: &["llm.sample"],
        code: codes::SAMPLING_NOT_NEGOTIATED,
        symbol: "NOT_NEGOTIATED",
    },
    Family {
        prefix: "agent/complete",
        needs: &["llm.sample"],
        code: -32041,
        symbol: "NOT_GRANTED",
    },
    Family {
        prefix: "agent/",
        needs: &["llm.agent.auto", "llm.agent.fixed"],
        code: -32041,
        symbol: "NOT_GRANTED",
    },
    Family {
        prefix: "storage/",
        needs: &["aps.kv"],
        code: codes::STORAGE_NOT_GRANTED,
        symbol: "STORAGE_NOT_GRANTED",
    },
    Family {
        prefix: "files/",
        needs: &["aps.files"],
        code: codes::STORAGE_NOT_GRANTED,
        symbol: "STORAGE_NOT_GRANTED",
    },
    Family {
        prefix: "host/uploadFile",
        needs: &["host.upload"],
        code: -32210,
        symbol: "UPLOAD_NOT_NEGOTIATED",
    },
    Family {
        prefix: "image/edit",
        needs: &["llm.image.edit"],
        code: -32107,
        symbol: "IMAGE_NOT_NEGOTIATED",
    },
    Family {
        prefix: "image/",
        needs: &["llm.image"],
        code: -32107,
        symbol: "IMAGE_NOT_NEGOTIATED",
    },
    Family {
        prefix: "embeddings/",
        needs: &["llm.embed"],
        code: -32507,
        symbol: "EMBEDDINGS_NOT_NEGOTIATED",
    },
    Family {
        prefix: "web/search",
        needs: &["web.search"],
        code: -32526,
        symbol: "WEB_NOT_NEGOTIATED",
    },
    Family {
        prefix: "web/fetch",
        needs: &["web.fetch"],
        code: -32526,
        symbol: "WEB_NOT_NEGOTIATED",
    },
    Family {
        prefix: "web/image_search",
        needs: &["web.image_search"],
        code: -32526,
        symbol: "WEB_NOT_NEGOTIATED",
    },
    Family {
        prefix: "web/image_fetch",
        needs: &["web.image_fetch"],
        code: -32526,
        symbol: "WEB_NOT_NEGOTIATED",
    },
    Family {
        prefix: "video/",
        needs: &["llm.video"],
        code: -32120,
        symbol: "VIDEO_NOT_NEGOTIATED",
    },
    Family {
        prefix: "audio/speak",
        needs: &["llm.audio.speak"],
        code: -32140,
        symbol: "AUDIO_NOT_NEGOTIATED",
    },
];

/// The reverse-call family `method` belongs to: its prefix, and the code and symbol of its
/// refusals; `None` for a method of no family.
#[cfg(feature = "mcp")]
pub(crate) fn family(method: &str) -> Option<(&'static str, i64, &'static str)> {
    FAMILIES
        .iter()
        .find(|f| method.starts_with(f.prefix))
        .map(|f| (f.prefix, f.code, f.symbol))
}

/// Refuses a reverse call the host would refuse for a missing declaration or a v1
/// session, with the host's code. `credentials/*` needs no capability string (a declared
/// credential drives it) and methods this crate does not know are passed through.
pub(crate) fn gate(method: &str, declared: &[String], v2: bool) -> Result<(), RpcError> {
    let family = FAMILIES.iter().find(|f| method.starts_with(f.prefix));
    if !v2 {
        let msg = format!(
            "`{method}` is unavailable: the session is not protocol 2.0, which reverse RPC needs"
        );
        return Err(match family {
            Some(f) => RpcError::with_code(f.code, f.symbol, msg),
            None => RpcError::with_code(codes::METHOD_NOT_FOUND, "REVERSE_RPC_DISABLED", msg),
        });
    }
    let Some(family) = family else {
        return Ok(());
    };
    let storage = matches!(family.prefix, "storage/" | "files/");
    let ok = declared.iter().any(|d| {
        family.needs.contains(&d.as_str())
            || (storage && (d == "aps" || d.starts_with("aps.scope.")))
    });
    if ok {
        return Ok(());
    }
    let msg = format!(
        "`{method}` needs `{}` in the manifest's host_capabilities (add it with Plugin::capability)",
        family.needs[0]
    );
    Err(RpcError::with_code(family.code, family.symbol, msg))
}

/// The handshake-era MCP revisions spoken, oldest first, by the plugin side (feature `mcp`)
/// and the host side alike: each is agreed in an `initialize` handshake. A client offering
/// another date in `initialize` is answered with the newest of them.
#[cfg(any(feature = "mcp", feature = "host"))]
pub const MCP_REVISIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The stateless MCP revisions spoken (2026-07-28 on): no handshake; every request names
/// its revision, client and client capabilities in `params._meta` under the
/// [`MCP_META_VERSION`], [`MCP_META_CLIENT_INFO`] and [`MCP_META_CLIENT_CAPABILITIES`] keys.
#[cfg(any(feature = "mcp", feature = "host"))]
pub const MCP_MODERN_REVISIONS: [&str; 1] = ["2026-07-28"];

/// Every MCP revision spoken, oldest first: what `server/discover`'s `supportedVersions`
/// and the unsupported-version error's `data.supported` list.
#[cfg(any(feature = "mcp", feature = "host"))]
pub const MCP_ALL_REVISIONS: [&str; 5] = [
    "2024-11-05",
    "2025-03-26",
    "2025-06-18",
    "2025-11-25",
    "2026-07-28",
];

/// `params._meta` key of a stateless MCP request: the revision it speaks.
#[cfg(any(feature = "mcp", feature = "host"))]
pub const MCP_META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `params._meta` key of a stateless MCP request: the client's `{name, version}`.
#[cfg(any(feature = "mcp", feature = "host"))]
#[cfg_attr(not(feature = "host"), allow(dead_code))] // the plugin names them in serde attributes
pub const MCP_META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// `params._meta` key of a stateless MCP request: the client's capabilities object.
#[cfg(any(feature = "mcp", feature = "host"))]
pub const MCP_META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `result._meta` key of a stateless MCP result: the server's `{name, version}`.
#[cfg(any(feature = "mcp", feature = "host"))]
pub const MCP_META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// The error a stateless MCP request naming a revision the server does not speak gets;
/// its `data` is `{requested, supported}`.
#[cfg(any(feature = "mcp", feature = "host"))]
pub const MCP_UNSUPPORTED_VERSION: i64 = -32022;

/// Whether a `protocolVersion` is an MCP revision's date (`YYYY-MM-DD`); Executa's are
/// `2.0` and `1.1`. Never blocks.
#[cfg(any(feature = "mcp", feature = "host"))]
pub fn is_mcp_revision(version: &str) -> bool {
    let b = version.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            _ => c.is_ascii_digit(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn gating_uses_the_hosts_codes() {
        let none = caps(&[]);
        assert_eq!(
            gate("sampling/createMessage", &none, true)
                .unwrap_err()
                .code,
            -32008
        );
        assert_eq!(gate("storage/get", &none, true).unwrap_err().code, -32021);
        assert!(
            gate("storage/get", &none, true)
                .unwrap_err()
                .message
                .contains("aps.kv")
        );
        assert!(gate("sampling/createMessage", &caps(&["llm.sample"]), true).is_ok());
        assert_eq!(
            gate("sampling/createMessage", &caps(&["llm.sample"]), false)
                .unwrap_err()
                .code,
            -32008
        );
        assert!(gate("storage/set", &caps(&["aps.scope.user.write"]), true).is_ok());
        assert!(gate("files/list", &caps(&["aps.kv"]), true).is_err());
        assert!(gate("credentials/getToken", &none, true).is_ok());
        assert_eq!(
            gate("credentials/getToken", &none, false).unwrap_err().code,
            -32601
        );
        assert!(gate("some/future", &none, true).is_ok());
    }

    #[test]
    fn default_timeouts_follow_the_sdks() {
        assert_eq!(
            default_timeout("sampling/createMessage"),
            Duration::from_secs(90)
        );
        assert_eq!(default_timeout("storage/get"), Duration::from_secs(30));
        assert_eq!(default_timeout("files/list"), Duration::from_secs(60));
    }
}
