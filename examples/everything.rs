//! The reference plugin: every feature of the runtime, one tool each. The crate's tests,
//! benchmarks and demo drive it, and host authors can use it as a known-good peer.
//!
//! Run it by hand: `cargo run --example everything`, then type JSON-RPC lines, e.g.
//! `{"jsonrpc":"2.0","id":1,"method":"invoke","params":{"tool":"echo","arguments":{"hi":1}}}`

use std::time::{Duration, Instant};

use executa::{
    CreateMessage, CredentialSpec, Invocation, Param, ParamType, Plugin, Scope, Tool, ToolError,
};
use serde::Deserialize;
use serde_json::{Map, Value, json};

type Reply = Result<Value, ToolError>;

// Each tool's arguments and their manifest entries, declared once.
executa::args! {
    struct SleepArgs {
        /// Milliseconds
        ms: u64,
    }

    struct FailArgs {
        /// Error text
        message: String,
    }

    struct BigArgs {
        /// Blob size
        bytes: usize,
    }

    struct TextArgs {
        /// Text
        text: String,
    }

    struct PromptArgs {
        /// The prompt
        prompt: String,
        /// Token cap
        max_tokens: u64 = 256,
    }

    struct KeyArgs {
        /// Key
        key: String,
    }

    struct StepsArgs {
        /// How many events
        steps: u64,
    }

    struct SchemaDemoArgs {
        /// Any JSON object
        anything: Option<Map<String, Value>>,
        /// Tags
        tags: Option<Vec<String>>,
    }

    struct StatsArgs {
        /// The numbers to summarize
        numbers: Vec<f64>,
    }

    /// The `stats` tool's result, declared like its arguments: its fields are the
    /// manifest's `returns` list and the tool's MCP `outputSchema`.
    #[derive(serde::Serialize)]
    struct Stats {
        /// How many numbers there are
        count: usize,
        /// Their sum
        sum: f64,
        /// Their mean; null when there are none
        mean: Option<f64>,
        /// The smallest and the largest; null when there are none
        range: Option<Range>,
    }

    #[derive(serde::Serialize)]
    struct Range {
        /// The smallest
        min: f64,
        /// The largest
        max: f64,
    }
}

/// The one hand-written parameter list (the escape hatch, for what `args!` cannot say):
/// `value` takes any JSON value, which no Rust field type of `args!` describes.
#[derive(Deserialize)]
struct RememberArgs {
    key: String,
    value: Value,
}

fn echo(args: Map<String, Value>, _: &Invocation) -> Result<Map<String, Value>, ToolError> {
    Ok(args)
}

fn sleep(args: SleepArgs, _: &Invocation) -> Reply {
    let start = Instant::now();
    std::thread::sleep(Duration::from_millis(args.ms));
    Ok(json!({ "slept_ms": start.elapsed().as_millis() as u64 }))
}

fn fail(args: FailArgs, _: &Invocation) -> Reply {
    Err(ToolError::new(args.message))
}

fn panic(_: Value, _: &Invocation) -> Reply {
    panic!("the `panic` tool panicked on purpose")
}

fn big(args: BigArgs, _: &Invocation) -> Reply {
    Ok(json!({ "blob": "x".repeat(args.bytes) }))
}

fn print(args: TextArgs, _: &Invocation) -> Reply {
    // The stdout guard sends this to stderr; the protocol stream stays clean.
    println!("{}", args.text);
    Ok(json!({ "printed": true }))
}

fn log_line(args: TextArgs, _: &Invocation) -> Reply {
    // The plugin's log goes to stderr too; a line that finds no room there is dropped and
    // counted, never waited for.
    log::warn!("{}", args.text);
    Ok(json!({ "logged": true }))
}

fn credentials(_: Value, ctx: &Invocation) -> Reply {
    // Names only: values never leave the invocation.
    Ok(json!({ "names": ctx.credential_names().collect::<Vec<_>>() }))
}

fn sample(args: PromptArgs, ctx: &Invocation) -> Reply {
    let request = CreateMessage::new(args.prompt, args.max_tokens);
    let answer = ctx.sampling().create_message(&request)?;
    Ok(json!({ "text": answer.text(), "model": answer.model }))
}

fn remember(args: RememberArgs, ctx: &Invocation) -> Reply {
    let written = ctx.storage().set(&args.key, &args.value, Scope::User)?;
    Ok(json!({ "stored": true, "etag": written.etag }))
}

fn recall(args: KeyArgs, ctx: &Invocation) -> Reply {
    let stored = ctx.storage().get(&args.key, Scope::User)?;
    Ok(json!({ "exists": stored.exists, "value": stored.value }))
}

fn progress(args: StepsArgs, ctx: &Invocation) -> Reply {
    let mut sent = 0;
    for step in 1..=args.steps {
        sent += u64::from(ctx.progress("progress", &json!({ "step": step, "of": args.steps })));
    }
    Ok(json!({ "steps": args.steps, "sent": sent, "dropped": ctx.host().progress_dropped() }))
}

fn stats(args: StatsArgs, _: &Invocation) -> Result<Stats, ToolError> {
    let numbers = args.numbers;
    // Not `.sum()`: the empty sum of floats is -0.0.
    let sum = numbers.iter().fold(0.0, |sum, n| sum + n);
    let range = numbers.iter().copied().fold(None, |range, n| match range {
        None => Some(Range { min: n, max: n }),
        Some(Range { min, max }) => Some(Range {
            min: min.min(n),
            max: max.max(n),
        }),
    });
    Ok(Stats {
        count: numbers.len(),
        sum,
        mean: (!numbers.is_empty()).then(|| sum / numbers.len() as f64),
        range,
    })
}

fn main() {
    plugin().run()
}

/// The plugin, apart from `main` so its tests run it in-process.
fn plugin() -> Plugin {
    Plugin::new("everything", "1.0.0")
        .description("Reference plugin exercising every executa feature")
        .capability("llm.sample")
        .capability("aps.kv")
        .credential(CredentialSpec::new("DEMO_API_KEY", "A demo key, never echoed").optional())
        .tool(Tool::new(
            "echo",
            "Returns its arguments object as data",
            echo,
        ))
        .tool(Tool::typed("sleep", "Sleeps, then says how long", sleep))
        .tool(Tool::typed("fail", "Fails with the given message", fail))
        .tool(Tool::new(
            "panic",
            "Panics (the runtime answers -32603)",
            panic,
        ))
        .tool(Tool::typed("big", "Returns a blob of N ASCII bytes", big))
        .tool(Tool::typed(
            "print",
            "println!s text (lands on stderr)",
            print,
        ))
        .tool(Tool::typed(
            "log",
            "Logs text as a warning (stderr)",
            log_line,
        ))
        .tool(Tool::new(
            "credentials",
            "Names the credentials present",
            credentials,
        ))
        .tool(Tool::typed(
            "sample",
            "One sampling call to the host's LLM",
            sample,
        ))
        .tool(
            Tool::new("remember", "storage/set in scope user", remember)
                .param(Param::string("key", "Key"))
                .param(Param::new("value", ParamType::Object, "Value (any JSON)")),
        )
        .tool(Tool::typed("recall", "storage/get in scope user", recall))
        .tool(Tool::typed("progress", "Sends N progress events", progress))
        .tool(Tool::new(
            "noop",
            "Does nothing (for latency benchmarks)",
            |_: serde::de::IgnoredAny, _: &Invocation| Ok::<_, ToolError>(json!({})),
        ))
        .tool(Tool::typed(
            "_schema_demo",
            "Lists the parameter types",
            |_: SchemaDemoArgs, _: &Invocation| Ok::<_, ToolError>(json!({})),
        ))
        // A declared result type (MCP's `outputSchema`) and what the tool does to its
        // environment (MCP's annotations): nothing, the same every time, nothing outside.
        .tool(
            Tool::typed("stats", "Count, sum, mean and range of numbers", stats)
                .returns::<Stats>()
                .display_name("Number statistics")
                .read_only()
                .destructive(false)
                .idempotent()
                .open_world(false),
        )
}

// `cargo test` runs these through tests/examples.rs: the plugin in-process, no binary.
#[cfg(test)]
mod tests {
    use executa::host::{MemoryStorage, ScriptedSampling};
    use executa::testing::{ProgressEvent, StorageWrite, TestHost};
    use serde_json::json;

    #[test]
    fn storage_writes_are_reported_and_readable() -> executa::Result<()> {
        let mut host = TestHost::start(super::plugin())?;
        let out = host.invoke("remember", json!({ "key": "k", "value": { "n": 1 } }))?;
        assert_eq!(out.data().map(|d| &d["stored"]), Some(&json!(true)));
        assert_eq!(
            out.storage_writes,
            vec![StorageWrite {
                method: "storage/set".into(),
                scope: "user".into(),
                key: "k".into(),
                value: Some(json!({ "n": 1 })),
            }]
        );
        assert_eq!(host.storage().value("user", "k"), Some(json!({ "n": 1 })));
        let out = host.invoke("recall", json!({ "key": "k" }))?;
        assert_eq!(
            out.data(),
            Some(&json!({ "exists": true, "value": { "n": 1 } }))
        );
        Ok(())
    }

    #[test]
    fn sampling_is_answered_from_the_script() -> executa::Result<()> {
        let script = ScriptedSampling::from_jsonl(
            r#"{"match": {}, "result": {"text": "scripted answer"}}"#,
        )?;
        let mut host = TestHost::start_with(super::plugin(), MemoryStorage::new(), script)?;
        let out = host.invoke("sample", json!({ "prompt": "hi" }))?;
        assert_eq!(
            out.data().map(|d| &d["text"]),
            Some(&json!("scripted answer"))
        );
        assert_eq!(out.reverse_calls, vec!["sampling/createMessage"]);
        Ok(())
    }

    #[test]
    fn progress_events_and_failures_are_typed() -> executa::Result<()> {
        let mut host = TestHost::start(super::plugin())?;
        let out = host.invoke("progress", json!({ "steps": 2 }))?;
        assert_eq!(
            out.progress,
            vec![
                ProgressEvent {
                    kind: "progress".into(),
                    data: json!({ "step": 1, "of": 2 })
                },
                ProgressEvent {
                    kind: "progress".into(),
                    data: json!({ "step": 2, "of": 2 })
                },
            ]
        );
        let out = host.invoke("fail", json!({ "message": "no" }))?;
        assert_eq!(out.error(), Some("no"));
        let out = host.invoke("panic", json!({}))?;
        assert_eq!(out.rpc_error().map(|e| e.code), Some(-32603));
        Ok(())
    }
}
