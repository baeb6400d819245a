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

use std::io::{self, BufWriter, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::bounded;

use crate::error::Result;
use crate::writer::{self, Inbox};

use super::events::{self, Event, Events, Notifier};
use super::service::{Parts, Service};

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
    let writer_spin = crate::spin::effective(parts.opts.spin);
    let writer = crate::threads::spawn("executa-writer".into(), move || {
        write_loop(output, inbox, writer_events, writer_spin)
    })?;
    let rt = Arc::new(Service::new(parts, outbox, notifier, jobs_rx));
    let dispatch_rt = rt.clone();
    crate::threads::spawn("executa-dispatch".into(), move || dispatch_rt.work(true))?;
    let reader_rt = rt.clone();
    crate::threads::spawn("executa-reader".into(), move || {
        super::reader::run(input, reader_rt, jobs_tx)
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
fn supervise(rt: &Service, watch: &mut Watch) -> Result<Stopped> {
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
fn flush(rt: &Service, watch: &mut Watch, stopped: Stopped) -> Result<Stopped> {
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

/// Runs the writer loop until `Close`, until every sender is gone, or until a write fails.
/// Flushes whenever the queue is empty, so a burst of frames costs one write.
fn write_loop<W: Write>(output: W, inbox: Inbox, events: Notifier, spin: Duration) {
    let mut out = BufWriter::with_capacity(64 * 1024, output);
    match writer::pump(&mut out, &inbox, spin) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
            log::info!("executa: host closed our stdout; stopping");
            events.notify(Event::OutputBroken);
        }
        Err(e) => {
            log::error!("executa: writing to the host failed: {e}");
            events.notify(Event::OutputBroken);
        }
    }
    events.notify(Event::WriterDone);
}
