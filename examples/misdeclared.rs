//! A plugin that is wrong on purpose, to show the start-up check: it refuses to start (and
//! to print `--describe`), naming each problem on its own stderr line, and exits 2.
//!
//! Try it: `cargo run --example misdeclared -- --describe; echo "exit $?"`

use executa::{Param, Plugin, Tool, ToolError};
use serde_json::{Value, json};

executa::args! {
    /// The `order` tool's arguments.
    struct OrderArgs {
        /// Article number
        sku: String,
        /// How many
        quantity: u32 = 1,
    }
}

fn order(args: OrderArgs, _ctx: &executa::Invocation) -> Result<Value, ToolError> {
    Ok(json!({ "sku": args.sku, "quantity": args.quantity }))
}

/// A plain serde struct and no parameter list: the manifest would publish no parameters.
#[derive(serde::Deserialize)]
struct NoteArgs {
    text: String,
}

fn note(args: NoteArgs, _ctx: &executa::Invocation) -> Result<Value, ToolError> {
    Ok(json!({ "noted": args.text }))
}

fn main() {
    Plugin::new("misdeclared", "1.0") // not SemVer
        .description("Shows the start-up check")
        .capability("storage.user") // storage is `aps.kv`
        .capability("llm.samples") // a near miss of `llm.sample`
        .tool(
            // The hand-written list names `qty`, not the args type's `quantity`.
            Tool::typed("order", "Orders an article", order)
                .param(Param::string("sku", "Article number"))
                .param(Param::integer("qty", "How many").optional()),
        )
        .tool(Tool::typed("order", "The same name again", order))
        // `text` is read but never published.
        .tool(Tool::new("note", "Takes a note", note))
        .run()
}
