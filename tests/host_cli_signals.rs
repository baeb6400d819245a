//! Signals to the `executa` CLI end what it started (issue 36, item 2): SIGINT, SIGTERM or
//! SIGHUP to `executa call` or `executa bench` ended the CLI at once and left the plugin
//! running with parent 1, and a running `--sampling-cmd` with it; a sampling command that
//! ignores SIGTERM could outlive a `--timeout`. Now the CLI runs the shutdown sequence on
//! each, then exits with 128 + the signal's number.
// Linux only: the processes are found in /proc and signalled with kill(2); the Python
// fixtures do not run under Wine.
#![cfg(target_os = "linux")]

mod host_common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use host_common::{EVENT_WAIT_SHORT, KillOnDrop, ends_within, fixture, processes_with, unique};

/// Starts `executa ARGS -- python3 tools_plugin.py MARKER` (the marker names the plugin's
/// processes in /proc).
fn start(args: &[&str], marker: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_executa"))
        .args(args)
        .args(["--init-timeout", "30", "--describe-timeout", "30", "--"])
        .arg("python3")
        .arg(fixture("tools_plugin.py"))
        .arg(marker)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start executa")
}

/// Sends `sig` to `pid`.
fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, sig) }, 0, "kill");
}

/// Waits for the CLI's exit (at most a minute) and returns its status code and stderr.
fn exit_of(mut cli: Child) -> (Option<i32>, String) {
    let err = cli.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut err) = err {
            let _ = std::io::Read::read_to_string(&mut err, &mut text);
        }
        text
    });
    let mut status = None;
    host_common::wait_until("the CLI exits", Duration::from_secs(60), || {
        status = cli.try_wait().ok().flatten();
        status.is_some()
    });
    let status = status.expect("an exit status");
    (status.code(), reader.join().unwrap_or_default())
}

/// The plugin's pid, once its process is up: the one with the marker that is not the CLI
/// (whose command line has it too).
fn plugin_pid(cli: &Child, marker: &str) -> u32 {
    let mut pid = None;
    host_common::wait_until("the plugin is up", Duration::from_secs(60), || {
        pid = processes_with(marker).into_iter().find(|&p| p != cli.id());
        pid.is_some()
    });
    pid.expect("a plugin pid")
}

#[test]
fn a_signal_to_call_or_bench_ends_the_plugin_then_the_cli() {
    for (command, sig, code) in [
        ("call", libc::SIGINT, 130),
        ("call", libc::SIGTERM, 143),
        ("call", libc::SIGHUP, 129),
        ("bench", libc::SIGINT, 130),
        ("bench", libc::SIGTERM, 143),
        ("bench", libc::SIGHUP, 129),
    ] {
        let marker = unique("signalled");
        let never = std::env::temp_dir().join(format!("{marker}.never"));
        let args = serde_json::json!({ "until": never }).to_string();
        let cli = match command {
            "call" => start(&["call", "--args", &args, "hold"], &marker),
            _ => start(
                &[
                    "bench",
                    "--tool",
                    "hold",
                    "--args",
                    &args,
                    "--requests",
                    "1",
                    "--quiet",
                ],
                &marker,
            ),
        };
        let pid = plugin_pid(&cli, &marker);
        let _leftover = KillOnDrop(vec![pid]);
        signal(cli.id(), sig);
        let (status, err) = exit_of(cli);
        assert_eq!(status, Some(code), "{command} after signal {sig}: {err}");
        assert!(
            ends_within(pid, Duration::ZERO),
            "{command} after signal {sig}: the plugin (pid {pid}) still runs"
        );
        assert!(err.contains("stopping what this command started"), "{err}");
    }
}

/// A sampling command that ignores SIGTERM is ended with the plugin, when the CLI is
/// signalled and when its invoke times out first.
#[test]
fn a_sampling_command_that_ignores_sigterm_is_ended_too() {
    for signalled in [true, false] {
        let marker = unique("sampling");
        let pidfile = std::env::temp_dir().join(format!("{marker}.cmd"));
        let sampler = format!(
            "echo $$ > {}.tmp; mv {0}.tmp {0}; trap '' TERM; exec sleep 600",
            pidfile.display()
        );
        let mut args = vec![
            "call",
            "--sampling-cmd",
            &sampler,
            "--args",
            r#"{"prompt":"hi"}"#,
        ];
        if !signalled {
            args.extend(["--timeout", "4"]);
        }
        args.push("sample");
        let cli = start(&args, &marker);
        let plugin = plugin_pid(&cli, &marker);
        let mut cmd = 0;
        host_common::wait_until("the sampling command runs", Duration::from_secs(60), || {
            cmd = std::fs::read_to_string(&pidfile)
                .ok()
                .and_then(|p| p.trim().parse().ok())
                .unwrap_or(0);
            cmd != 0
        });
        let _ = std::fs::remove_file(&pidfile);
        let _leftovers = KillOnDrop(vec![plugin, cmd]);
        if signalled {
            signal(cli.id(), libc::SIGTERM);
        }
        let (status, err) = exit_of(cli);
        let expected = if signalled { 143 } else { 1 };
        assert_eq!(status, Some(expected), "signalled {signalled}: {err}");
        for (what, pid) in [("plugin", plugin), ("sampling command", cmd)] {
            assert!(
                ends_within(pid, EVENT_WAIT_SHORT),
                "signalled {signalled}: the {what} (pid {pid}) still runs after the CLI exited"
            );
        }
    }
}

/// Starts `executa ARGS -- python3 FIXTURE MARKER` with its stderr read line by line, and
/// `sighup_ignored`: as `nohup` starts it.
fn start_reading(args: &[&str], fixture_name: &str, marker: &str, sighup_ignored: bool) -> Cli {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_executa"));
    cmd.args(args)
        .args(["--init-timeout", "30", "--describe-timeout", "30", "--"])
        .arg("python3")
        .arg(fixture(fixture_name))
        .arg(marker)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if sighup_ignored {
        // SAFETY: signal(2) is async-signal-safe, as a pre_exec hook must be.
        unsafe {
            cmd.pre_exec(|| {
                libc::signal(libc::SIGHUP, libc::SIG_IGN);
                Ok(())
            })
        };
    }
    let mut child = cmd.spawn().expect("start executa");
    let err = child.stderr.take().expect("piped stderr");
    let (tx, lines) = crossbeam_channel::unbounded();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    Cli { child, lines }
}

struct Cli {
    child: Child,
    lines: crossbeam_channel::Receiver<String>,
}

impl Cli {
    /// Waits (a minute at most) for a stderr line containing `text`.
    fn line_with(&self, text: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(text) => return,
                Ok(_) => {}
                Err(_) => panic!("no stderr line with {text:?} within a minute"),
            }
        }
    }

    /// The exit status, once the CLI has exited (a minute at most).
    fn status(mut self) -> Option<i32> {
        let mut status = None;
        host_common::wait_until("the CLI exits", Duration::from_secs(60), || {
            status = self.child.try_wait().ok().flatten();
            status.is_some()
        });
        status.and_then(|s| s.code())
    }
}

/// A CLI started with SIGHUP ignored (`nohup`) keeps it ignored; SIGTERM still ends it.
#[test]
fn sighup_stays_ignored_under_nohup() {
    let marker = unique("nohup");
    let never = std::env::temp_dir().join(format!("{marker}.never"));
    let args = serde_json::json!({ "until": never }).to_string();
    let cli = start_reading(
        &["call", "--args", &args, "hold"],
        "tools_plugin.py",
        &marker,
        true,
    );
    cli.line_with("progress");
    let plugin = plugin_pid(&cli.child, &marker);
    let _leftover = KillOnDrop(vec![plugin]);
    signal(cli.child.id(), libc::SIGHUP);
    // SIGTERM next: had SIGHUP been taken, the CLI would have said so first.
    signal(cli.child.id(), libc::SIGTERM);
    cli.line_with("SIGTERM: stopping what this command started");
    assert_eq!(cli.status(), Some(143));
    assert!(ends_within(plugin, Duration::ZERO), "the plugin still runs");
}

/// A hang-up whose terminal is gone (stderr closed: every line the CLI writes fails) still
/// ends the plugin and the CLI (the teardown's first line used to panic its thread, and
/// the CLI then waited for ever).
#[test]
fn a_signal_with_stderr_closed_still_ends_everything() {
    use std::io::BufRead;
    let marker = unique("closed");
    let never = std::env::temp_dir().join(format!("{marker}.never"));
    let args = serde_json::json!({ "until": never }).to_string();
    let mut cli = start(&["call", "--args", &args, "hold"], &marker);
    let mut err = std::io::BufReader::new(cli.stderr.take().expect("piped stderr"));
    let mut line = String::new();
    while !line.contains("progress") {
        line.clear();
        let read = err.read_line(&mut line).expect("read stderr");
        assert!(read > 0, "stderr ended before the invoke's progress");
    }
    let plugin = plugin_pid(&cli, &marker);
    let _leftover = KillOnDrop(vec![plugin]);
    drop(err); // the terminal is gone
    signal(cli.id(), libc::SIGHUP);
    let (status, _) = exit_of(cli);
    assert_eq!(status, Some(129));
    assert!(
        ends_within(plugin, EVENT_WAIT_SHORT),
        "the plugin still runs"
    );
}

/// A second interrupt while the shutdown sequence waits out a plugin that ignores stdin
/// EOF and SIGTERM kills it at once: `check --grace 600` would otherwise wait 20 minutes.
#[test]
fn a_second_interrupt_kills_what_the_first_is_waiting_for() {
    let marker = unique("stubborn");
    let cli = start_reading(
        &["check", "--no-invoke", "--grace", "600"],
        "ignores_sigterm.py",
        &marker,
        false,
    );
    cli.line_with("ignoring it, and SIGTERM too");
    let plugin = plugin_pid(&cli.child, &marker);
    let _leftover = KillOnDrop(vec![plugin]);
    signal(cli.child.id(), libc::SIGINT);
    cli.line_with("SIGINT: stopping what this command started");
    signal(cli.child.id(), libc::SIGINT);
    cli.line_with("SIGINT: killing what is left");
    assert_eq!(cli.status(), Some(130));
    assert!(ends_within(plugin, Duration::ZERO), "the plugin still runs");
}
