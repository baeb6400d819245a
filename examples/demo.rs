//! The main demo: this crate's host drives the `everything` example plugin through a whole
//! session, as the Agent would, and prints a transcript with per-step timings.
//!
//! Run: `cargo run --example demo`

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use executa::RpcError;
use executa::host::{
    Handlers, Host, HostOptions, InvokeOptions, MemoryStorage, PluginCommand, ReverseCall,
    ScriptedSampling, Service,
};
use serde_json::{Value, json};

/// Prints each reverse call the plugin makes, then lets a backend answer it.
struct Narrated(Arc<dyn Service>);

impl Service for Narrated {
    fn handles(&self, method: &str) -> bool {
        self.0.handles(method)
    }

    fn call(&self, call: &ReverseCall) -> Result<Value, RpcError> {
        let invoke = call.invoke_id.as_deref().unwrap_or("?");
        println!(
            "            plugin -> host  {} (invoke {})",
            call.method,
            short(invoke)
        );
        let answer = self.0.call(call);
        match &answer {
            Ok(v) => println!("            host -> plugin  {}", clip(&v.to_string(), 90)),
            Err(e) => println!("            host -> plugin  error {e}"),
        }
        answer
    }
}

fn main() {
    let start = Instant::now();
    let step = |what: &str| println!("[{:>8.1} ms] {what}", start.elapsed().as_secs_f64() * 1e3);
    println!("executa demo: the crate's host drives examples/everything.rs over stdio\n");

    step("building the plugin (cargo build --example everything)");
    let plugin = build_everything();

    let handlers = Handlers::new()
        .service(Arc::new(Narrated(Arc::new(
            ScriptedSampling::echo().with_model("demo-echo-model"),
        ))))
        .service(Arc::new(Narrated(Arc::new(MemoryStorage::new()))))
        .on_progress(|p| {
            println!(
                "            progress  {} {} (invoke {})",
                p.kind,
                p.data,
                short(p.invoke_id.as_deref().unwrap_or("?"))
            );
        });
    let opts = HostOptions {
        name: Some("everything".into()),
        ..HostOptions::default()
    };
    let t = Instant::now();
    let host = match Host::start(PluginCommand::new(&plugin), opts, handlers) {
        Ok(host) => host,
        Err(e) => {
            eprintln!("could not start the plugin: {e}");
            std::process::exit(1);
        }
    };
    let shake = host.handshake().expect("handshake recorded");
    step(&format!(
        "spawn + initialize + describe: protocol {} negotiated, plugin claims {:?} ({:.1} ms)",
        shake.version_str(),
        shake.capabilities.keys().collect::<Vec<_>>(),
        t.elapsed().as_secs_f64() * 1e3
    ));

    let manifest = host.manifest().expect("manifest cached");
    step(&format!(
        "manifest (cached): {} {}, {} tools",
        manifest.name,
        manifest.version,
        manifest.tools.len()
    ));
    let tools: Vec<_> = manifest.tools.iter().map(|t| t.name.as_str()).collect();
    println!("            tools: {}", tools.join(", "));
    println!(
        "            host_capabilities: {}",
        manifest.host_capabilities.join(", ")
    );
    let creds: Vec<_> = manifest
        .credentials
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    println!("            credentials: {}", creds.join(", "));

    invoke(&host, &step, "echo", json!({ "hello": "world" }), None);
    let with_key = InvokeOptions::new().credential("DEMO_API_KEY", "sk-demo-never-printed");
    invoke(&host, &step, "credentials", json!({}), Some(with_key));
    invoke(
        &host,
        &step,
        "sample",
        json!({ "prompt": "Say hello to the Executa demo" }),
        None,
    );
    invoke(&host, &step, "progress", json!({ "steps": 3 }), None);
    invoke(
        &host,
        &step,
        "remember",
        json!({ "key": "colour", "value": { "name": "teal" } }),
        None,
    );
    invoke(&host, &step, "recall", json!({ "key": "colour" }), None);
    invoke(
        &host,
        &step,
        "fail",
        json!({ "message": "an expected failure" }),
        None,
    );

    let t = Instant::now();
    match host.health() {
        Ok(h) => step(&format!(
            "health: {} ({:.1} ms)",
            h.status,
            t.elapsed().as_secs_f64() * 1e3
        )),
        Err(e) => step(&format!("health failed: {e}")),
    }

    match host.shutdown() {
        Some(report) => step(&format!(
            "shutdown: stdin closed; the plugin ended at stage {:?} with {} after {:.1} ms{}",
            report.stage,
            report.status.map_or("no status".into(), |s| s.to_string()),
            report.elapsed.as_secs_f64() * 1e3,
            if report.is_clean() {
                " (clean)"
            } else {
                " (NOT clean)"
            }
        )),
        None => step("shutdown: the plugin was already gone"),
    }
}

fn invoke(host: &Host, step: &dyn Fn(&str), tool: &str, args: Value, opts: Option<InvokeOptions>) {
    step(&format!("invoke {tool} {args}"));
    let result = match opts {
        Some(o) => host.invoke_with(tool, &args, &o),
        None => host.invoke(tool, &args),
    };
    match result {
        Ok(r) if r.success => println!(
            "            -> success in {:.1} ms: {}",
            r.elapsed.as_secs_f64() * 1e3,
            clip(&r.data.to_string(), 100)
        ),
        Ok(r) => println!(
            "            -> success:false in {:.1} ms: {}",
            r.elapsed.as_secs_f64() * 1e3,
            r.error.unwrap_or_default()
        ),
        Err(e) => println!("            -> error: {e}"),
    }
}

/// Builds (if needed) the `everything` example next to this one and returns its path.
fn build_everything() -> PathBuf {
    let mut build = Command::new(env!("CARGO"));
    build.args(["build", "--quiet", "--example", "everything"]);
    if !cfg!(debug_assertions) {
        build.arg("--release");
    }
    match build.current_dir(env!("CARGO_MANIFEST_DIR")).status() {
        Ok(s) if s.success() => {}
        other => {
            eprintln!("building examples/everything failed: {other:?}");
            std::process::exit(1);
        }
    }
    let me = std::env::current_exe().unwrap_or_default();
    me.with_file_name("everything")
}

fn short(id: &str) -> &str {
    &id[..id.len().min(8)]
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(n).collect::<String>())
    }
}
