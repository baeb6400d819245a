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

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::error::{Error, Result, RpcError, codes};
use crate::json_scan;
use crate::writer::SendFailure;

use super::super::reverse::pending::Pending;
use super::super::reverse::{Peer, wait_for_answer};
use super::Seen;
use super::seal::Sealer;

/// The one method a 2026-07-28 client takes as an input request from this runtime: the
/// revision also has `elicitation/create` and `roots/list`, which need capabilities of
/// their own and have no author API here.
const INPUT_METHOD: &str = "sampling/createMessage";

/// The version byte of a sealed state, so a later layout is never misread as this one.
const STATE_V1: u8 = 1;

/// The resumed calls' requests not taken by their handler yet: a bound, in case a handler
/// never comes back for its entry (it is removed on the next push past the bound).
const MAX_RESUMED: usize = 1024;

/// The stateless side of one `tools/call`: whether its client samples, whether it may ask
/// it at all, and where the call stands with its client.
#[derive(Debug)]
pub(crate) struct Stateless {
    /// The client declared `sampling` in this request's `_meta`.
    pub samples: bool,
    /// The tool's name, which an input request binds, when a call to the client can
    /// happen (the plugin declares sampling and the client samples): see
    /// [`Stateless::askable`].
    tool: Option<Arc<str>>,
    turn: Mutex<Turn>,
}

/// Where a stateless call stands: which request its reply is owed to, the input request
/// it waits on, the request a cancellation may name, the progress token in force.
#[derive(Debug)]
struct Turn {
    owed: Owed,
    /// The request in flight (the first, then the retry that resumed the call).
    seen: Option<Seen>,
    /// The retry's progress token (the first request's is the call's own).
    token: Option<Box<str>>,
}

impl Turn {
    /// Ends the call (see [`Stateless::close`]). A retry that settled the input request
    /// while the thread that asked had not taken its answer yet is the request the reply
    /// goes to: it resumed the call, which ends now.
    fn close(&mut self, pending: &Pending, resumes: &Resumes) -> (Owed, bool) {
        let mut owed = std::mem::replace(&mut self.owed, Owed::Closed);
        if let Owed::Asked(ticket) = owed
            && let Some(resume) = resumes.claim(pending, ticket)
        {
            owed = Owed::Retry(resume.id);
            self.seen = Some(resume.seen);
        }
        let cancelled = self.seen.take().is_some_and(Seen::finish);
        (owed, cancelled)
    }
}

/// Which request a stateless call's final reply goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Owed {
    /// The request that started it.
    First,
    /// None for now: the request was answered with an input request, the retry awaited
    /// by the sealed call of this number.
    Asked(u64),
    /// None: the client never retried (or went away); the request was answered.
    Gone,
    /// The retry that answered the last input request (its raw id).
    Retry(Box<str>),
    /// The invoke ended: nothing more is sent for it.
    Closed,
}

impl Stateless {
    /// The state of a call of `tool` read with request `seen`; `askable`: whether it may
    /// ever ask its client.
    pub fn new(samples: bool, askable: bool, seen: Seen, tool: &Arc<str>) -> Self {
        Stateless {
            samples,
            tool: askable.then(|| tool.clone()),
            turn: Mutex::new(Turn {
                owed: Owed::First,
                seen: Some(seen),
                token: None,
            }),
        }
    }

    /// Ends the call as its invoke ends: which request its reply goes to, and whether the
    /// client cancelled that request. An input request still waiting is forgotten, so a
    /// retry for it is refused and a thread still waiting on it wakes.
    pub fn close(&self, peer: &Peer) -> (Owed, bool) {
        self.close_with(&peer.pending, peer.mcp.resumes())
    }

    /// Whether a call to the client can happen: then the invoke keeps what an input request
    /// binds (`bind`).
    pub fn askable(&self) -> bool {
        self.tool.is_some()
    }

    /// [`Stateless::close`] where nothing else holds the call (no thread the handler
    /// spawned kept a handle): no lock taken.
    pub fn close_alone(&mut self, peer: &Peer) -> (Owed, bool) {
        let turn = self.turn.get_mut().unwrap_or_else(PoisonError::into_inner);
        turn.close(&peer.pending, peer.mcp.resumes())
    }

    /// [`Stateless::close`], given the pending calls and the retries' hand-overs.
    fn close_with(&self, pending: &Pending, resumes: &Resumes) -> (Owed, bool) {
        crate::lock::lock(&self.turn).close(pending, resumes)
    }

    /// The progress token in force: the first request's (`first`) until the call asks its
    /// client, none while it waits (that request was answered), the retry's after.
    pub fn token(&self, first: Option<&str>) -> Option<Box<str>> {
        let turn = crate::lock::lock(&self.turn);
        match turn.owed {
            Owed::First => first.map(Into::into),
            Owed::Retry(_) => turn.token.clone(),
            _ => None,
        }
    }
}

/// Writes what an input request binds of a call into `text`, besides its tool: the
/// request id and the arguments, both raw JSON, split by a NUL byte (which JSON text never
/// holds: an id's end cannot be read from its text alone, `7` then `5` would read as `75`).
/// Every call that may ask its client runs this; the text is kept as bytes, read as text
/// only when the call asks.
pub(crate) fn bind(text: &mut Vec<u8>, id: &[u8], arguments: &str) {
    text.extend_from_slice(id);
    text.push(0);
    text.extend_from_slice(arguments.as_bytes());
}

/// The parts [`bind`] wrote: request id, arguments.
fn bound(bytes: &[u8]) -> Option<(&str, &str)> {
    let text = std::str::from_utf8(bytes).ok()?;
    text.split_once('\0')
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

/// The retries that resumed a call, with what the call takes over from them: the request
/// a cancellation may name, the progress token. Handed over beside the answer (which
/// carries only text).
#[derive(Default)]
pub(crate) struct Resumes(Mutex<Vec<Resume>>);

/// What the retry that settled call `ticket` hands it.
struct Resume {
    ticket: u64,
    /// The retry's id (raw).
    id: Box<str>,
    seen: Seen,
    token: Option<Box<str>>,
}

// `settle` and `claim` each hold the list's lock across their step in the pending table,
// so a hand-over is in the list exactly when a retry settled its call: a call its own
// thread forgot (timed out) is never claimed by the invoke's end for a retry that is
// refused as well (two replies to one request).
impl Resumes {
    /// Hands `resume` over and settles its sealed call with `answer`: whether a call
    /// waited for it (if not, nothing is kept).
    fn settle(&self, pending: &Pending, resume: Resume, answer: Box<RawValue>) -> bool {
        let mut all = crate::lock::lock(&self.0);
        let ticket = resume.ticket;
        if !pending.settle_sealed(ticket, Ok(answer)) {
            return false;
        }
        if all.len() >= MAX_RESUMED {
            all.remove(0);
        }
        all.push(resume);
        true
    }

    /// Forgets sealed call `ticket` as its invoke ends; the hand-over of the retry that
    /// settled it, if one did before.
    fn claim(&self, pending: &Pending, ticket: u64) -> Option<Resume> {
        let mut all = crate::lock::lock(&self.0);
        if pending.forget(ticket) {
            return None;
        }
        Resumes::remove(&mut all, ticket)
    }

    fn take(&self, ticket: u64) -> Option<Resume> {
        Resumes::remove(&mut crate::lock::lock(&self.0), ticket)
    }

    fn remove(all: &mut Vec<Resume>, ticket: u64) -> Option<Resume> {
        let at = all.iter().position(|r| r.ticket == ticket)?;
        Some(all.swap_remove(at))
    }
}

/// A 2026-07-28 retry as read: `tools/call` of `name` with `arguments` (raw JSON text),
/// request id `id` (raw, entered in flight as `seen`, its progress token `token`), echoing
/// `state` with the client's `responses` (raw, if any).
pub(crate) struct Retried<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub arguments: &'a str,
    pub state: &'a str,
    pub responses: Option<&'a str>,
    pub seen: Seen,
    pub token: Option<Box<str>>,
}

/// Asks the client of a stateless call for `method(params)`: answers the request the call
/// owes with an input request, then waits for the retry, at most `wait` (the sealed state
/// expires with it). Returns the client's response; [`Error::Refused`] when the method is
/// not one the client takes as input, the call asked already and waits (one input request
/// at a time), its client never retried an earlier one, or the client cancelled the call;
/// [`Error::Timeout`] when no retry came (the call's reply is then dropped: its request
/// was answered); [`Error::InvokeEnded`] once the invoke ended; [`Error::Disconnected`]
/// when the client went away.
#[inline(never)]
pub(crate) fn ask(
    peer: &Peer,
    call: &Stateless,
    bound_text: &[u8],
    method: &str,
    params: &[u8],
    wait: Duration,
) -> Result<Box<RawValue>> {
    let started = Instant::now();
    let Some((name, (first_id, arguments))) = call.tool.as_deref().zip(bound(bound_text)) else {
        return Err(refused(format!(
            "`{method}` cannot reach this client: it did not declare the capability in its \
             request, or the manifest does not"
        )));
    };
    if method != INPUT_METHOD {
        return Err(refused(format!(
            "`{method}` cannot reach a 2026-07-28 client from this runtime, which sends only \
             {INPUT_METHOD} as an input request"
        )));
    }
    let (id, ticket, seen) = {
        let mut turn = crate::lock::lock(&call.turn);
        let id: Box<str> = match &turn.owed {
            Owed::First => first_id.into(),
            Owed::Retry(id) => id.clone(),
            Owed::Closed => return Err(Error::InvokeEnded),
            Owed::Asked(_) => {
                return Err(refused(
                    "this tools/call asked its client already and waits for the retry: a \
                     2026-07-28 call carries one input request at a time"
                        .to_owned(),
                ));
            }
            Owed::Gone => {
                return Err(refused(
                    "this tools/call has no request left to answer: its client did not retry \
                     the last input request"
                        .to_owned(),
                ));
            }
        };
        if turn.seen.as_ref().is_some_and(Seen::is_cancelled) {
            return Err(refused("the client cancelled this tools/call".to_owned()));
        }
        let ticket = peer
            .pending
            .register_sealed()
            .map_err(Error::Disconnected)?;
        turn.owed = Owed::Asked(ticket.number);
        // The request is answered by the input request: a cancellation of it is moot.
        (id, ticket, turn.seen.take())
    };
    let number = ticket.number;
    let expires = wall_ms().saturating_add(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
    let digest = binding(peer.mcp.sealer(), name, arguments);
    let state = seal_state(peer.mcp.sealer(), number, expires, &digest);
    let frame = input_required(&id, number, method, params, &state);
    if let Err(sent) = peer.out.send_timeout(frame, wait) {
        let mut turn = crate::lock::lock(&call.turn);
        if turn.owed == Owed::Asked(number) {
            // Not sent: the request is still owed, by the caller's reply.
            peer.pending.forget(number);
            turn.owed = Owed::Retry(id);
            turn.seen = seen;
        }
        return Err(match sent {
            SendFailure::Timeout => Error::Timeout {
                method: method.to_owned(),
                after: wait,
            },
            SendFailure::Closed => Error::Disconnected("the plugin's output is closed".into()),
        });
    }
    drop(seen);
    let answer = wait_for_answer(peer, ticket, method, started, wait);
    let mut turn = crate::lock::lock(&call.turn);
    let answer = match answer {
        Ok(answer) => answer,
        Err(e) => {
            if turn.owed == Owed::Asked(number) {
                turn.owed = Owed::Gone;
            }
            return Err(if turn.owed == Owed::Closed {
                Error::InvokeEnded
            } else {
                e
            });
        }
    };
    if turn.owed == Owed::Closed {
        // The invoke ended as the retry came: its reply went to the retry, whose hand-over
        // the end took (`Turn::close`).
        return Err(Error::InvokeEnded);
    }
    let resumed: Resumed<'_> = serde_json::from_str(answer.get())?;
    turn.owed = Owed::Retry(resumed.id.get().into());
    if let Some(resume) = peer.mcp.resumes().take(number) {
        turn.seen = Some(resume.seen);
        turn.token = resume.token;
    }
    drop(turn);
    if resumed.response.get() == "null" {
        let msg = format!("the client's retry carried no response to its input request `{method}`");
        return Err(Error::Remote(RpcError::new(codes::INVALID_PARAMS, msg)));
    }
    Ok(resumed.response.to_owned())
}

/// The `InputRequiredResult` answering request `id` with one input request.
fn input_required(id: &str, number: u64, method: &str, params: &[u8], state: &str) -> Vec<u8> {
    let mut frame = Vec::with_capacity(params.len() + state.len() + 160);
    frame.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    frame.extend_from_slice(id.as_bytes());
    frame
        .extend_from_slice(b",\"result\":{\"resultType\":\"input_required\",\"inputRequests\":{\"");
    frame.extend_from_slice(key(number).as_bytes());
    frame.extend_from_slice(b"\":{\"method\":");
    crate::wire::serialize_into(&mut frame, method);
    frame.extend_from_slice(b",\"params\":");
    frame.extend_from_slice(params);
    frame.extend_from_slice(b"}},\"requestState\":\"");
    frame.extend_from_slice(state.as_bytes());
    frame.extend_from_slice(b"\"}}\n");
    frame
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

/// What a state binds: the tool and its arguments, canonical (members sorted, strings
/// re-escaped, numbers as written, so a client that re-serializes the same arguments
/// still matches and no two numbers meet as the same float), under the process's key
/// (the token shows no plain hash of the arguments).
fn binding(sealer: &Sealer, name: &str, arguments: &str) -> [u8; 16] {
    let mut text = String::with_capacity(arguments.len());
    if canonical(arguments, &mut text, 0).is_none() {
        text.clear();
        text.push_str(arguments);
    }
    let digest = sealer.digest(&[name.as_bytes(), b"\0", text.as_bytes()]);
    let mut out = [0; 16];
    out.copy_from_slice(&digest[..16]);
    out
}

/// Writes checked JSON `raw` canonically into `out`; `None` past 64 levels or on text
/// that does not read.
fn canonical(raw: &str, out: &mut String, depth: u32) -> Option<()> {
    let text = raw.trim_matches([' ', '\t', '\n', '\r']);
    if depth > 64 {
        return None;
    }
    match text.as_bytes().first()? {
        b'{' => {
            let mut members = Vec::new();
            json_scan::for_each_member(text, |k, v| {
                members.push((k, v));
                Some(())
            })?;
            members.sort_by(|a, b| a.0.cmp(&b.0));
            out.push('{');
            for (at, (k, v)) in members.iter().enumerate() {
                if at > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(&**k).ok()?);
                out.push(':');
                canonical(v, out, depth + 1)?;
            }
            out.push('}');
        }
        b'[' => {
            out.push('[');
            let mut first = true;
            json_scan::for_each_element(text, |v| {
                if !first {
                    out.push(',');
                }
                first = false;
                canonical(v, out, depth + 1)
            })?;
            out.push(']');
        }
        b'"' => out.push_str(&serde_json::to_string(&*json_scan::value_text(text)?).ok()?),
        _ => out.push_str(text),
    }
    Some(())
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

/// A retry read. A valid one settles the waiting call, whose reply then goes to the
/// retry's id, and returns `Ok` (nothing to answer now); any other is refused as the
/// revision's SDKs refuse it, with -32602 and no reason given (the log has it), and
/// touches no call. Never blocks.
#[cold]
#[inline(never)]
pub(crate) fn on_retry(peer: &Peer, retry: Retried<'_>) -> std::result::Result<(), RpcError> {
    let Retried {
        id,
        name,
        arguments,
        state,
        responses,
        seen,
        token,
    } = retry;
    let sealer = peer.mcp.sealer();
    let why = match open_state(sealer, state) {
        None => "not sealed by this process",
        Some((_, expires, _)) if expires < wall_ms() => "expired",
        Some((_, _, bound)) if bound != binding(sealer, name, arguments) => "bound to another call",
        Some((number, _, _)) => {
            // The response, as the client wrote it (checked JSON: the frame was read).
            let (wanted, mut response) = (key(number), "null");
            if let Some(responses) = responses {
                json_scan::for_each_member(responses, |k, v| {
                    if k == wanted {
                        response = v;
                    }
                    Some(())
                });
            }
            let resumed = format!("{{\"id\":{id},\"response\":{response}}}");
            match RawValue::from_string(resumed) {
                Ok(raw) => {
                    let resume = Resume {
                        ticket: number,
                        id: id.into(),
                        seen,
                        token,
                    };
                    if peer.mcp.resumes().settle(&peer.pending, resume, raw) {
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
    error.data = Some(serde_json::json!({ "reason": "invalid_request_state" }));
    Err(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_opens_only_as_sealed() {
        let sealer = Sealer::with_key([7; 32]);
        let bound = binding(&sealer, "t", r#"{"b": 1, "a": [1, 2]}"#);
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
        let s = Sealer::with_key([7; 32]);
        let b = |name: &str, args: &str| binding(&s, name, args);
        assert_eq!(
            b("t", r#"{"b": 1, "a": [1, {"y": "\u0041", "x": 2}]}"#),
            b("t", r#"{"a":[1,{"x":2,"y":"A"}],"b":1}"#)
        );
        assert_ne!(b("t", r#"{"a":1}"#), b("t", r#"{"a":2}"#));
        assert_ne!(b("t", r#"{"a":1}"#), b("u", r#"{"a":1}"#));
        assert_ne!(b("t", r#"{"a":[1,2]}"#), b("t", r#"{"a":[2,1]}"#));
        // Numbers as written: two that one float would hold are told apart.
        assert_ne!(
            b("t", r#"{"n":18446744073709551616}"#),
            b("t", r#"{"n":18446744073709551617}"#)
        );
        // Under another key, another digest: the token shows no plain hash.
        let other = Sealer::with_key([8; 32]);
        assert_ne!(b("t", "{}"), binding(&other, "t", "{}"));
    }

    #[test]
    fn what_an_input_request_binds_reads_back() {
        let mut text = b"old".to_vec();
        text.clear();
        bind(&mut text, b"\"x{\"", r#"{"a":"b"}"#);
        assert_eq!(bound(&text), Some(("\"x{\"", r#"{"a":"b"}"#)));
        text.clear();
        bind(&mut text, b"-12.5e3", "{}");
        assert_eq!(bound(&text), Some(("-12.5e3", "{}")));
        // Arguments that could continue the id's text (any JSON value may be arguments).
        text.clear();
        bind(&mut text, b"7", "5");
        assert_eq!(bound(&text), Some(("7", "5")));
        assert_eq!(bound(b""), None);
    }

    /// A stateless call whose input request is `number`, waiting.
    fn asked(flight: &super::super::flight::Flight, number: u64) -> Stateless {
        let call = Stateless::new(true, true, flight.seen("1"), &Arc::from("t"));
        crate::lock::lock(&call.turn).owed = Owed::Asked(number);
        call
    }

    /// A retry `"r"` of the call waiting as `number`, with its answer.
    fn retry(flight: &super::super::flight::Flight, number: u64) -> (Resume, Box<RawValue>) {
        let resume = Resume {
            ticket: number,
            id: "\"r\"".into(),
            seen: flight.seen("\"r\""),
            token: None,
        };
        match RawValue::from_string("{}".to_owned()) {
            Ok(raw) => (resume, raw),
            Err(e) => panic!("{e}"),
        }
    }

    /// A pending table with one sealed call waiting, and that call's number.
    fn one_waiting() -> (Pending, super::super::super::reverse::pending::Ticket) {
        let pending = Pending::new("ex-", None, None);
        match pending.register_sealed() {
            Ok(ticket) => (pending, ticket),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn an_invoke_ending_as_its_retry_settles_replies_to_the_retry() {
        let ((pending, ticket), resumes) = (one_waiting(), Resumes::default());
        let flight = super::super::flight::Flight::default();
        let call = asked(&flight, ticket.number);
        // The retry settles the call, whose thread has not taken its answer yet.
        let (resume, raw) = retry(&flight, ticket.number);
        assert!(resumes.settle(&pending, resume, raw));
        let owed = call.close_with(&pending, &resumes);
        assert_eq!(owed, (Owed::Retry("\"r\"".into()), false));
        assert!(
            resumes.take(ticket.number).is_none(),
            "the hand-over was used"
        );
    }

    #[test]
    fn an_invoke_ending_before_its_retry_refuses_the_retry() {
        let ((pending, ticket), resumes) = (one_waiting(), Resumes::default());
        let flight = super::super::flight::Flight::default();
        let call = asked(&flight, ticket.number);
        let (owed, _) = call.close_with(&pending, &resumes);
        assert_eq!(owed, Owed::Asked(ticket.number));
        let (resume, raw) = retry(&flight, ticket.number);
        assert!(
            !resumes.settle(&pending, resume, raw),
            "the call was forgotten"
        );
        assert!(resumes.take(ticket.number).is_none(), "nothing kept");
    }

    /// The three that race at an input request's end, each on its own thread: the thread
    /// that asked gives up (its wait timed out), a retry settles, the invoke ends. Whatever
    /// the order, the retry is answered once: by its refusal, or by the invoke's reply.
    #[test]
    fn a_retry_racing_a_timeout_and_the_invoke_end_gets_one_reply() {
        use std::sync::Barrier;
        let (pending, resumes) = (Pending::new("ex-", None, None), Resumes::default());
        let flight = super::super::flight::Flight::default();
        let rounds = 3000;
        let calls: Vec<_> = (0..rounds)
            .map(|_| {
                let Ok(ticket) = pending.register_sealed() else {
                    panic!("the table takes a call")
                };
                let retry = retry(&flight, ticket.number);
                (
                    asked(&flight, ticket.number),
                    ticket,
                    std::sync::Mutex::new(Some(retry)),
                )
            })
            .collect();
        let barrier = Barrier::new(3);
        let settled: Vec<std::sync::atomic::AtomicBool> =
            (0..rounds).map(|_| Default::default()).collect();
        let owed: Vec<Mutex<Option<Owed>>> = (0..rounds).map(|_| Mutex::new(None)).collect();
        std::thread::scope(|s| {
            s.spawn(|| {
                for (_, ticket, _) in &calls {
                    barrier.wait();
                    pending.forget(ticket.number);
                }
            });
            s.spawn(|| {
                for (i, (_, _, retry)) in calls.iter().enumerate() {
                    barrier.wait();
                    if let Some((resume, raw)) = crate::lock::lock(retry).take() {
                        let ok = resumes.settle(&pending, resume, raw);
                        settled[i].store(ok, std::sync::atomic::Ordering::SeqCst);
                    }
                }
            });
            for (i, (call, _, _)) in calls.iter().enumerate() {
                barrier.wait();
                *crate::lock::lock(&owed[i]) = Some(call.close_with(&pending, &resumes).0);
            }
        });
        for i in 0..rounds {
            let to_retry = matches!(*crate::lock::lock(&owed[i]), Some(Owed::Retry(_)));
            let settled = settled[i].load(std::sync::atomic::Ordering::SeqCst);
            // Refused (not settled) and answered by the invoke: two replies. Settled and not
            // answered: none.
            assert_eq!(to_retry, settled, "round {i}");
        }
    }

    #[test]
    fn a_retry_after_its_call_timed_out_is_refused_and_not_answered_by_the_invoke() {
        let ((pending, ticket), resumes) = (one_waiting(), Resumes::default());
        let flight = super::super::flight::Flight::default();
        let call = asked(&flight, ticket.number);
        // The asking thread gave up (it forgets its call) and has not marked the call yet.
        assert!(pending.forget(ticket.number));
        let (resume, raw) = retry(&flight, ticket.number);
        assert!(!resumes.settle(&pending, resume, raw), "refused: one reply");
        // So the invoke's reply does not go to that retry as well.
        let (owed, _) = call.close_with(&pending, &resumes);
        assert_eq!(owed, Owed::Asked(ticket.number));
    }
}
