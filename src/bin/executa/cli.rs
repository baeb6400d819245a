//! std-only argument parsing shared by the subcommands.

use std::collections::VecDeque;
use std::time::Duration;

use std::sync::Arc;

use executa::host::{
    CommandSampling, DirStorage, HostOptions, McpVersion, PluginCommand, Protocol, Service,
    StderrRelay,
};
use serde_json::Value;

/// Why parsing stopped: help was asked for, or the command line is wrong.
pub enum Usage {
    /// Print this and exit 0.
    Help(String),
    /// Print this with a hint and exit 2.
    Error(String),
}

/// The arguments after the command name, with the plugin command split off at `--`.
pub struct Args {
    tokens: VecDeque<String>,
    plugin: Option<Vec<String>>,
}

impl Args {
    pub fn new(argv: Vec<String>) -> Self {
        let mut tokens: VecDeque<String> = argv.into();
        let plugin = tokens.iter().position(|t| t == "--").map(|i| {
            let rest = tokens.split_off(i);
            rest.into_iter().skip(1).collect()
        });
        Args { tokens, plugin }
    }

    pub fn next_token(&mut self) -> Option<String> {
        self.tokens.pop_front()
    }

    /// The next option or positional: `(flag, inline value)` for `--flag=value`.
    pub fn next_arg(&mut self) -> Option<(String, Option<String>)> {
        let token = self.tokens.pop_front()?;
        if token.starts_with("--")
            && let Some((flag, value)) = token.split_once('=')
        {
            return Some((flag.to_owned(), Some(value.to_owned())));
        }
        Some((token, None))
    }

    /// The value of `flag`: inline (`--flag=v`) or the next token.
    pub fn value(&mut self, flag: &str, inline: Option<String>) -> Result<String, Usage> {
        inline
            .or_else(|| self.tokens.pop_front())
            .ok_or_else(|| Usage::Error(format!("`{flag}` needs a value")))
    }

    /// The plugin command after `--`.
    pub fn plugin(&mut self) -> Result<PluginCommand, Usage> {
        let argv = self.plugin.take().unwrap_or_default();
        PluginCommand::from_argv(&argv).ok_or_else(|| {
            Usage::Error(
                "missing the plugin command: put it after `--`, e.g. `-- python3 plugin.py`"
                    .to_owned(),
            )
        })
    }
}

/// Options every command accepts.
pub struct Common {
    pub host: HostOptions,
}

impl Common {
    pub fn new() -> Self {
        Common {
            host: HostOptions::default(),
        }
    }

    /// Applies a common flag; `Ok(false)` when `flag` is not one.
    pub fn apply(
        &mut self,
        args: &mut Args,
        flag: &str,
        inline: Option<String>,
        help: &str,
    ) -> Result<bool, Usage> {
        match flag {
            "-h" | "--help" => return Err(Usage::Help(help.to_owned())),
            "--init-timeout" => {
                self.host.initialize_timeout = secs(flag, &args.value(flag, inline)?)?
            }
            "--describe-timeout" => {
                self.host.describe_timeout = secs(flag, &args.value(flag, inline)?)?
            }
            "--first-launch" => self.host.first_launch = true,
            "--quiet" => self.host.stderr = StderrRelay::Quiet,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// Seconds, fractions allowed.
pub fn secs(flag: &str, text: &str) -> Result<Duration, Usage> {
    text.parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| Usage::Error(format!("`{flag}` takes seconds, got {text:?}")))
}

/// `--protocol executa|mcp|auto`.
pub fn protocol(flag: &str, text: &str) -> Result<Protocol, Usage> {
    match text {
        "executa" => Ok(Protocol::Executa),
        "mcp" => Ok(Protocol::Mcp),
        "auto" => Ok(Protocol::Auto),
        _ => Err(Usage::Error(format!(
            "`{flag}` takes executa, mcp or auto, got {text:?}"
        ))),
    }
}

/// The help lines of `--protocol`, for the commands that take it (default auto).
macro_rules! protocol_help {
    () => {
        "    --protocol P                 executa, mcp (an MCP stdio server) or auto: the
                                 Executa initialize, going on in MCP when the answer
                                 names a dated MCP revision [auto]
"
    };
}
pub(crate) use protocol_help;

/// `--mcp-version auto|legacy|REVISION`.
pub fn mcp_version(flag: &str, text: &str) -> Result<McpVersion, Usage> {
    text.parse()
        .map_err(|why| Usage::Error(format!("`{flag}` takes {why}")))
}

/// The protocol a command uses once `--mcp-version` is known: a revision pinned says the
/// child is an MCP server, so `auto` (whose Executa `initialize` would settle an MCP
/// server in the handshake era) becomes `mcp`.
pub fn with_pin(protocol: Protocol, version: &McpVersion) -> Protocol {
    match (protocol, version) {
        (Protocol::Auto, McpVersion::Pinned(_)) => Protocol::Mcp,
        (p, _) => p,
    }
}

/// The help lines of `--mcp-version`, for the commands that take it (default auto).
macro_rules! mcp_version_help {
    () => {
        "    --mcp-version V              the MCP revision to speak to an MCP server: auto
                                 (server/discover at 2026-07-28 first, adopted when the
                                 server names it, else the initialize handshake), legacy
                                 (the handshake only, proposing 2025-11-25), or one
                                 revision and no other: 2026-07-28 (stateless), 2025-11-25,
                                 2025-06-18, 2025-03-26, 2024-11-05 (a revision implies
                                 --protocol mcp). `--protocol auto` meets an MCP server
                                 with Executa's initialize, a handshake: it stays in the
                                 handshake era [auto]
"
    };
}
pub(crate) use mcp_version_help;

pub fn count(flag: &str, text: &str) -> Result<usize, Usage> {
    text.parse::<usize>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| Usage::Error(format!("`{flag}` takes a positive integer, got {text:?}")))
}

pub fn json_arg(flag: &str, text: &str) -> Result<Value, Usage> {
    serde_json::from_str(text).map_err(|e| Usage::Error(format!("`{flag}` is not valid JSON: {e}")))
}

pub fn unknown(flag: &str) -> Usage {
    Usage::Error(format!("unknown option `{flag}`"))
}

/// How long the CLI's end waits for a killed sampling command to be reaped.
const SAMPLING_STOP_WAIT: Duration = Duration::from_secs(5);

/// The local backends `--sampling-cmd CMD` and `--storage-dir DIR` choose (`call`, `check`).
#[derive(Default)]
pub struct Local {
    pub sampling_cmd: Option<String>,
    pub storage_dir: Option<String>,
}

/// The help lines of the two flags, shared by the commands that take them (a macro, so
/// `concat!` can put it inside their `HELP` texts).
macro_rules! local_help {
    () => {
        "    --sampling-cmd CMD   answer sampling/createMessage by running `sh -c CMD`
                         (`cmd /C CMD` on Windows): the prompt (the messages as text)
                         on its stdin, its stdout the answer (80 s and 1 MiB at most;
                         a failure is a -32003 error quoting its stderr). Any model
                         CLI reading stdin serves, e.g.
                         --sampling-cmd 'ollama run llama3'
    --storage-dir DIR    keep storage/* in DIR/storage.json, so values survive between
                         runs (created when missing)
"
    };
}

impl Local {
    /// Takes `flag` when it is one of the two; `Ok(false)` otherwise.
    pub fn apply(
        &mut self,
        args: &mut Args,
        flag: &str,
        inline: Option<String>,
    ) -> Result<bool, Usage> {
        match flag {
            "--sampling-cmd" => self.sampling_cmd = Some(args.value(flag, inline)?),
            "--storage-dir" => self.storage_dir = Some(args.value(flag, inline)?),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The sampling backend `--sampling-cmd` asks for, if it was given. Its commands
    /// still running when the CLI ends are stopped then (interrupted or not).
    pub fn sampling(&self) -> Option<Arc<dyn Service>> {
        let cmd = Arc::new(CommandSampling::new(self.sampling_cmd.clone()?));
        let running = cmd.clone();
        crate::interrupt::at_end(move || {
            running.stop_running(SAMPLING_STOP_WAIT);
        });
        Some(cmd)
    }

    /// The storage backend `--storage-dir` asks for (granting `scopes`), if it was given.
    pub fn storage(&self, scopes: &[&str]) -> Result<Option<Arc<dyn Service>>, Usage> {
        let Some(dir) = &self.storage_dir else {
            return Ok(None);
        };
        match DirStorage::with_scopes(dir, scopes) {
            Ok(s) => Ok(Some(Arc::new(s))),
            Err(e) => Err(Usage::Error(format!("`--storage-dir {dir}`: {e}"))),
        }
    }
}
