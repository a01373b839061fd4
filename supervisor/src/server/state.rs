//! What every HTTP handler shares: the runtime, the operator's policy for clients, and the node's place in a
//! cluster. The front ends mounted by the server (`facade::openai`, `facade::a2a`) take their state from here, not
//! from the router that mounts them, so that neither imports the other.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::admission::{AllowedHosts, StreamCounts};
use crate::runtime::ServiceRuntime;

/// Largest request body accepted.
pub const MAX_BODY: usize = 1024 * 1024;

/// How `/v1` requests answer permission requests, which nobody can answer in OpenAI's API (`--openai-approvals`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OpenAiApprovals {
    /// Refuse every request; the answer says which tool was refused.
    #[default]
    Deny,
    /// Allow every request, once each.
    Allow,
    /// Leave each request pending until `POST /approvals/{id}` answers it (a client that follows the session's
    /// events sees it), as long as the request stays open.
    Wait,
}

/// What the A2A routes serve (`serve --no-a2a`, `--a2a-default`).
#[derive(Debug, Clone, Default)]
pub struct A2aPolicy {
    /// The routes are off.
    pub off: bool,
    /// The bundle whose card `/.well-known/agent-card.json` serves.
    pub default_bundle: Option<String>,
}

/// What the operator lets HTTP clients do beyond naming installed bundles.
#[derive(Debug, Clone, Default)]
pub struct ClientPolicy {
    /// Directories under which a `bundle_ref` may be a directory (`--allow-path`).
    pub allow_paths: Vec<std::path::PathBuf>,
    /// Directories under which a session's `cwd` may lie (`--workspace-root`); none: every session gets its own
    /// workspace.
    pub workspace_roots: Vec<std::path::PathBuf>,
    /// `danger_full_access` bundles are run (`--dangerous-sandbox-mode`).
    pub dangerous: bool,
    /// Models a request may name in `turn_context.model` besides the bundle's own (`--allow-model provider/name`).
    pub allowed_models: Vec<String>,
    /// Event streams one client address may hold at once.
    pub max_streams_per_client: usize,
    /// Event streams one tenant's clients may hold at once, together; None: no cap but the clients'.
    pub max_streams_per_tenant: Option<usize>,
    /// Registries (`host[:port]`, lower case) the server pulls from and pushes to for clients (`--allow-registry`).
    pub allowed_registries: Vec<String>,
    /// How `/v1` requests answer permission requests (`--openai-approvals`).
    pub openai_approvals: OpenAiApprovals,
    /// What the A2A routes serve (`--no-a2a`, `--a2a-default`).
    pub a2a: A2aPolicy,
    /// Proxies whose `X-Forwarded-For` names the client (`--trusted-proxy CIDR`): a request from one of them counts
    /// against the caps, and is logged, as the client's address that header gives. From anyone else the header is
    /// ignored, since a client may write it.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// A token that may read `GET /metrics` and nothing else (`--metrics-token`), for a scraper that should hold
    /// no admin token.
    pub metrics_token: Option<Arc<super::live::LiveSecret>>,
    /// Requests a tenant may send this node in a time (`--tenant-request-rate`, `--tenant-request-rate-for`).
    pub request_rates: super::rate::RequestRates,
    /// A tenant sees only the installed bundles granted to it, or that it pulled or imported
    /// (`--tenant-bundles`); otherwise every tenant sees every bundle.
    pub tenant_bundles: bool,
}

/// Shared by every handler: one reference count to copy, as each layer of the router takes its own copy of the
/// state for every request.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    /// The state of a server made of `shared`.
    pub fn new(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What every handler shares (see [`AppState`]).
pub struct Shared {
    /// The runtime.
    pub rt: ServiceRuntime,
    /// Bearer token every endpoint but /healthz requires; None only with `--no-auth`.
    pub token: Option<Arc<super::live::LiveSecret>>,
    /// Cancelled at shutdown; ends the event streams.
    pub shutdown: CancellationToken,
    /// The host names requests may address.
    pub hosts: Arc<AllowedHosts>,
    /// What clients may ask for.
    pub policy: Arc<ClientPolicy>,
    /// Open event streams per client address.
    pub streams: Arc<StreamCounts>,
    /// Each tenant's requests against its rate.
    pub rates: Arc<super::rate::TenantLimiter>,
    /// This node's place in a cluster sharing one store; None for a server of its own.
    pub cluster: Option<Arc<Cluster>>,
    /// The client requests for other nodes go through.
    pub forwarder: reqwest::Client,
    /// The base URL clients reach this server at (`--advertise-url`, else `http://` and the bound address), for
    /// the URLs that documents such as A2A's agent cards give.
    pub public_url: Arc<str>,
    /// Whether `public_url` is the operator's `--advertise-url`, which then wins over the name a request used.
    pub advertised: bool,
}

/// What a node of a cluster knows to forward.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// This node's id.
    pub node_id: String,
    /// The token nodes present to each other (`--cluster-token`).
    pub token: String,
}
