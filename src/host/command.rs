//! The command line that starts a plugin.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// How to start a plugin: program, arguments, extra environment and working directory.
///
/// The plugin inherits this process's environment (the Agent spawns plugins "with the
/// user's environment"), plus whatever [`PluginCommand::env`] adds. Credentials never go
/// into the environment: they travel in each invoke's `context`.
#[derive(Clone)]
pub struct PluginCommand {
    program: OsString,
    args: Vec<OsString>,
    env: Vec<(OsString, Option<OsString>)>,
    cwd: Option<PathBuf>,
}

/// Interpreters and launchers whose first argument names the plugin better than they do.
const LAUNCHERS: &[&str] = &[
    "python", "python3", "node", "deno", "bun", "ruby", "sh", "bash", "uv", "uvx", "env",
];

impl PluginCommand {
    /// A command running `program` with no arguments.
    pub fn new(program: impl AsRef<OsStr>) -> Self {
        PluginCommand {
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
        }
    }

    /// A command from an argument vector whose first element is the program; `None` when
    /// the vector is empty.
    pub fn from_argv<I, S>(argv: I) -> Option<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut it = argv.into_iter();
        let mut cmd = PluginCommand::new(it.next()?);
        cmd.args.extend(it.map(|a| a.as_ref().to_owned()));
        Some(cmd)
    }

    /// Adds one argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Adds several arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Sets an environment variable for the plugin.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((key.as_ref().to_owned(), Some(value.as_ref().to_owned())));
        self
    }

    /// Removes an inherited environment variable.
    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Self {
        self.env.push((key.as_ref().to_owned(), None));
        self
    }

    /// Sets the working directory.
    pub fn current_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.cwd = Some(dir.as_ref().to_owned());
        self
    }

    /// The program.
    pub fn program(&self) -> &OsStr {
        &self.program
    }

    /// The arguments.
    pub fn get_args(&self) -> &[OsString] {
        &self.args
    }

    /// A short name for logs: the program's file stem, or for an interpreter such as
    /// `python3 plugin.py`, the stem of its first non-option argument.
    pub fn label(&self) -> String {
        let stem = |s: &OsStr| {
            Path::new(s)
                .file_stem()
                .map(|x| x.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        let program = stem(&self.program);
        let is_launcher = LAUNCHERS
            .iter()
            .any(|l| program == *l || program.starts_with("python3."));
        if is_launcher
            && let Some(first) = self
                .args
                .iter()
                .find(|a| !a.to_string_lossy().starts_with('-'))
        {
            let name = stem(first);
            if !name.is_empty() {
                return name;
            }
        }
        if program.is_empty() {
            "plugin".to_owned()
        } else {
            program
        }
    }

    /// A `std::process::Command` with all three standard streams piped. The child leads
    /// its own process group (on Windows its own console process group, and the host puts
    /// it in a job object once spawned), so that a Ctrl-C meant for the host does not hit
    /// the plugin: the host ends it with the Agent's shutdown sequence instead.
    pub(crate) fn to_command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in &self.env {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        if let Some(dir) = &self.cwd {
            cmd.current_dir(dir);
        }
        crate::sys::ProcessTree::prepare(&mut cmd);
        cmd
    }
}

impl fmt::Display for PluginCommand {
    /// The command line, space-separated (environment values are never shown).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.program.to_string_lossy())?;
        for a in &self.args {
            write!(f, " {}", a.to_string_lossy())?;
        }
        Ok(())
    }
}

impl fmt::Debug for PluginCommand {
    /// Environment values may be secrets: only their names are shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let env: Vec<_> = self.env.iter().map(|(k, _)| k.to_string_lossy()).collect();
        f.debug_struct("PluginCommand")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("env_keys", &env)
            .field("cwd", &self.cwd)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert_eq!(PluginCommand::new("/usr/bin/my-tool").label(), "my-tool");
        assert_eq!(
            PluginCommand::new("python3")
                .arg("-u")
                .arg("dir/quick.py")
                .label(),
            "quick"
        );
        assert_eq!(PluginCommand::new("python3").label(), "python3");
    }

    #[test]
    fn debug_hides_env_values() {
        let c = PluginCommand::new("x").env("API_KEY", "sk-secret");
        let s = format!("{c:?}");
        assert!(s.contains("API_KEY") && !s.contains("sk-secret"), "{s}");
    }
}
