//! The CLI's interrupts (SIGINT, SIGTERM, SIGHUP; on Windows Ctrl-C, Ctrl-Break and the
//! console's close): whatever the command started is ended by its full shutdown sequence
//! before the CLI exits, with the status a shell expects (130, 143, 129). The plugin leads
//! a process group of its own, so a Ctrl-C at the terminal reaches only the CLI, and a CLI
//! that died of it would leave the plugin running with parent 1.
//!
//! One thread waits for interrupts. On the first it starts the teardown on a thread of its
//! own, which ends every plugin process (`executa::host::shutdown_all`) and runs what the
//! command registered ([`at_end`]: stopping sampling commands, waiting for the bench's
//! plugin), then exits. A second interrupt meanwhile (or one while the command ends by
//! itself) kills the plugins at once (`executa::host::kill_all`) instead of waiting out
//! their grace periods. A command that
//! ends by itself calls [`finish`], which runs the same registered ends, or, when an
//! interrupt's teardown is under way, waits for it to exit the process.

use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::process::ExitCode;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use executa::host::{Interrupt, Interrupts};

type End = Arc<dyn Fn() + Send + Sync>;

enum Phase {
    Running,
    /// An interrupt's teardown runs; it exits the process.
    Interrupted,
    /// The command is ending by itself ([`finish`]); interrupts are ignored.
    Ending,
}

struct State {
    phase: Phase,
    ends: Vec<End>,
}

static STATE: Mutex<State> = Mutex::new(State {
    phase: Phase::Running,
    ends: Vec::new(),
});
/// Where [`finish`] waits while an interrupt's teardown ends the process.
static PARKED: Condvar = Condvar::new();

/// How long [`finish`] waits for an interrupt's teardown to exit the process: its steps
/// are bounded (one shutdown sequence, 15 s; `bench`'s close, 30 s), so this is a
/// backstop that is never reached while the teardown works.
const TEARDOWN_WAIT: Duration = Duration::from_secs(120);

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Catches the interrupts for the rest of the command. Without them (the handlers could
/// not be installed, which is logged) an interrupt ends the CLI at once, as before.
pub fn catch() {
    let mut interrupts = match Interrupts::catch() {
        Ok(i) => i,
        Err(e) => {
            log::warn!("executa: interrupts are not caught ({e}); a Ctrl-C may orphan the plugin");
            return;
        }
    };
    let watcher = std::thread::Builder::new()
        .name("executa-interrupts".into())
        // Waits for the CLI's whole life: an interrupt may come at any time.
        .spawn(move || watch(&mut interrupts));
    if let Err(e) = watcher {
        log::warn!("executa: interrupts are not watched ({e})");
    }
}

/// The first interrupt starts the teardown; the next ones, or one that comes while the
/// command ends by itself (its own shutdown sequence may be waiting out a plugin's grace
/// periods), hurry it.
fn watch(interrupts: &mut Interrupts) {
    while let Some(signal) = interrupts.wait() {
        if begin_teardown() {
            let spawned = std::thread::Builder::new()
                .name("executa-teardown".into())
                .spawn(move || teardown(signal));
            if spawned.is_err() {
                teardown(signal); // no thread to spare: no hurrying either
            }
        } else {
            say(format_args!("{}: killing what is left", signal.name()));
            executa::host::kill_all();
        }
    }
}

/// Whether an interrupt's teardown is under way (for loops that must stop and let it end
/// their plugin: `bench`'s).
pub fn interrupted() -> bool {
    matches!(state().phase, Phase::Interrupted)
}

/// Registers `end`, run once as the command ends: by [`finish`], or by an interrupt's
/// teardown. It must return within a bound of its own.
pub fn at_end(end: impl Fn() + Send + Sync + 'static) {
    state().ends.push(Arc::new(end));
}

/// The command's end: runs what [`at_end`] registered and returns `code`. When an
/// interrupt's teardown is under way, waits for it instead: it ends the processes and
/// exits with the interrupt's status, so this does not return then (unless the teardown
/// has not exited after [`TEARDOWN_WAIT`]).
pub fn finish(code: ExitCode) -> ExitCode {
    let ends = {
        // Nothing notifies: this waits for the teardown's exit.
        let (mut s, _) = PARKED
            .wait_timeout_while(state(), TEARDOWN_WAIT, |s| {
                matches!(s.phase, Phase::Interrupted)
            })
            .unwrap_or_else(|e| e.into_inner());
        if matches!(s.phase, Phase::Interrupted) {
            return ExitCode::from(1);
        }
        s.phase = Phase::Ending;
        std::mem::take(&mut s.ends)
    };
    for end in ends {
        end();
    }
    code
}

/// Moves to [`Phase::Interrupted`] unless the command is already ending.
fn begin_teardown() -> bool {
    let mut s = state();
    if !matches!(s.phase, Phase::Running) {
        return false;
    }
    s.phase = Phase::Interrupted;
    true
}

/// A line on stderr, or nothing: after a hang-up the terminal is gone, and the teardown
/// must go on.
fn say(what: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr(), "executa: {what}");
}

/// Ends every plugin process and runs the registered ends, all at once, then exits, even
/// if one of them panicked.
fn teardown(signal: Interrupt) -> ! {
    say(format_args!(
        "{}: stopping what this command started",
        signal.name()
    ));
    let ends = std::mem::take(&mut state().ends);
    let _ = catch_unwind(AssertUnwindSafe(|| {
        std::thread::scope(|scope| {
            let mut here = Vec::new();
            for end in &ends {
                let run = end.clone();
                let ran = std::thread::Builder::new().spawn_scoped(scope, move || {
                    let _ = catch_unwind(AssertUnwindSafe(|| run()));
                });
                if ran.is_err() {
                    here.push(end); // no thread to spare: after the plugins' sequences
                }
            }
            executa::host::shutdown_all();
            for end in here {
                let _ = catch_unwind(AssertUnwindSafe(|| end()));
            }
        });
    }));
    std::process::exit(signal.exit_code().into())
}
