//! The quickstart: a complete Executa plugin with one tool.
//!
//! Try it: `printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"invoke","params":{"tool":"greet","arguments":{"name":"Ada"}}}' | cargo run --example hello`

use executa::{Plugin, Tool, ToolError};
use serde_json::{Value, json};

executa::args! {
    /// The `greet` tool's arguments: the manifest's parameter list is made from these lines.
    struct GreetArgs {
        /// Who to greet
        name: String,
        /// End with an exclamation mark
        excited: bool = false,
    }
}

fn greet(args: GreetArgs, _ctx: &executa::Invocation) -> Result<Value, ToolError> {
    if args.name.trim().is_empty() {
        return Err(ToolError::new("name must not be empty"));
    }
    let mark = if args.excited { "!" } else { "." };
    Ok(json!({ "greeting": format!("Hello, {}{mark}", args.name) }))
}

/// The plugin, apart from `main` so the tests below can run it in-process.
fn plugin() -> Plugin {
    Plugin::new("hello", "0.1.0")
        .description("Greets people by name")
        .tool(Tool::typed(
            "greet",
            "Returns a greeting for a person",
            greet,
        ))
}

fn main() {
    plugin().run()
}

// `cargo test` runs these through tests/examples.rs: the plugin in-process, no binary.
#[cfg(test)]
mod tests {
    use executa::testing::TestHost;
    use serde_json::json;

    #[test]
    fn greets_and_applies_the_default() -> executa::Result<()> {
        let mut host = TestHost::start(super::plugin())?;
        let out = host.invoke("greet", json!({ "name": "Ada" }))?;
        assert_eq!(out.data(), Some(&json!({ "greeting": "Hello, Ada." })));
        let out = host.invoke("greet", json!({ "name": "Ada", "excited": true }))?;
        assert_eq!(out.data(), Some(&json!({ "greeting": "Hello, Ada!" })));
        Ok(())
    }

    #[test]
    fn reports_bad_input() -> executa::Result<()> {
        let mut host = TestHost::start(super::plugin())?;
        let out = host.invoke("greet", json!({ "name": " " }))?;
        assert_eq!(out.error(), Some("name must not be empty"));
        let out = host.invoke("greet", json!({ "name": 7 }))?;
        let err = out.rpc_error().map(|e| (e.code, e.data.clone()));
        assert_eq!(err, Some((-32602, Some(json!({ "path": "name" })))));
        Ok(())
    }
}
