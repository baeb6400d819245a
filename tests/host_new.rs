//! `executa new`: the generated crate builds, passes its own `cargo test` and `executa
//! check` with no FAIL, as generated, following the README's quickstart literally (no
//! `--executa-path`: the crate is not on crates.io, so the `executa` built from this tree
//! must depend on this tree). Slow (it compiles a crate and its dependencies), so the
//! generated crates share one target directory under this repository's, where their
//! dependencies compile once.

mod bounded;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `target/new-crate` under this build's target directory.
fn shared_target() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|p| if p.is_relative() { repo().join(p) } else { p })
        .unwrap_or_else(|| repo().join("target"));
    target.join("new-crate")
}

fn run(cmd: &mut Command) -> Output {
    let out = bounded::output(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn cargo(dir: &Path, args: &[&str]) -> Output {
    run(Command::new(env!("CARGO"))
        .args(args)
        .arg("--offline")
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", shared_target())
        // This test's own cargo settings must not leak into the generated crate's build.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET"))
}

/// `path = "..."` naming this tree as a TOML string, the way `executa new` writes it.
fn this_tree_dependency() -> String {
    let escaped = env!("CARGO_MANIFEST_DIR")
        .replace('\\', "\\\\")
        .replace('"', "\\\"");
    format!("executa = {{ path = \"{escaped}\", features = [\"host\"] }}")
}

/// The quickstart as the README gives it: `executa new demo`, no `--executa-path`, with
/// the `executa` built from this tree. The crate depends on this tree by path (it is not
/// on crates.io) and stderr says so; its `cargo test` passes and `executa check` is clean.
#[test]
fn a_new_crate_builds_passes_its_tests_and_checks_clean() {
    let parent = std::env::temp_dir().join(format!("executa-new-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&parent);
    std::fs::create_dir_all(&parent).expect("a scratch directory");
    let executa = env!("CARGO_BIN_EXE_executa");
    let created = run(Command::new(executa)
        .args(["new", "demo", "--dir"])
        .arg(&parent));
    let said = String::from_utf8_lossy(&created.stderr);
    assert!(
        said.contains("depends on executa by path")
            && said.contains(env!("CARGO_MANIFEST_DIR"))
            && said.contains("built from"),
        "stderr does not say where executa comes from: {said}"
    );
    let dir = parent.join("demo");
    for file in [
        "Cargo.toml",
        "src/lib.rs",
        "src/main.rs",
        "tests/tools.rs",
        "README.md",
    ] {
        assert!(dir.join(file).is_file(), "{file} was not generated");
    }
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).expect("Cargo.toml");
    assert!(manifest.contains(&this_tree_dependency()), "{manifest}");
    assert!(!manifest.contains("executa = { version"), "{manifest}");
    assert!(manifest.contains("opt-level = \"z\""), "{manifest}");
    // A second `new` never overwrites.
    let again = bounded::output(
        Command::new(executa)
            .args(["new", "demo", "--dir"])
            .arg(&parent),
    );
    assert_eq!(again.status.code(), Some(2));

    let tests = cargo(&dir, &["test"]);
    let text = String::from_utf8_lossy(&tests.stdout);
    assert!(text.contains("test result: ok. 2 passed"), "{text}");

    cargo(&dir, &["build"]);
    let bin = shared_target().join("debug").join("demo");
    let check = run(Command::new(executa)
        .args([
            "check",
            "--quiet",
            "--init-timeout",
            "30",
            "--describe-timeout",
            "30",
            "--",
        ])
        .arg(&bin));
    let report = String::from_utf8_lossy(&check.stdout);
    assert!(!report.contains("FAIL"), "{report}");
    assert!(report.contains("PASS  invoke result"), "{report}");
    assert!(report.contains("PASS  reverse calls"), "{report}");
    let _ = std::fs::remove_dir_all(&parent);
}

/// The author's usual mistakes with `args!` fail to compile with a message that names the
/// fix: an enum default written as its wire string, a plain serde type as a field, and a
/// type not declared with `args!` given to `Tool::typed`. (A generated crate, its lib
/// replaced; it shares the target directory above, so it compiles no dependency again.)
#[test]
fn args_mistakes_fail_to_compile_naming_the_fix() {
    let parent = std::env::temp_dir().join(format!("executa-bad-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&parent);
    std::fs::create_dir_all(&parent).expect("a scratch directory");
    run(Command::new(env!("CARGO_BIN_EXE_executa"))
        .args(["new", "mistakes", "--executa-path"])
        .arg(repo())
        .arg("--dir")
        .arg(&parent));
    let dir = parent.join("mistakes");
    let lib = r#"
use executa::{Invocation, Plugin, Tool, ToolError};
use serde::Deserialize;

executa::args! {
    pub enum Speed { Normal = "normal", Fast = "fast" }

    pub struct Order {
        /// How fast
        pub speed: Speed = "normal",
        /// Where to
        pub address: Address,
    }
}

#[derive(Deserialize)]
pub struct Address {
    pub city: String,
}

#[derive(Deserialize)]
pub struct Plain {
    pub x: u32,
}

pub fn plugin() -> Plugin {
    Plugin::new("mistakes", "0.1.0")
        .tool(Tool::typed("order", "Orders", |_a: Order, _c: &Invocation| Ok::<_, ToolError>(1)))
        .tool(Tool::typed("plain", "Plain", |_a: Plain, _c: &Invocation| Ok::<_, ToolError>(1)))
}
"#;
    std::fs::write(dir.join("src/lib.rs"), lib).expect("write src/lib.rs");
    let out = bounded::output(
        Command::new(env!("CARGO"))
            .args(["build", "--offline", "--lib"])
            .current_dir(&dir)
            .env("CARGO_TARGET_DIR", shared_target())
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_BUILD_TARGET"),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the mistakes compiled:\n{stderr}");
    for hint in [
        "not its wire string",
        "`Address` cannot be the type of an `args!` field",
        "goes inside the `executa::args! { ... }` block",
        "`Plain` has no parameter list for `Tool::typed`",
        "declare `Plain` inside `executa::args! { ... }`",
    ] {
        assert!(stderr.contains(hint), "no {hint:?} in:\n{stderr}");
    }
    let _ = std::fs::remove_dir_all(&parent);
}

/// `executa new` refuses every name `cargo new` refuses, in cargo's words (cargo itself is
/// the oracle), and a few more that would not build or not check out on Windows; it
/// creates nothing for any of them, and takes an ordinary name.
#[test]
fn names_cargo_new_refuses_are_refused_with_its_reason() {
    let parent = std::env::temp_dir().join(format!("executa-names-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&parent);
    std::fs::create_dir_all(&parent).expect("a scratch directory");
    let oracle = parent.join("cargo");
    std::fs::create_dir_all(&oracle).expect("a scratch directory");
    let ours = |name: &str| {
        bounded::output(
            Command::new(env!("CARGO_BIN_EXE_executa"))
                .args(["new", name, "--dir"])
                .arg(&parent),
        )
    };
    for name in [
        "fn", "self", "crate", "Self", "async", "test", "try", "dyn", "deps",
    ] {
        let cargo = bounded::output(
            Command::new(env!("CARGO"))
                .args(["new", "--vcs", "none", "--quiet", name])
                .current_dir(&oracle),
        );
        assert!(!cargo.status.success(), "cargo new {name} was accepted");
        let cargo_says = String::from_utf8_lossy(&cargo.stderr);
        let reason = cargo_says
            .split(&format!("invalid package name `{name}`: "))
            .nth(1)
            .and_then(|rest| rest.lines().next())
            .unwrap_or_else(|| panic!("cargo's reason for {name}: {cargo_says}"))
            .trim()
            .to_owned();
        let out = ours(name);
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {said}");
        assert!(
            said.contains(&format!("invalid package name `{name}`: {reason}")),
            "{name}: cargo says {reason:?}, executa said {said}"
        );
        assert!(!parent.join(name).exists(), "{name} was created");
    }
    for name in ["std", "core", "gen", "con", "COM3", "lpt1"] {
        let out = ours(name);
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {said}");
        assert!(said.contains("invalid package name"), "{name}: {said}");
        assert!(!parent.join(name).exists(), "{name} was created");
    }
    let out = ours("a-fn");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(parent.join("a-fn").join("Cargo.toml").exists());
    let _ = std::fs::remove_dir_all(&parent);
}

/// `cargo doc` in a generated crate documents what its own tests use: `TestHost`,
/// `MemoryStorage` and `ScriptedSampling` live behind executa's `host` feature, which the
/// crate's normal dependency must therefore enable (a dev-dependency's features never reach
/// `cargo doc`). Only executa's pages are made (`-p executa --no-deps`), with the features
/// the generated crate resolves, as a plain `cargo doc` there would.
#[test]
fn a_new_crates_docs_show_what_its_tests_use() {
    let parent = std::env::temp_dir().join(format!("executa-doc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&parent);
    std::fs::create_dir_all(&parent).expect("a scratch directory");
    run(Command::new(env!("CARGO_BIN_EXE_executa"))
        .args(["new", "documented", "--executa-path"])
        .arg(repo())
        .arg("--dir")
        .arg(&parent));
    let dir = parent.join("documented");
    cargo(&dir, &["doc", "--no-deps", "-p", "executa"]);
    // `all.html` is written again by every rustdoc run (unlike the item pages, which a run
    // with fewer features leaves behind), so it lists exactly what the last run documented.
    let all = shared_target().join("doc").join("executa").join("all.html");
    let index = std::fs::read_to_string(&all).unwrap_or_else(|e| panic!("{}: {e}", all.display()));
    for page in [
        "struct.TestHost.html",
        "struct.MemoryStorage.html",
        "struct.ScriptedSampling.html",
    ] {
        assert!(index.contains(page), "no {page} in {}", all.display());
    }
    let _ = std::fs::remove_dir_all(&parent);
}

/// What `executa new` says about where executa comes from, and what the generated README
/// tells the author: never `cargo install executa` (not on crates.io), always the fix for
/// cargo's `no matching package named `executa` found`. `--executa-version` asks for the
/// published crate; it and `--executa-path` exclude each other. Nothing is built.
#[test]
fn new_names_where_executa_comes_from_and_the_fix() {
    let parent = std::env::temp_dir().join(format!("executa-source-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&parent);
    std::fs::create_dir_all(&parent).expect("a scratch directory");
    let new = |args: &[&str]| {
        bounded::output(
            Command::new(env!("CARGO_BIN_EXE_executa"))
                .arg("new")
                .args(args)
                .arg("--dir")
                .arg(&parent),
        )
    };
    let read = |path: &str| {
        std::fs::read_to_string(parent.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let fix = "no matching package named `executa` found";

    // From this tree: by path, one line on stderr naming the path, why, and the way back.
    let out = new(&["local"]);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = said.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line on stderr: {said}");
    for part in [
        env!("CARGO_MANIFEST_DIR"),
        "built from",
        "version = \"0.1.0\"",
        "--executa-version",
    ] {
        assert!(lines[0].contains(part), "no {part:?} in {said}");
    }
    let manifest = read("local/Cargo.toml");
    assert!(manifest.contains(&this_tree_dependency()), "{manifest}");
    let readme = read("local/README.md");
    assert!(!readme.contains("cargo install executa"), "{readme}");
    assert!(readme.contains(env!("CARGO_MANIFEST_DIR")), "{readme}");
    assert!(readme.contains(fix), "{readme}");
    assert!(readme.contains("cargo run --bin executa"), "{readme}");

    // The published crate, asked for: a version dependency, and the README's fix for when
    // the registry does not have it.
    let out = new(&["published", "--executa-version", "0.1.0"]);
    assert!(out.status.success(), "{out:?}");
    let manifest = read("published/Cargo.toml");
    assert!(
        manifest.contains("executa = { version = \"0.1.0\", features = [\"host\"] }"),
        "{manifest}"
    );
    let readme = read("published/README.md");
    assert!(!readme.contains("cargo install executa"), "{readme}");
    assert!(readme.contains(fix), "{readme}");
    assert!(readme.contains("--executa-path"), "{readme}");

    // Both, or a version that is not one: usage errors, nothing created.
    let out = new(&["both", "--executa-version", "0.1.0", "--executa-path", "."]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = new(&["badversion", "--executa-version", "one"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(!parent.join("both").exists() && !parent.join("badversion").exists());
    let _ = std::fs::remove_dir_all(&parent);
}
