//! Arguments synthesized from a tool's declared parameters, for `executa check` (which
//! invokes every tool) and `executa bench` (placeholder arguments).

use serde_json::{Map, Value, json};

use crate::manifest::ToolSpec;

/// Arguments that satisfy `tool`'s declared `parameters`: every required parameter gets
/// its first `enum` value, else a value of its type (`"ping"`, 1, 1.5, true, an array of
/// one item of the declared `items` type, an object built the same way from its nested
/// `properties`); parameters with a `default` get it. Optional parameters without a
/// default are left out. Never blocks.
pub fn sample_arguments(tool: &ToolSpec) -> Value {
    Value::Object(sample_object(&tool.parameters))
}

fn sample_object(params: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    for p in params.as_array().into_iter().flatten() {
        let Some(name) = p.get("name").and_then(Value::as_str) else {
            continue;
        };
        let required = p.get("required").and_then(Value::as_bool).unwrap_or(true);
        if let Some(d) = p.get("default") {
            out.insert(name.to_owned(), d.clone());
        } else if required {
            out.insert(name.to_owned(), sample_value(p));
        }
    }
    out
}

/// A value for one parameter or `items` schema.
fn sample_value(schema: &Value) -> Value {
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("integer") => json!(1),
        Some("number") => json!(1.5),
        Some("boolean") => json!(true),
        Some("array") => {
            // The platform treats an array without `items` as a list of strings.
            let item = schema
                .get("items")
                .cloned()
                .unwrap_or_else(|| json!({ "type": "string" }));
            json!([sample_value(&item)])
        }
        Some("object") => match schema.get("properties") {
            Some(props @ Value::Array(_)) => Value::Object(sample_object(props)),
            // JSON-Schema-style `properties` map inside `items`.
            Some(Value::Object(map)) => {
                let required: Vec<&str> = schema
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                map.iter()
                    .filter(|(k, _)| required.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), sample_value(v)))
                    .collect()
            }
            _ => json!({}),
        },
        _ => json!("ping"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_nested_required_objects_arrays_enums_and_defaults() {
        let tool = ToolSpec {
            name: "order".into(),
            parameters: json!([
                {"name": "address", "type": "object", "properties": [
                    {"name": "city", "type": "string"},
                    {"name": "street", "type": "string", "required": false},
                    {"name": "country", "type": "string", "required": false, "default": "DE"}]},
                {"name": "items", "type": "array", "items": {"type": "object", "properties": [
                    {"name": "qty", "type": "integer"}]}},
                {"name": "tags", "type": "array"},
                {"name": "speed", "type": "string", "enum": ["normal", "express"]},
                {"name": "priority", "type": "integer", "required": false, "default": 5},
                {"name": "note", "type": "string", "required": false},
                {"name": "ratio", "type": "number"},
                {"name": "dry", "type": "boolean"}
            ]),
            ..ToolSpec::default()
        };
        assert_eq!(
            sample_arguments(&tool),
            json!({
                "address": {"city": "ping", "country": "DE"},
                "items": [{"qty": 1}],
                "tags": ["ping"],
                "speed": "normal",
                "priority": 5,
                "ratio": 1.5,
                "dry": true
            })
        );
    }
}
