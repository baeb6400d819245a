//! Calls to a 2026-07-28 client from a blocking handler. That revision has no requests
//! from server to client: a call that needs the model answers its request with an
//! `InputRequiredResult` (`inputRequests` + `requestState`) and the client retries the same
//! call with `inputResponses`. A stdio session is one process, so the handler itself is the
//! state: it stays blocked in `ctx.sampling()`, its reverse call registered in the pending
//! table as any other; the retry settles that call from the reader (as an answer from an
//! Executa host would) and becomes the request its final reply goes to.
//!
//! `requestState` is the client's to echo and so untrusted: it is sealed with an HMAC under
//! a key made when the process starts, names the waiting call, expires when that call stops
//! waiting, and is bound to the tool and its arguments; a forged, replayed, expired or
//! rebound one is refused before it reaches any call.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::error::{Error, Result, RpcError, codes};
use crate::writer::SendFailure;

use super::super::reverse::{Peer, wait_for_answer};
use super::seal::{Sealer, sha256};

/// The methods a 2026-07-28 client takes as input requests.
const INPUT_METHODS: [&str; 3] = ["sampling/createMessage", "elicitation/create", "roots/list"];

/// The version byte of a sealed state, so a later layout is never misread as this one.
const STATE_V1: u8 = 1;

/// The stateless side of one `tools/call`: whether its client samples, whether it may ask
/// it at all, and which request its reply is owed to.
#[derive(Debug)]
pub(crate) struct Stateless {
    /// The client declared `sampling` in this request's `_meta`.
    pub samples: bool,
    /// Whether a call to the client can happen (the plugin declares sampling and the client
    /// samples): then the invoke keeps what an input request binds (`bind`).
    pub askable: bool,
    owed: Mutex<Owed>,
}

/// Which request a stateless call's final reply goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Owed {
    /// The request that started it.
    First,
    /// None for now: the request was answered with an input request and no retry came.
    Asked,
    /// The retry that answered the last input request (its raw id).
    Retry(Box<str>),
}

impl Stateless {
    /// The state of a call; `askable`: whether it may ever ask its client.
    pub fn new(samples: bool, askable: bool) -> Self {
        Stateless {
            samples,
            askable,
            owed: Mutex::new(Owed::First),
        }
    }

    /// Which request the final reply goes to.
    pub fn owed(&self) -> Owed {
        crate::lock::lock(&self.owed).clone()
    }
}

/// Writes what an input request binds into `text`: the request id (raw), the tool's name
/// and its arguments (raw), NUL-separated (none can hold a NUL).
pub(crate) fn bind(text: &mut String, [id, name, arguments]: [&str; 3]) {
    for (at, part) in [id, name, arguments].into_iter().enumerate() {
        if at > 0 {
            text.push('\0');
        }
        text.push_str(part);
    }
}

/// The parts [`bind`] wrote: request id, tool name, arguments.
fn bound(text: &str) -> Option<(&str, &str, &str)> {
    let mut parts = text.splitn(3, '\0');
    Some((parts.next()?, parts.next()?, parts.next()?))
}

/// What a valid retry hands the waiting call: the retry's id, and the client's response to
/// the input request (`null` when the retry carried none).
#[derive(Deserialize)]
struct Resumed<'a> {
    #[serde(borrow)]
    id: &'a RawValue,
    #[serde(borrow)]
    response: &'a RawValue,
}

/// Asks the client of a stateless call for `method(params)`: answers the request the call
/// owes with an input request, then waits for the retry, at most `wait` (the sealed state
/// expires with it). Returns the client's response; [`Error::Refused`] when the method is
/// not one a client takes as input, or another thread of the call is asking already;
/// [`Error::Timeout`] when no retry came (the call's reply is then dropped: its request
/// was answered); [`Error::Disconnected`] when the client went away.
#[inline(never)]
pub(crate) fn ask(
    peer: &Peer,
    call: &Stateless,
    bound_text: &str,
    method: &str,
    params: &[u8],
    wait: Duration,
) -> Result<Box<RawValue>> {
    let started = Instant::now();
    let Some((first_id, name, arguments)) = bound(bound_text).filter(|_| call.askable) else {
        return Err(refused(format!(
            "`{method}` cannot reach this client: it did not declare the capability in its \
             request, or the manifest does not"
        )));
    };
    if !INPUT_METHODS.contains(&method) {
        return Err(refused(format!(
            "`{method}` has no counterpart in MCP 2026-07-28, whose clients take only {} as \
             input requests",
            INPUT_METHODS.join(", ")
        )));
    }
    let id = {
        let mut owed = crate::lock::lock(&call.owed);
        let id = match &*owed {
            Owed::First => first_id.to_owned().into_boxed_str(),
            Owed::Retry(id) => id.clone(),
            Owed::Asked => {
                return Err(refused(
                    "another call to the client of this tools/call waits for its answer: a \
                     2026-07-28 request carries one input request at a time"
                        .to_owned(),
                ));
            }
        };
        *owed = Owed::Asked;
        id
    };
    let ticket = peer.pending.register().map_err(Error::Disconnected)?;
    let expires = wall_ms().saturating_add(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
    let state = seal_state(
        peer.mcp.sealer(),
        ticket.number,
        expires,
        &binding(name, arguments),
    );
    let mut frame = Vec::with_capacity(params.len() + state.len() + 160);
    frame.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    frame.extend_from_slice(id.as_bytes());
    frame
        .extend_from_slice(b",\"result\":{\"resultType\":\"input_required\",\"inputRequests\":{\"");
    frame.extend_from_slice(key(ticket.number).as_bytes());
    frame.extend_from_slice(b"\":{\"method\":");
    crate::wire::serialize_into(&mut frame, method);
    frame.extend_from_slice(b",\"params\":");
    frame.extend_from_slice(params);
    frame.extend_from_slice(b"}},\"requestState\":\"");
    frame.extend_from_slice(state.as_bytes());
    frame.extend_from_slice(b"\"}}\n");
    if let Err(sent) = peer.out.send_timeout(frame, wait) {
        peer.pending.forget(ticket.number);
        // Not sent: the request is still owed, by the caller's reply.
        *crate::lock::lock(&call.owed) = Owed::Retry(id);
        return Err(match sent {
            SendFailure::Timeout => Error::Timeout {
                method: method.to_owned(),
                after: wait,
            },
            SendFailure::Closed => Error::Disconnected("the plugin's output is closed".into()),
        });
    }
    let answer = wait_for_answer(peer, ticket, method, started, wait)?;
    let resumed: Resumed<'_> = serde_json::from_str(answer.get())?;
    *crate::lock::lock(&call.owed) = Owed::Retry(resumed.id.get().into());
    if resumed.response.get() == "null" {
        let msg = format!("the client's retry carried no response to its input request `{method}`");
        return Err(Error::Remote(RpcError::new(codes::INVALID_PARAMS, msg)));
    }
    Ok(resumed.response.to_owned())
}

/// The key of the input request of pending call `number`.
fn key(number: u64) -> String {
    format!("r{number}")
}

fn refused(message: String) -> Error {
    Error::Refused(RpcError::with_code(
        codes::SAMPLING_NOT_NEGOTIATED,
        "NOT_NEGOTIATED",
        message,
    ))
}

/// Milliseconds since the Unix epoch: a state's lifetime is on the wall clock, which a
/// token carries across (a monotonic instant is not printable).
fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// What a state binds: the tool and its arguments, canonical (keys sorted, no spaces), so
/// a client that re-serializes the same arguments still matches.
fn binding(name: &str, arguments: &str) -> [u8; 16] {
    let canonical = serde_json::from_str::<Value>(arguments)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| arguments.to_owned());
    let digest = sha256(format!("{name}\0{canonical}").as_bytes());
    let mut out = [0; 16];
    out.copy_from_slice(&digest[..16]);
    out
}

fn seal_state(sealer: &Sealer, number: u64, expires_ms: u64, bound: &[u8; 16]) -> String {
    let mut payload = Vec::with_capacity(33);
    payload.push(STATE_V1);
    payload.extend_from_slice(&number.to_le_bytes());
    payload.extend_from_slice(&expires_ms.to_le_bytes());
    payload.extend_from_slice(bound);
    sealer.seal(&payload)
}

/// A state opened: the pending call it names, when it expires, what it binds.
fn open_state(sealer: &Sealer, state: &str) -> Option<(u64, u64, [u8; 16])> {
    let payload = sealer.open(state)?;
    let (&version, rest) = payload.split_first()?;
    if version != STATE_V1 || rest.len() != 32 {
        return None;
    }
    let number = u64::from_le_bytes(rest[..8].try_into().ok()?);
    let expires = u64::from_le_bytes(rest[8..16].try_into().ok()?);
    let bound = rest[16..].try_into().ok()?;
    Some((number, expires, bound))
}

/// A retry read: `tools/call` of `name` with `arguments` (raw JSON text), request id `id`
/// (raw), echoing `state` with the client's `responses` (raw, if any). A valid one settles
/// the waiting call, whose reply then goes to `id`, and returns `Ok` (nothing to answer
/// now); any other is refused as the revision's SDKs refuse it, with -32602, and touches
/// no call. Never blocks.
#[cold]
#[inline(never)]
pub(crate) fn on_retry(
    peer: &Peer,
    id: &str,
    name: &str,
    arguments: &str,
    state: &str,
    responses: Option<&str>,
) -> std::result::Result<(), RpcError> {
    let why = match open_state(peer.mcp.sealer(), state) {
        None => "not sealed by this process",
        Some((_, expires, _)) if expires < wall_ms() => "expired",
        Some((_, _, bound)) if bound != binding(name, arguments) => "bound to another call",
        Some((number, _, _)) => {
            // The response, as the client wrote it (checked JSON: the frame was read).
            let (wanted, mut response) = (key(number), "null");
            if let Some(responses) = responses {
                crate::json_scan::for_each_member(responses, |k, v| {
                    if k == wanted {
                        response = v;
                    }
                    Some(())
                });
            }
            let resumed = format!("{{\"id\":{id},\"response\":{response}}}");
            match RawValue::from_string(resumed) {
                Ok(raw) => {
                    if peer.pending.settle_number(number, Ok(raw)) {
                        return Ok(());
                    }
                    "no call waits for it: answered, timed out or used already"
                }
                Err(_) => "unreadable",
            }
        }
    };
    log::debug!("executa: refused a requestState: {why}");
    let mut error = RpcError::new(codes::INVALID_PARAMS, "Invalid or expired requestState");
    error.data = Some(serde_json::json!({ "reason": "invalid_request_state", "detail": why }));
    Err(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_opens_only_as_sealed() {
        let sealer = Sealer::with_key([7; 32]);
        let bound = binding("t", r#"{"b": 1, "a": [1, 2]}"#);
        let state = seal_state(&sealer, 42, 1_000, &bound);
        assert_eq!(open_state(&sealer, &state), Some((42, 1_000, bound)));
        assert_eq!(open_state(&Sealer::with_key([8; 32]), &state), None);
        let mut forged = state.clone().into_bytes();
        forged[3] ^= 1;
        assert_eq!(open_state(&sealer, &String::from_utf8_lossy(&forged)), None);
        assert_eq!(open_state(&sealer, ""), None);
    }

    #[test]
    fn the_binding_reads_arguments_canonically() {
        assert_eq!(
            binding("t", r#"{"b": 1, "a": [1, 2]}"#),
            binding("t", r#"{"a":[1,2],"b":1}"#)
        );
        assert_ne!(binding("t", r#"{"a":1}"#), binding("t", r#"{"a":2}"#));
        assert_ne!(binding("t", r#"{"a":1}"#), binding("u", r#"{"a":1}"#));
    }

    #[test]
    fn what_an_input_request_binds_reads_back() {
        let mut text = String::from("old");
        text.clear();
        bind(&mut text, ["\"x\"", "sample", r#"{"a":"b"}"#]);
        assert_eq!(bound(&text), Some(("\"x\"", "sample", r#"{"a":"b"}"#)));
        assert_eq!(bound(""), None);
        assert_eq!(Stateless::new(true, true).owed(), Owed::First);
    }
}
