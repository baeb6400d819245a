//! The verdicts on what a step saw: the plugin's exit, an invoke result, a clean lint
//! area, an error in terms of the plugin's conduct.

use serde_json::Value;

use super::report::Outcome;
use crate::error::Error;
use crate::host::types::snippet;
use crate::host::{ExitStage, ShutdownReport};
use crate::lint::Area;

pub(super) fn judge_exit(r: &ShutdownReport, grace: f64) -> (Outcome, String) {
    let status = r.status.map_or("not reaped".to_owned(), |s| s.to_string());
    match r.stage {
        ExitStage::StdinClosed if r.is_clean() => (
            Outcome::Pass,
            format!(
                "exited 0 {:.0} ms after stdin closed",
                r.elapsed.as_secs_f64() * 1000.0
            ),
        ),
        ExitStage::StdinClosed => (
            Outcome::Fail,
            format!(
                "exited with {status} after stdin closed: exit 0 unless it crashed (non-zero counts against the restart budget)"
            ),
        ),
        ExitStage::Terminated => (
            Outcome::Fail,
            format!(
                "still running {grace:.1}s after stdin closed; needed SIGTERM ({status}). Exit when stdin reaches EOF"
            ),
        ),
        ExitStage::Killed => (
            Outcome::Fail,
            format!(
                "ignored stdin EOF and SIGTERM; needed SIGKILL ({status}). Exit when stdin reaches EOF"
            ),
        ),
        ExitStage::AlreadyExited => (
            Outcome::Fail,
            format!("exited ({status}) before stdin was closed"),
        ),
    }
}

/// Judges an invoke result against the envelope the Agent decodes.
pub(super) fn judge_result(v: &Value) -> (Outcome, String) {
    let Some(m) = v.as_object() else {
        return (
            Outcome::Fail,
            format!(
                "the result must be an object {{success, data}}, got {}",
                snippet(&v.to_string())
            ),
        );
    };
    let fail = |why: &str| (Outcome::Fail, format!("{why} (pitfall #5)"));
    match m.get("success") {
        None => fail(
            "the result has no `success` field: the Agent counts it as a failure with no message",
        ),
        Some(Value::Bool(true)) => match m.get("data") {
            None => fail("`success: true` without `data`"),
            Some(Value::Object(_)) => {
                (Outcome::Pass, "success: true with a data object".to_owned())
            }
            Some(_) => (
                Outcome::Warn,
                "`data` is not an object; Apps see {} for non-object data".to_owned(),
            ),
        },
        Some(Value::Bool(false)) => match m.get("error") {
            Some(e) if !e.is_null() => (
                Outcome::Pass,
                format!("success: false with error {}", snippet(&e.to_string())),
            ),
            _ => fail("`success: false` without an `error` message"),
        },
        Some(_) => fail("`success` must be a boolean"),
    }
}

pub(super) fn area_summary(area: Area, v: &Value) -> String {
    let count = |k: &str| v.get(k).and_then(Value::as_array).map_or(0, Vec::len);
    match area {
        Area::Shape => "the bare manifest object".to_owned(),
        Area::Fields => format!(
            "name {}, version {}",
            v.get("name").map_or("?".into(), Value::to_string),
            v.get("version").map_or("?".into(), Value::to_string)
        ),
        Area::Tools => format!("{} tool(s), unique names", count("tools")),
        Area::Parameters => "list form, valid types".to_owned(),
        Area::Capabilities => format!(
            "{} declared, all on the allow-list",
            count("host_capabilities")
        ),
        Area::Credentials => format!("{} declared", count("credentials")),
    }
}

/// Explains an error in terms of the plugin's conduct.
pub(super) fn gone_text(e: &Error) -> String {
    match e {
        Error::Disconnected(why) => why.clone(),
        other => other.to_string(),
    }
}
