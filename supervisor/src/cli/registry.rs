//! `service-rs push` and `service-rs pull`.

use std::process::ExitCode;

use anyhow::Context;
use serde_json::{json, Value};
use service_supervisor::bundle::BundleInfo;
use service_supervisor::registry::{self, Access, Pushed};
use service_supervisor::{bundle, ServiceHome};

use super::remote::Remote;

/// How to reach the registry, shared by push and pull.
#[derive(Debug, clap::Args)]
pub struct AccessArgs {
    /// User name for the registry; the password comes from stdin with --password-stdin.
    #[arg(long, requires = "password_stdin")]
    username: Option<String>,
    /// Read the password for --username from stdin.
    #[arg(long, requires = "username")]
    password_stdin: bool,
    /// Speak plain HTTP to a registry that is not on loopback (loopback registries get it without asking).
    #[arg(long)]
    plain_http: bool,
}

impl AccessArgs {
    fn access(&self) -> anyhow::Result<Access> {
        let password = if self.password_stdin {
            let mut line = String::new();
            std::io::stdin()
                .read_line(&mut line)
                .context("cannot read the password from stdin")?;
            Some(line.trim_end_matches(['\n', '\r']).to_string())
        } else {
            None
        };
        Ok(Access {
            username: self.username.clone(),
            password,
            plain_http: self.plain_http,
        })
    }
}

pub fn push(
    home: &ServiceHome,
    reference: &str,
    target: &str,
    args: &AccessArgs,
) -> anyhow::Result<ExitCode> {
    let access = args.access()?;
    let bundle = bundle::resolve(home, reference)?;
    let pushed = super::tokio()?.block_on(registry::push(&bundle, target, &access))?;
    print_pushed(&bundle.reference(), target, &pushed);
    Ok(ExitCode::SUCCESS)
}

fn print_pushed(reference: &str, target: &str, pushed: &Pushed) {
    println!(
        "Pushed {reference} to {target} (manifest digest {}; {} blobs uploaded, {} already there)",
        pushed.digest, pushed.uploaded, pushed.present
    );
}

/// The registry fields of a `POST /bundles/pull` or `/bundles/push` body.
fn remote_access(args: &AccessArgs) -> anyhow::Result<Value> {
    let access = args.access()?;
    let auth = match (access.username, access.password) {
        (Some(username), Some(password)) => json!({"username": username, "password": password}),
        _ => Value::Null,
    };
    Ok(json!({"auth": auth, "plain_http": access.plain_http}))
}

/// `--remote` push: the server pushes one of its bundles to a registry it allows.
pub async fn push_remote(
    remote: &Remote,
    reference: &str,
    target: &str,
    args: &AccessArgs,
) -> anyhow::Result<ExitCode> {
    let mut body = remote_access(args)?;
    body["bundle_ref"] = reference.into();
    body["target"] = target.into();
    let pushed: Pushed = serde_json::from_value(
        remote
            .call(reqwest::Method::POST, "/bundles/push", Some(body))
            .await?,
    )
    .context("the server's answer is not a push result")?;
    print_pushed(reference, target, &pushed);
    Ok(ExitCode::SUCCESS)
}

/// `--remote` pull: the server pulls from a registry it allows and installs into its store.
pub async fn pull_remote(
    remote: &Remote,
    source: &str,
    args: &AccessArgs,
) -> anyhow::Result<ExitCode> {
    let mut body = remote_access(args)?;
    body["reference"] = source.into();
    let installed: BundleInfo = serde_json::from_value(
        remote
            .call(reqwest::Method::POST, "/bundles/pull", Some(body))
            .await?,
    )
    .context("the server's answer is not a bundle")?;
    println!(
        "Installed {} from {source} on the server (content digest {})",
        installed.reference, installed.digest
    );
    Ok(ExitCode::SUCCESS)
}

pub fn pull(home: &ServiceHome, source: &str, args: &AccessArgs) -> anyhow::Result<ExitCode> {
    let access = args.access()?;
    let installed = super::tokio()?.block_on(registry::pull(home, source, &access))?;
    println!(
        "Installed {} from {source} at {} (content digest {})",
        installed.reference(),
        installed.root.display(),
        installed.digest
    );
    Ok(ExitCode::SUCCESS)
}

/// For a registry reference that has not been pulled yet, pulls it (anonymously, or with the credentials of the
/// environment and the Docker config) and says so on stderr; anything else is left to the resolver.
pub async fn pull_on_first_use(home: &ServiceHome, reference: &str) -> anyhow::Result<()> {
    if !bundle::reference::is_registry_reference(reference) {
        return Ok(());
    }
    if let Err(bundle::BundleError::NotPulled(_)) = bundle::resolve(home, reference) {
        eprintln!("pulling {reference} (first use)");
        let installed = registry::pull(home, reference, &Access::default()).await?;
        eprintln!("installed {} ({})", installed.reference(), installed.digest);
    }
    Ok(())
}
