//! `executa check`: a conformance run of any plugin against what the Agent expects, one
//! line per check, catching each documented pitfall that is visible on the wire.
//!
//! The run starts the plugin, sends `initialize`, `describe`, `health`, an `invoke` of an
//! unknown tool, a smoke `invoke`, and a malformed line, watching stdout for anything that
//! is not a frame, then closes stdin and times the exit. Each step becomes a [`CheckLine`].
//!
//! Here the run's order; the settings and the report in `check/report.rs`, each step in
//! `check/steps.rs`, the verdicts on what a step saw in `check/judge.rs`.

mod judge;
mod report;
mod steps;

use std::sync::{Arc, Mutex};

use self::report::Run;
pub use self::report::{
    CheckLine, CheckOptions, MALFORMED_LINE, Outcome, Report, Smoke, UNKNOWN_TOOL,
};
use self::steps::{Checker, ProgressSeen, ScopeWatch};
use super::{Handlers, MemoryStorage, PluginCommand, PluginProcess, ScriptedSampling};
use crate::lock::lock;

/// Runs the conformance check and returns the report. Blocks for the run: a few
/// milliseconds for a good plugin, up to the configured timeouts for a bad one.
pub fn run(cmd: &PluginCommand, opts: &CheckOptions) -> Report {
    run_with(cmd, opts, |_| {})
}

/// Like [`run`], calling `on_line` as each line is decided (to print progressively).
pub fn run_with(
    cmd: &PluginCommand,
    opts: &CheckOptions,
    on_line: impl FnMut(&CheckLine),
) -> Report {
    let mut run = Run {
        report: Report::default(),
        on_line: Box::new(on_line),
    };
    let mut host = opts.host.clone();
    // Reverse calls get the in-memory backends, behind the Agent's gates, so that a
    // missing capability shows up as it would in production (pitfall #8).
    host.dev_tokens = true;
    let events = Arc::new(Mutex::new(ProgressSeen::default()));
    let seen = events.clone();
    // Storage grants only the scopes production grants plugins (pitfall #12).
    let storage = Arc::new(ScopeWatch {
        inner: opts
            .storage
            .clone()
            .unwrap_or_else(|| Arc::new(MemoryStorage::with_scopes(&["user", "tool"]))),
        refused: Mutex::new(Vec::new()),
    });
    let sampling = opts
        .sampling
        .clone()
        .unwrap_or_else(|| Arc::new(ScriptedSampling::echo()));
    let handlers = Handlers::new().service(storage.clone()).service(sampling);
    let handlers = handlers.on_progress(move |p| {
        let mut s = lock(&seen);
        s.total += 1;
        if !p.active {
            s.uncorrelated += 1;
        }
    });
    let process = match PluginProcess::spawn(cmd, host, handlers) {
        Ok(p) => p,
        Err(e) => {
            run.push("start", Outcome::Fail, format!("cannot start `{cmd}`: {e}"));
            return run.report;
        }
    };
    let checker = Checker { p: &process, opts };
    let handshake = process.initialize();
    if let Some(why) = checker.refused_to_start(&handshake) {
        run.push("start", Outcome::Fail, why);
        process.shutdown_with(&opts.host.shutdown);
        return run.report;
    }
    run.push(
        "start",
        Outcome::Pass,
        format!("`{cmd}` running as pid {}", process.pid()),
    );
    checker.initialize(&mut run, handshake);
    let manifest = checker.describe(&mut run);
    checker.health(&mut run);
    checker.unknown_tool(&mut run);
    checker.smoke(&mut run, manifest.as_deref());
    checker.reverse_calls(&mut run);
    checker.storage_scopes(&mut run, &storage);
    checker.progress(&mut run, &events);
    checker.malformed(&mut run);
    let alive = checker.stays_alive(&mut run);
    checker.shutdown(&mut run, alive);
    // Judged last: what a plugin prints on its way out (after stdin closes) counts too,
    // and the shutdown has let the reader drain stdout to its end.
    checker.stdout(&mut run);
    run.report
}
