//! Helpers shared by the `host_*` integration tests: fixture plugins and short timeouts.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use executa::RpcError;
use executa::host::{
    Handlers, HostOptions, PluginCommand, RestartPolicy, ShutdownPolicy, StderrRelay,
};
use serde_json::{Value, json};

/// The path of a fixture plugin.
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// `python3 tests/fixtures/<script> <args...>`.
pub fn py(script: &str, args: &[&str]) -> PluginCommand {
    PluginCommand::new("python3")
        .arg(fixture(script))
        .args(args)
}

/// How long a plugin that does answer may take to start and answer `initialize`,
/// `describe` or `health` in a test: far past the Agent's 5 s, so that a loaded machine
/// (Python alone can take seconds to start there) cannot fake a misbehaviour.
pub const PATIENT: Duration = Duration::from_secs(30);

/// Options for tests: [`PATIENT`] windows for anything a well-behaved plugin answers, the
/// Agent's defaults otherwise, a fast restart backoff, quiet stderr.
pub fn opts() -> HostOptions {
    HostOptions {
        initialize_timeout: PATIENT,
        describe_timeout: PATIENT,
        health_timeout: PATIENT,
        restart: RestartPolicy {
            base_delay: Duration::from_millis(30),
            ..RestartPolicy::default()
        },
        stderr: StderrRelay::Quiet,
        ..HostOptions::default()
    }
}

/// The bound on waiting for an event that involves starting a process (a restart, a
/// helper's end): only a failure waits this long, so it can be generous.
pub const EVENT_WAIT: Duration = Duration::from_secs(60);

/// A short shutdown window, for plugins that are meant to outstay it.
pub fn short_shutdown() -> ShutdownPolicy {
    ShutdownPolicy {
        stdin_grace: Duration::from_millis(400),
        term_grace: Duration::from_millis(400),
        kill_wait: Duration::from_secs(5),
    }
}

/// Polls `cond` every few milliseconds until it holds; panics after `limit`.
pub fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Pids of live processes whose command line contains `marker` (from `/proc`; zombies,
/// which have an empty command line, do not count).
#[cfg(target_os = "linux")]
pub fn processes_with(marker: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
        })
        .collect()
}

/// A name unique to this test run, for markers and scratch files.
pub fn unique(what: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("executa-{what}-{}-{n}", std::process::id())
}

/// Whether process `pid` has ended (exited and been reaped, or a zombie) within `limit`:
/// waits on a pidfd, which the kernel makes readable when the process ends, so the wait
/// is for that event, not a poll. `Duration::ZERO` asks whether it has ended already.
#[cfg(target_os = "linux")]
pub fn ends_within(pid: u32, limit: Duration) -> bool {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        assert_eq!(
            e.raw_os_error(),
            Some(libc::ESRCH),
            "pidfd_open({pid}): {e}"
        );
        return true;
    }
    // SAFETY: the descriptor was just opened for us, and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd for the duration of the call.
        match unsafe { libc::poll(&mut pfd, 1, ms) } {
            0 => return false,
            n if n > 0 => return true,
            _ => assert_eq!(
                std::io::Error::last_os_error().kind(),
                std::io::ErrorKind::Interrupted,
                "poll on a pidfd"
            ),
        }
    }
}

/// As on Linux, where there is no pidfd (macOS, the BSDs: compiled, not run here): asks
/// `kill(pid, 0)` every few milliseconds whether the process is gone.
#[cfg(all(unix, not(target_os = "linux")))]
pub fn ends_within(pid: u32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        // SAFETY: kill(2) with signal 0 only checks that the process exists.
        if unsafe { libc::kill(pid as libc::pid_t, 0) } != 0 {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Kills the listed processes when dropped (a failing test's leftovers).
pub struct KillOnDrop(pub Vec<u32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for &pid in &self.0 {
            #[cfg(unix)]
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL)
            };
            #[cfg(windows)]
            let _ = std::process::Command::new("taskkill")
                .args(["/F", "/PID", &pid.to_string()])
                .status();
        }
    }
}

/// The "PLUGIN_PID HELPER_PID" a fixture wrote to `path`.
pub fn read_pids(path: &std::path::Path) -> (u32, u32) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut pids = text.split_whitespace().map(|p| p.parse().expect("a pid"));
    let pids = (
        pids.next().expect("plugin pid"),
        pids.next().expect("helper pid"),
    );
    let _ = std::fs::remove_file(path);
    pids
}

/// The bound on waiting for a process to end that should have ended already: long enough
/// for a loaded machine, short enough that a test failing on it ends soon.
pub const EVENT_WAIT_SHORT: Duration = Duration::from_secs(10);

/// What a [`recording_sampler`] saw of each call: its params and its invoke.
pub type Sampled = Arc<Mutex<Vec<(Value, Option<String>)>>>;

/// A sampling handler that answers "answer to QUESTION" as model `m-test`, and what it
/// saw of each call.
pub fn recording_sampler() -> (Handlers, Sampled) {
    let seen: Sampled = Arc::default();
    let log = seen.clone();
    let handlers = Handlers::new().on("sampling/createMessage", move |call| {
        let mut log = log.lock().map_err(|_| RpcError::new(-32603, "poisoned"))?;
        log.push((call.params.clone(), call.invoke_id.clone()));
        let question = call.params["messages"][0]["content"]["text"].clone();
        Ok(json!({
            "role": "assistant",
            "content": {"type": "text", "text": format!("answer to {}", question.as_str().unwrap_or("?"))},
            "model": "m-test",
            "stopReason": "endTurn",
        }))
    });
    (handlers, seen)
}
