//! `executa describe`: print the manifest.

use std::process::ExitCode;

use executa::host::{Handlers, PluginProcess};

use crate::cli::{Args, Common, Usage, unknown};

pub const HELP: &str = "\
executa describe: print a plugin's manifest (e.g. to keep manifest.json in sync)

USAGE:
    executa describe [OPTIONS] -- <PLUGIN COMMAND...>

Runs initialize (falling back to 1.1 silently) and describe, prints the manifest exactly
as the plugin returned it, pretty-printed, then shuts the plugin down.
    executa describe -- ./my-plugin > manifest.json

OPTIONS:
    --compact            one line instead of pretty-printed
    --init-timeout SECS, --describe-timeout SECS, --first-launch, --quiet, -h/--help
";

pub fn run(mut args: Args) -> Result<ExitCode, Usage> {
    let mut common = Common::new();
    let mut compact = false;
    while let Some((flag, inline)) = args.next_arg() {
        if common.apply(&mut args, &flag, inline, HELP)? {
            continue;
        }
        match flag.as_str() {
            "--compact" => compact = true,
            _ => return Err(unknown(&flag)),
        }
    }
    let cmd = args.plugin()?;
    let timeout = common.host.effective_describe_timeout();
    let process = match PluginProcess::spawn(&cmd, common.host, Handlers::new()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("executa describe: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let answer = process
        .initialize()
        .and_then(|_| process.describe_raw(timeout));
    process.shutdown();
    match answer {
        Ok(raw) => {
            let value: serde_json::Value = serde_json::from_str(raw.get()).unwrap_or_default();
            let text = if compact {
                value.to_string()
            } else {
                pretty(&value)
            };
            println!("{text}");
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("executa describe: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

pub fn pretty(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}
