//! Request ids, kept as the exact JSON text the peer sent.

use std::fmt;
use std::hash::{Hash, Hasher};

use serde_json::value::RawValue;

/// A JSON-RPC request id, stored as the raw JSON text received (`0`, `-5`, `1e3`,
/// `"abc"`, `null`, ...) so that it is echoed byte for byte: `"7"` never becomes `7`,
/// and `0` is never mistaken for a missing id.
#[derive(Clone)]
pub struct Id(Box<RawValue>);

impl Id {
    /// An id from a raw JSON value as received.
    pub fn from_raw(raw: &RawValue) -> Self {
        Id(raw.to_owned())
    }

    /// A numeric id.
    pub fn number(n: u64) -> Self {
        Id(raw_from_trusted(n.to_string()))
    }

    /// A string id (escaped as JSON).
    pub fn string(s: &str) -> Self {
        let text = serde_json::Value::from(s).to_string();
        Id(raw_from_trusted(text))
    }

    /// The JSON `null` id, used for errors about frames whose id is unknown.
    pub fn null() -> Self {
        Id(raw_from_trusted("null".to_owned()))
    }

    /// The raw JSON text of the id.
    pub fn as_raw(&self) -> &RawValue {
        &self.0
    }

    /// The raw JSON text of the id as a string slice.
    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    /// The id as an unsigned number, when it is one.
    pub fn as_u64(&self) -> Option<u64> {
        self.as_str().parse().ok()
    }
}

/// Builds a `RawValue` from text this module produced itself, so it is always valid JSON.
fn raw_from_trusted(text: String) -> Box<RawValue> {
    match RawValue::from_string(text) {
        Ok(raw) => raw,
        // Unreachable for the numbers, escaped strings and `null` built above;
        // fall back to `null` rather than panic.
        Err(_) => RawValue::NULL.to_owned(),
    }
}

impl PartialEq for Id {
    fn eq(&self, other: &Id) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Id {}

impl Hash for Id {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
