//! Two-step parsing of bundle files: text to a JSON value (syntax errors keep their line and column), then the
//! value to a typed struct (errors name the dotted key path).

use serde::de::DeserializeOwned;

use super::error::{BundleError, Result};

/// Parses JSON5 text into a value; a syntax error names `file`.
pub fn json5_value(file: &str, text: &str) -> Result<serde_json::Value> {
    json5::from_str(text).map_err(|e| BundleError::Syntax {
        file: file.to_string(),
        message: e.to_string(),
    })
}

/// Parses YAML text into a value; a syntax error names `file`.
pub fn yaml_value(file: &str, text: &str) -> Result<serde_json::Value> {
    serde_yaml::from_str(text).map_err(|e| BundleError::Syntax {
        file: file.to_string(),
        message: e.to_string(),
    })
}

/// Deserialises a typed document from `value`; errors carry the key path inside `file`.
pub fn typed<T: DeserializeOwned>(file: &str, value: serde_json::Value) -> Result<T> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let key = if path == "." { String::new() } else { path };
        BundleError::invalid(file, key, e.into_inner().to_string())
    })
}

/// True for a relative path with no `..`, root or prefix component.
pub fn is_safe_relative(path: &str) -> bool {
    let p = std::path::Path::new(path);
    !path.is_empty()
        && p.components().all(|c| {
            matches!(
                c,
                std::path::Component::Normal(_) | std::path::Component::CurDir
            )
        })
}
