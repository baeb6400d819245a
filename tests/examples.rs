//! Runs the tests written inside `examples/hello.rs` and `examples/everything.rs` (each
//! drives its plugin in-process with `executa::testing::TestHost`).

#[allow(dead_code)]
#[path = "../examples/hello.rs"]
mod hello;

#[allow(dead_code)]
#[path = "../examples/everything.rs"]
mod everything;
