//! [`TestHost`] as an MCP client: the era chosen as [`Host`](crate::host::Host) chooses it
//! (`server/discover` first, or the `initialize` handshake, or a pinned revision),
//! `tools/call` for each invoke with its result read by the host library's own reader
//! ([`InvokeResult::from_mcp`]), the client's side of sampling (a request in the handshake
//! era, an input request and a retry in 2026-07-28) answered by the test host's backends
//! through the host library's MCP mappings, and `notifications/progress` collected.

use std::time::Instant;

use serde_json::value::{RawValue, to_raw_value};
use serde_json::{Map, Value, json};

use super::{CLIENT_NAME, Outcome, ProgressEvent, TestHost, client_info};
use crate::error::{Error, Result, RpcError, codes};
use crate::host::McpVersion;
use crate::host::mcp::{PROPOSED, Revision, ToolsPager, revision as read_revision};
use crate::host::mcp_input::{
    InputRequest, MAX_INPUT_ROUNDS, input_answer, input_required, state_only_wait,
};
use crate::host::mcp_manifest::manifest_of;
use crate::host::mcp_modern::{PROBED, Probe, envelope, probe_verdict, stateless};
use crate::host::mcp_reverse::{SAMPLING, not_served, sampling_result, to_executa};
use crate::host::service::ReverseCall;
use crate::host::types::InvokeResult;
use crate::id::Id;
use crate::protocol::MCP_REVISIONS;

/// The MCP session of a [`TestHost`].
pub(super) struct Session {
    /// The revision spoken.
    pub(super) revision: &'static str,
    /// A stateless revision (2026-07-28): no session, the envelope in every request.
    stateless: bool,
    /// The `initialize` (or `server/discover`) result: the server's info, for the manifest.
    hello: Box<RawValue>,
}

impl TestHost {
    /// Opens the MCP session in the era `version` picks, as `Host` does (`mcp_modern.rs`).
    pub(super) fn open_mcp(&mut self, version: &McpVersion) -> Result<()> {
        match version {
            McpVersion::Auto => self.probe(PROBED, false),
            McpVersion::Legacy => self.handshake(None),
            McpVersion::Pinned(v) => match stateless(v) {
                Some(v) => self.probe(v, true),
                None => self.handshake(Some(v)),
            },
        }
    }

    /// `server/discover` at `asked`: adopts the stateless revision the answer names, by
    /// the rule `Host` follows ([`probe_verdict`]); else, unless `pinned`, the handshake.
    fn probe(&mut self, mut asked: &'static str, pinned: bool) -> Result<()> {
        let mut first = true;
        loop {
            let params = json!({ "_meta": self.envelope_at(asked) });
            let (answer, _) = self.call("server/discover", params)?;
            let (verdict, hello) = match &answer {
                Ok(result) => {
                    let raw = to_raw_value(result)?;
                    (probe_verdict(Ok(&raw), asked, first), Some(raw))
                }
                Err(e) => (probe_verdict(Err(e), asked, first), None),
            };
            match (verdict, hello) {
                (Probe::Adopt(v), Some(hello)) if !pinned || v == asked => {
                    self.mcp = Some(Session {
                        revision: v,
                        stateless: true,
                        hello,
                    });
                    return Ok(());
                }
                (Probe::Again(v), _) if !pinned => (asked, first) = (v, false),
                (Probe::Handshake(_), _) if !pinned => return self.handshake(None),
                (Probe::Incompatible(why), _) => return Err(Error::Protocol(why)),
                (verdict, _) => {
                    return Err(Error::Protocol(format!(
                        "MCP {asked} was asked for (pinned), but the plugin does not serve it \
                         ({verdict:?}); is it built with the `mcp` feature?"
                    )));
                }
            }
        }
    }

    /// MCP's `initialize`, proposing `pinned` (else [`PROPOSED`]) and declaring
    /// `sampling`, then `notifications/initialized`. An answer in no revision spoken (an
    /// Executa plugin's), or another than the one pinned, is an [`Error::Protocol`].
    fn handshake(&mut self, pinned: Option<&str>) -> Result<()> {
        let params = json!({
            "protocolVersion": pinned.unwrap_or(PROPOSED),
            "capabilities": { "sampling": {} },
            "clientInfo": client_info(),
        });
        let (answer, _) = self.call("initialize", params)?;
        let result = answer.map_err(Error::Remote)?;
        let hello = to_raw_value(&result)?;
        let revision = match read_revision(&hello) {
            Revision::Spoken(v) => MCP_REVISIONS.iter().copied().find(|r| *r == v),
            _ => None,
        };
        let Some(revision) = revision.filter(|r| pinned.is_none_or(|p| p == *r)) else {
            return Err(Error::Protocol(format!(
                "the plugin answered the MCP initialize ({}) with protocolVersion {}: an \
                 executa plugin serves MCP when built with the `mcp` feature",
                pinned.unwrap_or(PROPOSED),
                result.get("protocolVersion").unwrap_or(&Value::Null)
            )));
        };
        self.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))?;
        self.mcp = Some(Session {
            revision,
            stateless: false,
            hello,
        });
        Ok(())
    }

    /// The `_meta` of a stateless request at `version`.
    fn envelope_at(&self, version: &str) -> Value {
        envelope(version, CLIENT_NAME, env!("CARGO_PKG_VERSION"), true)
    }

    /// The envelope every request carries in a stateless session; `None` in a handshake.
    fn stateless_envelope(&self) -> Option<Value> {
        let session = self.mcp.as_ref().filter(|m| m.stateless)?;
        Some(self.envelope_at(session.revision))
    }

    /// `tools/call`, sent again with the answers while a stateless call asks for input (at
    /// most [`MAX_INPUT_ROUNDS`] rounds, as `Host` does), read into the [`Outcome`].
    pub(super) fn invoke_mcp(
        &mut self,
        tool: &str,
        arguments: Value,
        context: &Value,
    ) -> Result<Outcome> {
        refuse_context(context)?;
        let token = match context.get("invoke_id").and_then(Value::as_str) {
            Some(id) => id.to_owned(),
            None => format!("test-invoke-{}", self.next_id),
        };
        let mut meta = json!({ "progressToken": token });
        if let (Some(Value::Object(envelope)), Some(m)) =
            (self.stateless_envelope(), meta.as_object_mut())
        {
            m.extend(envelope);
        }
        let mut params = json!({ "name": tool, "arguments": arguments, "_meta": meta });
        let started = Instant::now();
        let mut seen = Outcome::empty();
        let mut waited = None;
        for round in 0..=MAX_INPUT_ROUNDS {
            let (answer, more) = self.call("tools/call", params.clone())?;
            seen.extend(more);
            let result = match answer {
                Ok(result) => to_raw_value(&result)?,
                Err(e) => {
                    seen.rpc_error = Some(e);
                    return Ok(seen);
                }
            };
            let input = match &self.mcp {
                Some(session) if session.stateless => input_required(&result)?,
                _ => None,
            };
            let Some(input) = input else {
                let read = InvokeResult::from_mcp(result, token, started.elapsed())?;
                seen.result = Some(envelope_of(read));
                return Ok(seen);
            };
            if round == MAX_INPUT_ROUNDS {
                break;
            }
            let Some(p) = params.as_object_mut() else {
                break;
            };
            if input.requests.is_empty() {
                // Only state: the plugin is still working; asked again after a short wait.
                let wait = state_only_wait(waited);
                waited = Some(wait);
                std::thread::sleep(wait);
                p.remove("inputResponses");
            } else {
                waited = None;
                let answers = self.fulfil(&input.requests, &mut seen)?;
                p.insert("inputResponses".to_owned(), Value::Object(answers));
            }
            match input.state {
                Some(state) => {
                    p.insert(
                        "requestState".to_owned(),
                        serde_json::from_str(state.get())?,
                    );
                }
                None => {
                    p.remove("requestState");
                }
            }
        }
        Err(Error::Protocol(format!(
            "tools/call `{tool}`: the plugin asked for input more than {MAX_INPUT_ROUNDS} \
             times (MAX_INPUT_ROUNDS); stopped"
        )))
    }

    /// The answers to one round's input requests, by key; a request the test host cannot
    /// fulfil fails the call, as it fails `Host`'s.
    fn fulfil(&self, requests: &[InputRequest], seen: &mut Outcome) -> Result<Map<String, Value>> {
        let mut answers = Map::new();
        for request in requests {
            seen.reverse_calls.push(request.method.clone());
            let answer = input_answer(request, |params| {
                self.sample(params.clone(), Id::string(&request.key))
            })
            .map_err(|e| crate::host::mcp_input::unfulfilled("the plugin's", request, e))?;
            answers.insert(request.key.clone(), answer);
        }
        Ok(answers)
    }

    /// One MCP `sampling/createMessage` through the sampling backend, read in the Executa
    /// shape the backends read and answered in MCP's, as `Host` does (`mcp_reverse.rs`).
    fn sample(&self, params: Value, id: Id) -> std::result::Result<Value, RpcError> {
        let call = ReverseCall {
            method: SAMPLING.to_owned(),
            params: to_executa(params),
            invoke_id: None,
            client_timeout: None,
            id,
        };
        sampling_result(&self.serve_call(&call)?)
    }

    /// The reply to a request the plugin sent its MCP client (in the handshake era).
    pub(super) fn answer_mcp(
        &self,
        method: &str,
        id: &Value,
        params: Option<&Value>,
        seen: &mut Outcome,
    ) -> Result<Value> {
        seen.reverse_calls.push(method.to_owned());
        let answer = match method {
            SAMPLING => {
                let params = params.cloned().unwrap_or(Value::Null);
                self.sample(params, Id::from_raw(&to_raw_value(id)?))
            }
            "ping" => Ok(json!({})),
            other => Err(not_served(other)),
        };
        Ok(match answer {
            Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
            Err(e) => json!({ "jsonrpc": "2.0", "id": id, "error": e }),
        })
    }

    /// The manifest made from `tools/list` (every page), as `Host` makes it.
    pub(super) fn describe_mcp(&mut self) -> Result<Value> {
        let mut pager = ToolsPager::default();
        loop {
            let mut params = pager.params();
            if let Some(envelope) = self.stateless_envelope() {
                params["_meta"] = envelope;
            }
            let (answer, _) = self.call("tools/list", params)?;
            let page = to_raw_value(&answer.map_err(Error::Remote)?)?;
            if pager.take(&page)? {
                break;
            }
        }
        let Some(session) = &self.mcp else {
            return Err(Error::Protocol("no MCP session".to_owned()));
        };
        let manifest = manifest_of(&session.hello, &pager.into_tools())?;
        Ok(serde_json::to_value(manifest)?)
    }
}

/// An MCP `notifications/progress` as `Host` reports it: kind `progress`, the params
/// without the token and `_meta`.
pub(super) fn progress_of(frame: &Value) -> ProgressEvent {
    let mut data = frame.get("params").cloned().unwrap_or(Value::Null);
    if let Value::Object(map) = &mut data {
        map.remove("progressToken");
        map.remove("_meta");
    }
    ProgressEvent {
        kind: "progress".to_owned(),
        data,
    }
}

/// MCP carries no invoke context: credentials and tokens are refused rather than dropped
/// unseen, as `Host` refuses them.
fn refuse_context(context: &Value) -> Result<()> {
    let carries = context.as_object().is_some_and(|c| {
        c.iter().any(|(k, v)| {
            k.ends_with("_token")
                || (k == "credentials" && v.as_object().is_some_and(|m| !m.is_empty()))
        })
    });
    if carries {
        return Err(Error::Refused(RpcError::new(
            codes::INVALID_PARAMS,
            "an MCP server has no invoke context: credentials and tokens cannot be sent to it",
        )));
    }
    Ok(())
}

/// A result read by the host library as the `{success, data}` / `{success: false, error}`
/// object an Executa plugin answers.
fn envelope_of(read: InvokeResult) -> Value {
    let mut out = Map::new();
    out.insert("success".to_owned(), Value::Bool(read.success));
    if read.success {
        out.insert("data".to_owned(), read.data);
    } else {
        out.insert(
            "error".to_owned(),
            read.error.map_or(Value::Null, Value::String),
        );
    }
    if let Some(details) = read.details {
        out.insert("details".to_owned(), details);
    }
    Value::Object(out)
}
