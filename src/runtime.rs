//! Starting the three threads, running the worker loop, and the shutdown sequence.
//!
//! ```text
//!   host stdin ──► [executa-reader] ──jobs (bounded 256)──► [executa-dispatch] (+ workers)
//!                       │  settles answers to reverse calls        │ handlers
//!                       ▼  straight into the waiting handler       ▼
//!                  pending table                       out (bounded 1024) ──► [executa-writer] ──► host stdout
//! ```
//! The main thread waits for an event (signal, end of input, broken output), drains
//! in-flight invokes within the grace period, flushes the writer, and returns.

use std::io::{Read, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, bounded};
use serde_json::value::RawValue;

use crate::dispatch::{InvokeJob, Job};
use crate::error::{Error, Result};
use crate::events::{self, Event, Events, Notifier};
use crate::health::Health;
use crate::options::Options;
use crate::pending::Pending;
use crate::pool::Pool;
use crate::reverse::Peer;
use crate::session::Session;
use crate::spin;
use crate::tool::Tool;
use crate::writer::{self, Outbox};

/// The least time the final flush gets, even when draining used the whole grace period.
const FLUSH_FLOOR: Duration = Duration::from_millis(200);

/// Capacity of the request queue between the reader and the dispatch side.
const JOB_QUEUE: usize = 256;

/// Why a plugin stopped serving.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The host closed stdin: the normal end.
    InputClosed,
    /// SIGTERM or SIGINT.
    Signal,
    /// A second signal arrived while draining: in-flight invokes were abandoned.
    SecondSignal,
    /// The host stopped reading our stdout.
    OutputBroken,
}

/// How a plugin's serving ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stopped {
    /// What ended it.
    pub reason: StopReason,
    /// Invokes still unfinished when the grace period ran out (their replies are lost).
    pub abandoned: usize,
}

pub(crate) type HealthHook = Box<dyn Fn() -> Health + Send + Sync>;

/// Everything the threads share.
pub(crate) struct Runtime {
    pub name: String,
    pub version: String,
    pub manifest_json: Box<RawValue>,
    pub tools: Vec<Tool>,
    pub uses: Vec<&'static str>,
    pub health: Option<HealthHook>,
    pub opts: Options,
    pub peer: Arc<Peer>,
    pub accepting: AtomicBool,
    pub pool: Pool<InvokeJob>,
    pub events: Notifier,
    jobs: Receiver<Job>,
    /// How long idle threads poll their queue before sleeping (see `spin`).
    spin: Duration,
}

/// The parts of a plugin the runtime needs.
pub(crate) struct Parts {
    pub name: String,
    pub version: String,
    pub manifest_json: Box<RawValue>,
    pub tools: Vec<Tool>,
    pub capabilities: Vec<String>,
    pub uses: Vec<&'static str>,
    pub health: Option<HealthHook>,
    pub opts: Options,
}

/// Serves until the input ends, the output breaks, or (with `signals`) SIGTERM/SIGINT.
/// Blocks for the whole life of the plugin.
pub(crate) fn serve<R, W>(parts: Parts, input: R, output: W, signals: bool) -> Result<Stopped>
where
    R: Read + Send + 'static,
    W: Write + Send + 'static,
{
    let (events, notifier) = events::channel()?;
    let mut signal_ids = Vec::new();
    if signals {
        for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
            signal_ids.push(signal_hook::low_level::pipe::register(
                sig,
                notifier.socket()?,
            )?);
        }
    }
    let (outbox, inbox) = writer::channel();
    let (jobs_tx, jobs_rx) = bounded(JOB_QUEUE);
    let writer_events = notifier.try_clone()?;
    let writer_spin = spin::effective(parts.opts.spin);
    let writer = spawn("executa-writer", move || {
        writer::run(output, inbox, writer_events, writer_spin)
    })?;
    let rt = Arc::new(Runtime::new(parts, outbox, notifier, jobs_rx));
    let dispatch_rt = rt.clone();
    spawn("executa-dispatch", move || dispatch_rt.work(true))?;
    let reader_rt = rt.clone();
    spawn("executa-reader", move || {
        crate::reader::run(input, reader_rt, jobs_tx)
    })?;

    let mut watch = Watch {
        events,
        signals: 0,
        deadline: None,
    };
    let stopped = supervise(&rt, &mut watch).and_then(|stopped| flush(&rt, &mut watch, stopped));
    for id in signal_ids {
        signal_hook::low_level::unregister(id);
    }
    // The writer thread has either finished or is stuck in a write to a host that stopped
    // reading; it is detached rather than joined so shutdown stays bounded.
    drop(writer);
    stopped
}

/// The main thread's view of the event socket, counting signals: the first one asks for
/// an orderly stop, the second for an immediate one, whatever phase it arrives in.
struct Watch {
    events: Events,
    signals: u32,
    /// When the whole shutdown (drain and flush) must be over; set at the first stop event.
    deadline: Option<Instant>,
}

/// How a bounded wait ended.
enum Wait {
    Got,
    TimedOut,
    SecondSignal,
}

impl Watch {
    /// Waits for `want` until `deadline`, counting the signals that arrive meanwhile.
    fn until(&mut self, want: Event, deadline: Instant) -> Result<Wait> {
        loop {
            match self.events.wait(Some(deadline))? {
                None => return Ok(Wait::TimedOut),
                Some(Event::Signal) => {
                    self.signals += 1;
                    if self.signals >= 2 {
                        return Ok(Wait::SecondSignal);
                    }
                }
                Some(ev) if ev == want => return Ok(Wait::Got),
                Some(_) => {}
            }
        }
    }
}

/// Waits for the first stop event, then drains within the grace period.
fn supervise(rt: &Runtime, watch: &mut Watch) -> Result<Stopped> {
    let reason = loop {
        match watch.events.wait(None)? {
            Some(Event::InputClosed) => break StopReason::InputClosed,
            Some(Event::Signal) => {
                watch.signals += 1;
                break StopReason::Signal;
            }
            Some(Event::OutputBroken) => break StopReason::OutputBroken,
            _ => {}
        }
    };
    log::info!("executa: stopping ({reason:?}); draining in-flight invokes");
    let deadline = Instant::now() + rt.opts.grace;
    watch.deadline = Some(deadline);
    // Requests read before end of input are still served. After a signal, or with no one
    // left to answer, new invokes are refused and calls waiting on the host fail at once,
    // so their invokes can answer within the grace period.
    if reason != StopReason::InputClosed {
        rt.accepting
            .store(false, std::sync::atomic::Ordering::Release);
        rt.peer.pending.close("the plugin is shutting down");
    }
    if rt.pool.drain() {
        return Ok(Stopped {
            reason,
            abandoned: 0,
        });
    }
    match watch.until(Event::Drained, deadline)? {
        Wait::Got => Ok(Stopped {
            reason,
            abandoned: 0,
        }),
        Wait::SecondSignal => {
            log::warn!("executa: second signal: exiting now, abandoning in-flight invokes");
            Ok(Stopped {
                reason: StopReason::SecondSignal,
                abandoned: rt.pool.in_flight(),
            })
        }
        Wait::TimedOut => {
            let abandoned = rt.pool.in_flight();
            log::warn!(
                "executa: {abandoned} invoke(s) still running after the grace period; exiting"
            );
            Ok(Stopped { reason, abandoned })
        }
    }
}

/// Flushes and stops the writer within the grace period; a second signal cuts it short.
fn flush(rt: &Runtime, watch: &mut Watch, stopped: Stopped) -> Result<Stopped> {
    if stopped.reason == StopReason::SecondSignal {
        // The operator wants out now: give the writer only a moment.
        if rt.peer.out.close(Duration::from_millis(100)) {
            watch.until(
                Event::WriterDone,
                Instant::now() + Duration::from_millis(100),
            )?;
        }
        return Ok(stopped);
    }
    // Drain and flush share the grace period; the flush always gets a moment, since a
    // writer with room flushes in microseconds.
    let floor = Instant::now() + FLUSH_FLOOR;
    let deadline = watch.deadline.map_or(floor, |d| d.max(floor));
    // Room for `Close` appears only as the host reads; keep watching for a second signal.
    while !rt.peer.out.close(Duration::from_millis(20)) {
        if Instant::now() >= deadline {
            log::warn!("executa: the host is not reading; unflushed replies are lost");
            return Ok(stopped);
        }
        match watch.until(Event::WriterDone, Instant::now() + Duration::from_millis(1))? {
            Wait::SecondSignal => {
                return Ok(Stopped {
                    reason: StopReason::SecondSignal,
                    ..stopped
                });
            }
            // The writer already stopped (its output broke): nothing left to flush.
            Wait::Got => return Ok(stopped),
            Wait::TimedOut => {}
        }
    }
    match watch.until(Event::WriterDone, deadline)? {
        Wait::SecondSignal => Ok(Stopped {
            reason: StopReason::SecondSignal,
            ..stopped
        }),
        Wait::Got | Wait::TimedOut => Ok(stopped),
    }
}

fn spawn<F: FnOnce() + Send + 'static>(name: &str, f: F) -> Result<thread::JoinHandle<()>> {
    thread::Builder::new()
        .name(name.to_owned())
        .spawn(f)
        .map_err(Error::Io)
}

impl Runtime {
    fn new(parts: Parts, out: Outbox, events: Notifier, jobs: Receiver<Job>) -> Runtime {
        let spin = spin::effective(parts.opts.spin);
        let peer = Arc::new(Peer {
            out,
            pending: Pending::new("ex-"),
            session: Session::default(),
            capabilities: parts.capabilities,
        });
        Runtime {
            name: parts.name,
            version: parts.version,
            manifest_json: parts.manifest_json,
            pool: Pool::new(parts.opts.max_concurrent_invokes),
            tools: parts.tools,
            uses: parts.uses,
            health: parts.health,
            opts: parts.opts,
            peer,
            accepting: AtomicBool::new(true),
            events,
            jobs,
            spin,
        }
    }

    /// The index of a tool by name. Plugins have a handful of tools, so a linear scan of
    /// short strings is as fast as hashing and keeps the binary small.
    pub(crate) fn tool_index(&self, name: &str) -> Option<usize> {
        self.tools.iter().position(|t| t.spec.name == name)
    }

    /// Starts one extra worker thread (already counted by the pool).
    pub(crate) fn spawn_worker(self: &Arc<Self>) {
        let rt = self.clone();
        if let Err(e) = spawn("executa-worker", move || rt.work(false)) {
            log::error!("executa: could not start a worker thread: {e}");
            self.pool.spawn_failed();
        }
    }

    /// The loop of the dispatch thread (`permanent`) and of extra workers, which exit
    /// after `worker_linger` without work.
    fn work(&self, permanent: bool) {
        loop {
            let job = if permanent {
                spin::recv(&self.jobs, self.spin).map_err(|_| RecvTimeoutError::Disconnected)
            } else {
                spin::recv_timeout(&self.jobs, self.spin, self.opts.worker_linger)
            };
            match job {
                Ok(job) => {
                    self.pool.took();
                    // Handlers are already isolated; this guards the runtime's own code so
                    // a bug there cannot leave a thread counted busy forever.
                    if catch_unwind(AssertUnwindSafe(|| self.handle(job))).is_err() {
                        log::error!(
                            "executa: internal error while handling a request (see the panic above)"
                        );
                    }
                    if self.pool.done() {
                        self.events.notify(Event::Drained);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    if self.pool.may_exit() {
                        return;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.pool.exit();
                    return;
                }
            }
        }
    }
}
