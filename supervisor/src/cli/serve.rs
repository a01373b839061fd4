//! `service-rs serve`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use service_supervisor::runtime::store::files::FilesStore;
use service_supervisor::runtime::store::postgres::PgStore;
use service_supervisor::runtime::store::Store;
use service_supervisor::server::{self, Auth, ServeOptions};
use service_supervisor::{ServiceHome, ServiceRuntime};

/// Arguments of `serve`. A later option overrides an earlier one, so the command line's win over those of the
/// config file's `[serve]` section, which go first (see `serve_config`).
#[derive(Debug, clap::Args)]
#[command(args_override_self = true)]
pub struct ServeArgs {
    /// Read serve's options from the [serve] section of FILE instead of $SERVICE_HOME/config.toml's (options on
    /// the command line and in their environment variables still come first).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, default_value = server::DEFAULT_BIND)]
    bind: String,
    /// Bearer token every endpoint but /healthz requires; without one, the token in $SERVICE_HOME/serve.token (mode
    /// 0600) is used, generated and printed once when there is none. SERVICE_TOKEN_FILE names a file holding it.
    /// A token from a file is read again when the file changes (`service-rs tokens server --rotate`).
    #[arg(long, env = "SERVICE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Replace the stored token with a new one (signed-in browsers and scripts must then use the new one).
    #[arg(long, conflicts_with_all = ["token", "no_auth"])]
    rotate_token: bool,
    /// Serve without a token (loopback binds only).
    #[arg(long, conflicts_with = "token")]
    no_auth: bool,
    /// Also answer requests addressed to this host name (the Host header); repeatable.
    #[arg(long, value_name = "HOST[:PORT]")]
    allowed_host: Vec<String>,
    /// Let clients name bundle directories under DIR as bundle_ref; repeatable.
    #[arg(long, value_name = "DIR")]
    allow_path: Vec<PathBuf>,
    /// Let clients set a session cwd under DIR; repeatable (default: none, each session has its own workspace).
    #[arg(long, value_name = "DIR")]
    workspace_root: Vec<PathBuf>,
    /// Let clients override a turn's model with this one (provider/name); repeatable.
    #[arg(long, value_name = "PROVIDER/NAME")]
    allow_model: Vec<String>,
    /// Let clients pull bundles from and push them to this registry (HOST[:PORT]); repeatable (default: none).
    #[arg(long, value_name = "HOST[:PORT]")]
    allow_registry: Vec<String>,
    /// How requests on the OpenAI-compatible routes (/v1) answer permission requests, which their clients cannot.
    #[arg(long, value_enum, default_value_t)]
    openai_approvals: service_supervisor::facade::openai::OpenAiApprovals,
    /// Tenant tokens see only the installed bundles an admin granted their tenant (`service-rs tokens grant`), and
    /// those they pulled or imported; without it every tenant sees every bundle.
    #[arg(long)]
    tenant_bundles: bool,
    /// Serve no A2A agent cards or JSON-RPC (/a2a/<bundle>, /.well-known/agent-card.json).
    #[arg(long)]
    no_a2a: bool,
    /// The bundle whose agent card /.well-known/agent-card.json serves.
    #[arg(long, value_name = "BUNDLE", conflicts_with = "no_a2a")]
    a2a_default: Option<String>,
    /// Serve HTTPS with this PEM certificate chain (the node's certificate first), for a node no TLS proxy fronts;
    /// read again when it changes.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Connections served at once.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// Seconds a client has to send a request's headers.
    #[arg(long, default_value_t = 10.0)]
    header_timeout: f64,
    /// Threads that serve connections, each connection on one (default: twice the processors); 0 serves them on
    /// the async threads the rest of the server shares.
    #[arg(long, value_name = "N")]
    http_threads: Option<usize>,
    /// Event streams one client address may hold at once.
    #[arg(long, default_value_t = 128)]
    max_streams_per_client: usize,
    /// Event streams one tenant's clients may hold at once, together (default: no cap but each client's).
    #[arg(long, value_name = "N")]
    max_streams_per_tenant: Option<usize>,
    /// Requests each tenant may send this node, as N/s, N/m or N/h (a burst of N, then N per period); over it a
    /// tenant gets 429 `rate_limited` with Retry-After. Operators' tokens are not limited.
    #[arg(long, value_name = "RATE", value_parser = service_supervisor::server::rate::Rate::parse)]
    tenant_request_rate: Option<service_supervisor::server::rate::Rate>,
    /// One tenant's request rate, as TENANT=RATE (e.g. acme=100/s), over --tenant-request-rate; repeatable.
    #[arg(long, value_name = "TENANT=RATE", value_parser = tenant_rate)]
    tenant_request_rate_for: Vec<(String, service_supervisor::server::rate::Rate)>,
    /// A proxy or load balancer (an address or a CIDR block; repeatable) whose `Forwarded` or `X-Forwarded-For`
    /// header names the client, for the per-client caps and the log. The headers of any other peer are ignored.
    #[arg(long, value_name = "CIDR", value_parser = trusted_proxy)]
    trusted_proxy: Vec<ipnet::IpNet>,
    /// A token that may read GET /metrics and nothing else, for a scraper (admin tokens still may).
    /// SERVICE_METRICS_TOKEN_FILE names a file holding it, read again when it changes.
    #[arg(long, env = "SERVICE_METRICS_TOKEN", hide_env_values = true)]
    metrics_token: Option<String>,
    /// Stop a session's worker after it has been idle this long (and spare workers no session took); its next turn
    /// starts one again. `0` keeps them.
    #[arg(long, default_value = "15m", value_parser = humantime::parse_duration)]
    idle_timeout: Duration,
    /// Stop sooner a session's worker whose sandbox holds nothing besides it (no other process, such as an MCP
    /// server, and nothing in its /tmp or /dev/shm) once it has been idle this long; its next tool call starts a
    /// sandbox again. Default 30s; with --store, off, as the next turn of a session whose worker stopped may start on
    /// another node (one whose files any node reaches). `0` leaves it to --idle-timeout.
    #[arg(long, value_parser = humantime::parse_duration)]
    empty_idle_timeout: Option<Duration>,
    /// Delete a session that has waited this long for its first turn (made by a console "Create" or a client that
    /// gave up). `0` keeps them.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    unused_session_timeout: Duration,
    /// Delete sessions (record, journal, history, workspace and checkpoints) whose last change is older than this,
    /// e.g. 30d; running ones are kept. Over a shared store one node at a time runs it, and every node's
    /// directories go. Unset: sessions are kept until deleted.
    #[arg(long, value_name = "AGE", value_parser = humantime::parse_duration)]
    retention: Option<Duration>,
    /// The retention of one tenant's sessions, as TENANT=AGE (`default` is the server token's tenant); repeatable.
    #[arg(long, value_name = "TENANT=AGE", value_parser = tenant_age)]
    retention_for: Vec<(String, Duration)>,
    /// On SIGTERM (not Ctrl-C, which stops at once), `readyz` answers 503 at once and new turns are still taken this long, while load
    /// balancers notice; then they are refused with 503 `draining`.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pre_stop_delay: Duration,
    /// After the pre-stop delay, how long running turns get to end before they are ended as stopped.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    drain_timeout: Duration,
    /// Run every session worker on the host with no confinement, and accept danger_full_access bundles.
    #[arg(long)]
    dangerous_sandbox_mode: bool,
    /// When running as root: the host user sandboxes run as where root owns the session's directory (a name,
    /// uid or uid:gid; default nobody; also SERVICE_SANDBOX_USER). `root` gives sandboxes root's rights.
    #[arg(long, value_name = "USER")]
    sandbox_user: Option<String>,
    /// Fixed address for a host the sandbox reaches through the egress proxy, as curl's --resolve: HOST:PORT:ADDR
    /// (repeatable).
    #[arg(long, value_name = "HOST:PORT:ADDR")]
    resolve: Vec<String>,
    /// A host environment variable a bundle's MCP servers may receive through `env_from_host` (repeatable; also
    /// SERVICE_PASS_ENV, comma-separated, and `pass_env` in $SERVICE_HOME/config.toml). No other is passed.
    #[arg(long, value_name = "NAME")]
    pass_env: Vec<String>,
    /// Keep sessions in this PostgreSQL database, shared with other `serve` nodes (default: files under
    /// $SERVICE_HOME). See SCALING.md. SERVICE_STORE_URL_FILE names a file holding it.
    #[arg(
        long,
        env = "SERVICE_STORE_URL",
        value_name = "postgres://USER@HOST:PORT/DB",
        hide_env_values = true
    )]
    store: Option<String>,
    /// This node's id among the nodes sharing the store (default: the host name and a random suffix).
    #[arg(long, requires = "store")]
    node_id: Option<String>,
    /// The base URL clients and other nodes reach this server at, as agent cards give it (default: http:// and
    /// --bind, when that names an address).
    #[arg(long, value_name = "URL")]
    advertise_url: Option<String>,
    /// Token the nodes sharing the store present to each other when they forward requests; the same on every node.
    /// SERVICE_CLUSTER_TOKEN_FILE names a file holding it.
    #[arg(
        long,
        env = "SERVICE_CLUSTER_TOKEN",
        hide_env_values = true,
        requires = "store"
    )]
    cluster_token: Option<String>,
    /// How long a node's claim on a session lasts without renewal: after the node dies, another node takes its
    /// sessions over once it expires.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, requires = "store")]
    lease: Duration,
    /// Export OpenTelemetry traces of turns to this OTLP/HTTP collector (its base URL, e.g. http://127.0.0.1:4318);
    /// OTEL_EXPORTER_OTLP_ENDPOINT does the same.
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// PEM file of the CA that signed the database's certificate: connections to the store use TLS and verify the
    /// server against it (as `sslmode=require` in the URL does against the web's roots).
    #[arg(long, env = "SERVICE_STORE_CA", value_name = "PEM", requires = "store")]
    store_ca: Option<PathBuf>,
    /// Apply the migrations the database lacks before serving, as `service-rs migrate` does. Without it, a node
    /// changes no schema and starts only on one its release runs on (its own, or a newer one that still serves it).
    #[arg(long, requires = "store")]
    migrate: bool,
}

/// `TENANT=AGE` of `--retention-for`.
fn tenant_age(text: &str) -> Result<(String, Duration), String> {
    let (tenant, age) = text
        .split_once('=')
        .ok_or_else(|| format!("{text}: write TENANT=AGE, such as acme=30d"))?;
    let age = humantime::parse_duration(age.trim())
        .map_err(|e| format!("{text}: {e}; write an age such as 30d or 12h"))?;
    Ok((tenant.trim().to_string(), age))
}

/// `TENANT=RATE` of `--tenant-request-rate-for`.
fn tenant_rate(text: &str) -> Result<(String, service_supervisor::server::rate::Rate), String> {
    let (tenant, rate) = text
        .split_once('=')
        .ok_or_else(|| format!("{text}: write TENANT=RATE, such as acme=100/s"))?;
    Ok((
        tenant.trim().to_string(),
        service_supervisor::server::rate::Rate::parse(rate)?,
    ))
}

/// Where a `serve` node keeps sessions, as its flags say.
struct StoreArgs {
    url: String,
    node: service_supervisor::runtime::store::postgres::Node,
    cluster_token: String,
    lease: Duration,
    ca: Option<PathBuf>,
    migrate: bool,
}

impl StoreArgs {
    fn from(args: &ServeArgs, addr: SocketAddr) -> anyhow::Result<Option<StoreArgs>> {
        let Some(url) = args.store.clone() else {
            return Ok(None);
        };
        anyhow::ensure!(
            url.starts_with("postgres://") || url.starts_with("postgresql://"),
            "--store takes a PostgreSQL URL, postgres://USER@HOST:PORT/DB; without --store sessions stay under \
             $SERVICE_HOME"
        );
        let cluster_token = args.cluster_token.clone().filter(|t| !t.is_empty()).context(
            "--store needs --cluster-token (or SERVICE_CLUSTER_TOKEN), the same secret on every node, so nodes can \
             forward requests to each other",
        )?;
        let url_of_node = match &args.advertise_url {
            Some(u) => u.trim_end_matches('/').to_string(),
            // The bound address, once bound (see `Store::bound_at`).
            None if !addr.ip().is_unspecified() => String::new(),
            None => anyhow::bail!(
                "--store needs --advertise-url, the base URL other nodes reach this one at, when --bind is {addr}"
            ),
        };
        let id = args.node_id.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .ok()
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "node".into());
            format!("{host}-{}", &uuid::Uuid::new_v4().simple().to_string()[..6])
        });
        Ok(Some(StoreArgs {
            url,
            node: service_supervisor::runtime::store::postgres::Node {
                id,
                url: url_of_node,
            },
            cluster_token,
            lease: args.lease.max(Duration::from_millis(300)),
            ca: args.store_ca.clone(),
            migrate: args.migrate,
        }))
    }
}

fn absolute(dirs: &[PathBuf], flag: &str) -> anyhow::Result<Vec<PathBuf>> {
    dirs.iter()
        .map(|d| {
            std::fs::canonicalize(d)
                .ok()
                .filter(|p| p.is_dir())
                .with_context(|| format!("{flag} {}: not a directory", d.display()))
        })
        .collect()
}

/// `--allow-registry` values as the registry of a reference names them: host[:port], lower case, no scheme.
fn allowed_registries(values: &[String]) -> anyhow::Result<Vec<String>> {
    values
        .iter()
        .map(|v| {
            let host = v.to_ascii_lowercase();
            let valid = !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
            anyhow::ensure!(
                valid,
                "--allow-registry takes a registry's host[:port] as references name it, e.g. ghcr.io or \
                 127.0.0.1:5000; got \"{v}\""
            );
            Ok(host)
        })
        .collect()
}

/// What `serve` says about itself, beside its log: plain lines, or under `--log-format json` log events like every
/// other line of stderr, and a JSON object for the address on stdout, so a log collector reads nothing but JSON.
#[derive(Clone, Copy)]
struct Notices {
    json: bool,
    tls: bool,
}

impl Notices {
    fn warning(self, text: &str) {
        match self.json {
            true => tracing::warn!("{text}"),
            false => eprintln!("warning: {text}"),
        }
    }

    /// The address on stdout, where scripts read it (`--bind 127.0.0.1:0` picks the port).
    fn listening(self, bound: SocketAddr) {
        let url = format!("{}://{bound}", if self.tls { "https" } else { "http" });
        match self.json {
            true => {
                println!("{}", serde_json::json!({ "listening": url }));
                tracing::info!(address = %url, "listening");
            }
            false => println!("service-rs listening on {url}"),
        }
    }

    /// Where the token is. A JSON log is shipped to collectors, so it names the file and never the token.
    fn token(self, made: Option<&str>, kept: bool, file: &std::path::Path) {
        let file = file.display();
        match (self.json, made) {
            (true, Some(_)) => tracing::info!(token_file = %file, "a new token was made; it is in the token file"),
            (true, None) if kept => tracing::info!(token_file = %file, "the token is the one in the token file"),
            (false, Some(token)) => eprintln!(
                "token: {token} (stored in {file}; --remote clients on this machine read it from there)"
            ),
            (false, None) if kept => eprintln!(
                "token: the one in {file} (kept across restarts; serve --rotate-token makes a new one)"
            ),
            _ => {}
        }
    }

    fn stopped(self) {
        match self.json {
            true => tracing::info!("stopped"),
            false => eprintln!("service-rs stopped"),
        }
    }
}

pub fn serve(
    home: ServiceHome,
    args: ServeArgs,
    log_format: super::logging::LogFormat,
) -> anyhow::Result<ExitCode> {
    let notices = Notices {
        json: log_format == super::logging::LogFormat::Json,
        tls: args.tls_cert.is_some(),
    };
    service_supervisor::telemetry::init(args.otlp_endpoint.as_deref())?;
    // `localhost` means IPv4 loopback, without asking a resolver that might answer ::1 or something else.
    let bind = match args.bind.strip_prefix("localhost:") {
        Some(port) => format!("127.0.0.1:{port}"),
        None => args.bind.clone(),
    };
    let addr: SocketAddr = bind.parse().with_context(|| {
        format!(
            "--bind takes host:port with a numeric host or localhost, e.g. {}; got \"{}\"",
            server::DEFAULT_BIND,
            args.bind
        )
    })?;
    if args.dangerous_sandbox_mode {
        notices.warning(
            "--dangerous-sandbox-mode: every session worker runs on the host without confinement",
        );
    }
    for m in &args.allow_model {
        if !m.contains('/') {
            anyhow::bail!("--allow-model takes provider/name, e.g. openai/gpt-4o; got \"{m}\"");
        }
    }
    let shared = StoreArgs::from(&args, addr)?;
    let mut options = ServeOptions::new(addr);
    options.auth = match (args.token.filter(|t| !t.is_empty()), args.no_auth) {
        (Some(t), _) => match from_file("SERVICE_TOKEN", &t) {
            Some(file) => Auth::TokenFile { token: t, file },
            None => Auth::Token(t),
        },
        (None, true) => Auth::None,
        (None, false) => Auth::Generated {
            rotate: args.rotate_token,
        },
    };
    options.allowed_hosts = args.allowed_host;
    options.policy.allow_paths = absolute(&args.allow_path, "--allow-path")?;
    options.policy.workspace_roots = absolute(&args.workspace_root, "--workspace-root")?;
    options.policy.dangerous = args.dangerous_sandbox_mode;
    options.policy.allowed_models = args.allow_model;
    options.policy.allowed_registries = allowed_registries(&args.allow_registry)?;
    options.policy.openai_approvals = args.openai_approvals;
    options.policy.tenant_bundles = args.tenant_bundles;
    options.policy.a2a = service_supervisor::facade::a2a::A2aPolicy {
        off: args.no_a2a,
        default_bundle: args.a2a_default,
    };
    if let Some(url) = &args.advertise_url {
        anyhow::ensure!(
            url.starts_with("http://") || url.starts_with("https://"),
            "--advertise-url takes a base URL such as https://agents.example.com; got \"{url}\""
        );
        options.advertise_url = Some(url.clone());
    }
    options.policy.max_streams_per_client = args.max_streams_per_client.max(1);
    options.policy.max_streams_per_tenant = args.max_streams_per_tenant.map(|n| n.max(1));
    options.policy.trusted_proxies = args.trusted_proxy.clone();
    options.policy.request_rates = server::rate::RequestRates {
        default: args.tenant_request_rate,
        tenants: args.tenant_request_rate_for.iter().cloned().collect(),
    };
    options.policy.metrics_token = args
        .metrics_token
        .clone()
        .filter(|t| !t.is_empty())
        .map(|t| {
            let name = "metrics token";
            std::sync::Arc::new(match from_file("SERVICE_METRICS_TOKEN", &t) {
                Some(file) => server::live::LiveSecret::from_file(
                    name,
                    &t,
                    file,
                    server::live::read_secret_file,
                ),
                None => server::live::LiveSecret::fixed(name, &t),
            })
        });
    options.tls = args
        .tls_cert
        .clone()
        .zip(args.tls_key.clone())
        .map(|(cert, key)| server::tls::TlsFiles { cert, key });
    options.limits.max_connections = args.max_connections.max(1);
    options.limits.header_read_timeout = Duration::from_secs_f64(args.header_timeout.max(0.1));
    if let Some(threads) = args.http_threads {
        options.limits.threads = threads;
    }
    let clustered = shared.is_some();
    options.idle = service_supervisor::runtime::IdleTimeouts {
        any: Some(args.idle_timeout).filter(|t| !t.is_zero()),
        empty: args
            .empty_idle_timeout
            .or((!clustered).then_some(server::DEFAULT_EMPTY_IDLE_TIMEOUT))
            .filter(|t| !t.is_zero()),
    };
    options.unused_sessions = Some(args.unused_session_timeout).filter(|t| !t.is_zero());
    options.retention = service_supervisor::runtime::retention::Retention {
        default: args.retention.filter(|t| !t.is_zero()),
        tenants: args.retention_for.iter().cloned().collect(),
    };
    options.drain = server::Drain {
        pre_stop_delay: args.pre_stop_delay,
        timeout: args.drain_timeout,
    };
    let token_file = home.token_file();
    let keeps_token = matches!(options.auth, Auth::Generated { .. });
    // One server per files store: a second would share its sessions without knowing of the first's workers.
    let _lock = match shared {
        None => Some(service_supervisor::runtime::store::files_lock::serve(
            &home,
        )?),
        Some(_) => None,
    };
    let mut runtime_options = super::runtime_options(
        &home,
        args.dangerous_sandbox_mode,
        true,
        &args.resolve,
        args.sandbox_user.as_deref(),
    )?;
    runtime_options.pull_registries = options.policy.allowed_registries.clone();
    runtime_options.tenant_ledger = true;
    runtime_options.workspace_roots = options.policy.workspace_roots.clone();
    runtime_options.keys.pass(args.pass_env);
    super::tokio()?.block_on(async move {
        let store: std::sync::Arc<dyn Store> = match shared {
            None => std::sync::Arc::new(
                FilesStore::new(home.clone()).with_turn_flush(runtime_options.turn_flush),
            ),
            Some(shared) => {
                let store = PgStore::connect_with(
                    &shared.url,
                    shared.node.clone(),
                    shared.lease,
                    shared.ca.as_deref(),
                    match shared.migrate {
                        true => service_supervisor::runtime::store::postgres::Schema::Migrate,
                        false => service_supervisor::runtime::store::postgres::Schema::Require,
                    },
                )
                .await
                .context("cannot open the session store")?
                .with_turn_flush(runtime_options.turn_flush);
                let marker = home.cluster_file();
                std::fs::write(&marker, format!("{}\n", store.describe()))
                    .with_context(|| format!("cannot write {}", marker.display()))?;
                options.cluster = Some(server::forward::Cluster {
                    node_id: shared.node.id,
                    token: shared.cluster_token,
                });
                std::sync::Arc::new(store)
            }
        };
        let stop = stop_signal()?;
        let rt = ServiceRuntime::with_store(home, runtime_options, store);
        server::serve(
            rt,
            options,
            |bound, token| {
                notices.listening(bound);
                notices.token(token, keeps_token, &token_file);
            },
            stop,
        )
        .await?;
        anyhow::Ok(())
    })?;
    notices.stopped();
    Ok(ExitCode::SUCCESS)
}

/// The file `{variable}_FILE` names, when `value` came from it (see `secret_files`) rather than from the command
/// line, which wins over it: that file is then read again while serving.
fn from_file(variable: &str, value: &str) -> Option<PathBuf> {
    let file = std::env::var_os(format!("{variable}_FILE")).filter(|f| !f.is_empty())?;
    (std::env::var(variable).ok().as_deref() == Some(value)).then(|| PathBuf::from(file))
}

/// `--trusted-proxy`: a CIDR block, or one address.
fn trusted_proxy(text: &str) -> Result<ipnet::IpNet, String> {
    text.parse::<ipnet::IpNet>()
        .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| format!("\"{text}\" is not an address or a CIDR block such as 10.0.0.0/8"))
}

/// SIGTERM drains (an orchestrator stopping a node); Ctrl-C at a terminal stops at once. Both handlers are installed
/// here, before the node says it listens: a signal sent as soon as it does is then a stop, not the default action
/// (death without a drain).
fn stop_signal() -> anyhow::Result<impl std::future::Future<Output = server::Stop>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => server::Stop::Now,
            _ = term.recv() => server::Stop::Drain,
        }
    })
}
