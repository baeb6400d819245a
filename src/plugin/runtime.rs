//! Starting the three threads, and the shutdown sequence.
//!
//! ```text
//!   host stdin ──► [executa-reader] ──jobs (8 MiB of lines)──► [executa-dispatch] (+ workers)
//!                       │  settles answers to reverse calls        │ handlers
//!                       ▼  straight into the waiting handler       ▼
//!                  pending table                       out (256 frames) ──► [executa-writer] ──► host stdout
//! ```
//! The reader runs an invoke itself when a slot is free; when it runs longer than
//! `Options::inline`, or another thread calls the host meanwhile, a new reader thread takes
//! over the input (`relay.rs`).
//! The main thread waits for an event (signal, end of input, broken output, the relay's
//! timer), drains in-flight invokes within the grace period, flushes the writer, and
//! returns.

use std::io::{Read, Write};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::unbounded;

use crate::error::Result;

use super::events::{self, Event, Events};
use super::output::Output;
use super::pool::Admission;
use super::relay::Relay;
use super::service::{Parts, Service};

/// The least time the final flush gets, even when draining used the whole grace period.
const FLUSH_FLOOR: Duration = Duration::from_millis(200);

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
    let (mut events, notifier) = events::channel()?;
    let stop_signals = if signals {
        Some(crate::sys::stop_signals(notifier.ringer())?)
    } else {
        None
    };
    // What the host has not read yet, where the platform tells: MCP progress waits on it.
    let unread = crate::sys::unread_probe(&output);
    let (out, inbox) = Output::with_unread(Box::new(output), unread, notifier.try_clone()?);
    // The request queue is bounded by the bytes its jobs hold (`intake.rs`, checked before
    // every send), not by a count: tiny requests are kept up to the same budget as large
    // ones. Crossbeam's list flavour allocates as it fills and frees as it drains.
    let (jobs_tx, jobs_rx) = unbounded();
    let svc = Arc::new(Service::new(parts, out, notifier, jobs_rx));
    events.watch_timer(svc.relay.timer_watch());
    let writer_svc = svc.clone();
    crate::threads::spawn("executa-writer".into(), move || {
        writer_svc.peer.out.write_loop(&inbox);
        writer_svc.writer_done.store(true, Ordering::SeqCst);
        writer_svc.events.notify(Event::WriterDone);
    })?;
    svc.start_thread(true)?;
    super::reader::start(input, svc.clone(), jobs_tx)?;

    let mut watch = Watch {
        events,
        relay: svc.relay.clone(),
        signals: 0,
        deadline: None,
    };
    let stopped = supervise(&svc, &mut watch).and_then(|stopped| flush(&svc, &mut watch, stopped));
    drop(stop_signals);
    // The other threads have finished or are stuck (in a handler past the grace period, or
    // in a write to a host that stopped reading); they are detached, not joined, so shutdown
    // stays bounded.
    stopped
}

/// The main thread's view of the event socket, counting signals: the first one asks for
/// an orderly stop, the second for an immediate one, whatever phase it arrives in.
struct Watch {
    events: Events,
    /// Its timer is looked at whenever it expires, in every phase.
    relay: Arc<Relay>,
    signals: u32,
    /// When the whole shutdown (drain and flush) must be over; set at the first stop event.
    deadline: Option<Instant>,
}

impl Watch {
    /// The next event before `deadline` (`None`: none came). Events only wake the caller,
    /// which then looks at the state itself, so no event can be "used up" by the wrong wait.
    fn next(&mut self, deadline: Option<Instant>) -> Result<Option<Event>> {
        let event = self.events.wait(deadline)?;
        match event {
            Some(Event::Signal) => self.signals += 1,
            Some(Event::Timer) => self.relay.on_timer(),
            _ => {}
        }
        Ok(event)
    }
}

/// Waits for the first stop event, then drains within the grace period.
fn supervise(svc: &Service, watch: &mut Watch) -> Result<Stopped> {
    let reason = loop {
        match watch.next(None)? {
            Some(Event::InputClosed) => break StopReason::InputClosed,
            Some(Event::Signal) => break StopReason::Signal,
            Some(Event::OutputBroken) => break StopReason::OutputBroken,
            _ => {}
        }
    };
    log::info!("executa: stopping ({reason:?}); draining in-flight invokes");
    let deadline = Instant::now() + svc.opts.grace;
    watch.deadline = Some(deadline);
    // End of input: invokes that find a free slot still run (requests read before the end
    // are served), but none may wait for one. A signal or a closed output: none may start,
    // and calls waiting on the host fail at once, so their invokes can end in time.
    if reason == StopReason::InputClosed {
        stop_intake(svc, Admission::NoWaiting, deadline);
    } else {
        stop_everything(svc, deadline);
    }
    let mut quiet = svc.pool.drain();
    loop {
        if watch.signals >= 2 {
            log::warn!("executa: second signal: exiting now, abandoning in-flight invokes");
            return Ok(Stopped {
                reason: StopReason::SecondSignal,
                abandoned: svc.pool.in_flight(),
            });
        }
        // With the output gone no reply can be delivered: only running handlers matter.
        if quiet || (svc.peer.out.is_broken() && svc.pool.running() == 0) {
            return Ok(Stopped {
                reason,
                abandoned: 0,
            });
        }
        match watch.next(Some(deadline))? {
            None => {
                let abandoned = svc.pool.in_flight();
                log::warn!(
                    "executa: {abandoned} invoke(s) still running after the grace period; exiting"
                );
                return Ok(Stopped { reason, abandoned });
            }
            Some(Event::Signal | Event::OutputBroken) => stop_everything(svc, deadline),
            Some(_) => {}
        }
        quiet = svc.pool.drain();
    }
}

/// Narrows intake and answers `SHUTTING_DOWN` to every invoke that was waiting for a slot.
fn stop_intake(svc: &Service, admission: Admission, deadline: Instant) {
    let waiting = svc.pool.restrict(admission);
    if !waiting.is_empty() {
        log::info!(
            "executa: answering {} queued invoke(s) SHUTTING_DOWN",
            waiting.len()
        );
    }
    // The refusals wait for room like any reply, but not past the grace period.
    svc.refuse_waiting(waiting, Some(deadline));
}

/// A signal or a closed output: no invoke may start, and calls waiting on the host fail.
fn stop_everything(svc: &Service, deadline: Instant) {
    stop_intake(svc, Admission::Closed, deadline);
    svc.peer.pending.close("the plugin is shutting down");
}

/// Flushes and stops the writer within the grace period; a second signal cuts it short.
fn flush(svc: &Service, watch: &mut Watch, stopped: Stopped) -> Result<Stopped> {
    if svc.peer.out.is_broken() {
        return Ok(stopped);
    }
    let second = |stopped: Stopped| Stopped {
        reason: StopReason::SecondSignal,
        ..stopped
    };
    // Drain and flush share the grace period; the flush always gets a moment, since a
    // writer with room flushes in microseconds. After a second signal, only a moment.
    let now = Instant::now();
    let deadline = if stopped.reason == StopReason::SecondSignal {
        now + Duration::from_millis(100)
    } else {
        let floor = now + FLUSH_FLOOR;
        watch.deadline.map_or(floor, |d| d.max(floor))
    };
    // Room for `Close` appears only as the host reads; keep watching for a second signal.
    while !svc.peer.out.close(Duration::from_millis(20)) {
        if Instant::now() >= deadline || svc.peer.out.is_broken() {
            log::warn!("executa: the host is not reading; unflushed replies are lost");
            return Ok(stopped);
        }
        watch.next(Some(Instant::now() + Duration::from_millis(1)))?;
        if watch.signals >= 2 && stopped.reason != StopReason::SecondSignal {
            return Ok(second(stopped));
        }
    }
    while !svc.writer_done.load(Ordering::SeqCst) {
        if watch.next(Some(deadline))?.is_none() {
            log::warn!("executa: the host is not reading; unflushed replies are lost");
            return Ok(stopped);
        }
        if watch.signals >= 2 && stopped.reason != StopReason::SecondSignal {
            return Ok(second(stopped));
        }
    }
    Ok(stopped)
}
