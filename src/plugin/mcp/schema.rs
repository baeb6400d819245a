//! A tool's `inputSchema` for MCP's `tools/list`: JSON Schema made from the same parameter
//! list the Executa manifest publishes (`args!` or `Param`), read as JSON so that a list a
//! plugin wrote by hand converts too.

use serde_json::{Map, Value};

/// The JSON Schema of a tool's arguments. The list form becomes an object schema (types,
/// descriptions, `required`, `default`, `enum`, nested `properties`, array `items`); a
/// `parameters` value that already is a JSON Schema object is passed on as it is; no
/// parameters at all (or a shape of neither kind) gives `{"type":"object"}`, which takes any
/// object, as such a tool does.
pub(crate) fn input_schema(parameters: &Value) -> Value {
    match parameters {
        Value::Array(list) if !list.is_empty() => object_schema(list),
        Value::Object(schema) if schema.get("type").and_then(Value::as_str) == Some("object") => {
            parameters.clone()
        }
        _ => any_object(),
    }
}

fn any_object() -> Value {
    let mut m = Map::new();
    m.insert("type".into(), "object".into());
    Value::Object(m)
}

/// An object schema from a parameter list: `properties` by name, `required` for the
/// entries that do not say `"required": false` (the platform's default is required).
fn object_schema(list: &[Value]) -> Value {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for entry in list {
        let Some(name) = entry.get("name").and_then(Value::as_str) else {
            continue;
        };
        if entry.get("required").and_then(Value::as_bool) != Some(false) {
            required.push(Value::from(name));
        }
        properties.insert(name.to_owned(), property(entry));
    }
    let mut m = Map::new();
    m.insert("type".into(), "object".into());
    m.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        m.insert("required".into(), Value::Array(required));
    }
    Value::Object(m)
}

/// One parameter's schema. Keys the list form shares with JSON Schema are kept as they
/// are; its own (`name`, `required`) are dropped, and list-form `properties` and `items`
/// are converted.
fn property(entry: &Value) -> Value {
    let Some(fields) = entry.as_object() else {
        return Value::Object(Map::new());
    };
    let mut m = Map::new();
    for (key, value) in fields {
        match key.as_str() {
            "name" | "required" => {}
            "description" if value.as_str() == Some("") => {}
            "properties" => nested(&mut m, value),
            "items" => {
                m.insert("items".into(), property(value));
            }
            _ => {
                m.insert(key.clone(), value.clone());
            }
        }
    }
    Value::Object(m)
}

/// Puts the converted `properties` (and their `required`) of a nested object into `m`.
fn nested(m: &mut Map<String, Value>, properties: &Value) {
    match properties {
        Value::Array(list) => {
            if let Value::Object(schema) = object_schema(list) {
                for (k, v) in schema {
                    if k != "type" {
                        m.insert(k, v);
                    }
                }
            }
        }
        // Already JSON Schema's map form.
        other => {
            m.insert("properties".into(), other.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_parameter_list_becomes_json_schema() {
        let list = json!([
            {"name": "text", "type": "string", "description": "What to say", "required": true},
            {"name": "times", "type": "integer", "description": "", "required": false, "default": 1},
            {"name": "tone", "type": "string", "description": "How", "required": false,
             "default": "calm", "enum": ["calm", "loud"]},
            {"name": "order", "type": "object", "description": "An order", "properties": [
                {"name": "id", "type": "string", "description": "", "required": true},
                {"name": "items", "type": "array", "description": "Lines", "required": true,
                 "items": {"type": "object", "properties": [
                     {"name": "qty", "type": "integer", "description": "How many"}
                 ]}}
            ]},
            {"name": "tags", "type": "array", "description": "", "required": false,
             "items": {"type": "string"}}
        ]);
        let schema = input_schema(&list);
        assert_eq!(
            schema,
            json!({
                "type": "object",
                "properties": {
                    "text": {"type": "string", "description": "What to say"},
                    "times": {"type": "integer", "default": 1},
                    "tone": {"type": "string", "description": "How", "default": "calm",
                             "enum": ["calm", "loud"]},
                    "order": {"type": "object", "description": "An order",
                        "properties": {
                            "id": {"type": "string"},
                            "items": {"type": "array", "description": "Lines",
                                "items": {"type": "object",
                                    "properties": {"qty": {"type": "integer", "description": "How many"}},
                                    "required": ["qty"]}}
                        },
                        "required": ["id", "items"]},
                    "tags": {"type": "array", "items": {"type": "string"}}
                },
                "required": ["text", "order"]
            })
        );
    }

    #[test]
    fn no_parameters_or_a_schema_already() {
        assert_eq!(input_schema(&json!([])), json!({"type": "object"}));
        assert_eq!(input_schema(&Value::Null), json!({"type": "object"}));
        let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert_eq!(input_schema(&schema), schema);
    }
}
