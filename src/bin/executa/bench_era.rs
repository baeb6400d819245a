//! Which MCP era `executa bench` speaks to a server, settled as `executa::host` settles it
//! (the same verdicts, `executa::host::mcp_probe_verdict`): with `--mcp-version auto`,
//! `server/discover` at 2026-07-28 first and the `initialize` handshake when that is no
//! evidence of a stateless server; `legacy`, the handshake only; a revision pinned, that
//! revision or an error saying why not. And, in the stateless era, the calls sent again
//! with the input their results asked for.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use executa::RpcError;
use executa::host::{
    MCP_MAX_INPUT_ROUNDS, MCP_MODERN_REVISIONS, MCP_PROBED, MCP_REVISIONS, McpInputRequest,
    McpProbe, McpRevision, McpVersion, mcp_input_required, mcp_probe_verdict, mcp_revision,
    mcp_state_only_wait,
};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::bench_mcp;

/// One request of the session: its result or error object, or why there is none (the
/// plugin was stopped: the bench cannot leave a read waiting).
pub type Ask<'a> =
    dyn FnMut(&str, &Value) -> Result<Result<Box<RawValue>, Box<RawValue>>, String> + 'a;

/// What settled the session: the `initialize` or `server/discover` result (the manifest's
/// name, version and description come from it) and the revision in force.
pub type Settled = (Box<RawValue>, String);

/// Settles the era `version` asks for, each request through `ask`.
pub fn settle(version: &McpVersion, ask: &mut Ask) -> Result<Settled, String> {
    match version {
        McpVersion::Auto => auto(ask),
        McpVersion::Legacy => handshake(ask, None),
        McpVersion::Pinned(v) if MCP_REVISIONS.contains(&v.as_str()) => handshake(ask, Some(v)),
        McpVersion::Pinned(v) => pinned_stateless(ask, v),
    }
}

/// The static name of a stateless revision the bench speaks.
pub fn stateless(revision: &str) -> Option<&'static str> {
    MCP_MODERN_REVISIONS
        .iter()
        .copied()
        .find(|r| *r == revision)
}

/// The Python SDK's `auto`: probe, then adopt, probe again, or shake hands (and probe
/// again when the handshake is refused with -32022 naming a stateless revision).
fn auto(ask: &mut Ask) -> Result<Settled, String> {
    let mut version = MCP_PROBED;
    for first in [true, false] {
        let answer = ask("server/discover", &bench_mcp::meta_params(version))?;
        let verdict = match &answer {
            Ok(result) => mcp_probe_verdict(Ok(result), version, first),
            Err(error) => mcp_probe_verdict(Err(&rpc(error)), version, first),
        };
        match verdict {
            McpProbe::Adopt(v) => {
                let result = answer.map_err(|e| e.get().to_owned())?;
                return Ok((result, v.to_owned()));
            }
            McpProbe::Again(v) => version = v,
            McpProbe::Incompatible(why) => return Err(why),
            McpProbe::Handshake(_) => {
                let answer = ask("initialize", &bench_mcp::initialize_params(None))?;
                match answer {
                    Err(error) if first => {
                        match mcp_probe_verdict(Err(&rpc(&error)), version, true) {
                            McpProbe::Again(v) => version = v,
                            _ => return Err(format!("initialize failed: {}", error.get())),
                        }
                    }
                    answer => return initialized(answer, None),
                }
            }
        }
    }
    Err(format!(
        "the MCP server answered server/discover at {version} with -32022 twice"
    ))
}

/// The handshake, proposing `pinned` (else the host's revision), whose answer must be it.
fn handshake(ask: &mut Ask, pinned: Option<&str>) -> Result<Settled, String> {
    let answer = ask("initialize", &bench_mcp::initialize_params(pinned))?;
    initialized(answer, pinned)
}

/// An `initialize` answer: its result and the revision it names, which must be one the
/// bench speaks (and `pinned`, when one is).
fn initialized(
    answer: Result<Box<RawValue>, Box<RawValue>>,
    pinned: Option<&str>,
) -> Result<Settled, String> {
    let result = answer.map_err(|e| format!("initialize failed: {}", e.get()))?;
    match mcp_revision(&result) {
        McpRevision::Spoken(v) if pinned.is_none_or(|p| p == v) => Ok((result, v)),
        McpRevision::Spoken(v) => Err(format!(
            "MCP {} was asked for (pinned), but the server answered initialize with {v}",
            pinned.unwrap_or_default()
        )),
        _ => Err(format!(
            "not an MCP initialize result with a revision executa bench speaks ({}): {}",
            MCP_REVISIONS.join(", "),
            result.get()
        )),
    }
}

/// A stateless revision pinned: `server/discover` at it must name it; no fallback.
fn pinned_stateless(ask: &mut Ask, version: &str) -> Result<Settled, String> {
    let pinned = |why: String| format!("MCP {version} was asked for (pinned), but {why}");
    let Some(v) = stateless(version) else {
        return Err(pinned("this bench does not speak it".to_owned()));
    };
    match ask("server/discover", &bench_mcp::meta_params(v))? {
        Ok(result) => match mcp_probe_verdict(Ok(&result), v, false) {
            McpProbe::Adopt(named) if named == v => Ok((result, v.to_owned())),
            _ => Err(pinned(format!(
                "server/discover does not name it: {}",
                result.get()
            ))),
        },
        Err(error) if rpc(&error).code == -32601 => Err(pinned(format!(
            "the server does not know server/discover ({}): it speaks only the initialize \
             handshake (use `--mcp-version auto`, or pin one of {})",
            error.get(),
            MCP_REVISIONS.join(", ")
        ))),
        Err(error) => Err(pinned(format!(
            "server/discover was refused: {}",
            error.get()
        ))),
    }
}

/// An error object as the verdicts read it (one that does not parse: -32603, which falls
/// back).
fn rpc(error: &RawValue) -> RpcError {
    serde_json::from_str(error.get())
        .unwrap_or_else(|_| RpcError::new(-32603, format!("an unreadable error: {}", error.get())))
}

/// What to do with a reply in the stateless era.
pub enum FollowUp {
    /// It is the call's answer: judge it as usual.
    Final,
    /// It asks for input: send this frame (the call again, under a new id); the request
    /// is still in flight.
    Retry(Vec<u8>),
    /// It asks for input the bench cannot give (a `--sampling-cmd` that failed): the
    /// request failed, for this reason.
    Failed(String),
}

/// Ids of the calls sent again: far from the run's own ids, which count up from 0.
static NEXT_RETRY: AtomicU64 = AtomicU64::new(1 << 40);

/// The `tools/call`s of a stateless run that asked for input: each is sent again under an
/// id of its own, which maps back to the request of the run it stands for, at most
/// `MCP_MAX_INPUT_ROUNDS` times (the result that asks once more is judged a failure).
pub struct Retries {
    tool: String,
    arguments: Value,
    meta: Value,
    /// The id of each call sent again, and the run's request it stands for.
    sent: HashMap<u64, u64>,
    /// Per request of the run that asked: the rounds so far, and the last state-only wait.
    rounds: HashMap<u64, (usize, Option<Duration>)>,
}

impl Retries {
    /// For a run calling `tool` with `arguments` at the stateless `revision`.
    pub fn new(tool: &str, arguments: &Value, revision: &str) -> Retries {
        Retries {
            tool: tool.to_owned(),
            arguments: arguments.clone(),
            meta: bench_mcp::envelope(revision),
            sent: HashMap::new(),
            rounds: HashMap::new(),
        }
    }

    /// The request of the run that the reply to `id` answers: `id` itself, or the one a
    /// retry stands for (which is then forgotten).
    pub fn original(&mut self, id: u64) -> u64 {
        if self.sent.is_empty() {
            return id;
        }
        let original = self.sent.remove(&id).unwrap_or(id);
        self.rounds.remove(&original);
        original
    }

    /// What to do with the result of the call `id`: when it asks for input within the
    /// rounds, the frame that sends it again with the answers (from `answer`) and its
    /// `requestState`. A result with state only waits first, on this (the reading)
    /// thread: 50 ms, doubling up to 250 ms.
    pub fn follow_up(
        &mut self,
        id: u64,
        result: &RawValue,
        answer: impl Fn(&McpInputRequest) -> Result<Value, RpcError>,
    ) -> Result<FollowUp, String> {
        let Ok(Some(input)) = mcp_input_required(result) else {
            return Ok(FollowUp::Final);
        };
        let original = self.sent.get(&id).copied().unwrap_or(id);
        let (rounds, waited) = self.rounds.entry(original).or_default();
        if *rounds == MCP_MAX_INPUT_ROUNDS {
            return Ok(FollowUp::Final);
        }
        *rounds += 1;
        let answers = if input.requests.is_empty() {
            let wait = mcp_state_only_wait(*waited);
            *waited = Some(wait);
            std::thread::sleep(wait);
            None
        } else {
            *waited = None;
            let mut answers = Map::new();
            for request in &input.requests {
                match answer(request) {
                    Ok(a) => answers.insert(request.key.clone(), a),
                    Err(e) => {
                        return Ok(FollowUp::Failed(format!(
                            "input request {:?} ({}) not fulfilled: {e}",
                            request.key, request.method
                        )));
                    }
                };
            }
            Some(answers)
        };
        self.sent.remove(&id);
        let retry = NEXT_RETRY.fetch_add(1, Ordering::Relaxed);
        self.sent.insert(retry, original);
        let frame = bench_mcp::Retry {
            tool: &self.tool,
            arguments: &self.arguments,
            meta: &self.meta,
            answers,
            state: input.state.as_deref(),
        }
        .frame(retry)?;
        Ok(FollowUp::Retry(frame))
    }
}
