//! What differs between the two protocols on `executa bench`'s hot path: the invoke frame,
//! the verdict on a reply, and who answers the plugin's own requests. Everything else (the
//! pipes, ids, timing, the watchdog) is the same code for both (`bench_driver.rs`).

use std::sync::Arc;
use std::time::Duration;

use executa::host::{Handlers, McpInputRequest, ReverseCall, Service};
use executa::{Id, RpcError, wire};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::bench_mcp;
use crate::bench_scan::{self, Verdict};

/// The protocol a session speaks, once its handshake has decided it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    /// `invoke`, with the in-memory development backends answering reverse calls.
    Executa,
    /// MCP's `tools/call`, with the bench answering `sampling/createMessage` and `ping`.
    Mcp,
    /// MCP's stateless era at this revision: `tools/call` carries the `_meta` envelope,
    /// and a result may ask for input, which the bench answers before it sends the call
    /// again.
    McpStateless(&'static str),
}

impl Wire {
    pub fn name(self) -> &'static str {
        match self {
            Wire::Executa => "executa",
            Wire::Mcp | Wire::McpStateless(_) => "mcp",
        }
    }

    /// The stateless revision, in the stateless era.
    pub fn stateless(self) -> Option<&'static str> {
        match self {
            Wire::McpStateless(v) => Some(v),
            _ => None,
        }
    }

    /// The invoke frame after its id, in two parts when the id appears twice: Executa's
    /// `invoke` names it again as the `invoke_id` of its context (then the second part
    /// follows the second copy), MCP's `tools/call` does not.
    pub fn invoke_parts(self, tool: &str, arguments: &Value) -> Result<InvokeParts, String> {
        match self {
            Wire::Executa => {
                let tool = serde_json::to_string(tool).map_err(|e| e.to_string())?;
                let args = serde_json::to_string(arguments).map_err(|e| e.to_string())?;
                Ok(InvokeParts {
                    tail: format!(
                        ",\"method\":\"invoke\",\"params\":{{\"tool\":{tool},\"arguments\":{args},\"context\":{{\"invoke_id\":\"bench-"
                    )
                    .into_bytes(),
                    suffix: Some(b"\"}}}\n".to_vec()),
                })
            }
            Wire::Mcp => Ok(InvokeParts {
                tail: bench_mcp::call_tail(tool, arguments, None)?,
                suffix: None,
            }),
            Wire::McpStateless(v) => Ok(InvokeParts {
                tail: bench_mcp::call_tail(tool, arguments, Some(&bench_mcp::envelope(v)))?,
                suffix: None,
            }),
        }
    }

    /// The id of a successful reply found by the fast scan, or `None` (full parser).
    pub fn success_id(self, line: &[u8]) -> Option<u64> {
        let verdict = match self {
            Wire::Executa => Verdict::Success,
            Wire::Mcp => Verdict::NotIsError,
            Wire::McpStateless(_) => Verdict::Complete,
        };
        bench_scan::success_id(line, verdict)
    }

    /// Why a reply's result is a failure, or `None` for a success.
    pub fn failure(self, result: &RawValue) -> Option<String> {
        match self {
            Wire::Executa => match serde_json::from_str::<Envelope>(result.get()) {
                Ok(e) if e.success => None,
                Ok(e) => Some(format!(
                    "success:false: {}",
                    e.error.map_or("", RawValue::get)
                )),
                Err(e) => Some(format!("not an invoke result ({e}): {}", result.get())),
            },
            Wire::Mcp => bench_mcp::failure(result, false),
            Wire::McpStateless(_) => bench_mcp::failure(result, true),
        }
    }
}

/// The frame of an invoke after its id (see [`Wire::invoke_parts`]).
pub struct InvokeParts {
    pub tail: Vec<u8>,
    pub suffix: Option<Vec<u8>>,
}

#[derive(Deserialize)]
struct Envelope<'a> {
    success: bool,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
}

/// Answers the plugin's requests to the bench.
pub struct Responder {
    wire: Wire,
    backends: Backends,
}

/// Who answers reverse calls: Executa's go to `handlers`; an MCP server's sampling to
/// `mcp_sampling` when given, else to the bench's echo.
#[derive(Clone)]
pub struct Backends {
    pub handlers: Handlers,
    pub mcp_sampling: Option<Arc<dyn Service>>,
}

impl Responder {
    /// Executa's reverse calls go to the handlers (the development backends, unless the
    /// command line chose others); MCP's are answered by [`bench_mcp::answer`].
    pub fn new(wire: Wire, backends: Backends) -> Responder {
        Responder { wire, backends }
    }

    pub fn set_wire(&mut self, wire: Wire) {
        self.wire = wire;
    }

    /// The answer to one input request a stateless server's result carries (sampling by
    /// `--sampling-cmd` when given, else echoed, as the handshake era's request is).
    pub fn input_answer(&self, request: &McpInputRequest) -> Result<Value, RpcError> {
        bench_mcp::input_answer(request, self.backends.mcp_sampling.as_deref())
    }

    /// The answer frame to one request from the plugin. Executa's go through
    /// [`Handlers::answer_into`], the path a `Host`'s reader answers a quick service on:
    /// the result is serialized straight into the frame.
    pub fn answer(&self, id: &RawValue, method: &str, params: Option<&RawValue>) -> Vec<u8> {
        if self.wire != Wire::Executa {
            return bench_mcp::answer(id, method, params, self.backends.mcp_sampling.as_deref());
        }
        let mut params: Value = params
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_else(|| json!({}));
        let (context, timeout) = match params.as_object_mut() {
            Some(map) => (map.remove("context"), map.remove("_clientTimeoutS")),
            None => (None, None),
        };
        let call = ReverseCall {
            method: method.to_owned(),
            params,
            invoke_id: context
                .as_ref()
                .and_then(|c| c.get("invoke_id"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            client_timeout: timeout
                .as_ref()
                .and_then(Value::as_f64)
                .and_then(|s| Duration::try_from_secs_f64(s).ok()),
            id: Id::from_raw(id),
        };
        let mut frame = Vec::with_capacity(256);
        self.backends.handlers.answer_into(&call, &mut frame);
        frame
    }
}

/// Writes a request frame `{"jsonrpc":"2.0","id":N,"method":..,"params":..}`.
pub fn request_frame(id: u64, method: &str, params: &Value) -> Vec<u8> {
    let mut frame = Vec::with_capacity(256);
    wire::write_request(&mut frame, Some(Id::number(id).as_raw()), method, params);
    frame
}
