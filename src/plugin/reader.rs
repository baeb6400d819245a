//! The reader thread: owns the protocol input, settles answers to our own calls, queues
//! host requests for the dispatch side, and runs an invoke itself when that is safe.
//!
//! Scheduling: an invoke runs on the reader (no hand-off, no second wake-up, one read and
//! one write per burst like a single-threaded loop) when a slot is free, no handler waits
//! on the host, and the reader has spent less than `Options::inline` in handlers since it
//! last caught up with its input; otherwise it goes to the dispatch side. A run on the
//! reader that lasts `Options::inline` hands reading to a new reader thread (`relay.rs`,
//! by a timer), and that reader sends what it finds buffered to the dispatch side until it
//! catches up. So no request waits behind another's handler for longer than that,
//! whatever the tools did before.
//!
//! Lifecycle in reading order: what `initialize` negotiates is recorded here as it is read
//! (only its reply is left to the dispatch side), and after `shutdown` every invoke read is
//! refused here: a frame right behind either sees it, however the threads are scheduled.
//! An MCP `tools/call` is entered among the calls in flight as it is read (`mcp/flight.rs`),
//! so a cancellation names only a call read before it.
//!
//! Flow control: a request is queued when the request queue has room (bytes, see
//! `intake.rs`). When it has none, the reader waits for room, so a flood stays in the pipe.
//! While a handler waits on the host, the answer it waits for may be right behind the
//! flood: the reader still waits while the queue drains on its own (dispatch threads move
//! invokes into the waiting list), but once a dispatch thread waits for room in that list
//! too (the whole budget is spent), it keeps reading and refuses what does not fit with
//! -32000 `BUSY`. A refusal is a reply like any other: it waits for room in the output (the
//! host only has to read), and is never dropped unless the output is closed.

use std::any::Any;
use std::io::Read;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use serde_json::json;
#[cfg(feature = "mcp")]
use serde_json::value::RawValue;

use crate::error::{RpcError, codes};
use crate::id::Id;
use crate::log_limit::LogLimit;
use crate::sys::{self, Waitable};
use crate::wire::{self, Frame, FrameReader, Message};

use super::dispatch::Scratch;
use super::events::Event;
use super::job::{InvokeJob, InvokeParts, Job, Line, Method, span_of};
use super::relay::{self, ReadRole};
use super::service::Service;

// Lines logged per frame, each kind within its limit (`log_limit.rs`).
static NOTIFICATION: LogLimit = LogLimit::new();
static BAD_NOTIFICATION: LogLimit = LogLimit::new();
static BAD_ANSWER: LogLimit = LogLimit::new();
static OVERSIZED: LogLimit = LogLimit::new();

/// Refusals are logged at most this often, as a count.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(1);

/// Replies the reader holds before writing them, in bytes (it writes sooner when it has
/// read everything buffered, i.e. before a read could block).
const BATCH_BYTES: usize = 16 * 1024;

/// The longest a reader waits for input at once while its own invoke waits for the host
/// (`ReadState::pump`): a call failed without input (shutdown) is seen this soon.
const PUMP_SLICE: Duration = Duration::from_millis(100);

/// How long the reader's loop waits on a non-blocking stdin at once before it looks again
/// (nothing else needs it sooner: a blocking read would wait without any bound).
const INPUT_LOOK: Duration = Duration::from_secs(60);

/// Starts the reader thread, which reads until end of input, then fails every waiting
/// reverse call and reports.
pub(crate) fn start<R: Read + Send + 'static>(
    input: R,
    svc: Arc<Service>,
    jobs: Sender<Job>,
) -> std::io::Result<()> {
    let fd = sys::waitable(&input);
    let frames = FrameReader::new(input, svc.opts.max_frame_bytes);
    let relay = svc.relay.clone();
    relay.set_pumpable(fd.is_some());
    let inline = crate::spin::nanos(svc.opts.inline);
    let state = ReadState {
        frames,
        fd,
        eof: None,
        reader: Reader {
            svc,
            jobs,
            refused: 0,
            logged: None,
            spare: None,
            shut: false,
            #[cfg(feature = "mcp")]
            meta_memo: std::cell::RefCell::default(),
            #[cfg(feature = "mcp")]
            spare_call: std::cell::Cell::default(),
            #[cfg(feature = "mcp")]
            flight: super::mcp::Flight::default(),
        },
        batch: Batch::default(),
        spent: 0,
        rested: relay.now(),
        ran: None,
        inline,
    };
    // The first reader starts the way a relief reader does: one thread start-up in the
    // binary, not two.
    relay.park(Box::new(state));
    relay.relieve()
}

/// What the reading role carries from thread to thread (see `relay.rs`): the input, and
/// the replies read with it and not written yet (a reader that takes over writes them).
pub(crate) struct ReadState<R> {
    frames: FrameReader<R>,
    /// The input's descriptor when it can be polled (a file, pipe or socket).
    fd: Option<Waitable>,
    /// Why the input ended, when it ended while a handler read it (see `pump`).
    eof: Option<String>,
    reader: Reader,
    batch: Batch,
    /// Time spent in handlers on the reader since it last caught up with its input (times
    /// are nanoseconds on the relay's clock, `Relay::now`).
    spent: u64,
    /// When it last caught up.
    rested: u64,
    /// When the last invoke it ran ended, if it has not caught up since.
    ran: Option<u64>,
    /// `Options::inline`, the time it may spend in handlers before it catches up.
    inline: u64,
}

/// What reading one frame came to.
enum Step {
    /// An invoke the reader may run itself.
    Invoke(InvokeJob),
    /// The frame was dealt with (queued, settled, refused or ignored).
    Handled,
    /// Nothing to read yet: a gate said no, or a non-blocking input had nothing (after a
    /// bounded wait for it).
    NoInput,
    /// The input ended, for this reason.
    Ended(String),
}

impl<R: Read> ReadState<R> {
    /// Reads one frame and handles it: the one place both the reader's loop and a pump
    /// turn input into work. With a gate (a pump), `ready` is asked before each read from
    /// the input, and a read that would block is no input yet; without one (the loop), the
    /// read blocks (on a non-blocking input: waits with `poll`, at most `INPUT_LOOK`, then
    /// says no input yet), and any other failure ends the input.
    fn step(&mut self, ready: Option<&mut dyn FnMut() -> bool>) -> Step {
        let ReadState {
            frames,
            reader,
            batch,
            fd,
            ..
        } = self;
        let gated = ready.is_some();
        let mut always = || true;
        let gate: &mut dyn FnMut() -> bool = match ready {
            Some(ready) => ready,
            None => &mut always,
        };
        match frames.next_frame_gated(gate) {
            Ok(Some(Frame::Line(line))) => reader
                .on_line(line, batch)
                .map_or(Step::Handled, Step::Invoke),
            Ok(Some(Frame::Oversized { head, tail, size })) => {
                reader.on_oversized(head, tail, size, batch);
                Step::Handled
            }
            Ok(None) => Step::Ended("the host closed stdin".to_owned()),
            Err(e) if gated && e.kind() == std::io::ErrorKind::WouldBlock => Step::NoInput,
            // A non-blocking stdin (shared with whoever started the plugin, which may have
            // made it so) is read as a blocking one: wait for input, then read on.
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && fd.is_some() => {
                match fd.map(|fd| sys::wait_readable(fd, INPUT_LOOK)) {
                    Some(Err(e)) => Step::Ended(format!("waiting for stdin failed: {e}")),
                    _ => Step::NoInput,
                }
            }
            Err(e) => {
                log::error!("executa: reading stdin failed: {e}");
                Step::Ended(format!("reading stdin failed: {e}"))
            }
        }
    }
}

impl<R: Read + Send + 'static> ReadRole for ReadState<R> {
    fn pump(&mut self, done: &dyn Fn() -> bool, until: Option<Instant>) {
        let Some(fd) = self.fd else { return };
        let svc = self.reader.svc.clone();
        let left = || {
            until.map_or(Duration::MAX, |u| {
                u.saturating_duration_since(Instant::now())
            })
        };
        // Every wait for input, also in the middle of a frame, is bounded by the call's time
        // left, and by PUMP_SLICE: a call can also end without input (the plugin shuts down
        // and fails it), and nothing would wake `poll` then.
        let mut ready = || {
            let left = left();
            // An error from poll (none is expected) falls back to a plain read.
            !left.is_zero() && !matches!(sys::wait_readable(fd, left.min(PUMP_SLICE)), Ok(false))
        };
        while !done() && self.eof.is_none() {
            if !self.frames.has_buffered_frame() {
                self.batch.flush(&svc);
            }
            match self.step(Some(&mut ready)) {
                // Inside a handler nothing runs here: an invoke goes to the dispatch side.
                Step::Invoke(job) => self.reader.queue(job.into_job(), &mut self.batch),
                Step::Handled => {}
                // Nothing to read within the slice: look at the call again.
                Step::NoInput => {
                    if left().is_zero() {
                        break;
                    }
                }
                Step::Ended(why) => self.eof = Some(why),
            }
        }
        // Ended: every waiting call fails now (the reader's loop reports the end once the
        // running invoke is over).
        if let Some(why) = &self.eof {
            svc.peer.pending.close(why);
        }
    }

    fn start_reader(&self) -> std::io::Result<()> {
        let svc = self.reader.svc.clone();
        crate::threads::spawn("executa-reader".into(), move || {
            // `None`: the old reader took its state back first and reads on.
            let state = svc.relay.take().map(|role| role.downcast::<ReadState<R>>());
            if let Some(Ok(mut state)) = state {
                // The old reader is still in a handler: what waits behind it goes to the
                // dispatch side until this reader catches up.
                state.spent = state.inline;
                read_loop(state);
            }
        })
        .map(drop)
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// The reader's loop, on whichever thread holds the reading role. Ends at end of input,
/// or when the role moved to a new thread while this one ran an invoke.
fn read_loop<R: Read + Send + 'static>(mut state: Box<ReadState<R>>) {
    let svc = state.reader.svc.clone();
    let mut scratch = Scratch::for_reader();
    let why = loop {
        if let Some(why) = state.eof.take() {
            break why;
        }
        if !state.frames.has_buffered_frame() {
            // Caught up: the next read may wait, with no run to time. A reader that caught
            // up less than `inline/3` ago too (a lock-step exchange, a pipelined stream, a
            // request every 0.5 ms) leaves the timer armed: the next run pushes its expiry
            // ahead, once per `inline/3` at most (`relay.rs`), where a disarm and a re-arm
            // per request cost two system calls. Serial `echo` at one request every 0.5 ms:
            // 0.2 calls per request instead of 2, and no expiry while they come.
            state.batch.flush(&svc);
            state.spent = 0;
            // A run that just ended read the clock already.
            let now = state.ran.take().unwrap_or_else(|| svc.relay.now());
            svc.relay.rest_after(now.saturating_sub(state.rested));
            state.rested = now;
        } else if state.batch.bytes.len() >= BATCH_BYTES {
            state.batch.flush(&svc);
        }
        match state.step(None) {
            Step::Invoke(job) if state.spent >= state.inline => {
                state.reader.queue(job.into_job(), &mut state.batch);
            }
            Step::Invoke(job) => match run_inline(&svc, state, job, &mut scratch) {
                Some(back) => {
                    state = back;
                    // Every run's line was copied with the spare, so none is lost here. (A
                    // thread that ends after a hand-off frees its kept buffer, zeroed: one
                    // allocation per hand-off, not worth the code.)
                    debug_assert!(state.reader.spare.is_none());
                    state.reader.spare = scratch.line.as_mut().and_then(Option::take);
                    #[cfg(feature = "mcp")]
                    if let Some(call) = scratch.take_call() {
                        state.reader.spare_call.set(Some(call));
                    }
                }
                None => return,
            },
            Step::Handled | Step::NoInput => {}
            Step::Ended(why) => break why,
        }
    };
    state.batch.flush(&svc);
    state.reader.log_refusals(true);
    let ReadState {
        reader: Reader { svc, jobs, .. },
        ..
    } = *state;
    svc.peer.pending.close(&why);
    drop(jobs);
    svc.events.notify(Event::InputClosed);
}

/// Runs an invoke on the reader thread if a slot is free, with the reading state parked
/// meanwhile (and timed, `relay.rs`); queues it otherwise. Returns the state, or `None`
/// when it moved to a new reader meanwhile (this thread then finishes and ends).
fn run_inline<R: Read + Send + 'static>(
    svc: &Arc<Service>,
    state: Box<ReadState<R>>,
    job: InvokeJob,
    scratch: &mut Scratch,
) -> Option<Box<ReadState<R>>> {
    let started = svc.relay.now();
    // Caught up since its last run: the frames read with this one wait behind it alone.
    let fresh = state.ran.is_none();
    let mut kept = Some(state);
    let outcome = svc.execute_if(job, scratch, &mut || {
        let go = svc.pool.try_start();
        if go && let Some(state) = kept.take() {
            svc.relay.park_since(state, started, fresh);
            // A call registered just before the park may not have seen it: look again.
            if svc.peer.pending.len() > 0 {
                let _ = svc.relay.relieve();
            }
            relay::running_here(true);
        }
        go
    });
    relay::running_here(false);
    match (outcome, &mut kept) {
        (Ok(true), _) => {
            let mut back = take::<R>(svc);
            if let Some(state) = &mut back {
                let ended = svc.relay.now();
                state.spent += ended.saturating_sub(started);
                state.ran = Some(ended);
            }
            let kept = finish_slot(svc, back, scratch);
            // This thread ends: a draining main thread waits for its slot.
            if kept.is_none() && svc.pool.ran_off() {
                svc.events.notify(Event::Drained);
            }
            return kept;
        }
        (Ok(false), Some(state)) => state.batch.add(svc, &scratch.frame),
        (Err(job), Some(state)) => state.reader.queue(job.into_job(), &mut state.batch),
        // The state is parked only when the invoke ran.
        (_, None) => {}
    }
    kept
}

/// After an invoke the reader ran in a slot of its own, with its state taken back (`kept`;
/// `None`: a new reader has it): runs the invokes that waited for the slot, as the thread
/// whose invoke finished always does. They may be slow, so reading first moves to a new
/// reader thread (and if none can start, this thread reads on after them).
fn finish_slot<R: Read + Send + 'static>(
    svc: &Service,
    mut kept: Option<Box<ReadState<R>>>,
    scratch: &mut Scratch,
) -> Option<Box<ReadState<R>>> {
    reply(svc, kept.as_deref_mut(), &mut scratch.frame);
    let mut handed = false;
    while let Some(job) = svc.pool.finish() {
        if let Some(mut state) = kept.take() {
            state.batch.flush(svc);
            svc.relay.park(state);
            let _ = svc.relay.relieve();
            handed = true;
        }
        svc.execute(job, scratch);
        svc.peer.out.send_buffer(&mut scratch.frame, false);
    }
    if handed {
        kept = take::<R>(svc);
    }
    kept
}

/// Takes the parked state back; `None` when a new reader has it.
fn take<R: Read + Send + 'static>(svc: &Service) -> Option<Box<ReadState<R>>> {
    svc.relay
        .take()
        .and_then(|role| role.downcast::<ReadState<R>>().ok())
}

/// A reply of an invoke run here: into the reading state's batch, or straight out when
/// the state has moved on.
fn reply<R>(svc: &Service, state: Option<&mut ReadState<R>>, frame: &mut Vec<u8>) {
    match state {
        Some(state) => state.batch.add(svc, frame),
        None => {
            svc.peer.out.send_buffer(frame, false);
        }
    }
}

/// Replies the reader made itself, written together: one write per read from stdin in a
/// burst, like a single-threaded loop. A reply waits until the reader has handled the
/// frames already read with it (invokes it runs), or until a long run is handed over
/// (`relay.rs`): then the new reader writes it. The batch counts as a reply in hand for the
/// drain (see `Pool::holding`) until written.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    /// Whether replies are held (and counted by the pool).
    held: bool,
}

impl Batch {
    fn add(&mut self, svc: &Service, frame: &[u8]) {
        // The whole batch counts as one reply in hand (one lock per batch, not per reply).
        if !self.held {
            svc.pool.holding();
            self.held = true;
        }
        self.bytes.extend_from_slice(frame);
    }

    /// Writes what is held: straight out when the output is idle, else through the
    /// writer's queue (waiting for room while the host does not read).
    fn flush(&mut self, svc: &Service) {
        if !self.held {
            return;
        }
        svc.peer.out.send_buffer(&mut self.bytes, false);
        self.bytes.clear();
        if self.bytes.capacity() > 4 * BATCH_BYTES {
            self.bytes = Vec::new();
        }
        self.held = false;
        if svc.pool.written() {
            svc.events.notify(Event::Drained);
        }
    }
}

/// What the reader made of a frame.
enum Parsed {
    /// An invoke: its id span in the line, and its params as read (or the error to answer).
    Invoke(Range<usize>, Result<InvokeParts, Box<RpcError>>),
    /// Any other request with an id: its id span in the line.
    Request(Range<usize>, Method),
    /// Anything else the dispatch side answers (a bad frame).
    Job(Job),
    /// Nothing more to do (a notification, an answer to one of our calls).
    Done,
}

struct Reader {
    svc: Arc<Service>,
    jobs: Sender<Job>,
    /// Requests refused as busy since the last log line.
    refused: u64,
    logged: Option<Instant>,
    /// A line buffer for the next copy (see `Scratch::line`).
    spare: Option<Vec<u8>>,
    /// Whether `shutdown` was read: every invoke read after it is refused here, whenever
    /// the dispatch side gets to the `shutdown` itself.
    shut: bool,
    /// The last 2026-07-28 envelope read (MCP's `tools/call`).
    #[cfg(feature = "mcp")]
    meta_memo: std::cell::RefCell<super::mcp::MetaMemo>,
    /// An MCP call's box for the next `tools/call` read (see `Scratch::take_call`).
    #[cfg(feature = "mcp")]
    spare_call: std::cell::Cell<Option<Box<super::mcp::Call>>>,
    /// The `tools/call` requests in flight, which a cancellation may name.
    #[cfg(feature = "mcp")]
    flight: super::mcp::Flight,
}

impl Reader {
    /// Handles one line. Returns an invoke the caller may run itself.
    fn on_line(&mut self, line: &[u8], batch: &mut Batch) -> Option<InvokeJob> {
        // The params are read here, once: where they are not invoke params, the full parse
        // says what the frame is.
        let compact = wire::compact_invoke(line, |params| {
            InvokeParts::read(&self.svc.tools, line, params).ok()
        });
        let read = match compact {
            Some((id, _, parts)) => Parsed::Invoke(id, parts),
            #[cfg(feature = "mcp")]
            None => wire::compact_request(line, wire::TOOLS_CALL_TAIL, |id, text, params| {
                let raw = text.get(id.clone())?;
                self.tools_call(line, (id, raw), Some(params), true)
            })
            .map_or_else(|| self.classify(line), |(_, _, parsed)| parsed),
            #[cfg(not(feature = "mcp"))]
            None => self.classify(line),
        };
        let mut job = match read {
            Parsed::Invoke(id, parts) => Job::Invoke(InvokeJob {
                line: self.copy(line),
                id,
                parts,
            }),
            Parsed::Request(id, method) => Job::Request {
                line: self.copy(line),
                id: Some(id),
                method,
            },
            Parsed::Job(job) => job,
            Parsed::Done => return None,
        };
        if let Job::Request {
            line,
            id: Some(id),
            method,
        } = &job
            && method.is_handshake()
        {
            // Answered here, before anything read after it: its reply is made already.
            let mut frame = Vec::with_capacity(512);
            self.svc
                .answer_lifecycle(method, line.bytes(id), &mut frame);
            batch.flush(&self.svc);
            self.svc.peer.out.send(frame, false);
            return None;
        }
        if self.shut {
            self.after_shutdown(job, batch);
            return None;
        }
        if self.svc.may_inline() {
            match job.into_invoke() {
                Ok(invoke) => return Some(invoke),
                Err(other) => job = other,
            }
        }
        self.queue(job, batch);
        None
    }

    /// Handles a job read after `shutdown`: an invoke is refused `SHUTTING_DOWN` here,
    /// whenever the dispatch side gets to the `shutdown` itself; anything else is queued.
    #[cold]
    fn after_shutdown(&mut self, job: Job, batch: &mut Batch) {
        match job.into_invoke() {
            Ok(invoke) => {
                batch.flush(&self.svc);
                self.svc.refuse_waiting(vec![invoke], None);
            }
            Err(job) => self.queue(job, batch),
        }
    }

    /// The line, copied into a buffer that travels with its job: the one the reader's last
    /// invoke gave back, or one from the shared free list.
    fn copy(&mut self, line: &[u8]) -> Line {
        let mut buf = match self.spare.take() {
            Some(buf) => buf,
            None => self.svc.intake.buffer(line.len()),
        };
        buf.extend_from_slice(line);
        Line::new(buf)
    }

    /// Reads a frame with the full parse.
    fn classify(&mut self, line: &[u8]) -> Parsed {
        Parsed::Job(match wire::parse(line) {
            #[cfg(feature = "mcp")]
            Message::Request {
                id: None,
                method,
                params: Some(params),
            } if method == "notifications/cancelled" => {
                let id = super::mcp::cancelled_id(params.get());
                if let Some(id) = id.filter(|id| !self.flight.cancel(id))
                    && log::log_enabled!(log::Level::Debug)
                    && NOTIFICATION.allow("notification")
                {
                    let id = wire::elide(&id, wire::QUOTE_BYTES);
                    log::debug!("executa: ignoring the cancellation of {id}: not in flight");
                }
                return Parsed::Done;
            }
            Message::Request {
                id: None, method, ..
            } => {
                // A notification is never answered; none needs the dispatch side.
                if log::log_enabled!(log::Level::Debug) && NOTIFICATION.allow("notification") {
                    let method = wire::elide(&method, wire::QUOTE_BYTES);
                    log::debug!("executa: ignoring notification {method}");
                }
                return Parsed::Done;
            }
            Message::Request {
                id: Some(raw),
                method,
                params,
            } => {
                let Some(id) = span_of(line, raw.get()) else {
                    log::error!("executa: internal error: a parsed id is not in its line");
                    return Parsed::Done;
                };
                let params = params.map(|p| p.get());
                #[cfg(feature = "mcp")]
                if method == "tools/call"
                    && let Some(parsed) =
                        self.tools_call(line, (id.clone(), raw.get()), params, false)
                {
                    return parsed;
                }
                return match &*method {
                    "invoke" => {
                        let parts = InvokeParts::read_or_refuse(&self.svc.tools, line, params);
                        Parsed::Invoke(id, parts)
                    }
                    "initialize" => Parsed::Request(id, self.initialize(params)),
                    "shutdown" => {
                        self.shut = true;
                        Parsed::Request(id, Method::Shutdown)
                    }
                    _ => match self.method(&method, params) {
                        Ok(method) => Parsed::Request(id, method),
                        Err(error) => Parsed::Job(Job::Reject {
                            id: Id::from_raw(raw),
                            error,
                        }),
                    },
                };
            }
            Message::Response { id, outcome } => {
                let answer = outcome
                    .map(ToOwned::to_owned)
                    .map_err(wire::parse_error_object);
                self.svc.peer.pending.settle(id, answer);
                return Parsed::Done;
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
                self.on_bad_answer(id, &reason);
                return Parsed::Done;
            }
            Message::BadResponse { id, reason } => Job::Reject {
                id: Id::from_raw(id),
                error: RpcError::new(codes::INVALID_REQUEST, reason),
            },
            Message::Ignored(reason) => {
                if BAD_NOTIFICATION.allow("invalid notification") {
                    log::warn!("executa: dropped an invalid notification: {reason}");
                }
                return Parsed::Done;
            }
        })
    }

    /// Records an `initialize` (its params text) as it is read, so that the session it
    /// negotiates holds for every frame read after it, and returns what is left to do: its
    /// reply. An MCP one makes the session MCP's; an Executa one ends MCP serving.
    fn initialize(&self, params: Option<&str>) -> Method {
        let (svc, params) = (&*self.svc, params.unwrap_or("null"));
        #[cfg(feature = "mcp")]
        if let Some(revision) = svc.peer.mcp.on_initialize(&svc.peer.session, params) {
            return Method::McpInitialize(revision);
        }
        let reply = svc
            .peer
            .session
            .initialize(params, &svc.name, &svc.version, &svc.uses);
        Method::Initialize(Box::new(reply))
    }

    /// A method as served: MCP's own (`tools/list`, `ping`, `server/discover`) are served
    /// in an MCP session or as 2026-07-28 requests (which say so in `_meta`), and are
    /// unknown otherwise, as they are without the `mcp` feature. `Err`: a 2026-07-28-style
    /// request of a revision not spoken.
    #[cfg_attr(not(feature = "mcp"), allow(clippy::unnecessary_wraps))]
    fn method(&self, name: &str, params: Option<&str>) -> Result<Method, RpcError> {
        #[cfg(not(feature = "mcp"))]
        let _ = params;
        let method = Method::parse(name);
        #[cfg(feature = "mcp")]
        if matches!(
            method,
            Method::ToolsList(_) | Method::Ping(_) | Method::Discover
        ) {
            use super::mcp::Era;
            return match super::mcp::era_of(params) {
                Era::Unsupported(v) => Err(super::mcp::unsupported(&v)),
                Era::Stateless { .. } => Ok(match method {
                    Method::ToolsList(_) => Method::ToolsList(true),
                    Method::Ping(_) => Method::Ping(true),
                    other => other,
                }),
                Era::Session
                    if self.svc.peer.mcp.is_active() && !matches!(method, Method::Discover) =>
                {
                    Ok(method)
                }
                Era::Session => Ok(Method::Other(name.to_owned())),
            };
        }
        Ok(method)
    }

    /// Reads an MCP `tools/call`: an invoke of a 2026-07-28 request or of an MCP session,
    /// a retry that resumes a call waiting for its client (settled here, as an answer is),
    /// or a refusal; `None` when neither era serves it (an Executa host's, answered as an
    /// unknown method). `(id, raw)`: the id's span in `line` and its text. `strict`: the
    /// prefix reader's call, which leaves params that do not read to the full parse
    /// (`None`), as it does an invoke's.
    #[cfg(feature = "mcp")]
    fn tools_call(
        &self,
        line: &[u8],
        (id, raw): (Range<usize>, &str),
        params: Option<&str>,
        strict: bool,
    ) -> Option<Parsed> {
        use super::mcp::{Era, Stateless};
        let peer = &self.svc.peer;
        let mut memo = self.meta_memo.borrow_mut();
        let mut spare = self.spare_call.take();
        let mut read = InvokeParts::read_mcp(&self.svc.tools, line, params, &mut memo, &mut spare);
        self.spare_call.set(spare);
        drop(memo);
        if strict && !read.readable {
            return None;
        }
        let reject = |error: RpcError| {
            let id =
                serde_json::from_str::<&RawValue>(raw).map_or_else(|_| Id::null(), Id::from_raw);
            Some(Parsed::Job(Job::Reject { id, error }))
        };
        let samples = match &read.era {
            Era::Session if !peer.mcp.is_active() => return None,
            Era::Session => None,
            Era::Unsupported(v) => return reject(super::mcp::unsupported(v)),
            Era::Stateless { samples } => Some(*samples),
        };
        // The parts stay where they were read until the one move into the answer.
        let Ok(p) = &mut read.parts else {
            return Some(Parsed::Invoke(id, read.parts));
        };
        let name = &*self.svc.tools[p.tool].spec.name;
        if let (Some(retry), Some(_)) = (read.retry, samples) {
            let state = retry.state.unwrap_or_default();
            // The retry is the request in flight from now on, with its own progress token.
            let token = p.mcp.as_mut().and_then(|c| c.progress_token.take());
            let retried = super::mcp::Retried {
                id: raw,
                name,
                arguments: retry.arguments,
                state: &state,
                responses: retry.responses,
                seen: self.flight.seen(raw),
                token,
            };
            let settled = super::mcp::on_retry(peer, retried);
            return match settled {
                Ok(()) => Some(Parsed::Done),
                Err(error) => reject(error),
            };
        }
        if let Some(call) = p.mcp.as_mut() {
            // Seen from now on: a cancellation read later may name it.
            let seen = self.flight.seen(raw);
            match samples {
                Some(samples) => {
                    let askable = samples && peer.mcp.plugin_samples(&peer.capabilities);
                    let tool = &self.svc.tools[p.tool].name;
                    call.stateless = Some(Stateless::new(samples, askable, seen, tool));
                }
                None => call.seen = Some(seen),
            }
        }
        Some(Parsed::Invoke(id, read.parts))
    }

    /// Queues a job for the dispatch side, or refuses it (see [`Reader::enqueue`]). The
    /// replies held so far are written first, since queueing may wait.
    fn queue(&mut self, job: Job, batch: &mut Batch) {
        batch.flush(&self.svc);
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
        } else if BAD_ANSWER.allow("malformed answer") {
            log::warn!(
                "executa: dropped a malformed response with id {}: {reason}",
                id.get()
            );
        }
    }

    fn on_oversized(&mut self, head: &[u8], tail: &[u8], size: usize, batch: &mut Batch) {
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
        if OVERSIZED.allow("oversized frame") {
            log::warn!("executa: {}", error.message);
        }
        let pending = &self.svc.peer.pending;
        // An oversized answer to a call of ours still waiting fails that call, not the
        // plugin. Anything else is answered, even with an id of our shape: the frame may be
        // a request whose `method` lies past the head, and every request gets a reply. A
        // top-level `method` or `params` in the head says request whatever the id.
        if let Some(id) = &head.id
            && !head.request_key
            && pending.is_waiting(id.as_raw())
            && pending.settle(id.as_raw(), Err(error.clone()))
        {
            return;
        }
        let id = head.id.unwrap_or_else(Id::null);
        self.queue(Job::Reject { id, error }, batch);
    }

    /// Queues a job, waiting for room. While a handler waits on the host, a job is handed
    /// back, to be refused, only when the whole budget is spent: the queue's bytes, and the
    /// waiting list's (a dispatch thread waits for room in it, so the queue cannot drain).
    /// Short of that the queue drains without the host's help, so the wait is short.
    fn enqueue(&self, job: Job) -> Result<(), Job> {
        let svc = &*self.svc;
        let weight = job.weight();
        let spent = || svc.peer.pending.len() > 0 && svc.pool.admit_blocked();
        loop {
            if svc.intake.try_reserve(weight) {
                let spawn = svc.pool.enqueue();
                // The queue has no slot count (its bound is the budget above), so this fails
                // only when the dispatch side is gone: the plugin is exiting.
                if self.jobs.try_send(job).is_err() {
                    svc.pool.unqueue();
                    svc.intake.release(weight);
                } else if spawn {
                    self.svc.spawn_worker();
                }
                return Ok(());
            }
            if spent() {
                return Err(job);
            }
            svc.intake.wait_unless(|| spent() || svc.intake.drained());
        }
    }

    /// Answers a job that could not be queued: -32000 `BUSY` for a request, its own error
    /// for a bad frame, and its reply for `initialize` or `shutdown`, which took effect as
    /// it was read. Waits for room in the output; only a closed output loses it.
    fn refuse(&mut self, job: Job) {
        let mut frame = Vec::with_capacity(160);
        if let Job::Request {
            line,
            id: Some(id),
            method,
        } = &job
            && self
                .svc
                .answer_lifecycle(method, line.bytes(id), &mut frame)
        {
            drop(job);
            self.svc.peer.out.send(frame, false);
            return;
        }
        match &job {
            Job::Request {
                line, id: Some(id), ..
            }
            | Job::Invoke(InvokeJob { line, id, .. }) => {
                let busy = RpcError::with_code(
                    codes::SERVER_BUSY,
                    "BUSY",
                    "request budget spent while a handler waits on the host; retry later",
                );
                wire::write_error_to(&mut frame, line.bytes(id), &busy);
            }
            Job::Request { id: None, .. } => return,
            Job::Reject { id, error } => wire::write_error(&mut frame, id.as_raw(), error),
        }
        drop(job);
        self.refused += 1;
        self.log_refusals(false);
        self.svc.peer.out.send(frame, false);
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
