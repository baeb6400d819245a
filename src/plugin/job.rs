//! What the reader hands to the dispatch side: a request whose line travels with it (in a
//! recycled buffer, with the spans of its id and params), or a frame already judged invalid.

use std::ops::Range;

use crate::error::RpcError;
use crate::id::Id;

use super::pool::Waiting;

/// Bytes a queued job costs beyond its line: the job itself, its queue slot, bookkeeping.
/// Counted so that a flood of tiny frames is bounded in memory too.
pub(crate) const JOB_OVERHEAD: usize = 256;

/// One request line, owned. The buffer comes from the reader's free list and goes back to
/// it (zeroed: the line may hold credentials) when the job is done.
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
        buf.fill(0);
        buf.clear();
        buf
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        // A line not handed back still must not leave credentials in freed memory.
        self.0.fill(0);
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
    /// A host request (`id` = `None`: a notification).
    Request {
        line: Line,
        id: Option<Range<usize>>,
        method: Method,
        params: Option<Range<usize>>,
    },
    /// A frame the reader already judged invalid: answer with this error.
    Reject { id: Id, error: RpcError },
}

impl Job {
    /// The invoke in this job, or the job back when it is something else.
    pub fn into_invoke(self) -> Result<InvokeJob, Job> {
        match self {
            Job::Request {
                line,
                id: Some(id),
                method: Method::Invoke,
                params,
            } => Ok(InvokeJob { line, id, params }),
            other => Err(other),
        }
    }

    /// Bytes this job holds while it waits.
    pub fn weight(&self) -> usize {
        match self {
            Job::Request { line, .. } => line.weight(),
            Job::Reject { error, .. } => error.message.len() + JOB_OVERHEAD,
        }
    }
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

/// An invoke admitted to run or to wait for a slot. Its params are parsed when it runs,
/// once, borrowed from its line.
pub(crate) struct InvokeJob {
    pub line: Line,
    pub id: Range<usize>,
    pub params: Option<Range<usize>>,
}

impl InvokeJob {
    /// The queued form of this invoke.
    pub fn into_job(self) -> Job {
        Job::Request {
            line: self.line,
            id: Some(self.id),
            method: Method::Invoke,
            params: self.params,
        }
    }

    /// The request id, as the host sent it.
    pub fn id(&self) -> &[u8] {
        self.line.bytes(&self.id)
    }
}

impl Waiting for InvokeJob {
    fn weight(&self) -> usize {
        self.line.weight()
    }
}
