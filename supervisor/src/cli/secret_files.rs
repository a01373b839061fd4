//! `NAME_FILE` for the secrets read from the environment by the server's commands (`serve`, `migrate`, `tokens`)
//! and by `--remote` clients (`SERVICE_TOKEN`): a container platform mounts a secret as a file, while a variable's
//! value shows in the pod's spec and in every `ps e`. The file's content, less trailing whitespace, becomes the variable's value before the command line is
//! parsed, so a flag given on the command line still wins.

/// The variables that may come from a file.
const SECRETS: &[&str] = &[
    "SERVICE_TOKEN",
    "SERVICE_CLUSTER_TOKEN",
    "SERVICE_STORE_URL",
    "SERVICE_METRICS_TOKEN",
];

/// Sets each secret whose `_FILE` variable names a file from that file. Call before any thread starts: it
/// changes the process's environment.
pub fn load() -> Result<(), String> {
    for name in SECRETS {
        let file_var = format!("{name}_FILE");
        let Some(path) = std::env::var_os(&file_var).filter(|p| !p.is_empty()) else {
            continue;
        };
        let shown = std::path::Path::new(&path).display().to_string();
        if std::env::var_os(name).is_some_and(|v| !v.is_empty()) {
            return Err(format!(
                "{name} and {file_var} are both set: keep one (the file, to keep the secret out of the environment)"
            ));
        }
        // The rule `serve` reads these files by again while it runs (see `server::live`).
        use service_supervisor::server::live::{secret_in, SecretFileError};
        let value = secret_in(std::path::Path::new(&path)).map_err(|e| match e {
            SecretFileError::Unreadable(e) => format!("{file_var}={shown}: cannot read it: {e}"),
            SecretFileError::Empty => {
                format!("{file_var}={shown} is empty: write the {name} value into it")
            }
            SecretFileError::Lines => format!(
                "{file_var}={shown} holds more than one line: it holds the {name} value alone"
            ),
        })?;
        std::env::set_var(name, value);
    }
    Ok(())
}
