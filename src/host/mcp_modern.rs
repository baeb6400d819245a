//! The stateless MCP era (revision 2026-07-28 on) from the host's side: which era a
//! session speaks (`server/discover` first, then the `initialize` handshake, by the
//! Python SDK's `auto` rule; or the revision [`McpVersion`] pins), the `_meta` envelope
//! every request of a stateless session carries, a `server/discover` result read as the
//! session's [`Handshake`], and `health` as `server/discover` (2026-07-28 has no `ping`).
//! The retries of a `tools/call` that asks for input are `mcp_input.rs`; the handshake
//! itself is `mcp.rs`.

use std::time::{Duration, Instant};

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::mcp_reverse::SAMPLING;
use super::options::McpVersion;
use super::process::PluginProcess;
use super::types::{Handshake, HealthReport, snippet};
use crate::error::{Error, Result, RpcError, codes};
use crate::lock::lock;
use crate::protocol::{
    MCP_ALL_REVISIONS, MCP_META_CLIENT_CAPABILITIES, MCP_META_CLIENT_INFO, MCP_META_SERVER_INFO,
    MCP_META_VERSION, MCP_MODERN_REVISIONS, MCP_REVISIONS, MCP_UNSUPPORTED_VERSION,
    ProtocolVersion,
};

/// The stateless revision the host probes first: the newest it speaks.
pub const PROBED: &str = MCP_MODERN_REVISIONS[MCP_MODERN_REVISIONS.len() - 1];

/// The `params._meta` members of every request in a stateless session: the revision, the
/// client's `{name, version}` and its capabilities (`sampling` when the host answers it).
#[derive(Clone, Copy, Debug)]
pub(super) struct Envelope<'a> {
    pub(super) version: &'a str,
    pub(super) name: &'a str,
    pub(super) client_version: &'a str,
    pub(super) sampling: bool,
}

impl Envelope<'_> {
    /// Writes the three members into a `_meta` map being serialized.
    pub(super) fn entries<M: SerializeMap>(
        &self,
        map: &mut M,
    ) -> std::result::Result<(), M::Error> {
        map.serialize_entry(MCP_META_VERSION, self.version)?;
        map.serialize_entry(
            MCP_META_CLIENT_INFO,
            &ClientInfo {
                name: self.name,
                version: self.client_version,
            },
        )?;
        map.serialize_entry(
            MCP_META_CLIENT_CAPABILITIES,
            &Capabilities {
                sampling: self.sampling.then_some(Empty {}),
            },
        )
    }
}

impl Serialize for Envelope<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(3))?;
        self.entries(&mut map)?;
        map.end()
    }
}

#[derive(Serialize)]
struct ClientInfo<'a> {
    name: &'a str,
    version: &'a str,
}

#[derive(Serialize)]
struct Capabilities {
    #[serde(skip_serializing_if = "Option::is_none")]
    sampling: Option<Empty>,
}

#[derive(Serialize)]
struct Empty {}

/// `params` that are the envelope alone (`server/discover`, `tools/list`'s first page).
#[derive(Serialize)]
struct MetaOnly<'a> {
    #[serde(rename = "_meta")]
    meta: Envelope<'a>,
}

/// The `_meta` object of a stateless request at `version` (public as
/// `executa::host::mcp_envelope`, for drivers that write their own frames): the revision,
/// `clientInfo` `{name, version}`, and `clientCapabilities`, which declares `sampling`
/// when `sampling` is set (and nothing else: the host answers no roots and declines
/// elicitation). Never blocks.
pub fn envelope(version: &str, name: &str, client_version: &str, sampling: bool) -> Value {
    let meta = Envelope {
        version,
        name,
        client_version,
        sampling,
    };
    serde_json::to_value(meta).unwrap_or_default()
}

/// What a `server/discover` probe's answer means for the session, by the Python SDK's
/// `auto` rule (its `mcp/client/_probe.py`), read the same way by the host and by drivers
/// that own the pipes (`executa bench`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Probe {
    /// The result names this stateless revision, which the host speaks: adopt it (the
    /// result stands for the handshake).
    Adopt(&'static str),
    /// -32022 naming a stateless revision the host speaks: probe once more at it.
    Again(&'static str),
    /// Not evidence of a stateless server: use the `initialize` handshake (the text says
    /// why).
    Handshake(String),
    /// -32022 from a server that lists only stateless revisions, none of them the host's:
    /// no session is possible (the text says why).
    Incompatible(String),
}

/// Reads a `server/discover` answer sent at `asked` (`first`: the first probe of the
/// session, which alone may lead to another): a result naming a stateless revision the
/// host speaks is adopted; any error falls back to the handshake, except -32022, which
/// earns one more probe when its `data.supported` names a stateless revision the host
/// speaks, and ends the session when it lists stateless revisions only; a result that is
/// not a discover result, or names no stateless revision, falls back too. Never blocks.
pub fn probe_verdict(
    answer: std::result::Result<&RawValue, &RpcError>,
    asked: &str,
    first: bool,
) -> Probe {
    let error = match answer {
        Ok(result) => {
            return match read_discover(result) {
                Ok(d) => match newest_stateless(&d.versions) {
                    Some(v) => Probe::Adopt(v),
                    None => Probe::Handshake(format!(
                        "server/discover lists no stateless revision ({})",
                        d.versions.join(", ")
                    )),
                },
                Err(why) => Probe::Handshake(why),
            };
        }
        Err(e) => e,
    };
    if error.code != MCP_UNSUPPORTED_VERSION {
        return Probe::Handshake(format!("server/discover answered {error}"));
    }
    let supported = supported_versions(error);
    match supported.as_deref().and_then(newest_stateless) {
        Some(v) if first => return Probe::Again(v),
        _ => {}
    }
    match supported {
        Some(list) if !list.iter().any(|v| MCP_REVISIONS.contains(&v.as_str())) => {
            Probe::Incompatible(format!(
                "the MCP server refused revision {asked} ({error}) and speaks only {}, none of \
                 which this host speaks with it (it speaks {})",
                list.join(", "),
                MCP_ALL_REVISIONS.join(", ")
            ))
        }
        _ => Probe::Handshake(format!("server/discover answered {error}")),
    }
}

/// The stateless revision to probe again at when the handshake itself was refused with
/// -32022 naming one (a probe that timed out here may have settled the server's era).
pub(super) fn stateless_named(error: &RpcError) -> Option<&'static str> {
    if error.code != MCP_UNSUPPORTED_VERSION {
        return None;
    }
    newest_stateless(&supported_versions(error)?)
}

/// `data.supported` of a -32022 error, when it is a list of strings.
fn supported_versions(error: &RpcError) -> Option<Vec<String>> {
    let list = error.data.as_ref()?.get("supported")?.as_array()?;
    list.iter().map(|v| v.as_str().map(str::to_owned)).collect()
}

/// The newest stateless revision the host speaks among `versions`.
fn newest_stateless(versions: &[String]) -> Option<&'static str> {
    MCP_MODERN_REVISIONS
        .iter()
        .rev()
        .copied()
        .find(|m| versions.iter().any(|v| v == m))
}

/// The static name of a stateless revision the host speaks.
pub(super) fn stateless(revision: &str) -> Option<&'static str> {
    MCP_MODERN_REVISIONS
        .iter()
        .copied()
        .find(|r| *r == revision)
}

/// A `server/discover` result, as far as the host reads it.
struct Discovered {
    versions: Vec<String>,
    capabilities: Map<String, Value>,
    instructions: Option<String>,
    server_info: Option<Value>,
}

/// Reads a `server/discover` result: an object with a `supportedVersions` list of
/// strings and a `capabilities` object (`resultType`, when there, `complete`); the
/// caching hints are not read. The error says what is wrong.
fn read_discover(result: &RawValue) -> std::result::Result<Discovered, String> {
    let unreadable =
        |what: &str| format!("server/discover result {what}: {}", snippet(result.get()));
    let Ok(Value::Object(mut map)) = serde_json::from_str::<Value>(result.get()) else {
        return Err(unreadable("is not an object"));
    };
    let versions = map
        .get("supportedVersions")
        .and_then(Value::as_array)
        .and_then(|l| {
            l.iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
        })
        .ok_or_else(|| unreadable("has no `supportedVersions` list"))?;
    let Some(Value::Object(capabilities)) = map.remove("capabilities") else {
        return Err(unreadable("has no `capabilities` object"));
    };
    match map.get("resultType") {
        None => {}
        Some(Value::String(t)) if t == "complete" => {}
        Some(_) => return Err(unreadable("is not a complete result")),
    }
    let server_info = match map.remove("_meta") {
        Some(Value::Object(mut meta)) => meta.remove(MCP_META_SERVER_INFO),
        _ => None,
    };
    Ok(Discovered {
        versions,
        capabilities,
        instructions: map
            .remove("instructions")
            .and_then(|i| i.as_str().map(str::to_owned)),
        server_info: server_info.filter(Value::is_object),
    })
}

/// A `server/discover` result as the [`Handshake`] of a stateless session at the newest
/// stateless revision it names that the host speaks: `serverInfo` from its `_meta`, its
/// `capabilities` and `instructions`. A result that is not a discover result, or names no
/// such revision, is an [`Error::Protocol`]. Never blocks.
pub(super) fn discover_handshake(result: &RawValue, elapsed: Duration) -> Result<Handshake> {
    let d = read_discover(result).map_err(Error::Protocol)?;
    let Some(revision) = newest_stateless(&d.versions) else {
        return Err(Error::Protocol(format!(
            "server/discover names no revision this host speaks statelessly ({}): it lists {}",
            MCP_MODERN_REVISIONS.join(", "),
            d.versions.join(", ")
        )));
    };
    Ok(stateless_handshake(d, revision, elapsed))
}

fn stateless_handshake(d: Discovered, revision: &str, elapsed: Duration) -> Handshake {
    Handshake {
        protocol: Some(ProtocolVersion::V2),
        fallback: None,
        server_info: d.server_info,
        capabilities: d.capabilities,
        echoed_version: Some(revision.to_owned()),
        mcp_revision: Some(revision.to_owned()),
        instructions: d.instructions,
        elapsed,
    }
}

impl PluginProcess {
    /// The MCP session, in the era [`HostOptions::mcp_version`](super::HostOptions::mcp_version)
    /// chooses; the first request goes under `id`. Blocks for each request up to the
    /// initialize timeout: under [`McpVersion::Auto`] a probe and the handshake (and, when
    /// the handshake is refused with -32022 naming a stateless revision, one more probe).
    pub(super) fn negotiate_mcp(&self, id: u64, start: Instant) -> Result<Handshake> {
        match &self.shared.opts.mcp_version {
            McpVersion::Auto => self.auto_mcp(id, start),
            McpVersion::Legacy => self.handshake_mcp(id, None, start),
            McpVersion::Pinned(v) if MCP_REVISIONS.contains(&v.as_str()) => {
                self.handshake_mcp(id, Some(v), start)
            }
            McpVersion::Pinned(v) => match stateless(v) {
                Some(v) => self.pinned_stateless(id, v, start),
                None => Err(Error::Protocol(format!(
                    "MCP revision {v:?} is not one this host speaks ({})",
                    MCP_ALL_REVISIONS.join(", ")
                ))),
            },
        }
    }

    /// The Python SDK's `auto`: probe, then adopt, probe again, or shake hands.
    fn auto_mcp(&self, mut id: u64, start: Instant) -> Result<Handshake> {
        let mut version = PROBED;
        for first in [true, false] {
            // A timeout falls back as an error answer does; a process gone does not.
            let answer = match self.probe(id, version) {
                Err(e @ (Error::Remote(_) | Error::Timeout { .. })) => Err(e),
                Err(e) => return Err(e),
                Ok(raw) => Ok(raw),
            };
            let verdict = match &answer {
                Ok(raw) => probe_verdict(Ok(raw), version, first),
                Err(Error::Remote(e)) => probe_verdict(Err(e), version, first),
                Err(e) => Probe::Handshake(e.to_string()),
            };
            id = self.shared.fresh_id();
            match verdict {
                Probe::Adopt(v) => return self.adopt_stateless(&answer?, v, start),
                Probe::Again(v) => version = v,
                Probe::Incompatible(why) => return Err(Error::Protocol(why)),
                Probe::Handshake(why) => {
                    log::debug!("[plugin:{}] MCP handshake era: {why}", self.shared.label);
                    match self.handshake_mcp(id, None, start) {
                        Err(Error::Remote(e)) if first => match stateless_named(&e) {
                            Some(v) => version = v,
                            None => return Err(Error::Remote(e)),
                        },
                        other => return other,
                    }
                    id = self.shared.fresh_id();
                }
            }
        }
        Err(Error::Protocol(format!(
            "the MCP server answered server/discover at {version} with -32022 twice"
        )))
    }

    /// A stateless revision pinned: `server/discover` at it must name it; no fallback.
    fn pinned_stateless(
        &self,
        id: u64,
        version: &'static str,
        start: Instant,
    ) -> Result<Handshake> {
        let pinned = |why: String| {
            Error::Protocol(format!("MCP {version} was asked for (pinned), but {why}"))
        };
        let raw = match self.probe(id, version) {
            Ok(raw) => raw,
            Err(Error::Remote(e)) if e.code == codes::METHOD_NOT_FOUND => {
                return Err(pinned(format!(
                    "the server does not know server/discover ({e}): it speaks only the \
                     initialize handshake (ask for `auto`, or pin one of {})",
                    MCP_REVISIONS.join(", ")
                )));
            }
            Err(Error::Remote(e)) => {
                let speaks = supported_versions(&e)
                    .map(|l| format!("; it speaks {}", l.join(", ")))
                    .unwrap_or_default();
                return Err(pinned(format!("server/discover was refused: {e}{speaks}")));
            }
            Err(e) => return Err(e),
        };
        let d = read_discover(&raw).map_err(pinned)?;
        if !d.versions.iter().any(|v| v == version) {
            return Err(pinned(format!(
                "server/discover lists only {}",
                d.versions.join(", ")
            )));
        }
        self.shared.set_mcp();
        Ok(stateless_handshake(d, version, start.elapsed()))
    }

    /// Adopts a probe's result as the session's handshake at `version`: no
    /// `notifications/initialized`, which the stateless era does not have.
    fn adopt_stateless(&self, raw: &RawValue, version: &str, start: Instant) -> Result<Handshake> {
        let d = read_discover(raw).map_err(Error::Protocol)?;
        self.shared.set_mcp();
        Ok(stateless_handshake(d, version, start.elapsed()))
    }

    /// `server/discover` at `version` under `id`, within the initialize timeout.
    fn probe(&self, id: u64, version: &str) -> Result<Box<RawValue>> {
        let params = MetaOnly {
            meta: self.envelope_at(version),
        };
        let timeout = self.shared.opts.initialize_timeout;
        self.shared
            .request_as(id, "server/discover", Some(&params), timeout)
    }

    /// The envelope of the session when it is stateless; `None` in the handshake era or
    /// before the session is settled. Never blocks (a lock held for a moment).
    pub(super) fn envelope(&self) -> Option<Envelope<'_>> {
        // The lock is released before `envelope_at` asks the host author's services.
        let version = {
            let negotiated = lock(&self.shared.negotiated);
            stateless(negotiated.as_ref()?.mcp_revision.as_deref()?)?
        };
        Some(self.envelope_at(version))
    }

    /// The envelope at `version`: the client's name and version from the options, and the
    /// `sampling` capability when a handler answers `sampling/createMessage`.
    pub(super) fn envelope_at<'a>(&'a self, version: &'a str) -> Envelope<'a> {
        let opts = &self.shared.opts;
        Envelope {
            version,
            name: &opts.client_name,
            client_version: &opts.client_version,
            sampling: self.dispatch.handles(SAMPLING),
        }
    }

    /// `health` of a stateless session: `server/discover` (2026-07-28 has no `ping`),
    /// within the health timeout; any result is `ready`.
    pub(super) fn discover_health(&self, envelope: Envelope<'_>) -> Result<HealthReport> {
        let params = MetaOnly { meta: envelope };
        let timeout = self.shared.opts.health_timeout;
        self.shared
            .request("server/discover", Some(&params), timeout)?;
        Ok(HealthReport {
            status: "ready".to_owned(),
            message: String::new(),
            details: Value::Null,
            implemented: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn raw(v: Value) -> Box<RawValue> {
        serde_json::value::to_raw_value(&v).expect("JSON")
    }

    fn refused(supported: Value) -> RpcError {
        RpcError {
            code: MCP_UNSUPPORTED_VERSION,
            message: "Unsupported protocol version".into(),
            data: Some(json!({"requested": PROBED, "supported": supported})),
        }
    }

    #[test]
    fn the_envelope_names_the_revision_the_client_and_sampling_only_when_answered() {
        let e = envelope("2026-07-28", "h", "1.0", true);
        assert_eq!(
            e,
            json!({
                MCP_META_VERSION: "2026-07-28",
                MCP_META_CLIENT_INFO: {"name": "h", "version": "1.0"},
                MCP_META_CLIENT_CAPABILITIES: {"sampling": {}},
            })
        );
        assert_eq!(
            envelope("2026-07-28", "h", "1.0", false)[MCP_META_CLIENT_CAPABILITIES],
            json!({})
        );
    }

    #[test]
    fn a_discover_result_naming_the_revision_is_adopted_and_anything_else_falls_back() {
        let result = raw(json!({
            "supportedVersions": ["2025-11-25", "2026-07-28"], "capabilities": {"tools": {}},
            "resultType": "complete", "ttlMs": 0, "cacheScope": "private",
            "_meta": {MCP_META_SERVER_INFO: {"name": "s", "version": "1"}}, "instructions": "hi",
        }));
        assert_eq!(
            probe_verdict(Ok(&result), PROBED, true),
            Probe::Adopt("2026-07-28")
        );
        let h = discover_handshake(&result, Duration::ZERO).expect("a handshake");
        assert_eq!(h.mcp_revision.as_deref(), Some("2026-07-28"));
        assert_eq!(
            (
                h.server_info.as_ref().map(|i| &i["name"]),
                h.instructions.as_deref()
            ),
            (Some(&json!("s")), Some("hi"))
        );
        let legacy = raw(json!({"supportedVersions": ["2025-11-25"], "capabilities": {}}));
        assert!(matches!(
            probe_verdict(Ok(&legacy), PROBED, true),
            Probe::Handshake(_)
        ));
        for odd in [
            json!([]),
            json!({"capabilities": {}}),
            json!({"supportedVersions": ["2026-07-28"]}),
            json!({"supportedVersions": ["2026-07-28"], "capabilities": {}, "resultType": "input_required"}),
        ] {
            assert!(
                matches!(
                    probe_verdict(Ok(&raw(odd.clone())), PROBED, true),
                    Probe::Handshake(_)
                ),
                "{odd}"
            );
        }
    }

    #[test]
    fn every_error_falls_back_but_a_disjoint_stateless_only_refusal() {
        let not_found = RpcError::new(-32601, "Method not found");
        assert!(matches!(
            probe_verdict(Err(&not_found), PROBED, true),
            Probe::Handshake(_)
        ));
        let other = refused(json!(["2099-01-01"]));
        match probe_verdict(Err(&other), PROBED, true) {
            Probe::Incompatible(why) => assert!(
                why.contains("2099-01-01") && why.contains("2026-07-28"),
                "{why}"
            ),
            p => panic!("{p:?}"),
        }
        let with_handshake = refused(json!(["2025-11-25", "2099-01-01"]));
        assert!(matches!(
            probe_verdict(Err(&with_handshake), PROBED, true),
            Probe::Handshake(_)
        ));
        let ours = refused(json!(["2026-07-28"]));
        assert_eq!(
            probe_verdict(Err(&ours), PROBED, true),
            Probe::Again("2026-07-28")
        );
        assert!(matches!(
            probe_verdict(Err(&ours), PROBED, false),
            Probe::Incompatible(_)
        ));
        let no_data = RpcError::new(MCP_UNSUPPORTED_VERSION, "Unsupported protocol version");
        assert!(matches!(
            probe_verdict(Err(&no_data), PROBED, true),
            Probe::Handshake(_)
        ));
        assert_eq!(stateless_named(&ours), Some("2026-07-28"));
        assert_eq!(stateless_named(&with_handshake), None);
    }
}
