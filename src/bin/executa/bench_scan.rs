//! The bench driver's fast path through a reply: one pass over the bytes that finds the
//! top-level `id` (an unsigned integer) and `result.success == true`, without building
//! anything. The `executa` binary ships at opt-level "z", where a full serde parse of each
//! reply costs the driver more CPU than many plugins spend answering it; anything this scan
//! does not recognise (a request, an error, `success: false`, a string id) goes to the full
//! parser instead, so it only ever speeds up the common case.

/// The id of a successful invoke reply, or `None` when the frame needs the full parser.
pub fn success_id(line: &[u8]) -> Option<u64> {
    compact_success_id(line).or_else(|| any_layout_success_id(line))
}

/// The envelope's head as executa (and most SDKs that write compact JSON) lays it out.
const HEAD: &[u8] = br#"{"jsonrpc":"2.0","id":"#;
/// What follows the id in a successful invoke reply laid out that way.
const SUCCESS: &[u8] = br#","result":{"success":true"#;

/// The common layout, matched by prefix: only the rest of the result is walked, to check
/// that it closes and that nothing follows it. Costs a third of the general walk at the
/// binary's opt-level; any other layout falls through to that walk.
fn compact_success_id(line: &[u8]) -> Option<u64> {
    let rest = line.strip_prefix(HEAD)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let id = unsigned(&rest[..digits])?;
    let rest = rest[digits..].strip_prefix(SUCCESS)?;
    let result_end = match rest.first()? {
        b'}' => 1,
        b',' => inside_object_end(rest, 1)?,
        _ => return None,
    };
    let close = skip_ws(rest, result_end);
    (rest.get(close) == Some(&b'}') && skip_ws(rest, close + 1) == rest.len()).then_some(id)
}

/// Just past the `}` or `]` that closes the object or array `from` is inside of.
fn inside_object_end(bytes: &[u8], from: usize) -> Option<usize> {
    let mut depth = 1usize;
    let mut i = from;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i = string_end(bytes, i)?;
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// [`success_id`] for any layout: one walk over the members, wherever they are.
fn any_layout_success_id(line: &[u8]) -> Option<u64> {
    let mut id = None;
    let mut success = false;
    let end = object(line, skip_ws(line, 0), |key, at| match key {
        b"id" => {
            let end = value_end(line, at)?;
            id = Some(unsigned(&line[at..end])?);
            Some(end)
        }
        // One pass: the result's own fields are scanned while skipping it.
        b"result" => object(line, at, |key, at| {
            let end = value_end(line, at)?;
            if key == b"success" {
                success = &line[at..end] == b"true";
            }
            Some(end)
        }),
        b"method" | b"error" => None,
        _ => value_end(line, at),
    })?;
    if skip_ws(line, end) != line.len() {
        return None;
    }
    id.filter(|_| success)
}

/// Walks the object that opens at `at`, calling `field(key, value_start)` for each member;
/// `field` returns where the value ends (or `None` to give up). Returns the position just
/// past the closing brace. Keys are compared as raw bytes: an escaped key never matches,
/// which only means a fallback.
fn object(
    bytes: &[u8],
    at: usize,
    mut field: impl FnMut(&[u8], usize) -> Option<usize>,
) -> Option<usize> {
    if bytes.get(at) != Some(&b'{') {
        return None;
    }
    let mut at = skip_ws(bytes, at + 1);
    if bytes.get(at) == Some(&b'}') {
        return Some(at + 1);
    }
    loop {
        if bytes.get(at) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(bytes, at)?;
        let key = &bytes[at + 1..key_end - 1];
        at = skip_ws(bytes, key_end);
        if bytes.get(at) != Some(&b':') {
            return None;
        }
        at = skip_ws(bytes, field(key, skip_ws(bytes, at + 1))?);
        match bytes.get(at)? {
            b',' => at = skip_ws(bytes, at + 1),
            b'}' => return Some(at + 1),
            _ => return None,
        }
    }
}

fn skip_ws(bytes: &[u8], mut at: usize) -> usize {
    while bytes.get(at).is_some_and(u8::is_ascii_whitespace) {
        at += 1;
    }
    at
}

/// Just past the closing quote of the string that opens at `at`.
fn string_end(bytes: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// Just past the value that starts at `at` (a string, object, array or scalar).
fn value_end(bytes: &[u8], at: usize) -> Option<usize> {
    match bytes.get(at)? {
        b'"' => string_end(bytes, at),
        b'{' | b'[' => inside_object_end(bytes, at + 1),
        _ => {
            let len = bytes[at..]
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']') || b.is_ascii_whitespace())
                .unwrap_or(bytes.len() - at);
            Some(at + len)
        }
    }
}

/// A JSON unsigned integer without sign, fraction or exponent.
fn unsigned(value: &[u8]) -> Option<u64> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    value.iter().try_fold(0u64, |n, d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::{any_layout_success_id, compact_success_id, success_id};

    #[test]
    fn the_compact_layout_is_matched_by_prefix_and_agrees_with_the_general_walk() {
        for (line, want) in [
            (
                &br#"{"jsonrpc":"2.0","id":9,"result":{"success":true}}"#[..],
                Some(9),
            ),
            (
                br#"{"jsonrpc":"2.0","id":10,"result":{"success":true,"data":{"t":"}]\"{"}}}"#,
                Some(10),
            ),
            (
                br#"{"jsonrpc":"2.0","id":11,"result":{"success":true,"a":[1,{}]} }"#,
                Some(11),
            ),
            // Something after the result, or a result that does not close: not this path.
            (
                br#"{"jsonrpc":"2.0","id":12,"result":{"success":true},"x":1}"#,
                None,
            ),
            (
                br#"{"jsonrpc":"2.0","id":13,"result":{"success":true,"a":1}"#,
                None,
            ),
            (
                br#"{"jsonrpc":"2.0","id":14,"result":{"success":true,"a":1}}}"#,
                None,
            ),
            (
                br#"{"jsonrpc":"2.0","id":15,"result":{"success":trueish}}"#,
                None,
            ),
            (
                br#"{"jsonrpc":"2.0","id":1.5,"result":{"success":true}}"#,
                None,
            ),
        ] {
            let text = String::from_utf8_lossy(line);
            assert_eq!(compact_success_id(line), want, "{text}");
            if want.is_some() {
                assert_eq!(any_layout_success_id(line), want, "{text}");
            }
        }
        // The general walk still takes what the prefix does not match.
        let extra = br#"{"jsonrpc":"2.0","id":12,"result":{"success":true},"x":1}"#;
        assert_eq!(success_id(extra), Some(12));
    }

    #[test]
    fn finds_the_id_of_a_success_in_any_layout() {
        let compact =
            br#"{"jsonrpc":"2.0","id":42,"result":{"success":true,"data":{"t":"}{\"]"}}}"#;
        assert_eq!(success_id(compact), Some(42));
        let spaced =
            br#"{"jsonrpc": "2.0", "result": {"data": [1, {"a": "b"}], "success": true}, "id": 7}"#;
        assert_eq!(success_id(spaced), Some(7));
    }

    #[test]
    fn leaves_everything_else_to_the_full_parser() {
        for line in [
            &br#"{"jsonrpc":"2.0","id":1,"result":{"success":false,"error":"no"}}"#[..],
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"x"}}"#,
            br#"{"jsonrpc":"2.0","id":"s-1","method":"sampling/createMessage","params":{}}"#,
            br#"{"jsonrpc":"2.0","id":"7","result":{"success":true}}"#,
            br#"{"jsonrpc":"2.0","id":-7,"result":{"success":true}}"#,
            br#"{"jsonrpc":"2.0","id":1,"result":{"success":true}"#,
            br#"{"jsonrpc":"2.0","id":1,"result":{"data":{"success":true}}}"#,
            b"not json",
        ] {
            assert_eq!(success_id(line), None, "{}", String::from_utf8_lossy(line));
        }
    }
}
