//! The official MCP Python SDK for the MCP interop tests: `venv.sh` beside this file
//! installs it once in `target/mcp-venv` (a shared, locked install; `.ci/run` calls it too).

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The virtualenv's python with `mcp` importable, installing it on first use; `None` (with
/// a message saying why the test is skipped) only when this machine has no `python3`.
/// Panics when Python is there but the install fails: that is a failure, not a skip.
pub fn sdk_python() -> Option<PathBuf> {
    static PYTHON: OnceLock<Option<PathBuf>> = OnceLock::new();
    PYTHON
        .get_or_init(|| install("python3", "venv.sh", "the MCP Python SDK"))
        .clone()
}

/// The directory `node.sh` installed the MCP TypeScript SDK into, installing it on first
/// use; `None` (with a message) only when this machine has no `node`. Panics when Node is
/// there but the install fails.
pub fn sdk_node() -> Option<PathBuf> {
    static NODE: OnceLock<Option<PathBuf>> = OnceLock::new();
    NODE.get_or_init(|| install("node", "node.sh", "the MCP TypeScript SDK"))
        .clone()
}

/// Runs the installer `script` (under `tests/mcp/`) when `tool` is on this machine, and
/// returns the path it prints.
fn install(tool: &str, script: &str, what: &str) -> Option<PathBuf> {
    if Command::new(tool).arg("--version").output().is_err() {
        eprintln!("SKIPPED: {tool} is not installed, so the tests of {what} cannot run");
        return None;
    }
    let script = format!("{}/tests/mcp/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("bash")
        .arg(&script)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {script}: {e}"));
    assert!(
        out.status.success(),
        "{script} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Some(PathBuf::from(path))
}

/// Runs `script` (a file under `tests/mcp/`) with the SDK's python and `args`; returns
/// (success, stdout, stderr). The script itself bounds its waits.
pub fn run_script(python: &PathBuf, script: &str, args: &[&str]) -> (bool, String, String) {
    let path = format!("{}/tests/mcp/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(python)
        .arg(&path)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {path}: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
