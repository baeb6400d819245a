//! Which MCP era a request belongs to. Revision 2026-07-28 dropped the `initialize`
//! handshake: each request names its revision, client and client capabilities in
//! `params._meta`, so a request that carries them is served on its own, whatever came
//! before it; one that does not belongs to the handshake session (or to an Executa host).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::error::RpcError;
use crate::json_scan;
use crate::protocol::{
    MCP_ALL_REVISIONS, MCP_META_CLIENT_CAPABILITIES, MCP_META_SERVER_INFO, MCP_META_VERSION,
    MCP_MODERN_REVISIONS, MCP_UNSUPPORTED_VERSION,
};

/// The era a request belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Era {
    /// No revision in `_meta`: the handshake session's (or an Executa host's) request.
    Session,
    /// A stateless request of a revision this plugin speaks, `samples`: whether its client
    /// declared the `sampling` capability in it.
    Stateless { samples: bool },
    /// A stateless request of a revision this plugin does not speak (the text named).
    Unsupported(Box<str>),
}

/// The last `_meta` read without a progress token, and its era. A 2026-07-28 client sends
/// the same envelope (revision, client, capabilities) with every request, so a request
/// whose `_meta` is byte for byte that one is not read again: one comparison instead of a
/// walk over a few hundred bytes of the client's info on every `tools/call`.
#[derive(Default)]
pub(crate) struct MetaMemo {
    text: String,
    era: Option<Era>,
}

impl MetaMemo {
    /// The `_meta` text the memo holds, a whole JSON object (none yet: `None`).
    pub fn known(&self) -> Option<&str> {
        self.era.as_ref().map(|_| self.text.as_str())
    }

    /// Reads `meta` as [`Meta::read`] does, from the memo when it is the last one read;
    /// `met`: the reader found it to be [`MetaMemo::known`] byte for byte already.
    pub fn read<'a>(&mut self, meta: Option<&'a str>, met: bool) -> Meta<'a> {
        let Some(text) = meta else {
            return Meta::default();
        };
        if let Some(era) = &self.era
            && (met || self.text == text)
        {
            return Meta {
                era: Some(era.clone()),
                ..Meta::default()
            };
        }
        let read = Meta::read(meta);
        // Kept: a stateless envelope without a token (so a whole object, read).
        let era = read.era();
        if read.progress_token.is_none() && text.len() <= MEMO_BYTES && era != Era::Session {
            self.text.clear();
            self.text.push_str(text);
            self.era = Some(era);
        }
        read
    }
}

/// The longest `_meta` kept in the memo.
const MEMO_BYTES: usize = 4096;

/// What `params._meta` of an MCP request says, read once.
#[derive(Default)]
pub(crate) struct Meta<'a> {
    /// `progressToken`, raw.
    pub progress_token: Option<&'a str>,
    version: Option<Cow<'a, str>>,
    /// Whether `clientCapabilities` has `sampling`; `None` without `clientCapabilities`.
    samples: Option<bool>,
    /// The era, when it came from the memo.
    era: Option<Era>,
}

impl<'a> Meta<'a> {
    /// Reads `_meta` (raw text, checked JSON): by hand (`json_scan.rs`), as it rides on
    /// every 2026-07-28 `tools/call` (serde's walk over the client's info and capabilities
    /// cost about as much as the rest of the call's params). Anything that is not an
    /// object of the expected shape reads as empty: the request is then a session one, as
    /// before 2026-07-28.
    pub fn read(meta: Option<&'a str>) -> Meta<'a> {
        let mut read = Meta::default();
        let whole = meta.and_then(|m| {
            json_scan::for_each_member(m, |key, value| {
                match &*key {
                    "progressToken" => read.progress_token = Some(value),
                    MCP_META_VERSION => read.version = Some(json_scan::value_text(value)?),
                    MCP_META_CLIENT_CAPABILITIES => read.samples = Some(has_sampling(value)?),
                    _ => {}
                }
                Some(())
            })
        });
        whole.map_or_else(Meta::default, |()| read)
    }

    /// The era of the request.
    pub fn era(&self) -> Era {
        match &self.era {
            // Every 2026-07-28 call comes here: no clone call for it.
            Some(Era::Stateless { samples }) => return Era::Stateless { samples: *samples },
            Some(era) => return era.clone(),
            None => {}
        }
        let Some(version) = &self.version else {
            return Era::Session;
        };
        if MCP_MODERN_REVISIONS.contains(&&**version) {
            Era::Stateless {
                samples: self.samples.unwrap_or(false),
            }
        } else {
            Era::Unsupported(crate::wire::elide(version, 64).into())
        }
    }
}

/// Whether a `clientCapabilities` object (raw) declares `sampling`; `None` when it is not
/// an object.
fn has_sampling(capabilities: &str) -> Option<bool> {
    let mut found = false;
    json_scan::for_each_member(capabilities, |key, value| {
        found |= key == "sampling" && value != "null";
        Some(())
    })?;
    Some(found)
}

/// The era of a request other than `tools/call` (whose `_meta` the invoke reader finds), from
/// its params text.
#[inline(never)]
pub(crate) fn era_of(params: Option<&str>) -> Era {
    #[derive(Deserialize)]
    struct Params<'a> {
        #[serde(rename = "_meta", borrow)]
        meta: Option<&'a RawValue>,
    }
    let meta = params
        .and_then(|p| serde_json::from_str::<Params<'_>>(p).ok())
        .and_then(|p| p.meta);
    Meta::read(meta.map(RawValue::get)).era()
}

/// The revision's error for a stateless request naming a revision not spoken: -32022 with
/// `data: {requested, supported}`, from which a client picks one it speaks too.
#[cold]
#[inline(never)]
pub(crate) fn unsupported(requested: &str) -> RpcError {
    RpcError {
        code: MCP_UNSUPPORTED_VERSION,
        message: format!("unsupported protocol version: {requested}"),
        data: Some(json!({ "requested": requested, "supported": MCP_ALL_REVISIONS })),
    }
}

/// The `server/discover` result: every revision spoken, the capabilities, and the server's
/// name and version (in `_meta`, where 2026-07-28 puts them) and instructions from the
/// manifest, with `tools/list`'s caching hints.
pub(crate) fn discover_reply(manifest_json: &RawValue) -> Value {
    let manifest: Value = serde_json::from_str(manifest_json.get()).unwrap_or_default();
    let mut reply = Map::new();
    reply.insert("resultType".into(), json!("complete"));
    reply.insert("supportedVersions".into(), json!(MCP_ALL_REVISIONS));
    reply.insert(
        "capabilities".into(),
        json!({ "tools": { "listChanged": false } }),
    );
    reply.insert(
        "_meta".into(),
        json!({ MCP_META_SERVER_INFO: super::server_info(&manifest) }),
    );
    if let Some(text) = super::instructions(&manifest) {
        reply.insert("instructions".into(), text.clone());
    }
    // As `tools/list`'s, for the same reasons (`tools.rs`).
    reply.insert("ttlMs".into(), json!(super::tools::TOOLS_TTL_MS));
    reply.insert("cacheScope".into(), json!(super::tools::TOOLS_CACHE_SCOPE));
    Value::Object(reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn era(meta: &str) -> Era {
        Meta::read(Some(meta)).era()
    }

    #[test]
    fn the_revision_in_meta_decides_the_era() {
        assert_eq!(era("{}"), Era::Session);
        assert_eq!(era(r#"{"progressToken": 1}"#), Era::Session);
        assert_eq!(era("[1]"), Era::Session);
        let modern = r#"{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"sampling": {}}}"#;
        assert_eq!(era(modern), Era::Stateless { samples: true });
        let plain = r#"{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}"#;
        assert_eq!(era(plain), Era::Stateless { samples: false });
        let escaped = r#"{"io.modelcontextprotocol/protocolVersion": "2026\u002d07-28"}"#;
        assert_eq!(era(escaped), Era::Stateless { samples: false });
        let null = r#"{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"sampling": null, "x": {"sampling": {}}}}"#;
        assert_eq!(era(null), Era::Stateless { samples: false });
        // Not the shape expected: a session request, as without the envelope.
        let odd = r#"{"io.modelcontextprotocol/protocolVersion": 2026,
            "io.modelcontextprotocol/clientCapabilities": {}}"#;
        assert_eq!(era(odd), Era::Session);
        let odd = r#"{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": []}"#;
        assert_eq!(era(odd), Era::Session);
        let future = r#"{"io.modelcontextprotocol/protocolVersion": "2027-01-01"}"#;
        assert_eq!(era(future), Era::Unsupported("2027-01-01".into()));
        let old = r#"{"io.modelcontextprotocol/protocolVersion": "2025-11-25"}"#;
        assert_eq!(era(old), Era::Unsupported("2025-11-25".into()));
    }

    #[test]
    fn the_memo_answers_for_the_same_envelope_only() {
        let mut memo = MetaMemo::default();
        let envelope = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"sampling":{}}}"#;
        assert_eq!(memo.known(), None);
        assert_eq!(
            memo.read(Some(envelope), false).era(),
            Era::Stateless { samples: true }
        );
        assert_eq!(memo.known(), Some(envelope));
        // Met by the reader already: not compared again.
        assert_eq!(
            memo.read(Some(envelope), true).era(),
            Era::Stateless { samples: true }
        );
        assert_eq!(
            memo.read(Some(envelope), false).era(),
            Era::Stateless { samples: true }
        );
        let other = envelope.replace("sampling", "roots");
        assert_eq!(
            memo.read(Some(&other), false).era(),
            Era::Stateless { samples: false }
        );
        assert_eq!(memo.known(), Some(other.as_str()));
        // With a token: read, never kept.
        let token = r#"{"progressToken":1,"io.modelcontextprotocol/protocolVersion":"2026-07-28"}"#;
        assert_eq!(memo.read(Some(token), false).progress_token, Some("1"));
        assert_eq!(memo.known(), Some(other.as_str()));
        // A session request's `_meta`: not kept either.
        assert_eq!(memo.read(Some("{}"), false).era(), Era::Session);
        assert_eq!(memo.known(), Some(other.as_str()));
    }

    #[test]
    fn an_unsupported_version_names_every_revision_spoken() {
        let e = unsupported("1999-01-01");
        assert_eq!(e.code, -32022);
        let data = e.data.expect("data");
        assert_eq!(data["requested"], "1999-01-01");
        assert_eq!(data["supported"], json!(MCP_ALL_REVISIONS));
    }

    #[test]
    fn era_of_reads_the_params_meta() {
        let p = r#"{"cursor": null, "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}"#;
        assert_eq!(era_of(Some(p)), Era::Stateless { samples: false });
        assert_eq!(era_of(Some("{}")), Era::Session);
        assert_eq!(era_of(None), Era::Session);
    }
}
