//! The whole plugin runtime through `Plugin::serve` on any input: every output line is a
//! JSON-RPC frame with a string, number or null id, every request with a unique id gets
//! exactly one reply, nothing panics, serve returns (libFuzzer's -timeout catches a hang)
//! and every thread it started ends soon after (so LeakSanitizer sees no thread records
//! of detached threads still winding down).
#![no_main]

#[path = "../../tests/props/mod.rs"]
mod props;

libfuzzer_sys::fuzz_target!(
    |input: &[u8]| props::and_its_threads_end(|| props::check_serve(input))
);
