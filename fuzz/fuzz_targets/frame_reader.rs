//! `FrameReader` over any byte stream, cut into any chunks (and interrupted reads), yields
//! exactly the frames of a reference line splitter. Input: one byte picking the cap, one
//! byte counting chunk sizes, those sizes, then the stream.
#![no_main]

#[path = "../../tests/props/mod.rs"]
mod props;

const CAPS: [usize; 8] = [1, 2, 8, 40, 100, 200, 5_000, 1 << 20];

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let [cap, count, rest @ ..] = data else {
        return;
    };
    let count = usize::from(*count % 8).min(rest.len());
    let (sizes, stream) = rest.split_at(count);
    let sizes = sizes.iter().map(|&s| usize::from(s)).collect();
    props::check_frame_reader(stream, sizes, CAPS[usize::from(*cap % 8)]);
});
