//! The reader thread: owns the protocol input, settles answers to our own calls, and
//! queues host requests for the dispatch side. It never waits on a handler.

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{SendTimeoutError, Sender, TrySendError};
use serde_json::json;

use crate::error::{RpcError, codes};
use crate::id::Id;
use crate::wire::{self, Frame, FrameReader, Message};

use super::events::Event;
use super::job::{Job, Method};
use super::service::Service;

/// Reads until end of input, then fails every waiting reverse call and reports.
pub(crate) fn run<R: Read>(input: R, rt: Arc<Service>, jobs: Sender<Job>) {
    let mut frames = FrameReader::new(input, rt.opts.max_frame_bytes);
    let why = loop {
        match frames.next_frame() {
            Ok(None) => break "the host closed stdin".to_owned(),
            Err(e) => {
                log::error!("executa: reading stdin failed: {e}");
                break format!("reading stdin failed: {e}");
            }
            Ok(Some(Frame::Line(line))) => on_line(&rt, &jobs, line),
            Ok(Some(Frame::Oversized { head, tail, size })) => {
                on_oversized(&rt, &jobs, head, tail, size)
            }
        }
    };
    rt.peer.pending.close(&why);
    drop(jobs);
    rt.events.notify(Event::InputClosed);
}

fn on_line(rt: &Arc<Service>, jobs: &Sender<Job>, line: &[u8]) {
    let job = match wire::parse(line) {
        Message::Request { id, method, params } => Job::Request {
            id: id.map(Id::from_raw),
            method: Method::parse(&method),
            params: params.map(ToOwned::to_owned),
        },
        Message::Response { id, outcome } => {
            let answer = outcome
                .map(ToOwned::to_owned)
                .map_err(wire::parse_error_object);
            rt.peer.pending.settle(id, answer);
            return;
        }
        Message::Invalid { id, reason } => Job::Reject {
            id: id.map_or_else(Id::null, Id::from_raw),
            error: RpcError::new(codes::INVALID_REQUEST, reason),
        },
        Message::Unparsable(reason) => Job::Reject {
            id: Id::null(),
            error: RpcError::new(codes::PARSE_ERROR, reason),
        },
        // A broken answer to one of our calls fails that call (answering an answer would
        // only confuse the host). With any other id it is a broken host request: -32600.
        Message::BadResponse { id, reason } if rt.peer.pending.is_ours(id) => {
            if rt.peer.pending.is_waiting(id) {
                let error = RpcError::new(
                    codes::INVALID_REQUEST,
                    format!("malformed response from the host: {reason}"),
                );
                rt.peer.pending.settle(id, Err(error));
            } else {
                log::warn!(
                    "executa: dropped a malformed response with id {}: {reason}",
                    id.get()
                );
            }
            return;
        }
        Message::BadResponse { id, reason } => Job::Reject {
            id: Id::from_raw(id),
            error: RpcError::new(codes::INVALID_REQUEST, reason),
        },
        Message::Ignored(reason) => {
            log::warn!("executa: dropped an invalid notification: {reason}");
            return;
        }
    };
    enqueue(rt, jobs, job);
}

fn on_oversized(rt: &Arc<Service>, jobs: &Sender<Job>, head: &[u8], tail: &[u8], size: usize) {
    let max = rt.opts.max_frame_bytes;
    let mut head = wire::scan_head(head);
    if head.id.is_none() {
        head.id = wire::scan_tail(tail);
    }
    let error = RpcError {
        code: codes::INVALID_REQUEST,
        message: format!("frame of {size} bytes exceeds the {max}-byte limit"),
        data: Some(json!({ "errorCode": "frame_too_large", "size": size, "max": max })),
    };
    log::warn!("executa: {}", error.message);
    // An oversized answer to one of our own calls fails that call, not the plugin.
    if let Some(id) = &head.id
        && !head.has_method
        && rt.peer.pending.is_waiting(id.as_raw())
    {
        rt.peer.pending.settle(id.as_raw(), Err(error));
        return;
    }
    // A late answer to a call that already gave up: drop it, do not answer it.
    if let Some(id) = &head.id
        && !head.has_method
        && rt.peer.pending.is_ours(id.as_raw())
    {
        log::warn!(
            "executa: dropped an oversized answer for id {id} (timed out or already settled)"
        );
        return;
    }
    let id = head.id.unwrap_or_else(Id::null);
    enqueue(rt, jobs, Job::Reject { id, error });
}

/// Queues a job. When the queue is full the reader waits for room, since that holds the
/// flood back at the pipe; but it never waits while a handler is waiting on the host,
/// whose answer may be right behind in the input: then the request is refused as busy.
fn enqueue(rt: &Arc<Service>, jobs: &Sender<Job>, job: Job) {
    let spawn = rt.pool.enqueue();
    if spawn {
        rt.spawn_worker();
    }
    let mut job = match jobs.try_send(job) {
        Ok(()) => return,
        Err(TrySendError::Disconnected(_)) => return rt.pool.unqueue(),
        Err(TrySendError::Full(job)) => job,
    };
    loop {
        if rt.peer.pending.len() > 0 {
            rt.pool.unqueue();
            return refuse_busy(rt, job);
        }
        match jobs.send_timeout(job, Duration::from_millis(10)) {
            Ok(()) => return,
            Err(SendTimeoutError::Disconnected(_)) => return rt.pool.unqueue(),
            Err(SendTimeoutError::Timeout(j)) => job = j,
        }
    }
}

fn refuse_busy(rt: &Service, job: Job) {
    let (id, error) = match job {
        Job::Request { id: Some(id), .. } => (
            id,
            RpcError::with_code(
                codes::SERVER_BUSY,
                "BUSY",
                "request queue full; retry later",
            ),
        ),
        // A notification is never answered, busy or not.
        Job::Request { id: None, .. } => return,
        // A bad frame still gets its own error; answering it costs no handler.
        Job::Reject { id, error } => (id, error),
    };
    let mut frame = Vec::with_capacity(128);
    wire::write_error(&mut frame, id.as_raw(), &error);
    if !rt.peer.out.try_send(frame) {
        log::error!(
            "executa: could not queue the error for request {id}: the output queue is full too"
        );
    }
}
