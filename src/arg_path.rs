//! The path (`address.city`, `items[2].qty`) of an argument serde rejected. serde_json
//! reports only a line and column, so the argument text is scanned up to that point,
//! keeping a stack of object keys and array indexes: no second parse, no extra dependency.

use serde_json::Error;

enum Frame {
    Object(Option<String>),
    Array(usize),
}

/// The path of the value `err` is about, within the JSON `text` it was read from; `None`
/// when the error has no position or concerns the arguments as a whole. `message` is
/// [`message`]'s text for `err`.
pub(crate) fn error_path(text: &str, err: &Error, message: &str) -> Option<String> {
    let end = offset(text, err.line(), err.column())?;
    let mut stack: Vec<Frame> = Vec::new();
    let mut closed: Option<String> = None;
    let mut expect_key = false;
    let mut chars = text[..end].char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '{' => {
                stack.push(Frame::Object(None));
                expect_key = true;
            }
            '[' => stack.push(Frame::Array(0)),
            '}' | ']' => {
                // The closed container is the value at its parent's current key or index.
                stack.pop();
                closed = Some(render(&stack));
            }
            ',' => match stack.last_mut() {
                Some(Frame::Array(i)) => *i += 1,
                Some(Frame::Object(_)) => expect_key = true,
                None => {}
            },
            '"' => {
                let key = read_string(&text[at + 1..end], &mut chars);
                if expect_key && let Some(Frame::Object(k)) = stack.last_mut() {
                    *k = Some(key);
                    expect_key = false;
                }
            }
            _ => {}
        }
    }
    if let Some(field) = message
        .strip_prefix("missing field `")
        .and_then(|m| m.split('`').next())
    {
        // Reported after the object that lacks the field: name the field inside it.
        return Some(join(&closed.unwrap_or_default(), field));
    }
    let here = render(&stack);
    (!here.is_empty()).then_some(here)
}

/// serde's message without its ` at line L column C` suffix.
pub(crate) fn message(err: &Error) -> String {
    let mut text = err.to_string();
    if err.line() != 0 {
        // serde_json appends exactly " at line {line} column {column}" when it has a line.
        let suffix =
            " at line ".len() + digits(err.line()) + " column ".len() + digits(err.column());
        let keep = text.len().saturating_sub(suffix);
        if text.is_char_boundary(keep) {
            text.truncate(keep);
        }
    }
    text
}

fn digits(mut n: usize) -> usize {
    let mut count = 1;
    while n >= 10 {
        n /= 10;
        count += 1;
    }
    count
}

fn offset(text: &str, line: usize, column: usize) -> Option<usize> {
    if line == 0 {
        return None;
    }
    let start: usize = text
        .split_inclusive('\n')
        .take(line - 1)
        .map(str::len)
        .sum();
    Some((start + column).min(text.len()))
}

/// Reads a string body up to its closing quote, advancing `chars` past it.
fn read_string(rest: &str, chars: &mut std::str::CharIndices<'_>) -> String {
    let mut out = String::new();
    let mut escaped = false;
    for c in rest.chars() {
        chars.next();
        match (escaped, c) {
            (false, '\\') => escaped = true,
            (false, '"') => break,
            _ => {
                escaped = false;
                out.push(c);
            }
        }
    }
    out
}

fn render(stack: &[Frame]) -> String {
    let mut path = String::new();
    for frame in stack {
        match frame {
            Frame::Object(Some(k)) => path = join(&path, k),
            Frame::Object(None) => {}
            // Written in place: a `format!` and its copy cost the plugin binary 64 bytes.
            Frame::Array(i) => {
                let _ = std::fmt::Write::write_fmt(&mut path, format_args!("[{i}]"));
            }
        }
    }
    path
}

fn join(base: &str, field: &str) -> String {
    if base.is_empty() {
        field.to_owned()
    } else {
        format!("{base}.{field}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, Debug)]
    #[allow(dead_code)]
    #[serde(deny_unknown_fields)]
    struct Item {
        qty: u32,
    }

    #[derive(Deserialize, Debug)]
    #[allow(dead_code)]
    struct Address {
        city: String,
    }

    #[derive(Deserialize, Debug)]
    #[allow(dead_code)]
    struct Args {
        quantity: u32,
        address: Option<Address>,
        items: Option<Vec<Item>>,
    }

    fn path(text: &str) -> Option<String> {
        match serde_json::from_str::<Args>(text) {
            Ok(a) => panic!("accepted: {a:?}"),
            Err(e) => error_path(text, &e, &message(&e)),
        }
    }

    #[test]
    fn names_the_full_path() {
        let p = |s: &str| path(s).unwrap_or_default();
        assert_eq!(p(r#"{"quantity": -1}"#), "quantity");
        assert_eq!(p(r#"{"quantity": "3"}"#), "quantity");
        assert_eq!(
            p(r#"{"address": {"street": "x"}, "quantity": 1}"#),
            "address.city"
        );
        assert_eq!(p(r#"{"quantity": 1, "address": {}}"#), "address.city");
        assert_eq!(
            p("{\"quantity\": 1,\n \"items\": [{\"qty\": 1}, {\"qty\": 2}, {\"qty\": -2}]}"),
            "items[2].qty"
        );
        assert_eq!(
            p(r#"{"quantity": 1, "items": [{"qty": 1, "colour": "red"}]}"#),
            "items[0].colour"
        );
        assert_eq!(p(r#"{"address": {"city": "a\"}b"}}"#), "quantity");
        assert_eq!(path("[1]"), None);
    }

    #[test]
    fn the_message_drops_the_position() {
        let err = serde_json::from_str::<Args>(r#"{"quantity": -1}"#).err();
        let msg = err.map(|e| message(&e)).unwrap_or_default();
        assert_eq!(msg, "invalid value: integer `-1`, expected u32");
    }
}
