//! `sampling/createMessage`: ask the host's LLM for a completion.

use std::time::Duration;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::InvokeHandle;
use crate::error::Result;

/// One message of a sampling request or result: `{role, content:{type:"text", text}}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SamplingMessage {
    /// `user`, `assistant` or `system`.
    pub role: String,
    /// The text content.
    pub content: Content,
}

impl SamplingMessage {
    /// A user message.
    pub fn user(text: impl Into<String>) -> Self {
        SamplingMessage {
            role: "user".into(),
            content: Content::text(text),
        }
    }

    /// An assistant message (for few-shot turns).
    pub fn assistant(text: impl Into<String>) -> Self {
        SamplingMessage {
            role: "assistant".into(),
            content: Content::text(text),
        }
    }
}

/// Text content. Accepts `{type:"text", text}` (either key may be missing: `text` and
/// `""`) and, tolerantly, a bare string.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Content {
    /// Always `text` today.
    #[serde(rename = "type")]
    pub kind: String,
    /// The text.
    pub text: String,
}

impl Content {
    /// `{type:"text", text}`.
    pub fn text(text: impl Into<String>) -> Self {
        Content {
            kind: "text".into(),
            text: text.into(),
        }
    }
}

// By hand, not `#[serde(untagged)]`: that buffers the whole value before it picks a form,
// several times the work of this one pass on every sampling answer.
impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(ContentVisitor)
    }
}

struct ContentVisitor;

impl<'de> Visitor<'de> for ContentVisitor {
    type Value = Content;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a text block {type, text} or a string")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> std::result::Result<Content, E> {
        Ok(Content::text(text))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Content, A::Error> {
        let (mut kind, mut text) = (None, None);
        while let Some(key) = map.next_key::<ContentField>()? {
            match key {
                ContentField::Type => kind = Some(map.next_value::<String>()?),
                ContentField::Text => text = Some(map.next_value::<String>()?),
                ContentField::Other => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        Ok(Content {
            kind: kind.unwrap_or_else(|| "text".into()),
            text: text.unwrap_or_default(),
        })
    }
}

/// A key of a content block.
enum ContentField {
    Type,
    Text,
    Other,
}

impl<'de> Deserialize<'de> for ContentField {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Keys;
        impl Visitor<'_> for Keys {
            type Value = ContentField;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> std::result::Result<ContentField, E> {
                Ok(match key {
                    "type" => ContentField::Type,
                    "text" => ContentField::Text,
                    _ => ContentField::Other,
                })
            }
        }
        d.deserialize_identifier(Keys)
    }
}

/// Structured output: `{"type":"json_object"}` or `{"type":"json_schema","json_schema":{...}}`.
#[derive(Clone, Debug, PartialEq)]
pub enum ResponseFormat {
    /// Any JSON object.
    JsonObject,
    /// JSON matching a schema (≤ 32 KB, depth ≤ 8, ≤ 512 nodes; name `^[a-zA-Z0-9_-]{1,64}$`).
    JsonSchema {
        /// Schema name.
        name: String,
        /// The JSON Schema.
        schema: Value,
        /// Ask for strict adherence.
        strict: bool,
    },
}

impl Serialize for ResponseFormat {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            ResponseFormat::JsonObject => json!({ "type": "json_object" }),
            ResponseFormat::JsonSchema {
                name,
                schema,
                strict,
            } => json!({
                "type": "json_schema",
                "json_schema": { "name": name, "strict": strict, "schema": schema },
            }),
        }
        .serialize(s)
    }
}

/// A `sampling/createMessage` request.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateMessage {
    /// 1 to 64 messages.
    pub messages: Vec<SamplingMessage>,
    /// At most the host's `maxTokensPerCall` (8192).
    pub max_tokens: u64,
    /// System prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Temperature (the host uses 0.7 when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Stop sequences.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_sequences: Option<Vec<String>>,
    /// `{hints:[{name}], costPriority, speedPriority, intelligencePriority}`; omit it to use
    /// the user's preferred model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_preferences: Option<Value>,
    /// Structured output.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    /// What to do when the model cannot honour `response_format`: `error` (default),
    /// `json_object` or `text`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_unsupported: Option<String>,
    /// Free-form metadata.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

impl CreateMessage {
    /// A request with one user message.
    pub fn new(prompt: impl Into<String>, max_tokens: u64) -> Self {
        CreateMessage {
            messages: vec![SamplingMessage::user(prompt)],
            max_tokens,
            ..Default::default()
        }
    }

    /// Sets the system prompt.
    pub fn system(mut self, text: impl Into<String>) -> Self {
        self.system_prompt = Some(text.into());
        self
    }

    /// Sets the temperature.
    pub fn temperature(mut self, t: f64) -> Self {
        self.temperature = Some(t);
        self
    }

    /// Asks for structured output.
    pub fn response_format(mut self, f: ResponseFormat) -> Self {
        self.response_format = Some(f);
        self
    }
}

/// Token counts of a sampling result.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    /// Prompt tokens.
    #[serde(default)]
    pub input_tokens: u64,
    /// Completion tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Both.
    #[serde(default)]
    pub total_tokens: u64,
}

/// A `sampling/createMessage` result. Unknown fields are ignored.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SamplingResult {
    /// `assistant`.
    #[serde(default)]
    pub role: String,
    /// The completion (a string even with `response_format`).
    pub content: Content,
    /// The model that answered.
    #[serde(default)]
    pub model: String,
    /// Why generation stopped.
    #[serde(default)]
    pub stop_reason: Option<String>,
    /// Token counts.
    #[serde(default)]
    pub usage: Option<TokenUsage>,
    /// Host metadata (`provider`, `latencyMs`, `responseFormat`, ...).
    #[serde(default, rename = "_meta")]
    pub meta: Option<Value>,
}

impl SamplingResult {
    /// The completion text.
    pub fn text(&self) -> &str {
        &self.content.text
    }
}

/// The sampling client of one invoke; needs `llm.sample` in `host_capabilities`.
pub struct Sampling<'a>(pub(crate) &'a InvokeHandle);

impl InvokeHandle {
    /// The sampling client (`sampling/createMessage`).
    pub fn sampling(&self) -> Sampling<'_> {
        Sampling(self)
    }
}

impl Sampling<'_> {
    /// Sends the request and blocks for the completion (default timeout 90 s, capped by
    /// the invoke's deadline). Refused locally, with the host's codes, past 8 calls or
    /// 32,000 tokens per invoke, or when `max_tokens` exceeds the per-call cap.
    pub fn create_message(&self, request: &CreateMessage) -> Result<SamplingResult> {
        self.0.create_message(request, None)
    }

    /// As [`Sampling::create_message`], with an explicit timeout.
    pub fn create_message_with_timeout(
        &self,
        request: &CreateMessage,
        timeout: Duration,
    ) -> Result<SamplingResult> {
        self.0.create_message(request, Some(timeout))
    }

    /// One prompt in, the completion text out.
    pub fn complete(&self, prompt: &str, max_tokens: u64) -> Result<String> {
        Ok(self
            .create_message(&CreateMessage::new(prompt, max_tokens))?
            .content
            .text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(json: &str) -> std::result::Result<Content, serde_json::Error> {
        serde_json::from_str(json)
    }

    #[test]
    fn content_takes_a_block_a_partial_block_or_a_bare_string() {
        assert_eq!(
            content(r#"{"type":"text","text":"hi","annotations":{"a":[1]}}"#).unwrap(),
            Content::text("hi")
        );
        assert_eq!(content(r#"{"text":"hi"}"#).unwrap(), Content::text("hi"));
        assert_eq!(content(r#"{"type":"text"}"#).unwrap(), Content::text(""));
        assert_eq!(
            content(r#""bare \"one\"""#).unwrap(),
            Content::text("bare \"one\"")
        );
        let image = content(r#"{"type":"image","data":"..."}"#).unwrap();
        assert_eq!((image.kind.as_str(), image.text.as_str()), ("image", ""));
    }

    #[test]
    fn content_of_another_shape_is_an_error() {
        assert!(content("7").is_err());
        assert!(content(r#"["hi"]"#).is_err());
        assert!(content(r#"{"text":7}"#).is_err());
    }
}
