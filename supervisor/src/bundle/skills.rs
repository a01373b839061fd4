//! Skills: `skills/<name>/SKILL.md` files whose YAML front matter gives a name and a description.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::error::{BundleError, Result};
use super::parse;

/// A skill found in a bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skill {
    /// Name from the front matter.
    pub name: String,
    /// Description from the front matter.
    pub description: String,
    /// Path of SKILL.md relative to the bundle root.
    pub path: String,
}

#[derive(Deserialize)]
struct FrontMatter {
    name: String,
    description: String,
}

/// Lists the skills of the bundle at `root`, sorted by directory name.
pub fn scan(root: &Path) -> Result<Vec<Skill>> {
    let dir = root.join("skills");
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let entries = std::fs::read_dir(&dir).map_err(|e| BundleError::io("cannot read", &dir, e))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| BundleError::io("cannot read", &dir, e))?;
        if entry.path().join("SKILL.md").is_file() {
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    names.sort();
    let mut skills = Vec::new();
    for dir_name in names {
        let rel = format!("skills/{dir_name}/SKILL.md");
        let text = std::fs::read_to_string(root.join(&rel))
            .map_err(|e| BundleError::io("cannot read", root.join(&rel), e))?;
        let front = front_matter(&rel, &text)?;
        if skills.iter().any(|s: &Skill| s.name == front.name) {
            return Err(BundleError::invalid(
                &rel,
                "name",
                format!("skill name \"{}\" is used twice", front.name),
            ));
        }
        skills.push(Skill {
            name: front.name,
            description: front.description,
            path: rel,
        });
    }
    Ok(skills)
}

/// The front matter of a SKILL.md: YAML between a first line `---` and the next line `---`.
fn front_matter(file: &str, text: &str) -> Result<FrontMatter> {
    let missing = || {
        BundleError::invalid(
            file,
            "",
            "missing front matter; start the file with ---, then name: and description: lines, then ---",
        )
    };
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
        .ok_or_else(missing)?;
    let end = rest
        .lines()
        .position(|l| l.trim_end() == "---")
        .ok_or_else(missing)?;
    let yaml: String = rest.lines().take(end).collect::<Vec<_>>().join("\n");
    let value = parse::yaml_value(file, &yaml)?;
    parse::typed(file, value)
}
