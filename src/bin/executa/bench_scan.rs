//! The bench driver's fast path through a reply: one pass over the bytes that finds the
//! top-level `id` (an unsigned integer) and whether the result says the call succeeded
//! (Executa: `result.success == true`; MCP: no `result.isError == true`, and in the
//! stateless era no `resultType` but `complete`), without building
//! anything. The `executa` binary ships at opt-level "z", where a full serde parse of each
//! reply costs the driver more CPU than many plugins spend answering it; anything this scan
//! does not recognise (a request, an error, `success: false`, a string id, a malformed
//! frame) goes to the full parser instead, so it only ever speeds up the common case.
//!
//! It checks the structure of the envelope and of the result: their members, strings,
//! scalar tokens, and that every bracket below them is closed by its own kind. Tokens nested
//! deeper inside `data` are only skipped, not checked.

/// Which member of a result says that the call succeeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Executa's invoke result: `success` is there and `true`.
    Success,
    /// MCP's `tools/call` result: `isError`, when there, is `false`.
    NotIsError,
    /// MCP's `tools/call` result in the stateless era: as [`Verdict::NotIsError`], and
    /// `resultType`, when there, is `"complete"` (an `input_required` one is not final).
    Complete,
}

/// The id of a successful invoke reply, or `None` when the frame needs the full parser.
pub fn success_id(line: &[u8], verdict: Verdict) -> Option<u64> {
    compact_success_id(line, verdict).or_else(|| any_layout_success_id(line, verdict))
}

/// The envelope's head as executa (and most SDKs that write compact JSON) lays it out.
const HEAD: &[u8] = br#"{"jsonrpc":"2.0","id":"#;
/// What follows the id in a reply laid out that way.
const RESULT: &[u8] = br#","result":"#;

/// The common layout, matched by prefix up to the result; the result is walked as
/// [`any_layout_success_id`] walks it, so where this path answers, that walk answers the
/// same. Saves the general walk's work on the envelope's own members.
fn compact_success_id(line: &[u8], verdict: Verdict) -> Option<u64> {
    let rest = line.strip_prefix(HEAD)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let id = unsigned(&rest[..digits])?;
    rest[digits..].strip_prefix(RESULT)?;
    let (end, success) = result_success(line, HEAD.len() + digits + RESULT.len(), verdict)?;
    let close = skip_ws(line, end);
    let ends = line.get(close) == Some(&b'}') && skip_ws(line, close + 1) == line.len();
    (success && ends).then_some(id)
}

/// [`success_id`] for any layout: one walk over the members, wherever they are.
fn any_layout_success_id(line: &[u8], verdict: Verdict) -> Option<u64> {
    let mut id = None;
    let mut success = None;
    let end = object(line, skip_ws(line, 0), |key, at| match key {
        b"id" => {
            let end = value_end(line, at)?;
            let n = unsigned(&line[at..end])?;
            // A member named twice is for the full parser to judge.
            id.replace(n).is_none().then_some(end)
        }
        // One pass: the result's own fields are scanned while skipping it.
        b"result" => {
            let (end, ok) = result_success(line, at, verdict)?;
            success.replace(ok).is_none().then_some(end)
        }
        b"method" | b"error" => None,
        _ => value_end(line, at),
    })?;
    if skip_ws(line, end) != line.len() {
        return None;
    }
    id.filter(|_| success == Some(true))
}

/// Walks the result object that opens at `at`: where it ends, and whether it says the
/// call succeeded (`verdict`). `None` for a malformed result, or one that names the
/// deciding member twice.
fn result_success(line: &[u8], at: usize, verdict: Verdict) -> Option<(usize, bool)> {
    let key_of = match verdict {
        Verdict::Success => &b"success"[..],
        Verdict::NotIsError | Verdict::Complete => b"isError",
    };
    let (mut member, mut kind) = (None, None);
    let end = object(line, at, |key, at| {
        let end = value_end(line, at)?;
        let slot = match key {
            _ if key == key_of => &mut member,
            b"resultType" if verdict == Verdict::Complete => &mut kind,
            _ => return Some(end),
        };
        slot.replace(&line[at..end]).is_none().then_some(end)
    })?;
    let not_error = || member.is_none_or(|v| v == b"false");
    let ok = match verdict {
        Verdict::Success => member == Some(b"true"),
        Verdict::NotIsError => not_error(),
        Verdict::Complete => not_error() && kind.is_none_or(|v| v == br#""complete""#),
    };
    Some((end, ok))
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

/// Just past the value that starts at `at` (a string, object, array or scalar token).
fn value_end(bytes: &[u8], at: usize) -> Option<usize> {
    match bytes.get(at)? {
        b'"' => string_end(bytes, at),
        b'{' | b'[' => container_end(bytes, at),
        _ => {
            let len = bytes[at..]
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']') || b.is_ascii_whitespace())
                .unwrap_or(bytes.len() - at);
            let token = &bytes[at..at + len];
            (matches!(token, b"true" | b"false" | b"null") || number_like(token))
                .then_some(at + len)
        }
    }
}

/// Just past the object or array that opens at `at`, each bracket closed by its own kind.
/// Nested deeper than 64 levels: `None` (the full parser decides).
fn container_end(bytes: &[u8], at: usize) -> Option<usize> {
    // One bit per open bracket: 1 for `[`, 0 for `{`.
    let (mut kinds, mut depth) = (0u64, 0u32);
    let mut i = at;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i = string_end(bytes, i)?;
                continue;
            }
            open @ (b'{' | b'[') => {
                if depth == 64 {
                    return None;
                }
                kinds = (kinds << 1) | u64::from(open == b'[');
                depth += 1;
            }
            close @ (b'}' | b']') => {
                if depth == 0 || (kinds & 1 == 1) != (close == b']') {
                    return None;
                }
                kinds >>= 1;
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

/// Whether `token` can only be a JSON number (the full parser checks the rest).
fn number_like(token: &[u8]) -> bool {
    token
        .first()
        .is_some_and(|b| *b == b'-' || b.is_ascii_digit())
        && token
            .iter()
            .all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E'))
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
    use super::{Verdict, any_layout_success_id, compact_success_id, success_id};

    /// Successes, with their ids, in the compact layout and others.
    const SUCCESSES: &[(&[u8], u64)] = &[
        (br#"{"jsonrpc":"2.0","id":9,"result":{"success":true}}"#, 9),
        (
            br#"{"jsonrpc":"2.0","id":10,"result":{"success":true,"data":{"t":"}]\"{"}}}"#,
            10,
        ),
        (
            br#"{"jsonrpc":"2.0","id":11,"result":{"success":true,"a":[1,{},-2.5e3,null]} }"#,
            11,
        ),
        (
            br#"{"jsonrpc":"2.0","id":12,"result":{"success":true},"x":1}"#,
            12,
        ),
        (
            br#"{"jsonrpc": "2.0", "result": {"data": [1, {"a": "b"}], "success": true}, "id": 7}"#,
            7,
        ),
    ];

    /// Frames that are not a success, or are malformed: the full parser decides.
    const OTHERS: &[&[u8]] = &[
        br#"{"jsonrpc":"2.0","id":1,"result":{"success":false,"error":"no"}}"#,
        br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"x"}}"#,
        br#"{"jsonrpc":"2.0","id":"s-1","method":"sampling/createMessage","params":{}}"#,
        br#"{"jsonrpc":"2.0","id":"7","result":{"success":true}}"#,
        br#"{"jsonrpc":"2.0","id":-7,"result":{"success":true}}"#,
        br#"{"jsonrpc":"2.0","id":1.5,"result":{"success":true}}"#,
        br#"{"jsonrpc":"2.0","id":1,"result":{"data":{"success":true}}}"#,
        br#"{"jsonrpc":"2.0","id":1,"result":{"success":true},"error":{"code":1}}"#,
        br#"{"jsonrpc":"2.0","id":1,"id":2,"result":{"success":true}}"#,
        // Malformed: unclosed, closed twice, a bracket closed by the other kind, a member
        // that is not one, a trailing comma, a bad token, a success named twice.
        br#"{"jsonrpc":"2.0","id":1,"result":{"success":true}"#,
        br#"{"jsonrpc":"2.0","id":1,"result":{"success":true,"a":1}}}"#,
        br#"{"jsonrpc":"2.0","id":1,"result":{"success":true,"a":1]}"#,
        br#"{"jsonrpc":"2.0","id":1,"result":{"success":true,"a":[1}]}}"#,
        br#"{"jsonrpc":"2.0","id":1,"result":{"success":true,garbage}}"#,
        br#"{"jsonrpc":"2.0","id":1,"result":{"success":true,}}"#,
        br#"{"jsonrpc":"2.0","id":1,"result":{"success":trueish}}"#,
        br#"{"jsonrpc":"2.0","id":1,"result":{"success":true,"a":nul}}"#,
        br#"{"jsonrpc":"2.0","id":1,"result":{"success":true,"success":false}}"#,
        b"not json",
    ];

    #[test]
    fn finds_the_id_of_a_success_in_any_layout() {
        for (line, id) in SUCCESSES {
            assert_eq!(
                success_id(line, Verdict::Success),
                Some(*id),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn leaves_everything_else_to_the_full_parser() {
        for line in OTHERS {
            assert_eq!(
                success_id(line, Verdict::Success),
                None,
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn the_compact_path_answers_only_as_the_general_walk_does() {
        let mut compact_hits = 0;
        for line in SUCCESSES
            .iter()
            .map(|(l, _)| *l)
            .chain(OTHERS.iter().copied())
        {
            let compact = compact_success_id(line, Verdict::Success);
            if compact.is_some() {
                compact_hits += 1;
                assert_eq!(
                    compact,
                    any_layout_success_id(line, Verdict::Success),
                    "{}",
                    String::from_utf8_lossy(line)
                );
            }
        }
        // The three compact successes without anything after the result.
        assert_eq!(compact_hits, 3);
    }

    #[test]
    fn an_mcp_result_succeeds_unless_it_says_is_error_true() {
        let ok: &[(&[u8], u64)] = &[
            (
                br#"{"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"text","text":"hi"}],"isError":false}}"#,
                4,
            ),
            (
                br#"{"jsonrpc":"2.0","id":5,"result":{"content":[],"structuredContent":{"isError":true}}}"#,
                5,
            ),
            (br#"{"id": 6, "jsonrpc": "2.0", "result": {"content": []}}"#, 6),
        ];
        for (line, id) in ok {
            let text = String::from_utf8_lossy(line);
            assert_eq!(success_id(line, Verdict::NotIsError), Some(*id), "{text}");
            // An MCP result is not an Executa success, which needs `success: true`.
            assert_eq!(success_id(line, Verdict::Success), None, "{text}");
        }
        for line in [
            &br#"{"jsonrpc":"2.0","id":4,"result":{"content":[],"isError":true}}"#[..],
            br#"{"jsonrpc":"2.0","id":4,"result":{"isError":false,"isError":false}}"#,
            br#"{"jsonrpc":"2.0","id":4,"result":{"isError":"no"}}"#,
            br#"{"jsonrpc":"2.0","id":4,"error":{"code":-32602,"message":"x"}}"#,
            br#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#,
        ] {
            let text = String::from_utf8_lossy(line);
            assert_eq!(success_id(line, Verdict::NotIsError), None, "{text}");
        }
    }

    /// In the stateless era a result asking for input is not the call's answer.
    #[test]
    fn a_stateless_result_succeeds_only_when_complete() {
        for (line, id) in [
            (
                &br#"{"jsonrpc":"2.0","id":4,"result":{"content":[],"resultType":"complete"}}"#[..],
                4,
            ),
            (br#"{"jsonrpc":"2.0","id":5,"result":{"content":[]}}"#, 5),
            (
                br#"{"id":6,"jsonrpc":"2.0","result":{"resultType" : "complete","isError":false}}"#,
                6,
            ),
        ] {
            let text = String::from_utf8_lossy(line);
            assert_eq!(success_id(line, Verdict::Complete), Some(id), "{text}");
        }
        for line in [
            &br#"{"jsonrpc":"2.0","id":4,"result":{"resultType":"input_required","requestState":"s"}}"#[..],
            br#"{"jsonrpc":"2.0","id":4,"result":{"resultType":"input\u005frequired"}}"#,
            br#"{"jsonrpc":"2.0","id":4,"result":{"resultType":"complete","resultType":"complete"}}"#,
            br#"{"jsonrpc":"2.0","id":4,"result":{"resultType":"complete","isError":true}}"#,
        ] {
            let text = String::from_utf8_lossy(line);
            assert_eq!(success_id(line, Verdict::Complete), None, "{text}");
        }
        let pending = br#"{"jsonrpc":"2.0","id":4,"result":{"resultType":"input_required"}}"#;
        assert_eq!(
            success_id(pending, Verdict::NotIsError),
            Some(4),
            "the handshake era's rule"
        );
    }
}
