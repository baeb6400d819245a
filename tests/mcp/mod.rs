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
        .get_or_init(|| {
            let has_python = Command::new("python3").arg("--version").output().is_ok();
            if !has_python {
                eprintln!(
                    "SKIPPED: python3 is not installed, so the MCP Python SDK tests cannot run"
                );
                return None;
            }
            let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/venv.sh");
            let out = Command::new("bash")
                .arg(script)
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
        })
        .clone()
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
