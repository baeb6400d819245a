//! The fuzz targets' properties (`tests/props`, `fuzz/`) on a few thousand deterministic
//! pseudo-random inputs, so that CI keeps checking them: seed frames from the tests,
//! mutated, chunked and framed at random.

mod props;

use props::{Rng, check_frame_reader, check_parse, check_serve};

#[test]
fn wire_parse_agrees_with_serde_json_on_random_frames() {
    let mut rng = Rng(1);
    for _ in 0..20_000 {
        let mut frame = props::SEED_FRAMES[rng.below(props::SEED_FRAMES.len())]
            .as_bytes()
            .to_vec();
        rng.mutate(&mut frame);
        check_parse(&frame);
    }
}

#[test]
fn frame_reader_matches_the_reference_splitter_over_random_chunkings() {
    let mut rng = Rng(2);
    for round in 0..3_000 {
        let mut data = rng.stream(6);
        if round % 10 == 0 {
            // A line longer than HEAD_BYTES, so that head and tail differ.
            data.extend(std::iter::repeat_n(b'x', 5_000 + rng.below(5_000)));
            data.extend_from_slice(b"\n{\"id\":1}");
        }
        let sizes = (0..1 + rng.below(6)).map(|_| rng.below(70)).collect();
        let max = [1, 2, 8, 40, 100, 200, 5_000, 1 << 20][rng.below(8)];
        check_frame_reader(&data, sizes, max);
    }
}

#[test]
fn plugin_serve_answers_every_request_once_with_valid_frames() {
    let mut rng = Rng(3);
    for _ in 0..300 {
        check_serve(&rng.stream(8));
    }
}

// Unix only: the plugin is a sh command line, which a Windows test process under Wine
// cannot start.
#[cfg(all(feature = "host", unix))]
#[test]
fn the_host_reader_settles_its_call_on_any_plugin_output() {
    let scratch = props::host_scratch(
        std::env::temp_dir().join(format!("executa-randomized-{}", std::process::id())),
    );
    let mut rng = Rng(4);
    for _ in 0..40 {
        props::check_host_reader(&rng.stream(6), &scratch);
    }
    let _ = std::fs::remove_dir_all(&scratch);
}
