//! Sealed `requestState` tokens. MCP 2026-07-28 lets a server answer a `tools/call` with
//! `InputRequiredResult { inputRequests, requestState }`, and the client echoes `requestState`
//! back in its retry. The token comes back from the client, so the server must treat it as
//! untrusted and check that it is a token it issued, unchanged. Here the token carries its
//! payload followed by an HMAC-SHA-256 tag made with a key that exists only in this process. A
//! client can read the payload (it is not encrypted) but cannot forge or change one. The crate
//! takes on no crypto dependency for this, so SHA-256 (FIPS 180-4), HMAC (RFC 2104) and
//! base64url (RFC 4648 §5) are implemented here, kept small enough to check against the
//! published test vectors below.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::BuildHasher;
use std::time::{SystemTime, UNIX_EPOCH};

/// The longest token [`Sealer::open`] decodes. Tokens are checked before decoding, so an
/// oversized `requestState` costs nothing. The length is measured in bytes, so non-ASCII
/// text, which base64url never contains, counts against the limit sooner.
pub(crate) const MAX_TOKEN_CHARS: usize = 1024;

/// The largest payload whose token still fits in [`MAX_TOKEN_CHARS`] (736 bytes). A larger
/// payload seals, but [`Sealer::open`] refuses the token, so callers keep their state below
/// this size.
#[cfg(test)]
pub(crate) const MAX_PAYLOAD: usize = MAX_TOKEN_CHARS / 4 * 3 - TAG_LEN;

const TAG_LEN: usize = 32;

/// The tag covers this prefix as well as the payload. That ties the tag to this use and
/// version: an HMAC computed elsewhere with the same key (there is none yet) could not pass
/// as a `requestState`. The NUL keeps the prefix and the payload apart.
const DOMAIN: &[u8] = b"executa.requestState.v1\0";

/// Seals and opens `requestState` tokens with one key. Each process makes a fresh key, so
/// tokens from an earlier run of the plugin, or from another copy of it, are refused.
/// Within one process a token stays valid and can be replayed: a caller that needs
/// otherwise puts what the token is for (the tool, a call number, an expiry) in the
/// payload and checks it after `open`.
pub(crate) struct Sealer {
    key: [u8; 32],
}

impl fmt::Debug for Sealer {
    /// Leaves the key out: a `{:?}` in a log line must not give the key away.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sealer").finish_non_exhaustive()
    }
}

impl Sealer {
    /// A sealer with a new random key for this process (see [`process_key`]).
    pub(crate) fn new() -> Sealer {
        Sealer::with_key(process_key())
    }

    /// A sealer with a fixed key, so tests get the same tokens on every run.
    pub(crate) fn with_key(key: [u8; 32]) -> Sealer {
        Sealer { key }
    }

    /// The token for `payload`: base64url, without padding, of the payload followed by its
    /// 32-byte tag. Payloads over [`MAX_PAYLOAD`] give tokens that [`Sealer::open`] refuses.
    pub(crate) fn seal(&self, payload: &[u8]) -> String {
        let mut bytes = Vec::with_capacity(payload.len() + TAG_LEN);
        bytes.extend_from_slice(payload);
        bytes.extend_from_slice(&self.tag(payload));
        encode(&bytes)
    }

    /// The payload of a token that this sealer made, or `None` for anything else:
    /// tokens that are too long, not canonical base64url, shorter than a tag, or have a
    /// tag that does not match. The comparison reads every tag byte, so its timing does
    /// not tell a forger how many leading bytes were right.
    pub(crate) fn open(&self, token: &str) -> Option<Vec<u8>> {
        if token.len() > MAX_TOKEN_CHARS {
            return None;
        }
        let mut bytes = decode(token)?;
        let split = bytes.len().checked_sub(TAG_LEN)?;
        let expected = self.tag(&bytes[..split]);
        let diff = expected
            .iter()
            .zip(&bytes[split..])
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        if diff != 0 {
            return None;
        }
        bytes.truncate(split);
        Some(bytes)
    }

    fn tag(&self, payload: &[u8]) -> [u8; 32] {
        hmac_sha256(&self.key, &[DOMAIN, payload])
    }

    /// A keyed digest of `parts` under its own domain (what a sealed state binds, so the
    /// token carries no plain hash a reader could test guesses against).
    pub(crate) fn digest(&self, parts: &[&[u8]]) -> [u8; 32] {
        let mut all = Vec::with_capacity(parts.len() + 1);
        all.push(&b"executa.binding.v1\0"[..]);
        all.extend_from_slice(parts);
        hmac_sha256(&self.key, &all)
    }
}

/// The per-process key: SHA-256 of every source of entropy that std provides without
/// `unsafe`. That is enough because std seeds `RandomState` from the OS CSPRNG on every
/// platform, Windows included, which gives 128 secret bits per thread. Where
/// `/dev/urandom` exists, it adds 256 more. The clock, the process id and a stack address
/// (ASLR) are weak on their own, but they make two processes differ even in the unlikely
/// case where every source above is missing.
fn process_key() -> [u8; 32] {
    let mut h = Sha256::new();
    #[cfg(unix)]
    {
        use std::io::Read;
        let mut buf = [0u8; 32];
        // A failure here leaves the RandomState keys below, which are enough on their own.
        if let Ok(mut urandom) = std::fs::File::open("/dev/urandom")
            && urandom.read_exact(&mut buf).is_ok()
        {
            h.update(&buf);
        }
    }
    // Each SipHash output is 64 bits, so it takes more than one hash to carry all 128 key
    // bits into the digest. std seeds a thread's keys once and only counts them up for
    // later `RandomState`s, so these four share one seed: 128 bits in all, not 512.
    for i in 0u64..4 {
        h.update(&RandomState::new().hash_one(i).to_le_bytes());
    }
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.update(&nanos.to_le_bytes());
    h.update(&std::process::id().to_le_bytes());
    let marker = 0u8;
    h.update(&std::ptr::addr_of!(marker).addr().to_le_bytes());
    h.finish()
}

/// HMAC-SHA-256 (RFC 2104) of the concatenation of `parts`. The parts are passed
/// separately so that callers do not have to copy them into one buffer.
pub(crate) fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&sha256(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(&block.map(|k| k ^ 0x36));
    for part in parts {
        inner.update(part);
    }
    let mut outer = Sha256::new();
    outer.update(&block.map(|k| k ^ 0x5c));
    outer.update(&inner.finish());
    outer.finish()
}

/// SHA-256 of `data` (FIPS 180-4).
pub(crate) fn sha256(data: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(data);
    h.finish()
}

const BLOCK: usize = 64;

/// Streaming SHA-256. Input is buffered until a 64-byte block is full, then the block
/// is compressed.
pub(crate) struct Sha256 {
    state: [u32; 8],
    block: [u8; BLOCK],
    filled: usize,
    /// Bytes hashed so far. The padding needs this total.
    length: u64,
}

impl Sha256 {
    /// A hash with no input yet.
    pub(crate) fn new() -> Sha256 {
        Sha256 {
            state: H0,
            block: [0; BLOCK],
            filled: 0,
            length: 0,
        }
    }

    /// Adds `data` to the input.
    pub(crate) fn update(&mut self, mut data: &[u8]) {
        self.length = self.length.wrapping_add(data.len() as u64);
        while !data.is_empty() {
            let take = (BLOCK - self.filled).min(data.len());
            self.block[self.filled..self.filled + take].copy_from_slice(&data[..take]);
            self.filled += take;
            data = &data[take..];
            if self.filled == BLOCK {
                compress(&mut self.state, &self.block);
                self.filled = 0;
            }
        }
    }

    /// The digest. Padding is a 1 bit, then zeros until 8 bytes are left in the block,
    /// then the bit length as a big-endian u64.
    pub(crate) fn finish(mut self) -> [u8; 32] {
        let bits = self.length.wrapping_mul(8);
        let zeros = (BLOCK + 55 - self.filled) % BLOCK;
        self.update(&[0x80]);
        self.update(&[0; BLOCK][..zeros]);
        self.update(&bits.to_be_bytes());
        let mut out = [0u8; 32];
        for (chunk, word) in out.chunks_exact_mut(4).zip(self.state) {
            chunk.copy_from_slice(&word.to_be_bytes());
        }
        out
    }
}

/// One SHA-256 compression: 64 rounds over the message schedule of `block`.
fn compress(state: &mut [u32; 8], block: &[u8; BLOCK]) {
    let mut w = [0u32; 64];
    for (word, bytes) in w.iter_mut().zip(block.chunks_exact(4)) {
        *word = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    }
    for i in 16..64 {
        let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
        let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16]
            .wrapping_add(s0)
            .wrapping_add(w[i - 7])
            .wrapping_add(s1);
    }
    let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut h] = *state;
    for (k, w) in K.iter().zip(w) {
        let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
        let ch = (e & f) ^ (!e & g);
        let t1 = h
            .wrapping_add(s1)
            .wrapping_add(ch)
            .wrapping_add(*k)
            .wrapping_add(w);
        let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
        let maj = (a & b) ^ (a & c) ^ (b & c);
        let t2 = s0.wrapping_add(maj);
        (h, g, f, e) = (g, f, e, d.wrapping_add(t1));
        (d, c, b, a) = (c, b, a, t1.wrapping_add(t2));
    }
    for (s, v) in state.iter_mut().zip([a, b, c, d, e, f, g, h]) {
        *s = s.wrapping_add(v);
    }
}

/// Initial hash value: the first 32 bits of the fractional parts of the square roots of
/// the first 8 primes.
const H0: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

/// Round constants: the first 32 bits of the fractional parts of the cube roots of the
/// first 64 primes.
const K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

/// The base64url alphabet (RFC 4648 §5). It has no `+`, `/` or `=`, so a token needs no
/// escaping in JSON or a URL.
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// base64url without padding.
fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
        }
    }
    out
}

/// Decodes base64url without padding, accepting only canonical text: no characters
/// outside the alphabet, no `=`, no length of 1 mod 4, and no set bits left over in the
/// last character. Each byte string therefore has exactly one accepted encoding.
fn decode(text: &str) -> Option<Vec<u8>> {
    if text.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() / 4 * 3 + 2);
    for chunk in text.as_bytes().chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= sextet(c)? << (18 - 6 * i);
        }
        let len = chunk.len() - 1;
        if n & ((1 << (24 - 8 * len)) - 1) != 0 {
            return None;
        }
        out.extend((0..len).map(|i| (n >> (16 - 8 * i)) as u8));
    }
    Some(out)
}

fn sextet(c: u8) -> Option<u32> {
    let value = match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'-' => 62,
        b'_' => 63,
        _ => return None,
    };
    Some(u32::from(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn sealer() -> Sealer {
        Sealer::with_key(*b"0123456789abcdef0123456789abcdef")
    }

    /// The token's bytes with `edit` applied, encoded again.
    fn reforged(token: &str, edit: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut bytes = decode(token).expect("a sealed token decodes");
        edit(&mut bytes);
        encode(&bytes)
    }

    #[test]
    fn sha256_fips_vectors() {
        let cases: [(&[u8], &str); 3] = [
            (
                b"abc",
                "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            ),
            (
                b"",
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            ),
            (
                b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
                "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
            ),
        ];
        for (data, want) in cases {
            assert_eq!(
                hex(&sha256(data)),
                want,
                "{:?}",
                String::from_utf8_lossy(data)
            );
        }
    }

    #[test]
    fn sha256_million_a_streamed_in_uneven_pieces() {
        let want = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
        assert_eq!(hex(&sha256(&[b'a'; 1_000_000])), want);
        // Piece sizes that are not a multiple of the block test the buffering in update.
        let mut h = Sha256::new();
        let mut left = 1_000_000;
        for size in [1, 63, 64, 65, 127, 1000].into_iter().cycle() {
            let take = size.min(left);
            h.update(&[b'a'; 1000][..take]);
            left -= take;
            if left == 0 {
                break;
            }
        }
        assert_eq!(hex(&h.finish()), want);
    }

    #[test]
    fn hmac_rfc4231_cases() {
        let long_key = [0xaa; 131];
        let key4: Vec<u8> = (1..=25).collect();
        let cases: [(&[u8], &[u8], &str); 6] = [
            (
                &[0x0b; 20],
                b"Hi There",
                "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
            ),
            (
                b"Jefe",
                b"what do ya want for nothing?",
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
            ),
            (
                &[0xaa; 20],
                &[0xdd; 50],
                "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe",
            ),
            (
                &key4,
                &[0xcd; 50],
                "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b",
            ),
            (
                &long_key,
                b"Test Using Larger Than Block-Size Key - Hash Key First",
                "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
            ),
            (
                &long_key,
                b"This is a test using a larger than block-size key and a larger than \
                  block-size data. The key needs to be hashed before being used by the \
                  HMAC algorithm.",
                "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
            ),
        ];
        for (n, (key, data, want)) in cases.into_iter().enumerate() {
            assert_eq!(hex(&hmac_sha256(key, &[data])), want, "case {n}");
            // The same message split into parts gives the same tag.
            let (left, right) = data.split_at(data.len() / 3);
            assert_eq!(
                hex(&hmac_sha256(key, &[left, &[], right])),
                want,
                "case {n}"
            );
        }
    }

    #[test]
    fn base64url_rfc4648_vectors_unpadded() {
        let cases = [
            ("", ""),
            ("f", "Zg"),
            ("fo", "Zm8"),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg"),
            ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, coded) in cases {
            assert_eq!(encode(plain.as_bytes()), coded);
            assert_eq!(decode(coded).as_deref(), Some(plain.as_bytes()));
        }
        assert_eq!(encode(&[0xfb, 0xff]), "-_8");
        assert_eq!(decode("-_8"), Some(vec![0xfb, 0xff]));
    }

    #[test]
    fn base64url_refuses_padding_bad_chars_lengths_and_stray_bits() {
        for text in [
            "Zg==", "Zm9v=", "Zm+v", "Zm/v", "Zm9 ", "Zm9\n", "Zé", "Z", "Zm9vY", "Zh", "Zm9",
        ] {
            assert_eq!(decode(text), None, "{text:?}");
        }
    }

    #[test]
    fn seal_open_round_trip() {
        let s = sealer();
        let token = s.seal(b"{\"step\":2,\"call\":\"7\"}");
        assert_eq!(
            s.open(&token).as_deref(),
            Some(&b"{\"step\":2,\"call\":\"7\"}"[..])
        );
        assert_eq!(s.open(&s.seal(b"")), Some(Vec::new()));
        assert_eq!(s.seal(b"").len(), 43);
    }

    #[test]
    fn open_refuses_tampered_payload_byte() {
        let s = sealer();
        let token = s.seal(b"state: step 1");
        for at in 0..13 {
            let forged = reforged(&token, |b| b[at] ^= 0x01);
            assert_eq!(s.open(&forged), None, "byte {at}");
        }
    }

    #[test]
    fn open_refuses_tampered_tag_byte() {
        let s = sealer();
        let token = s.seal(b"state: step 1");
        for at in 13..13 + TAG_LEN {
            let forged = reforged(&token, |b| b[at] ^= 0x80);
            assert_eq!(s.open(&forged), None, "byte {at}");
        }
    }

    #[test]
    fn open_refuses_truncated_token() {
        let s = sealer();
        let token = s.seal(b"state: step 1");
        for cut in 0..token.len() {
            assert_eq!(s.open(&token[..cut]), None, "{cut} chars");
        }
        assert_eq!(s.open(&reforged(&token, |b| b.truncate(b.len() - 1))), None);
        assert_eq!(s.open(&encode(&[0; TAG_LEN - 1])), None);
    }

    #[test]
    fn open_refuses_token_from_another_key() {
        let token = Sealer::with_key([7; 32]).seal(b"state");
        assert_eq!(sealer().open(&token), None);
    }

    #[test]
    fn open_refuses_non_base64_chars() {
        let s = sealer();
        let token = s.seal(b"state: step 1");
        for bad in ['+', '/', '=', ' ', '.', '\0', 'é'] {
            let mut forged = token.clone();
            forged.replace_range(5..6, bad.encode_utf8(&mut [0; 4]));
            assert_eq!(s.open(&forged), None, "{bad:?}");
        }
        assert_eq!(s.open(&format!("{token}=")), None);
        assert_eq!(s.open(&format!(" {token}")), None);
    }

    #[test]
    fn open_refuses_over_long_token_and_accepts_max_payload() {
        let s = sealer();
        let at_limit = s.seal(&[b'x'; MAX_PAYLOAD]);
        assert_eq!(at_limit.len(), MAX_TOKEN_CHARS);
        assert_eq!(s.open(&at_limit).map(|p| p.len()), Some(MAX_PAYLOAD));
        let over = s.seal(&[b'x'; MAX_PAYLOAD + 1]);
        assert!(over.len() > MAX_TOKEN_CHARS);
        assert_eq!(s.open(&over), None);
        assert_eq!(s.open(&"A".repeat(100_000)), None);
    }

    #[test]
    fn open_refuses_empty_string() {
        assert_eq!(sealer().open(""), None);
    }

    #[test]
    fn random_length_payloads_round_trip() {
        let s = sealer();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..1000 {
            let len = (next() % 300) as usize;
            let payload: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let token = s.seal(&payload);
            assert_eq!(token.len(), ((len + TAG_LEN) * 4).div_ceil(3));
            assert_eq!(s.open(&token), Some(payload), "length {len}");
        }
    }

    #[test]
    fn new_sealers_have_distinct_keys() {
        let (a, b) = (Sealer::new(), Sealer::new());
        let token = a.seal(b"state");
        assert_eq!(a.open(&token).as_deref(), Some(&b"state"[..]));
        assert_eq!(b.open(&token), None);
    }

    #[test]
    fn debug_hides_the_key() {
        let shown = format!("{:?}", Sealer::with_key([0xab; 32]));
        assert_eq!(shown, "Sealer { .. }");
    }
}
