//! JSON text written by hand where serde_json's writer is slow or large in a
//! size-optimized binary: tool results of the types most handlers return (`Value`,
//! `Map<String, Value>`, `String`), and, through `write_str`/`write_value`, error frames
//! and invoke failures (`wire.rs`, `dispatch.rs`; smaller than derived serializers).
//! serde_json's string escaper looks at each byte through a slice split that opt-level
//! "z" does not inline (callgrind, `everything` echoing 64 KiB: 26 instructions per byte,
//! 62 % of the invoke). Here a string is scanned a word (8 bytes) at a time, and only a
//! word holding a byte to escape is looked at byte by byte. The text is byte for byte what
//! `serde_json::to_writer` writes (tested against it).

use std::any::{Any, TypeId};

use serde_json::{Map, Value};

/// Writes `result` if it is one of the types written here; returns whether it was (the
/// caller serializes any other type with serde_json). The type test is decided at compile
/// time: a plugin links only the writer its results need.
pub(crate) fn write_result<R: Any>(out: &mut Vec<u8>, result: &R) -> bool {
    let result: &dyn Any = result;
    let id = TypeId::of::<R>();
    if id == TypeId::of::<Value>() {
        result.downcast_ref().is_some_and(|v| {
            write_value(out, v);
            true
        })
    } else if id == TypeId::of::<Map<String, Value>>() {
        result.downcast_ref().is_some_and(|m| {
            write_map(out, m);
            true
        })
    } else if id == TypeId::of::<String>() {
        result.downcast_ref().is_some_and(|s: &String| {
            write_str(out, s);
            true
        })
    } else {
        false
    }
}

/// Appends `value` as compact JSON.
pub(crate) fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        // serde_json's number formatting; writing into a `Vec` cannot fail.
        Value::Number(n) => drop(serde_json::to_writer(&mut *out, n)),
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for item in items {
                write_value(out, item);
                out.push(b',');
            }
            close(out, b']');
        }
        Value::Object(map) => write_map(out, map),
    }
}

/// Appends `map` as a compact JSON object, in the map's own order.
fn write_map(out: &mut Vec<u8>, map: &Map<String, Value>) {
    out.push(b'{');
    for (key, value) in map {
        write_str(out, key);
        out.push(b':');
        write_value(out, value);
        out.push(b',');
    }
    close(out, b'}');
}

/// Ends an array or object whose every member was followed by a comma: the last comma
/// becomes `end` (no value ends with a comma, so one there follows a member).
fn close(out: &mut Vec<u8>, end: u8) {
    match out.last_mut() {
        Some(last) if *last == b',' => *last = end,
        _ => out.push(end),
    }
}

/// Every byte of a word set to `b`.
const fn splat(b: u8) -> u64 {
    u64::from_ne_bytes([b; 8])
}

/// Whether some byte of `word` needs an escape: a control character (below 0x20), `"` or
/// `\`.
#[inline(always)]
fn word_needs_escape(word: u64) -> bool {
    escape_flags(word) != 0
}

/// The high bit of each byte of `word` that needs an escape set, by the classic "has a
/// byte less than n" bit trick: a flag can be false only above a true one, so whether any
/// is set, and the lowest one set, are exact.
#[inline(always)]
pub(crate) fn escape_flags(word: u64) -> u64 {
    let high = splat(0x80);
    let below = |w: u64, n: u8| w.wrapping_sub(splat(n)) & !w & high;
    let control = below(word, 0x20);
    let quote = below(word ^ splat(b'"'), 1);
    let backslash = below(word ^ splat(b'\\'), 1);
    control | quote | backslash
}

/// The letter after the backslash in the escape of each control character: serde_json's
/// short forms (backspace, tab, newline, form feed, carriage return), else `u` for `\u00xx`.
const CONTROL_ESCAPES: &[u8; 32] = b"uuuuuuuubtnufruuuuuuuuuuuuuuuuuu";

/// Appends `text` as a JSON string, escaped as serde_json escapes (`\"`, `\\`, the short
/// forms, `\u00xx` for other control characters; nothing else). A word with nothing to
/// escape is passed over whole.
pub(crate) fn write_str(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    out.push(b'"');
    // The bytes before `copied` are written; `at` is the next one to look at.
    let (mut copied, mut at) = (0, 0);
    while let Some(rest) = bytes.get(at..) {
        if let Some(word) = rest.first_chunk::<8>()
            && !word_needs_escape(u64::from_ne_bytes(*word))
        {
            at += 8;
            continue;
        }
        let Some(&b) = rest.first() else { break };
        at += 1;
        let letter = match b {
            b'"' | b'\\' => b,
            0x00..=0x1f => CONTROL_ESCAPES[usize::from(b)],
            _ => continue,
        };
        out.extend_from_slice(bytes.get(copied..at - 1).unwrap_or_default());
        out.extend_from_slice(&[b'\\', letter]);
        if letter == b'u' {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(&[
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]);
        }
        copied = at;
    }
    out.extend_from_slice(bytes.get(copied..).unwrap_or_default());
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ours(value: &Value) -> String {
        let mut out = Vec::new();
        write_value(&mut out, value);
        String::from_utf8(out).expect("UTF-8")
    }

    #[test]
    fn every_character_below_0x80_and_some_beyond_at_every_offset_of_a_word() {
        let mut specials: Vec<char> = (0u8..0x80).map(char::from).collect();
        specials.extend(['\u{7f}', '\u{80}', 'é', '€', '𝄞', '\u{2028}']);
        for c in specials {
            for before in 0..20 {
                for after in [0, 1, 7, 8, 9] {
                    let text = format!("{}{c}{}", "a".repeat(before), "b".repeat(after));
                    let value = Value::String(text);
                    assert_eq!(ours(&value), serde_json::to_string(&value).unwrap());
                }
            }
        }
    }

    #[test]
    fn strings_dense_with_escapes_and_long_clean_runs() {
        let texts = [
            String::new(),
            "\"\\\n\r\t\u{8}\u{c}\u{0}\u{1f}".repeat(5),
            "x".repeat(64 * 1024),
            format!("{}\"{}", "y".repeat(1000), "z".repeat(1001)),
            "é€𝄞\"".repeat(33),
        ];
        for text in texts {
            let value = Value::String(text);
            assert_eq!(ours(&value), serde_json::to_string(&value).unwrap());
        }
    }

    #[test]
    fn values_of_every_kind_nested() {
        let value = json!({
            "null": null, "t": true, "f": false,
            "n": [0, -1, 18446744073709551615u64, -9223372036854775808i64, 1.5, -0.0, 1e300, 2.5e-8],
            "s": "a\"b", "k\n\"ey": {"deep": [[], {}, [{"x": [1, "2", null]}]]},
        });
        assert_eq!(ours(&value), serde_json::to_string(&value).unwrap());
    }

    #[test]
    fn results_of_other_types_are_left_to_serde() {
        let mut out = Vec::new();
        let map = json!({"a": "b\n"}).as_object().cloned().unwrap();
        assert!(write_result(&mut out, &map));
        assert!(write_result(&mut out, &"q\"".to_owned()));
        assert!(write_result(&mut out, &json!([1])));
        assert_eq!(out, br#"{"a":"b\n"}"q\""[1]"#);
        assert!(!write_result(&mut out, &7u32));
        assert!(!write_result(&mut out, &"str"));
    }
}
