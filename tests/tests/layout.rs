//! The layout's rules that a compiler does not check (CONTRIBUTING.md, "Layers"):
//! - no import circle between files. A file's imports are the modules its `use` lines and its paths name
//!   (`crate::`, `super::`, `self::`, or a submodule's name); two files that reach each other through them form a
//!   circle. A module and its own submodules may use each other (a parent declares and re-exports its children),
//!   so those uses do not count;
//! - the supervisor's front ends sit on top: no module below them imports one, and no front end but the server
//!   itself imports the server's router (`server/mod.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One crate root: its directory and the root files whose modules it holds.
const ROOTS: &[(&str, &str)] = &[
    ("ipc/src", "lib.rs"),
    ("worker/src", "lib.rs"),
    ("worker/src", "main.rs"),
    ("supervisor/src", "lib.rs"),
    ("supervisor/src", "main.rs"),
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The files of the module tree under `root_file`, each with its module path (`crate::a::b`).
fn modules(src: &Path, root_file: &str) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut todo = vec![("crate".to_string(), src.join(root_file), src.to_path_buf())];
    while let Some((path, file, dir)) = todo.pop() {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        for line in text.lines() {
            let line = line.trim();
            let decl = line
                .strip_prefix("pub mod ")
                .or_else(|| line.strip_prefix("pub(crate) mod "))
                .or_else(|| line.strip_prefix("pub(super) mod "))
                .or_else(|| line.strip_prefix("mod "));
            let Some(name) = decl.and_then(|d| d.strip_suffix(';')) else {
                continue;
            };
            let (flat, nested) = (
                dir.join(format!("{name}.rs")),
                dir.join(name).join("mod.rs"),
            );
            let (child, child_dir) = if flat.is_file() {
                (flat, dir.join(name))
            } else if nested.is_file() {
                (nested, dir.join(name))
            } else {
                continue;
            };
            todo.push((format!("{path}::{name}"), child, child_dir));
        }
        out.insert(path, file);
    }
    out
}

/// The module paths `text` (the file of module `me`, whose own submodules are `children`) names: in `use` lines,
/// in `crate::`/`super::`/`self::` paths, and in paths that start with a submodule's name.
fn named(text: &str, me: &str, children: &[&str]) -> BTreeSet<String> {
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = BTreeSet::new();
    let bytes = code.as_bytes();
    let starts: Vec<String> = ["crate", "super", "self"]
        .iter()
        .chain(children)
        .map(|s| format!("{s}::"))
        .collect();
    for start in &starts {
        let start = start.as_str();
        let mut from = 0;
        while let Some(at) = code[from..].find(start) {
            let i = from + at;
            from = i + start.len();
            if i > 0
                && (bytes[i - 1].is_ascii_alphanumeric()
                    || bytes[i - 1] == b'_'
                    || bytes[i - 1] == b':')
            {
                continue;
            }
            let tail: String = code[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let child = !(tail.starts_with("crate::")
                || tail.starts_with("super::")
                || tail.starts_with("self::"));
            out.insert(absolute(
                &if child { format!("self::{tail}") } else { tail },
                me,
            ));
        }
    }
    // `use a::{b, c::d}` inside braces after a prefix: each item is a path under it.
    for (i, _) in code.match_indices("::{") {
        let head_start = code[..i]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .map_or(0, |p| p + 1);
        let head = &code[head_start..i];
        if !(head.starts_with("crate") || head.starts_with("super") || head.starts_with("self")) {
            continue;
        }
        let Some(end) = code[i..].find('}') else {
            continue;
        };
        for item in code[i + 3..i + end].split(',') {
            let item = item.trim().split(" as ").next().unwrap_or("").trim();
            if item.is_empty() || item == "self" || item.contains('{') {
                continue;
            }
            out.insert(absolute(&format!("{head}::{item}"), me));
        }
    }
    out
}

/// `path` as seen from module `me`, with `super` and `self` resolved.
fn absolute(path: &str, me: &str) -> String {
    let mut base: Vec<&str> = me.split("::").collect();
    let mut parts = path.split("::").filter(|p| !p.is_empty()).peekable();
    match parts.peek() {
        Some(&"crate") => {
            base = vec!["crate"];
            parts.next();
        }
        Some(&"self") => {
            parts.next();
        }
        _ => {}
    }
    while parts.peek() == Some(&"super") {
        parts.next();
        if base.len() > 1 {
            base.pop();
        }
    }
    base.extend(parts);
    base.join("::")
}

/// The file a module path lands in: the longest prefix that is a file's module.
fn file_of<'a>(path: &str, files: &'a BTreeMap<String, PathBuf>) -> Option<&'a String> {
    let mut p = path;
    loop {
        if let Some((k, _)) = files.get_key_value(p) {
            return Some(k);
        }
        p = &p[..p.rfind("::")?];
    }
}

/// The circles: groups of two or more files that reach each other (strongly connected components).
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Kosaraju: order by finishing time, then walk the reversed graph.
    let nodes: Vec<&String> = edges.keys().collect();
    let mut seen = BTreeSet::new();
    let mut order = Vec::new();
    for n in &nodes {
        let mut stack = vec![((*n).clone(), false)];
        while let Some((node, done)) = stack.pop() {
            if done {
                order.push(node);
                continue;
            }
            if !seen.insert(node.clone()) {
                continue;
            }
            stack.push((node.clone(), true));
            for next in edges.get(&node).into_iter().flatten() {
                if !seen.contains(next) {
                    stack.push((next.clone(), false));
                }
            }
        }
    }
    let mut reversed: BTreeMap<&String, Vec<&String>> = BTreeMap::new();
    for (from, tos) in edges {
        for to in tos {
            reversed.entry(to).or_default().push(from);
        }
    }
    let mut assigned = BTreeSet::new();
    let mut groups = Vec::new();
    for n in order.iter().rev() {
        if assigned.contains(n) {
            continue;
        }
        let mut group = Vec::new();
        let mut stack = vec![n];
        while let Some(node) = stack.pop() {
            if !assigned.insert(node.clone()) {
                continue;
            }
            group.push(node.clone());
            for prev in reversed.get(node).into_iter().flatten() {
                if !assigned.contains(*prev) {
                    stack.push(prev);
                }
            }
        }
        if group.len() > 1 {
            group.sort();
            groups.push(group);
        }
    }
    groups.sort();
    groups
}

/// One crate's module files and the files each one imports (uses within its own module tree left out).
struct Graph {
    files: BTreeMap<String, PathBuf>,
    edges: BTreeMap<String, BTreeSet<String>>,
}

fn graph(src: &str, root: &str) -> Graph {
    let files = modules(&repo().join(src), root);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, file) in &files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let mut to = BTreeSet::new();
        let prefix = format!("{module}::");
        let children: Vec<&str> = files
            .keys()
            .filter_map(|k| k.strip_prefix(&prefix))
            .filter(|rest| !rest.contains("::"))
            .collect();
        for path in named(&text, module, &children) {
            // A module and its own submodules may use each other (a parent re-exports its children).
            let within = |t: &String| {
                t == module
                    || t.starts_with(&format!("{module}::"))
                    || module.starts_with(&format!("{t}::"))
            };
            if let Some(target) = file_of(&path, &files).filter(|t| !within(t)) {
                to.insert(target.clone());
            }
        }
        edges.insert(module.clone(), to);
    }
    Graph { files, edges }
}

impl Graph {
    /// A module's file, relative to the repository.
    fn shown(&self, module: &str) -> String {
        let repo = repo();
        let file = &self.files[module];
        file.strip_prefix(&repo)
            .unwrap_or(file)
            .display()
            .to_string()
            .trim_start_matches("./")
            .to_string()
    }
}

/// Every circle between files of the three crates, each as its files (relative to the repository) joined by ` <> `.
fn found() -> BTreeSet<String> {
    let mut all = BTreeSet::new();
    for (src, root) in ROOTS {
        let g = graph(src, root);
        for group in circles(&g.edges) {
            let names: Vec<String> = group.iter().map(|m| g.shown(m)).collect();
            all.insert(names.join(" <> "));
        }
    }
    all
}

/// The supervisor's top layer: the front ends, each serving people or programs over one surface, and the manual's
/// reference pages, which read the server's and the CLI's definitions.
const FRONT_ENDS: &[&str] = &[
    "crate::server",
    "crate::facade",
    "crate::tui",
    "crate::cli",
    "crate::mcp_server",
    "crate::reference",
];

fn under(module: &str, top: &str) -> bool {
    module == top || module.starts_with(&format!("{top}::"))
}

/// The imports that break the layering, as `from -> to` lines.
fn layer_breaks() -> Vec<String> {
    let mut out = Vec::new();
    for root in ["lib.rs", "main.rs"] {
        let g = graph("supervisor/src", root);
        for (from, tos) in &g.edges {
            let below = from != "crate" && !FRONT_ENDS.iter().any(|f| under(from, f));
            for to in tos {
                let imports_front = below && FRONT_ENDS.iter().any(|f| under(to, f));
                let router =
                    to == "crate::server" && from != "crate" && !under(from, "crate::server");
                if imports_front || router {
                    out.push(format!("{} -> {}", g.shown(from), g.shown(to)));
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

fn listed(lines: impl IntoIterator<Item = impl std::fmt::Display>) -> String {
    lines
        .into_iter()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn no_import_circle_between_files() {
    let found = found();
    assert!(
        found.is_empty(),
        "import circles between files (break them: move what both need to a module neither imports, or have one \
         depend on an interface the other implements; CONTRIBUTING.md, \"Layers\"):\n{}",
        listed(&found)
    );
}

#[test]
fn no_layer_below_the_front_ends_imports_one() {
    let breaks = layer_breaks();
    assert!(
        breaks.is_empty(),
        "imports against the layering (the runtime and what it uses never import a front end; a front end takes the \
         server's shared state from server::state, never the router in server/mod.rs; CONTRIBUTING.md, \
         \"Layers\"):\n{}",
        listed(&breaks)
    );
}

#[test]
fn a_circle_is_found_through_use_lines_and_paths() {
    let edges = BTreeMap::from([
        (
            "crate::a".to_string(),
            BTreeSet::from(["crate::b".to_string()]),
        ),
        (
            "crate::b".to_string(),
            BTreeSet::from(["crate::a".to_string()]),
        ),
        (
            "crate::c".to_string(),
            BTreeSet::from(["crate::a".to_string()]),
        ),
    ]);
    assert_eq!(
        circles(&edges),
        vec![vec!["crate::a".to_string(), "crate::b".to_string()]]
    );
    let names = named(
        "use super::x::{Y, z::W};\nfn f() { crate::q::run(); kid::go(); }",
        "crate::m::n",
        &["kid"],
    );
    assert!(names.contains("crate::m::n::kid::go"), "{names:?}");
    assert!(
        names.contains("crate::m::x::Y") && names.contains("crate::m::x::z::W"),
        "{names:?}"
    );
    assert!(names.contains("crate::q::run"), "{names:?}");
}
