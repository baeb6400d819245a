//! `cargo package` is clean, so that publishing later is one command: no warning (the
//! metadata crates.io shows is complete), and the file list holds the sources, the
//! README, the guide in `docs/` and the examples, and nothing built or private to CI.
//! (`cargo package` with its verification build is a step of `.ci/run`; this test lists.)

mod bounded;

use std::path::Path;
use std::process::Command;

#[test]
fn cargo_package_is_clean() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    // `--allow-dirty`: other work in the tree must not fail the test; the list is the same.
    let out = bounded::output(
        Command::new(env!("CARGO"))
            .args(["package", "--list", "--allow-dirty", "--offline"])
            .current_dir(repo),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "cargo package --list failed:\n{stderr}"
    );
    assert!(
        !stderr.to_ascii_lowercase().contains("warning"),
        "cargo package warns:\n{stderr}"
    );
    let list = String::from_utf8_lossy(&out.stdout);
    let files: Vec<&str> = list.lines().collect();
    for needed in [
        "Cargo.toml",
        "Cargo.lock",
        "README.md",
        "ARCHITECTURE.md",
        "src/lib.rs",
        "src/bin/executa.rs",
        "src/bin/executa/new.rs",
        "examples/hello.rs",
        "examples/demo.rs",
    ] {
        assert!(files.contains(&needed), "{needed} is not packaged:\n{list}");
    }
    // The guide: every page of docs/ in the tree is in the package.
    if let Ok(pages) = std::fs::read_dir(repo.join("docs")) {
        for page in pages.flatten() {
            let name = format!("docs/{}", page.file_name().to_string_lossy());
            assert!(files.contains(&name.as_str()), "{name} is not packaged");
        }
    }
    for file in &files {
        assert!(
            !file.starts_with("target/") && !file.starts_with(".ci/") && !file.starts_with("fuzz/"),
            "{file} should not be packaged"
        );
        // Nothing big: the largest source is about 60 KB.
        let len = std::fs::metadata(repo.join(file)).map_or(0, |m| m.len());
        assert!(len < 256 * 1024, "{file} is {len} bytes");
    }
}
