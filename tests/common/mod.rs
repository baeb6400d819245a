//! A scripted host at the line level, for the plugin integration tests.
//!
//! It drives either the real `everything` example binary over its stdio pipes
//! ([`Conn::spawn`]) or an in-process [`executa::Plugin`] served over socket pairs
//! ([`Conn::serve`]). Lines are written by hand and every line the plugin writes is read
//! by a reader thread and checked to be exactly one JSON object; every wait is bounded
//! and fails the test instead of hanging. It deliberately does not use the crate's
//! `host` module.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, unbounded};
use serde_json::value::RawValue;
use serde_json::{Value, json};

/// How long any single wait for a line may take before the test fails.
/// Only a failing test waits this long, so it is generous: a loaded machine can take
/// seconds to move a multi-megabyte frame through a debug build.
pub const RECV_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a plugin may take to exit once told to.
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(60);

/// Builds `examples/everything.rs` once per test binary and returns its path.
pub fn everything_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| example_bin("everything")).clone()
}

/// Builds `examples/<name>.rs` (debug) and returns its path. With `EXECUTA_EXAMPLES` set
/// (a folder of examples built already: a cross build, whose tests run under an emulator
/// that cannot start cargo), returns the example there instead.
#[allow(dead_code)]
pub fn example_bin(name: &str) -> PathBuf {
    let file = format!("{name}{}", std::env::consts::EXE_SUFFIX);
    if let Some(dir) = std::env::var_os("EXECUTA_EXAMPLES") {
        let bin = PathBuf::from(dir).join(file);
        assert!(bin.exists(), "{} was not built", bin.display());
        return bin;
    }
    let manifest_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // The examples go beside this test binary (`<target>/debug/deps/..`), built for the
    // target it was built for: a cross build (`cargo test --target T`, run by an emulator)
    // lives in `<target>/T/debug`, and must drive examples built for T, not the host.
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("<target>/debug/deps")
        .to_path_buf();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|p| {
            if p.is_relative() {
                manifest_dir.join(p)
            } else {
                p
            }
        })
        .unwrap_or_else(|| manifest_dir.join("target"));
    let same = |a: &std::path::Path, b: &std::path::Path| {
        a.canonicalize()
            .ok()
            .is_some_and(|a| Some(a) == b.canonicalize().ok())
    };
    let triple = profile_dir
        .parent()
        .filter(|dir| !same(dir, &target))
        .and_then(|dir| dir.file_name())
        .map(|t| t.to_string_lossy().into_owned());
    let mut build = Command::new(env!("CARGO"));
    build.args(["build", "--quiet", "--example", name]);
    if let Some(triple) = &triple {
        build.args(["--target", triple]);
    }
    // An optimized test build (`cargo test --release`) looks in `release/`.
    if !cfg!(debug_assertions) {
        build.arg("--release");
    }
    // The examples as this test binary was built: with MCP serving when it has it, so
    // that test binaries of one `cargo test` never rebuild each other's examples.
    if cfg!(feature = "mcp") {
        build.args(["--features", "mcp"]);
    }
    // And with the portable timer when the tests run with it (`.ci/run`'s second pass).
    if cfg!(feature = "portable-timer") {
        build.args(["--features", "portable-timer"]);
    }
    let out = build
        .current_dir(&manifest_dir)
        .stdin(Stdio::null())
        .output()
        .expect("run cargo build --example");
    assert!(
        out.status.success(),
        "cargo build --example {name} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = profile_dir.join("examples").join(file);
    assert!(bin.exists(), "{} was not built", bin.display());
    bin
}

/// Two connected in-process byte streams for [`Conn::serve`]: socket pairs on Unix (the
/// plugin's reader can wait on them with a bound, as on a real stdin), anonymous pipes
/// elsewhere.
#[cfg(unix)]
fn duplex() -> (
    impl Read + Send + 'static,
    impl Write + Send + 'static,
    impl Read + Send + 'static,
    impl Write + Send + 'static,
) {
    use std::os::unix::net::UnixStream;
    let (ours_in, theirs_in) = UnixStream::pair().expect("socket pair");
    let (theirs_out, ours_out) = UnixStream::pair().expect("socket pair");
    (theirs_in, theirs_out, ours_out, ours_in)
}

#[cfg(not(unix))]
fn duplex() -> (
    impl Read + Send + 'static,
    impl Write + Send + 'static,
    impl Read + Send + 'static,
    impl Write + Send + 'static,
) {
    let (theirs_in, ours_in) = std::io::pipe().expect("pipe");
    let (ours_out, theirs_out) = std::io::pipe().expect("pipe");
    (theirs_in, theirs_out, ours_out, ours_in)
}

/// One line the plugin wrote, raw and parsed.
#[derive(Clone, Debug)]
pub struct Msg {
    /// The line exactly as written, without its LF.
    pub raw: String,
    /// The parsed object.
    pub v: Value,
}

impl Msg {
    /// The raw JSON text of the top-level `id`, `None` when the key is absent.
    pub fn raw_id(&self) -> Option<String> {
        let keys: HashMap<String, Box<RawValue>> =
            serde_json::from_str(&self.raw).expect("a checked line re-parses");
        keys.get("id").map(|r| r.get().to_owned())
    }

    /// The `method`, when this is a request or notification from the plugin.
    pub fn method(&self) -> Option<&str> {
        self.v.get("method").and_then(Value::as_str)
    }

    /// Whether this is a response (no `method`).
    pub fn is_response(&self) -> bool {
        self.v.get("method").is_none()
    }

    /// The `result`, panicking with the line when it is an error frame.
    pub fn result(&self) -> &Value {
        self.v
            .get("result")
            .unwrap_or_else(|| panic!("expected a result, got {}", self.raw))
    }

    /// The `error`, panicking with the line when it is a result frame.
    pub fn error(&self) -> &Value {
        self.v
            .get("error")
            .unwrap_or_else(|| panic!("expected an error, got {}", self.raw))
    }

    /// `error.code`.
    pub fn error_code(&self) -> i64 {
        self.error()["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("error.code is not an integer: {}", self.raw))
    }

    /// `error.message`.
    pub fn error_message(&self) -> &str {
        self.error()["message"]
            .as_str()
            .unwrap_or_else(|| panic!("error.message is not a string: {}", self.raw))
    }

    /// `result.data` of a successful invoke, checking the envelope.
    pub fn data(&self) -> &Value {
        let r = self.result();
        assert_eq!(
            r["success"],
            json!(true),
            "expected success:true: {}",
            self.raw
        );
        let data = &r["data"];
        assert!(data.is_object(), "data must be an object: {}", self.raw);
        data
    }

    /// `result.error` of a failed invoke (`success:false`), checking the envelope.
    pub fn failure(&self) -> &str {
        let r = self.result();
        assert_eq!(
            r["success"],
            json!(false),
            "expected success:false: {}",
            self.raw
        );
        r["error"]
            .as_str()
            .unwrap_or_else(|| panic!("a failure needs an error string: {}", self.raw))
    }
}

/// Checks that a line the plugin wrote is one well-formed JSON-RPC 2.0 object.
fn check_line(line: &str) -> Result<Msg, String> {
    let v: Value = serde_json::from_str(line)
        .map_err(|e| format!("stdout line is not JSON ({e}): {line:?}"))?;
    let Some(obj) = v.as_object() else {
        return Err(format!("stdout line is not a JSON object: {line:?}"));
    };
    if obj.get("jsonrpc") != Some(&json!("2.0")) {
        return Err(format!("stdout line lacks jsonrpc 2.0: {line:?}"));
    }
    if obj.contains_key("method") {
        if !obj["method"].is_string() {
            return Err(format!("method is not a string: {line:?}"));
        }
    } else {
        if !obj.contains_key("id") {
            return Err(format!("a response without id: {line:?}"));
        }
        let (r, e) = (obj.contains_key("result"), obj.contains_key("error"));
        if r == e {
            return Err(format!(
                "a response needs exactly one of result/error: {line:?}"
            ));
        }
        if e && (!obj["error"]["code"].is_i64() || !obj["error"]["message"].is_string()) {
            return Err(format!("malformed error object: {line:?}"));
        }
    }
    Ok(Msg {
        raw: line.to_owned(),
        v,
    })
}

enum Backend {
    Child(Child),
    Thread(Receiver<executa::Result<executa::Stopped>>),
    Done,
}

/// A connection to one plugin.
pub struct Conn {
    input: Option<Box<dyn Write + Send>>,
    lines: Receiver<Result<Msg, String>>,
    stdout_eof: bool,
    stderr: Arc<Mutex<String>>,
    stderr_thread: Option<thread::JoinHandle<()>>,
    backend: Backend,
    pid: Option<u32>,
}

fn spawn_reader<R: Read + Send + 'static>(output: R) -> Receiver<Result<Msg, String>> {
    let (tx, rx) = unbounded();
    thread::Builder::new()
        .name("test-stdout-reader".into())
        .spawn(move || read_lines(output, tx))
        .expect("spawn reader");
    rx
}

fn read_lines<R: Read>(output: R, tx: Sender<Result<Msg, String>>) {
    let mut reader = BufReader::with_capacity(1 << 20, output);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let checked = if buf.last() != Some(&b'\n') {
            Err(format!(
                "stdout ended mid-line: {:?}",
                String::from_utf8_lossy(&buf)
            ))
        } else {
            buf.pop();
            match std::str::from_utf8(&buf) {
                Ok(line) => check_line(line),
                Err(_) => Err(format!(
                    "stdout line is not UTF-8: {:?}",
                    String::from_utf8_lossy(&buf)
                )),
            }
        };
        if tx.send(checked).is_err() {
            return;
        }
    }
}

impl Conn {
    /// Spawns the `everything` example with piped stdio.
    pub fn spawn() -> Conn {
        Conn::spawn_with(&[], &[])
    }

    /// Spawns the `everything` example with extra arguments and environment variables.
    pub fn spawn_with(args: &[&str], envs: &[(&str, &str)]) -> Conn {
        let mut cmd = Command::new(everything_bin());
        cmd.args(args);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        Conn::spawn_command(cmd)
    }

    /// Spawns `cmd` (a plugin, or a wrapper that execs one) with piped stdio.
    pub fn spawn_command(mut cmd: Command) -> Conn {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn the plugin");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let mut stderr_pipe = child.stderr.take().expect("stderr");
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let stderr_thread = thread::Builder::new()
            .name("test-stderr-reader".into())
            .spawn(move || {
                let mut chunk = [0u8; 8192];
                loop {
                    match stderr_pipe.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => sink
                            .lock()
                            .unwrap()
                            .push_str(&String::from_utf8_lossy(&chunk[..n])),
                    }
                }
            })
            .expect("spawn stderr reader");
        Conn {
            pid: Some(child.id()),
            input: Some(Box::new(stdin as ChildStdin)),
            lines: spawn_reader(stdout),
            stdout_eof: false,
            stderr,
            stderr_thread: Some(stderr_thread),
            backend: Backend::Child(child),
        }
    }

    /// Serves `plugin` in-process on a thread, over two socket pairs (pipes on Windows).
    pub fn serve(plugin: executa::Plugin) -> Conn {
        let (theirs_in, theirs_out, ours_out, ours_in) = duplex();
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        thread::Builder::new()
            .name("test-plugin-serve".into())
            .spawn(move || {
                let _ = done_tx.send(plugin.serve(theirs_in, theirs_out));
            })
            .expect("spawn serve thread");
        Conn {
            pid: None,
            input: Some(Box::new(ours_in)),
            lines: spawn_reader(ours_out),
            stdout_eof: false,
            stderr: Arc::new(Mutex::new(String::new())),
            stderr_thread: None,
            backend: Backend::Thread(done_rx),
        }
    }

    /// The child's pid (real binary only).
    pub fn pid(&self) -> u32 {
        self.pid.expect("only a spawned plugin has a pid")
    }

    /// Writes raw bytes to the plugin's input, as is.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        let input = self.input.as_mut().expect("stdin already closed");
        input.write_all(bytes).expect("write to plugin stdin");
        input.flush().expect("flush plugin stdin");
    }

    /// Writes one line of text (an LF is appended).
    pub fn send_line(&mut self, line: &str) {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        self.send_raw(&bytes);
    }

    /// Writes one JSON value as a line.
    pub fn send(&mut self, frame: &Value) {
        self.send_line(&frame.to_string());
    }

    /// Sends a request.
    pub fn request(&mut self, id: impl Into<Value>, method: &str, params: Option<Value>) {
        let mut f = json!({ "jsonrpc": "2.0", "id": id.into(), "method": method });
        if let Some(p) = params {
            f["params"] = p;
        }
        self.send(&f);
    }

    /// Sends an `invoke` without context.
    pub fn invoke(&mut self, id: impl Into<Value>, tool: &str, arguments: Value) {
        self.request(
            id,
            "invoke",
            Some(json!({ "tool": tool, "arguments": arguments })),
        );
    }

    /// Sends an `invoke` with a context block.
    pub fn invoke_ctx(
        &mut self,
        id: impl Into<Value>,
        tool: &str,
        arguments: Value,
        context: Value,
    ) {
        let params = json!({ "tool": tool, "arguments": arguments, "context": context });
        self.request(id, "invoke", Some(params));
    }

    /// Answers one of the plugin's reverse requests with a result.
    pub fn answer(&mut self, reverse_id: &Value, result: Value) {
        self.send(&json!({ "jsonrpc": "2.0", "id": reverse_id, "result": result }));
    }

    /// Answers one of the plugin's reverse requests with an error object.
    pub fn answer_error(&mut self, reverse_id: &Value, error: Value) {
        self.send(&json!({ "jsonrpc": "2.0", "id": reverse_id, "error": error }));
    }

    /// Sends `initialize` in the current shape and returns its result.
    pub fn initialize(&mut self, version: &str, capabilities: Value) -> Value {
        let params = json!({
            "protocolVersion": version,
            "clientInfo": { "name": "scripted-host", "version": "0.0.1" },
            "capabilities": capabilities,
        });
        self.request("init", "initialize", Some(params));
        self.recv_until_id("\"init\"").0.result().clone()
    }

    /// The next line, or `None` if none arrives within `timeout` or stdout ended.
    /// Panics on a line that is not one JSON-RPC object.
    pub fn try_recv(&mut self, timeout: Duration) -> Option<Msg> {
        if self.stdout_eof {
            return None;
        }
        match self.lines.recv_timeout(timeout) {
            Ok(Ok(msg)) => Some(msg),
            Ok(Err(bad)) => panic!("{bad}"),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                self.stdout_eof = true;
                None
            }
        }
    }

    /// The next line; fails the test after [`RECV_TIMEOUT`] or at end of stdout.
    pub fn recv(&mut self) -> Msg {
        let start = Instant::now();
        match self.try_recv(RECV_TIMEOUT) {
            Some(m) => m,
            None if self.stdout_eof => panic!(
                "plugin stdout ended while a line was expected; stderr:\n{}",
                self.stderr()
            ),
            None => panic!(
                "no line from the plugin within {:?}; stderr:\n{}",
                start.elapsed(),
                self.stderr()
            ),
        }
    }

    /// Reads until a response whose raw id text equals `raw_id`, returning it and the
    /// lines skipped on the way (in order).
    pub fn recv_until_id(&mut self, raw_id: &str) -> (Msg, Vec<Msg>) {
        let mut skipped = Vec::new();
        loop {
            let m = self.recv();
            if m.is_response() && m.raw_id().as_deref() == Some(raw_id) {
                return (m, skipped);
            }
            skipped.push(m);
        }
    }

    /// Reads the next line and checks it is a reverse request for `method`.
    pub fn recv_request(&mut self, method: &str) -> Msg {
        let m = self.recv();
        assert_eq!(
            m.method(),
            Some(method),
            "expected a {method} request, got {}",
            m.raw
        );
        assert!(
            m.v.get("id").is_some(),
            "a reverse request needs an id: {}",
            m.raw
        );
        m
    }

    /// Closes the plugin's input (stdin EOF).
    pub fn close_stdin(&mut self) {
        self.input = None;
    }

    /// Reads every remaining line until stdout ends (bounded).
    pub fn drain_to_eof(&mut self) -> Vec<Msg> {
        let deadline = Instant::now() + EXIT_TIMEOUT;
        let mut rest = Vec::new();
        while !self.stdout_eof {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "plugin stdout did not end; stderr:\n{}",
                self.stderr()
            );
            if let Some(m) = self.try_recv(left) {
                rest.push(m);
            }
        }
        rest
    }

    /// Sends SIGTERM to the child with the `kill` command.
    #[cfg(unix)]
    pub fn sigterm(&self) {
        self.signal("TERM");
    }

    /// Sends a signal (`TERM`, `INT`, ...) to the child with the `kill` command.
    #[cfg(unix)]
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{name} failed");
    }

    /// Waits (bounded by `limit`) for the child to exit and returns its status; panics
    /// if it is still running after `limit`.
    pub fn wait_exit_within(&mut self, limit: Duration) -> ExitStatus {
        let Backend::Child(child) = &mut self.backend else {
            panic!("wait_exit is for a spawned plugin; use wait_stopped");
        };
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                self.backend = Backend::Done;
                if let Some(t) = self.stderr_thread.take() {
                    let _ = t.join();
                }
                return status;
            }
            if Instant::now() >= deadline {
                panic!(
                    "plugin still running {limit:?} after it was told to stop; stderr:\n{}",
                    self.stderr()
                );
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits (bounded) for the child to exit.
    pub fn wait_exit(&mut self) -> ExitStatus {
        self.wait_exit_within(EXIT_TIMEOUT)
    }

    /// Closes stdin, reads what is left and waits for exit code 0. Returns the lines
    /// written after the close.
    pub fn finish(&mut self) -> Vec<Msg> {
        self.close_stdin();
        let rest = self.drain_to_eof();
        let status = self.wait_exit();
        assert_eq!(
            status.code(),
            Some(0),
            "exit status {status}; stderr:\n{}",
            self.stderr()
        );
        rest
    }

    /// Waits (bounded) for an in-process `serve` to return.
    pub fn wait_stopped(&mut self) -> executa::Stopped {
        let Backend::Thread(done) = &self.backend else {
            panic!("wait_stopped is for an in-process plugin");
        };
        let stopped = done
            .recv_timeout(EXIT_TIMEOUT)
            .expect("Plugin::serve did not return in time")
            .expect("Plugin::serve failed");
        self.backend = Backend::Done;
        stopped
    }

    /// Everything the child wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.input = None;
        if let Backend::Child(child) = &mut self.backend {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Outside Unix, an in-process plugin is let finish (its input just ended) before
        // the test goes on: a test process that exits with the plugin's threads still in
        // pipe reads and writes has been seen to crash at its exit under Wine.
        #[cfg(not(unix))]
        if let Backend::Thread(done) = &self.backend {
            let _ = done.recv_timeout(EXIT_TIMEOUT);
        }
        if thread::panicking() {
            return;
        }
        // Every line the plugin wrote must have been a JSON object, read or not.
        while let Ok(line) = self.lines.try_recv() {
            if let Err(bad) = line {
                panic!("{bad}");
            }
        }
    }
}

/// The name of the calling thread (handlers report where they ran).
pub fn thread_name() -> String {
    thread::current().name().unwrap_or("?").to_owned()
}

/// A scripted host's answer to `sampling/createMessage` with `text`.
pub fn sampled(text: &str) -> Value {
    json!({
        "role": "assistant",
        "content": { "type": "text", "text": text },
        "model": "scripted",
        "stopReason": "endTurn",
        "usage": { "inputTokens": 1, "outputTokens": 1, "totalTokens": 2 }
    })
}

/// Milliseconds since the Unix epoch, for `context.deadline_ms`.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}
