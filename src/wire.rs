//! Line framing and envelope parsing shared by the plugin and host sides.
//!
//! One JSON-RPC 2.0 object per LF-terminated UTF-8 line. Input tolerates CRLF, a leading
//! byte-order mark and blank lines. Frames are read into one reused buffer (wiped as it is
//! reused: frames carry credentials) and parsed without building a `serde_json::Value`
//! tree: `method` is borrowed, `params`, `result` and `error` stay raw JSON ([`RawValue`]).
//! Output frames are always exactly one line.

use std::borrow::Cow;
use std::io::{self, Read};
use std::ops::Range;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;

use crate::error::{RpcError, codes};
use crate::id::Id;
use crate::secret::zero;

/// Default cap on one frame: 16 MiB, the Agent's `MAX_READLINE_BYTES`, which must hold an
/// inline `host/uploadFile` (base64 of 8 MiB is about 10.7 MiB).
pub const DEFAULT_MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// Read buffer size; also the size the buffer shrinks back to after a big frame.
const READ_CHUNK: usize = 64 * 1024;

/// How much of an oversized frame is kept to look for its `id`.
const HEAD_BYTES: usize = 4096;

/// One frame as read from the stream.
#[derive(Debug, PartialEq)]
pub enum Frame<'a> {
    /// A complete line (without its line ending, BOM or surrounding blank lines).
    Line(&'a [u8]),
    /// A line longer than the cap. It was drained to the next LF, never held whole beyond
    /// the read buffer; `head` holds its first bytes, enough to look for an id.
    Oversized {
        /// The first bytes of the frame.
        head: &'a [u8],
        /// The last bytes of the frame (an `id` written after the bulk is here).
        tail: &'a [u8],
        /// The frame's full length in bytes.
        size: usize,
    },
}

/// Reads LF-delimited frames into one reused buffer, with a size cap.
///
/// Frames are returned borrowed from the read buffer. They may hold credentials, so no
/// byte of one is left in memory this reader reuses or frees: consumed input is wiped when
/// the buffer is compacted, before every read from the input; a buffer that grows or
/// shrinks is wiped before it is freed, an oversized frame's drained bytes as they go, and
/// what is left when the reader is dropped.
pub struct FrameReader<R> {
    inner: R,
    /// Input read: `buf[pos..filled]` is not consumed yet, `buf[..pos]` is, and
    /// `buf[filled..]` is zero (so wiping `buf[..filled]` wipes the buffer).
    buf: Vec<u8>,
    pos: usize,
    /// `buf[pos..scan]` holds no line break.
    scan: usize,
    filled: usize,
    max: usize,
    /// The frame being drained past the cap (it starts at `buf[0]`).
    over: Option<Over>,
}

/// What is kept of a frame past the cap: its first `head` bytes at `buf[..head]`, then at
/// most [`HEAD_BYTES`] of its latest bytes; the `dropped` bytes between them are gone.
#[derive(Clone, Copy)]
struct Over {
    head: usize,
    dropped: usize,
}

impl<R: Read> FrameReader<R> {
    /// A reader with the given frame cap in bytes.
    pub fn new(inner: R, max_frame_bytes: usize) -> Self {
        FrameReader {
            inner,
            buf: vec![0; READ_CHUNK],
            pos: 0,
            scan: 0,
            filled: 0,
            max: max_frame_bytes,
            over: None,
        }
    }

    /// Blocks until the next non-blank frame is read. Returns `Ok(None)` at end of input
    /// (a final line without LF is still returned first) and `Err` on a read error.
    pub fn next_frame(&mut self) -> io::Result<Option<Frame<'_>>> {
        self.next_frame_gated(&mut || true)
    }

    /// As [`FrameReader::next_frame`], but asks `ready` before each read from the input
    /// (it may wait for input, with a bound). When it says no, returns `WouldBlock` and
    /// keeps what it read of a frame for the next call, so a frame that stops half-way
    /// never blocks the caller past `ready`'s bound.
    pub(crate) fn next_frame_gated(
        &mut self,
        ready: &mut dyn FnMut() -> bool,
    ) -> io::Result<Option<Frame<'_>>> {
        loop {
            let unscanned = self.buf.get(self.scan..self.filled).unwrap_or_default();
            let end = match crate::sys::find_byte(unscanned, b'\n') {
                Some(i) => self.scan + i,
                // End of input: a last line without LF still counts.
                None if self.fill(ready)? == 0 => {
                    if self.filled == self.pos && self.over.is_none() {
                        return Ok(None);
                    }
                    self.filled
                }
                None => continue,
            };
            let start = self.pos;
            self.pos = self.filled.min(end + 1);
            self.scan = self.pos;
            let over = self.over.take();
            if over.is_some() || end - start > self.max {
                let Over { head, dropped } = over.unwrap_or(Over {
                    head: HEAD_BYTES,
                    dropped: 0,
                });
                let line = self.buf.get(start..end).unwrap_or_default();
                let size = line.len();
                return Ok(Some(Frame::Oversized {
                    head: &line[..head.min(size)],
                    tail: &line[size - size.min(HEAD_BYTES)..],
                    size: dropped + size,
                }));
            }
            let (a, b) = trim_frame(self.buf.get(start..end).unwrap_or_default());
            if a < b {
                return Ok(Some(Frame::Line(
                    self.buf.get(start + a..start + b).unwrap_or_default(),
                )));
            }
        }
    }

    /// Whether a whole frame is already buffered, so [`FrameReader::next_frame`] would
    /// return without reading (a caller may hold its replies until it would block).
    pub fn has_buffered_frame(&self) -> bool {
        self.buf
            .get(self.scan..self.filled)
            .is_some_and(|b| crate::sys::find_byte(b, b'\n').is_some())
    }

    /// Reads more input after `filled`, having made room (consumed input wiped, a frame
    /// past the cap drained). Returns the number of bytes read, 0 at end of input.
    fn fill(&mut self, ready: &mut dyn FnMut() -> bool) -> io::Result<usize> {
        self.scan = self.filled;
        if self.over.is_none() && self.filled - self.pos > self.max {
            self.compact();
            self.over = Some(Over {
                head: self.filled.min(HEAD_BYTES),
                dropped: 0,
            });
        }
        if let Some(Over { head, dropped }) = self.over {
            // Past the cap: keep the head and the latest bytes, drain the rest.
            let keep = head + HEAD_BYTES;
            if self.filled > keep {
                self.over = Some(Over {
                    head,
                    dropped: dropped + self.filled - keep,
                });
                self.move_down(self.filled - HEAD_BYTES, head);
            }
        }
        self.compact();
        let len = self.buf.len();
        if self.filled == len {
            self.realloc(2 * len);
        } else if len > 4 * READ_CHUNK && self.filled < READ_CHUNK {
            // Give back the memory of an earlier big frame.
            self.realloc(READ_CHUNK);
        }
        loop {
            if !ready() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let space = self.buf.get_mut(self.filled..).unwrap_or_default();
            match self.inner.read(space) {
                Ok(n) => {
                    self.filled += n.min(space.len());
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Moves what is not consumed to the front of the buffer, wiping the rest: the
    /// consumed frames (one fill of their bytes, once per read from the input).
    fn compact(&mut self) {
        if self.pos > 0 {
            self.scan -= self.pos;
            self.move_down(self.pos, 0);
            self.pos = 0;
        }
    }

    /// Moves `buf[from..filled]` down to `to`, wiping the bytes it leaves.
    fn move_down(&mut self, from: usize, to: usize) {
        let filled = self.filled;
        self.buf.copy_within(from..filled, to);
        self.filled = to + (filled - from);
        self.scan = self.scan.min(self.filled);
        if let Some(left) = self.buf.get_mut(self.filled..filled) {
            zero(left);
        }
    }

    /// Moves the buffered input (compacted) into a new buffer of `len` bytes, wiping the
    /// old one before it is freed.
    fn realloc(&mut self, len: usize) {
        let mut old = std::mem::replace(&mut self.buf, vec![0; len]);
        old.truncate(self.filled);
        if let Some(to) = self.buf.get_mut(..old.len()) {
            to.copy_from_slice(&old);
        }
        zero(&mut old);
    }
}

impl<R> Drop for FrameReader<R> {
    fn drop(&mut self) {
        // What is left may hold credentials.
        self.buf.truncate(self.filled);
        zero(&mut self.buf);
    }
}

/// The bounds of a frame without BOM, CR and surrounding white space.
fn trim_frame(line: &[u8]) -> (usize, usize) {
    let mut start = 0;
    if line.first_chunk::<3>() == Some(b"\xEF\xBB\xBF") {
        start = 3;
    }
    let mut end = line.len();
    while start < end && line[start].is_ascii_whitespace() {
        start += 1;
    }
    while end > start && line[end - 1].is_ascii_whitespace() {
        end -= 1;
    }
    (start, end)
}

/// A parsed incoming frame, borrowing from the line buffer.
#[derive(Debug)]
pub enum Message<'a> {
    /// A request (`id` present) or notification (`id` absent).
    Request {
        /// The id exactly as sent; `Some("null")` for an explicit `null`.
        id: Option<&'a RawValue>,
        /// The method name.
        method: Cow<'a, str>,
        /// The params, still raw.
        params: Option<&'a RawValue>,
    },
    /// A response to one of our own requests.
    Response {
        /// The id exactly as sent.
        id: &'a RawValue,
        /// `Ok(result)` or `Err(error object)`, both still raw.
        outcome: Result<&'a RawValue, &'a RawValue>,
    },
    /// Valid JSON that is not a valid envelope (-32600).
    Invalid {
        /// The id, when one could be read.
        id: Option<&'a RawValue>,
        /// What is wrong.
        reason: String,
    },
    /// Not JSON at all (-32700).
    Unparsable(String),
    /// A frame without `method` that is not a valid response: it fails our call it names
    /// (never answered), or, with a peer's id, is answered -32600 like any bad request.
    BadResponse {
        /// The id it names.
        id: &'a RawValue,
        /// What is wrong.
        reason: String,
    },
    /// An invalid notification (no `id`): logged, never answered.
    Ignored(String),
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    method: Option<Str<'a>>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    result: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    error: Option<&'a RawValue>,
    #[serde(default, borrow)]
    jsonrpc: Option<Str<'a>>,
}

/// A string borrowed from the line where it has no escapes. (serde's own `Cow<str>` copies
/// unless it is a bare field marked `borrow`; inside an `Option` it always copies, which
/// cost two allocations per frame.)
pub(crate) struct Str<'a>(pub Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = Str<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Str<'a>, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Str<'a>, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V(std::marker::PhantomData))
    }
}

/// Like `Option<&RawValue>`, but an explicit JSON `null` is `Some("null")`, not `None`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

#[derive(Deserialize)]
struct IdOnly<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    id: Option<&'a RawValue>,
}

/// Classifies one frame. Never fails: bad input becomes [`Message::Invalid`] or
/// [`Message::Unparsable`], to be answered with -32600 or -32700.
pub fn parse(line: &[u8]) -> Message<'_> {
    // Parsing from `str` borrows strings without validating each one again (and one parser
    // instance keeps plugin binaries small).
    let line = match std::str::from_utf8(line) {
        Ok(text) => text,
        Err(e) => {
            return Message::Unparsable(format!("parse error: the frame is not UTF-8 ({e})"));
        }
    };
    // Only an object is an envelope. serde's derived `Deserialize` would also accept an
    // array positionally (`[7,"health"]` as id 7, method "health"), so check first.
    if line.trim_start().as_bytes().first() != Some(&b'{') {
        return match not_json(line) {
            None => Message::Invalid {
                id: None,
                reason: "a frame must be a JSON object (a JSON-RPC batch is not supported: \
                         send one message per line)"
                    .to_owned(),
            },
            Some(why) => Message::Unparsable(why),
        };
    }
    let env: Envelope<'_> = match serde_json::from_str(line) {
        Ok(env) => env,
        Err(e) if e.is_data() => {
            // A field of the wrong shape can stop the envelope before the line's end: a
            // line that is not JSON at all is still a parse error (-32700), not -32600.
            if let Some(why) = not_json(line) {
                return Message::Unparsable(why);
            }
            let id = serde_json::from_str::<IdOnly<'_>>(line)
                .ok()
                .and_then(|x| x.id)
                .filter(|id| valid_id(id));
            return Message::Invalid {
                id,
                reason: format!("invalid JSON-RPC envelope: {e}"),
            };
        }
        Err(e) => return Message::Unparsable(format!("parse error: {e}")),
    };
    let id = env.id.filter(|id| valid_id(id));
    let Some(Str(method)) = env.method else {
        return response(env.id, env.result, env.error);
    };
    let problem = if env.id.is_some() && id.is_none() {
        // JSON-RPC ids are strings, numbers or null; any other id is not echoed.
        Some(BAD_ID.to_owned())
    } else if let Some(v) = env.jsonrpc.as_ref().map(|v| &*v.0).filter(|v| *v != "2.0") {
        Some(format!(
            "unsupported jsonrpc version {:?}, expected \"2.0\"",
            &*elide(v, QUOTE_BYTES)
        ))
    } else if env
        .params
        .is_some_and(|p| !matches!(first_byte(p), b'{' | b'[' | b'n'))
    {
        Some("params must be an object or an array".to_owned())
    } else {
        None
    };
    match (problem, env.id) {
        (None, _) => Message::Request {
            id,
            method,
            params: env.params,
        },
        // A frame without an id is never answered, even when it is wrong.
        (Some(reason), None) => Message::Ignored(reason),
        (Some(reason), Some(_)) => Message::Invalid { id, reason },
    }
}

/// The envelope's head as this crate's host (and most SDKs that write compact JSON) lays
/// out an invoke: `{"jsonrpc":"2.0","id":ID,"method":"invoke","params":{...}}`.
const INVOKE_HEAD: &[u8] = br#"{"jsonrpc":"2.0","id":"#;
/// What follows the id in an invoke laid out that way.
pub(crate) const INVOKE_TAIL: &[u8] = br#","method":"invoke","params":"#;
/// What follows the id in an MCP `tools/call` laid out that way (as `executa`'s own host
/// writes it).
#[cfg(feature = "mcp")]
pub(crate) const TOOLS_CALL_TAIL: &[u8] = br#","method":"tools/call","params":"#;

/// The id and params spans of an invoke laid out as [`INVOKE_HEAD`] shows (no white space;
/// the id a number or a string), found by prefix instead of serde's walk over the whole
/// envelope, whose own work (its members matched by name, each kept as a raw value) was a
/// tenth of a plugin's instructions per `echo` invoke at opt-level "z". The id is checked
/// to be one JSON value, and the params are read by `read_params`, which must succeed only
/// on one JSON value (the plugin reads them as invoke params, so they are read once; tests
/// skip them with serde's `IgnoredAny`): a frame taken here is exactly the four-member
/// request [`parse`] would read, with the same id, method and params. Returns the spans of
/// the id and params and what `read_params` made of them; `None` when the frame is laid
/// out otherwise or `read_params` says no: [`parse`] reads it.
pub(crate) fn compact_invoke<T>(
    line: &[u8],
    read_params: impl FnOnce(&str) -> Option<T>,
) -> Option<(Range<usize>, Range<usize>, T)> {
    compact_request(line, INVOKE_TAIL, |_, _, params| read_params(params))
}

/// As [`compact_invoke`], for the request whose method and `params` key are `tail` (one of
/// [`INVOKE_TAIL`], [`TOOLS_CALL_TAIL`]); `read_params` is given the id's span and the
/// line's text (checked UTF-8) too.
pub(crate) fn compact_request<T>(
    line: &[u8],
    tail: &[u8],
    read_params: impl FnOnce(Range<usize>, &str, &str) -> Option<T>,
) -> Option<(Range<usize>, Range<usize>, T)> {
    let rest = line.strip_prefix(INVOKE_HEAD)?;
    // The id runs to the first `,"`, where `,"method":"invoke","params":` must follow. A
    // number holds neither byte, and a string holds `"` only escaped, so a valid id ends
    // there or holds that pair at its very end (a string ending in a comma, left to
    // `parse`; any id cut short fails its check). A response, which starts the same way,
    // is given up at its second member instead of searched to its end.
    let mut from = 0;
    let id_len = loop {
        let comma = from + rest.get(from..)?.iter().position(|&b| b == b',')?;
        if rest.get(comma + 1) == Some(&b'"') {
            break comma;
        }
        from = comma + 1;
    };
    if !rest[id_len..].starts_with(tail) {
        return None;
    }
    // JSON text is UTF-8; a frame that is not goes to `parse`, which says so. Checked only
    // once the frame looks like an invoke: any other frame (an answer from the host, which
    // may be long) is checked once, by `parse`.
    let text = std::str::from_utf8(line).ok()?;
    let id = INVOKE_HEAD.len()..INVOKE_HEAD.len() + id_len;
    let start = id.end + tail.len();
    // The spans `parse` reads exclude white space: the id's is echoed byte for byte, so an
    // id followed by any is left to `parse`; the params' is trimmed.
    // JSON's white space only: a form feed (which `is_ascii_whitespace` counts) makes the
    // frame invalid, for `parse` to refuse.
    let mut end = line.len().checked_sub(1)?;
    while end > start && matches!(line[end - 1], b' ' | b'\t' | b'\n' | b'\r') {
        end -= 1;
    }
    // A number or a string, as `parse` takes them (not `null`, which it reads apart), and
    // an object.
    let ok = matches!(rest.first(), Some(b'-' | b'0'..=b'9' | b'"'))
        && id_len <= MAX_ID_BYTES
        && !rest[..id_len].last().is_some_and(u8::is_ascii_whitespace)
        && line.get(start) == Some(&b'{')
        && line.last() == Some(&b'}')
        && crate::json_scan::value_end(text, id.start) == Some(id.end);
    if !ok {
        return None;
    }
    let params = read_params(id.clone(), text, text.get(start..end)?)?;
    Some((id, start..end, params))
}

/// Whether `text` is one JSON value (serde's own skip).
#[cfg(test)]
fn one_value(text: &str) -> bool {
    serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
}

/// Why `line` is not one JSON value, or `None` when it is. Only called on error paths:
/// JSON text is UTF-8, which skipping a value with `IgnoredAny` does not check.
fn not_json(line: &str) -> Option<String> {
    serde_json::from_str::<serde::de::IgnoredAny>(line)
        .err()
        .map(|e| format!("parse error: {e}"))
}

/// Classifies a frame without `method`: a response to one of our own requests.
fn response<'a>(
    id: Option<&'a RawValue>,
    result: Option<&'a RawValue>,
    error: Option<&'a RawValue>,
) -> Message<'a> {
    // JSON-RPC 1.0 peers send both members with the unused one null.
    let error = error.filter(|e| e.get() != "null");
    let result = result.filter(|r| error.is_none() || r.get() != "null");
    match (id, result, error) {
        (Some(id), Some(result), None) => Message::Response {
            id,
            outcome: Ok(result),
        },
        (Some(id), None, Some(error)) => Message::Response {
            id,
            outcome: Err(error),
        },
        (Some(id), _, _) if valid_id(id) => Message::BadResponse {
            id,
            reason: "a response needs exactly one of result and error".to_owned(),
        },
        (Some(_), _, _) => Message::Invalid {
            id: None,
            reason: BAD_ID.to_owned(),
        },
        (None, _, _) => Message::Invalid {
            id: None,
            reason: "a frame needs a method, or an id with exactly one of result and error"
                .to_owned(),
        },
    }
}

/// Why an id is refused (and not echoed).
const BAD_ID: &str = "id must be a string, a number or null, of at most 1024 bytes";

/// Whether a raw id is a string, a number or null (JSON-RPC allows nothing else), of at
/// most [`MAX_ID_BYTES`].
fn valid_id(id: &RawValue) -> bool {
    !matches!(first_byte(id), b'{' | b'[' | b't' | b'f') && id.get().len() <= MAX_ID_BYTES
}

fn first_byte(raw: &RawValue) -> u8 {
    raw.get().as_bytes().first().copied().unwrap_or(b' ')
}

/// A value as compact JSON text, exactly what its `Display` prints, but through the
/// serializer the frames already use: `Display` would compile a second one into every plugin.
pub(crate) fn json_text(v: &serde_json::Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// Parses an error object sent by a peer; a malformed one becomes a -32603 error that says so.
pub(crate) fn parse_error_object(raw: &RawValue) -> RpcError {
    serde_json::from_str(raw.get()).unwrap_or_else(|e| {
        RpcError::new(
            codes::INTERNAL_ERROR,
            format!("malformed error object from peer: {e}"),
        )
    })
}

/// What the first bytes of an oversized frame reveal.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Head {
    /// The top-level `id`, when it appears in the head.
    pub(crate) id: Option<Id>,
    /// Whether a top-level `method` key appears in the head (a request, not a response).
    pub(crate) has_method: bool,
    /// Whether a top-level `method` or `params` key appears in the head, its value whole
    /// or cut off: only a request has either, so the frame is not an answer.
    pub(crate) request_key: bool,
}

/// Scans the head of a truncated frame for its top-level `id` and `method` keys.
pub(crate) fn scan_head(head: &[u8]) -> Head {
    let mut out = Head::default();
    let mut s = Scanner { b: head, i: 0 };
    s.ws();
    if !s.eat(b'{') {
        return out;
    }
    loop {
        s.ws();
        let Some(key) = s.string() else { return out };
        s.ws();
        if !s.eat(b':') {
            return out;
        }
        s.ws();
        out.request_key |= matches!(key, b"method" | b"params");
        let start = s.i;
        if !s.value() {
            return out;
        }
        match key {
            b"id" => {
                // Validated exactly as in a normal frame: a structured or boolean id is
                // never echoed; the frame is answered with `id: null`.
                let text = String::from_utf8_lossy(&head[start..s.i]).into_owned();
                out.id = Some(match RawValue::from_string(text) {
                    Ok(raw) if valid_id(&raw) => Id::from_raw(&raw),
                    _ => Id::null(),
                });
            }
            b"method" => out.has_method = true,
            _ => {}
        }
        s.ws();
        if !s.eat(b',') {
            return out;
        }
    }
}

/// Finds a top-level `id` written as the last member of a frame: the tail then ends with
/// `"id" : <scalar> }`, and a member right before the object's final brace can only belong
/// to the top-level object.
pub(crate) fn scan_tail(tail: &[u8]) -> Option<Id> {
    let t = trim_end(tail).strip_suffix(b"}")?;
    let t = trim_end(t);
    let start = scalar_start(t)?;
    let value = &t[start..];
    let before = trim_end(&t[..start]).strip_suffix(b":")?;
    let before = trim_end(before).strip_suffix(b"\"id\"")?;
    if !matches!(trim_end(before).last(), Some(b',' | b'{')) {
        return None;
    }
    let raw = RawValue::from_string(String::from_utf8(value.to_vec()).ok()?).ok()?;
    valid_id(&raw).then(|| Id::from_raw(&raw))
}

fn trim_end(b: &[u8]) -> &[u8] {
    let n = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(0, |i| i + 1);
    &b[..n]
}

/// Where the scalar that ends `t` starts: a string (honouring escapes) or a bare token.
fn scalar_start(t: &[u8]) -> Option<usize> {
    if t.last() == Some(&b'"') {
        let mut i = t.len() - 1;
        while i > 0 {
            i -= 1;
            if t[i] == b'"' {
                let backslashes = t[..i].iter().rev().take_while(|&&c| c == b'\\').count();
                if backslashes % 2 == 0 {
                    return Some(i);
                }
            }
        }
        return None;
    }
    let start = t
        .iter()
        .rposition(|c| matches!(c, b',' | b':' | b'{' | b'[') || c.is_ascii_whitespace())?
        + 1;
    (start < t.len()).then_some(start)
}

/// A minimal JSON skipper over a byte slice that may end mid-value.
struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Scanner<'a> {
    fn ws(&mut self) {
        while self.i < self.b.len() && self.b[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        let hit = self.b.get(self.i) == Some(&c);
        self.i += usize::from(hit);
        hit
    }

    /// Skips a string, returning its raw contents; `None` if truncated or not a string.
    fn string(&mut self) -> Option<&'a [u8]> {
        if !self.eat(b'"') {
            return None;
        }
        let start = self.i;
        while self.i < self.b.len() {
            match self.b[self.i] {
                b'\\' => self.i += 2,
                b'"' => {
                    self.i += 1;
                    return Some(&self.b[start..self.i - 1]);
                }
                _ => self.i += 1,
            }
        }
        None
    }

    /// Skips one complete value; `false` if it is truncated.
    fn value(&mut self) -> bool {
        match self.b.get(self.i) {
            None => false,
            Some(b'"') => self.string().is_some(),
            Some(b'{' | b'[') => {
                let mut depth = 0usize;
                while self.i < self.b.len() {
                    match self.b[self.i] {
                        b'"' => {
                            if self.string().is_none() {
                                return false;
                            }
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.i += 1;
                                return true;
                            }
                        }
                        _ => {}
                    }
                    self.i += 1;
                }
                false
            }
            Some(_) => {
                let start = self.i;
                while self.i < self.b.len()
                    && !matches!(self.b[self.i], b',' | b'}' | b']')
                    && !self.b[self.i].is_ascii_whitespace()
                {
                    self.i += 1;
                }
                // A scalar running into the end of the head may be truncated.
                self.i > start && self.i < self.b.len()
            }
        }
    }
}

/// Appends `{"jsonrpc":"2.0","id":<id>,"result":<result>}\n`.
pub fn write_response(out: &mut Vec<u8>, id: &RawValue, result: &RawValue) {
    write_response_to(out, id.get().as_bytes(), result);
}

/// As [`write_response`], with the id as raw JSON text and the result any serializable
/// value, serialized in place (no copy through a `RawValue`).
pub(crate) fn write_result<T: Serialize + ?Sized>(out: &mut Vec<u8>, id: &[u8], result: &T) {
    write_result_by(out, id, |out| serialize_into(out, result));
}

/// As [`write_result`], with the result written by `write` as JSON text.
pub(crate) fn write_result_by(out: &mut Vec<u8>, id: &[u8], write: impl FnOnce(&mut Vec<u8>)) {
    reply_head(out, id, b"result");
    write(out);
    out.extend_from_slice(b"}\n");
}

/// Appends `{"jsonrpc":"2.0","id":<id>,"error":{...}}\n`.
pub fn write_error(out: &mut Vec<u8>, id: &RawValue, error: &RpcError) {
    write_error_to(out, id.get().as_bytes(), error);
}

/// As [`write_response`], with the id as the raw JSON text taken from a parsed frame.
pub(crate) fn write_response_to(out: &mut Vec<u8>, id: &[u8], result: &RawValue) {
    write_result_by(out, id, |out| push_one_line(out, result.get().as_bytes()));
}

/// As [`write_result`], with the result serialized by `write` (one value, after the
/// frame's head, with [`write_json`]). On `Err`, `out` is left as it was. (The host's answers to reverse calls.)
#[cfg(feature = "host")]
pub(crate) fn write_result_with<E>(
    out: &mut Vec<u8>,
    id: &[u8],
    write: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
) -> Result<(), E> {
    let mark = out.len();
    let mut written = Ok(());
    write_result_by(out, id, |out| written = write(out));
    if written.is_err() {
        out.truncate(mark);
    }
    written
}

/// As [`write_error`], with the id as the raw JSON text taken from a parsed frame. A
/// message over [`MESSAGE_BYTES`] is elided (see [`elide`]), whoever wrote it: every error
/// reply stays small, whatever a request or a handler put in it.
pub(crate) fn write_error_to(out: &mut Vec<u8>, id: &[u8], error: &RpcError) {
    reply_head(out, id, b"error");
    // By hand rather than a derived `Serialize`: smaller, and the message's escape is fast.
    out.extend_from_slice(b"{\"code\":");
    serialize_into(out, &error.code);
    out.extend_from_slice(b",\"message\":");
    crate::json_text::write_str(out, &elide(&error.message, MESSAGE_BYTES));
    if let Some(data) = &error.data {
        out.extend_from_slice(b",\"data\":");
        crate::json_text::write_value(out, data);
    }
    out.extend_from_slice(b"}}\n");
}

/// The most request text an error message quotes (an unknown method's or tool's name, a
/// bad version, a value serde rejected): see [`elide`].
pub(crate) const QUOTE_BYTES: usize = 256;

/// The longest error message written whole (see [`write_error_to`]).
const MESSAGE_BYTES: usize = 1024;

/// The longest id a request may have: it is echoed in the reply, which must stay within
/// the result cap. (JSON-RPC sets no limit; hosts send a number or a short string.)
const MAX_ID_BYTES: usize = 1024;

/// `text` whole up to `max` bytes, else its first `max` bytes at most (cut at a character
/// boundary), then `… (N bytes)` with its full length. The one way an error message quotes
/// request text (with [`QUOTE_BYTES`]) and the writer bounds any message (see
/// [`write_error_to`]): a frame may hold 16 MiB, a reply must stay within the result cap.
pub(crate) fn elide(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let head = text.get(..end).unwrap_or_default();
    Cow::Owned(format!("{head}… ({} bytes)", text.len()))
}

/// A reply frame up to its `result` or `error` member's value.
fn reply_head(out: &mut Vec<u8>, id: &[u8], member: &[u8]) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id);
    out.extend_from_slice(b",\"");
    out.extend_from_slice(member);
    out.extend_from_slice(b"\":");
}

/// Appends a request (with `id`) or a notification (`id` = `None`).
pub fn write_request<P: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    id: Option<&RawValue>,
    method: &str,
    params: &P,
) {
    request_head(out, id, method);
    serialize_into(out, params);
    out.extend_from_slice(b"}\n");
}

/// As [`write_request`] with params already rendered as compact JSON (one line).
pub(crate) fn write_request_raw(
    out: &mut Vec<u8>,
    id: Option<&RawValue>,
    method: &str,
    params: &[u8],
) {
    request_head(out, id, method);
    out.extend_from_slice(params);
    out.extend_from_slice(b"}\n");
}

/// A request frame up to its params.
fn request_head(out: &mut Vec<u8>, id: Option<&RawValue>, method: &str) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",");
    if let Some(id) = id {
        out.extend_from_slice(b"\"id\":");
        out.extend_from_slice(id.get().as_bytes());
        out.push(b',');
    }
    out.extend_from_slice(b"\"method\":");
    serialize_into(out, method);
    out.extend_from_slice(b",\"params\":");
}

/// Serializes `value` into a frame: compact JSON on one line. serde_json writes no raw line
/// break of its own, but a `RawValue` in `value` is written as it was made, white space
/// and all, and a line break there would end the frame early: it becomes a space. On
/// failure, what was written stays; the caller decides.
pub(crate) fn write_json<T: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    value: &T,
) -> serde_json::Result<()> {
    let start = out.len();
    serde_json::to_writer(&mut *out, value)?;
    if let Some(written) = out.get_mut(start..) {
        one_line(written);
    }
    Ok(())
}

/// As [`write_json`], for values that always serialize: one that fails, which only a
/// broken `Serialize` impl can cause, is written as `null` and logged.
pub(crate) fn serialize_into<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    let mark = out.len();
    if let Err(e) = write_json(out, value) {
        static UNSERIALIZABLE: crate::log_limit::LogLimit = crate::log_limit::LogLimit::new();
        if UNSERIALIZABLE.allow("unserializable value") {
            log::error!("executa: value failed to serialize, sent as null: {e}");
        }
        out.truncate(mark);
        out.extend_from_slice(b"null");
    }
}

/// Appends raw JSON text, replacing any CR/LF (legal only as white space between tokens,
/// since JSON strings cannot hold them raw) so the frame stays one line.
pub(crate) fn push_one_line(out: &mut Vec<u8>, json: &[u8]) {
    let start = out.len();
    out.extend_from_slice(json);
    one_line(&mut out[start..]);
}

/// Up to this many bytes, [`one_line`] just loops.
const SHORT_JSON: usize = 64;

/// Replaces CR and LF in JSON text with spaces: legal there only as white space between
/// tokens (a string holds them escaped), so the text means the same on one line.
fn one_line(json: &mut [u8]) {
    // Mostly there is none. In long text, looking with `contains` (core's word-at-a-time
    // `memchr` on bytes) first costs a fraction of the loop per byte; in short text its
    // set-up costs more than the loop (callgrind: a 13-byte `echo` result).
    if json.len() > SHORT_JSON && !json.contains(&b'\n') && !json.contains(&b'\r') {
        return;
    }
    for b in json {
        if *b == b'\n' || *b == b'\r' {
            *b = b' ';
        }
    }
}

/// What tests read params with in [`compact_invoke`]: serde's skip, which succeeds exactly
/// on one JSON value (the plugin's typed read succeeds on fewer).
#[cfg(test)]
fn skip_params(params: &str) -> Option<()> {
    one_value(params).then_some(())
}

/// Whether the prefix reader takes `line`; where it does, asserts that the full parse reads
/// the same id, method and params.
#[cfg(test)]
fn read_alike(line: &[u8]) -> bool {
    let Some((id, params, ())) = compact_invoke(line, skip_params) else {
        return false;
    };
    let text = std::str::from_utf8(line).expect("taken frames are UTF-8");
    match parse(line) {
        Message::Request {
            id: Some(i),
            method,
            params: Some(p),
        } => {
            assert_eq!(i.get(), &text[id], "{text}");
            assert_eq!(method, "invoke", "{text}");
            assert_eq!(p.get(), &text[params], "{text}");
        }
        other => panic!("{text}: {other:?}"),
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An MCP `tools/call` laid out as an invoke is taken by the prefix reader as the full
    /// parse reads it, and an invoke is not taken as one.
    #[cfg(feature = "mcp")]
    #[test]
    fn compact_tools_calls_are_read_as_the_full_parse_reads_them() {
        let lines = [
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo"}}"#,
            r#"{"jsonrpc":"2.0","id":"a\"b,\"method\":","method":"tools/call","params":{ } }"#,
            r#"{"jsonrpc":"2.0","id":-1e3,"method":"tools/call","params":{"name":"x","_meta":{"a":[1]}}}"#,
        ];
        for text in lines {
            let read = |id: Range<usize>, line: &str, p: &str| {
                assert_eq!(line, text);
                Some((id, p.to_owned()))
            };
            let (id, params, (id2, p)) =
                compact_request(text.as_bytes(), TOOLS_CALL_TAIL, read).expect(text);
            assert_eq!(id, id2);
            assert_eq!(&text[params], p);
            match parse(text.as_bytes()) {
                Message::Request {
                    id: Some(i),
                    method,
                    params: Some(pp),
                } => {
                    assert_eq!(i.get(), &text[id], "{text}");
                    assert_eq!(method, "tools/call");
                    assert_eq!(pp.get(), p);
                }
                other => panic!("{text}: {other:?}"),
            }
            assert!(compact_invoke(text.as_bytes(), skip_params).is_none());
            let invoke = text.replace("tools/call", "invoke");
            let skip = |_: Range<usize>, _: &str, p: &str| skip_params(p);
            assert!(compact_request(invoke.as_bytes(), TOOLS_CALL_TAIL, skip).is_none());
        }
    }

    /// Where the prefix reader takes a frame, the full parse reads the same id, method and
    /// params; anything else it leaves to the full parse.
    #[test]
    fn compact_invokes_are_read_as_the_full_parse_reads_them() {
        let taken: &[&[u8]] = &[
            br#"{"jsonrpc":"2.0","id":7,"method":"invoke","params":{"tool":"echo"}}"#,
            br#"{"jsonrpc":"2.0","id":0,"method":"invoke","params":{}}"#,
            b"{\"jsonrpc\":\"2.0\",\"id\":\"a-1 \xc3\xa9\",\"method\":\"invoke\",\"params\":{\"tool\":\"x\"}}",
            br#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"invoke","params":{ } }"#,
            br#"{"jsonrpc":"2.0","id":-7.5,"method":"invoke","params":{}}"#,
            br#"{"jsonrpc":"2.0","id":"a\"b,\"method\":","method":"invoke","params":{}}"#,
            br#"{"jsonrpc":"2.0","id":1e3,"method":"invoke","params":{"t":"\u0078","n":-1.5E-3}}"#,
            br#"{"jsonrpc":"2.0","id":"a\u0041","method":"invoke","params":{"a":[{"b":[]}]}}"#,
            br#"{"jsonrpc":"2.0","id":"a,b,\"c","method":"invoke","params":{}}"#,
        ];
        for line in taken {
            assert!(read_alike(line), "{}", String::from_utf8_lossy(line));
        }
        let left: &[&[u8]] = &[
            // White space after the id: `parse` drops it, and the id is echoed as read.
            br#"{"jsonrpc":"2.0","id":7 ,"method":"invoke","params":{}}"#,
            b"{\"jsonrpc\":\"2.0\",\"id\":\"x\"\t,\"method\":\"invoke\",\"params\":{}}",
            br#"{ "jsonrpc":"2.0","id":7,"method":"invoke","params":{}}"#,
            br#"{"jsonrpc": "2.0","id":7,"method":"invoke","params":{}}"#,
            br#"{"jsonrpc":"2.0","id":07,"method":"invoke","params":{}}"#,
            br#"{"jsonrpc":"2.0","id":null,"method":"invoke","params":{}}"#,
            b"{\"jsonrpc\":\"2.0\",\"id\":\"a\tb\",\"method\":\"invoke\",\"params\":{}}",
            br#"{"jsonrpc":"2.0","id":"a,"method":"invoke","params":{}}"#,
            // A string id ending in a comma holds `,"`: `parse` reads it.
            br#"{"jsonrpc":"2.0","id":"a,","method":"invoke","params":{}}"#,
            // A response starts like an invoke.
            br#"{"jsonrpc":"2.0","id":5,"result":{"method":"invoke","params":{}}}"#,
            br#"{"jsonrpc":"2.0","id":7,"method":"invoke","params":[]}"#,
            br#"{"jsonrpc":"2.0","id":7,"method":"invoke","params":null}"#,
            br#"{"jsonrpc":"2.0","id":7,"method":"invoke","params":}"#,
            br#"{"jsonrpc":"2.0","id":7,"method":"invoke","params":{"#,
            br#"{"jsonrpc":"2.0","id":7,"method":"health","params":{}}"#,
            b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"invoke\",\"params\":{\"t\":\"\xff\"}}",
            br#"{"jsonrpc":"2.0","id":7"#,
            // The params are not one value: more members follow, or it is not JSON.
            br#"{"jsonrpc":"2.0","id":1,"method":"invoke","params":{"tool":"x"},"id":2}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"invoke","params":{"tool":"x"}}}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"invoke","params":{"tool":"x",}}"#,
            // A form feed is not JSON's white space (it was taken as such, and the frame,
            // which `parse` refuses, answered).
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"invoke\",\"params\":{}\x0c}",
        ];
        for line in left {
            assert_eq!(
                compact_invoke(line, skip_params),
                None,
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }

    /// Yields its pieces one read at a time.
    struct Pieces(Vec<&'static [u8]>);

    impl Read for Pieces {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() {
                return Ok(0);
            }
            let piece = self.0.remove(0);
            buf[..piece.len()].copy_from_slice(piece);
            Ok(piece.len())
        }
    }

    #[test]
    fn a_gated_read_stopped_mid_frame_goes_on_where_it_stopped() {
        let mut frames = FrameReader::new(Pieces(vec![b"{\"a\":", b"1}\n"]), 1024);
        let mut asked = 0;
        // The first piece may be read, the second not yet.
        let mut ready = || {
            asked += 1;
            asked == 1
        };
        let cut = frames.next_frame_gated(&mut ready).unwrap_err();
        assert_eq!(cut.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(asked, 2);
        assert_eq!(
            frames.next_frame().unwrap(),
            Some(Frame::Line(b"{\"a\":1}".as_slice()))
        );
        assert_eq!(frames.next_frame().unwrap(), None);
    }

    #[test]
    fn json_text_is_what_display_prints() {
        let v = serde_json::json!({"b": [1, 2.5, null, true], "a": "q\"\u{1}\n", "c": {}});
        assert_eq!(json_text(&v), v.to_string());
        assert_eq!(json_text(&serde_json::json!(7)), "7");
    }

    fn frames(input: &[u8], max: usize) -> Vec<String> {
        let mut r = FrameReader::new(input, max);
        let mut out = Vec::new();
        while let Some(f) = r.next_frame().unwrap() {
            out.push(match f {
                Frame::Line(l) => String::from_utf8(l.to_vec()).unwrap(),
                Frame::Oversized { head, size, .. } => {
                    format!("OVERSIZED {size} {}", String::from_utf8_lossy(head))
                }
            });
        }
        out
    }

    #[test]
    fn tolerates_crlf_bom_blank_lines_and_missing_final_lf() {
        let input = b"\xEF\xBB\xBF{\"a\":1}\r\n\r\n\n  \n{\"b\":2}\n{\"c\":3}";
        assert_eq!(
            frames(input, 1024),
            vec!["{\"a\":1}", "{\"b\":2}", "{\"c\":3}"]
        );
    }

    #[test]
    fn oversized_line_is_drained_and_the_next_line_survives() {
        let mut input = b"{\"id\":7,\"method\":\"x\",\"params\":\"".to_vec();
        input.extend(std::iter::repeat_n(b'a', 10_000));
        input.extend_from_slice(b"\"}\n{\"ok\":true}\n");
        let got = frames(&input, 100);
        assert_eq!(got.len(), 2);
        assert!(
            got[0].starts_with("OVERSIZED 10033 {\"id\":7,"),
            "{}",
            &got[0][..40]
        );
        assert_eq!(got[1], "{\"ok\":true}");
    }

    #[test]
    fn oversized_line_keeps_its_tail() {
        let mut input = b"{\"method\":\"invoke\",\"params\":\"".to_vec();
        input.extend(std::iter::repeat_n(b'a', 20_000));
        input.extend_from_slice(b"\",\"id\":\"late\"}\n");
        let mut r = FrameReader::new(&input[..], 1000);
        match r.next_frame().unwrap() {
            Some(Frame::Oversized { tail, .. }) => {
                assert!(tail.len() <= HEAD_BYTES);
                assert_eq!(scan_tail(tail).unwrap().as_str(), "\"late\"");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn tail_scan_only_trusts_a_last_top_level_id() {
        assert_eq!(
            scan_tail(br#"aaa"}, "id" : 42 }  "#).unwrap().as_str(),
            "42"
        );
        assert_eq!(
            scan_tail(br#"aaa","id":"x\"}"}"#).unwrap().as_str(),
            r#""x\"}""#
        );
        assert!(scan_tail(br#"aaa","id":{"a":1}}"#).is_none());
        assert!(scan_tail(br#"aaa","xid":4}"#).is_none());
        assert!(scan_tail(br#"aaa"}}"#).is_none());
    }

    #[test]
    fn responses_are_never_answered() {
        assert!(matches!(
            parse(br#"{"id":"ex-1","result":{"a":1},"error":null}"#),
            Message::Response { outcome: Ok(_), .. }
        ));
        assert!(matches!(
            parse(
                br#"{"jsonrpc":"1.0","id":"ex-1","result":null,"error":{"code":1,"message":"m"}}"#
            ),
            Message::Response {
                outcome: Err(_),
                ..
            }
        ));
        assert!(matches!(
            parse(br#"{"id":"ex-1"}"#),
            Message::BadResponse { .. }
        ));
        assert!(matches!(
            parse(br#"{"method":"note","params":3}"#),
            Message::Ignored(_)
        ));
    }

    #[test]
    fn exact_cap_is_accepted() {
        let line = format!("{{\"k\":\"{}\"}}", "z".repeat(92));
        assert_eq!(line.len(), 100);
        assert_eq!(frames(format!("{line}\n").as_bytes(), 100), vec![line]);
    }

    #[test]
    fn ids_are_kept_verbatim() {
        for id in [
            "0",
            "-5",
            "18446744073709551615",
            "1.5",
            "\"7\"",
            "null",
            "\"a\\\"b\"",
        ] {
            let line = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"m\"}}");
            match parse(line.as_bytes()) {
                Message::Request { id: Some(got), .. } => assert_eq!(got.get(), id),
                other => panic!("{id}: {other:?}"),
            }
        }
        match parse(br#"{"jsonrpc":"2.0","method":"note"}"#) {
            Message::Request { id: None, .. } => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn classifies_responses_and_bad_envelopes() {
        assert!(matches!(
            parse(br#"{"jsonrpc":"2.0","id":"x-1","result":null}"#),
            Message::Response { outcome: Ok(r), .. } if r.get() == "null"
        ));
        assert!(matches!(
            parse(br#"{"id":3,"error":{"code":-1,"message":"m"}}"#),
            Message::Response {
                outcome: Err(_),
                ..
            }
        ));
        assert!(matches!(parse(b"{not json"), Message::Unparsable(_)));
        // Found by fuzzing: a duplicate field before the line breaks off was -32600.
        let cut = br#"{"jsonrpc":"2.0","id":3,"id":3,"me"#;
        assert!(
            matches!(parse(cut), Message::Unparsable(_)),
            "{:?}",
            parse(cut)
        );
        assert!(matches!(parse(b"[\"\xff\"]"), Message::Unparsable(_)));
        assert!(matches!(
            parse(br#"{"id":1,"id":2}"#),
            Message::Invalid { .. }
        ));
        assert!(matches!(parse(b"[1,2]"), Message::Invalid { id: None, .. }));
        assert!(matches!(
            parse(br#"[7,"health"]"#),
            Message::Invalid { id: None, .. }
        ));
        assert!(matches!(
            parse(br#"{"id":{"a":1},"method":"m"}"#),
            Message::Invalid { id: None, .. }
        ));
        assert!(matches!(
            parse(br#"{"id":4,"method":5}"#),
            Message::Invalid { id: Some(id), .. } if id.get() == "4"
        ));
        assert!(matches!(
            parse(br#"{"id":4,"method":"m","params":3}"#),
            Message::Invalid { .. }
        ));
        assert!(matches!(parse(br#"{"id":4}"#), Message::BadResponse { .. }));
        assert!(matches!(
            parse(br#"{"jsonrpc":"1.0","id":1,"method":"m"}"#),
            Message::Invalid { .. }
        ));
    }

    #[test]
    fn method_with_escapes_is_decoded() {
        match parse(br#"{"id":1,"method":"inv\u006fke"}"#) {
            Message::Request { method, .. } => assert_eq!(method, "invoke"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn head_scan_finds_top_level_id_only() {
        let h = scan_head(
            br#"{"jsonrpc":"2.0","params":{"id":99,"x":[1,{"id":5}]},"id":"abc","method":"inv"#,
        );
        assert_eq!(h.id.unwrap().as_str(), "\"abc\"");
        assert!(!h.has_method, "a truncated method value is not trusted");
        assert!(
            h.request_key,
            "but a top-level `params` (or `method`) key says request"
        );
        let h = scan_head(br#"{"method":"invoke","id":12,"params":{"text":"aaaa"#);
        assert_eq!(h.id.unwrap().as_str(), "12");
        assert!(h.has_method);
        let h = scan_head(br#"{"params":"aaaa"#);
        assert_eq!((h.id, h.has_method, h.request_key), (None, false, true));
        let h = scan_head(br#"{"id":"ex-1","result":{"params":1,"method":"#);
        assert!(!h.request_key, "keys inside a value are not the frame's");
        assert_eq!(
            scan_head(br#"{"id":12"#).id,
            None,
            "a truncated number is not trusted"
        );
    }

    #[test]
    fn head_scan_answers_a_non_scalar_id_with_null() {
        for id in [r#"{"a":1}"#, "true", "false", "[1,2]"] {
            let head = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"invoke","params":{{"#);
            let h = scan_head(head.as_bytes());
            assert_eq!(
                h.id.map(|i| i.as_str().to_owned()),
                Some("null".into()),
                "{id}"
            );
        }
        for id in ["0", "-7", "\"x\"", "null", "1.5"] {
            let head = format!(r#"{{"id":{id},"method":"invoke","params":{{"#);
            assert_eq!(scan_head(head.as_bytes()).id.unwrap().as_str(), id);
        }
    }

    #[test]
    fn output_frames_are_single_lines() {
        let mut out = Vec::new();
        let id = RawValue::from_string("0".into()).unwrap();
        let res = RawValue::from_string("{\n\"a\" :\r\n1}".into()).unwrap();
        write_response(&mut out, &id, &res);
        assert_eq!(
            out,
            b"{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{ \"a\" :  1}}\n"
        );
        out.clear();
        write_error(&mut out, &id, &RpcError::new(-32601, "no\nway"));
        assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 1);
        out.clear();
        write_request(
            &mut out,
            None,
            "executa/progress",
            &serde_json::json!({"k": 1}),
        );
        assert_eq!(
            out,
            b"{\"jsonrpc\":\"2.0\",\"method\":\"executa/progress\",\"params\":{\"k\":1}}\n"
        );
    }

    /// Quoted request text and over-long messages are cut at a character boundary, and say
    /// how long the text was; the error keeps its code and data.
    #[test]
    fn error_messages_are_elided_with_their_length() {
        assert_eq!(elide("short", 10), "short");
        let text = format!("{}é", "a".repeat(9));
        assert_eq!(elide(&text, 10), format!("{}… (11 bytes)", "a".repeat(9)));
        let mut out = Vec::new();
        let error = RpcError::with_code(-32602, "BAD", "m".repeat(5000));
        write_error_to(&mut out, b"7", &error);
        let reply: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let message = reply["error"]["message"].as_str().unwrap();
        assert_eq!(
            message,
            format!("{}… (5000 bytes)", "m".repeat(MESSAGE_BYTES))
        );
        assert_eq!(reply["error"]["code"], -32602);
        assert_eq!(reply["error"]["data"]["errorCode"], "BAD");
    }

    /// An id is echoed, so one longer than MAX_ID_BYTES is refused, in both layouts.
    #[test]
    fn an_id_too_long_to_echo_is_invalid() {
        let id = format!("\"{}\"", "i".repeat(MAX_ID_BYTES));
        let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"invoke","params":{{}}}}"#);
        assert_eq!(compact_invoke(line.as_bytes(), skip_params), None);
        assert!(matches!(
            parse(line.as_bytes()),
            Message::Invalid { id: None, .. }
        ));
        let id = format!("\"{}\"", "i".repeat(MAX_ID_BYTES - 2));
        let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"invoke","params":{{}}}}"#);
        assert!(
            read_alike(line.as_bytes()),
            "an id of {} bytes is kept",
            id.len()
        );
    }

    /// A credential as a test host would send it.
    const MARK: &[u8] = b"sk-live-WIPE-ME-0123456789";

    fn has_mark(bytes: &[u8]) -> bool {
        // Where its first byte is, then the rest (the plain `windows` scan is slow in debug).
        let mut from = 0;
        while let Some(i) = bytes[from..].iter().position(|&b| b == MARK[0]) {
            if bytes[from + i..].starts_with(MARK) {
                return true;
            }
            from += i + 1;
        }
        false
    }

    /// Frames that hold [`MARK`]: small invokes, one past the read buffer (it grows), one
    /// past a cap of 300,000 bytes with the mark in its head and in its drained middle,
    /// then, last, one without it. Returns the input and the frames.
    fn marked_input() -> (Vec<u8>, Vec<String>) {
        let mark = std::str::from_utf8(MARK).unwrap();
        let small = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"invoke","params":{{"tool":"t","context":{{"credentials":{{"K":"{mark}"}}}}}}}}"#
        );
        let grown = format!(r#"{{"k":"{mark}","pad":"{}"}}"#, "g".repeat(200_000));
        let over = format!(
            r#"{{"k":"{mark}","a":"{}","b":"{mark}","c":"{}"}}"#,
            "o".repeat(200_000),
            "o".repeat(200_000)
        );
        let mut frames: Vec<&str> = vec![&small; 10];
        frames.extend([grown.as_str(), over.as_str(), &small, r#"{"done":true}"#]);
        let mut input = Vec::new();
        for f in &frames {
            input.extend_from_slice(f.as_bytes());
            input.push(b'\n');
        }
        let frames = frames.into_iter().map(str::to_owned).collect();
        (input, frames)
    }

    /// Hands out its input a piece at a time, and notes whether a buffer it was given to
    /// fill held [`MARK`]: bytes of a frame the reader had consumed and left lying there.
    struct Snoop {
        input: Vec<u8>,
        at: usize,
        piece: usize,
        saw: std::rc::Rc<std::cell::Cell<bool>>,
    }

    impl Read for Snoop {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if has_mark(buf) {
                self.saw.set(true);
            }
            let n = self.piece.min(buf.len()).min(self.input.len() - self.at);
            buf[..n].copy_from_slice(&self.input[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    /// Reads `marked_input` in pieces of `piece` bytes with a cap of 300,000, checking each
    /// frame; returns the reader at end of input and whether a read saw the mark.
    fn read_marked(piece: usize) -> (FrameReader<Snoop>, bool) {
        let (input, sent) = marked_input();
        let saw = std::rc::Rc::new(std::cell::Cell::new(false));
        let snoop = Snoop {
            input,
            at: 0,
            piece,
            saw: saw.clone(),
        };
        let mut frames = FrameReader::new(snoop, 300_000);
        for (n, want) in sent.iter().enumerate() {
            match frames.next_frame().unwrap() {
                Some(Frame::Line(l)) => assert!(l == want.as_bytes(), "frame {n} ({piece})"),
                Some(Frame::Oversized { head, tail, size }) => {
                    assert_eq!(size, want.len(), "frame {n} ({piece})");
                    assert!(want.as_bytes().starts_with(head) && want.as_bytes().ends_with(tail));
                    assert!(has_mark(head), "frame {n}: the head starts the frame");
                }
                None => panic!("frame {n}: end of input"),
            }
        }
        assert_eq!(frames.next_frame().unwrap(), None);
        (frames, saw.get())
    }

    /// Frames carry credentials: what the reader consumed is wiped before the buffer is
    /// read into again (main's `BufReader` handed `read` a buffer still holding them).
    #[test]
    fn consumed_frames_are_wiped_before_the_buffer_is_read_into_again() {
        for piece in [1000, 65_536, 1 << 20] {
            let (_, saw) = read_marked(piece);
            assert!(
                !saw,
                "pieces of {piece}: a consumed frame was left in the buffer"
            );
        }
    }

    /// At end of input (as when the reader waits for the next frame) the whole buffer is
    /// zero, after a frame that grew it and one drained past the cap.
    #[test]
    fn a_waiting_reader_holds_no_byte_of_a_frame() {
        for piece in [1000, 65_536, 1 << 20] {
            let (frames, _) = read_marked(piece);
            assert_eq!(
                frames.buf.len(),
                READ_CHUNK,
                "shrunk back after the big frames"
            );
            assert!(frames.buf.iter().all(|&b| b == 0), "pieces of {piece}");
        }
    }
}

#[cfg(test)]
mod robustness {
    use super::*;

    /// A tiny deterministic generator (xorshift), so the test needs no dependency and any
    /// failure reproduces.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn pick<'a>(&mut self, items: &[&'a [u8]]) -> &'a [u8] {
            items[(self.next() % items.len() as u64) as usize]
        }
    }

    /// Fragments of JSON-RPC frames, glued at random: most results are broken in some way.
    const PIECES: &[&[u8]] = &[
        b"{",
        b"}",
        b"[",
        b"]",
        b"\"",
        b":",
        b",",
        b"\\",
        b"\"id\"",
        b"\"method\"",
        b"\"params\"",
        b"\"result\"",
        b"\"error\"",
        b"\"jsonrpc\"",
        b"\"2.0\"",
        b"0",
        b"-1",
        b"1e999",
        b"null",
        b"true",
        b"\"ex-1\"",
        b" ",
        b"\r",
        b"\xEF\xBB\xBF",
        b"\xFF",
        b"\"\\u00",
        b"{\"id\":7,",
    ];

    #[test]
    fn random_frames_never_panic_and_errors_stay_classified() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..20_000 {
            let mut line = Vec::new();
            for _ in 0..(rng.next() % 24) {
                line.extend_from_slice(rng.pick(PIECES));
            }
            match parse(&line) {
                Message::Request { id: Some(id), .. }
                | Message::Invalid { id: Some(id), .. }
                | Message::BadResponse { id, .. } => {
                    assert!(valid_id(id), "an echoed id must be a scalar: {}", id.get());
                }
                _ => {}
            }
            let _ = scan_head(&line);
            let _ = scan_tail(&line);
        }
    }

    /// Wherever the prefix reader takes a frame, random or not, the full parse reads the
    /// same request: the same id text, method `invoke` and params.
    #[test]
    fn random_compact_invokes_are_read_as_the_full_parse_reads_them() {
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        let ids: &[&[u8]] = &[
            b"7 ",
            b"\"x\"\t",
            b"7\r",
            b"7",
            b"0",
            b"-1",
            b"1e999",
            b"\"ex-1\"",
            b"\"a\\\"b\"",
            b"07",
            b"",
        ];
        let (mut taken, mut runs) = (0, 0);
        while runs < 40_000 {
            runs += 1;
            let mut line = INVOKE_HEAD.to_vec();
            line.extend_from_slice(rng.pick(ids));
            line.extend_from_slice(INVOKE_TAIL);
            line.extend_from_slice(b"{");
            for _ in 0..(rng.next() % 12) {
                line.extend_from_slice(rng.pick(PIECES));
            }
            if !rng.next().is_multiple_of(3) {
                line.extend_from_slice(b"}");
            }
            line.extend_from_slice(b"}");
            taken += usize::from(read_alike(&line));
        }
        assert!(
            taken > 1_000,
            "the generator still makes valid frames ({taken})"
        );
    }

    #[test]
    fn random_streams_split_into_bounded_frames() {
        let mut rng = Rng(42);
        for _ in 0..300 {
            let mut stream = Vec::new();
            for _ in 0..(rng.next() % 64) {
                stream.extend_from_slice(rng.pick(PIECES));
                if rng.next().is_multiple_of(5) {
                    stream.push(b'\n');
                }
            }
            let max = 1 + (rng.next() % 40) as usize;
            let mut r = FrameReader::new(&stream[..], max);
            while let Some(frame) = r.next_frame().unwrap() {
                match frame {
                    Frame::Line(l) => assert!(l.len() <= max && !l.contains(&b'\n')),
                    Frame::Oversized { head, tail, size } => {
                        assert!(size > max && head.len() <= HEAD_BYTES && tail.len() <= HEAD_BYTES);
                    }
                }
            }
        }
    }
}
