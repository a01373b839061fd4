//! Skill: loads a skill's SKILL.md (without its front matter) into the conversation.

use serde::Deserialize;

use super::{ToolCtx, ToolResult};

#[derive(Deserialize)]
pub struct SkillArgs {
    name: String,
}

/// The body of the named skill.
pub fn load(args: SkillArgs, ctx: &ToolCtx<'_>) -> ToolResult {
    let skills = &ctx.config.skills;
    let Some(skill) = skills.iter().find(|s| s.name == args.name) else {
        let names: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
        return ToolResult::error(format!(
            "no skill named \"{}\"; available skills: {}",
            args.name,
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        ));
    };
    match std::fs::read_to_string(&skill.path) {
        Ok(text) => ToolResult::ok(format!(
            "# Skill: {}\n\n{}",
            skill.name,
            strip_front_matter(&text).trim()
        )),
        Err(e) => ToolResult::error(format!("cannot read skill {}: {e}", skill.name)),
    }
}

fn strip_front_matter(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("---\n") else {
        return text;
    };
    match rest.find("\n---") {
        Some(end) => rest[end + 4..].trim_start_matches(['\r', '\n']),
        None => text,
    }
}
