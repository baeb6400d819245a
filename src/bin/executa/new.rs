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
    Cargo.toml      executa with its `host` feature (TestHost, MemoryStorage and
                    ScriptedSampling for the tests and `cargo doc`; unused, the linker
                    leaves it out of the plugin binary); the size profile
    src/lib.rs      the plugin: `greet` (arguments declared with executa::args!) and
                    `summarize` (one sampling call to the host's LLM)
    src/main.rs     runs it: `fn main() { NAME::plugin().run() }`
    tests/tools.rs  a TestHost test per tool, in-process (no binary)
    README.md       how to build, test, check and publish it

WHERE EXECUTA COMES FROM:
    An executa built from a source tree (`cargo install --path .` or `cargo run` in a
    clone) makes the crate depend on that tree by path, and says so on stderr: the crate
    need not be on crates.io. One installed from a registry uses the published version,
    as does one whose tree is gone (said on stderr).

OPTIONS:
    --executa-path DIR        depend on the executa source tree in DIR
    --executa-version VER     depend on the published executa VER (crates.io)
    --dir PARENT              create NAME inside PARENT [the current directory]
    -h, --help                show this help

EXIT STATUS:
    0 created; 2 usage error, NAME exists, or a file could not be written.
";

pub fn run(mut args: Args) -> Result<ExitCode, Usage> {
    let mut name: Option<String> = None;
    let mut executa_path: Option<String> = None;
    let mut executa_version: Option<String> = None;
    let mut parent = PathBuf::from(".");
    while let Some((flag, inline)) = args.next_arg() {
        match flag.as_str() {
            "-h" | "--help" => return Err(Usage::Help(HELP.to_owned())),
            "--executa-path" => executa_path = Some(args.value(&flag, inline)?),
            "--executa-version" => executa_version = Some(args.value(&flag, inline)?),
            "--dir" => parent = PathBuf::from(args.value(&flag, inline)?),
            f if f.starts_with('-') => return Err(unknown(f)),
            _ if name.is_none() => name = Some(flag),
            _ => return Err(Usage::Error(format!("unexpected argument `{flag}`"))),
        }
    }
    let name = name.ok_or_else(|| Usage::Error("`new` needs the crate's name".to_owned()))?;
    check_name(&name)?;
    let source = match (executa_path, executa_version) {
        (Some(_), Some(_)) => {
            return Err(Usage::Error(
                "`--executa-path` and `--executa-version` exclude each other: a path or a version"
                    .to_owned(),
            ));
        }
        (Some(dir), None) => given_tree(&dir)?,
        (None, Some(version)) => Source::Published(checked_version(&version)?),
        (None, None) => Source::from_build(Path::new(env!("CARGO_MANIFEST_DIR"))),
    };
    let root = parent.join(&name);
    if root.exists() {
        return Err(Usage::Error(format!("{} already exists", root.display())));
    }
    let files = files(&name, &source);
    if let Err(e) = write_all(&root, &files) {
        eprintln!("executa new: {}: {e}", root.display());
        return Ok(ExitCode::from(2));
    }
    if let Some(note) = source.note(&name, &root.join("Cargo.toml")) {
        eprintln!("executa new: {note}");
    }
    println!(
        "Created the plugin crate {shown}. Next:\n    cd {shown}\n    cargo test\n    cargo build --release\n    \
         executa check -- target/release/{name}",
        shown = root.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Where the generated crate takes executa from.
#[derive(Debug, PartialEq)]
enum Source {
    /// `--executa-path DIR`: as asked, so nothing is said.
    Given(PathBuf),
    /// The source tree this executa was built from, still there: the crate needs no
    /// registry. The version its manifest holds now.
    BuiltFrom(PathBuf, String),
    /// A published version: `--executa-version`, or an executa installed from a registry
    /// (which therefore has its version).
    Published(String),
    /// The published version of this executa, because the tree it was built from is gone:
    /// the tree and what became of it.
    TreeGone(PathBuf, String),
}

impl Source {
    /// The source an executa built from `dir` gives a new crate: `dir` itself, unless it is
    /// a registry's copy or it no longer holds this crate.
    fn from_build(dir: &Path) -> Source {
        if is_registry_copy(dir) {
            return Source::Published(env!("CARGO_PKG_VERSION").to_owned());
        }
        let manifest = dir.join("Cargo.toml");
        match std::fs::read_to_string(&manifest) {
            Err(e) => Source::TreeGone(dir.to_owned(), format!("is gone ({e})")),
            Ok(text) if package_field(&text, "name") != Some("executa") => Source::TreeGone(
                dir.to_owned(),
                "no longer holds executa's Cargo.toml".to_owned(),
            ),
            Ok(text) => {
                let version = package_field(&text, "version").unwrap_or("unknown");
                Source::BuiltFrom(dir.to_owned(), version.to_owned())
            }
        }
    }

    /// The source tree depended on by path, if any.
    fn tree(&self) -> Option<&Path> {
        match self {
            Source::Given(dir) | Source::BuiltFrom(dir, _) => Some(dir),
            Source::Published(_) | Source::TreeGone(..) => None,
        }
    }

    /// The version depended on, for a published one.
    fn version(&self) -> &str {
        match self {
            Source::Published(version) => version,
            _ => env!("CARGO_PKG_VERSION"),
        }
    }

    /// The dependency's key and value: `path = "..."` or `version = "..."`.
    fn spec(&self) -> String {
        match self.tree() {
            Some(dir) => format!("path = {}", toml_string(&dir.to_string_lossy())),
            None => format!("version = {}", toml_string(self.version())),
        }
    }

    /// The line stderr gets when the source is not the one the author named: where
    /// executa comes from, why, and the way to the other source.
    fn note(&self, name: &str, manifest: &Path) -> Option<String> {
        let ours = env!("CARGO_PKG_VERSION");
        match self {
            Source::Given(_) | Source::Published(_) => None,
            Source::BuiltFrom(dir, now) => {
                let drift = if now == ours {
                    String::new()
                } else {
                    format!(" (its Cargo.toml now says version {now}; this executa is {ours})")
                };
                Some(format!(
                    "{name} depends on executa by path, {}: the source tree this executa was built \
                     from{drift}, so no crates.io package is needed; to use the published crate \
                     later, write version = \"{ours}\" in place of path = \"...\" in {}, or run \
                     executa new with --executa-version {ours}",
                    dir.display(),
                    manifest.display()
                ))
            }
            Source::TreeGone(dir, what) => Some(format!(
                "{name} depends on the published executa {ours}: the source tree this executa \
                 was built from, {}, {what}; if cargo says `no matching package named `executa` \
                 found`, run executa new again with --executa-path DIR, DIR a clone of executa",
                dir.display()
            )),
        }
    }
}

/// `--executa-path DIR`, checked: a directory holding executa's Cargo.toml.
fn given_tree(dir: &str) -> Result<Source, Usage> {
    let path = Path::new(dir)
        .canonicalize()
        .map_err(|e| Usage::Error(format!("`--executa-path {dir}`: {e}")))?;
    let text = std::fs::read_to_string(path.join("Cargo.toml")).map_err(|e| {
        Usage::Error(format!(
            "`--executa-path {}`: no Cargo.toml there ({e})",
            path.display()
        ))
    })?;
    if package_field(&text, "name") != Some("executa") {
        return Err(Usage::Error(format!(
            "`--executa-path {}`: its Cargo.toml is not executa's (give a clone of executa)",
            path.display()
        )));
    }
    Ok(Source::Given(path))
}

/// `--executa-version VER`, checked to be a version requirement cargo could read
/// (`0.1.0`, `0.1`, `=0.1.2`, `^0.2`), so that a typo fails here rather than in cargo.
fn checked_version(version: &str) -> Result<String, Usage> {
    let first_ok = version.starts_with(|c: char| c.is_ascii_digit() || "^~=<>".contains(c));
    let rest_ok = version
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || ".+-^~=<>*, ".contains(c));
    if first_ok && rest_ok && version.chars().any(|c| c.is_ascii_digit()) {
        Ok(version.to_owned())
    } else {
        Err(Usage::Error(format!(
            "`--executa-version {version}`: not a version (e.g. `{}`)",
            env!("CARGO_PKG_VERSION")
        )))
    }
}

/// A registry's copy of a crate, not a source tree of one's own: cargo unpacks registry
/// crates under `.../registry/src/<index>/NAME-VERSION` (where `cargo install executa`
/// builds), and `cargo vendor` marks its copies with `.cargo-checksum.json`.
fn is_registry_copy(dir: &Path) -> bool {
    let parts: Vec<_> = dir.components().map(|c| c.as_os_str()).collect();
    parts
        .windows(2)
        .any(|w| w[0] == "registry" && w[1] == "src")
        || dir.join(".cargo-checksum.json").is_file()
}

/// The string value of `key` in the `[package]` table of a Cargo.toml (the plain
/// `key = "value"` form, which is how this crate writes its name and version).
fn package_field<'a>(manifest: &'a str, key: &str) -> Option<&'a str> {
    let mut in_package = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package
            && let Some((k, v)) = line.split_once('=')
            && k.trim() == key
        {
            return v.trim().strip_prefix('"')?.split('"').next();
        }
    }
    None
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

fn files(name: &str, source: &Source) -> Vec<(&'static str, String)> {
    let lib = name.replace('-', "_");
    let profile = release_profile();
    let (comment, section, command) = match source.tree() {
        Some(tree) => {
            let tree = tree.to_string_lossy();
            (
                TREE_COMMENT.to_owned(),
                TREE_SECTION.replace("{{tree}}", &tree),
                TREE_COMMAND
                    .replace("{{tree}}", &shell_word(&tree))
                    .replace(
                        "{{manifest}}",
                        &shell_word(&Path::new(&*tree).join("Cargo.toml").to_string_lossy()),
                    ),
            )
        }
        None => (
            PUBLISHED_COMMENT.to_owned(),
            PUBLISHED_SECTION.to_owned(),
            PUBLISHED_COMMAND.to_owned(),
        ),
    };
    let fill = |template: &str| {
        template
            .replace("{{source_comment}}", &comment)
            .replace("{{source_section}}", &section)
            .replace("{{command_section}}", &command)
            .replace("{{name}}", name)
            .replace("{{lib}}", &lib)
            .replace("{{executa}}", &source.spec())
            .replace("{{dep_version}}", source.version())
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

/// `text` as one word for a POSIX shell: as it is when it holds nothing the shell reads
/// specially, else in single quotes.
fn shell_word(text: &str) -> String {
    let plain = text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+:,@%=\\".contains(c));
    if plain && !text.is_empty() {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

const CARGO_TOML: &str = r#"[package]
name = "{{name}}"
version = "0.1.0"
edition = "2024"
publish = false

[dependencies]
{{source_comment}}
# `host` gives the tests (and `cargo doc`) TestHost, MemoryStorage and ScriptedSampling; the
# plugin never calls it, so the linker leaves it out of the release binary (measured on this
# template: within 0.1% of a `default-features = false` build).
executa = { {{executa}}, features = ["host"] }
serde = { version = "1", features = ["derive"] }
serde_json = "1"

# The size profile of executa {{version}}: cargo applies only the profile of the crate being
# built, never a dependency's, so it is copied here.
{{profile}}"#;

const TREE_COMMENT: &str = "\
# executa from a source tree on this machine, so no crates.io package is needed; README.md
# says how to switch to the published crate.";

const PUBLISHED_COMMENT: &str = "\
# The published executa; if cargo cannot find it, README.md says what to do.";

const TREE_SECTION: &str = r#"## Where executa comes from

`Cargo.toml` depends on executa by path, on the source tree `{{tree}}`
(the one the `executa` command was built from, or the one `--executa-path` named), so
executa need not be on crates.io. Builds use that tree as it is; if it moves, point `path`
at its new place or at another clone of executa.

To depend on the published crate instead, write `version = "{{dep_version}}"` in place of
`path = "..."` in `Cargo.toml`. If cargo then says
``no matching package named `executa` found``, your registry does not have executa (it may
not be published yet): go back to `path = "..."`, naming a clone of executa.
"#;

const PUBLISHED_SECTION: &str = r#"## Where executa comes from

`Cargo.toml` depends on the published executa `{{dep_version}}` (crates.io). If cargo says
``no matching package named `executa` found``, your registry does not have executa (it may
not be published yet): depend on a clone of executa instead, writing
`path = "/path/to/executa"` in place of `version = "..."` in `Cargo.toml`, or create the
crate again with `executa new --executa-path /path/to/executa {{name}}`.
"#;

const TREE_COMMAND: &str = r#"## The `executa` command

`executa` is the command-line tool of the executa crate, the one that made this crate. If
it is not on your `PATH`, install it from the source tree this crate depends on, or run it
from there without installing:

```sh
cargo install --path {{tree}}
cargo run --bin executa --manifest-path {{manifest}} -- check -- target/release/{{name}}
```
"#;

const PUBLISHED_COMMAND: &str = r#"## The `executa` command

`executa` is the command-line tool of the executa crate, the one that made this crate. If
it is not on your `PATH`, install it from a clone of executa, or run it from there without
installing:

```sh
cargo install --path /path/to/executa
cargo run --bin executa --manifest-path /path/to/executa/Cargo.toml -- check -- target/release/{{name}}
```
"#;

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

An Executa plugin, made by `executa new` (executa {{version}}).

```sh
cargo test                                  # each tool, in-process (tests/tools.rs)
cargo build --release                       # target/release/{{name}}, small and stripped
executa check -- target/release/{{name}}     # the conformance run the Agent's pitfalls need
executa call --args '{"name":"Ada"}' greet -- target/release/{{name}}
executa call --sampling-cmd 'ollama run llama3' --args '{"text":"..."}' summarize -- target/release/{{name}}
target/release/{{name}} --describe > manifest.json   # the manifest, for publishing
cargo doc --open                            # this crate's docs and executa's, TestHost included
```

Add a tool: declare its arguments in `executa::args!` in `src/lib.rs`, write the handler,
add `.tool(Tool::typed(...))` to `plugin()`, and a test to `tests/tools.rs`.

{{command_section}}
{{source_section}}"#;

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch directory of this test process, emptied.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("executa-new-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        dir
    }

    #[test]
    fn the_tree_it_was_built_from_is_used_while_it_holds_executa() {
        let dir = scratch("tree");
        let manifest =
            "[package]\nname = \"executa\"\nversion = \"9.9.9\"\n\n[dependencies]\nname = \"x\"\n";
        std::fs::write(dir.join("Cargo.toml"), manifest).expect("write");
        let source = Source::from_build(&dir);
        assert_eq!(source, Source::BuiltFrom(dir.clone(), "9.9.9".to_owned()));
        assert!(source.spec().starts_with("path = "), "{}", source.spec());
        let note = source.note("p", Path::new("p/Cargo.toml")).expect("a note");
        assert!(note.contains("now says version 9.9.9"), "{note}");

        // Another crate's tree, then no tree: the published version, and said why.
        std::fs::write(dir.join("Cargo.toml"), "[package]\nname = \"other\"\n").expect("write");
        let source = Source::from_build(&dir);
        assert!(matches!(source, Source::TreeGone(..)), "{source:?}");
        std::fs::remove_dir_all(&dir).expect("remove");
        let source = Source::from_build(&dir);
        assert!(matches!(source, Source::TreeGone(..)), "{source:?}");
        assert_eq!(
            source.spec(),
            format!("version = \"{}\"", env!("CARGO_PKG_VERSION"))
        );
        let note = source.note("p", Path::new("p/Cargo.toml")).expect("a note");
        assert!(note.contains("no matching package named `executa` found"));
        assert!(note.contains("--executa-path"));
    }

    #[test]
    fn a_registry_copy_gives_the_published_version_silently() {
        let registry = scratch("registry");
        let dir = registry.join("registry/src/index.crates.io-1949cf8c6b5b557f/executa-0.1.0");
        std::fs::create_dir_all(&dir).expect("a registry copy");
        std::fs::write(dir.join("Cargo.toml"), "[package]\nname = \"executa\"\n").expect("write");
        let source = Source::from_build(&dir);
        assert_eq!(
            source,
            Source::Published(env!("CARGO_PKG_VERSION").to_owned())
        );
        assert_eq!(source.note("p", Path::new("p/Cargo.toml")), None);
        let vendored = registry.join("vendor/executa");
        std::fs::create_dir_all(&vendored).expect("a vendored copy");
        std::fs::write(vendored.join(".cargo-checksum.json"), "{}").expect("write");
        assert!(is_registry_copy(&vendored));
        assert!(!is_registry_copy(&registry));
        let _ = std::fs::remove_dir_all(&registry);
    }

    #[test]
    fn package_fields_and_versions_are_read_strictly() {
        let manifest =
            "[workspace]\nname = \"no\"\n[package]\nversion=\"1.2.3\"\n name = \"executa\" # ok\n";
        assert_eq!(package_field(manifest, "name"), Some("executa"));
        assert_eq!(package_field(manifest, "version"), Some("1.2.3"));
        assert_eq!(package_field("[package]\nname = executa\n", "name"), None);
        for good in ["0.1.0", "0.1", "=0.1.2", "^0.2", "1.0.0-rc.1"] {
            assert_eq!(checked_version(good).ok().as_deref(), Some(good));
        }
        for bad in ["", "one", "0.1\"", "0.1 }, x = {"] {
            assert!(checked_version(bad).is_err(), "{bad}");
        }
        assert_eq!(shell_word("/work/main"), "/work/main");
        assert_eq!(shell_word("/a b/it's"), r"'/a b/it'\''s'");
    }
}
