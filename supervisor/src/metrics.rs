//! Prometheus metrics of one runtime: what `GET /metrics` serves. Counters and histograms are updated where things
//! happen; the gauges that describe current state are read from the runtime when scraped.

use std::sync::atomic::AtomicI64;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use service_ipc::{ModelChunk, ModelRef};

/// A label set with one `outcome` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Outcome {
    /// How it ended.
    pub outcome: String,
}

/// Labels of a provider call.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderLabels {
    /// Provider name.
    pub provider: String,
    /// `ok` or the error code.
    pub outcome: String,
}

/// Labels of a provider's latency.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderName {
    /// Provider name.
    pub provider: String,
}

/// Labels of an HTTP response.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Status {
    /// HTTP status code.
    pub code: u16,
}

/// Labels of tokens spent.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabels {
    /// The session's tenant.
    pub tenant: String,
    /// `provider/name`.
    pub model: String,
    /// `input`, `output`, `cached` or `reasoning` (the last two are parts of the first two).
    pub kind: &'static str,
}

/// Labels of a quota refusal.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QuotaLabels {
    /// The tenant refused.
    pub tenant: String,
    /// `quota_sessions`, `quota_concurrent_turns`, `quota_tokens` or `quota_exceeded` (a turn stopped).
    pub code: String,
}

/// Labels of an HTTP request's duration: the route's template (`/sessions/{id}/run-sync`), never an id, so the
/// series stay few; `unmatched` for a path no route takes.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// The request's method.
    pub method: String,
    /// The route's template.
    pub route: String,
}

/// Labels of a request forwarded to another node that failed.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ForwardLabels {
    /// `unreachable` (no answer) or `refused` (the peer refused the cluster token).
    pub reason: &'static str,
}

/// Labels of the build's info metric.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

/// The process's own figures, under the names every Prometheus process collector uses, read when scraped.
#[derive(Default)]
struct Process {
    resident_memory_bytes: Gauge,
    open_fds: Gauge,
    max_fds: Gauge,
}

impl Process {
    fn registry(&self) -> Registry {
        let mut registry = Registry::default();
        registry.register(
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            self.resident_memory_bytes.clone(),
        );
        registry.register(
            "process_open_fds",
            "Number of open file descriptors",
            self.open_fds.clone(),
        );
        registry.register(
            "process_max_fds",
            "Maximum number of open file descriptors",
            self.max_fds.clone(),
        );
        registry
    }

    /// Reads the figures from `/proc/self` and the descriptor limit; a figure that cannot be read keeps its last
    /// value.
    fn read(&self) {
        let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .unwrap_or(4096);
        // statm: size resident shared text lib data dt, in pages.
        if let Some(resident) = std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|s| s.split_whitespace().nth(1)?.parse::<i64>().ok())
        {
            self.resident_memory_bytes.set(resident * page);
        }
        if let Ok(entries) = std::fs::read_dir("/proc/self/fd") {
            self.open_fds.set(entries.count() as i64);
        }
        if let Ok((soft, _)) =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        {
            self.max_fds.set(i64::try_from(soft).unwrap_or(i64::MAX));
        }
    }
}

/// Every metric of a runtime.
pub struct Metrics {
    registry: Registry,
    /// The process's figures, unprefixed.
    process: Process,
    process_registry: Registry,
    /// Sessions held in memory.
    pub sessions_live: Gauge,
    /// Running workers, spares included.
    pub workers: Gauge,
    /// Spare workers waiting for a session.
    pub spare_workers: Gauge,
    /// Turns ended, by outcome.
    pub turns: Family<Outcome, Counter>,
    /// Model calls, by provider and outcome.
    pub provider_calls: Family<ProviderLabels, Counter>,
    /// Model call duration, by provider.
    pub provider_seconds: Family<ProviderName, Histogram>,
    /// Open event streams.
    pub sse_subscribers: Gauge,
    /// Bytes in the journals of the sessions held in memory.
    pub journal_bytes: Gauge,
    /// HTTP responses, by status.
    pub http_responses: Family<Status, Counter>,
    /// Idle workers stopped.
    pub workers_reaped: Counter,
    /// Tokens spent, by tenant, model and kind.
    pub tokens: Family<TokenLabels, Counter>,
    /// Requests and turns refused by a tenant's quota.
    pub quota_refusals: Family<QuotaLabels, Counter>,
    /// Turn duration, by outcome.
    pub turn_seconds: Family<Outcome, Histogram>,
    /// HTTP request duration, by method and route template (event streams excluded: they last as long as the client).
    pub http_seconds: Family<RouteLabels, Histogram>,
    /// Sessions this node took over from a node whose lease expired.
    pub takeovers: Counter,
    /// Requests forwarded to another node that failed, by reason.
    pub forward_failures: Family<ForwardLabels, Counter>,
    /// Sessions whose lease this node holds (a shared store).
    pub leases_held: Gauge,
    /// Database errors the shared store met.
    pub store_errors: Gauge,
    /// The shared store's connections: open, idle, and requests waiting for one.
    pub store_connections: Family<ConnectionState, Gauge>,
    /// Bytes the shared store's database takes on disk.
    pub store_bytes: Gauge,
    /// Free bytes on the file system of this node's home (`$SERVICE_HOME`).
    pub home_free_bytes: Gauge,
    /// Nodes of the cluster this node found gone (their lease expired on a session it then reached), each once.
    pub nodes_lost: Counter,
    nodes_seen_lost: std::sync::Mutex<std::collections::HashSet<String>>,
    /// What each tenant's quota leaves, read at scrape.
    pub quota_headroom: Family<HeadroomLabels, Gauge>,
}

/// Labels of a tenant's quota headroom.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HeadroomLabels {
    /// The tenant.
    pub tenant: String,
    /// `sessions`, `concurrent_turns` or `tokens_per_day`.
    pub quota: &'static str,
}

/// Labels of the shared store's connections.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConnectionState {
    /// `open`, `idle` or `waiting`.
    pub state: &'static str,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("service");
        let m = Metrics {
            sessions_live: Gauge::default(),
            workers: Gauge::default(),
            spare_workers: Gauge::default(),
            turns: Family::default(),
            provider_calls: Family::default(),
            provider_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.005, 2.0, 14))
            }),
            sse_subscribers: Gauge::default(),
            journal_bytes: Gauge::default(),
            http_responses: Family::default(),
            workers_reaped: Counter::default(),
            tokens: Family::default(),
            quota_refusals: Family::default(),
            // 10 ms to about 3 h: a text turn on loopback to an agent's long run.
            turn_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.01, 4.0, 12))
            }),
            // 0.5 ms to about 16 s.
            http_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0005, 2.0, 16))
            }),
            takeovers: Counter::default(),
            forward_failures: Family::default(),
            leases_held: Gauge::default(),
            store_errors: Gauge::default(),
            store_connections: Family::default(),
            store_bytes: Gauge::default(),
            home_free_bytes: Gauge::default(),
            nodes_lost: Counter::default(),
            nodes_seen_lost: Default::default(),
            quota_headroom: Family::default(),
            registry: Registry::default(),
            process: Process::default(),
            process_registry: Registry::default(),
        };
        registry.register(
            "build",
            "This build of service-rs",
            prometheus_client::metrics::info::Info::new(BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            }),
        );
        registry.register(
            "sessions_live",
            "Sessions held in memory",
            m.sessions_live.clone(),
        );
        registry.register(
            "workers",
            "Running session workers, spares included",
            m.workers.clone(),
        );
        registry.register(
            "spare_workers",
            "Workers started ahead for a bundle's next session",
            m.spare_workers.clone(),
        );
        registry.register("turns", "Turns ended, by outcome", m.turns.clone());
        registry.register(
            "provider_calls",
            "Model calls, by provider and outcome",
            m.provider_calls.clone(),
        );
        registry.register(
            "provider_call_duration_seconds",
            "Model call duration, from the request to the last chunk",
            m.provider_seconds.clone(),
        );
        registry.register(
            "sse_subscribers",
            "Open server-sent event streams",
            m.sse_subscribers.clone(),
        );
        registry.register(
            "journal_bytes",
            "Bytes in the journals of the sessions held in memory",
            m.journal_bytes.clone(),
        );
        registry.register(
            "http_responses",
            "HTTP responses, by status code",
            m.http_responses.clone(),
        );
        registry.register(
            "workers_reaped",
            "Idle workers stopped",
            m.workers_reaped.clone(),
        );
        registry.register(
            "tokens",
            "Tokens spent at the providers, by tenant, model and kind",
            m.tokens.clone(),
        );
        registry.register(
            "quota_refusals",
            "Requests and turns refused by a tenant's quota, by tenant and code",
            m.quota_refusals.clone(),
        );
        registry.register(
            "turn_duration_seconds",
            "Turn duration, from its start to its end, by outcome",
            m.turn_seconds.clone(),
        );
        registry.register(
            "http_request_duration_seconds",
            "HTTP request duration until the response's head, by method and route template",
            m.http_seconds.clone(),
        );
        registry.register(
            "takeovers",
            "Sessions this node took over from a node whose lease expired",
            m.takeovers.clone(),
        );
        registry.register(
            "forward_failures",
            "Requests forwarded to the node running their session that failed, by reason",
            m.forward_failures.clone(),
        );
        registry.register(
            "leases_held",
            "Sessions whose lease this node holds in the shared store",
            m.leases_held.clone(),
        );
        registry.register(
            "store_errors",
            "Database errors the shared store met since the start",
            m.store_errors.clone(),
        );
        registry.register(
            "store_connections",
            "The shared store's database connections: open, idle, and requests waiting for one",
            m.store_connections.clone(),
        );
        registry.register(
            "store_size_bytes",
            "Bytes the shared store's database takes on disk",
            m.store_bytes.clone(),
        );
        registry.register(
            "home_free_bytes",
            "Free bytes on the file system of this node's home ($SERVICE_HOME)",
            m.home_free_bytes.clone(),
        );
        registry.register(
            "nodes_lost",
            "Nodes of the cluster this node found gone, their lease expired on a session it reached; each counted once",
            m.nodes_lost.clone(),
        );
        registry.register(
            "tenant_quota_headroom",
            "What a tenant's quota leaves now: sessions, turns at once, or tokens for the rest of the UTC day",
            m.quota_headroom.clone(),
        );
        // Both reasons from the start, at 0, so an alert on their increase sees the first failure.
        for reason in ["refused", "unreachable"] {
            drop(m.forward_failures.get_or_create(&ForwardLabels { reason }));
        }
        let process_registry = m.process.registry();
        Metrics {
            registry,
            process_registry,
            ..m
        }
    }
}

impl Metrics {
    /// Counts one model call's tokens against `tenant` and `model`.
    pub fn count_tokens(&self, tenant: &str, model: &ModelRef, usage: &service_ipc::Usage) {
        let model = crate::telemetry::label(&crate::tenancy::usage::model_name(model));
        for (kind, n) in [
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cached", usage.cached_tokens),
            ("reasoning", usage.reasoning_tokens),
        ] {
            if let Some(n) = n.filter(|n| *n > 0) {
                self.tokens
                    .get_or_create(&TokenLabels {
                        tenant: tenant.to_string(),
                        model: model.clone(),
                        kind,
                    })
                    .inc_by(n);
            }
        }
    }

    /// Counts `node` as lost, once however many of its sessions are found.
    pub fn node_lost(&self, node: &str) {
        let mut seen = self
            .nodes_seen_lost
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if seen.insert(node.to_string()) {
            self.nodes_lost.inc();
        }
    }

    /// Counts a refusal of `tenant` by its quota.
    pub fn quota_refused(&self, tenant: &str, code: &str) {
        self.quota_refusals
            .get_or_create(&QuotaLabels {
                tenant: tenant.to_string(),
                code: crate::telemetry::label(code),
            })
            .inc();
    }
}

impl Metrics {
    /// The metrics in the OpenMetrics text format (ends with `# EOF`), the process's figures read now.
    pub fn encode(&self) -> String {
        use prometheus_client::encoding::text::{encode_eof, encode_registry};
        self.process.read();
        let mut out = String::new();
        let _ = encode_registry(&mut out, &self.registry);
        let _ = encode_registry(&mut out, &self.process_registry);
        let _ = encode_eof(&mut out);
        out
    }

    /// Counts a turn's end, after `seconds`.
    pub fn turn_ended(&self, outcome: &str, seconds: f64) {
        let outcome = Outcome {
            outcome: crate::telemetry::label(outcome),
        };
        self.turn_seconds.get_or_create(&outcome).observe(seconds);
        self.turns.get_or_create(&outcome).inc();
    }

    /// Times one HTTP request of `method` on route template `route`. A method outside HTTP's own is `other`, so a
    /// client cannot make series of its own.
    pub fn http_request(&self, method: &str, route: &str, seconds: f64) {
        const METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];
        let method = METHODS
            .iter()
            .find(|m| **m == method)
            .copied()
            .unwrap_or("other");
        self.http_seconds
            .get_or_create(&RouteLabels {
                method: method.to_string(),
                route: route.to_string(),
            })
            .observe(seconds);
    }
}

/// Keeps `gauge` one higher while it lives.
pub struct GaugeGuard(Gauge<i64, AtomicI64>);

impl GaugeGuard {
    /// Increments `gauge` until dropped.
    pub fn new(gauge: &Gauge) -> GaugeGuard {
        gauge.inc();
        GaugeGuard(gauge.clone())
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// One model call as the supervisor serves it: timed, counted and logged when it ends.
pub struct ProviderCall {
    metrics: std::sync::Arc<Metrics>,
    session: String,
    model: ModelRef,
    started: Instant,
    first_chunk_ms: Option<f64>,
    outcome: Option<String>,
}

impl ProviderCall {
    /// Starts timing a call of `model` for `session`.
    pub fn start(
        metrics: &std::sync::Arc<Metrics>,
        session: &str,
        model: &ModelRef,
    ) -> ProviderCall {
        ProviderCall {
            metrics: metrics.clone(),
            session: session.to_string(),
            model: model.clone(),
            started: Instant::now(),
            first_chunk_ms: None,
            outcome: None,
        }
    }

    /// Notes a chunk of the reply; the last one says how the call ended.
    pub fn saw(&mut self, chunk: &ModelChunk) {
        if self.first_chunk_ms.is_none() {
            self.first_chunk_ms = Some(self.started.elapsed().as_secs_f64() * 1000.0);
        }
        match chunk {
            ModelChunk::Done { .. } => self.outcome = Some("ok".into()),
            ModelChunk::Failed { code, .. } => self.outcome = Some(crate::telemetry::label(code)),
            _ => {}
        }
    }
}

impl Drop for ProviderCall {
    fn drop(&mut self) {
        let outcome = self.outcome.take().unwrap_or_else(|| "aborted".into());
        let seconds = self.started.elapsed().as_secs_f64();
        let provider = crate::telemetry::label(&self.model.provider);
        self.metrics
            .provider_seconds
            .get_or_create(&ProviderName {
                provider: provider.clone(),
            })
            .observe(seconds);
        self.metrics
            .provider_calls
            .get_or_create(&ProviderLabels {
                provider: provider.clone(),
                outcome: outcome.clone(),
            })
            .inc();
        tracing::info!(
            session = %self.session,
            provider = %provider,
            model = %crate::telemetry::label(&self.model.name),
            latency_ms = seconds * 1000.0,
            first_chunk_ms = self.first_chunk_ms.unwrap_or(-1.0),
            outcome = %outcome,
            "provider call"
        );
    }
}
