//! `sampling/createMessage` answered by a local command: the prompt goes to the command's
//! stdin, its stdout is the answer's text. Any model CLI that reads a prompt on stdin
//! serves (`llm`, `ollama run MODEL`, a script), and so does `tr a-z A-Z` in a test.

use std::io::{Read, Write};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;
use serde_json::Value;

use super::sampling::ScriptedSampling;
use crate::error::RpcError;
use crate::host::options::{ShutdownPolicy, StderrRelay};
use crate::host::service::{ReverseCall, Service};
use crate::host::shutdown::ProcessTree;
use crate::host::stderr::{self, StderrTail};
use crate::lock::lock;
use crate::sys;

/// How long one command may run unless told otherwise (the plugin's own sampling call
/// waits 90 s at most; the host answers before that).
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(80);
/// The most stdout taken as an answer unless told otherwise.
pub const DEFAULT_MAX_OUTPUT: usize = 1024 * 1024;
/// The most stderr lines kept for an error message.
const STDERR_LINES: usize = 16;
/// How long, once the command is gone, its stderr may stay open (a helper it left
/// behind may hold it) before the error message goes without the rest; and how long a
/// command that closed its stdout may take to exit, or the kernel to reap it once killed.
const AFTERMATH: Duration = Duration::from_secs(1);
/// The code a failed command is answered with: the sampling family's provider error.
const PROVIDER_ERROR: i64 = -32003;

/// Answers `sampling/createMessage` by running a shell command (`sh -c CMD`; on Windows
/// `cmd /C CMD`) once per call, the prompt on its stdin and its stdout (trailing newlines
/// removed) the answer's text, in the documented result shape (`model` is
/// `local-command`).
///
/// The prompt: with one message and no `systemPrompt`, that message's text alone;
/// otherwise a transcript, one paragraph per part (`system: ...`, `user: ...`,
/// `assistant: ...`). The request is checked and the Agent's budgets applied as
/// [`ScriptedSampling`] does them (8192 `maxTokens` a call, 8 calls and 32,000 tokens an
/// invoke, tokens estimated from the text).
///
/// Bounded: the command runs at most [`CommandSampling::timeout`] (default 80 s, and never
/// past the call's own `_clientTimeoutS`), and at most [`CommandSampling::max_output`]
/// bytes of stdout are taken (default 1 MiB); past either, its whole process group (on
/// Windows its job object) is killed and the call is answered -32003 `PROVIDER_ERROR`. So
/// is a non-zero exit, with the end of its stderr in the message. Not quick: calls are
/// answered off the host's reader thread, several at once when the plugin makes several.
///
/// [`CommandSampling::stop_running`] ends the commands running when the host ends, so
/// none outlives it: `executa call` calls it after the plugin's shutdown, and when it is
/// interrupted.
#[derive(Debug)]
pub struct CommandSampling {
    command: String,
    timeout: Duration,
    max_output: usize,
    budgets: ScriptedSampling,
    /// Set by [`CommandSampling::stop_running`]: running commands are killed, new ones
    /// refused.
    stopping: AtomicBool,
    /// How many commands run now, and its changes.
    running: (Mutex<usize>, Condvar),
}

impl CommandSampling {
    /// Runs `command` with `sh -c` (Windows: `cmd /C`) for each call.
    pub fn new(command: impl Into<String>) -> Self {
        CommandSampling {
            command: command.into(),
            timeout: DEFAULT_COMMAND_TIMEOUT,
            max_output: DEFAULT_MAX_OUTPUT,
            budgets: ScriptedSampling::echo().with_model("local-command"),
            stopping: AtomicBool::new(false),
            running: (Mutex::new(0), Condvar::new()),
        }
    }

    /// Ends every command running now (its whole tree, killed at once; its call is
    /// answered -32003 `PROVIDER_ERROR`, "stopped") and refuses those asked for later.
    /// Blocks until the running ones have been reaped, at most `wait`; returns whether
    /// they all were.
    pub fn stop_running(&self, wait: Duration) -> bool {
        self.stopping.store(true, Ordering::SeqCst);
        let (count, changed) = &self.running;
        let (running, _) = changed
            .wait_timeout_while(lock(count), wait, |n| *n > 0)
            .unwrap_or_else(|e| e.into_inner());
        *running == 0
    }

    /// Counts a command as running until the result is dropped; `None` once stopping.
    fn start_one(&self) -> Option<Running<'_>> {
        let mut running = lock(&self.running.0);
        // Checked under the lock, so `stop_running` never misses one that starts now.
        if self.stopping.load(Ordering::SeqCst) {
            return None;
        }
        *running += 1;
        Some(Running(self))
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
        let Some(_running) = self.start_one() else {
            return Err(self.failed("was not started: the host is ending", ""));
        };
        let mut cmd = sys::shell(&self.command);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Its own tree (process group; job object on Windows), so a timeout stops what it
        // started too.
        let (mut child, tree) = ProcessTree::spawn(&mut cmd)
            .map_err(|e| format!("cannot start `{} {}`: {e}", sys::SHELL, self.command))?;
        let stdin = child.stdin.take();
        // Written from its own thread: a command that answers before it has read all of
        // its input must not wedge us on a full pipe. A command that never reads makes
        // the write fail (broken pipe) once it exits, or is killed at the timeout.
        // Not joined: it ends when the command reads its input or the pipe breaks, and a
        // helper that keeps the pipe open without reading must not hold up the answer.
        std::thread::spawn(move || {
            if let Some(mut stdin) = stdin {
                let _ = stdin.write_all(prompt.as_bytes());
            }
        });
        let tail = Arc::new(StderrTail::new(STDERR_LINES));
        if let Some(pipe) = child.stderr.take() {
            let tail = tail.clone();
            std::thread::spawn(move || stderr::run(pipe, &tail, "sampling", StderrRelay::Quiet));
        }
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
        let outcome = match answer(&rx, &mut child, &tree, timeout, &self.stopping) {
            Answer::Output(out) if out.len() > limit => {
                Err(format!("wrote more than {limit} bytes on stdout (stopped)"))
            }
            Answer::Output(out) => Ok(out),
            Answer::TimedOut => Err(format!(
                "did not finish within {:.0} s (stopped)",
                timeout.as_secs_f64()
            )),
            Answer::Stopped => Err("was stopped: the host is ending".to_owned()),
            Answer::ReaderFailed => Err("its stdout reader failed".to_owned()),
        };
        // After its stdout closed it is ending, so it gets a short while to exit; one that
        // failed (too slow, too much) is killed at once. Either way what it started in its
        // group goes too (the shutdown sequence's last step).
        let policy = ShutdownPolicy {
            stdin_grace: if outcome.is_ok() {
                AFTERMATH
            } else {
                Duration::ZERO
            },
            term_grace: Duration::ZERO,
            kill_wait: AFTERMATH,
        };
        let status = tree.shutdown(&mut child, &policy).status;
        tail.wait_done(AFTERMATH);
        let stderr = tail.snapshot().join("\n");
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

/// How often a running command's exit is looked for: std has no wait with a timeout, and a
/// command runs for seconds, so 40 looks a second cost nothing that shows.
const EXIT_LOOK: Duration = Duration::from_millis(25);

/// How waiting for a command's answer ended.
enum Answer {
    /// Its stdout, whole (or one byte past the limit).
    Output(Vec<u8>),
    TimedOut,
    /// [`CommandSampling::stop_running`] was called.
    Stopped,
    ReaderFailed,
}

/// The command's stdout, whole, from the reader thread behind `rx`, once the command
/// exits or its stdout ends, whichever comes first, within `timeout`, unless `stopping`
/// is set meanwhile. A command that exits while something it started in the background
/// still holds its stdout (`echo answer; sleep 600 &`) is answered at its exit: what is
/// left of its tree is killed, which ends the stdout, and what it wrote is what the
/// reader read.
fn answer(
    rx: &crossbeam_channel::Receiver<Vec<u8>>,
    child: &mut std::process::Child,
    tree: &ProcessTree,
    timeout: Duration,
    stopping: &AtomicBool,
) -> Answer {
    let read = |r: Result<Vec<u8>, RecvTimeoutError>| match r {
        Ok(out) => Answer::Output(out),
        Err(RecvTimeoutError::Timeout) => Answer::TimedOut,
        Err(RecvTimeoutError::Disconnected) => Answer::ReaderFailed,
    };
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left.min(EXIT_LOOK)) {
            Err(RecvTimeoutError::Timeout) if !left.is_zero() => {}
            other => return read(other),
        }
        if stopping.load(Ordering::SeqCst) {
            return Answer::Stopped;
        }
        if matches!(child.try_wait(), Ok(Some(_))) {
            // It exited: its own writes are in the pipe already; end what holds it open.
            tree.kill_remnants();
            return read(rx.recv_timeout(AFTERMATH));
        }
    }
}

/// One running command, counted until dropped.
struct Running<'a>(&'a CommandSampling);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let (count, changed) = &self.0.running;
        *lock(count) -= 1;
        changed.notify_all();
    }
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

// `sh` syntax and Unix tools (`tr`, `setsid`, `kill`).
#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use serde_json::json;
    use std::process::Command;

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

    /// A command that exits while a helper it started in the background (in its own
    /// group) still holds its stdout is answered at its exit, and the helper is killed
    /// (issue 36, item 11: it used to wait for the helper, here past the 30 s timeout).
    #[test]
    #[cfg(target_os = "linux")]
    fn the_answer_is_taken_when_the_command_exits() {
        let pid_file = std::env::temp_dir().join(format!("executa-bg-{}", std::process::id()));
        let _ = std::fs::remove_file(&pid_file);
        let cmd = format!(
            "echo answer; sh -c 'echo $$ > {}; exec sleep 600' &",
            pid_file.display()
        );
        let s = CommandSampling::new(cmd).timeout(Duration::from_secs(30));
        let answer = ask(&s, one("x")).expect("an answer at the command's exit");
        assert_eq!(answer["content"]["text"], "answer");
        // The helper went with what was left of the group (killed before the answer came
        // back; gone, or a zombie nobody has reaped yet). Not written: killed first.
        let Ok(pid) = std::fs::read_to_string(&pid_file) else {
            return;
        };
        let _ = std::fs::remove_file(&pid_file);
        let stat = format!("/proc/{}/stat", pid.trim());
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let gone = loop {
            let state = std::fs::read_to_string(&stat).ok();
            let dead = state.as_deref().is_none_or(|s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
            });
            if dead || std::time::Instant::now() > deadline {
                break dead;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        if !gone {
            let _ = Command::new("kill").arg(pid.trim()).status();
        }
        assert!(gone, "the background helper outlived the command");
    }

    /// `stop_running` ends a command that ignores SIGTERM, answers its call, waits for
    /// it, and refuses later calls (issue 36, item 2: `executa call` returned at its
    /// timeout leaving such a command running, with nothing left to enforce its 80 s).
    #[test]
    fn stop_running_ends_the_running_commands_and_refuses_new_ones() {
        let s = Arc::new(CommandSampling::new("trap '' TERM; sleep 600; echo late"));
        let asker = s.clone();
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            let _ = tx.send(ask(&asker, one("x")));
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        while *lock(&s.running.0) == 0 {
            assert!(Instant::now() < deadline, "the command never started");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(s.stop_running(Duration::from_secs(30)), "still running");
        let e = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the call was answered")
            .unwrap_err();
        assert!(e.message.contains("was stopped: the host is ending"), "{e}");
        let e = ask(&s, one("x")).unwrap_err();
        assert!(e.message.contains("was not started"), "{e}");
    }

    /// A helper that leaves the command's process group and keeps its stderr open does
    /// not hold the answer back (it used to, for as long as the helper lived).
    #[test]
    fn a_helper_holding_stderr_does_not_hold_the_answer() {
        let pid_file = std::env::temp_dir().join(format!("executa-cmd-{}", std::process::id()));
        let cmd = format!(
            "setsid sh -c 'echo $$ > {}; exec sleep 600' >/dev/null & sleep 0.2; echo hi",
            pid_file.display()
        );
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            let _ = tx.send(ask(&CommandSampling::new(cmd), one("x")));
        });
        let answer = rx.recv_timeout(Duration::from_secs(60));
        if let Ok(pid) = std::fs::read_to_string(&pid_file) {
            let _ = Command::new("kill").arg(pid.trim()).status();
        }
        let _ = std::fs::remove_file(&pid_file);
        let answer = answer
            .expect("an answer while the helper still runs")
            .unwrap();
        assert_eq!(answer["content"]["text"], "hi");
    }
}
