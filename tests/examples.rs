//! Runs the tests written inside `examples/hello.rs` and `examples/everything.rs` (each
//! drives its plugin in-process with `executa::testing::TestHost`).

#[allow(dead_code)]
#[path = "../examples/hello.rs"]
mod hello;

#[allow(dead_code)]
#[path = "../examples/everything.rs"]
mod everything;

/// A plugin that refuses to start gives its own reasons to the test, not a bare hang-up.
#[test]
fn a_refused_plugin_reports_why() {
    use executa::testing::TestHost;
    use executa::{Error, Plugin, Tool, ToolError};
    let noop = |_: serde::de::IgnoredAny, _: &executa::Invocation| {
        Ok::<_, ToolError>(serde_json::json!({}))
    };
    let plugin = Plugin::new("bad", "1.0")
        .description("d")
        .tool(Tool::new("t", "d", noop));
    match TestHost::start(plugin) {
        Err(Error::InvalidPlugin(problems)) => {
            assert_eq!(problems.len(), 1, "{problems:?}");
            assert!(problems[0].contains("SemVer"), "{problems:?}");
        }
        Err(e) => panic!("expected InvalidPlugin, got {e}"),
        Ok(_) => panic!("a plugin with version 1.0 started"),
    }
}
