//! JSON read by hand on the invoke fast path: where a value ends, and an object's members
//! as unescaped keys (borrowed where they hold no escape) and raw values. serde_json does the same through generic visitors whose
//! code, at opt-level "z", cost about 2,900 instructions to read the params of a typical
//! invoke (callgrind, `everything`, `{"tool":"echo","arguments":{..},"context":{..}}`).
//!
//! A value is accepted exactly when serde_json accepts it as a value it skips (a
//! `RawValue` or an ignored field): the unit tests hold the scan to serde_json on valid
//! text and on random damage to it. Strings are unescaped as serde_json unescapes them.

use std::borrow::Cow;

use crate::json_text::escape_flags;
use crate::secret::zero;

/// Nesting tracked here, one bit per level; a value nested deeper is measured by serde_json
/// (which skips values to any depth).
const MAX_DEPTH: u32 = 64;

/// Calls `member(key, value)` for each member of the JSON object `text` (white space
/// around it allowed): the key unescaped, the value's text without white space. Returns
/// `None` when `text` is not a JSON object, or as soon as `member` returns `None`.
pub(crate) fn for_each_member<'a>(
    text: &'a str,
    member: impl FnMut(Cow<'a, str>, &'a str) -> Option<()>,
) -> Option<()> {
    for_each_member_knowing(text, |_, _| None, member)
}

/// As [`for_each_member`], where `known(key, rest)` may say a member's value is `rest`'s
/// first bytes (their length): a value seen before, byte for byte, which then is not
/// scanned again. It must be one whole JSON value: whose end its own bytes decide.
pub(crate) fn for_each_member_knowing<'a>(
    text: &'a str,
    known: impl Fn(&str, &str) -> Option<usize>,
    mut member: impl FnMut(Cow<'a, str>, &'a str) -> Option<()>,
) -> Option<()> {
    let b = text.as_bytes();
    let mut at = ws(b, 0);
    if b.get(at) != Some(&b'{') {
        return None;
    }
    at = ws(b, at + 1);
    if b.get(at) != Some(&b'}') {
        loop {
            let (key_end, escaped) = string_end(b, at)?;
            let key = contents(text.get(at..key_end)?, escaped)?;
            let start = after_key(b, key_end)?;
            let end = match known(&key, text.get(start..)?) {
                Some(len) => start + len,
                None => value_end(text, start)?,
            };
            member(key, text.get(start..end)?)?;
            at = ws(b, end);
            match b.get(at)? {
                b',' => at = ws(b, at + 1),
                b'}' => break,
                _ => return None,
            }
        }
    }
    (ws(b, at + 1) == b.len()).then_some(())
}

/// Calls `element(value)` for each element of the JSON array `text` (white space around it
/// allowed), the value's text without white space. Returns `None` when `text` is not a JSON
/// array, or as soon as `element` returns `None`.
#[cfg(feature = "mcp")]
pub(crate) fn for_each_element<'a>(
    text: &'a str,
    mut element: impl FnMut(&'a str) -> Option<()>,
) -> Option<()> {
    let b = text.as_bytes();
    let mut at = ws(b, 0);
    if b.get(at) != Some(&b'[') {
        return None;
    }
    at = ws(b, at + 1);
    if b.get(at) != Some(&b']') {
        loop {
            let end = value_end(text, at)?;
            element(text.get(at..end)?)?;
            at = ws(b, end);
            match b.get(at)? {
                b',' => at = ws(b, at + 1),
                b']' => break,
                _ => return None,
            }
        }
    }
    (ws(b, at + 1) == b.len()).then_some(())
}

/// The text of `value`, a JSON value already checked (a value [`for_each_member`] gave):
/// `None` when it is not a string. As it was checked whole, its escapes are valid and its
/// only unescaped quotes are its first and last bytes, so it is not scanned again: a
/// backslash is looked for, and only then is it unescaped (`None` for a lone surrogate,
/// which serde_json refuses too). (`string_text` scanned it again: about 175 instructions
/// for an 8-byte invoke id at opt-level "z", callgrind.)
pub(crate) fn value_text(value: &str) -> Option<Cow<'_, str>> {
    if value.as_bytes().first() != Some(&b'"') {
        return None;
    }
    contents(value, value.as_bytes().contains(&b'\\'))
}

/// The text of `raw` when it is exactly one JSON string: borrowed when it holds no escape,
/// else unescaped as serde_json unescapes (`None` for a lone surrogate, which serde_json
/// refuses too). For tests: what [`value_text`] reads is held to it.
#[cfg(test)]
pub(crate) fn string_text(raw: &str) -> Option<Cow<'_, str>> {
    match string_end(raw.as_bytes(), 0)? {
        (end, escaped) if end == raw.len() => contents(raw, escaped),
        _ => None,
    }
}

/// The text of `raw`, a JSON string checked by `string_end`: borrowed, or unescaped.
fn contents(raw: &str, escaped: bool) -> Option<Cow<'_, str>> {
    let inner = raw.get(1..raw.len().saturating_sub(1))?;
    if escaped {
        unescape(inner).map(Cow::Owned)
    } else {
        Some(Cow::Borrowed(inner))
    }
}

/// `inner` (a JSON string's contents, its escapes checked by `string_end`) unescaped. The
/// text may be a secret: it is built in place (no reallocation: the text only shrinks) and
/// wiped if an escape is refused.
fn unescape(inner: &str) -> Option<String> {
    let mut out = String::with_capacity(inner.len());
    let done = unescape_into(inner, &mut out);
    if done.is_none() {
        // `secret::wipe` does the same, but calling it here costs 480 bytes of `hello`
        // (opt-level "z" inlines it differently), more than the budget has left.
        let mut bytes = std::mem::take(&mut out).into_bytes();
        zero(&mut bytes);
    }
    done.map(|()| out)
}

fn unescape_into(inner: &str, out: &mut String) -> Option<()> {
    let mut rest = inner;
    while let Some(i) = rest.find('\\') {
        out.push_str(rest.get(..i)?);
        let escape = rest.get(i + 1..)?;
        let (c, len) = match *escape.as_bytes().first()? {
            b'"' => ('"', 1),
            b'\\' => ('\\', 1),
            b'/' => ('/', 1),
            b'b' => ('\u{8}', 1),
            b'f' => ('\u{c}', 1),
            b'n' => ('\n', 1),
            b'r' => ('\r', 1),
            b't' => ('\t', 1),
            _ => {
                let unit = hex4(escape.get(1..5)?)?;
                match unit {
                    // A leading surrogate must be followed by a trailing one.
                    0xD800..=0xDBFF => {
                        let low = hex4(escape.get(5..11)?.strip_prefix("\\u")?)?;
                        if !(0xDC00..=0xDFFF).contains(&low) {
                            return None;
                        }
                        let code = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
                        (char::from_u32(code)?, 11)
                    }
                    _ => (char::from_u32(unit)?, 5),
                }
            }
        };
        out.push(c);
        rest = escape.get(len..)?;
    }
    out.push_str(rest);
    Some(())
}

/// The value of four hex digits (`string_end` checked them; anything else is refused).
fn hex4(digits: &str) -> Option<u32> {
    let digits = digits.as_bytes();
    if digits.len() != 4 || !digits.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    // `0`-`9` are 0x30-0x39, `a`-`f` 0x61-0x66 and `A`-`F` 0x41-0x46: the low nibble,
    // plus 9 for a letter.
    Some(digits.iter().fold(0, |n, &d| {
        (n << 4) | (u32::from(d & 0xf) + if d > b'9' { 9 } else { 0 })
    }))
}

/// Past white space as JSON counts it.
#[inline(always)]
fn ws(b: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = b.get(at) {
        at += 1;
    }
    at
}

/// The end (past its closing quote) of the JSON string whose opening quote is at `at`, and
/// whether it holds an escape. Escapes are checked as serde_json checks a string it skips:
/// one of `"\/bfnrt`, or `u` and four hex digits. The scan goes a word at a time, straight
/// to the first quote, backslash or control character in it.
fn string_end(b: &[u8], at: usize) -> Option<(usize, bool)> {
    if b.get(at) != Some(&b'"') {
        return None;
    }
    let (mut i, mut escaped) = (at + 1, false);
    loop {
        if let Some(word) = b.get(i..).and_then(<[u8]>::first_chunk::<8>) {
            // The lowest byte flagged is exact (a false flag needs a true one below it).
            let flags = escape_flags(u64::from_le_bytes(*word));
            if flags == 0 {
                i += 8;
                continue;
            }
            i += flags.trailing_zeros() as usize / 8;
        }
        match *b.get(i)? {
            b'"' => return Some((i + 1, escaped)),
            b'\\' => {
                escaped = true;
                i += match *b.get(i + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => 2,
                    b'u' if b.get(i + 2..i + 6)?.iter().all(u8::is_ascii_hexdigit) => 6,
                    _ => return None,
                };
            }
            0..=0x1f => return None,
            _ => i += 1,
        }
    }
}

/// Past a member's key (a string at `at`), its colon and white space: where its value starts.
fn member_start(b: &[u8], at: usize) -> Option<usize> {
    after_key(b, string_end(b, at)?.0)
}

/// Past the colon after a key that ends at `at`, and white space.
fn after_key(b: &[u8], at: usize) -> Option<usize> {
    let at = ws(b, at);
    (b.get(at) == Some(&b':')).then(|| ws(b, at + 1))
}

/// The end of the JSON value in `text` that starts at `at`, checked as serde_json checks a
/// value it skips. Containers are tracked with one bit each (set for an object), not by
/// recursion.
pub(crate) fn value_end(text: &str, at: usize) -> Option<usize> {
    let (b, start) = (text.as_bytes(), at);
    let mut at = at;
    let (mut objects, mut depth) = (0u64, 0u32);
    loop {
        // `at` starts a value.
        match *b.get(at)? {
            open @ (b'{' | b'[') => {
                if depth == MAX_DEPTH {
                    return deep_value_end(text, start);
                }
                depth += 1;
                objects = objects << 1 | u64::from(open == b'{');
                at = ws(b, at + 1);
                // `}` and `]` come two after `{` and `[`.
                if b.get(at) != Some(&(open + 2)) {
                    if open == b'{' {
                        at = member_start(b, at)?;
                    }
                    continue;
                }
                at += 1;
                depth -= 1;
                objects >>= 1;
            }
            b'"' => at = string_end(b, at)?.0,
            b't' => at = literal(b, at, b"true")?,
            b'f' => at = literal(b, at, b"false")?,
            b'n' => at = literal(b, at, b"null")?,
            _ => at = number_end(b, at)?,
        }
        // A value ended at `at`: close the containers it ends, or go on to the next member
        // or element.
        loop {
            if depth == 0 {
                return Some(at);
            }
            at = ws(b, at);
            let object = objects & 1 == 1;
            match *b.get(at)? {
                b',' => {
                    at = ws(b, at + 1);
                    if object {
                        at = member_start(b, at)?;
                    }
                    break;
                }
                b'}' if object => {}
                b']' if !object => {}
                _ => return None,
            }
            at += 1;
            depth -= 1;
            objects >>= 1;
        }
    }
}

/// `value_end` for a value nested deeper than `MAX_DEPTH`: serde_json's own skip.
fn deep_value_end(text: &str, at: usize) -> Option<usize> {
    use serde::Deserialize;
    let rest = text.get(at..)?;
    let mut de = serde_json::Deserializer::from_str(rest);
    let raw = <&serde_json::value::RawValue>::deserialize(&mut de).ok()?;
    // The value's text is a part of `rest`: its end is where that part ends.
    let offset = (raw.get().as_ptr() as usize).checked_sub(rest.as_ptr() as usize)?;
    Some(at + offset + raw.get().len())
}

fn literal(b: &[u8], at: usize, word: &[u8]) -> Option<usize> {
    (b.get(at..at + word.len())? == word).then_some(at + word.len())
}

/// The end of the number at `at`: JSON's grammar (`-`, then `0` or digits not starting
/// with `0`, an optional fraction, an optional exponent). A digit right after a leading
/// `0` ends the number here, and the caller then refuses what follows it.
fn number_end(b: &[u8], mut at: usize) -> Option<usize> {
    if b.get(at) == Some(&b'-') {
        at += 1;
    }
    at = match *b.get(at)? {
        b'0' => at + 1,
        b'1'..=b'9' => digits(b, at),
        _ => return None,
    };
    if b.get(at) == Some(&b'.') {
        at = some_digits(b, at + 1)?;
    }
    if let Some(b'e' | b'E') = b.get(at) {
        at += 1;
        if let Some(b'+' | b'-') = b.get(at) {
            at += 1;
        }
        at = some_digits(b, at)?;
    }
    Some(at)
}

fn digits(b: &[u8], mut at: usize) -> usize {
    while b.get(at).is_some_and(u8::is_ascii_digit) {
        at += 1;
    }
    at
}

/// Past one digit or more.
fn some_digits(b: &[u8], at: usize) -> Option<usize> {
    let end = digits(b, at);
    (end > at).then_some(end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::IgnoredAny;

    fn serde_takes(text: &str) -> bool {
        serde_json::from_str::<IgnoredAny>(text).is_ok()
    }

    /// The whole of `text` as one value, as this scan reads it.
    fn scan_takes(text: &str) -> bool {
        let b = text.as_bytes();
        let start = ws(b, 0);
        value_end(text, start).is_some_and(|end| ws(b, end) == b.len())
    }

    const VALID: &[&str] = &[
        r#"{"tool":"echo","arguments":{"text":"hi"},"context":{"invoke_id":"bench-1"}}"#,
        r#" { "a" : [ 1 , -2.5e+3 , 0 , 0.0 , -0 , 1E9 , true , false , null ] } "#,
        r#"{"s":"q\"\\\/\b\f\n\r\t\u00e9\uD83D\uDE00 é 日本","e":{},"l":[],"n":[[[]]]}"#,
        r#"[{"a":{"b":{"c":[{"d":"long enough to span more than one word of eight"}]}}}]"#,
        r#""plain""#,
        "12345678901234567890123456789012345678901234567890",
        "\t\r\n{\"k\":\"v\"}\n",
    ];

    #[cfg(feature = "mcp")]
    #[test]
    fn elements_are_read_as_members_are() {
        let all = |text: &str| {
            let mut seen = Vec::new();
            for_each_element(text, |v| {
                seen.push(v.to_owned());
                Some(())
            })
            .map(|()| seen)
        };
        assert_eq!(all(" [ ] "), Some(vec![]));
        assert_eq!(
            all(r#"[1, "a,]", {"b": [2]} ,null]"#),
            Some(vec![
                "1".into(),
                r#""a,]""#.into(),
                r#"{"b": [2]}"#.into(),
                "null".into()
            ])
        );
        assert_eq!(all("{}"), None);
        assert_eq!(all("[1,]"), None);
        assert_eq!(all("[1] 2"), None);
    }

    #[test]
    fn valid_text_is_read_as_serde_reads_it() {
        for text in VALID {
            assert!(serde_takes(text), "{text}");
            assert!(scan_takes(text), "{text}");
        }
    }

    #[test]
    fn it_refuses_what_serde_refuses() {
        let refused = [
            "",
            "{",
            "}",
            "[1,]",
            "{\"a\":1,}",
            "{\"a\" 1}",
            "{1:2}",
            "01",
            "-",
            "1.",
            "1e",
            "1e+",
            ".5",
            "+1",
            "tru",
            "nul",
            "truex",
            "\"a",
            "\"\\x\"",
            "\"\\u12g4\"",
            "\"a\u{1}b\"",
            "[1 2]",
            "{\"a\":1 \"b\":2}",
            "[}",
            "{]",
            "1 2",
            "NaN",
            "[-]",
            "{\"a\":}",
            "\"\\",
        ];
        for text in refused {
            assert!(!serde_takes(text), "serde takes {text:?}");
            assert!(!scan_takes(text), "scan takes {text:?}");
        }
    }

    #[test]
    fn nesting_of_any_depth_is_taken_as_serde_takes_it() {
        let deep = |n: usize| format!(r#"{{"a":{}1{}}} "#, "[".repeat(n), "]".repeat(n));
        for n in [63, 64, 65, 200, 5_000] {
            let text = deep(n);
            assert!(scan_takes(&text) && serde_takes(&text), "{n}");
            assert_eq!(value_end(&text, 0), Some(text.len() - 1), "{n}");
            let cut = &text[..text.len() - 3];
            assert!(!scan_takes(cut) && !serde_takes(cut), "{n}");
        }
    }

    #[test]
    fn strings_are_unescaped_as_serde_unescapes_them() {
        for raw in [
            r#""plain""#,
            r#""""#,
            r#""q\"\\\/\b\f\n\r\t""#,
            r#""\u00e9\u0041\uD83D\uDE00 é 日本\u0000""#,
            r#""a\ud834\udd1eb""#,
        ] {
            let want: String = serde_json::from_str(raw).expect("serde");
            assert_eq!(string_text(raw).as_deref(), Some(want.as_str()), "{raw}");
            // A checked value is read alike without the scan.
            assert_eq!(value_text(raw).as_deref(), Some(want.as_str()), "{raw}");
        }
        assert!(matches!(string_text(r#""ab""#), Some(Cow::Borrowed("ab"))));
        assert!(matches!(value_text(r#""ab""#), Some(Cow::Borrowed("ab"))));
        // Checked values that are not strings, or strings serde_json refuses to unescape.
        for value in ["1", "null", "{}", r#"["a"]"#, r#""\uD800""#, r#""\uDC00x""#] {
            assert_eq!(value_text(value), None, "{value}");
        }
        for raw in [
            r#""\uD800""#,
            r#""\uD800\u0041""#,
            r#""\uDC00""#,
            r#""a"b"#,
            "1",
            r#""\x""#,
        ] {
            assert!(serde_json::from_str::<String>(raw).is_err(), "{raw}");
            assert_eq!(string_text(raw), None, "{raw}");
        }
    }

    /// Random damage to valid text: whatever this scan takes, serde_json takes too, and
    /// most of what serde_json takes, this scan takes (it gives up only on deep nesting).
    #[test]
    fn it_never_takes_damaged_text_serde_refuses() {
        const BYTES: &[u8] = b"{}[]\",:\\ 0123456789-+.eEtrufalsn\t\nx\x01/b";
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut both, mut serde_only) = (0, 0);
        for round in 0..40_000u32 {
            let mut text = VALID[round as usize % VALID.len()].as_bytes().to_vec();
            for _ in 0..=next() % 3 {
                let at = (next() % text.len() as u64) as usize;
                let byte = BYTES[(next() % BYTES.len() as u64) as usize];
                match next() % 3 {
                    0 => text[at] = byte,
                    1 => text.insert(at, byte),
                    _ => drop(text.remove(at)),
                }
            }
            let Ok(text) = String::from_utf8(text) else {
                continue;
            };
            let (scan, serde) = (scan_takes(&text), serde_takes(&text));
            assert!(
                !scan || serde,
                "the scan takes what serde refuses: {text:?}"
            );
            both += u32::from(scan);
            serde_only += u32::from(serde && !scan);
        }
        assert!(both > 1_000, "too few valid cases: {both}");
        assert_eq!(serde_only, 0, "valid text the scan gave up on");
    }

    #[test]
    fn members_are_unescaped_keys_and_trimmed_values() {
        let text = r#" {"a" : 1 , "b":{"c":[2]},"d":"x","\u0065":null} "#;
        let mut seen = Vec::new();
        let walked = for_each_member(text, |k, v| {
            seen.push((k, v));
            Some(())
        });
        assert!(walked.is_some());
        let want = [
            ("a", "1"),
            ("b", r#"{"c":[2]}"#),
            ("d", r#""x""#),
            ("e", "null"),
        ];
        assert_eq!(seen, want.map(|(k, v)| (Cow::Borrowed(k), v)));
        assert!(matches!(seen[0].0, Cow::Borrowed(_)));
        assert!(for_each_member("{}", |_, _| None).is_some());
        assert!(for_each_member(r#"{"a":1}"#, |_, _| None).is_none());
        assert!(for_each_member(r#"{"\uD800":1}"#, |_, _| Some(())).is_none());
        assert!(for_each_member(r#"{"a":1} x"#, |_, _| Some(())).is_none());
        assert!(for_each_member(r#"[1]"#, |_, _| Some(())).is_none());
    }
}
