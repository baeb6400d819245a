//! The heap a JSON text takes once parsed into a `serde_json::Value` tree, estimated
//! from the text without building the tree: how the host bounds the memory of an MCP
//! server's `tools/list` before it makes a manifest of it (`mcp.rs`, `mcp_manifest.rs`),
//! and of the files of a `--storage-dir` store before it loads them (`backends/`).

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::error::Result;

/// The estimated heap of one parameter in the manifest: its object (one B-tree node) and
/// the keys and short values in it; its name and description are counted apart.
pub(super) const PARAM_COST: usize = NODE_COST + 6 * MIN_STRING_COST;
/// One node of a `serde_json::Map` (a B-tree of up to 11 entries, allocated whole).
const NODE_COST: usize = 11 * (size_of::<String>() + size_of::<Value>()) + 16;
/// The smallest heap block a string takes (glibc's smallest chunk on 64-bit).
const MIN_STRING_COST: usize = 32;

/// The estimated heap of a string of `len` bytes: none when empty, else its block.
pub(super) fn string_cost(len: usize) -> usize {
    match len {
        0 => 0,
        n => MIN_STRING_COST.max(n.saturating_add(8 + 15) & !15),
    }
}

/// The estimated heap of an array's `Vec<Value>` of `n` elements, grown by doubling.
pub(super) fn array_cost(n: usize) -> usize {
    match n {
        0 => 0,
        n => size_of::<Value>()
            .saturating_mul(n.max(4).checked_next_power_of_two().unwrap_or(usize::MAX)),
    }
}

/// The estimated heap of an object of `n` entries: B-tree nodes about half full.
fn object_cost(n: usize) -> usize {
    match n {
        0 => 0,
        n => NODE_COST.saturating_mul(1 + (n - 1) / 5),
    }
}

/// The estimated heap the JSON text `raw` takes once parsed into a `serde_json::Value`
/// (the value itself counted by its parent), read without building the tree.
pub(super) fn tree_cost(raw: &RawValue) -> Result<usize> {
    Ok(serde_json::from_str::<TreeCost>(raw.get())?.0)
}

/// The estimated heap of every JSON value in `bytes` (one, or one a line) once parsed,
/// each with its own `Value`; reading stops at the first that is not JSON (a torn last
/// line).
pub(crate) fn stream_cost(bytes: &[u8]) -> usize {
    serde_json::Deserializer::from_slice(bytes)
        .into_iter::<TreeCost>()
        .map_while(std::result::Result::ok)
        .fold(0, |sum, c| sum.saturating_add(c.0 + size_of::<Value>()))
}

/// The estimated heap of a `serde_json::Value`'s tree, as [`tree_cost`] counts it.
pub(crate) fn value_cost(v: &Value) -> usize {
    match v {
        Value::String(s) => string_cost(s.len()),
        Value::Array(a) => a.iter().fold(array_cost(a.len()), |sum, v| {
            sum.saturating_add(value_cost(v))
        }),
        Value::Object(m) => m.iter().fold(object_cost(m.len()), |sum, (k, v)| {
            sum.saturating_add(string_cost(k.len()) + value_cost(v))
        }),
        _ => 0,
    }
}

/// A JSON value's estimated heap as a tree, counted while it is read.
struct TreeCost(usize);

impl<'de> Deserialize<'de> for TreeCost {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(CostVisitor)
    }
}

struct CostVisitor;

impl<'de> Visitor<'de> for CostVisitor {
    type Value = TreeCost;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> std::result::Result<TreeCost, E> {
        Ok(TreeCost(0))
    }

    fn visit_i64<E>(self, _: i64) -> std::result::Result<TreeCost, E> {
        Ok(TreeCost(0))
    }

    fn visit_u64<E>(self, _: u64) -> std::result::Result<TreeCost, E> {
        Ok(TreeCost(0))
    }

    fn visit_f64<E>(self, _: f64) -> std::result::Result<TreeCost, E> {
        Ok(TreeCost(0))
    }

    fn visit_unit<E>(self) -> std::result::Result<TreeCost, E> {
        Ok(TreeCost(0))
    }

    fn visit_str<E>(self, s: &str) -> std::result::Result<TreeCost, E> {
        Ok(TreeCost(string_cost(s.len())))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<TreeCost, A::Error> {
        let (mut n, mut sum) = (0usize, 0usize);
        while let Some(TreeCost(c)) = seq.next_element()? {
            n += 1;
            sum = sum.saturating_add(c);
        }
        Ok(TreeCost(sum.saturating_add(array_cost(n))))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<TreeCost, A::Error> {
        let (mut n, mut sum) = (0usize, 0usize);
        while let Some((TreeCost(k), TreeCost(v))) = map.next_entry()? {
            n += 1;
            sum = sum.saturating_add(k).saturating_add(v);
        }
        Ok(TreeCost(sum.saturating_add(object_cost(n))))
    }
}
