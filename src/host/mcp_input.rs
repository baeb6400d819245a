//! A `tools/call` in the stateless MCP era (2026-07-28), where a server cannot ask its
//! client anything: a call that needs the model (or the user, or the client's roots)
//! answers `{"resultType": "input_required", "inputRequests": {key: {method, params}},
//! "requestState": ...}`. The host fulfils each request (`sampling/createMessage` through
//! its sampling handler, the one that answers the handshake era's requests; `roots/list`
//! with no roots; `elicitation/create` declined, as there is nobody to ask) and sends the
//! same call again, under a new id, with `inputResponses` under the same keys and the
//! `requestState` echoed byte for byte, as the Python SDK's client does
//! (`mcp/client/_input_required.py`): at most [`MAX_INPUT_ROUNDS`] rounds, and a result
//! that carries only state is sent again after a short wait that doubles each time.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::mcp_modern::Envelope;
use super::mcp_reverse::{SAMPLING, sampling_result, to_executa};
use super::process::PluginProcess;
use super::service::ReverseCall;
use super::types::snippet;
use crate::error::{Error, Result, RpcError, codes};
use crate::id::Id;

/// Most rounds of input one `tools/call` may ask for (the SDKs' default): past it the call
/// fails with an [`Error::Protocol`] naming the cap.
pub const MAX_INPUT_ROUNDS: usize = 10;
/// The first wait before a result that carries only `requestState` is sent again; each
/// such result in a row doubles it, up to [`STATE_ONLY_WAIT_CAP`]; one that asks for
/// input starts it over.
pub const STATE_ONLY_WAIT: Duration = Duration::from_millis(50);
/// The longest wait before a state-only result is sent again.
pub const STATE_ONLY_WAIT_CAP: Duration = Duration::from_millis(250);

/// What an `InputRequiredResult` asks for.
#[derive(Debug)]
pub struct InputRequired {
    /// The requests to fulfil, each under the key the server chose (in key order).
    pub requests: Vec<InputRequest>,
    /// `requestState` as the server wrote it, to be sent back as it is.
    pub state: Option<Box<RawValue>>,
}

/// One request embedded in an `InputRequiredResult`.
#[derive(Clone, Debug, PartialEq)]
pub struct InputRequest {
    /// The server's key, under which the answer goes back.
    pub key: String,
    /// `sampling/createMessage`, `elicitation/create` or `roots/list`.
    pub method: String,
    /// Its params (`null` when there were none).
    pub params: Value,
}

/// The members of a result that say whether it is final.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow, default, rename = "resultType")]
    result_type: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "inputRequests")]
    input_requests: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "requestState")]
    request_state: Option<&'a RawValue>,
}

/// Reads a result of the stateless era (public as `executa::host::mcp_input_required`,
/// for drivers that own the pipes): `Ok(None)` when it is final (`resultType` absent or
/// `complete`; also a result that is not an object, for the caller to refuse), the
/// input it asks for when it is `input_required`. Another `resultType`, input requests
/// that are not a map of `{method, params}` objects, or neither requests nor state, are
/// an [`Error::Protocol`]. Never blocks.
pub fn input_required(result: &RawValue) -> Result<Option<InputRequired>> {
    let Ok(head) = serde_json::from_str::<Head>(result.get()) else {
        return Ok(None);
    };
    match head.result_type.as_deref() {
        None | Some("complete") => return Ok(None),
        Some("input_required") => {}
        Some(other) => {
            return Err(Error::Protocol(format!(
                "a result of type {other:?}, which this host does not read: {}",
                snippet(result.get())
            )));
        }
    }
    let malformed = |why: &str| {
        Error::Protocol(format!(
            "an input_required result {why}: {}",
            snippet(result.get())
        ))
    };
    let requests = match head.input_requests {
        None => Vec::new(),
        Some(map) => read_requests(map).ok_or_else(|| {
            malformed("whose inputRequests is not a map of {method, params} objects")
        })?,
    };
    let state = head.request_state.map(ToOwned::to_owned);
    if requests.is_empty() && state.is_none() {
        return Err(malformed("with neither inputRequests nor requestState"));
    }
    Ok(Some(InputRequired { requests, state }))
}

/// The requests of an `inputRequests` map; `None` when it is not one.
fn read_requests(map: &RawValue) -> Option<Vec<InputRequest>> {
    if map.get() == "null" {
        return Some(Vec::new());
    }
    let map: Map<String, Value> = serde_json::from_str(map.get()).ok()?;
    map.into_iter()
        .map(|(key, request)| {
            let Value::Object(mut request) = request else {
                return None;
            };
            let Some(Value::String(method)) = request.remove("method") else {
                return None;
            };
            let params = request.remove("params").unwrap_or(Value::Null);
            Some(InputRequest {
                key,
                method,
                params,
            })
        })
        .collect()
}

/// The answer to one input request (public as `executa::host::mcp_input_answer`):
/// `sampling/createMessage` is `sample`'s (given the request's MCP params, it returns the
/// MCP result), `roots/list` is `{"roots": []}`, `elicitation/create` is
/// `{"action": "decline"}`; any other method is -32601. Blocks as long as `sample` does.
pub fn input_answer(
    request: &InputRequest,
    sample: impl FnOnce(&Value) -> std::result::Result<Value, RpcError>,
) -> std::result::Result<Value, RpcError> {
    match request.method.as_str() {
        SAMPLING => sample(&request.params),
        "roots/list" => Ok(json!({ "roots": [] })),
        "elicitation/create" => Ok(json!({ "action": "decline" })),
        other => Err(RpcError::new(
            codes::METHOD_NOT_FOUND,
            format!("the host fulfils no input request `{other}`"),
        )),
    }
}

/// The error for an input request of `whose` ("the server's", "the plugin's") that could not
/// be fulfilled: `e`'s code and data, its message naming the request.
pub(crate) fn unfulfilled(whose: &str, request: &InputRequest, e: RpcError) -> crate::Error {
    crate::Error::Refused(RpcError {
        message: format!(
            "{whose} input request {:?} ({}) could not be fulfilled: {}",
            request.key, request.method, e.message
        ),
        ..e
    })
}

/// The wait before the state-only round that follows `waited` (`None`: the first of a
/// row).
pub fn state_only_wait(waited: Option<Duration>) -> Duration {
    waited.map_or(STATE_ONLY_WAIT, |w| (w * 2).min(STATE_ONLY_WAIT_CAP))
}

/// `params` of a stateless `tools/call`: its name and arguments, `_meta` (the progress
/// token, then the envelope), and on a retry the answers and the state.
struct CallParams<'a, A: ?Sized> {
    name: &'a str,
    arguments: &'a A,
    progress_token: Option<&'a str>,
    envelope: Envelope<'a>,
    responses: Option<Map<String, Value>>,
    state: Option<Box<RawValue>>,
}

impl<A: Serialize + ?Sized> Serialize for CallParams<'_, A> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("name", self.name)?;
        map.serialize_entry("arguments", self.arguments)?;
        map.serialize_entry("_meta", &Meta(self.progress_token, self.envelope))?;
        if let Some(responses) = &self.responses {
            map.serialize_entry("inputResponses", responses)?;
        }
        if let Some(state) = &self.state {
            map.serialize_entry("requestState", state)?;
        }
        map.end()
    }
}

/// `_meta` of a `tools/call`: the progress token, when progress is wanted, and the
/// envelope.
struct Meta<'a>(Option<&'a str>, Envelope<'a>);

impl Serialize for Meta<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        if let Some(token) = self.0 {
            map.serialize_entry("progressToken", token)?;
        }
        self.1.entries(&mut map)?;
        map.end()
    }
}

impl PluginProcess {
    /// `tools/call` in a stateless session, within `timeout` for every round together:
    /// the result once it is final, each `InputRequiredResult` on the way fulfilled and
    /// the call sent again. More than [`MAX_INPUT_ROUNDS`] rounds, or an input request
    /// the host cannot fulfil (no sampling handler, a handler's error, an unknown method),
    /// fail the call; the server is told nothing (the stateless era has no cancellation
    /// of a call it answered). Blocks for each request, each sampling call (bounded by
    /// the handler: `CommandSampling` 80 s) and each state-only wait (at most 250 ms).
    pub(super) fn call_tool_stateless<A: Serialize + ?Sized>(
        &self,
        tool: &str,
        arguments: &A,
        invoke_id: &str,
        envelope: Envelope<'_>,
        timeout: Duration,
    ) -> Result<Box<RawValue>> {
        let deadline = Instant::now() + timeout;
        let timed_out = || Error::Timeout {
            method: "tools/call".to_owned(),
            after: timeout,
        };
        let mut params = CallParams {
            name: tool,
            arguments,
            progress_token: self.dispatch.has_progress().then_some(invoke_id),
            envelope,
            responses: None,
            state: None,
        };
        let mut waited = None;
        for round in 0..=MAX_INPUT_ROUNDS {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(timed_out());
            }
            let raw = self.shared.request("tools/call", Some(&params), left)?;
            let Some(input) = input_required(&raw)? else {
                return Ok(raw);
            };
            if round == MAX_INPUT_ROUNDS {
                break;
            }
            params.responses = if input.requests.is_empty() {
                let wait = state_only_wait(waited);
                waited = Some(wait);
                std::thread::sleep(wait.min(deadline.saturating_duration_since(Instant::now())));
                None
            } else {
                waited = None;
                Some(self.fulfil(&input.requests, invoke_id, deadline)?)
            };
            params.state = input.state;
        }
        Err(Error::Protocol(format!(
            "tools/call `{tool}`: the server asked for input more than {MAX_INPUT_ROUNDS} \
             times (MAX_INPUT_ROUNDS); stopped"
        )))
    }

    /// The answers to one round's input requests, by key, one after the other.
    fn fulfil(
        &self,
        requests: &[InputRequest],
        invoke_id: &str,
        deadline: Instant,
    ) -> Result<Map<String, Value>> {
        let mut answers = Map::new();
        for request in requests {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout {
                    method: request.method.clone(),
                    after: Duration::ZERO,
                });
            }
            self.shared.count_reverse_call();
            let answer = input_answer(request, |params| {
                self.sample(params, invoke_id, &request.key, left)
            })
            .map_err(|e| unfulfilled("the server's", request, e))?;
            answers.insert(request.key.clone(), answer);
        }
        Ok(answers)
    }

    /// One embedded `sampling/createMessage` through the host's sampling handler, in the
    /// Executa shape the handlers read (as the handshake era's request is), for the
    /// invoke it belongs to; the handler's answer in MCP's shape.
    fn sample(
        &self,
        params: &Value,
        invoke_id: &str,
        key: &str,
        left: Duration,
    ) -> std::result::Result<Value, RpcError> {
        if !self.dispatch.handles(SAMPLING) {
            return Err(RpcError::new(
                codes::METHOD_NOT_FOUND,
                "the host has no sampling handler",
            ));
        }
        let call = ReverseCall {
            method: SAMPLING.to_owned(),
            params: to_executa(params.clone()),
            invoke_id: Some(invoke_id.to_owned()),
            client_timeout: Some(left),
            id: Id::string(key),
        };
        sampling_result(&self.dispatch.call_value(&call)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).expect("JSON")
    }

    #[test]
    fn final_results_are_read_as_final_and_input_required_ones_as_requests() {
        for done in [
            r#"{"content":[]}"#,
            r#"{"content":[],"resultType":"complete"}"#,
            "[]",
        ] {
            assert!(
                input_required(&raw(done)).expect("readable").is_none(),
                "{done}"
            );
        }
        let asked = input_required(&raw(
            r#"{"resultType":"input_required","requestState":"s\u00e9 1",
                "inputRequests":{"b":{"method":"roots/list"},
                                 "a":{"method":"sampling/createMessage","params":{"maxTokens":5}}}}"#,
        ))
        .expect("readable")
        .expect("input required");
        assert_eq!(
            asked.state.as_deref().map(RawValue::get),
            Some(r#""s\u00e9 1""#),
            "the state's bytes as sent"
        );
        let keys: Vec<_> = asked
            .requests
            .iter()
            .map(|r| (r.key.as_str(), r.method.as_str()))
            .collect();
        assert_eq!(keys, [("a", SAMPLING), ("b", "roots/list")]);
        assert_eq!(asked.requests[0].params, json!({"maxTokens": 5}));
        assert_eq!(asked.requests[1].params, Value::Null);
    }

    #[test]
    fn malformed_or_unknown_results_are_refused_by_name() {
        for bad in [
            r#"{"resultType":"input_required"}"#,
            r#"{"resultType":"input_required","inputRequests":[1]}"#,
            r#"{"resultType":"input_required","inputRequests":{"k":{"params":{}}}}"#,
            r#"{"resultType":"task"}"#,
        ] {
            assert!(
                matches!(input_required(&raw(bad)), Err(Error::Protocol(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn roots_are_none_elicitation_is_declined_and_sampling_is_the_handlers() {
        let ask = |method: &str| InputRequest {
            key: "k".into(),
            method: method.into(),
            params: json!({"messages": []}),
        };
        let never = |_: &Value| -> std::result::Result<Value, RpcError> { panic!("not sampling") };
        assert_eq!(
            input_answer(&ask("roots/list"), never),
            Ok(json!({"roots": []}))
        );
        assert_eq!(
            input_answer(&ask("elicitation/create"), never),
            Ok(json!({"action": "decline"}))
        );
        assert_eq!(
            input_answer(&ask("tasks/get"), never).map_err(|e| e.code),
            Err(-32601)
        );
        let answer = input_answer(&ask(SAMPLING), |p| Ok(json!({"seen": p})));
        assert_eq!(answer, Ok(json!({"seen": {"messages": []}})));
    }

    #[test]
    fn state_only_waits_double_up_to_the_cap() {
        let mut waited = None;
        let waits: Vec<u128> = (0..5)
            .map(|_| {
                let w = state_only_wait(waited);
                waited = Some(w);
                w.as_millis()
            })
            .collect();
        assert_eq!(waits, [50, 100, 200, 250, 250]);
    }

    #[test]
    fn a_retry_carries_the_answers_and_the_state_as_sent() {
        let envelope = Envelope {
            version: "2026-07-28",
            name: "h",
            client_version: "1",
            sampling: false,
        };
        let mut params = CallParams {
            name: "t",
            arguments: &json!({"x": 1}),
            progress_token: Some("inv"),
            envelope,
            responses: None,
            state: None,
        };
        let first = serde_json::to_string(&params).expect("JSON");
        assert!(
            !first.contains("inputResponses") && !first.contains("requestState"),
            "{first}"
        );
        params.responses = Some(Map::from_iter([("k".to_owned(), json!({"roots": []}))]));
        params.state = Some(raw(r#""s\u00e9""#));
        let again: Value =
            serde_json::from_str(&serde_json::to_string(&params).expect("JSON")).expect("JSON");
        assert_eq!(again["inputResponses"], json!({"k": {"roots": []}}));
        assert_eq!(again["_meta"]["progressToken"], "inv");
        assert_eq!(
            again["_meta"][crate::protocol::MCP_META_VERSION],
            "2026-07-28"
        );
        let text = serde_json::to_string(&params).expect("JSON");
        assert!(text.contains(r#""requestState":"s\u00e9""#), "{text}");
    }
}
