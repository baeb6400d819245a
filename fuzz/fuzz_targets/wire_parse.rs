//! `wire::parse` on any line: never panics, and agrees with `serde_json` on what is JSON.
#![no_main]

#[path = "../../tests/props/mod.rs"]
mod props;

libfuzzer_sys::fuzz_target!(|line: &[u8]| props::check_parse(line));
