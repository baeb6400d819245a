//! Which plugins `executa bench` compares and what it calls in each: `--plugin 'CMD'` (the
//! shared `--tool`, `--args`, `--protocol`, `--mcp-version`), `--plugin NAME=CMD` followed
//! by its own, or a JSON spec file (`--spec FILE`) with one entry per plugin.

use executa::host::{McpVersion, Protocol};
use serde::Deserialize;
use serde_json::Value;

use crate::cli::{self, Usage};

/// What each plugin may set for itself; what it leaves unset comes from the defaults.
#[derive(Clone, Default)]
pub struct Choice {
    pub tool: Option<String>,
    pub args: Option<Value>,
    pub protocol: Option<Protocol>,
    pub mcp_version: Option<McpVersion>,
}

/// One plugin as given: its name (when given one), its command line, its own choices.
pub struct PluginSpec {
    pub name: Option<String>,
    pub argv: Vec<String>,
    pub own: Choice,
}

/// `--plugin 'CMD ARGS'` or `--plugin 'NAME=CMD ARGS'`: NAME is letters, digits, `_`,
/// `-` and `.`, right before the first `=`; the command is split at whitespace.
pub fn parse_plugin(value: &str) -> Result<PluginSpec, String> {
    let value = value.trim();
    let named = value.split_once('=').filter(|(name, _)| {
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    });
    let (name, command) = match named {
        Some((name, command)) => (Some(name.to_owned()), command),
        None => (None, value),
    };
    let argv: Vec<String> = command.split_whitespace().map(str::to_owned).collect();
    if argv.is_empty() {
        return Err("`--plugin` needs a command".into());
    }
    Ok(PluginSpec {
        name,
        argv,
        own: Choice::default(),
    })
}

/// One entry of a spec file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    #[serde(default)]
    name: Option<String>,
    command: Command,
    #[serde(default)]
    tool: Option<String>,
    #[serde(default)]
    args: Option<Value>,
    #[serde(default)]
    protocol: Option<String>,
    #[serde(default)]
    mcp_version: Option<String>,
}

/// A command line as one string (split at whitespace) or as its words.
#[derive(Deserialize)]
#[serde(untagged)]
enum Command {
    Line(String),
    Words(Vec<String>),
}

/// The plugins of a spec file: a JSON array of entries, or an object whose `plugins` is
/// one. Each entry: `command` (a string split at whitespace, or an array of words), and
/// optionally `name`, `tool`, `args`, `protocol`, `mcp_version`.
pub fn read_spec_file(path: &str) -> Result<Vec<PluginSpec>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("`--spec {path}`: {e}"))?;
    let doc: Value =
        serde_json::from_str(&text).map_err(|e| format!("`--spec {path}`: not JSON: {e}"))?;
    let entries = match doc {
        Value::Array(entries) => entries,
        Value::Object(mut m) => match m.remove("plugins") {
            Some(Value::Array(entries)) => entries,
            _ => return Err(format!("`--spec {path}`: no `plugins` array")),
        },
        _ => {
            return Err(format!(
                "`--spec {path}`: an array or an object is expected"
            ));
        }
    };
    entries
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let at = |why: String| format!("`--spec {path}`, plugin {}: {why}", i + 1);
            let usage = |u: Usage| {
                at(match u {
                    Usage::Error(why) | Usage::Help(why) => why,
                })
            };
            let e: Entry = serde_json::from_value(v).map_err(|e| at(e.to_string()))?;
            let argv = match e.command {
                Command::Line(line) => line.split_whitespace().map(str::to_owned).collect(),
                Command::Words(words) => words,
            };
            if argv.is_empty() {
                return Err(at("an empty `command`".into()));
            }
            Ok(PluginSpec {
                name: e.name,
                argv,
                own: Choice {
                    tool: e.tool,
                    args: e.args,
                    protocol: e
                        .protocol
                        .as_deref()
                        .map(|p| cli::protocol("protocol", p))
                        .transpose()
                        .map_err(usage)?,
                    mcp_version: e
                        .mcp_version
                        .as_deref()
                        .map(|v| cli::mcp_version("mcp_version", v))
                        .transpose()
                        .map_err(usage)?,
                },
            })
        })
        .collect()
}

/// A plugin to drive: its command line, the CPU to pin it to, what to call and how.
pub struct Target {
    pub name: Option<String>,
    pub argv: Vec<String>,
    pub pin: Option<usize>,
    pub tool: String,
    /// `None`: synthesized from the tool's declared parameters.
    pub arguments: Option<Value>,
    pub protocol: Protocol,
    /// The MCP revision to speak to an MCP server.
    pub mcp_version: McpVersion,
}

impl Target {
    /// Each plugin's own choices, else the defaults (`echo`, placeholder arguments,
    /// `auto`, `auto`); a revision pinned makes `auto` `mcp`.
    pub fn resolve(spec: &PluginSpec, defaults: &Choice, pin: Option<usize>) -> Target {
        let mcp_version = (spec.own.mcp_version.as_ref())
            .or(defaults.mcp_version.as_ref())
            .cloned()
            .unwrap_or_default();
        let protocol = spec
            .own
            .protocol
            .or(defaults.protocol)
            .unwrap_or(Protocol::Auto);
        Target {
            name: spec.name.clone(),
            argv: spec.argv.clone(),
            pin,
            tool: (spec.own.tool.as_ref())
                .or(defaults.tool.as_ref())
                .map_or_else(|| "echo".to_owned(), Clone::clone),
            arguments: spec.own.args.clone().or_else(|| defaults.args.clone()),
            protocol: cli::with_pin(protocol, &mcp_version),
            mcp_version,
        }
    }

    /// Its name, or its command line.
    pub fn label(&self) -> String {
        self.name.clone().unwrap_or_else(|| self.argv.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plugin_is_named_only_by_a_plain_word_before_the_first_equals_sign() {
        let p = parse_plugin("exec=target/release/examples/everything --flag").unwrap();
        assert_eq!(p.name.as_deref(), Some("exec"));
        assert_eq!(p.argv, ["target/release/examples/everything", "--flag"]);
        for unnamed in ["python3 plugin.py", "/usr/bin/env A=1 prog", "./p --x=1"] {
            let p = parse_plugin(unnamed).unwrap();
            assert_eq!(p.name, None, "{unnamed}");
            assert_eq!(p.argv.join(" "), unnamed);
        }
        assert!(parse_plugin("name=  ").is_err());
        assert!(parse_plugin("").is_err());
    }

    #[test]
    fn own_choices_win_over_the_defaults() {
        let defaults = Choice {
            tool: Some("sample".into()),
            args: None,
            protocol: Some(Protocol::Mcp),
            mcp_version: None,
        };
        let mut spec = parse_plugin("a=x").unwrap();
        spec.own.tool = Some("echo".into());
        let t = Target::resolve(&spec, &defaults, Some(1));
        assert_eq!(
            (t.tool.as_str(), t.protocol, t.pin, t.label()),
            ("echo", Protocol::Mcp, Some(1), "a".to_owned())
        );
        let t = Target::resolve(&parse_plugin("x y").unwrap(), &Choice::default(), None);
        assert_eq!((t.tool.as_str(), t.protocol), ("echo", Protocol::Auto));
        assert_eq!(t.label(), "x y");
        assert_eq!(t.mcp_version, McpVersion::Auto);
    }

    #[test]
    fn a_pinned_mcp_revision_makes_auto_mcp() {
        let pinned = Choice {
            mcp_version: Some(McpVersion::Pinned("2026-07-28".into())),
            ..Choice::default()
        };
        let t = Target::resolve(&parse_plugin("x").unwrap(), &pinned, None);
        assert_eq!(t.protocol, Protocol::Mcp);
        let mut executa = parse_plugin("e=x").unwrap();
        executa.own.protocol = Some(Protocol::Executa);
        let t = Target::resolve(&executa, &pinned, None);
        assert_eq!(
            t.protocol,
            Protocol::Executa,
            "a pin never makes Executa MCP"
        );
        let legacy = Choice {
            mcp_version: Some(McpVersion::Legacy),
            ..Choice::default()
        };
        let t = Target::resolve(&parse_plugin("x").unwrap(), &legacy, None);
        assert_eq!(
            (t.protocol, t.mcp_version),
            (Protocol::Auto, McpVersion::Legacy)
        );
    }
}
