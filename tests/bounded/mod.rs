//! A command's output with a bound on its run: the tests that run cargo and `executa`
//! must fail, not hang, if one never ends.

use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long one command may run. Cargo compiling a crate and its dependencies from nothing
/// takes minutes on a loaded 2-vCPU machine (the quickstart's `cargo test`: 71 s), so this
/// only catches a hang.
pub const LIMIT: Duration = Duration::from_secs(20 * 60);

/// Runs `cmd` (stdin empty) to its end and returns what it wrote; panics if it cannot
/// start or runs past [`LIMIT`], killing it.
pub fn output(cmd: &mut Command) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {cmd:?}: {e}"));
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + LIMIT;
    // Polled: std has no wait with a timeout, and the child must stay ours to kill.
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(50)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{cmd:?} ran past {LIMIT:?}; killed");
            }
            Err(e) => panic!("wait for {cmd:?}: {e}"),
        }
    };
    Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}
