//! Dual-protocol plugins (issue 37, item 2 and 3): a handler asks `ctx.protocol()` which
//! protocol its call serves (Executa, an MCP handshake session, an MCP 2026-07-28 stateless
//! request) and falls back where MCP has no storage; `TestHost` drives the same plugin over
//! MCP, in both eras, with the same test API; storage is pre-filled in one line.

mod common;

use common::Conn;
use executa::host::{McpVersion, MemoryStorage, ScriptedSampling};
use executa::storage::SetOptions;
use executa::testing::TestHost;
use executa::{CreateMessage, Error, Invocation, Plugin, Scope, Served, Tool, ToolError, args};
use serde_json::{Value, json};

const MODERN: &str = "2026-07-28";

args! {
    /// Whom to greet.
    pub struct GreetArgs {
        /// The name
        name: String,
    }
}

/// What `ctx.protocol()` said, as data.
fn served(ctx: &Invocation) -> Value {
    let p = ctx.protocol();
    json!({ "mcp": p.is_mcp(), "revision": p.mcp_revision(), "executa": p == Served::Executa })
}

/// The dual-protocol tool of the guide: the greeting is read from storage under Executa;
/// MCP has no storage, so it falls back to a default there.
fn greet(a: GreetArgs, ctx: &Invocation) -> Result<Value, ToolError> {
    let greeting = match ctx.protocol() {
        Served::Executa => ctx.storage().get("greeting", Scope::User)?.value,
        _ => Value::Null,
    };
    let greeting = greeting.as_str().unwrap_or("Hello");
    Ok(json!({ "text": format!("{greeting}, {}.", a.name), "served": served(ctx) }))
}

fn plugin() -> Plugin {
    Plugin::new("dual", "0.1.0")
        .description("Serves Executa hosts and MCP clients")
        .capability("aps.kv")
        .capability("llm.sample")
        .tool(Tool::typed("greet", "Greets someone", greet))
        .tool(Tool::typed(
            "which",
            "Says which protocol it serves",
            |_: EmptyArgs, ctx| Ok::<_, ToolError>(served(ctx)),
        ))
        .tool(Tool::typed(
            "summarize",
            "Asks the model, reporting progress",
            summarize,
        ))
        .tool(Tool::typed("fail", "Always fails", |_: EmptyArgs, _ctx| {
            Err::<Value, _>(ToolError::new("no luck"))
        }))
}

args! {
    /// No arguments.
    pub struct EmptyArgs {}
    /// A text to summarize.
    pub struct SummarizeArgs {
        /// The text
        text: String,
    }
}

fn summarize(a: SummarizeArgs, ctx: &Invocation) -> Result<Value, ToolError> {
    ctx.progress(
        "progress",
        &json!({ "step": 1, "of": 2, "message": "asking" }),
    );
    let answer = ctx
        .sampling()
        .create_message(&CreateMessage::new(format!("Summarize: {}", a.text), 50))?;
    ctx.progress(
        "progress",
        &json!({ "step": 2, "of": 2, "message": "done" }),
    );
    Ok(json!({ "summary": answer.text() }))
}

fn script() -> executa::Result<ScriptedSampling> {
    ScriptedSampling::from_jsonl(
        r#"{"match": {"contains": "Summarize"}, "result": {"text": "A short summary."}}"#,
    )
}

/// Each MCP era `TestHost` speaks, and the revision it must end up in.
fn mcp_eras() -> [(McpVersion, &'static str); 4] {
    [
        (McpVersion::Auto, MODERN),
        (McpVersion::Legacy, "2025-11-25"),
        (McpVersion::Pinned("2025-06-18".into()), "2025-06-18"),
        (McpVersion::Pinned(MODERN.into()), MODERN),
    ]
}

#[test]
fn protocol_is_executa_for_an_invoke_and_the_revision_for_each_mcp_era() -> executa::Result<()> {
    let mut host = TestHost::start(plugin())?;
    assert_eq!(host.mcp_revision(), None);
    let out = host.invoke("which", json!({}))?;
    assert_eq!(
        out.data(),
        Some(&json!({ "mcp": false, "revision": null, "executa": true }))
    );
    for (version, revision) in mcp_eras() {
        let mut host = TestHost::builder(plugin()).mcp(version.clone()).start()?;
        assert_eq!(host.mcp_revision(), Some(revision), "{version}");
        let out = host.invoke("which", json!({}))?;
        assert_eq!(
            out.data(),
            Some(&json!({ "mcp": true, "revision": revision, "executa": false })),
            "{version}"
        );
    }
    // `TestHost::mcp` speaks what `Host` speaks by default: 2026-07-28 with this runtime.
    let host = TestHost::mcp(plugin())?;
    assert_eq!(host.mcp_revision(), Some(MODERN));
    Ok(())
}

/// Raw frames, without `TestHost`: one process serves a handshake session (2025-06-18) and
/// a 2026-07-28 request beside it, and an Executa invoke after; each call says its own.
#[test]
fn protocol_is_per_call_in_raw_frames_session_stateless_and_executa() {
    let mut conn = Conn::serve(plugin());
    let init = conn.initialize("2025-06-18", json!({}));
    assert_eq!(init["protocolVersion"], "2025-06-18");
    conn.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let call = |conn: &mut Conn, id: u64, meta: Option<Value>| {
        let mut params = json!({ "name": "which", "arguments": {} });
        if let Some(meta) = meta {
            params["_meta"] = meta;
        }
        conn.request(id, "tools/call", Some(params));
        conn.recv_until_id(&id.to_string()).0.result()["structuredContent"].clone()
    };
    let session = call(&mut conn, 1, None);
    assert_eq!(
        session,
        json!({"mcp": true, "revision": "2025-06-18", "executa": false})
    );
    let stateless = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let modern = call(&mut conn, 2, Some(stateless));
    assert_eq!(
        modern,
        json!({"mcp": true, "revision": MODERN, "executa": false})
    );
    assert_eq!(
        call(&mut conn, 3, None),
        session,
        "the session is still 2025-06-18"
    );

    // An Executa host in the same process (it re-initializes): Executa again.
    let init = conn.initialize("2.0", json!({}));
    assert_eq!(init["protocolVersion"], "2.0");
    conn.invoke(4, "which", json!({}));
    let executa = conn.recv_until_id("4").0.data().clone();
    assert_eq!(
        executa,
        json!({"mcp": false, "revision": null, "executa": true})
    );
}

/// The guide's fallback pattern, tested in both protocols with the same test code: storage
/// pre-filled in one line serves the Executa call; the MCP calls fall back without
/// touching storage (no reverse call at all).
#[test]
fn a_dual_protocol_tool_reads_storage_under_executa_and_falls_back_under_mcp() -> executa::Result<()>
{
    let mut host = TestHost::start(plugin())?;
    host.storage()
        .insert(Scope::User, "greeting", json!("Good morning"))?;
    let out = host.invoke("greet", json!({ "name": "Ada" }))?;
    assert_eq!(
        out.data().map(|d| &d["text"]),
        Some(&json!("Good morning, Ada."))
    );
    assert_eq!(out.reverse_calls, ["storage/get"]);

    for (version, revision) in mcp_eras() {
        let storage = MemoryStorage::with_entries([(Scope::User, "greeting", json!("Hi"))])?;
        let mut host = TestHost::builder(plugin())
            .mcp(version.clone())
            .storage(storage)
            .start()?;
        let out = host.invoke("greet", json!({ "name": "Ada" }))?;
        assert_eq!(
            out.data().map(|d| &d["text"]),
            Some(&json!("Hello, Ada.")),
            "{version}: {out:?}"
        );
        assert_eq!(
            out.data().map(|d| &d["served"]["revision"]),
            Some(&json!(revision))
        );
        assert!(
            out.reverse_calls.is_empty(),
            "{version}: {:?}",
            out.reverse_calls
        );
        assert_eq!(host.storage().value("user", "greeting"), Some(json!("Hi")));
    }
    Ok(())
}

/// Sampling answered by the test host's scripted backend and progress collected, the same
/// in both protocols: a request to the client in the handshake era, an input request and
/// a retry in 2026-07-28.
#[test]
fn sampling_and_progress_reach_the_test_host_in_every_protocol() -> executa::Result<()> {
    let mut hosts = vec![(
        "executa".to_owned(),
        TestHost::start_with(plugin(), MemoryStorage::new(), script()?)?,
    )];
    for (version, _) in mcp_eras() {
        let host = TestHost::builder(plugin())
            .mcp(version.clone())
            .sampling(script()?)
            .start()?;
        hosts.push((version.to_string(), host));
    }
    for (name, mut host) in hosts {
        let out = host.invoke("summarize", json!({ "text": "A long text." }))?;
        assert_eq!(
            out.data(),
            Some(&json!({ "summary": "A short summary." })),
            "{name}: {out:?}"
        );
        assert_eq!(out.reverse_calls, ["sampling/createMessage"], "{name}");
        assert_eq!(out.progress.len(), 2, "{name}: {:?}", out.progress);
        let last = &out.progress[1].data;
        if name == "executa" {
            assert_eq!(last, &json!({ "step": 2, "of": 2, "message": "done" }));
        } else {
            // MCP's `notifications/progress`, as `Host` reports it.
            assert_eq!(last["progress"].as_f64(), Some(2.0), "{name}: {last}");
            assert_eq!(last["total"].as_f64(), Some(2.0), "{name}: {last}");
            assert_eq!(last["message"], "done", "{name}");
        }
    }
    Ok(())
}

/// Tool errors and protocol errors read the same through `Outcome` (an MCP tool error is
/// `isError`, which the host library reads as `success: false`), the manifest comes from
/// `tools/list`, and an invoke context MCP cannot carry is refused, not dropped.
#[test]
fn errors_describe_and_context_over_mcp() -> executa::Result<()> {
    for (version, _) in mcp_eras() {
        let mut host = TestHost::builder(plugin()).mcp(version.clone()).start()?;
        let out = host.invoke("fail", json!({}))?;
        assert_eq!(
            (out.error(), out.data()),
            (Some("no luck"), None),
            "{version}"
        );
        let out = host.invoke("greet", json!({ "name": 7 }))?;
        assert!(
            out.error().is_some_and(|e| e.contains("name")),
            "{version}: {out:?}"
        );
        let out = host.invoke("nope", json!({}))?;
        assert_eq!(out.rpc_error().map(|e| e.code), Some(-32602), "{version}");
        let manifest = host.describe()?;
        assert_eq!(manifest["name"], "dual", "{version}");
        let tools: Vec<&str> = manifest["tools"]
            .as_array()
            .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(tools, ["greet", "which", "summarize", "fail"], "{version}");
        let secret = json!({ "credentials": { "API_KEY": "sk-1" } });
        let refused = host.invoke_with_context("which", json!({}), secret);
        assert!(
            matches!(&refused, Err(Error::Refused(e)) if e.code == -32602),
            "{refused:?}"
        );
        // The host still serves after the refusal.
        assert!(host.invoke("which", json!({}))?.data().is_some());
    }
    Ok(())
}

/// `MemoryStorage` pre-filled as the plugin's own `storage/set` would write: scopes checked
/// (a scope the store does not grant is refused as the platform refuses it), the value
/// limit kept, etags the plugin then sees, `SetOptions` (TTL, `if_match`) honoured.
#[test]
fn memory_storage_is_prefilled_with_the_platform_rules() -> executa::Result<()> {
    let storage = MemoryStorage::with_entries([
        (Scope::User, "greeting", json!("Hi")),
        (Scope::Tool, "count", json!(3)),
    ])?;
    assert_eq!(storage.len(), 2);
    assert_eq!(storage.value("tool", "count"), Some(json!(3)));
    let etag = storage.insert(Scope::App, "theme", "dark")?;
    assert!(etag.starts_with("W/\""), "{etag}");

    let narrow = MemoryStorage::with_scopes(&["user", "tool"]);
    let e = narrow
        .insert(Scope::App, "theme", "dark")
        .expect_err("not granted");
    assert_eq!(
        (e.code(), e.error_code()),
        (Some(-32021), Some("STORAGE_NOT_GRANTED"))
    );
    assert!(narrow.is_empty());
    let big = "x".repeat(executa::host::MAX_VALUE_BYTES + 1);
    let e = narrow
        .insert(Scope::User, "big", big)
        .expect_err("too large");
    assert_eq!(e.code(), Some(-32025));
    let e = narrow.insert(Scope::User, "", 1).expect_err("empty key");
    assert_eq!(e.code(), Some(-32028));
    let e = MemoryStorage::with_entries([(Scope::User, "k", 1), (Scope::User, "", 2)]);
    assert_eq!(e.err().and_then(|e| e.code()), Some(-32028));

    let ttl = SetOptions {
        ttl_seconds: Some(3600),
        ..SetOptions::default()
    };
    let first = narrow.insert_with(Scope::User, "n", 1, &ttl)?;
    let stale = SetOptions {
        if_match: Some("W/\"0-0\"".into()),
        ..SetOptions::default()
    };
    let e = narrow
        .insert_with(Scope::User, "n", 2, &stale)
        .expect_err("precondition");
    assert_eq!(e.code(), Some(-32023));
    assert_eq!(narrow.value("user", "n"), Some(json!(1)));

    // The plugin reads what was put, with the same etag.
    let plugin = Plugin::new("reader", "0.1.0")
        .description("Reads")
        .capability("aps.kv")
        .tool(Tool::typed("read", "Reads `n`", |_: EmptyArgs, ctx| {
            let got = ctx.storage().get("n", Scope::User)?;
            Ok::<_, ToolError>(json!({ "value": got.value, "etag": got.etag }))
        }));
    let mut host = TestHost::builder(plugin).storage(narrow).start()?;
    let out = host.invoke("read", json!({}))?;
    assert_eq!(out.data(), Some(&json!({ "value": 1, "etag": first })));
    Ok(())
}
