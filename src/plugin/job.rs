//! What the reader hands to the dispatch side: a request whose line travels with it (in a
//! recycled buffer, with the spans of its id and params), an invoke with its params already
//! read, or a frame already judged invalid.

use std::borrow::Cow;
use std::ops::Range;

use serde_json::Value;

use crate::error::{RpcError, codes};
use crate::id::Id;
use crate::json_scan;
use crate::secret::{Secret, zero};
use crate::wire::{QUOTE_BYTES, elide};

use super::context::LegacyFields;
use super::pool::Waiting;
use super::tool::Tool;

/// Bytes a queued job costs beyond its line: the job itself, its queue slot, bookkeeping.
/// Counted so that a flood of tiny frames is bounded in memory too.
pub(crate) const JOB_OVERHEAD: usize = 256;

/// One request line, owned. The buffer comes from the free list or the reader's spare and
/// goes back to one of them (zeroed: the line may hold credentials) when the job is done.
pub(crate) struct Line(Vec<u8>);

impl Line {
    pub fn new(buf: Vec<u8>) -> Line {
        Line(buf)
    }

    /// The whole line.
    pub fn all(&self) -> &[u8] {
        &self.0
    }

    /// The bytes of `span`. Spans come from the reader's parse of this very line.
    pub fn bytes(&self, span: &Range<usize>) -> &[u8] {
        self.0.get(span.clone()).unwrap_or_default()
    }

    /// What this line holds in memory.
    pub fn weight(&self) -> usize {
        self.0.capacity() + JOB_OVERHEAD
    }

    /// Gives the buffer back, zeroed, for reuse.
    pub fn into_buffer(mut self) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.0);
        zero(&mut buf);
        buf.clear();
        buf
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        // A line not handed back still must not leave credentials in freed memory.
        zero(&mut self.0);
    }
}

/// Where a part of a frame sits in `line`, computed from the borrowed parse (`part` points
/// into `line`). `None` when it does not (an unescaped copy), which the caller treats as
/// absent.
pub(crate) fn span_of(line: &[u8], part: &str) -> Option<Range<usize>> {
    let start = (part.as_ptr() as usize).checked_sub(line.as_ptr() as usize)?;
    let end = start.checked_add(part.len())?;
    (end <= line.len()).then_some(start..end)
}

/// A unit of work for the dispatch side.
pub(crate) enum Job {
    /// A host request (`id` = `None`: a notification). Its params, where a method reads
    /// them (`initialize`), were read by the reader.
    Request {
        line: Line,
        id: Option<Range<usize>>,
        method: Method,
    },
    /// An invoke, its params read by the reader.
    Invoke(InvokeJob),
    /// A frame the reader already judged invalid: answer with this error.
    Reject { id: Id, error: RpcError },
}

impl Job {
    /// The invoke in this job, or the job back when it is something else.
    pub fn into_invoke(self) -> Result<InvokeJob, Job> {
        match self {
            Job::Invoke(invoke) => Ok(invoke),
            other => Err(other),
        }
    }

    /// Bytes this job holds while it waits.
    pub fn weight(&self) -> usize {
        match self {
            Job::Request { line, .. } => line.weight(),
            Job::Invoke(invoke) => Waiting::weight(invoke),
            Job::Reject { error, .. } => error.message.len() + JOB_OVERHEAD,
        }
    }
}

/// Host methods other than `invoke` (which travels as [`Job::Invoke`]), recognised once by
/// the reader so workers match on an enum.
#[derive(Debug)]
pub(crate) enum Method {
    /// An Executa `initialize`, recorded by the reader as it read it (so that every frame
    /// read after it sees the session it negotiated): only its reply, this, is left to send.
    Initialize(Box<Value>),
    Describe,
    Health,
    Shutdown,
    /// An `initialize` the reader found to be MCP's, and recorded, with the revision
    /// agreed: only its reply is left to make.
    #[cfg(feature = "mcp")]
    McpInitialize(&'static str),
    /// MCP's `tools/list`; `true`: of a 2026-07-28 request, whose result says
    /// `resultType`.
    #[cfg(feature = "mcp")]
    ToolsList(bool),
    /// MCP's `ping`; `true` as for `ToolsList`.
    #[cfg(feature = "mcp")]
    Ping(bool),
    /// MCP's `server/discover` (2026-07-28).
    #[cfg(feature = "mcp")]
    Discover,
    Other(String),
}

impl Method {
    /// Whether this is an `initialize` (Executa's or MCP's), which the reader answers as
    /// it reads it.
    pub fn is_handshake(&self) -> bool {
        match self {
            Method::Initialize(_) => true,
            #[cfg(feature = "mcp")]
            Method::McpInitialize(_) => true,
            _ => false,
        }
    }

    /// The method named `name`; never `initialize`, which the reader handles itself.
    pub fn parse(name: &str) -> Method {
        match name {
            "describe" => Method::Describe,
            "health" => Method::Health,
            "shutdown" => Method::Shutdown,
            #[cfg(feature = "mcp")]
            "tools/list" => Method::ToolsList(false),
            #[cfg(feature = "mcp")]
            "ping" => Method::Ping(false),
            #[cfg(feature = "mcp")]
            "server/discover" => Method::Discover,
            // Quoted short: only its error reply uses it, and a name may be most of a frame.
            other => Method::Other(elide(other, QUOTE_BYTES).into_owned()),
        }
    }
}

/// An invoke admitted to run or to wait for a slot. Its params were read by the reader,
/// once, borrowed from its line: what runs it finds the tool, the spans of the arguments and
/// the context, or the error to answer.
pub(crate) struct InvokeJob {
    pub line: Line,
    pub id: Range<usize>,
    pub parts: Result<InvokeParts, Box<RpcError>>,
}

impl InvokeJob {
    /// The queued form of this invoke.
    pub fn into_job(self) -> Job {
        Job::Invoke(self)
    }

    /// The request id, as the host sent it.
    pub fn id(&self) -> &[u8] {
        self.line.bytes(&self.id)
    }
}

impl Waiting for InvokeJob {
    fn weight(&self) -> usize {
        // An error to answer may quote the frame (an unknown tool's name): it counts too.
        let error = self.parts.as_ref().err().map_or(0, |e| e.message.len());
        self.line.weight() + error
    }
}

/// What an invoke's params say, as spans of its line (so they travel with it, and the text
/// is read once, by the reader).
pub(crate) struct InvokeParts {
    /// The tool's index in the service.
    pub tool: usize,
    /// `arguments`, absent when missing or `null`.
    pub arguments: Option<Range<usize>>,
    /// `context`, read when the invoke runs (`context.rs`).
    pub context: Option<Range<usize>>,
    /// Fields older hosts put beside `context` (rare, so boxed: a queued job stays small).
    pub legacy: Option<Box<LegacyFields>>,
    /// Set for an MCP `tools/call`: its reply, progress and reverse calls take MCP's shapes.
    /// (Boxed: a queued job stays small.)
    #[cfg(feature = "mcp")]
    pub mcp: Option<Box<super::mcp::Call>>,
}

/// An MCP `tools/call` as read.
#[cfg(feature = "mcp")]
pub(crate) struct McpCall<'a> {
    /// The era its `_meta` names.
    pub era: super::mcp::Era,
    pub parts: Result<InvokeParts, Box<RpcError>>,
    /// Set for a 2026-07-28 retry (it echoes a `requestState`).
    pub retry: Option<Retry<'a>>,
    /// Whether the params read as `tools/call` params (else `parts` says why not).
    pub readable: bool,
}

/// What a 2026-07-28 retry brings back, borrowed from its line.
#[cfg(feature = "mcp")]
pub(crate) struct Retry<'a> {
    /// `requestState`'s text; `None` when it is not a string.
    pub state: Option<Cow<'a, str>>,
    /// `inputResponses`, raw.
    pub responses: Option<&'a str>,
    /// `arguments`, raw (`{}` when absent).
    pub arguments: &'a str,
}

/// `invoke` params as the host sends them.
#[derive(Default)]
struct InvokeParams<'a> {
    /// `tool`, or `name` (an older spelling).
    tool: Cow<'a, str>,
    arguments: Option<&'a str>,
    context: Option<&'a str>,
    invoke_id: Option<Value>,
    sampling_token: Option<Token>,
    storage_token: Option<Token>,
    /// MCP's `_meta` (`progressToken`, the 2026-07-28 envelope).
    #[cfg(feature = "mcp")]
    meta: Option<&'a str>,
    /// MCP's `requestState` (2026-07-28), raw.
    #[cfg(feature = "mcp")]
    request_state: Option<&'a str>,
    /// MCP's `inputResponses` (2026-07-28), raw.
    #[cfg(feature = "mcp")]
    input_responses: Option<&'a str>,
}

impl<'de> InvokeParams<'de> {
    /// Reads `params` in place (the plugin's structs are moved by a slow byte copy at
    /// opt-level "z", and a parse result would be moved several times), by hand
    /// (`json_scan.rs`): serde's generic visitor cost about 2,900 instructions per invoke
    /// (callgrind, `everything`). Takes an object only (serde's derived reader also took
    /// an array positionally); refuses a duplicate field and a missing `tool`; skips
    /// unknown members. `Err` says why, as serde would have.
    fn read(&mut self, params: &'de str) -> Result<(), String> {
        self.read_knowing(params, None).map(drop)
    }

    /// As [`InvokeParams::read`], where `meta` is an MCP `_meta` value read before: a
    /// `_meta` that is byte for byte the same is not scanned again.
    /// Returns whether `_meta` was that value (so it need not be compared again).
    fn read_knowing(&mut self, params: &'de str, meta: Option<&str>) -> Result<bool, String> {
        let mut why = None;
        let mut seen = 0u16;
        let met = std::cell::Cell::new(false);
        let known = |key: &str, rest: &str| match meta {
            Some(meta) if key == "_meta" && rest.starts_with(meta) => {
                met.set(true);
                Some(meta.len())
            }
            _ => None,
        };
        let read = json_scan::for_each_member_knowing(params, known, |key, value| {
            // Byte patterns: a decision on the length, then the bytes, where string
            // patterns compare one candidate after another.
            let (bit, name) = match key.as_bytes() {
                b"tool" | b"name" => (1, "tool"),
                b"arguments" => (2, "arguments"),
                b"context" => (4, "context"),
                b"invoke_id" => (8, "invoke_id"),
                b"sampling_token" => (16, "sampling_token"),
                b"storage_token" => (32, "storage_token"),
                #[cfg(feature = "mcp")]
                b"_meta" => (64, "_meta"),
                #[cfg(feature = "mcp")]
                b"requestState" => (128, "requestState"),
                #[cfg(feature = "mcp")]
                b"inputResponses" => (256, "inputResponses"),
                _ => return Some(()),
            };
            if seen & bit != 0 {
                why = Some(format!("duplicate field `{name}`"));
                return None;
            }
            seen |= bit;
            // `null` reads as absent, as serde reads an `Option`.
            // (A valid value that starts with `n` is `null`.)
            let raw = (value.as_bytes().first() != Some(&b'n')).then_some(value);
            match bit {
                // A token may be `null` (absent); the tool may not.
                16 | 32 if raw.is_none() => {}
                1 | 16 | 32 => {
                    let Some(text) = json_scan::value_text(value) else {
                        why = Some(format!("`{name}` must be a string"));
                        return None;
                    };
                    match bit {
                        1 => self.tool = text,
                        16 => self.sampling_token = Some(Token(Secret::new(text.into_owned()))),
                        _ => self.storage_token = Some(Token(Secret::new(text.into_owned()))),
                    }
                }
                2 => self.arguments = raw,
                4 => self.context = raw,
                8 => match raw.map(serde_json::from_str).transpose() {
                    Ok(id) => self.invoke_id = id,
                    Err(e) => {
                        why = Some(format!("`invoke_id`: {e}"));
                        return None;
                    }
                },
                #[cfg(feature = "mcp")]
                64 => self.meta = raw,
                #[cfg(feature = "mcp")]
                128 => self.request_state = raw,
                #[cfg(feature = "mcp")]
                _ => self.input_responses = raw,
                #[cfg(not(feature = "mcp"))]
                _ => {}
            }
            Some(())
        });
        match (read, why) {
            (_, Some(why)) => Err(why),
            (None, None) => Err("expected a JSON object".to_owned()),
            _ if seen & 1 == 0 => Err("missing field `tool`".to_owned()),
            _ => Ok(met.get()),
        }
    }
}

/// A legacy token, read straight into a [`Secret`]: wiped when dropped, also when the
/// rest of the params fail to parse or name an unknown tool.
struct Token(Secret);

impl InvokeParts {
    /// Reads `params`, a part of `line`, for one of `tools`: its parts, or the error to
    /// answer (an unknown tool). `Err` when the text is not invoke params; then the caller
    /// decides: the prefix reader leaves the frame to the full parse, which answers -32602
    /// or says why it is not JSON.
    pub fn read(
        tools: &[Tool],
        line: &[u8],
        params: &str,
    ) -> Result<Result<InvokeParts, Box<RpcError>>, String> {
        let mut p = InvokeParams::default();
        p.read(params)?;
        Ok(InvokeParts::from_params(tools, line, &mut p))
    }

    /// Reads the params of an MCP `tools/call` (`{name, arguments, _meta}`, and a
    /// 2026-07-28 retry's `requestState` and `inputResponses`): as an invoke's, flagged
    /// MCP, with MCP's codes (an unknown tool is -32602) and wording.
    #[cfg(feature = "mcp")]
    pub fn read_mcp<'a>(
        tools: &[Tool],
        line: &[u8],
        params: Option<&'a str>,
        memo: &mut super::mcp::MetaMemo,
        spare: &mut Option<Box<super::mcp::Call>>,
    ) -> McpCall<'a> {
        let mut read = InvokeParams::default();
        let met = read.read_knowing(params.unwrap_or("null"), memo.known());
        let met = match met {
            Ok(met) => met,
            Err(e) => {
                let msg = format!("invalid tools/call params (expected {{name, arguments}}): {e}");
                return McpCall {
                    era: super::mcp::era_of(params),
                    parts: Err(Box::new(RpcError::new(codes::INVALID_PARAMS, msg))),
                    retry: None,
                    readable: false,
                };
            }
        };
        let meta = memo.read(read.meta, met);
        let retry = read.request_state.map(|state| Retry {
            state: json_scan::value_text(state),
            responses: read.input_responses,
            arguments: read.arguments.unwrap_or("{}"),
        });
        let parts = match InvokeParts::from_params(tools, line, &mut read) {
            Ok(mut parts) => {
                // A box the reader kept is empty (`Scratch::take_call`): filled in place.
                let mut call = spare.take().unwrap_or_default();
                call.read(&meta);
                parts.mcp = Some(call);
                Ok(parts)
            }
            Err(mut error) => {
                error.code = codes::INVALID_PARAMS;
                Err(error)
            }
        };
        McpCall {
            era: meta.era(),
            parts,
            retry,
            readable: true,
        }
    }

    fn from_params(
        tools: &[Tool],
        line: &[u8],
        p: &mut InvokeParams<'_>,
    ) -> Result<InvokeParts, Box<RpcError>> {
        // Plugins have a handful of tools, so a linear scan of short strings is as fast as
        // hashing and keeps the binary small.
        let Some(tool) = tools.iter().position(|t| t.spec.name == p.tool) else {
            let msg = format!("unknown tool: {}", &*elide(&p.tool, QUOTE_BYTES));
            let error = RpcError::with_code(codes::METHOD_NOT_FOUND, "TOOL_NOT_FOUND", msg);
            return Err(Box::new(error));
        };
        let span = |raw: Option<&str>| raw.and_then(|r| span_of(line, r));
        let mut legacy = None;
        if p.invoke_id.is_some() || p.sampling_token.is_some() || p.storage_token.is_some() {
            let mut fields = LegacyFields {
                invoke_id: p.invoke_id.take(),
                tokens: Vec::new(),
            };
            for (name, token) in [
                ("sampling_token", p.sampling_token.take()),
                ("storage_token", p.storage_token.take()),
            ] {
                if let Some(Token(t)) = token {
                    fields.tokens.push((name, t));
                }
            }
            legacy = Some(Box::new(fields));
        }
        Ok(InvokeParts {
            tool,
            arguments: span(p.arguments),
            context: span(p.context),
            legacy,
            #[cfg(feature = "mcp")]
            mcp: None,
        })
    }

    /// Reads `params` (`None`: absent) as the full parse found them: its parts, or the
    /// error to answer.
    pub fn read_or_refuse(
        tools: &[Tool],
        line: &[u8],
        params: Option<&str>,
    ) -> Result<InvokeParts, Box<RpcError>> {
        InvokeParts::read(tools, line, params.unwrap_or("null")).unwrap_or_else(|e| {
            let msg = format!("invalid invoke params (expected {{tool, arguments, context}}): {e}");
            Err(Box::new(RpcError::new(codes::INVALID_PARAMS, msg)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand reader takes what serde's derived reader took, and refuses what it refused
    /// (an array, a duplicate, a missing or non-string `tool`, a token that is not a
    /// string), with serde's wording where a test or a host may look for it.
    #[test]
    fn invoke_params_are_read_as_serde_read_them() {
        type Read<'a> = (
            String,
            Option<&'a str>,
            Option<&'a str>,
            Option<Value>,
            [Option<String>; 2],
        );
        fn read(text: &str) -> Result<Read<'_>, String> {
            let mut p = InvokeParams::default();
            p.read(text).map(|()| {
                let tokens = [&p.sampling_token, &p.storage_token]
                    .map(|t| t.as_ref().map(|Token(s)| s.expose().to_owned()));
                (
                    p.tool.into_owned(),
                    p.arguments,
                    p.context,
                    p.invoke_id,
                    tokens,
                )
            })
        }
        let (tool, args, ctx, id, tokens) =
            read(r#" { "tool" : "echo" , "arguments" : {"a":[1,{"b":null}]}, "x":{"y":[]}, "context":{"k":"v"} } "#)
                .expect("params");
        assert_eq!(tool, "echo");
        assert_eq!(args, Some(r#"{"a":[1,{"b":null}]}"#));
        assert_eq!(ctx, Some(r#"{"k":"v"}"#));
        assert_eq!((id, tokens), (None, [None, None]));
        let (tool, args, ctx, id, tokens) = read(
            r#"{"n\u0061me":"ec\u0068o","arguments":null,"context":null,"invoke_id":7,"sampling_token":"s\"1","storage_token":"s2"}"#,
        )
        .expect("params");
        assert_eq!((tool.as_str(), args, ctx), ("echo", None, None));
        assert_eq!(id, Some(serde_json::json!(7)));
        assert_eq!(tokens, [Some("s\"1".to_owned()), Some("s2".to_owned())]);
        let nulls = read(r#"{"tool":"t","sampling_token":null,"storage_token":null}"#);
        assert_eq!(nulls.expect("null tokens").4, [None, None]);
        let deep = format!(
            r#"{{"tool":"t","arguments":{}0{}}}"#,
            "[".repeat(300),
            "]".repeat(300)
        );
        assert_eq!(read(&deep).expect("deep").1.map(str::len), Some(601));
        for (text, why) in [
            (r#"["echo",{}]"#, "expected a JSON object"),
            (r#"{"tool":"a","name":"b"}"#, "duplicate field `tool`"),
            (
                r#"{"tool":"a","arguments":{},"arguments":{}}"#,
                "duplicate field `arguments`",
            ),
            (r#"{"arguments":{}}"#, "missing field `tool`"),
            (r#"{"tool":7}"#, "`tool` must be a string"),
            (r#"{"tool":null}"#, "`tool` must be a string"),
            (
                r#"{"tool":"a","sampling_token":7}"#,
                "`sampling_token` must be a string",
            ),
            (r#"{"tool":"a\uD800"}"#, "`tool` must be a string"),
            (
                r#"{"tool":"a","invoke_id":1e400}"#,
                "`invoke_id`: number out of range at line 1 column 5",
            ),
            ("null", "expected a JSON object"),
        ] {
            assert_eq!(read(text).err().as_deref(), Some(why), "{text}");
        }
    }

    /// The error an unknown tool is answered with quotes its name (at most QUOTE_BYTES of
    /// it, and its length): a waiting invoke counts it against the byte budgets beside its
    /// line.
    #[test]
    fn an_invoke_weighs_its_line_and_the_error_it_carries() {
        let name = "n".repeat(10_000);
        let line = format!(r#"{{"tool":"{name}"}}"#);
        let parts = InvokeParts::read(&[], line.as_bytes(), &line).expect("invoke params");
        let error = parts.as_ref().err().expect("an unknown tool");
        let quoted = format!("{}… (10000 bytes)", &name[..QUOTE_BYTES]);
        assert_eq!(error.message, format!("unknown tool: {quoted}"));
        let error_len = error.message.len();
        let job = InvokeJob {
            line: Line::new(line.into_bytes()),
            id: 0..0,
            parts,
        };
        let line_weight = job.line.weight();
        assert_eq!(Waiting::weight(&job), line_weight + error_len);
        assert_eq!(Job::Invoke(job).weight(), line_weight + error_len);
    }
}
