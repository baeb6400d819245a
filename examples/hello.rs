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
