//! A realistic sampling tool: summarize text with the host's LLM, in a requested style,
//! asking for structured JSON output, with progress events and clear failures.
//!
//! Drive it with the crate's host: `cargo run --bin executa -- call summarize
//! --args '{"text":"..."}' -- target/debug/examples/summarize` (the in-memory sampling
//! backend echoes the prompt).

use executa::{CreateMessage, Error, Invocation, Plugin, ResponseFormat, Tool, ToolError};
use serde_json::{Value, json};

executa::args! {
    /// The tone of the summary.
    enum Style { Neutral = "neutral", Casual = "casual", Formal = "formal" }

    /// The `summarize` tool's arguments.
    struct Args {
        /// The text to summarize
        text: String,
        /// Tone
        style: Style = Style::Neutral,
        /// Upper bound on the summary length
        max_words: u32 = 80,
    }
}

fn summarize(args: Args, ctx: &Invocation) -> Result<Value, ToolError> {
    if args.text.trim().is_empty() {
        return Err(ToolError::new("nothing to summarize: `text` is empty"));
    }
    ctx.progress(
        "progress",
        &json!({ "stage": "asking the model", "chars": args.text.len() }),
    );
    let style = match args.style {
        Style::Neutral => "neutral",
        Style::Casual => "casual",
        Style::Formal => "formal",
    };
    let request = CreateMessage::new(
        format!(
            "Summarize in at most {} words, {style} tone:\n\n{}",
            args.max_words, args.text
        ),
        u64::from(args.max_words) * 3,
    )
    .system("You write faithful, concise summaries. Never invent facts.")
    .temperature(0.2)
    .response_format(ResponseFormat::JsonObject);
    let answer = match ctx.sampling().create_message(&request) {
        Ok(answer) => answer,
        // The symbolic code says what happened; numeric codes collide between families.
        Err(e @ Error::Remote(_)) if e.error_code() == Some("USER_DENIED") => {
            return Err(ToolError::new(
                "the user declined to let this tool use the LLM",
            ));
        }
        Err(e) => return Err(ToolError::new(format!("sampling failed: {e}"))),
    };
    // `response_format` asks for JSON, but content.text stays a string: parse it tolerantly.
    let summary = serde_json::from_str::<Value>(answer.text())
        .ok()
        .and_then(|v| v.get("summary").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| answer.text().to_owned());
    ctx.progress("progress", &json!({ "stage": "done" }));
    Ok(json!({
        "summary": summary,
        "model": answer.model,
        "tokens": answer.usage.map(|u| u.total_tokens),
    }))
}

fn main() {
    Plugin::new("summarize", "0.1.0")
        .description("Summarizes text with the host's LLM")
        .capability("llm.sample")
        .tool(Tool::typed(
            "summarize",
            "Summarizes a text faithfully",
            summarize,
        ))
        .run()
}
