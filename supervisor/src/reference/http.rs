//! The HTTP reference page, rendered from the OpenAPI document: each operation with its parameters, body and
//! answers, then each schema with its fields. The error answers every operation shares are listed once.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use super::{anchor, cell};

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

/// The page for `doc`, an OpenAPI 3.1 document.
pub(super) fn render(doc: &Value) -> String {
    let mut out = String::from("# HTTP reference\n\n");
    let _ = writeln!(
        out,
        "`service-rs serve` answers these requests. Every operation but `/healthz`, `/readyz` and the agent cards \
         takes `Authorization: Bearer <token>`. The document itself is `GET /openapi.json`.\n"
    );
    let ops = operations(doc);
    out.push_str("| Method | Path | What it does |\n|---|---|---|\n");
    for (path, method, op) in &ops {
        let title = format!("`{} {path}`", method.to_uppercase());
        let _ = writeln!(
            out,
            "| [{}](#{}) | `{path}` | {} |",
            method.to_uppercase(),
            anchor(&title),
            cell(&first_sentence(summary(op)))
        );
    }
    let errors = shared_errors(&ops);
    out.push_str("\n## Operations\n");
    for (path, method, op) in &ops {
        operation(&mut out, path, method, op, &errors);
    }
    out.push_str(
        "\n## Errors\n\nEvery error answer has the body [`ErrorEnvelope`](#errorenvelope), \
                  `{\"error\": {\"code\", \"message\"}}`; the code is the one to match on.\n\n\
                  | Status | When |\n|---|---|\n",
    );
    for (status, description) in &errors {
        let _ = writeln!(out, "| {status} | {} |", cell(description));
    }
    out.push_str("\n## Schemas\n");
    if let Some(schemas) = doc
        .pointer("/components/schemas")
        .and_then(Value::as_object)
    {
        for (name, schema) in schemas {
            component(&mut out, name, schema);
        }
    }
    out
}

/// `(path, method, operation)` in the document's order of paths, and a fixed order of methods.
fn operations(doc: &Value) -> Vec<(&str, &str, &Value)> {
    let mut out = Vec::new();
    if let Some(paths) = doc.get("paths").and_then(Value::as_object) {
        for (path, item) in paths {
            for method in METHODS {
                if let Some(op) = item.get(method) {
                    out.push((path.as_str(), method, op));
                }
            }
        }
    }
    out
}

fn summary(op: &Value) -> &str {
    op.get("summary")
        .or_else(|| op.get("description"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The text up to its first full stop, for a table's one-line description.
fn first_sentence(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.find(". ") {
        Some(end) => flat[..=end].to_string(),
        None => flat,
    }
}

/// An answer whose body is the shared error envelope.
fn is_error_envelope(response: &Value) -> bool {
    response
        .pointer("/content/application~1json/schema/$ref")
        .and_then(Value::as_str)
        .is_some_and(|r| r.ends_with("/ErrorEnvelope"))
}

/// Each error status with the description most operations give it.
fn shared_errors(ops: &[(&str, &str, &Value)]) -> BTreeMap<String, String> {
    let mut seen: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for (_, _, op) in ops {
        for (status, response) in responses(op) {
            if is_error_envelope(response) {
                let description = response["description"].as_str().unwrap_or("").to_string();
                *seen
                    .entry(status.to_string())
                    .or_default()
                    .entry(description)
                    .or_default() += 1;
            }
        }
    }
    seen.into_iter()
        .filter_map(|(status, counts)| {
            let (description, _) = counts.into_iter().max_by_key(|(_, n)| *n)?;
            Some((status, description))
        })
        .collect()
}

fn responses(op: &Value) -> Vec<(&str, &Value)> {
    op.get("responses")
        .and_then(Value::as_object)
        .map(|r| r.iter().map(|(k, v)| (k.as_str(), v)).collect())
        .unwrap_or_default()
}

fn operation(
    out: &mut String,
    path: &str,
    method: &str,
    op: &Value,
    errors: &BTreeMap<String, String>,
) {
    let _ = writeln!(out, "\n### `{} {path}`\n", method.to_uppercase());
    let text = summary(op);
    if !text.is_empty() {
        let _ = writeln!(out, "{text}\n");
    }
    if let Some(more) = op.get("description").and_then(Value::as_str) {
        if more != text {
            let _ = writeln!(out, "{more}\n");
        }
    }
    let params: Vec<&Value> = op
        .get("parameters")
        .and_then(Value::as_array)
        .map(|p| p.iter().collect())
        .unwrap_or_default();
    if !params.is_empty() {
        out.push_str("| Parameter | In | Type | Required | Description |\n|---|---|---|---|---|\n");
        for p in params {
            let _ = writeln!(
                out,
                "| `{}` | {} | {} | {} | {} |",
                p["name"].as_str().unwrap_or(""),
                p["in"].as_str().unwrap_or(""),
                type_of(&p["schema"]),
                if p["required"].as_bool() == Some(true) {
                    "yes"
                } else {
                    "no"
                },
                cell(p["description"].as_str().unwrap_or(""))
            );
        }
        out.push('\n');
    }
    if let Some(body) = op.get("requestBody") {
        let _ = writeln!(out, "Body: {}\n", content(body));
    }
    let mut failures = Vec::new();
    out.push_str("| Answer | Body | Description |\n|---|---|---|\n");
    for (status, response) in responses(op) {
        let description = response["description"].as_str().unwrap_or("");
        if is_error_envelope(response) && errors.get(status).is_some_and(|d| d == description) {
            failures.push(status);
            continue;
        }
        let _ = writeln!(
            out,
            "| {status} | {} | {} |",
            content(response),
            cell(description)
        );
    }
    if !failures.is_empty() {
        let _ = writeln!(
            out,
            "\nErrors: {} ([what each means](#errors)).",
            failures.join(", ")
        );
    }
}

/// The schema of a request or response body, with its media type when it is not JSON.
fn content(body: &Value) -> String {
    let Some(media) = body.get("content").and_then(Value::as_object) else {
        return "none".into();
    };
    media
        .iter()
        .map(|(kind, m)| {
            let schema = m
                .get("schema")
                .map(type_of)
                .unwrap_or_else(|| "bytes".into());
            if kind == "application/json" {
                schema
            } else {
                format!("{schema} (`{kind}`)")
            }
        })
        .collect::<Vec<_>>()
        .join(" or ")
}

/// A schema's type in a few words, linking to named schemas.
fn type_of(schema: &Value) -> String {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let name = r.rsplit('/').next().unwrap_or(r);
        return format!("[`{name}`](#{})", anchor(&format!("`{name}`")));
    }
    for key in ["oneOf", "anyOf", "allOf"] {
        if let Some(all) = schema.get(key).and_then(Value::as_array) {
            let kinds: Vec<String> = all.iter().map(type_of).collect();
            return kinds.join(if key == "allOf" { " and " } else { " or " });
        }
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let values: Vec<String> = values.iter().map(|v| format!("`{v}`")).collect();
        return format!("one of {}", values.join(", "));
    }
    if let Some(value) = schema.get("const") {
        return format!("`{value}`");
    }
    let kinds: Vec<String> = match schema.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(|t| t.as_str().map(String::from))
            .collect(),
        _ => vec![],
    };
    let kinds: Vec<String> = kinds
        .into_iter()
        .map(|t| match t.as_str() {
            "array" => format!(
                "array of {}",
                schema
                    .get("items")
                    .map(type_of)
                    .unwrap_or_else(|| "any".into())
            ),
            "object" => match schema.get("additionalProperties") {
                Some(v @ Value::Object(_)) => format!("map of {}", type_of(v)),
                _ => "object".into(),
            },
            _ => t,
        })
        .collect();
    if kinds.is_empty() {
        "any".into()
    } else {
        kinds.join(" or ")
    }
}

fn component(out: &mut String, name: &str, schema: &Value) {
    let _ = writeln!(out, "\n### `{name}`\n");
    if let Some(d) = schema.get("description").and_then(Value::as_str) {
        let _ = writeln!(out, "{d}\n");
    }
    if schema.get("properties").is_some() {
        super::properties(out, schema, "Field", type_of);
    } else if let Some(variants) = schema.get("oneOf").and_then(Value::as_array) {
        out.push_str("One of:\n\n");
        for v in variants {
            let _ = writeln!(out, "- {}", variant(v));
        }
    } else {
        let _ = writeln!(out, "Type: {}.", type_of(schema));
    }
}

/// One variant of a union on one line: its tag or value, what it is, and its fields.
fn variant(v: &Value) -> String {
    let description = v.get("description").and_then(Value::as_str).unwrap_or("");
    let Some(props) = v.get("properties").and_then(Value::as_object) else {
        let what = type_of(v);
        return if description.is_empty() {
            what
        } else {
            format!("{what}: {}", cell(description))
        };
    };
    // A tagged variant names itself by its one-value field.
    let tag = props.iter().find_map(|(k, p)| {
        let value = p.get("const").or_else(|| {
            p.get("enum")
                .and_then(Value::as_array)
                .filter(|e| e.len() == 1)
                .and_then(|e| e.first())
        })?;
        Some((k.as_str(), value.as_str().unwrap_or_default().to_string()))
    });
    let mut line = match &tag {
        Some((_, value)) => format!("**`{value}`**"),
        None => "an object".to_string(),
    };
    if !description.is_empty() {
        let _ = write!(line, ": {}", cell(description));
    }
    let rest: Vec<String> = props
        .iter()
        .filter(|(k, _)| tag.as_ref().is_none_or(|(t, _)| t != k))
        .map(
            |(k, p)| match p.get("properties").and_then(Value::as_object) {
                // An inline object, such as an event's `payload`, is shown by its own fields.
                Some(inner) if !inner.is_empty() => {
                    let inner: Vec<String> = inner
                        .iter()
                        .map(|(k, p)| format!("`{k}` ({})", type_of(p)))
                        .collect();
                    format!("`{k}` with {}", inner.join(", "))
                }
                _ => format!("`{k}` ({})", type_of(p)),
            },
        )
        .collect();
    if !rest.is_empty() {
        let _ = write!(line, " Fields: {}.", rest.join(", "));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_of_the_served_document_has_its_section() {
        let doc = crate::server::contract::document();
        let page = render(&doc);
        for (path, method, _) in operations(&doc) {
            let heading = format!("### `{} {path}`", method.to_uppercase());
            assert!(page.contains(&heading), "{heading} missing");
        }
        assert!(page.contains("### `CreateSession`"));
    }

    #[test]
    fn types_link_to_their_schemas() {
        let schema = serde_json::json!({"type": "array", "items": {"$ref": "#/components/schemas/EventMsg"}});
        assert_eq!(type_of(&schema), "array of [`EventMsg`](#eventmsg)");
        let nullable = serde_json::json!({"type": ["string", "null"]});
        assert_eq!(type_of(&nullable), "string or null");
    }
}
