//! `service-rs doctor [bundle]`: checks this machine, the store and a bundle's model, one line each.

use std::process::ExitCode;

use service_supervisor::doctor::{self, Check, Status};
use service_supervisor::ServiceHome;

/// Arguments of `doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Also check this bundle: that it loads, and that its model's server answers with the key it needs.
    #[arg(add = super::complete::bundles())]
    bundle_ref: Option<String>,
    /// Print the checks as JSON.
    #[arg(long)]
    json: bool,
}

/// Which project instructions a session started here reads (of the bundle, when one is named).
fn instructions(home: &ServiceHome, reference: Option<&str>) -> Check {
    let here = std::env::current_dir().unwrap_or_default();
    let enabled = reference
        .and_then(|r| service_supervisor::bundle::resolve(home, r).ok())
        .is_none_or(|b| b.agent.project_instructions);
    let read = service_supervisor::project_instructions::ProjectInstructions::read(&here, &[]);
    Check {
        status: Status::Ok,
        what: format!(
            "project instructions in {}: {}",
            here.display(),
            super::bundles::instructions_list(&read, enabled)
        ),
        fix: None,
    }
}

pub fn run(home: ServiceHome, args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe()
        .map_err(|e| anyhow::anyhow!("cannot find the service-rs binary: {e}"))?;
    let keys = service_supervisor::providers::keys::KeyPolicy::load(home.root());
    let config = service_supervisor::config_file::load(home.root())?;
    let backend = super::sandbox_backend(&config)?;
    let checks = super::tokio()?.block_on(async {
        let mut checks = doctor::sandbox(
            service_supervisor::worker_beside(&exe),
            config.sandbox_user.as_deref(),
            backend,
        )
        .await;
        checks.push(doctor::store(&home));
        checks.push(instructions(&home, args.bundle_ref.as_deref()));
        let keys = match keys {
            Ok(k) => k,
            Err(e) => {
                checks.push(Check {
                    status: Status::Fail,
                    what: e.to_string(),
                    fix: Some("fix or remove that file".into()),
                });
                Default::default()
            }
        };
        if let Some(reference) = &args.bundle_ref {
            match service_supervisor::bundle::resolve(&home, reference) {
                Ok(bundle) => {
                    let bundle =
                        service_supervisor::providers::choice::settle(home.root(), bundle).await;
                    checks.push(Check {
                        status: Status::Ok,
                        what: format!(
                            "bundle {} loads (sandbox {})",
                            bundle.reference(),
                            bundle.manifest.sandbox.mode
                        ),
                        fix: None,
                    });
                    let user = service_supervisor::sandbox::identity::SandboxUser::for_this_process(
                        None,
                        config.sandbox_user.as_deref(),
                    );
                    match (user, std::env::current_dir()) {
                        (Ok(user), Ok(here)) => {
                            checks.push(doctor::workspace(&bundle, &here, &user))
                        }
                        (Err(e), _) => checks.push(Check {
                            status: Status::Fail,
                            what: e,
                            fix: None,
                        }),
                        (_, Err(_)) => {}
                    }
                    checks.extend(doctor::model(&bundle, &keys).await);
                }
                Err(e) => checks.push(Check {
                    status: Status::Fail,
                    what: format!("bundle {reference}: {e}"),
                    fix: None,
                }),
            }
        }
        checks
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&checks)?);
    } else {
        for check in &checks {
            let tag = match check.status {
                Status::Ok => "ok  ",
                Status::Warn => "warn",
                Status::Fail => "FAIL",
            };
            println!("{tag}  {}", check.what);
            if let Some(fix) = &check.fix {
                println!("      fix: {fix}");
            }
        }
    }
    Ok(if checks.iter().any(|c| c.status == Status::Fail) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
