//! The reader thread: owns the protocol input, settles answers to our own calls, and
//! queues host requests for the dispatch side. It never waits on a handler.
//!
//! Flow control: a request is queued when the request queue has room (slots and bytes, see
//! `intake.rs`). When it has none, the reader waits for room, so a flood stays in the pipe,
//! except while a handler waits on the host: the answer it waits for may be right behind the
//! flood, so the reader keeps reading and refuses what does not fit with -32000 `BUSY`. A
//! refusal is a reply like any other: it waits for room in the output (the host only has to
//! read), and is never dropped unless the output is closed.

use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Sender, TrySendError};
use serde_json::json;

use crate::error::{RpcError, codes};
use crate::id::Id;
use crate::wire::{self, Frame, FrameReader, Message};

use super::events::Event;
use super::job::{Job, Line, Method, span_of};
use super::service::Service;

/// Refusals are logged at most this often, as a count.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(1);

/// Reads until end of input, then fails every waiting reverse call and reports.
pub(crate) fn run<R: Read>(input: R, svc: Arc<Service>, jobs: Sender<Job>) {
    let mut frames = FrameReader::new(input, svc.opts.max_frame_bytes);
    let mut reader = Reader {
        svc,
        jobs,
        refused: 0,
        logged: None,
    };
    let why = loop {
        match frames.next_frame() {
            Ok(None) => break "the host closed stdin".to_owned(),
            Err(e) => {
                log::error!("executa: reading stdin failed: {e}");
                break format!("reading stdin failed: {e}");
            }
            Ok(Some(Frame::Line(line))) => reader.on_line(line),
            Ok(Some(Frame::Oversized { head, tail, size })) => {
                reader.on_oversized(head, tail, size)
            }
        }
    };
    reader.log_refusals(true);
    let Reader { svc, jobs, .. } = reader;
    svc.peer.pending.close(&why);
    drop(jobs);
    svc.events.notify(Event::InputClosed);
}

struct Reader {
    svc: Arc<Service>,
    jobs: Sender<Job>,
    /// Requests refused as busy since the last log line.
    refused: u64,
    logged: Option<Instant>,
}

impl Reader {
    fn on_line(&mut self, line: &[u8]) {
        let job = match wire::parse(line) {
            Message::Request {
                id: None, method, ..
            } => {
                // A notification is never answered; none needs the dispatch side.
                return log::debug!("executa: ignoring notification {method}");
            }
            Message::Request {
                id: Some(id),
                method,
                params,
            } => {
                let (Some(id), params) = (
                    span_of(line, id.get()),
                    params.map(|p| span_of(line, p.get())),
                ) else {
                    return log::error!("executa: internal error: a parsed id is not in its line");
                };
                let mut buf = self.svc.intake.buffer(line.len());
                buf.extend_from_slice(line);
                Job::Request {
                    line: Line::new(buf),
                    id: Some(id),
                    method: Method::parse(&method),
                    params: params.flatten(),
                }
            }
            Message::Response { id, outcome } => {
                let answer = outcome
                    .map(ToOwned::to_owned)
                    .map_err(wire::parse_error_object);
                self.svc.peer.pending.settle(id, answer);
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
            // A broken answer to one of our calls fails that call (answering an answer
            // would only confuse the host). With any other id it is a broken request.
            Message::BadResponse { id, reason } if self.svc.peer.pending.is_ours(id) => {
                return self.on_bad_answer(id, &reason);
            }
            Message::BadResponse { id, reason } => Job::Reject {
                id: Id::from_raw(id),
                error: RpcError::new(codes::INVALID_REQUEST, reason),
            },
            Message::Ignored(reason) => {
                return log::warn!("executa: dropped an invalid notification: {reason}");
            }
        };
        if let Err(job) = self.enqueue(job) {
            self.refuse(job);
        }
    }

    fn on_bad_answer(&self, id: &serde_json::value::RawValue, reason: &str) {
        let pending = &self.svc.peer.pending;
        if pending.is_waiting(id) {
            let error = RpcError::new(
                codes::INVALID_REQUEST,
                format!("malformed response from the host: {reason}"),
            );
            pending.settle(id, Err(error));
        } else {
            log::warn!(
                "executa: dropped a malformed response with id {}: {reason}",
                id.get()
            );
        }
    }

    fn on_oversized(&mut self, head: &[u8], tail: &[u8], size: usize) {
        let max = self.svc.opts.max_frame_bytes;
        // A non-scalar id in the head is answered with `null`, as in a normal frame.
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
        let pending = &self.svc.peer.pending;
        if let Some(id) = &head.id
            && !head.has_method
            && pending.is_ours(id.as_raw())
        {
            // An oversized answer to one of our own calls fails that call, not the plugin;
            // a late one (the call gave up) is dropped, never answered.
            if !pending.settle(id.as_raw(), Err(error)) {
                log::warn!("executa: dropped an oversized answer for id {id}");
            }
            return;
        }
        let id = head.id.unwrap_or_else(Id::null);
        if let Err(job) = self.enqueue(Job::Reject { id, error }) {
            self.refuse(job);
        }
    }

    /// Queues a job, waiting for room unless a handler waits on the host: then a job that
    /// does not fit is handed back, to be refused.
    fn enqueue(&self, mut job: Job) -> Result<(), Job> {
        let svc = &*self.svc;
        let weight = job.weight();
        loop {
            if svc.intake.try_reserve(weight) {
                let spawn = svc.pool.enqueue();
                match self.jobs.try_send(job) {
                    Ok(()) => {
                        if spawn {
                            self.svc.spawn_worker();
                        }
                        return Ok(());
                    }
                    Err(TrySendError::Disconnected(_)) => {
                        // The dispatch side is gone: the plugin is exiting.
                        svc.pool.unqueue();
                        svc.intake.release(weight);
                        return Ok(());
                    }
                    Err(TrySendError::Full(back)) => {
                        svc.pool.unqueue();
                        svc.intake.release(weight);
                        job = back;
                    }
                }
            }
            if svc.peer.pending.len() > 0 {
                return Err(job);
            }
            svc.intake
                .wait_unless(|| svc.peer.pending.len() > 0 || svc.intake.drained());
        }
    }

    /// Answers a job that could not be queued: -32000 `BUSY` for a request, its own error
    /// for a bad frame. Waits for room in the output; only a closed output loses it.
    fn refuse(&mut self, job: Job) {
        let mut frame = Vec::with_capacity(160);
        match &job {
            Job::Request {
                line, id: Some(id), ..
            } => {
                let busy = RpcError::with_code(
                    codes::SERVER_BUSY,
                    "BUSY",
                    "request queue full while a handler waits on the host; retry later",
                );
                wire::write_error_to(&mut frame, line.bytes(id), &busy);
            }
            Job::Request { id: None, .. } => return,
            Job::Reject { id, error } => wire::write_error(&mut frame, id.as_raw(), error),
        }
        drop(job);
        self.refused += 1;
        self.log_refusals(false);
        if !self.svc.peer.out.send(frame, false) {
            log::debug!("executa: a refusal was not sent: the output is closed");
        }
    }

    /// Logs the refusals counted so far, at most once per [`REFUSAL_LOG_EVERY`] (`last`:
    /// whatever is left, at the end of input).
    fn log_refusals(&mut self, last: bool) {
        if self.refused == 0 {
            return;
        }
        let now = Instant::now();
        if !last && self.logged.is_some_and(|t| now < t + REFUSAL_LOG_EVERY) {
            return;
        }
        log::warn!(
            "executa: refused {} request(s) as BUSY: the request queue was full while a \
             handler waited on the host",
            self.refused
        );
        self.refused = 0;
        self.logged = Some(now);
    }
}
