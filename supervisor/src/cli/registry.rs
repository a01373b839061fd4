//! `service-rs push` and `service-rs pull`.

use std::process::ExitCode;

use anyhow::Context;
use service_supervisor::registry::{self, Access};
use service_supervisor::{bundle, ServiceHome};

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
    println!(
        "Pushed {} to {target} (manifest {}; {} blobs uploaded, {} already there)",
        bundle.reference(),
        pushed.digest,
        pushed.uploaded,
        pushed.present
    );
    Ok(ExitCode::SUCCESS)
}

pub fn pull(home: &ServiceHome, source: &str, args: &AccessArgs) -> anyhow::Result<ExitCode> {
    let access = args.access()?;
    let installed = super::tokio()?.block_on(registry::pull(home, source, &access))?;
    println!(
        "Installed {} from {source} at {} ({})",
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
