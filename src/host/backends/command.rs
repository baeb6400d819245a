//! `sampling/createMessage` answered by a local command: the prompt goes to the command's
//! stdin, its stdout is the answer's text. Any model CLI that reads a prompt on stdin
//! serves (`llm`, `ollama run MODEL`, a script), and so does `tr a-z A-Z` in a test.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::RecvTimeoutError;
use serde_json::Value;

use super::sampling::ScriptedSampling;
use crate::error::RpcError;
use crate::host::service::{ReverseCall, Service};

/// How long one command may run unless told otherwise (the plugin's own sampling call
/// waits 90 s at most; the host answers before that).
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(80);
/// The most stdout taken as an answer unless told otherwise.
pub const DEFAULT_MAX_OUTPUT: usize = 1024 * 1024;
/// The most stderr kept for an error message.
const STDERR_KEPT: usize = 2048;
/// The code a failed command is answered with: the sampling family's provider error.
const PROVIDER_ERROR: i64 = -32003;

/// Answers `sampling/createMessage` by running a shell command (`sh -c CMD`) once per
/// call, the prompt on its stdin and its stdout (trailing newlines removed) the answer's
/// text, in the documented result shape (`model` is `local-command`).
///
/// The prompt: with one message and no `systemPrompt`, that message's text alone;
/// otherwise a transcript, one paragraph per part (`system: ...`, `user: ...`,
/// `assistant: ...`). The request is checked and the Agent's budgets applied as
/// [`ScriptedSampling`] does them (8192 `maxTokens` a call, 8 calls and 32,000 tokens an
/// invoke, tokens estimated from the text).
///
/// Bounded: the command runs at most [`CommandSampling::timeout`] (default 80 s, and never
/// past the call's own `_clientTimeoutS`), and at most [`CommandSampling::max_output`]
/// bytes of stdout are taken (default 1 MiB); past either, its whole process group is
/// killed and the call is answered -32003 `PROVIDER_ERROR`. So is a non-zero exit, with
/// the end of its stderr in the message. Not quick: calls are answered off the host's
/// reader thread, several at once when the plugin makes several.
#[derive(Debug)]
pub struct CommandSampling {
    command: String,
    timeout: Duration,
    max_output: usize,
    budgets: ScriptedSampling,
}

impl CommandSampling {
    /// Runs `command` with `sh -c` for each call.
    pub fn new(command: impl Into<String>) -> Self {
        CommandSampling {
            command: command.into(),
            timeout: DEFAULT_COMMAND_TIMEOUT,
            max_output: DEFAULT_MAX_OUTPUT,
            budgets: ScriptedSampling::echo().with_model("local-command"),
        }
    }

    /// Sets how long one run may take.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the most stdout bytes taken as an answer.
    pub fn max_output(mut self, bytes: usize) -> Self {
        self.max_output = bytes;
        self
    }

    /// Runs the command on `prompt`; its stdout, or why not. Blocks up to `timeout`.
    fn run(&self, prompt: String, timeout: Duration) -> Result<String, String> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(&self.command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group, so a timeout stops what it started too.
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start `sh -c {}`: {e}", self.command))?;
        let stdin = child.stdin.take();
        // Written from its own thread: a command that answers before it has read all of
        // its input must not wedge us on a full pipe. A command that never reads makes
        // the write fail (broken pipe) once it exits, or is killed at the timeout.
        let writer = std::thread::spawn(move || {
            if let Some(mut stdin) = stdin {
                let _ = stdin.write_all(prompt.as_bytes());
            }
        });
        let stderr = child.stderr.take().map(|e| drain(e, STDERR_KEPT));
        let (tx, rx) = crossbeam_channel::bounded(1);
        let stdout = child.stdout.take();
        let limit = self.max_output;
        std::thread::spawn(move || {
            let mut out = Vec::new();
            if let Some(s) = stdout {
                // One byte past the limit says "too much" without reading on.
                let _ = s.take(limit as u64 + 1).read_to_end(&mut out);
            }
            let _ = tx.send(out);
        });
        let outcome = match rx.recv_timeout(timeout) {
            Ok(out) if out.len() > limit => {
                Err(format!("wrote more than {limit} bytes on stdout (stopped)"))
            }
            Ok(out) => Ok(out),
            Err(RecvTimeoutError::Timeout) => Err(format!(
                "did not finish within {:.0} s (stopped)",
                timeout.as_secs_f64()
            )),
            Err(RecvTimeoutError::Disconnected) => Err("its stdout reader failed".to_owned()),
        };
        if outcome.is_err() {
            let _ = crate::sys::send_signal_group(child.id(), libc::SIGKILL);
        }
        let status = reap(&mut child, outcome.is_ok());
        // Whatever it left running in the background (holding stderr open) goes too.
        let _ = crate::sys::send_signal_group(child.id(), libc::SIGKILL);
        let _ = writer.join();
        let stderr = stderr.and_then(|h| h.join().ok()).unwrap_or_default();
        let out = outcome.map_err(|why| self.failed(&why, &stderr))?;
        match status {
            Some(s) if s.success() => {}
            Some(s) => return Err(self.failed(&format!("exited with {s}"), &stderr)),
            None => return Err(self.failed("could not be waited for", &stderr)),
        }
        let mut text = String::from_utf8(out)
            .map_err(|_| self.failed("wrote stdout that is not UTF-8", &stderr))?;
        let kept = text.trim_end_matches(['\n', '\r']).len();
        text.truncate(kept);
        Ok(text)
    }

    fn failed(&self, why: &str, stderr: &str) -> String {
        let stderr = stderr.trim();
        if stderr.is_empty() {
            format!("sampling command `{}` {why}", self.command)
        } else {
            format!(
                "sampling command `{}` {why}; stderr: {stderr}",
                self.command
            )
        }
    }
}

/// Waits for the command's exit. After its stdout closed it is ending (or was killed):
/// the wait is then short. A command that closed stdout but runs on is killed.
fn reap(child: &mut Child, finished: bool) -> Option<ExitStatus> {
    if finished {
        for _ in 0..50 {
            match child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(_) => return None,
            }
        }
        let _ = crate::sys::send_signal_group(child.id(), libc::SIGKILL);
    }
    child.wait().ok()
}

/// Reads a pipe to its end on its own thread, keeping the last `keep` bytes as text.
fn drain(mut pipe: impl Read + Send + 'static, keep: usize) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut kept: Vec<u8> = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            kept.extend_from_slice(&buf[..n]);
            if kept.len() > keep {
                kept.drain(..kept.len() - keep);
            }
        }
        String::from_utf8_lossy(&kept).into_owned()
    })
}

/// The request as the command's input: one message's text alone, or a transcript.
fn prompt(p: &Value) -> String {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let messages = p["messages"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let system = p.get("systemPrompt").filter(|s| s.is_string());
    if let ([only], None) = (messages, system) {
        return text(&only["content"]["text"]);
    }
    let mut parts = Vec::new();
    if let Some(s) = system {
        parts.push(format!("system: {}", text(s)));
    }
    for m in messages {
        parts.push(format!(
            "{}: {}",
            m["role"].as_str().unwrap_or("user"),
            text(&m["content"]["text"])
        ));
    }
    parts.join("\n\n")
}

impl Service for CommandSampling {
    fn handles(&self, method: &str) -> bool {
        method == "sampling/createMessage"
    }

    /// Blocks while the command runs (bounded by the timeout and the call's own).
    fn call(&self, call: &ReverseCall) -> Result<Value, RpcError> {
        let timeout = call
            .client_timeout
            .map_or(self.timeout, |t| t.min(self.timeout));
        self.budgets.answer_with(call, |p| {
            self.run(prompt(p), timeout)
                .map_err(|why| RpcError::with_code(PROVIDER_ERROR, "PROVIDER_ERROR", why))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ask(s: &CommandSampling, params: Value) -> Result<Value, RpcError> {
        super::super::test_call(s, "sampling/createMessage", params)
    }

    fn one(text: &str) -> Value {
        json!({ "messages": [{ "role": "user", "content": { "type": "text", "text": text } }],
                "maxTokens": 100 })
    }

    #[test]
    fn the_prompt_goes_in_and_stdout_is_the_answer() {
        let s = CommandSampling::new("tr a-z A-Z");
        let r = ask(&s, one("hello there")).unwrap();
        assert_eq!(
            r["content"],
            json!({ "type": "text", "text": "HELLO THERE" })
        );
        assert_eq!(r["model"], "local-command");
        assert_eq!(r["role"], "assistant");
        let mut p = one("q");
        p["systemPrompt"] = json!("be brief");
        let r = ask(&CommandSampling::new("cat"), p).unwrap();
        assert_eq!(r["content"]["text"], "system: be brief\n\nuser: q");
    }

    #[test]
    fn failures_are_provider_errors_that_say_why() {
        let e = ask(&CommandSampling::new("echo nope >&2; exit 3"), one("x")).unwrap_err();
        assert_eq!(e.code, -32003);
        assert!(e.message.contains("exited with exit status: 3"), "{e}");
        assert!(e.message.contains("stderr: nope"), "{e}");
        let s = CommandSampling::new("sleep 30").timeout(Duration::from_millis(200));
        let e = ask(&s, one("x")).unwrap_err();
        assert!(e.message.contains("did not finish within"), "{e}");
        let s = CommandSampling::new("yes").max_output(1000);
        let e = ask(&s, one("x")).unwrap_err();
        assert!(e.message.contains("more than 1000 bytes"), "{e}");
        // The request is checked before anything runs.
        let e = ask(&CommandSampling::new("true"), json!({ "messages": [] })).unwrap_err();
        assert_eq!(e.code, -32004);
    }
}
