//! File transport against a hostile plugin: the path it names is swapped between a reply
//! file, a symlink to `/dev/zero` and a 512 MiB file while the host reads it. The host's
//! memory stays within the frame cap plus a small constant, and every call that does not
//! get the small reply fails with a clear error. One test per binary, so that this
//! process's peak memory is this test's alone.
// Linux only: drives a Python fixture (which a Windows test process under Wine cannot start)
// that swaps in `/dev/zero` and a FIFO, and reads this process's peak memory from `/proc`.
#![cfg(target_os = "linux")]

mod host_common;

use executa::Error;
use executa::host::{Handlers, Host, HostOptions};
use host_common::{opts, py};
use serde_json::json;

const CAP: usize = 1 << 20;
/// Headroom over the cap for everything else a read may allocate (the parsed reply, the
/// error text, allocator slack).
const SLACK: u64 = 8 << 20;

/// This process's peak resident memory (`VmHWM`), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmHWM");
    kb * 1024
}

/// The errors a refused transport file may give: each names the path and the reason.
fn is_clear_refusal(e: &Error) -> bool {
    match e {
        Error::FrameTooLarge { max, .. } => *max == CAP,
        Error::Protocol(why) => {
            why.starts_with("file transport path ")
                // "other links": the race replaced the file right after the host opened
                // it (its link count fell to 0), which the host refuses as well.
                && ["a symlink", "cannot open", "not a regular file", "grew", "other links"]
                    .iter()
                    .any(|r| why.contains(r))
        }
        _ => false,
    }
}

#[test]
fn a_racing_file_transport_plugin_cannot_make_the_host_read_without_limit() {
    let options = HostOptions {
        max_frame_bytes: CAP,
        ..opts()
    };
    let host = Host::start(
        py("racing_file_transport.py", &[]),
        options,
        Handlers::new(),
    )
    .expect("start");
    let before = peak_rss();

    // Each hostile file on its own: refused with its reason, the plugin keeps serving.
    let fixed = |kind: &str| host.invoke("fixed", &json!({ "kind": kind })).unwrap_err();
    let zero = fixed("zero").to_string();
    assert!(zero.contains("a symlink"), "{zero}");
    assert!(matches!(fixed("big"), Error::FrameTooLarge { size, max: CAP } if size == 512 << 20));
    let fifo = fixed("fifo").to_string();
    assert!(fifo.contains("not a regular file"), "{fifo}");

    // The race: keep invoking until both a read and a refusal have happened.
    let (mut read, mut refused) = (0, 0);
    for _ in 0..5000 {
        match host.invoke("race", &json!({})) {
            Ok(r) => {
                assert_eq!(r.data["small"], true);
                read += 1;
            }
            Err(e) => {
                assert!(is_clear_refusal(&e), "unclear error: {e:?}");
                refused += 1;
            }
        }
        if read >= 5 && refused >= 5 {
            break;
        }
    }
    assert!(read >= 5 && refused >= 5, "read {read}, refused {refused}");
    let grew = peak_rss().saturating_sub(before);
    eprintln!("race: read {read}, refused {refused}, peak grew {grew} bytes");
    assert!(
        grew < CAP as u64 + SLACK,
        "peak memory grew by {grew} bytes with a {CAP}-byte cap"
    );
    assert_eq!(host.status().restarts, 0, "the plugin was never restarted");
    host.shutdown();
}
