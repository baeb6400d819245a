//! `executa new NAME`: a plugin crate that builds, passes `cargo test` and `executa check`
//! as generated.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::cli::{Args, Usage, unknown};

pub const HELP: &str = "\
executa new: start a plugin crate

USAGE:
    executa new [OPTIONS] <NAME>

Creates the directory NAME holding a plugin crate that builds, passes `cargo test` and
`executa check` as generated:
    Cargo.toml      executa without its host side (default-features = false) for the
                    plugin, with it (`host`) for the tests; the size profile
    src/lib.rs      the plugin: `greet` (arguments declared with executa::args!) and
                    `summarize` (one sampling call to the host's LLM)
    src/main.rs     runs it: `fn main() { NAME::plugin().run() }`
    tests/tools.rs  a TestHost test per tool, in-process (no binary)
    README.md       how to build, test, check and publish it

OPTIONS:
    --executa-path DIR   depend on the executa checkout in DIR instead of the published
                         version (offline work, unreleased changes)
    --dir PARENT         create NAME inside PARENT [the current directory]
    -h, --help           show this help

EXIT STATUS:
    0 created; 2 usage error, NAME exists, or a file could not be written.
";

pub fn run(mut args: Args) -> Result<ExitCode, Usage> {
    let mut name: Option<String> = None;
    let mut executa_path: Option<String> = None;
    let mut parent = PathBuf::from(".");
    while let Some((flag, inline)) = args.next_arg() {
        match flag.as_str() {
            "-h" | "--help" => return Err(Usage::Help(HELP.to_owned())),
            "--executa-path" => executa_path = Some(args.value(&flag, inline)?),
            "--dir" => parent = PathBuf::from(args.value(&flag, inline)?),
            f if f.starts_with('-') => return Err(unknown(f)),
            _ if name.is_none() => name = Some(flag),
            _ => return Err(Usage::Error(format!("unexpected argument `{flag}`"))),
        }
    }
    let name = name.ok_or_else(|| Usage::Error("`new` needs the crate's name".to_owned()))?;
    check_name(&name)?;
    let dependency = match executa_path {
        Some(dir) => {
            let dir = Path::new(&dir)
                .canonicalize()
                .map_err(|e| Usage::Error(format!("`--executa-path {dir}`: {e}")))?;
            if !dir.join("Cargo.toml").is_file() {
                return Err(Usage::Error(format!(
                    "`--executa-path {}`: no Cargo.toml there",
                    dir.display()
                )));
            }
            format!("path = {}", toml_string(&dir.to_string_lossy()))
        }
        None => format!("version = \"{}\"", env!("CARGO_PKG_VERSION")),
    };
    let root = parent.join(&name);
    if root.exists() {
        return Err(Usage::Error(format!("{} already exists", root.display())));
    }
    let files = files(&name, &dependency);
    if let Err(e) = write_all(&root, &files) {
        eprintln!("executa new: {}: {e}", root.display());
        return Ok(ExitCode::from(2));
    }
    println!(
        "Created the plugin crate {shown}. Next:\n    cd {shown}\n    cargo test\n    cargo build --release\n    \
         executa check -- target/release/{name}",
        shown = root.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// A crate name cargo accepts, and that is also a plugin name: ASCII letters, digits,
/// `-` and `_`, starting with a letter, and none of the names `cargo new` refuses, with
/// its words: Rust's keywords, `test`, cargo's own folders. Also refused, where cargo only
/// warns: the standard library's crates (the new crate would not build), `gen` (reserved
/// in edition 2024, which the new crate uses), and the names Windows reserves for devices
/// (cargo refuses those on Windows only; a plugin meant for every platform is refused them
/// everywhere).
fn check_name(name: &str) -> Result<(), Usage> {
    let ok = name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && name.len() <= 64;
    if !ok {
        return Err(Usage::Error(format!(
            "`{name}` is not a crate name: ASCII letters, digits, `-` and `_`, starting with a letter"
        )));
    }
    match refusal(name) {
        None => Ok(()),
        Some(why) => Err(Usage::Error(format!(
            "invalid package name `{name}`: {why}"
        ))),
    }
}

/// Rust's keywords, reserved words included (edition 2024, which the new crate uses).
const KEYWORDS: &[&str] = &[
    "Self", "abstract", "as", "async", "await", "become", "box", "break", "const", "continue",
    "crate", "do", "dyn", "else", "enum", "extern", "false", "final", "fn", "for", "gen", "if",
    "impl", "in", "let", "loop", "macro", "match", "mod", "move", "mut", "override", "priv", "pub",
    "ref", "return", "self", "static", "struct", "super", "trait", "true", "try", "type", "typeof",
    "unsafe", "unsized", "use", "virtual", "where", "while", "yield",
];

/// Why `cargo new` refuses `name` (already checked to be ASCII letters, digits, `-`, `_`).
fn refusal(name: &str) -> Option<&'static str> {
    let crate_name = name.replace('-', "_");
    let lower = name.to_ascii_lowercase();
    if KEYWORDS.contains(&crate_name.as_str()) {
        Some("it is a Rust keyword")
    } else if crate_name == "test" {
        Some("it conflicts with Rust's built-in test library")
    } else if ["core", "std", "alloc", "proc_macro"].contains(&crate_name.as_str()) {
        Some("it conflicts with Rust's standard library (a crate of that name does not build)")
    } else if ["deps", "examples", "build", "incremental"].contains(&name) {
        Some("it conflicts with cargo's build directory names")
    } else if ["con", "prn", "aux", "nul"].contains(&lower.as_str())
        || (lower.len() == 4
            && (lower.starts_with("com") || lower.starts_with("lpt"))
            && lower.ends_with(|c: char| ('1'..='9').contains(&c)))
    {
        Some("it is a reserved Windows filename")
    } else {
        None
    }
}

/// A TOML basic string.
fn toml_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn write_all(root: &Path, files: &[(&str, String)]) -> std::io::Result<()> {
    for (path, text) in files {
        let path = root.join(path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&path, text)?;
    }
    Ok(())
}

/// This crate's own `[profile.release]` section (the size profile), copied so the two
/// never drift apart: a dependency's profile never reaches the binary built from it.
/// (`tests/host_new.rs` checks the generated crate has it.)
fn release_profile() -> String {
    const MANIFEST: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"));
    let mut out = String::new();
    let mut inside = false;
    for line in MANIFEST.lines() {
        if line.starts_with('[') {
            inside = line.trim() == "[profile.release]";
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.trim_end().to_owned() + "\n"
}

fn files(name: &str, dependency: &str) -> Vec<(&'static str, String)> {
    let lib = name.replace('-', "_");
    let profile = release_profile();
    let fill = |template: &str| {
        template
            .replace("{{name}}", name)
            .replace("{{lib}}", &lib)
            .replace("{{executa}}", dependency)
            .replace("{{profile}}", &profile)
            .replace("{{version}}", env!("CARGO_PKG_VERSION"))
    };
    vec![
        ("Cargo.toml", fill(CARGO_TOML)),
        ("src/lib.rs", fill(LIB_RS)),
        ("src/main.rs", fill(MAIN_RS)),
        ("tests/tools.rs", fill(TESTS_RS)),
        ("README.md", fill(README_MD)),
        (".gitignore", "/target\n".to_owned()),
    ]
}

const CARGO_TOML: &str = r#"[package]
name = "{{name}}"
version = "0.1.0"
edition = "2024"
publish = false

[dependencies]
# The plugin needs only the runtime: `host` (the host side, TestHost) stays out of the binary.
executa = { {{executa}}, default-features = false }
serde = { version = "1", features = ["derive"] }
serde_json = "1"

[dev-dependencies]
# The tests drive the plugin in-process with executa::testing::TestHost, behind `host`.
executa = { {{executa}}, features = ["host"] }

# The size profile of executa {{version}}: cargo applies only the profile of the crate being
# built, never a dependency's, so it is copied here.
{{profile}}"#;

const LIB_RS: &str = r#"//! The `{{name}}` plugin. [`plugin`] builds it: `src/main.rs` runs it on stdio, and the tests
//! in `tests/` drive it in-process with `executa::testing::TestHost`.

use executa::{CreateMessage, Invocation, Plugin, Tool, ToolError};
use serde_json::{Value, json};

executa::args! {
    /// The `greet` tool's arguments: the manifest's parameter list is made from these lines.
    pub struct GreetArgs {
        /// Who to greet
        pub name: String,
        /// End with an exclamation mark
        pub excited: bool = false,
    }

    /// The `summarize` tool's arguments.
    pub struct SummarizeArgs {
        /// The text to summarize
        pub text: String,
        /// Upper bound on the summary's length, in words
        pub max_words: u32 = 60,
    }
}

/// Greets someone by name. An empty name is a tool error (`success: false`).
pub fn greet(args: GreetArgs, _ctx: &Invocation) -> Result<Value, ToolError> {
    if args.name.trim().is_empty() {
        return Err(ToolError::new("name must not be empty"));
    }
    let mark = if args.excited { "!" } else { "." };
    Ok(json!({ "greeting": format!("Hello, {}{mark}", args.name) }))
}

/// Summarizes a text with the host's LLM: one `sampling/createMessage` call, which needs
/// the `llm.sample` capability.
pub fn summarize(args: SummarizeArgs, ctx: &Invocation) -> Result<Value, ToolError> {
    if args.text.trim().is_empty() {
        return Err(ToolError::new("nothing to summarize: `text` is empty"));
    }
    let prompt = format!(
        "Summarize in at most {} words:\n\n{}",
        args.max_words, args.text
    );
    let request = CreateMessage::new(prompt, u64::from(args.max_words) * 3)
        .system("You write faithful, concise summaries. Never invent facts.");
    // Blocks until the host answers, at most the call's timeout and the invoke's deadline.
    let answer = ctx.sampling().create_message(&request)?;
    Ok(json!({ "summary": answer.text(), "model": answer.model }))
}

/// The plugin: its manifest and its tools.
pub fn plugin() -> Plugin {
    Plugin::new("{{name}}", env!("CARGO_PKG_VERSION"))
        .description("Greets people and summarizes texts")
        .capability("llm.sample")
        .tool(Tool::typed("greet", "Returns a greeting for a person", greet))
        .tool(Tool::typed(
            "summarize",
            "Summarizes a text with the host's LLM",
            summarize,
        ))
}
"#;

const MAIN_RS: &str = r#"fn main() {
    // Serves stdin/stdout until EOF or SIGTERM; `--describe`, `--help` and `--version`
    // answer and exit.
    {{lib}}::plugin().run()
}
"#;

const TESTS_RS: &str = r##"//! Each tool, in-process: `TestHost` runs the plugin without a binary and answers its
//! calls to the host (storage in memory, sampling echoed or scripted).

use executa::host::{MemoryStorage, ScriptedSampling};
use executa::testing::TestHost;
use serde_json::json;

#[test]
fn greet_greets_and_says_what_is_wrong() -> executa::Result<()> {
    let mut host = TestHost::start({{lib}}::plugin())?;
    let out = host.invoke("greet", json!({ "name": "Ada", "excited": true }))?;
    assert_eq!(out.data(), Some(&json!({ "greeting": "Hello, Ada!" })));

    // A tool error: `{"success": false, "error": ...}`.
    let out = host.invoke("greet", json!({ "name": " " }))?;
    assert_eq!(out.error(), Some("name must not be empty"));

    // Arguments of the wrong type: a JSON-RPC error, -32602, naming the argument.
    let out = host.invoke("greet", json!({ "name": 7 }))?;
    let error = out.rpc_error().expect("a -32602 error");
    assert_eq!(error.code, -32602);
    assert_eq!(error.data, Some(json!({ "path": "name" })));
    Ok(())
}

#[test]
fn summarize_asks_the_model_once() -> executa::Result<()> {
    let script = ScriptedSampling::from_jsonl(
        r#"{"match": {"contains": "Summarize"}, "result": {"text": "A short summary."}}"#,
    )?;
    let mut host = TestHost::start_with({{lib}}::plugin(), MemoryStorage::new(), script)?;
    let out = host.invoke("summarize", json!({ "text": "A long text about many things." }))?;
    assert_eq!(
        out.data().map(|d| &d["summary"]),
        Some(&json!("A short summary."))
    );
    // The calls the tool made to the host, in order.
    assert_eq!(out.reverse_calls, vec!["sampling/createMessage"]);

    let out = host.invoke("summarize", json!({ "text": "" }))?;
    assert_eq!(out.error(), Some("nothing to summarize: `text` is empty"));
    assert!(out.reverse_calls.is_empty());
    Ok(())
}
"##;

const README_MD: &str = r#"# {{name}}

An Executa plugin, built with [executa](https://crates.io/crates/executa) {{version}}.

```sh
cargo test                                  # each tool, in-process (tests/tools.rs)
cargo build --release                       # target/release/{{name}}, small and stripped
executa check -- target/release/{{name}}     # the conformance run the Agent's pitfalls need
executa call --args '{"name":"Ada"}' greet -- target/release/{{name}}
executa call --sampling-cmd 'ollama run llama3' --args '{"text":"..."}' summarize -- target/release/{{name}}
target/release/{{name}} --describe > manifest.json   # the manifest, for publishing
```

`executa` is the command-line tool of the executa crate: `cargo install executa`.

Add a tool: declare its arguments in `executa::args!` in `src/lib.rs`, write the handler,
add `.tool(Tool::typed(...))` to `plugin()`, and a test to `tests/tools.rs`.
"#;
