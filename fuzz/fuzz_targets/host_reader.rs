//! The host's reader on any plugin output: a `sh` plugin replays the input after the
//! host's first request and exits; the request must be settled, nothing may panic. The
//! host's temp directory (`TMPDIR`, where file transport reads and deletes) is a private
//! scratch directory holding one valid reply file, `reply.json`. The host's threads must
//! end once it is dropped.
#![no_main]

#[path = "../../tests/props/mod.rs"]
mod props;

use std::path::PathBuf;
use std::sync::OnceLock;

static SCRATCH: OnceLock<PathBuf> = OnceLock::new();

libfuzzer_sys::fuzz_target!(
    init: {
        // Rust's std ignores SIGPIPE before a Rust `main` runs; libFuzzer's C++ `main` does
        // not, and the host writing to a plugin that already exited would then kill the
        // fuzzer. Do what every Rust host binary gets for free.
        // SAFETY: setting a signal disposition to SIG_IGN at start-up, single-threaded.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
        let dir = props::host_scratch(std::env::temp_dir().join("executa-fuzz-host"));
        // SAFETY: set once at start-up, before any other thread of this process exists.
        unsafe { std::env::set_var("TMPDIR", dir.join("tmp")) };
        let _ = SCRATCH.set(dir);
    },
    |output: &[u8]| {
        if let Some(dir) = SCRATCH.get() {
            props::and_its_threads_end(|| props::check_host_reader(output, dir));
        }
    }
);
