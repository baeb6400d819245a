//! The supervisor thread of a [`Host`](super::Host): restarts the plugin with exponential
//! backoff after an unexpected exit, as the Agent does (3 attempts from a 1 s base by
//! default), and re-reads the manifest each time.

use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, RecvTimeoutError};

use super::core::{Core, HostState, Session};
use super::exit::Event;
use crate::lock::lock;

/// Blocks on the event queue: between exits the supervisor has nothing else to do. Ends on
/// [`Event::Stop`] (sent by `Host::shutdown`, which `Host`'s drop runs).
pub(crate) fn run(core: &Core, events: &Receiver<Event>) {
    while let Ok(event) = events.recv() {
        match event {
            Event::Stop => return,
            Event::Exited(generation) => {
                if !on_exit(core, generation, events) {
                    return;
                }
            }
        }
    }
}

/// Handles one exit; `false` when the host is stopping.
fn on_exit(core: &Core, generation: u64, events: &Receiver<Event>) -> bool {
    let policy = core.opts.restart.clone();
    let Some((dead, mut attempt)) = record_exit(core, generation) else {
        return lock(&core.slot).state != HostState::Stopped;
    };
    // Reap it (or make it exit, if it only closed its stdout). `Host::shutdown` finds it
    // in `retiring` meanwhile, and waits for this.
    let report = dead.process.shutdown();
    log::debug!("[plugin:{}] previous process {report}", core.label);
    {
        let mut slot = lock(&core.slot);
        if slot
            .retiring
            .as_ref()
            .is_some_and(|p| Arc::ptr_eq(p, &dead.process))
        {
            slot.retiring = None;
        }
    }
    drop(dead);
    // After `shutdown_all` the program is ending: nothing is started again.
    if super::live::is_final() {
        core.set_state(HostState::Stopped);
        return false;
    }
    if !policy.enabled {
        return true;
    }
    loop {
        attempt += 1;
        lock(&core.slot).attempt = attempt;
        if attempt > policy.max_attempts {
            let last = lock(&core.slot).last_exit.clone().unwrap_or_default();
            let why = gave_up(policy.max_attempts, &last);
            log::error!("[plugin:{}] {why}", core.label);
            return core.set_state(HostState::Failed(why));
        }
        if !core.set_state(HostState::Restarting {
            attempt,
            of: policy.max_attempts,
        }) {
            return false;
        }
        let delay = policy.delay(attempt);
        log::warn!(
            "[plugin:{}] restarting in {:.3}s (attempt {attempt} of {})",
            core.label,
            delay.as_secs_f64(),
            policy.max_attempts
        );
        if !backoff(events, Instant::now() + delay) {
            return false;
        }
        match core.launch(false) {
            Ok(session) => {
                let pid = session.process.pid();
                return match core.install(session, true) {
                    Ok(()) => {
                        log::info!("[plugin:{}] restarted (pid {pid})", core.label);
                        true
                    }
                    Err(session) => {
                        session.process.shutdown();
                        false
                    }
                };
            }
            Err(e) => {
                log::warn!(
                    "[plugin:{}] restart attempt {attempt} failed: {e}",
                    core.label
                );
                lock(&core.slot).last_exit = Some(e.to_string());
            }
        }
    }
}

/// Takes the exited session out of the slot and, in the same locked step, records why it
/// ended and moves to `Restarting` (or `Failed` when restarts are disabled or spent), so
/// that no observer sees `Running` without a process. Returns the dead session and the
/// attempts spent so far; `None` for an exit of a process that is not the serving one
/// (its start failed, or it was replaced), or when the host has stopped.
fn record_exit(core: &Core, generation: u64) -> Option<(Arc<Session>, u32)> {
    let policy = &core.opts.restart;
    let mut slot = lock(&core.slot);
    if slot.state == HostState::Stopped {
        return None;
    }
    if !matches!(&slot.session, Some(s) if s.generation == generation) {
        return None;
    }
    let dead = slot.session.take()?;
    slot.retiring = Some(dead.process.clone());
    let reason = dead
        .process
        .disconnect_reason()
        .unwrap_or_else(|| format!("plugin `{}` closed its stdout", core.label));
    if dead.started.elapsed() >= policy.reset_after {
        slot.attempt = 0;
    }
    slot.state = if !policy.enabled {
        HostState::Failed(format!("{reason}; restarts are disabled"))
    } else if slot.attempt >= policy.max_attempts {
        HostState::Failed(gave_up(policy.max_attempts, &reason))
    } else {
        HostState::Restarting {
            attempt: slot.attempt + 1,
            of: policy.max_attempts,
        }
    };
    slot.last_exit = Some(reason);
    let attempt = slot.attempt;
    drop(slot);
    core.changed.notify_all();
    Some((dead, attempt))
}

fn gave_up(max_attempts: u32, last: &str) -> String {
    format!("gave up after {max_attempts} restart attempts; last failure: {last}")
}

/// Sleeps until `until`, waking early only to stop; `false` when the host is stopping.
/// Exits of processes that failed to start arrive here too and are ignored.
fn backoff(events: &Receiver<Event>, until: Instant) -> bool {
    loop {
        match events.recv_deadline(until) {
            Ok(Event::Stop) | Err(RecvTimeoutError::Disconnected) => return false,
            Ok(Event::Exited(_)) => {}
            Err(RecvTimeoutError::Timeout) => return true,
        }
    }
}
