//! The manual (`docs/`, an mdBook), the README and CONTRIBUTING.md: the generated reference pages match what the
//! code generates now, every link names a page, a file and a heading that exist, and the book builds.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

use super::support::{gated, Env};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the repository")
        .to_path_buf()
}

fn book_src() -> PathBuf {
    repo().join("docs/src")
}

#[test]
fn the_generated_reference_pages_match_the_code() {
    let env = Env::new();
    for page in ["cli", "http", "config"] {
        let now = env.run(&["reference", page]).ok().to_string();
        let file = book_src().join(format!("reference/{page}.md"));
        let written = std::fs::read_to_string(&file).unwrap_or_default();
        if now != written {
            let line = now
                .lines()
                .zip(written.lines())
                .position(|(a, b)| a != b)
                .unwrap_or_else(|| now.lines().count().min(written.lines().count()));
            panic!(
                "{} is stale (first difference at line {}): run docs/generate and commit the page",
                file.display(),
                line + 1
            );
        }
    }
}

/// A link as written, and the page it is on.
struct Link {
    page: PathBuf,
    target: String,
}

/// A Markdown page's headings' anchors (as mdBook makes them, with `-1`, `-2` for repeats) and its links.
struct Parsed {
    anchors: BTreeSet<String>,
    links: Vec<String>,
}

/// The anchor mdBook gives a heading's text.
fn anchor(text: &str) -> String {
    service_supervisor::reference::anchor(text)
}

fn parse(text: &str) -> Parsed {
    let mut anchors = BTreeSet::new();
    let mut links = Vec::new();
    let mut heading: Option<(String, Option<String>)> = None;
    let options = Options::ENABLE_TABLES | Options::ENABLE_HEADING_ATTRIBUTES;
    for event in Parser::new_ext(text, options) {
        match event {
            Event::Start(Tag::Heading { id, .. }) => {
                heading = Some((String::new(), id.map(|i| i.to_string())))
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some((h, _)) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some((text, id)) = heading.take() {
                    let base = id.unwrap_or_else(|| anchor(&text));
                    let mut candidate = base.clone();
                    let mut n = 0;
                    while !anchors.insert(candidate.clone()) {
                        n += 1;
                        candidate = format!("{base}-{n}");
                    }
                }
            }
            Event::Start(Tag::Link { dest_url, .. })
            | Event::Start(Tag::Image { dest_url, .. }) => links.push(dest_url.to_string()),
            _ => {}
        }
    }
    Parsed { anchors, links }
}

/// `text` with mdBook's `{{#include path}}` lines replaced by the files they name (relative to `dir`).
fn expand(text: &str, dir: &Path, problems: &mut Vec<String>, page: &Path) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let include = line
            .trim()
            .strip_prefix("{{#include ")
            .and_then(|l| l.strip_suffix("}}"));
        match include {
            Some(file) => match std::fs::read_to_string(dir.join(file.trim())) {
                Ok(included) => out.push_str(&included),
                Err(e) => problems.push(format!("{}: cannot include {file}: {e}", page.display())),
            },
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// The chapters SUMMARY.md lists, relative to `docs/src`.
fn chapters() -> Vec<PathBuf> {
    let summary = std::fs::read_to_string(book_src().join("SUMMARY.md")).unwrap();
    parse(&summary)
        .links
        .into_iter()
        .filter(|l| !l.is_empty())
        .map(PathBuf::from)
        .collect()
}

#[test]
fn every_page_of_the_manual_is_in_its_summary() {
    let listed: BTreeSet<PathBuf> = chapters().into_iter().collect();
    let mut missing = Vec::new();
    let mut orphans = Vec::new();
    for page in &listed {
        if !book_src().join(page).is_file() {
            missing.push(page.display().to_string());
        }
    }
    for entry in walkdir::WalkDir::new(book_src()) {
        let entry = entry.unwrap();
        let rel = entry.path().strip_prefix(book_src()).unwrap().to_path_buf();
        if rel.extension().is_some_and(|e| e == "md")
            && rel != Path::new("SUMMARY.md")
            && !listed.contains(&rel)
        {
            orphans.push(rel.display().to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "SUMMARY.md lists pages that do not exist: {missing:?}"
    );
    assert!(
        orphans.is_empty(),
        "pages that SUMMARY.md does not list, which the book would not show: {orphans:?}"
    );
}

#[test]
fn every_link_of_the_manual_readme_and_contributing_names_something_that_exists() {
    let mut problems = Vec::new();
    // Each page as the reader sees it (the book's pages with their includes), by path from the repository.
    let mut pages: BTreeMap<PathBuf, Parsed> = BTreeMap::new();
    let mut links = Vec::new();
    let root_pages = ["README.md", "CONTRIBUTING.md"].map(PathBuf::from);
    let book_pages = chapters()
        .into_iter()
        .map(|c| Path::new("docs/src").join(c));
    for page in root_pages.into_iter().chain(book_pages) {
        let file = repo().join(&page);
        let Ok(text) = std::fs::read_to_string(&file) else {
            problems.push(format!("{} cannot be read", page.display()));
            continue;
        };
        let text = expand(&text, file.parent().unwrap(), &mut problems, &page);
        let parsed = parse(&text);
        links.extend(parsed.links.iter().map(|target| Link {
            page: page.clone(),
            target: target.clone(),
        }));
        pages.insert(page, parsed);
    }
    for link in &links {
        let target = link.target.as_str();
        if target.starts_with("http://")
            || target.starts_with("https://")
            || target.starts_with("mailto:")
        {
            continue;
        }
        let (path, fragment) = match target.split_once('#') {
            Some((p, f)) => (p, Some(f)),
            None => (target, None),
        };
        let resolved = if path.is_empty() {
            link.page.clone()
        } else {
            // Resolved as the worker resolves a tool's path: lexically, `..` and `.` folded.
            service_worker::tools::resolve(link.page.parent().unwrap_or(Path::new("")), path)
        };
        if !repo().join(&resolved).exists() {
            problems.push(format!(
                "{}: `{target}` names {}, which does not exist",
                link.page.display(),
                resolved.display()
            ));
            continue;
        }
        if let Some(fragment) = fragment {
            match pages.get(&resolved) {
                Some(p) if p.anchors.contains(fragment) => {}
                Some(_) => problems.push(format!(
                    "{}: `{target}`: {} has no heading with the anchor #{fragment}",
                    link.page.display(),
                    resolved.display()
                )),
                None => problems.push(format!(
                    "{}: `{target}` names an anchor of {}, which is not a page of the manual",
                    link.page.display(),
                    resolved.display()
                )),
            }
        }
    }
    assert!(
        problems.is_empty(),
        "broken links ({}):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn a_heading_repeated_on_a_page_gets_a_numbered_anchor_and_links_are_found() {
    let parsed = parse(
        "# Usage\n\n## Usage\n\n## `POST /x` {#post-x}\n\nSee [a](b.md#c) and ![i](img.png).\n",
    );
    assert!(parsed.anchors.contains("usage") && parsed.anchors.contains("usage-1"));
    assert!(parsed.anchors.contains("post-x"));
    assert_eq!(parsed.links, vec!["b.md#c", "img.png"]);
}

#[test]
fn the_manual_builds_with_mdbook() {
    let Some(mdbook) = gated("SERVICE_TEST_MDBOOK", ".ci/mdbook") else {
        return;
    };
    let out_dir = tempfile::tempdir().unwrap();
    let out = Command::new(mdbook)
        .arg("build")
        .arg(repo().join("docs"))
        .arg("-d")
        .arg(out_dir.path())
        .output()
        .unwrap();
    let log =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "mdbook build failed:\n{log}");
    assert!(
        !log.contains("ERROR") && !log.contains("WARN"),
        "mdbook build complained:\n{log}"
    );
    for page in [
        "index.html",
        "reference/cli.html",
        "reference/http.html",
        "security.html",
    ] {
        assert!(
            out_dir.path().join(page).is_file(),
            "{page} was not built:\n{log}"
        );
    }
}
