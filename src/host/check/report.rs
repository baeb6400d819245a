//! The settings of a conformance run and its report, one line per check.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::host::{HostOptions, Service};

/// The tool name used to probe unknown-tool handling.
pub const UNKNOWN_TOOL: &str = "__executa_check_no_such_tool__";
/// The line used to probe malformed-input handling.
pub const MALFORMED_LINE: &[u8] = b"{this is not JSON";

/// Which tool the smoke invoke calls.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Smoke {
    /// Every tool, with arguments synthesized from its declared parameters
    /// ([`sample_arguments`](crate::host::sample_arguments)).
    #[default]
    Auto,
    /// This tool with these arguments.
    Tool {
        /// The tool name.
        name: String,
        /// Its arguments.
        arguments: Value,
    },
    /// No smoke invoke.
    Off,
}

/// Settings of a conformance run.
#[derive(Clone)]
pub struct CheckOptions {
    /// Timeouts and the shutdown window. The default is the Agent's: 5 s for
    /// `initialize` and `describe`, 5 s for the plugin to exit after stdin closes.
    pub host: HostOptions,
    /// The smoke invoke.
    pub smoke: Smoke,
    /// Timeout of each `invoke` sent by the check.
    pub call_timeout: Duration,
    /// How long to wait for the answer to the malformed line.
    pub probe_timeout: Duration,
    /// What answers `sampling/createMessage`: `None` for the echoing
    /// [`ScriptedSampling`](crate::host::ScriptedSampling), or another backend such as
    /// [`CommandSampling`](crate::host::CommandSampling).
    pub sampling: Option<Arc<dyn Service>>,
    /// What answers `storage/*`: `None` for a
    /// [`MemoryStorage`](crate::host::MemoryStorage) granting the scopes production
    /// grants (`user`, `tool`), or another backend such as
    /// [`DirStorage::with_scopes`](crate::host::DirStorage::with_scopes). Calls it refuses
    /// with -32021 are reported as scope mistakes either way.
    pub storage: Option<Arc<dyn Service>>,
}

impl fmt::Debug for CheckOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckOptions")
            .field("host", &self.host)
            .field("smoke", &self.smoke)
            .field("call_timeout", &self.call_timeout)
            .field("probe_timeout", &self.probe_timeout)
            .field("sampling", &self.sampling.as_ref().map(|_| "custom"))
            .field("storage", &self.storage.as_ref().map(|_| "custom"))
            .finish()
    }
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            host: HostOptions::default(),
            smoke: Smoke::Auto,
            call_timeout: Duration::from_secs(10),
            probe_timeout: Duration::from_secs(2),
            sampling: None,
            storage: None,
        }
    }
}

/// The verdict of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// As the platform expects.
    Pass,
    /// Accepted, but worth fixing.
    Warn,
    /// The platform would reject or misread this.
    Fail,
    /// Not run (the plugin was gone, or nothing to check).
    Skip,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Outcome::Pass => "PASS",
            Outcome::Warn => "WARN",
            Outcome::Fail => "FAIL",
            Outcome::Skip => "SKIP",
        })
    }
}

/// One line of the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckLine {
    /// What was checked.
    pub name: String,
    /// The verdict.
    pub outcome: Outcome,
    /// Why.
    pub detail: String,
}

impl fmt::Display for CheckLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}  {:<18} {}", self.outcome, self.name, self.detail)
    }
}

/// The whole report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Every line, in order.
    pub lines: Vec<CheckLine>,
}

impl Report {
    /// No line failed.
    pub fn passed(&self) -> bool {
        self.count(Outcome::Fail) == 0
    }

    /// How many lines have this outcome.
    pub fn count(&self, outcome: Outcome) -> usize {
        self.lines.iter().filter(|l| l.outcome == outcome).count()
    }

    /// The line named `name`, if there is one.
    pub fn line(&self, name: &str) -> Option<&CheckLine> {
        self.lines.iter().find(|l| l.name == name)
    }

    /// The failed lines.
    pub fn failures(&self) -> impl Iterator<Item = &CheckLine> {
        self.lines.iter().filter(|l| l.outcome == Outcome::Fail)
    }
}

/// The report being written, and who is told of each line as it is decided.
pub(super) struct Run<'a> {
    pub(super) report: Report,
    pub(super) on_line: Box<dyn FnMut(&CheckLine) + 'a>,
}

impl Run<'_> {
    pub(super) fn push(&mut self, name: &str, outcome: Outcome, detail: impl Into<String>) {
        let line = CheckLine {
            name: name.to_owned(),
            outcome,
            detail: detail.into(),
        };
        (self.on_line)(&line);
        self.report.lines.push(line);
    }
}
