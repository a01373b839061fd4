//! The `config.toml` reference page, rendered from the JSON schema that `schemars` derives from the file's
//! definition: one section per key with its type, default and doc comment, the values of each choice, and the keys
//! of each table.

use std::fmt::Write as _;

use serde_json::Value;

use super::{anchor, cell};

/// The page for `schema`, the schema of `ConfigFile`.
pub(super) fn render(schema: &Value) -> String {
    let mut out = String::from("# config.toml reference\n\n");
    out.push_str(
        "`$SERVICE_HOME/config.toml` (`~/.service/config.toml` unless `SERVICE_HOME` says otherwise) holds the \
         operator's settings and your defaults. `service-rs config get` and `service-rs config set` read and change \
         it and keep its comments. A key that is not listed here is refused, with its name.\n\n",
    );
    let defs = schema.get("$defs").cloned().unwrap_or(Value::Null);
    let Some(keys) = schema.get("properties").and_then(Value::as_object) else {
        return out;
    };
    out.push_str("| Key | Type | Default |\n|---|---|---|\n");
    for (key, p) in keys {
        let title = format!("`{key}`");
        let _ = writeln!(
            out,
            "| [{title}](#{}) | {} | {} |",
            anchor(&title),
            type_of(p, &defs),
            default_of(p, &defs)
        );
    }
    for (key, p) in keys {
        let _ = writeln!(out, "\n## `{key}`\n");
        let _ = writeln!(
            out,
            "Type: {}. Default: {}.\n",
            type_of(p, &defs),
            default_of(p, &defs)
        );
        if let Some(d) = p.get("description").and_then(Value::as_str) {
            let _ = writeln!(out, "{}", d.trim());
        }
        let target = resolve(p, &defs);
        let entry = target
            .get("additionalProperties")
            .filter(|v| v.is_object())
            .map(|v| resolve(v, &defs));
        if let Some(variants) = target.get("oneOf").and_then(Value::as_array) {
            values(&mut out, variants, p.get("default"));
        } else if let Some(entry) = entry.filter(|e| e.get("properties").is_some()) {
            out.push_str("\nEach entry's keys:\n\n");
            super::properties(&mut out, entry, "Key", |p| type_of(p, &defs));
        }
    }
    out
}

/// `schema` itself, or the definition its `$ref` names.
fn resolve<'a>(schema: &'a Value, defs: &'a Value) -> &'a Value {
    schema
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/$defs/"))
        .and_then(|name| defs.get(name))
        .unwrap_or(schema)
}

fn type_of(schema: &Value, defs: &Value) -> String {
    let target = resolve(schema, defs);
    if let Some(variants) = target.get("oneOf").and_then(Value::as_array) {
        let values: Vec<String> = variants
            .iter()
            .filter_map(|v| v.get("const"))
            .map(|v| format!("`{}`", v.as_str().unwrap_or_default()))
            .collect();
        return format!("one of {}", values.join(", "));
    }
    let kinds: Vec<&str> = match target.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    let words: Vec<String> = kinds
        .into_iter()
        .filter(|t| *t != "null")
        .map(|t| match t {
            "array" => format!(
                "list of {}",
                target
                    .get("items")
                    .map(|i| type_of(i, defs))
                    .filter(|t| t != "any")
                    .unwrap_or_else(|| "values".into())
            ),
            "object" => match target.get("additionalProperties") {
                Some(v @ Value::Object(_)) => match type_of(v, defs).as_str() {
                    "table" => "table of tables".into(),
                    entry => format!("table of {entry}"),
                },
                _ => "table".into(),
            },
            "number" => "number".into(),
            "integer" => "integer".into(),
            "boolean" => "boolean".into(),
            other => other.into(),
        })
        .collect();
    if words.is_empty() {
        "any".into()
    } else {
        words.join(" or ")
    }
}

fn default_of(schema: &Value, defs: &Value) -> String {
    let kind = resolve(schema, defs).get("type").and_then(Value::as_str);
    match schema.get("default") {
        // A table or a list whose entries cannot be written back starts empty.
        None if matches!(kind, Some("object" | "array")) => "empty".into(),
        None | Some(Value::Null) => "none".into(),
        Some(Value::Array(a)) if a.is_empty() => "empty".into(),
        Some(Value::Object(o)) if o.is_empty() => "empty".into(),
        Some(Value::String(s)) => format!("`\"{s}\"`"),
        Some(v) => format!("`{v}`"),
    }
}

fn values(out: &mut String, variants: &[Value], default: Option<&Value>) {
    out.push_str("\nValues:\n\n");
    for v in variants {
        let Some(value) = v.get("const").and_then(Value::as_str) else {
            continue;
        };
        let mark = if default.and_then(Value::as_str) == Some(value) {
            " (default)"
        } else {
            ""
        };
        let description = v.get("description").and_then(Value::as_str).unwrap_or("");
        let _ = writeln!(out, "- `\"{value}\"`{mark}: {}", cell(description));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_key_of_config_toml_has_its_section_and_a_choice_its_values() {
        let page = super::super::config();
        for key in [
            "default_bundle",
            "approvals",
            "turn_flush",
            "providers",
            "prices",
            "hooks",
        ] {
            assert!(
                page.contains(&format!("\n## `{key}`\n")),
                "{key} missing:\n{page}"
            );
        }
        assert!(page.contains("- `\"auto-edit\"`"), "{page}");
        assert!(page.contains("- `\"ask\"` (default)"), "{page}");
        assert!(page.contains("| `base_url` | string | yes |"), "{page}");
    }
}
