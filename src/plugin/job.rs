//! What the reader hands to the dispatch side: a request with its method recognised once,
//! or a frame already judged invalid.

use serde_json::value::RawValue;

use crate::error::RpcError;
use crate::id::Id;

use super::context::Invocation;
use super::pool::Waiting;

/// A unit of work for the dispatch side.
pub(crate) enum Job {
    /// A host request (`id` = `None`: a notification).
    Request {
        id: Option<Id>,
        method: Method,
        params: Option<Box<RawValue>>,
    },
    /// A frame the reader already judged invalid: answer with this error.
    Reject { id: Id, error: RpcError },
}

/// Host methods, recognised once by the reader so workers match on an enum.
#[derive(Debug)]
pub(crate) enum Method {
    Initialize,
    Describe,
    Invoke,
    Health,
    Shutdown,
    Other(String),
}

impl Method {
    pub fn parse(name: &str) -> Method {
        match name {
            "invoke" => Method::Invoke,
            "describe" => Method::Describe,
            "health" => Method::Health,
            "initialize" => Method::Initialize,
            "shutdown" => Method::Shutdown,
            other => Method::Other(other.to_owned()),
        }
    }
}

/// An invoke ready to run.
pub(crate) struct InvokeJob {
    pub id: Id,
    pub tool: usize,
    pub arguments: Box<RawValue>,
    pub invocation: Invocation,
    /// Admitted straight to a slot (not waiting in the deferred list).
    pub admitted_early: bool,
}

impl Waiting for InvokeJob {
    fn weight(&self) -> usize {
        self.arguments.get().len()
    }

    fn defer(&mut self) {
        self.admitted_early = false;
    }
}
