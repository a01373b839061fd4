//! `run --output-schema FILE.json`: the final answer must be one JSON value that validates against a JSON Schema.
//! The model is told the schema with the prompt; an answer that does not validate is sent back once with what was
//! wrong, and a second one ends the run with `output_invalid`.

use std::path::Path;

use serde_json::Value;

/// The error code, and the reason a run ends, when the answer does not validate after its retry.
pub(super) const OUTPUT_INVALID: &str = "output_invalid";
/// How many of the validator's complaints are shown to the model and the user.
const SHOWN_ERRORS: usize = 8;

/// A compiled `--output-schema`.
pub(super) struct OutputSchema {
    validator: jsonschema::Validator,
    /// The schema as the model is shown it.
    text: String,
}

impl OutputSchema {
    /// Reads and compiles the schema in `path`; errors name the file and what is wrong with it.
    pub(super) fn load(path: &Path) -> anyhow::Result<OutputSchema> {
        let raw = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read --output-schema {}: {e}", path.display()))?;
        let schema: Value = serde_json::from_str(&raw).map_err(|e| {
            anyhow::anyhow!(
                "--output-schema {} is not JSON: {e}; write a JSON Schema document",
                path.display()
            )
        })?;
        let validator = jsonschema::validator_for(&schema).map_err(|e| {
            anyhow::anyhow!(
                "--output-schema {} is not a valid JSON Schema: {e} (at {})",
                path.display(),
                e.instance_path()
            )
        })?;
        let text = serde_json::to_string_pretty(&schema).unwrap_or(raw);
        Ok(OutputSchema { validator, text })
    }

    /// `prompt` with what the answer must be: the model reads the schema with the user's request.
    pub(super) fn prompt(&self, prompt: &str) -> String {
        format!(
            "{prompt}\n\nYour final answer must be a single JSON value, with no other text around it, that validates \
             against this JSON Schema:\n```json\n{}\n```",
            self.text
        )
    }

    /// What the model is told when its answer did not validate.
    pub(super) fn retry_prompt(&self, problems: &str) -> String {
        format!(
            "Your last answer does not validate against the JSON Schema you were given:\n{problems}\nAnswer again \
             with only the JSON value, nothing before or after it."
        )
    }

    /// The answer's JSON value when it validates (the answer may be wrapped in one Markdown code fence); else what
    /// is wrong with it, one problem per line.
    pub(super) fn check(&self, answer: &str) -> Result<Value, String> {
        let text = unfenced(answer);
        let value: Value = serde_json::from_str(text)
            .map_err(|e| format!("- the answer is not one JSON value: {e}"))?;
        let problems: Vec<String> = self
            .validator
            .iter_errors(&value)
            .take(SHOWN_ERRORS)
            .map(|e| {
                let at = e.instance_path().to_string();
                let at = if at.is_empty() { "/".to_string() } else { at };
                format!("- at {at}: {e}")
            })
            .collect();
        if problems.is_empty() {
            Ok(value)
        } else {
            Err(problems.join("\n"))
        }
    }
}

/// The text inside one Markdown code fence around the whole answer (models often add one), else the answer.
fn unfenced(answer: &str) -> &str {
    let trimmed = answer.trim();
    let Some(body) = trimmed.strip_prefix("```") else {
        return trimmed;
    };
    let Some(body) = body.strip_suffix("```") else {
        return trimmed;
    };
    // The fence's first line may name the language.
    match body.split_once('\n') {
        Some((lang, rest)) if !lang.trim_start().starts_with(['{', '[', '"']) => rest.trim(),
        _ => body.trim(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(doc: &str) -> OutputSchema {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        std::fs::write(&path, doc).unwrap();
        OutputSchema::load(&path).unwrap()
    }

    #[test]
    fn a_fenced_answer_is_read_inside_its_fence() {
        let s = schema(r#"{"type":"object","required":["n"]}"#);
        assert_eq!(s.check("```json\n{\"n\": 1}\n```").unwrap()["n"], 1);
        assert_eq!(s.check("```\n{\"n\": 2}\n```").unwrap()["n"], 2);
        assert_eq!(s.check(" {\"n\": 3} ").unwrap()["n"], 3);
    }

    #[test]
    fn problems_name_where_the_answer_is_wrong() {
        let s =
            schema(r#"{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}"#);
        let why = s.check(r#"{"n": "x"}"#).unwrap_err();
        assert!(why.contains("at /n:"), "{why}");
        let why = s.check("sure! here it is").unwrap_err();
        assert!(why.contains("not one JSON value"), "{why}");
    }

    #[test]
    fn a_schema_that_is_not_one_is_refused_with_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.json");
        std::fs::write(&path, r#"{"type": 12}"#).unwrap();
        let err = OutputSchema::load(&path).err().unwrap().to_string();
        assert!(
            err.contains("bad.json") && err.contains("not a valid JSON Schema"),
            "{err}"
        );
    }
}
