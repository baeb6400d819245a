//! The author-facing builder: describe the plugin, add tools, run.

use std::io::{Read, Write};

use serde_json::value::RawValue;

use super::health::Health;
use super::options::Options;
use super::runtime::{self, Stopped};
use super::service::{HealthHook, Parts};
use super::session::init_key;
use super::tool::Tool;
use crate::error::{Error, Result};
use crate::manifest::{CredentialSpec, Manifest};

/// An Executa plugin under construction.
///
/// ```no_run
/// use executa::{Param, Plugin, Tool, ToolError};
/// use serde::Deserialize;
///
/// #[derive(Deserialize)]
/// struct Args { name: String }
///
/// Plugin::new("greeter", "0.1.0")
///     .description("Greets people")
///     .tool(
///         Tool::new("greet", "Says hello", |a: Args, _ctx| {
///             Ok::<_, ToolError>(serde_json::json!({ "greeting": format!("Hello, {}!", a.name) }))
///         })
///         .param(Param::string("name", "Who to greet")),
///     )
///     .run()
/// ```
pub struct Plugin {
    manifest: Manifest,
    tools: Vec<Tool>,
    health: Option<HealthHook>,
    opts: Options,
}

impl Plugin {
    /// A plugin with a name and a SemVer version.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Plugin {
            manifest: Manifest {
                name: name.into(),
                version: version.into(),
                ..Manifest::default()
            },
            tools: Vec::new(),
            health: None,
            opts: Options::default(),
        }
    }

    /// What the plugin does (shown on its card).
    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.manifest.description = text.into();
        self
    }

    /// Display name (defaults to the name).
    pub fn display_name(mut self, text: impl Into<String>) -> Self {
        self.manifest.display_name = Some(text.into());
        self
    }

    /// Author.
    pub fn author(mut self, text: impl Into<String>) -> Self {
        self.manifest.author = Some(text.into());
        self
    }

    /// Homepage URL.
    pub fn homepage(mut self, text: impl Into<String>) -> Self {
        self.manifest.homepage = Some(text.into());
        self
    }

    /// Icon: an emoji or a URL.
    pub fn icon(mut self, text: impl Into<String>) -> Self {
        self.manifest.icon = Some(text.into());
        self
    }

    /// Category (the platform's default is `general`).
    pub fn category(mut self, text: impl Into<String>) -> Self {
        self.manifest.category = Some(text.into());
        self
    }

    /// SPDX license id.
    pub fn license(mut self, text: impl Into<String>) -> Self {
        self.manifest.license = Some(text.into());
        self
    }

    /// Declares a host capability the plugin uses (`llm.sample`, `aps.kv`, `aps.files`,
    /// ...): it goes into the manifest's `host_capabilities`, is claimed in `initialize`,
    /// and unlocks the matching reverse calls.
    pub fn capability(mut self, capability: impl Into<String>) -> Self {
        let cap = capability.into();
        if !self.manifest.host_capabilities.contains(&cap) {
            self.manifest.host_capabilities.push(cap);
        }
        self
    }

    /// Declares a credential read from `context.credentials`.
    pub fn credential(mut self, credential: CredentialSpec) -> Self {
        self.manifest.credentials.push(credential);
        self
    }

    /// Adds a tool.
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.push(tool);
        self
    }

    /// Sets the hook that answers `health`. It runs on a runtime thread and should return
    /// quickly; a panic in it is answered as `status: "error"`.
    pub fn health(mut self, hook: impl Fn() -> Health + Send + Sync + 'static) -> Self {
        self.health = Some(Box::new(hook));
        self
    }

    /// Replaces the runtime options.
    pub fn options(mut self, opts: Options) -> Self {
        self.opts = opts;
        self
    }

    /// The manifest `describe` returns.
    pub fn manifest(&self) -> Manifest {
        let mut m = self.manifest.clone();
        m.tools = self.tools.iter().map(Tool::spec).collect();
        m
    }

    /// Runs the plugin on the process's stdin and stdout and exits the process: code 0 on
    /// every orderly end (stdin closed, SIGTERM/SIGINT, host gone), 1 only when the
    /// runtime could not start. Blocks until then.
    ///
    /// Started with `--describe`, it prints the manifest (one line of JSON) and exits 0, for
    /// publishing `manifest.json`. Installs the stderr logger unless the author installed
    /// one (level from `EXECUTA_LOG`). Unless disabled, guards stdout (see
    /// [`Options::stdout_guard`]).
    pub fn run(self) -> ! {
        crate::logger::init_logger();
        if std::env::args_os().skip(1).any(|a| a == "--describe") {
            let code = match self.into_parts() {
                Ok(parts) => {
                    println!("{}", parts.manifest_json.get());
                    0
                }
                Err(e) => {
                    eprintln!("executa: invalid plugin definition: {e}");
                    1
                }
            };
            std::process::exit(code);
        }
        let code = match self.run_stdio() {
            Ok(stopped) => {
                log::info!("executa: stopped: {stopped:?}");
                0
            }
            Err(e) => {
                log::error!("executa: the plugin runtime failed: {e}");
                eprintln!("executa: the plugin runtime failed: {e}");
                1
            }
        };
        std::process::exit(code)
    }

    fn run_stdio(self) -> Result<Stopped> {
        let guard =
            self.opts.stdout_guard && std::env::var("EXECUTA_STDOUT_GUARD").as_deref() != Ok("0");
        let stdio = crate::sys::take(guard)?;
        let signals = self.opts.handle_signals;
        let parts = self.into_parts()?;
        runtime::serve(parts, stdio.input, stdio.output, signals)
    }

    /// Serves over any reader/writer pair (pipes, sockets, in-memory) instead of stdio,
    /// without signal handling or the stdout guard: for tests and embedding. Blocks until
    /// `input` ends or `output` breaks, drains in-flight invokes within the grace period,
    /// and returns how it stopped.
    pub fn serve<R, W>(self, input: R, output: W) -> Result<Stopped>
    where
        R: Read + Send + 'static,
        W: Write + Send + 'static,
    {
        let parts = self.into_parts()?;
        runtime::serve(parts, input, output, false)
    }

    fn into_parts(self) -> Result<Parts> {
        let Plugin {
            mut manifest,
            tools: handlers,
            health,
            opts,
        } = self;
        manifest.tools = handlers.iter().map(Tool::spec).collect();
        let tools = &manifest.tools;
        if let Some(dup) = tools
            .iter()
            .enumerate()
            .find(|(i, t)| tools[..*i].iter().any(|u| u.name == t.name))
            .map(|(_, t)| t)
        {
            return Err(Error::Protocol(format!(
                "two tools are named `{}`",
                dup.name
            )));
        }
        let manifest_json = serde_json::to_string(&manifest).and_then(RawValue::from_string)?;
        let mut uses: Vec<&'static str> = Vec::new();
        for key in manifest
            .host_capabilities
            .iter()
            .filter_map(|c| init_key(c))
        {
            if !uses.contains(&key) {
                uses.push(key);
            }
        }
        Ok(Parts {
            name: manifest.name,
            version: manifest.version,
            manifest_json,
            tools: handlers,
            capabilities: manifest.host_capabilities,
            uses,
            health,
            opts,
        })
    }
}
