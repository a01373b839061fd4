//! Errors of the bundle layer: parsing, validation, building, storing and resolving bundles.

use std::path::PathBuf;

/// Result alias of the bundle layer.
pub type Result<T, E = BundleError> = std::result::Result<T, E>;

/// What went wrong with a bundle; every message names the file or reference and what to do.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// A bundle file is not valid JSON5/YAML (returned by the manifest and agent parsers).
    #[error("{file}: syntax error: {message}")]
    Syntax {
        /// File name within the bundle.
        file: String,
        /// Parser message with line and column.
        message: String,
    },
    /// A bundle file parses but a key has a wrong, missing or unknown value (returned by the validators).
    #[error("{file}: {}{message}", key_prefix(.key))]
    Invalid {
        /// File name within the bundle.
        file: String,
        /// Dotted key path, e.g. `sandbox.mode`; empty for the whole document.
        key: String,
        /// What is wrong and what is allowed.
        message: String,
    },
    /// A directory given as a bundle project or layout is not one (returned by loaders).
    #[error("{path}: {message}")]
    NotABundle {
        /// The directory.
        path: PathBuf,
        /// What is missing.
        message: String,
    },
    /// A bundle reference matches nothing installed (returned by `resolve`).
    #[error("{0}")]
    NotFound(String),
    /// A registry reference that has not been pulled into the store yet.
    #[error("{0} is not in the store yet: pull it with `service-rs pull {0}`")]
    NotPulled(String),
    /// A bundle reference is malformed (returned by `BundleRef::parse`).
    #[error("invalid bundle reference \"{reference}\": {message}")]
    BadReference {
        /// The reference as given.
        reference: String,
        /// What is wrong.
        message: String,
    },
    /// An OCI layout is damaged or tampered with (returned by the layout loader).
    #[error("{path}: {message}")]
    Layout {
        /// The layout directory or blob.
        path: PathBuf,
        /// What failed verification.
        message: String,
    },
    /// `init` refused to write into a non-empty directory.
    #[error("{0} is not empty; pass --force to write the starter bundle into it anyway")]
    NotEmpty(PathBuf),
    /// A filesystem operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done, e.g. "cannot read".
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

fn key_prefix(key: &str) -> String {
    if key.is_empty() {
        String::new()
    } else {
        format!("{key}: ")
    }
}

impl BundleError {
    /// An I/O error with the action and path that failed.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        BundleError::Io {
            action,
            path: path.into(),
            source,
        }
    }

    /// A validation error on `key` of `file`.
    pub fn invalid(file: &str, key: impl Into<String>, message: impl Into<String>) -> Self {
        BundleError::Invalid {
            file: file.to_string(),
            key: key.into(),
            message: message.into(),
        }
    }
}
