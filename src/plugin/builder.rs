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
use crate::lint::Severity;
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
    /// every orderly end (stdin closed, SIGTERM/SIGINT, host gone), 1 when the runtime
    /// could not start, 2 when the plugin's definition is refused (see below). Blocks until
    /// then.
    ///
    /// Reads the process's arguments: `--describe` prints the manifest (one line of JSON)
    /// and exits 0, for publishing `manifest.json`; `--help` prints what the plugin is, its
    /// tools and how it is run; `--version` prints its name and version; both exit 0.
    /// Other arguments are ignored. A binary with a command line of its own uses
    /// [`Plugin::run_with_args`] instead.
    ///
    /// Before serving (and before `--describe`), the manifest goes through the same lint
    /// as `executa check` ([`lint`](crate::lint)) and each `.param(...)` list is checked
    /// against its args type: every error is printed on stderr, one line each, and the
    /// process exits 2; warnings are logged. Installs the stderr logger unless the author
    /// installed one (level from `EXECUTA_LOG`). Unless disabled, guards stdout (see
    /// [`Options::stdout_guard`]).
    pub fn run(self) -> ! {
        self.run_with_args(std::env::args_os().skip(1))
    }

    /// [`Plugin::run`] with the arguments given instead of read from the process: pass an
    /// empty list to serve on stdio whatever the binary's own command line is (a plugin
    /// started from a subcommand of a larger program), or `["--describe"]` to print the
    /// manifest. Blocks and exits the process as [`Plugin::run`] does.
    ///
    /// ```no_run
    /// # fn plugin() -> executa::Plugin { executa::Plugin::new("p", "0.1.0") }
    /// // `mytool serve-plugin --verbose`: the plugin never sees `--verbose`.
    /// match std::env::args().nth(1).as_deref() {
    ///     Some("serve-plugin") => plugin().run_with_args(std::iter::empty::<&str>()),
    ///     _ => { /* the program's other subcommands */ }
    /// }
    /// ```
    pub fn run_with_args<I, S>(self, args: I) -> !
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        crate::logger::init_logger();
        let mut describe = false;
        for arg in args {
            match arg.as_ref().to_str() {
                Some("--describe") => describe = true,
                Some("--help" | "-h") => self.exit_with_help(),
                Some("--version" | "-V") => {
                    println!("{} {}", self.manifest.name, self.manifest.version);
                    std::process::exit(0)
                }
                _ => {}
            }
        }
        if describe {
            let parts = self.into_parts().unwrap_or_else(|e| exit_refused(e));
            println!("{}", parts.manifest_json.get());
            std::process::exit(0);
        }
        // No line of its own for the end: the runtime logged why it stopped and what it
        // abandoned, and `Stopped`'s `Debug` cost every plugin binary 700 bytes. A failure
        // is said once: with the stderr logger, a `log::error!` beside the `eprintln!`
        // printed it twice.
        let code = match self.run_stdio() {
            Ok(_) => 0,
            Err(e @ Error::InvalidPlugin(_)) => exit_refused(e),
            Err(e) => {
                eprintln!("executa: the plugin runtime failed: {e}");
                1
            }
        };
        std::process::exit(code)
    }

    fn exit_with_help(&self) -> ! {
        let m = &self.manifest;
        let mut text = format!("{} {}\n{}\n\nTOOLS:\n", m.name, m.version, m.description);
        // Written in place, the rest printed with it: a `format!` per line and a copy
        // each cost more code.
        for t in &self.tools {
            let _ = std::fmt::Write::write_fmt(
                &mut text,
                format_args!("    {:<16} {}\n", t.spec.name, t.spec.description),
            );
        }
        print!(
            "{text}\nAn Executa plugin: it speaks line-delimited JSON-RPC 2.0 on stdin/stdout and is\n\
             started by its host (the Anna Agent, `executa call`/`check`), not by hand.\n\n\
             OPTIONS:\n    --describe   print the manifest as JSON and exit\n\
             \x20   --help       print this help\n    --version    print the name and version\n\
             Logging goes to stderr; set EXECUTA_LOG=debug for more.\n"
        );
        std::process::exit(0)
    }

    fn run_stdio(self) -> Result<Stopped> {
        let guard =
            self.opts.stdout_guard && std::env::var("EXECUTA_STDOUT_GUARD").as_deref() != Ok("0");
        let stdio = crate::sys::take(guard)?;
        let signals = self.opts.handle_signals;
        let parts = self.into_parts()?;
        if std::io::IsTerminal::is_terminal(&stdio.input) {
            say_what_is_awaited(&parts.name, &parts.version);
        }
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
            tools: mut handlers,
            health,
            opts,
        } = self;
        let mut problems: Vec<String> = Vec::new();
        for tool in &mut handlers {
            problems.extend(tool.disagreements());
            problems.extend(tool.returns_problem.take());
            tool.unpublished(&mut problems);
            if tool.params.is_empty()
                && let Some(declared) = tool.declared.take()
            {
                tool.params = declared;
            }
        }
        manifest.tools = handlers.iter().map(Tool::spec).collect();
        let manifest_json = serde_json::to_string(&manifest).and_then(RawValue::from_string)?;
        // The lint reads the manifest exactly as `describe` will send it.
        let value = serde_json::from_str(manifest_json.get())?;
        for finding in crate::lint::lint_manifest(&value) {
            match finding.severity {
                Severity::Error => problems.push(finding.message),
                Severity::Warning => log::warn!("executa: manifest: {}", finding.message),
            }
        }
        if !problems.is_empty() {
            return Err(Error::InvalidPlugin(problems));
        }
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

/// Tells a user who started the plugin by hand in a terminal why it seems to hang: it is
/// waiting for its host. On stderr, so that stdout carries nothing but protocol.
fn say_what_is_awaited(name: &str, version: &str) {
    const WHAT: &str = if cfg!(feature = "mcp") {
        "an Executa plugin and an MCP server"
    } else {
        "an Executa plugin"
    };
    const END: &str = if cfg!(windows) {
        "Ctrl-Z Enter"
    } else {
        "Ctrl-D"
    };
    eprintln!(
        "executa: {name} {version} is {WHAT}: it reads JSON-RPC requests from its host on \
         stdin, one per line, and answers on stdout.\n\
         executa: to try a tool, see `executa call --help`; or type a request, e.g. \
         {{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"describe\"}}; {END} ends."
    );
}

/// Prints why the plugin's definition is refused, one line per problem, and exits 2.
fn exit_refused(e: Error) -> ! {
    match e {
        Error::InvalidPlugin(problems) => {
            for p in problems {
                eprintln!("executa: invalid plugin definition: {p}");
            }
            std::process::exit(2)
        }
        other => {
            eprintln!("executa: the plugin could not start: {other}");
            std::process::exit(1)
        }
    }
}
