//! The reader thread: reads the plugin's stdout frame by frame and routes each one.
//!
//! Replies are settled straight into the waiting caller. Reverse requests go to the worker
//! pool and progress notifications to the event thread, both through bounded queues that
//! the reader never waits on: when the pool is full the request is refused with -32000,
//! so replies keep flowing. A quick service's request ([`Service::is_quick`]) is answered
//! here while the write queue is idle, never waiting for room in it. Anything malformed
//! fails only the call it belongs to.
//!
//! [`Service::is_quick`]: super::Service::is_quick

use std::path::PathBuf;
use std::process::ChildStdout;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::dispatch::{Dispatcher, Job};
use super::file_transport;
use super::shared::Shared;
use crate::error::{Error, RpcError, codes};
use crate::id::Id;
use crate::log_limit::NamedLimit;
use crate::wire::{self, Frame, FrameReader, Message};

// The plugin decides how many frames arrive: their lines are limited (`crate::log_limit`).
pub(super) static DROPPED_NOTIFICATION: NamedLimit = NamedLimit::new("notification dropped");
pub(super) static NULL_REPLY: NamedLimit = NamedLimit::new("unsolicited reply with id null");
pub(super) static UNKNOWN_REPLY: NamedLimit = NamedLimit::new("reply to an unknown id");
pub(super) static OVERSIZED: NamedLimit = NamedLimit::new("oversized frame dropped");

/// Whether a debug line may be written: its level is on and its kind's limit allows it.
fn debug_allowed(limit: &NamedLimit) -> bool {
    log::log_enabled!(log::Level::Debug) && limit.allow()
}

/// Runs until stdout reaches end of file or fails, then reports the process's end. It
/// blocks reading the pipe, which is its whole job; end of file comes when the plugin
/// exits (at the latest after the shutdown sequence's `SIGKILL`).
pub(crate) fn run(stdout: ChildStdout, shared: Arc<Shared>, dispatch: Dispatcher) {
    let mut frames = FrameReader::new(stdout, shared.opts.max_frame_bytes);
    let cause = loop {
        match frames.next_frame() {
            Ok(Some(Frame::Line(line))) => on_line(&shared, &dispatch, line),
            Ok(Some(Frame::Oversized { head, tail, size })) => {
                on_oversized(&shared, head, tail, size)
            }
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
    };
    shared.on_stdout_closed(cause);
}

fn on_line(shared: &Arc<Shared>, dispatch: &Dispatcher, line: &[u8]) {
    match wire::parse(line) {
        Message::Response { id, outcome } => {
            shared.count_reply();
            let reply = match outcome {
                Ok(result) => Ok(result.to_owned()),
                Err(error) => Err(Error::Remote(wire::parse_error_object(error))),
            };
            settle(shared, id, reply);
        }
        Message::Request {
            id: None,
            method,
            params,
        } => {
            if method == "executa/progress" {
                dispatch.progress(shared, params);
            } else if method == "notifications/progress" && shared.is_mcp() {
                dispatch.progress_mcp(shared, params);
            } else if debug_allowed(&DROPPED_NOTIFICATION) {
                log::debug!("[plugin:{}] notification `{method}` dropped", shared.label);
            }
        }
        Message::Request {
            id: Some(id),
            method,
            params,
        } => {
            let job = Job {
                shared: shared.clone(),
                id: Id::from_raw(id),
                method: method.into_owned(),
                params: params.map(ToOwned::to_owned),
            };
            // A quick service answers here; anything else goes to the workers.
            if let Err(job) = dispatch
                .serve_quick(job)
                .or_else(|job| dispatch.submit(job))
            {
                let busy = RpcError::with_code(
                    codes::SERVER_BUSY,
                    "HOST_BUSY",
                    "the host's reverse-call queue is full; retry later",
                );
                answer_error(shared, &job.id, &busy);
            }
        }
        Message::BadResponse { id, reason } => on_bad_response(shared, line, id, &reason),
        Message::Invalid {
            id: Some(id),
            reason,
        } => {
            if wire::scan_head(line).has_method {
                // A reverse request with a bad envelope: refuse it, as the plugin would ours.
                let err = RpcError::new(codes::INVALID_REQUEST, reason);
                answer_error(shared, &Id::from_raw(id), &err);
            } else {
                // No method: a broken reply (`"jsonrpc": 2.0`, say). It fails the call it
                // names; answering it would send the plugin an error under our own id.
                on_bad_response(shared, line, id, &reason);
            }
        }
        Message::Invalid { id: None, .. } | Message::Ignored(_) => shared.record_noise(line, true),
        Message::Unparsable(reason) => {
            // A truncated or corrupted reply still names its id early on: fail that call. A
            // frame with a `method` or `params` key is a request, whatever its id: noise.
            let head = wire::scan_head(line);
            if !head.request_key
                && let Some(n) = head.id.as_ref().and_then(Id::as_u64)
                && shared.pending.contains(n)
            {
                let why = format!("unparsable reply from the plugin: {reason}");
                shared.pending.settle(n, Err(Error::Protocol(why)));
                return;
            }
            shared.record_noise(line, false);
        }
    }
}

/// Routes a reply to its caller; replies to calls that gave up, or with ids that are not
/// ours, are dropped.
fn settle(shared: &Shared, id: &RawValue, reply: super::pending::Reply) {
    if id.get() == "null" {
        if !shared.pending.settle_null(reply) && debug_allowed(&NULL_REPLY) {
            log::debug!(
                "[plugin:{}] unsolicited reply with id null dropped",
                shared.label
            );
        }
        return;
    }
    let settled = id
        .get()
        .parse::<u64>()
        .is_ok_and(|n| shared.pending.settle(n, reply));
    if !settled && debug_allowed(&UNKNOWN_REPLY) {
        log::debug!(
            "[plugin:{}] reply to unknown or abandoned id {} dropped",
            shared.label,
            id.get()
        );
    }
}

/// A response of the wrong shape: a file-transport pointer, a broken reply to a pending
/// call (that call fails), or noise.
fn on_bad_response(shared: &Shared, line: &[u8], id: &RawValue, reason: &str) {
    let pending = id
        .get()
        .parse::<u64>()
        .ok()
        .filter(|&n| shared.pending.contains(n));
    let Some(n) = pending else {
        shared.record_noise(line, true);
        return;
    };
    shared.count_reply();
    if shared.opts.file_transport
        && let Ok(ptr) = serde_json::from_slice::<FileTransport>(line)
    {
        let reply = file_transport::read(&ptr.path, shared.opts.max_frame_bytes);
        shared.pending.settle(n, reply);
        return;
    }
    let why = format!("malformed reply from the plugin: {reason}");
    shared.pending.settle(n, Err(Error::Protocol(why)));
}

/// A line longer than the cap: fail the call it answers, or refuse the reverse request it
/// carries with -32600 `frame_too_large`; the plugin is not killed. The id is looked for
/// at the start of the frame, then at its end (serializers that write `id` last).
fn on_oversized(shared: &Shared, head: &[u8], tail: &[u8], size: usize) {
    let max = shared.opts.max_frame_bytes;
    let found = wire::scan_head(head);
    let is_request = found.request_key;
    let Some(id) = found.id.or_else(|| wire::scan_tail(tail)) else {
        if OVERSIZED.allow() {
            log::warn!(
                "[plugin:{}] oversized frame ({size} bytes) without an id dropped",
                shared.label
            );
        }
        return;
    };
    if !is_request
        && id.as_u64().is_some_and(|n| {
            shared
                .pending
                .settle(n, Err(Error::FrameTooLarge { size, max }))
        })
    {
        shared.count_reply();
    } else if is_request {
        let err = RpcError::with_code(
            codes::INVALID_REQUEST,
            "frame_too_large",
            format!("request frame of {size} bytes exceeds the host's {max}-byte cap"),
        );
        answer_error(shared, &id, &err);
    } else if OVERSIZED.allow() {
        log::warn!(
            "[plugin:{}] oversized frame ({size} bytes) with id {id} dropped",
            shared.label
        );
    }
}

fn answer_error(shared: &Shared, id: &Id, err: &RpcError) {
    let mut frame = Vec::with_capacity(160);
    wire::write_error(&mut frame, id.as_raw(), err);
    shared.try_send(frame);
}

/// `{"jsonrpc":"2.0","id":N,"__file_transport":"/tmp/....json"}`.
#[derive(Deserialize)]
struct FileTransport {
    #[serde(rename = "__file_transport")]
    path: PathBuf,
}
