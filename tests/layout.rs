//! The house plan holds: no import circle between the files of `src/` (a lower module never
//! names a higher one), the plugin runtime never names the host side, and shared modules
//! name neither side.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Module path (`["plugin", "reverse"]`) of every file below `src/`, except the binary.
fn modules(root: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).expect("read src") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "bin") {
                    stack.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") || path.ends_with("src/bin.rs") {
                continue;
            }
            let rel = path.strip_prefix(root).expect("below src");
            let mut parts: Vec<String> = rel
                .with_extension("")
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            out.insert(parts, path);
        }
    }
    out
}

/// The code of a file without comments and without its `#[cfg(test)] mod tests`.
fn code(path: &Path) -> String {
    let text = fs::read_to_string(path).expect("read source");
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `crate::a::b`, `super::a`, `self::a` path in `code`, resolved against `me`.
fn paths(code: &str, me: &[String]) -> Vec<Vec<String>> {
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    for head in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(at) = code[from..].find(head) {
            let start = from + at;
            from = start + head.len();
            if start > 0
                && (bytes[start - 1].is_ascii_alphanumeric() || b"_:".contains(&bytes[start - 1]))
            {
                continue;
            }
            let tail: String = code[start..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let mut segs: Vec<String> = tail
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            let mut base: Vec<String> = match segs.first().map(String::as_str) {
                Some("crate") => Vec::new(),
                Some("self") => me.to_vec(),
                _ => me[..me.len().saturating_sub(1)].to_vec(),
            };
            segs.remove(0);
            while segs.first().is_some_and(|s| s == "super") {
                segs.remove(0);
                base.pop();
            }
            base.extend(segs);
            out.push(base);
        }
    }
    out
}

/// The file-level import graph: file -> files it names.
fn graph() -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mods = modules(&root);
    let mut g = BTreeMap::new();
    for (me, path) in &mods {
        let mut edges = BTreeSet::new();
        // lib.rs only declares and re-exports.
        if !me.is_empty() {
            for mut p in paths(&code(path), me) {
                while !p.is_empty() && !mods.contains_key(&p) {
                    p.pop();
                }
                if !p.is_empty() && &p != me {
                    edges.insert(p);
                }
            }
        }
        g.insert(me.clone(), edges);
    }
    g
}

fn find_cycle(g: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<Vec<Vec<String>>> {
    // 0 = new, 1 = on the stack, 2 = done
    fn visit(
        v: &Vec<String>,
        g: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        state: &mut BTreeMap<Vec<String>, u8>,
        stack: &mut Vec<Vec<String>>,
    ) -> Option<Vec<Vec<String>>> {
        state.insert(v.clone(), 1);
        stack.push(v.clone());
        for w in g.get(v).into_iter().flatten() {
            match state.get(w).copied().unwrap_or(0) {
                1 => {
                    let at = stack.iter().position(|x| x == w).unwrap_or(0);
                    let mut cycle = stack[at..].to_vec();
                    cycle.push(w.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(w, g, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(v.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for v in g.keys() {
        if state.get(v).copied().unwrap_or(0) == 0
            && let Some(c) = visit(v, g, &mut state, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

#[test]
fn no_import_circle_between_files() {
    let g = graph();
    assert!(
        g.len() > 40,
        "the walk found the sources ({} files)",
        g.len()
    );
    if let Some(cycle) = find_cycle(&g) {
        let names: Vec<String> = cycle.iter().map(|m| m.join("/")).collect();
        panic!("import circle: {}", names.join(" -> "));
    }
}

#[test]
fn the_plugin_side_never_names_the_host_and_shared_modules_name_neither_side() {
    for (me, edges) in graph() {
        let side = me.first().map(String::as_str);
        for e in edges {
            let to = e.first().map(String::as_str);
            match (side, to) {
                (Some("plugin"), Some("host")) => panic!("{} names {}", me.join("/"), e.join("/")),
                (Some("plugin" | "host"), _) => {}
                (_, Some("plugin" | "host")) if !me.is_empty() => {
                    panic!("shared module {} names {}", me.join("/"), e.join("/"))
                }
                _ => {}
            }
        }
    }
}

#[test]
fn the_checker_sees_a_circle() {
    // The checker itself must be able to fail.
    let mut g = BTreeMap::new();
    let a = vec!["a".to_owned()];
    let b = vec!["b".to_owned()];
    g.insert(a.clone(), BTreeSet::from([b.clone()]));
    g.insert(b.clone(), BTreeSet::from([a.clone()]));
    assert!(find_cycle(&g).is_some());
    let me = vec![
        "plugin".to_owned(),
        "reverse".to_owned(),
        "sampling".to_owned(),
    ];
    assert_eq!(
        paths("use super::super::job::Job;", &me),
        vec![vec![
            "plugin".to_owned(),
            "job".to_owned(),
            "Job".to_owned()
        ]]
    );
}
