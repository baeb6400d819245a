//! The quickstart: a complete Executa plugin with one tool.
//!
//! Try it: `printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"invoke","params":{"tool":"greet","arguments":{"name":"Ada"}}}' | cargo run --example hello`

use executa::{Param, Plugin, Tool, ToolError};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize)]
struct GreetArgs {
    name: String,
    #[serde(default)]
    excited: bool,
}

fn greet(args: GreetArgs, _ctx: &executa::Invocation) -> Result<Value, ToolError> {
    if args.name.trim().is_empty() {
        return Err(ToolError::new("name must not be empty"));
    }
    let mark = if args.excited { "!" } else { "." };
    Ok(json!({ "greeting": format!("Hello, {}{mark}", args.name) }))
}

fn main() {
    Plugin::new("hello", "0.1.0")
        .description("Greets people by name")
        .tool(
            Tool::new("greet", "Returns a greeting for a person", greet)
                .param(Param::string("name", "Who to greet"))
                .param(
                    Param::boolean("excited", "End with an exclamation mark").default_value(false),
                ),
        )
        .run()
}
