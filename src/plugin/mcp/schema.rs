//! A tool's `inputSchema` and `outputSchema` for MCP's `tools/list`: JSON Schema made from
//! the same parameter lists the Executa manifest publishes (`parameters` and `returns`,
//! from `args!` or `Param`), read as JSON so that a list a plugin wrote by hand converts too.

use serde_json::{Map, Value};

/// Which side of the tool a list describes: they differ in what an optional field is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    /// Arguments: an optional field may be left out, and its `default` is filled in.
    Input,
    /// The result, as serde writes it: every field is there, an `Option` one may be
    /// `null`, and a `default` means nothing.
    Output,
}

/// The JSON Schema of a tool's arguments. The list form becomes an object schema (types,
/// descriptions, `required`, `default`, `enum`, nested `properties`, array `items`); a
/// `parameters` value that already is a JSON Schema object is passed on as it is; no
/// parameters at all (or a shape of neither kind) gives `{"type":"object"}`, which takes any
/// object, as such a tool does.
pub(crate) fn input_schema(parameters: &Value) -> Value {
    schema_of(parameters, Side::Input)
}

/// The JSON Schema of a tool's result (its `outputSchema`) from its `returns` list, as
/// [`input_schema`] makes one but for data serde wrote: a field the list does not mark
/// required (an `Option`) may also be `null`, and no `default` is published. A client
/// validates each result's `structuredContent` against it, so it must accept all of them.
pub(crate) fn output_schema(returns: &Value) -> Value {
    schema_of(returns, Side::Output)
}

fn schema_of(list: &Value, side: Side) -> Value {
    match list {
        Value::Array(list) if !list.is_empty() => object_schema(list, side),
        Value::Object(schema) if schema.get("type").and_then(Value::as_str) == Some("object") => {
            list.clone()
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
fn object_schema(list: &[Value], side: Side) -> Value {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for entry in list {
        let Some(name) = entry.get("name").and_then(Value::as_str) else {
            continue;
        };
        let optional = entry.get("required").and_then(Value::as_bool) == Some(false);
        if !optional {
            required.push(Value::from(name));
        }
        let mut schema = property(entry, side);
        if optional && side == Side::Output {
            nullable(&mut schema);
        }
        properties.insert(name.to_owned(), schema);
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
fn property(entry: &Value, side: Side) -> Value {
    let Some(fields) = entry.as_object() else {
        return Value::Object(Map::new());
    };
    let mut m = Map::new();
    for (key, value) in fields {
        match key.as_str() {
            "name" | "required" => {}
            "default" if side == Side::Output => {}
            "description" if value.as_str() == Some("") => {}
            "properties" => nested(&mut m, value, side),
            "items" => {
                m.insert("items".into(), property(value, side));
            }
            _ => {
                m.insert(key.clone(), value.clone());
            }
        }
    }
    Value::Object(m)
}

/// Makes a property's schema also accept `null`: its `type` and its `enum`, if it has them.
fn nullable(schema: &mut Value) {
    let null = || Value::from("null");
    match schema.get_mut("type") {
        Some(Value::String(kind)) => {
            let kind = Value::String(std::mem::take(kind));
            schema["type"] = Value::Array(vec![kind, null()]);
        }
        Some(Value::Array(kinds)) if !kinds.contains(&null()) => kinds.push(null()),
        _ => {}
    }
    if let Some(Value::Array(allowed)) = schema.get_mut("enum")
        && !allowed.contains(&Value::Null)
    {
        allowed.push(Value::Null);
    }
}

/// Puts the converted `properties` (and their `required`) of a nested object into `m`.
fn nested(m: &mut Map<String, Value>, properties: &Value, side: Side) {
    match properties {
        Value::Array(list) => {
            if let Value::Object(schema) = object_schema(list, side) {
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
    fn a_result_list_becomes_an_output_schema_where_options_may_be_null() {
        let returns = json!([
            {"name": "total", "type": "number", "description": "The total", "required": true},
            {"name": "note", "type": "string", "description": "", "required": false},
            {"name": "mode", "type": "string", "description": "Mode", "required": false,
             "default": "fast", "enum": ["fast", "slow"]},
            {"name": "rows", "type": "array", "description": "Rows", "required": true,
             "items": {"type": "object", "properties": [
                 {"name": "id", "type": "integer", "description": "", "required": true},
                 {"name": "tag", "type": "string", "description": "", "required": false}
             ]}},
            {"name": "extra", "type": "object", "description": "", "required": false,
             "properties": [{"name": "n", "type": "integer", "description": "", "required": true}]}
        ]);
        assert_eq!(
            output_schema(&returns),
            json!({
                "type": "object",
                "properties": {
                    "total": {"type": "number", "description": "The total"},
                    "note": {"type": ["string", "null"]},
                    "mode": {"type": ["string", "null"], "description": "Mode",
                             "enum": ["fast", "slow", null]},
                    "rows": {"type": "array", "description": "Rows",
                        "items": {"type": "object",
                            "properties": {"id": {"type": "integer"},
                                           "tag": {"type": ["string", "null"]}},
                            "required": ["id"]}},
                    "extra": {"type": ["object", "null"],
                              "properties": {"n": {"type": "integer"}}, "required": ["n"]}
                },
                "required": ["total", "rows"]
            })
        );
        // The argument side of the same list keeps its defaults and takes no nulls.
        let input = input_schema(&returns);
        assert_eq!(input["properties"]["mode"]["default"], "fast");
        assert_eq!(input["properties"]["note"], json!({"type": "string"}));
    }

    #[test]
    fn an_output_schema_from_no_fields_or_a_schema_already() {
        assert_eq!(output_schema(&json!([])), json!({"type": "object"}));
        let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert_eq!(output_schema(&schema), schema);
        let mut typed = json!({"type": ["string", "null"], "enum": ["a", null]});
        nullable(&mut typed);
        assert_eq!(
            typed,
            json!({"type": ["string", "null"], "enum": ["a", null]})
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
