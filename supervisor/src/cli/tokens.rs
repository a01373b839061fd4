//! `service-rs tokens`: tenant tokens, quotas and grants, on the local store (files, or PostgreSQL with `--store`)
//! or over `--remote` with an admin token.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use service_supervisor::tenancy::{self, Directory, NewToken, Quota, TokenView};
use service_supervisor::ServiceHome;

use super::remote::Remote;

/// Arguments of `tokens`.
#[derive(Debug, clap::Args)]
pub struct TokensArgs {
    #[command(subcommand)]
    command: TokensCommand,
    #[command(flatten)]
    store: StoreArgs,
}

/// Which store's tenant directory a local command reads.
#[derive(Debug, clap::Args)]
pub struct StoreArgs {
    /// The PostgreSQL store the servers share, instead of the files under $SERVICE_HOME (SERVICE_STORE_URL_FILE
    /// names a file holding it).
    #[arg(
        long,
        global = true,
        env = "SERVICE_STORE_URL",
        value_name = "postgres://USER@HOST:PORT/DB",
        hide_env_values = true
    )]
    pub(super) store: Option<String>,
    /// PEM file of the CA that signed the database's certificate.
    #[arg(long, global = true, env = "SERVICE_STORE_CA", value_name = "PEM")]
    store_ca: Option<std::path::PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
enum TokensCommand {
    /// Make a token for a tenant; it is printed once, alone on stdout, and only its hash is kept.
    Create {
        /// The tenant it speaks for.
        #[arg(long)]
        tenant: String,
        /// An operator's token: it sees every tenant and manages tokens, quotas and grants (as --role operator).
        #[arg(long, conflicts_with = "role")]
        admin: bool,
        /// What it may do: operator, tenant-admin (its tenant's sessions and tokens), user (the default; its
        /// tenant's sessions), read-only (GET only) or metrics (GET /metrics only, every tenant's figures).
        #[arg(long, value_parser = role)]
        role: Option<tenancy::Role>,
        /// How long it is valid: 30d, 12h, 90m (default: until revoked).
        #[arg(long, value_parser = humantime::parse_duration)]
        expires: Option<Duration>,
        /// A note for `tokens list`.
        #[arg(long)]
        label: Option<String>,
        /// Print {id, tenant, token} as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List tokens: id, tenant, label, created, expires, last used. The tokens themselves are never shown again.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token by its id; every server refuses it within a second.
    Revoke {
        /// The token's id, as `tokens list` shows it.
        id: String,
    },
    /// Set a tenant's limits; a limit left out is unlimited (`--clear` removes them all).
    Quota {
        /// The tenant.
        tenant: String,
        /// Sessions it may have at once.
        #[arg(long)]
        sessions: Option<u64>,
        /// Turns it may run at once.
        #[arg(long)]
        concurrent_turns: Option<u64>,
        /// Tokens in and out it may spend in a UTC day.
        #[arg(long)]
        tokens_per_day: Option<u64>,
        /// No limits.
        #[arg(long, conflicts_with_all = ["sessions", "concurrent_turns", "tokens_per_day"])]
        clear: bool,
    },
    /// Let a tenant see an installed bundle (every version) on a server run with --tenant-bundles.
    Grant {
        /// The tenant.
        tenant: String,
        /// The bundle: hello, local/hello, or a registry reference.
        bundle_ref: String,
    },
    /// The server token of `serve` on this machine ($SERVICE_HOME/serve.token): its file, fingerprint and age.
    /// With --rotate a new one replaces it, printed alone on stdout; a running serve takes it within 2 s and
    /// refuses the old one from then on.
    Server {
        /// Replace it.
        #[arg(long)]
        rotate: bool,
    },
    /// Take a grant back.
    Ungrant {
        /// The tenant.
        tenant: String,
        /// The bundle, as it was granted.
        bundle_ref: String,
    },
}

/// Where the command works.
enum Target {
    Local(Arc<dyn Directory>),
    Remote(Remote),
}

/// The tenant directory of the local store `args` names.
pub(super) async fn local(
    home: &ServiceHome,
    args: &StoreArgs,
) -> anyhow::Result<Arc<dyn Directory>> {
    use service_supervisor::runtime::store::Store;
    Ok(match &args.store {
        None => Arc::new(tenancy::files::FilesDirectory::new(home)),
        Some(url) => {
            let schema = service_supervisor::runtime::store::postgres::Schema::Require;
            super::store_open::open("tokens", url, args.store_ca.as_deref(), schema)
                .await?
                .directory()
        }
    })
}

/// Runs `tokens` on the local store.
pub fn run(home: ServiceHome, args: TokensArgs) -> anyhow::Result<ExitCode> {
    let rt = super::tokio()?;
    rt.block_on(async {
        let dir = local(&home, &args.store).await?;
        if let TokensCommand::Server { rotate } = args.command {
            return server_token(&home, &dir, rotate).await;
        }
        execute(Target::Local(dir), args.command).await
    })
}

/// Runs `tokens` over a server (admin token).
pub fn run_remote(remote: Remote, args: TokensArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.store.store.is_none(),
        "--store names a database on this machine's side; with --remote the server uses its own store"
    );
    super::tokio()?.block_on(execute(Target::Remote(remote), args.command))
}

/// `tokens server`: the server token's file, fingerprint and age, or with `rotate` a new token in its place.
async fn server_token(
    home: &ServiceHome,
    dir: &Arc<dyn Directory>,
    rotate: bool,
) -> anyhow::Result<ExitCode> {
    use service_supervisor::server::token;
    let file = home.token_file();
    if std::env::var_os("SERVICE_TOKEN").is_some()
        || std::env::var_os("SERVICE_TOKEN_FILE").is_some()
    {
        eprintln!(
            "note: SERVICE_TOKEN or SERVICE_TOKEN_FILE is set here; a serve started with it uses that token, not {}",
            file.display()
        );
    }
    if rotate {
        let new = token::generate();
        token::store(home, &new)?;
        audit(
            dir,
            "server_token_rotated",
            "server",
            json!({ "fingerprint": token::fingerprint(&new) }),
        )
        .await;
        println!("{new}");
        eprintln!(
            "the server token in {} is replaced; a running serve refuses the old one within 2 s",
            file.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let Some(current) = token::stored(home) else {
        anyhow::bail!(
            "{} holds no server token (64 hex digits, mode 0600, owned by this user): `service-rs serve` makes one,              or `service-rs tokens server --rotate` does",
            file.display()
        );
    };
    let changed = std::fs::metadata(&file)
        .and_then(|m| m.modified())
        .map(|t| {
            chrono::DateTime::<chrono::Utc>::from(t)
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        })
        .unwrap_or_default();
    println!("file         {}", file.display());
    println!("fingerprint  sha256:{}", token::fingerprint(&current));
    println!("changed      {changed}");
    println!("role         operator (tenant default)");
    Ok(ExitCode::SUCCESS)
}

async fn execute(target: Target, command: TokensCommand) -> anyhow::Result<ExitCode> {
    match command {
        TokensCommand::Server { .. } => anyhow::bail!(
            "the server token is a file of the node's own: run `service-rs tokens server` on that node, without              --remote"
        ),
        TokensCommand::Create {
            tenant,
            admin,
            role,
            expires,
            label,
            json,
        } => {
            let role = match admin {
                true => tenancy::Role::Operator,
                false => role.unwrap_or(tenancy::Role::User),
            };
            let made: NewToken = match &target {
                Target::Local(dir) => {
                    let made = tenancy::create_token(&**dir, &tenant, role, expires, label).await?;
                    let detail = json!({"tenant": made.tenant, "role": made.role, "expires_at": made.expires_at});
                    audit(dir, "token_created", &made.id, detail).await;
                    made
                }
                Target::Remote(r) => {
                    // The API takes a number and one unit.
                    let expires = expires.map(|d| format!("{}s", d.as_secs().max(1)));
                    let body =
                        json!({"tenant": tenant, "role": role, "expires": expires, "label": label});
                    serde_json::from_value(
                        r.call(reqwest::Method::POST, "/tokens", Some(body)).await?,
                    )?
                }
            };
            if json {
                println!(
                    "{}",
                    json!({"id": made.id, "tenant": made.tenant, "token": made.token})
                );
            } else {
                // Alone on stdout, so that `$(service-rs tokens create …)` is the token.
                println!("{}", made.token);
                eprintln!(
                    "token {} for tenant {} ({}): shown once; only its hash is kept",
                    made.id,
                    made.tenant,
                    made.role.as_str()
                );
            }
        }
        TokensCommand::List { json } => {
            let all: Vec<TokenView> = match &target {
                Target::Local(dir) => dir.tokens().await?.into_iter().map(|t| t.token).collect(),
                Target::Remote(r) => {
                    serde_json::from_value(r.call(reqwest::Method::GET, "/tokens", None).await?)?
                }
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&all)?);
            } else {
                print_tokens(&all);
            }
        }
        TokensCommand::Revoke { id } => {
            match &target {
                Target::Local(dir) => {
                    if !dir.revoke(&id).await? {
                        return Err(tenancy::TenancyError::UnknownToken(id).into());
                    }
                    audit(dir, "token_revoked", &id, serde_json::Value::Null).await;
                }
                Target::Remote(r) => {
                    r.call(reqwest::Method::DELETE, &format!("/tokens/{id}"), None)
                        .await?;
                }
            }
            println!("revoked {id}");
        }
        TokensCommand::Quota {
            tenant,
            sessions,
            concurrent_turns,
            tokens_per_day,
            clear,
        } => {
            let quota = Quota {
                sessions,
                concurrent_turns,
                tokens_per_day,
            };
            anyhow::ensure!(
                clear || quota != Quota::default(),
                "give a limit (--sessions, --concurrent-turns, --tokens-per-day) or --clear"
            );
            match &target {
                Target::Local(dir) => {
                    tenancy::check_tenant(&tenant)?;
                    dir.set_quota(&tenant, &quota).await?;
                    audit(dir, "quota_set", &tenant, serde_json::to_value(quota)?).await;
                }
                Target::Remote(r) => {
                    r.call(
                        reqwest::Method::PUT,
                        &format!("/tenants/{tenant}/quota"),
                        Some(serde_json::to_value(quota)?),
                    )
                    .await?;
                }
            }
            let limit = |n: Option<u64>| n.map_or("unlimited".to_string(), |n| n.to_string());
            println!(
                "{tenant}: sessions {}, concurrent turns {}, tokens a day {}",
                limit(sessions),
                limit(concurrent_turns),
                limit(tokens_per_day)
            );
        }
        TokensCommand::Grant { tenant, bundle_ref } => {
            let name = tenancy::bundle_name(&bundle_ref);
            match &target {
                Target::Local(dir) => {
                    tenancy::check_tenant(&tenant)?;
                    dir.grant(&tenant, &name).await?;
                    audit(dir, "bundle_granted", &tenant, json!({"bundle": name})).await;
                }
                Target::Remote(r) => {
                    r.call(
                        reqwest::Method::PUT,
                        &grant_path(&tenant, &bundle_ref),
                        None,
                    )
                    .await?;
                }
            }
            println!("{tenant} may use {name}");
        }
        TokensCommand::Ungrant { tenant, bundle_ref } => {
            let name = tenancy::bundle_name(&bundle_ref);
            match &target {
                Target::Local(dir) => {
                    anyhow::ensure!(
                        dir.ungrant(&tenant, &name).await?,
                        "tenant \"{tenant}\" has no grant of {name}"
                    );
                    audit(dir, "bundle_ungranted", &tenant, json!({"bundle": name})).await;
                }
                Target::Remote(r) => {
                    r.call(
                        reqwest::Method::DELETE,
                        &grant_path(&tenant, &bundle_ref),
                        None,
                    )
                    .await?;
                }
            }
            println!("{tenant} may no longer use {name}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `/tenants/{tenant}/bundles/{reference}`, the reference encoded as one path segment.
fn grant_path(tenant: &str, reference: &str) -> String {
    format!(
        "/tenants/{tenant}/bundles/{}",
        super::remote::encode(reference)
    )
}

fn print_tokens(all: &[TokenView]) {
    if all.is_empty() {
        eprintln!("no tokens; make one with `service-rs tokens create --tenant NAME`");
        return;
    }
    let day = |t: &Option<String>| {
        t.as_deref()
            .map_or("-".to_string(), |t| t.chars().take(16).collect())
    };
    println!(
        "{:<9} {:<16} {:<12} {:<16} {:<16} {:<16} {:<16} LABEL",
        "ID", "TENANT", "ROLE", "CREATED", "EXPIRES", "LAST USED", "REVOKED"
    );
    for t in all {
        println!(
            "{:<9} {:<16} {:<12} {:<16} {:<16} {:<16} {:<16} {}",
            t.id,
            t.tenant,
            tenancy::Role::of(t.role, t.admin).as_str(),
            day(&Some(t.created_at.clone())),
            day(&t.expires_at),
            day(&t.last_used_at),
            day(&t.revoked_at),
            t.label.as_deref().unwrap_or("")
        );
    }
}

/// A `--role` value.
fn role(text: &str) -> Result<tenancy::Role, String> {
    tenancy::Role::parse(text).ok_or_else(|| {
        format!("{text}: a role is operator, tenant-admin, user, read-only or metrics")
    })
}

/// Appends a local command's change to the store's audit log, as the server does for its API's; a log that cannot
/// be written is said on stderr, the change being made.
async fn audit(dir: &Arc<dyn Directory>, action: &str, object: &str, detail: serde_json::Value) {
    let entry = tenancy::audit::AuditEntry::now(action, object, detail).local();
    if let Err(e) = dir.append_audit(&entry).await {
        eprintln!("warning: the change is made, but not in the audit log: {e}");
    }
}
