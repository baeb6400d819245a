//! The local parts of `executa call` and `check`: `--sampling-cmd` (a command answers
//! sampling), `--storage-dir` (storage survives between calls), and the one verdict for a
//! plugin that refuses to start.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{everything_bin, example_bin};
use serde_json::{Value, json};

/// `executa COMMAND ARGS -- PLUGIN`, with windows far past the Agent's 5 s (a loaded
/// machine must not fake a stall).
fn executa(args: &[&str], plugin: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_executa"))
        .arg(args[0])
        .args([
            "--quiet",
            "--init-timeout",
            "30",
            "--describe-timeout",
            "30",
        ])
        .args(&args[1..])
        .arg("--")
        .arg(plugin)
        .output()
        .expect("run executa")
}

fn call(args: &[&str]) -> (Output, Value) {
    let mut all = vec!["call"];
    all.extend_from_slice(args);
    let out = executa(&all, &everything_bin());
    let text = String::from_utf8_lossy(&out.stdout);
    let value = serde_json::from_str(&text).unwrap_or(Value::Null);
    (out, value)
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("executa-local-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
#[cfg(unix)] // its sampling command is a sh command line (`tr`, `>&2`)
fn sampling_cmd_answers_with_the_commands_stdout() {
    let args = json!({ "prompt": "hello from the plugin" }).to_string();
    let (out, v) = call(&["--sampling-cmd", "tr a-z A-Z", "--args", &args, "sample"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(v["data"]["text"], "HELLO FROM THE PLUGIN", "{v}");
    assert_eq!(v["data"]["model"], "local-command");

    // A failing command is the plugin's sampling error, quoting the command's stderr.
    let failing = "echo 'model not found' >&2; exit 3";
    let (out, v) = call(&["--sampling-cmd", failing, "--args", &args, "sample"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let error = v["error"].as_str().unwrap_or_default();
    assert!(error.contains("exit status: 3"), "{v}");
    assert!(error.contains("model not found"), "{v}");
}

#[test]
fn storage_dir_keeps_a_value_from_one_call_to_the_next() {
    let dir = scratch("storage");
    let dir_arg = dir.to_str().expect("a UTF-8 temp path");
    let set = json!({ "key": "colour", "value": { "name": "teal" } }).to_string();
    let (out, v) = call(&["--storage-dir", dir_arg, "--args", &set, "remember"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(v["data"]["stored"], true, "{v}");
    assert!(dir.join("storage.json").exists());

    let get = json!({ "key": "colour" }).to_string();
    let (out, v) = call(&["--storage-dir", dir_arg, "--args", &get, "recall"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        v["data"],
        json!({ "exists": true, "value": { "name": "teal" } })
    );
    // Without the directory, a new call starts from an empty store.
    let (_, v) = call(&["--args", &get, "recall"]);
    assert_eq!(v["data"]["exists"], false, "{v}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn storage_dir_refuses_a_file_it_cannot_read_and_leaves_it_as_it_is() {
    let dir = scratch("foreign");
    std::fs::create_dir_all(&dir).expect("make the directory");
    let file = dir.join("storage.json");
    // An entry added by hand, without the etag this backend gives every entry.
    let text = r#"{"generation": 1, "entries": [{"scope": "user", "key": "a", "value": 1}]}"#;
    std::fs::write(&file, text).expect("write the file");
    let dir_arg = dir.to_str().expect("a UTF-8 temp path");
    let set = json!({ "key": "b", "value": 2 }).to_string();
    let (out, _) = call(&["--storage-dir", dir_arg, "--args", &set, "remember"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(stderr.contains(&file.display().to_string()), "{stderr}");
    assert!(stderr.contains("no `etag`"), "{stderr}");
    assert_eq!(
        std::fs::read(&file).expect("read the file"),
        text.as_bytes()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn processes_sharing_a_storage_dir_fail_no_call_and_lose_no_value() {
    let dir = scratch("shared");
    let dir_arg = dir.to_str().expect("a UTF-8 temp path").to_owned();
    let (writers, calls) = (3, 12);
    std::thread::scope(|scope| {
        for w in 0..writers {
            let dir_arg = &dir_arg;
            scope.spawn(move || {
                for i in 0..calls {
                    let set = json!({ "key": format!("p{w}/{i}"), "value": i }).to_string();
                    let (out, v) = call(&["--storage-dir", dir_arg, "--args", &set, "remember"]);
                    assert!(out.status.success(), "p{w}/{i}: {out:?}");
                    assert_eq!(v["data"]["stored"], true, "{v}");
                }
            });
        }
    });
    let store = executa::host::DirStorage::open(&dir).expect("read the directory back");
    for w in 0..writers {
        for i in 0..calls {
            assert_eq!(
                store.value("user", &format!("p{w}/{i}")),
                Some(json!(i)),
                "p{w}/{i}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[cfg(unix)] // its sampling command is a sh command line (`tr`, `>&2`)
fn check_takes_the_local_backends_too() {
    let dir = scratch("check");
    let dir_arg = dir.to_str().expect("a UTF-8 temp path");
    let args = json!({ "prompt": "ping" }).to_string();
    let out = executa(
        &[
            "check",
            "--sampling-cmd",
            "tr a-z A-Z",
            "--storage-dir",
            dir_arg,
            "--invoke",
            "sample",
            "--args",
            &args,
        ],
        &everything_bin(),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("PASS  invoke result"), "{text}");
    assert!(text.contains("PASS  reverse calls"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_gives_a_plugin_that_refuses_to_start_one_verdict_with_its_reason() {
    let out = executa(&["check"], &example_bin("misdeclared"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{text}");
    let failed: Vec<&str> = text.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert_eq!(failed.len(), 1, "{text}");
    // The exit as `std` shows an `ExitStatus`: "exit code: 2" on Windows.
    let exit = if cfg!(windows) {
        "exit code: 2"
    } else {
        "exit status: 2"
    };
    assert!(
        failed[0].starts_with(&format!(
            "FAIL  start              refused to start ({exit}): invalid plugin definition: "
        )),
        "{text}"
    );
    // The plugin's own reasons, each once.
    for reason in [
        "`version` \"1.0\" is not SemVer",
        "parameter `qty` in .param(...) is not a field of the args type",
        "unknown capability \"storage.user\"",
        "tool `note`: field `text` of its args type is not published",
        "did you mean `llm.sample`?",
    ] {
        assert_eq!(failed[0].matches(reason).count(), 1, "{reason}: {text}");
    }
    assert!(!text.contains("stays alive"), "{text}");
}
