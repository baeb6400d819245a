//! The supervisor thread of a [`Host`](super::Host): restarts the plugin with exponential
//! backoff after an unexpected exit, as the Agent does (3 attempts from a 1 s base by
//! default), and re-reads the manifest each time.

use std::time::Instant;

use crossbeam_channel::{Receiver, RecvTimeoutError};

use super::client::{Core, HostState};
use super::lock;

/// What the supervisor is told.
pub(crate) enum Event {
    /// The process of this generation closed its stdout (it exited, or will be made to).
    Exited(u64),
    /// The host is shutting down.
    Stop,
}

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
    let dead = {
        let mut slot = lock(&core.slot);
        if slot.state == HostState::Stopped {
            return false;
        }
        match &slot.session {
            Some(s) if s.generation == generation => slot.session.take(),
            // A process that never got installed (its start failed), or an old one.
            _ => return true,
        }
    };
    let Some(dead) = dead else { return true };
    let reason = dead
        .process
        .disconnect_reason()
        .unwrap_or_else(|| format!("plugin `{}` closed its stdout", core.label));
    let uptime = dead.started.elapsed();
    // Reap it (or make it exit, if it only closed its stdout).
    let report = dead.process.shutdown();
    log::debug!("[plugin:{}] previous process {report}", core.label);
    drop(dead);

    let policy = core.opts.restart.clone();
    let mut attempt = {
        let mut slot = lock(&core.slot);
        slot.last_exit = Some(reason.clone());
        if uptime >= policy.reset_after {
            slot.attempt = 0;
        }
        slot.attempt
    };
    if !policy.enabled {
        core.set_state(HostState::Failed(format!(
            "{reason}; restarts are disabled"
        )));
        return true;
    }
    loop {
        attempt += 1;
        lock(&core.slot).attempt = attempt;
        if attempt > policy.max_attempts {
            let last = lock(&core.slot).last_exit.clone().unwrap_or_default();
            let why = format!(
                "gave up after {} restart attempts; last failure: {last}",
                policy.max_attempts
            );
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
        match core.launch() {
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
