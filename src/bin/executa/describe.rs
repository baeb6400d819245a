//! `executa describe`: print the manifest.

use std::process::ExitCode;

use executa::host::{Handlers, PluginProcess, Protocol};

use crate::cli::{Args, Common, Usage, mcp_version, protocol, unknown, with_pin};

pub const HELP: &str = concat!(
    "\
executa describe: print a plugin's manifest (e.g. to keep manifest.json in sync)

USAGE:
    executa describe [OPTIONS] -- <PLUGIN COMMAND...>

Runs initialize (falling back to 1.1 silently) and describe, prints the manifest exactly
as the plugin returned it (the JSON text of the result, byte for byte), then shuts the
plugin down. Exits 1 when the answer is not the bare manifest object (a wrapped
{\"manifest\":{...}} is pitfall #5: the Agent cannot read it).
    executa describe -- ./my-plugin > manifest.json
An MCP stdio server is asked for tools/list (every page) instead, in the era
--mcp-version settles, and the manifest made from it is printed (name and version from
serverInfo, in the stateless era server/discover's, description from instructions,
parameters from each tool's inputSchema, which is kept beside them).

OPTIONS:
    --pretty                     pretty-print (re-serialized: member order may change)
    --raw                        for an MCP server, print the tools/list result (all
                                 pages as one {\"tools\":[...]}) instead of the
                                 manifest made from it
",
    crate::cli::protocol_help!(),
    crate::cli::mcp_version_help!(),
    "    --init-timeout SECS, --describe-timeout SECS, --first-launch, --quiet, -h/--help

EXIT STATUS:
    0 printed; 1 no answer, or not the bare manifest object; 2 usage or start failure.
"
);

pub fn run(mut args: Args) -> Result<ExitCode, Usage> {
    let mut common = Common::new();
    common.host.protocol = Protocol::Auto;
    let mut pretty_print = false;
    let mut raw_tools = false;
    while let Some((flag, inline)) = args.next_arg() {
        if common.apply(&mut args, &flag, inline.clone(), HELP)? {
            continue;
        }
        match flag.as_str() {
            "--pretty" => pretty_print = true,
            "--raw" => raw_tools = true,
            "--protocol" => common.host.protocol = protocol(&flag, &args.value(&flag, inline)?)?,
            "--mcp-version" => {
                common.host.mcp_version = mcp_version(&flag, &args.value(&flag, inline)?)?
            }
            _ => return Err(unknown(&flag)),
        }
    }
    let cmd = args.plugin()?;
    common.host.protocol = with_pin(common.host.protocol, &common.host.mcp_version);
    let timeout = common.host.effective_describe_timeout();
    let process = match PluginProcess::spawn(&cmd, common.host, Handlers::new()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("executa describe: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let answer = process.initialize().and_then(|shake| {
        if shake.mcp_revision.is_some() && !raw_tools {
            let manifest = process.describe()?;
            Ok(serde_json::value::to_raw_value(&*manifest)?)
        } else {
            process.describe_raw(timeout)
        }
    });
    process.shutdown();
    let raw = match answer {
        Ok(raw) => raw,
        Err(e) => {
            eprintln!("executa describe: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    if let Some(why) = not_bare_manifest(&raw) {
        eprintln!("executa describe: {why}");
        println!("{}", raw.get());
        return Ok(ExitCode::FAILURE);
    }
    if pretty_print {
        // The one full tree this command builds, and only when asked: a value's tree is
        // about ten times its text.
        match serde_json::from_str::<serde_json::Value>(raw.get()) {
            Ok(value) => println!("{}", pretty(&value)),
            Err(e) => {
                eprintln!("executa describe: unreadable answer: {e}");
                return Ok(ExitCode::FAILURE);
            }
        }
    } else {
        println!("{}", raw.get());
    }
    Ok(ExitCode::SUCCESS)
}

/// Why an answer is not the bare manifest object the Agent reads, if it is not. Reads the
/// top level only, its values left as text.
fn not_bare_manifest(raw: &serde_json::value::RawValue) -> Option<String> {
    type TopLevel<'a> = std::collections::BTreeMap<String, &'a serde_json::value::RawValue>;
    let Ok(map) = serde_json::from_str::<TopLevel<'_>>(raw.get()) else {
        return Some("describe must return the manifest object".to_owned());
    };
    let wrapped = map
        .get("manifest")
        .is_some_and(|m| m.get().starts_with('{'))
        && !map.contains_key("tools");
    wrapped.then(|| {
        "describe returned a wrapped {\"manifest\": {...}}; the Agent needs the bare \
         manifest object (pitfall #5)"
            .to_owned()
    })
}

pub fn pretty(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}
