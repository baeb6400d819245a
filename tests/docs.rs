//! The front page and the guide hold their shape: the README is a front page (at most 300
//! lines), every page of `docs/` is compiled as doctests (listed in `src/lib.rs`), and the
//! links between them lead to files that exist.

use std::fs;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn pages() -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .collect();
    names.sort();
    names
}

#[test]
fn the_readme_is_a_front_page() {
    let lines = read("README.md").lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines; move detail into docs/"
    );
}

#[test]
fn every_guide_page_is_compiled_as_doctests() {
    let lib = read("src/lib.rs");
    for page in pages() {
        let listed = format!("= \"{page}\"");
        assert!(
            lib.contains(&listed),
            "docs/{page} is not in src/lib.rs's `guide` list"
        );
    }
}

#[test]
fn links_between_the_pages_lead_somewhere() {
    let mut files = vec!["README.md".to_owned()];
    files.extend(pages().into_iter().map(|p| format!("docs/{p}")));
    for file in files {
        let text = read(&file);
        let dir = Path::new(&file).parent().unwrap_or(Path::new(""));
        let mut rest = text.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let target = rest.split(')').next().unwrap_or("");
            let path = target.split('#').next().unwrap_or("");
            if path.is_empty() || path.contains("://") || path.contains(' ') {
                continue;
            }
            let resolved = root().join(dir).join(path);
            assert!(resolved.exists(), "{file}: link to {target} leads nowhere");
        }
    }
}
