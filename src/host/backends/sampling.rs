//! A scripted `sampling/createMessage` responder in the documented result shape (protocol
//! §8.1): it echoes the last user message, or answers from a JSONL fixture, and enforces
//! the Agent's per-call and per-invoke budgets.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::error::{Error, Result, RpcError, codes};
use crate::host::service::{ResultWriter, ReverseCall, Service, Written};
use crate::lock::lock;

const PROVIDER_ERROR: i64 = -32003;
const INVALID_REQUEST: i64 = -32004;
// The Agent's budgets, named once for both sides (`crate::protocol`).
use crate::protocol::{
    DEFAULT_MAX_SAMPLING_CALLS as MAX_CALLS_PER_INVOKE,
    DEFAULT_MAX_TOKENS_PER_CALL as MAX_TOKENS_PER_CALL,
    MAX_SAMPLING_TOKENS_PER_INVOKE as MAX_TOKENS_PER_INVOKE,
};
/// Invokes whose budgets are remembered; older ones are forgotten.
const BUDGET_MEMORY: usize = 4096;

/// A scripted sampling responder.
///
/// Echo mode answers with the text of the last `user` message. Fixture mode tries each
/// rule of a JSONL file in order; each line is
/// `{"match": {...}, "result": {...}}` (or `"error": {code, message}` instead of
/// `result`), optionally with `"ns":"sampling","method":"createMessage"` as in
/// `anna-app executa dev --mock-sampling` fixtures. `match` is a subset of the request
/// params (objects compared key by key, other values by equality), plus one shorthand:
/// `{"contains": "text"}` matches when the last user message contains `text`. A `result`
/// may be the full shape or just `{"text": "..."}`; missing fields are filled in.
///
/// Budgets as on the platform: at most 8192 `maxTokens` per call (-32007), 8 calls and
/// 32 000 tokens per invoke id (-32006 / -32007).
#[derive(Debug)]
pub struct ScriptedSampling {
    rules: Vec<Rule>,
    echo_fallback: bool,
    model: String,
    budgets: Mutex<HashMap<String, Budget>>,
}

#[derive(Debug)]
struct Rule {
    method: Option<String>,
    matcher: Value,
    answer: std::result::Result<Value, RpcError>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Budget {
    calls: u64,
    tokens: u64,
}

impl ScriptedSampling {
    /// Echoes the last user message.
    pub fn echo() -> Self {
        ScriptedSampling {
            rules: Vec::new(),
            echo_fallback: true,
            model: "executa-echo".to_owned(),
            budgets: Mutex::new(HashMap::new()),
        }
    }

    /// Answers from JSONL fixture text (blank lines and lines starting with `#` or `//`
    /// are skipped). A request no rule matches is refused with -32003 `NO_FIXTURE_MATCH`
    /// unless [`ScriptedSampling::with_echo_fallback`] is set. Fails with
    /// [`Error::Protocol`] naming the first bad line.
    pub fn from_jsonl(text: &str) -> Result<Self> {
        let mut rules = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with("//") {
                continue;
            }
            let rule = parse_rule(line).map_err(|why| {
                Error::Protocol(format!("sampling fixture line {}: {why}", n + 1))
            })?;
            rules.push(rule);
        }
        Ok(ScriptedSampling {
            rules,
            echo_fallback: false,
            model: "executa-fixture".to_owned(),
            ..ScriptedSampling::echo()
        })
    }

    /// Reads a JSONL fixture file; see [`ScriptedSampling::from_jsonl`].
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let text = std::fs::read_to_string(path.as_ref()).map_err(|e| {
            Error::Io(std::io::Error::new(
                e.kind(),
                format!("{}: {e}", path.as_ref().display()),
            ))
        })?;
        Self::from_jsonl(&text)
    }

    /// Echo when no fixture rule matches.
    pub fn with_echo_fallback(mut self) -> Self {
        self.echo_fallback = true;
        self
    }

    /// Reports this model name in results.
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// The answer to one call: a fixture's (completed) or the echo, charged to the
    /// invoke's budgets.
    fn respond<'a>(&'a self, call: &'a ReverseCall) -> std::result::Result<Answer<'a>, RpcError> {
        let p = &call.params;
        let last_user = validate(p)?;
        let input_tokens = input_tokens(p);
        let rule = self.rules.iter().find(|r| {
            r.method.as_deref().is_none_or(|m| m == call.method)
                && matches(&r.matcher, p, last_user)
        });
        let (answer, used) = match rule {
            Some(r) => {
                let mut result = r.answer.clone()?;
                self.complete(&mut result, p, input_tokens);
                let used = result
                    .get("usage")
                    .and_then(|u| u.get("totalTokens"))
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                (Answer::Fixture(result), used)
            }
            None if self.echo_fallback => {
                let echo = self.echo_answer(p, last_user, input_tokens);
                let used = echo.usage.total_tokens;
                (Answer::Echo(echo), used)
            }
            None => {
                return Err(RpcError::with_code(
                    PROVIDER_ERROR,
                    "NO_FIXTURE_MATCH",
                    format!("no sampling fixture matches the last user message {last_user:?}"),
                ));
            }
        };
        self.charge(call.invoke_id.as_deref(), used)?;
        Ok(answer)
    }

    /// The answer to `call` with its text made elsewhere (by [`CommandSampling`]'s
    /// command, given the request's params): checked, completed and charged to the
    /// invoke's budgets as a fixture's `{"text": ...}` is.
    ///
    /// [`CommandSampling`]: super::CommandSampling
    pub(crate) fn answer_with(
        &self,
        call: &ReverseCall,
        text: impl FnOnce(&Value) -> std::result::Result<String, RpcError>,
    ) -> std::result::Result<Value, RpcError> {
        let p = &call.params;
        validate(p)?;
        let input_tokens = input_tokens(p);
        let mut result = json!({ "text": text(p)? });
        self.complete(&mut result, p, input_tokens);
        let used = result["usage"]["totalTokens"].as_u64().unwrap_or(0);
        self.charge(call.invoke_id.as_deref(), used)?;
        Ok(result)
    }

    /// The echo answer: what [`ScriptedSampling::complete`] makes of `{"text": ...}`,
    /// built at once, borrowing the request (this is the answer a host-driven bench
    /// measures).
    fn echo_answer<'a>(&'a self, p: &'a Value, last_user: &'a str, input_tokens: u64) -> Echo<'a> {
        let text = echo_text(p, last_user);
        let output_tokens = estimate_tokens(text.chars().count());
        Echo {
            meta: meta(p),
            content: TextContent { text, kind: "text" },
            model: &self.model,
            role: "assistant",
            stop_reason: "endTurn",
            usage: Usage::new(input_tokens, output_tokens),
        }
    }

    /// Fills in the documented fields a fixture left out.
    fn complete(&self, result: &mut Value, p: &Value, input_tokens: u64) {
        let Value::Object(m) = result else { return };
        if !m.contains_key("content") {
            let text = m
                .remove("text")
                .and_then(|t| t.as_str().map(str::to_owned))
                .unwrap_or_default();
            m.insert("content".into(), json!({ "type": "text", "text": text }));
        }
        let text = m
            .get("content")
            .and_then(|c| c.get("text"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let output_tokens = estimate_tokens(text.chars().count());
        defaults(m, "role", || json!("assistant"));
        defaults(m, "model", || json!(self.model));
        defaults(m, "stopReason", || json!("endTurn"));
        defaults(m, "usage", || {
            to_value(Usage::new(input_tokens, output_tokens))
        });
        defaults(m, "_meta", || to_value(meta(p)));
    }

    /// Counts one call against the invoke's budgets.
    fn charge(&self, invoke_id: Option<&str>, tokens: u64) -> std::result::Result<(), RpcError> {
        let mut budgets = lock(&self.budgets);
        if budgets.len() >= BUDGET_MEMORY {
            budgets.clear();
        }
        let key = invoke_id.unwrap_or_default();
        // Looked up before it is inserted: a known invoke costs no key allocation.
        if !budgets.contains_key(key) {
            budgets.insert(key.to_owned(), Budget::default());
        }
        let Some(b) = budgets.get_mut(key) else {
            return Ok(());
        };
        if b.calls >= MAX_CALLS_PER_INVOKE {
            return Err(RpcError::with_code(
                codes::SAMPLING_MAX_CALLS_EXCEEDED,
                "MAX_CALLS_EXCEEDED",
                format!("at most {MAX_CALLS_PER_INVOKE} sampling calls per invoke"),
            ));
        }
        if b.tokens + tokens > MAX_TOKENS_PER_INVOKE {
            return Err(RpcError::with_code(
                codes::SAMPLING_MAX_TOKENS_EXCEEDED,
                "MAX_TOKENS_EXCEEDED",
                format!("at most {MAX_TOKENS_PER_INVOKE} tokens per invoke (cumulative)"),
            ));
        }
        b.calls += 1;
        b.tokens += tokens;
        Ok(())
    }
}

impl Service for ScriptedSampling {
    /// In memory: answered at once, on the host's reader thread.
    fn is_quick(&self) -> bool {
        true
    }

    fn handles(&self, method: &str) -> bool {
        method == "sampling/createMessage"
    }

    fn call(&self, call: &ReverseCall) -> std::result::Result<Value, RpcError> {
        Ok(match self.respond(call)? {
            Answer::Fixture(result) => result,
            Answer::Echo(echo) => to_value(echo),
        })
    }

    /// The echo answer is written without a `Value` tree (with serde_json's default
    /// features, the same bytes `call`'s `Value` serializes to).
    fn call_into<'a>(
        &self,
        call: &ReverseCall,
        out: ResultWriter<'a>,
    ) -> std::result::Result<Written<'a>, RpcError> {
        Ok(match self.respond(call)? {
            Answer::Fixture(result) => out.write(&result),
            Answer::Echo(echo) => out.write(&echo),
        })
    }
}

fn parse_rule(line: &str) -> std::result::Result<Rule, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let method = match (
        v.get("ns").and_then(Value::as_str),
        v.get("method").and_then(Value::as_str),
    ) {
        (Some(ns), Some(m)) => Some(format!("{ns}/{m}")),
        (None, Some(m)) => Some(m.to_owned()),
        (Some(ns), None) => Some(format!("{ns}/createMessage")),
        (None, None) => None,
    };
    let matcher = v.get("match").cloned().unwrap_or_else(|| json!({}));
    if !matcher.is_object() {
        return Err("`match` must be an object".into());
    }
    let answer = match (v.get("result"), v.get("error")) {
        (Some(r), None) if r.is_object() => Ok(r.clone()),
        (None, Some(e)) => Err(serde_json::from_value::<RpcError>(e.clone())
            .map_err(|e| format!("`error` must be {{code, message}}: {e}"))?),
        _ => return Err("needs exactly one of `result` (an object) and `error`".into()),
    };
    Ok(Rule {
        method,
        matcher,
        answer,
    })
}

/// Inserts `key` unless the fixture gave it (the key and value are made only then).
fn defaults(m: &mut Map<String, Value>, key: &str, value: impl FnOnce() -> Value) {
    if !m.contains_key(key) {
        m.insert(key.to_owned(), value());
    }
}

/// What [`ScriptedSampling::respond`] answers.
enum Answer<'a> {
    /// A fixture's result, completed.
    Fixture(Value),
    Echo(Echo<'a>),
}

/// The echo answer in the documented result shape. Members in the order a `Value` map
/// keeps them (sorted, with serde_json's default features; with `preserve_order` the
/// `Value` keeps this order), so writing it and serializing its `Value` give the same
/// bytes.
#[derive(Serialize)]
struct Echo<'a> {
    #[serde(rename = "_meta")]
    meta: Meta<'a>,
    content: TextContent<'a>,
    model: &'a str,
    role: &'static str,
    #[serde(rename = "stopReason")]
    stop_reason: &'static str,
    usage: Usage,
}

#[derive(Serialize)]
struct TextContent<'a> {
    text: Cow<'a, str>,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Usage {
    input_tokens: u64,
    output_tokens: u64,
    total_tokens: u64,
}

impl Usage {
    fn new(input_tokens: u64, output_tokens: u64) -> Usage {
        Usage {
            input_tokens,
            output_tokens,
            total_tokens: input_tokens + output_tokens,
        }
    }
}

/// `_meta`: the provider, and what became of a requested `responseFormat`.
#[derive(Serialize)]
struct Meta<'a> {
    #[serde(rename = "latencyMs")]
    latency_ms: u64,
    provider: &'static str,
    #[serde(rename = "responseFormat", skip_serializing_if = "Option::is_none")]
    response_format: Option<FormatOutcome<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FormatOutcome<'a> {
    applied: &'static str,
    downgraded: bool,
    requested: &'a str,
    structured_valid: bool,
}

fn meta(p: &Value) -> Meta<'_> {
    Meta {
        latency_ms: 0,
        provider: "executa-memory",
        response_format: response_format(p)
            .and_then(Value::as_str)
            .map(|kind| FormatOutcome {
                applied: "json_object",
                downgraded: kind != "json_object",
                requested: kind,
                structured_valid: kind == "json_object",
            }),
    }
}

/// A part of an answer as a `Value` (these plain structs always serialize).
fn to_value(part: impl Serialize) -> Value {
    serde_json::to_value(part).unwrap_or(Value::Null)
}

fn bad(why: impl Into<String>) -> RpcError {
    RpcError::with_code(INVALID_REQUEST, "INVALID_REQUEST", why)
}

/// Checks the documented request constraints; returns the last user message's text.
fn validate(p: &Value) -> std::result::Result<&str, RpcError> {
    let messages = p
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("`messages` is required"))?;
    if messages.is_empty() || messages.len() > 64 {
        return Err(bad("`messages` must hold 1 to 64 entries"));
    }
    let mut last_user = None;
    for m in messages {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        if !matches!(role, "user" | "assistant" | "system") {
            return Err(bad(format!("unknown message role {role:?}")));
        }
        let text = match m.get("content") {
            Some(c) if c.get("type").and_then(Value::as_str) == Some("text") => {
                c.get("text").and_then(Value::as_str)
            }
            _ => None,
        };
        let text = text.ok_or_else(|| bad("only {type:\"text\", text} content is supported"))?;
        if role == "user" {
            last_user = Some(text);
        }
    }
    match p.get("maxTokens").and_then(Value::as_u64) {
        Some(0) | None => return Err(bad("`maxTokens` (a positive integer) is required")),
        Some(n) if n > MAX_TOKENS_PER_CALL => {
            return Err(RpcError::with_code(
                codes::SAMPLING_MAX_TOKENS_EXCEEDED,
                "MAX_TOKENS_EXCEEDED",
                format!("maxTokens {n} exceeds the {MAX_TOKENS_PER_CALL}-token per-call cap"),
            ));
        }
        Some(_) => {}
    }
    if let Some(inc) = p.get("includeContext").and_then(Value::as_str)
        && inc != "none"
    {
        return Err(bad("includeContext must be \"none\""));
    }
    Ok(last_user.unwrap_or_default())
}

fn echo_text<'a>(p: &Value, last_user: &'a str) -> Cow<'a, str> {
    if response_format(p).is_some() {
        Cow::Owned(json!({ "echo": last_user }).to_string())
    } else {
        Cow::Borrowed(last_user)
    }
}

/// The estimated tokens of a request's text: its system prompt and every message, counted
/// as one text (without joining them into one).
fn input_tokens(p: &Value) -> u64 {
    let text = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .unwrap_or_default()
            .chars()
            .count()
    };
    let messages = p.get("messages").and_then(Value::as_array);
    let chars = text(p.get("systemPrompt"))
        + messages
            .into_iter()
            .flatten()
            .map(|m| text(m.get("content").and_then(|c| c.get("text"))))
            .sum::<usize>();
    estimate_tokens(chars)
}

/// `responseFormat.type` of a request. (Not `Value::pointer`, which allocates for every
/// step of its path: this runs on every sampling call.)
fn response_format(p: &Value) -> Option<&Value> {
    p.get("responseFormat").and_then(|f| f.get("type"))
}

/// About four characters per token; at least one.
/// About four characters a token, at least one.
fn estimate_tokens(chars: usize) -> u64 {
    (chars as u64).div_ceil(4).max(1)
}

/// Subset match of `pattern` against `value`, with the `contains` shorthand at the top.
fn matches(pattern: &Value, value: &Value, last_user: &str) -> bool {
    let Value::Object(pat) = pattern else {
        return pattern == value;
    };
    pat.iter().all(|(k, want)| match (k.as_str(), want) {
        ("contains", Value::String(s)) => last_user.contains(s.as_str()),
        _ => value.get(k).is_some_and(|got| subset(want, got)),
    })
}

fn subset(want: &Value, got: &Value) -> bool {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => w
            .iter()
            .all(|(k, v)| g.get(k).is_some_and(|gv| subset(v, gv))),
        _ => want == got,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::Id;

    fn ask(s: &ScriptedSampling, invoke: &str, text: &str) -> std::result::Result<Value, RpcError> {
        let params = json!({
            "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
            "maxTokens": 100,
        });
        s.call(&ReverseCall {
            method: "sampling/createMessage".into(),
            params,
            invoke_id: Some(invoke.into()),
            client_timeout: None,
            id: Id::string("ex-1"),
        })
    }

    #[test]
    fn echo_has_the_documented_shape_and_budget() {
        let s = ScriptedSampling::echo();
        let r = ask(&s, "inv", "hello there").unwrap();
        assert_eq!(r["role"], "assistant");
        assert_eq!(r["content"], json!({"type": "text", "text": "hello there"}));
        assert!(r["usage"]["totalTokens"].as_u64().unwrap() > 0);
        assert!(r["model"].is_string() && r["stopReason"].is_string());
        for _ in 1..8 {
            ask(&s, "inv", "x").unwrap();
        }
        assert_eq!(ask(&s, "inv", "x").unwrap_err().code, -32006);
        assert!(ask(&s, "other-invoke", "x").is_ok());
    }

    /// `call_into` writes the very bytes `call`'s `Value` serializes to, and charges the
    /// same budgets, for the echo (written without a `Value`) and for fixtures.
    #[test]
    fn written_answers_are_the_serialized_values() {
        let text = |t: &str| json!({"type": "text", "text": t});
        let requests = [
            json!({"messages": [{"role": "user", "content": text("hi")}], "maxTokens": 10}),
            json!({
                "messages": [
                    {"role": "system", "content": text("be brief")},
                    {"role": "user", "content": text("first \"quoted\" \u{e9}")},
                    {"role": "assistant", "content": text("ok")},
                    {"role": "user", "content": text("second\nline")},
                ],
                "systemPrompt": "sys",
                "maxTokens": 100,
                "includeContext": "none",
            }),
            json!({"messages": [{"role": "user", "content": text("j")}], "maxTokens": 5,
                   "responseFormat": {"type": "json_object"}}),
            json!({"messages": [{"role": "user", "content": text("k")}], "maxTokens": 5,
                   "responseFormat": {"type": "json_schema"}}),
            json!({"messages": [{"role": "user", "content": text("weather?")}], "maxTokens": 5}),
        ];
        let fixture = r#"{"match":{"contains":"weather"},"result":{"text":"sunny"}}"#;
        let backends = || {
            [
                ScriptedSampling::echo(),
                ScriptedSampling::from_jsonl(fixture)
                    .unwrap()
                    .with_echo_fallback(),
            ]
        };
        let (by_value, written) = (backends(), backends());
        let mut refused = 0;
        for (a, b) in by_value.iter().zip(&written) {
            for round in 0..9 {
                for params in &requests {
                    let call = ReverseCall {
                        method: "sampling/createMessage".into(),
                        params: params.clone(),
                        invoke_id: Some(format!("inv-{}", round % 2)),
                        client_timeout: None,
                        id: Id::number(1),
                    };
                    let mut out = Vec::new();
                    let written = b.call_into(&call, ResultWriter::new(&mut out)).map(drop);
                    match (a.call(&call), written) {
                        (Ok(v), Ok(())) => {
                            assert_eq!(String::from_utf8(out).unwrap(), v.to_string());
                        }
                        (Err(x), Err(y)) => {
                            assert_eq!((x.code, x.message), (y.code, y.message));
                            refused += 1;
                        }
                        (x, y) => panic!("{params}: {x:?} against {y:?}"),
                    }
                }
            }
        }
        // Each invoke's budget ran out on both alike (8 calls each, 2 invokes, 2 backends).
        assert_eq!(refused, 2 * (9 * requests.len() - 2 * 8));
    }

    #[test]
    fn fixture_rules_match_in_order() {
        let s = ScriptedSampling::from_jsonl(
            r#"
            # comment
            {"ns":"sampling","method":"createMessage","match":{"contains":"weather"},"result":{"text":"sunny"}}
            {"match":{"messages":[{"role":"user","content":{"type":"text","text":"exact"}}]},"result":{"content":{"type":"text","text":"E"},"model":"m1"}}
            {"match":{"contains":"fail"},"error":{"code":-32003,"message":"provider down"}}
            "#,
        )
        .unwrap();
        assert_eq!(
            ask(&s, "a", "what's the weather?").unwrap()["content"]["text"],
            "sunny"
        );
        let e = ask(&s, "b", "exact").unwrap();
        assert_eq!(
            (e["content"]["text"].as_str(), e["model"].as_str()),
            (Some("E"), Some("m1"))
        );
        assert_eq!(
            ask(&s, "c", "please fail").unwrap_err().message,
            "provider down"
        );
        assert_eq!(
            ask(&s, "d", "nothing").unwrap_err().error_code(),
            Some("NO_FIXTURE_MATCH")
        );
        assert!(ScriptedSampling::from_jsonl("{\"match\":{}}").is_err());
    }

    #[test]
    fn request_validation() {
        let s = ScriptedSampling::echo();
        let call = |params: Value| {
            s.call(&ReverseCall {
                method: "sampling/createMessage".into(),
                params,
                invoke_id: None,
                client_timeout: None,
                id: Id::number(1),
            })
        };
        assert_eq!(call(json!({"messages": []})).unwrap_err().code, -32004);
        let m = json!([{"role":"user","content":{"type":"text","text":"hi"}}]);
        assert_eq!(call(json!({"messages": m})).unwrap_err().code, -32004);
        assert_eq!(
            call(json!({"messages": m, "maxTokens": 9000}))
                .unwrap_err()
                .code,
            -32007
        );
        let img = json!([{"role":"user","content":{"type":"image","data":"..."}}]);
        assert_eq!(
            call(json!({"messages": img, "maxTokens": 10}))
                .unwrap_err()
                .code,
            -32004
        );
    }
}
