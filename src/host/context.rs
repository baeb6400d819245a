//! The per-invoke `context` block: a fresh invoke id, credentials, deadline and tokens.
//! Secrets are wrapped in [`Secret`] so they can reach the wire but never a log or `Debug`.

use std::collections::BTreeMap;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Serialize, Serializer};

/// A credential or token value. It serializes as the plain string (it must reach the
/// plugin) but its `Debug` shows only `Secret(***)`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value itself; don't log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Self {
        Secret::new(s)
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Self {
        Secret(s)
    }
}

/// Per-call options for `invoke`: timeout, credentials, tokens.
#[derive(Clone, Debug, Default)]
pub struct InvokeOptions {
    /// Overrides the manifest's per-tool `timeout` and the host default.
    pub timeout: Option<Duration>,
    /// `context.credentials`, name to value.
    pub credentials: BTreeMap<String, Secret>,
    /// Tokens put into `context` by key (`sampling_token`, `storage_token`, ...).
    pub tokens: BTreeMap<String, Secret>,
    /// Use this invoke id instead of minting one.
    pub invoke_id: Option<String>,
}

impl InvokeOptions {
    /// Empty options: all defaults.
    pub fn new() -> Self {
        InvokeOptions::default()
    }

    /// Sets the timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Adds a credential.
    pub fn credential(mut self, name: impl Into<String>, value: impl Into<Secret>) -> Self {
        self.credentials.insert(name.into(), value.into());
        self
    }

    /// Adds a token (`key` is the context field, e.g. `sampling_token`).
    pub fn token(mut self, key: impl Into<String>, value: impl Into<Secret>) -> Self {
        self.tokens.insert(key.into(), value.into());
        self
    }
}

/// `params` of an `invoke` request.
#[derive(Serialize)]
pub(crate) struct InvokeParams<'a, A: ?Sized + Serialize> {
    pub(crate) tool: &'a str,
    pub(crate) arguments: &'a A,
    pub(crate) context: Context<'a>,
}

/// `params.context` of an `invoke` request.
#[derive(Serialize)]
pub(crate) struct Context<'a> {
    pub(crate) invoke_id: &'a str,
    pub(crate) deadline_ms: u64,
    pub(crate) credentials: &'a BTreeMap<String, Secret>,
    #[serde(flatten)]
    pub(crate) tokens: BTreeMap<&'a str, &'a Secret>,
}

/// Milliseconds since the Unix epoch, `timeout` from now (`deadline_ms`).
pub(crate) fn deadline_ms(timeout: Duration) -> u64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from((now + timeout).as_millis()).unwrap_or(u64::MAX)
}

/// A fresh invoke id: 32 lowercase hex digits laid out as a version-4 UUID without dashes.
///
/// Built with std only: the clock, a process-wide counter and the pid, mixed by two
/// `RandomState` hashers (randomly keyed per process), so ids are unique within a process
/// and unpredictable across processes.
pub fn new_invoke_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let keys = RandomState::new();
    let mix = |salt: u64| {
        let mut h = keys.build_hasher();
        (salt, nanos, n, std::process::id()).hash(&mut h);
        h.finish()
    };
    let hi = (mix(0x9e37_79b9) & !0xf000) | 0x4000; // version 4
    let lo = (mix(0x85eb_ca6b) & !(0b11 << 62)) | (0b10 << 62); // RFC 4122 variant
    format!("{hi:016x}{lo:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invoke_ids_are_uuid_hex_and_distinct() {
        let a = new_invoke_id();
        let b = new_invoke_id();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_eq!(&a[12..13], "4");
        assert_ne!(a, b);
    }

    #[test]
    fn secrets_do_not_leak_through_debug() {
        let o = InvokeOptions::new().credential("API_KEY", "sk-123").token("storage_token", "eyJ");
        let s = format!("{o:?}");
        assert!(!s.contains("sk-123") && !s.contains("eyJ") && s.contains("API_KEY"), "{s}");
        let ctx = Context {
            invoke_id: "x",
            deadline_ms: 1,
            credentials: &o.credentials,
            tokens: o.tokens.iter().map(|(k, v)| (k.as_str(), v)).collect(),
        };
        let wire = serde_json::to_string(&ctx).unwrap();
        assert_eq!(
            wire,
            r#"{"invoke_id":"x","deadline_ms":1,"credentials":{"API_KEY":"sk-123"},"storage_token":"eyJ"}"#
        );
    }
}
