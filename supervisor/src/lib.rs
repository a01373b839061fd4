//! The service-rs supervisor: everything that must outlive a worker or stay out of the sandbox.
//!
//! Layout:
//! - [`hardening`]: what every `service-rs` process does first (not dumpable, no core dumps, no `LD_*`).
//! - [`home`]: the local store root (`$SERVICE_HOME`) and its paths.
//! - [`bundle`]: bundle files, validation, build, install, OCI layouts, references.
//! - [`registry`]: push and pull bundles through OCI registries.
//! - [`runtime`]: `ServiceRuntime`: sessions, workers, events, approvals, operator commands.
//! - [`doctor`]: the checks of `service-rs doctor`.
//! - [`egress`]: the proxy that is a sandbox's only way out, host by host.
//! - [`metrics`]: the Prometheus metrics of a runtime (`GET /metrics`).
//! - [`facade`]: the runtime in other protocols' terms: the Agent Client Protocol (`service-rs acp`) and
//!   OpenAI-compatible models (`/v1` on `serve`).
//! - [`mcp_server`]: `service-rs mcp serve`, the installed bundles as MCP tools.
//! - [`model_config`]: the documented keys of `model.config` and their validation.
//! - [`providers`]: model providers, serving the workers' model requests.
//! - [`reference`]: the manual's reference pages (CLI, HTTP, config.toml), generated from their definitions.
//! - [`sandbox`]: bubblewrap confinement of workers, from the `sandbox-profiles/` data.
//! - [`server`]: the HTTP API and event stream over the runtime.
//! - [`tenancy`]: tenants' tokens, quotas and spending.
//! - [`telemetry`]: OpenTelemetry traces of turns, over OTLP.
//! - [`event_source`]: reading SSE bodies (model providers, the remote CLI and TUI).
//! - [`tui`]: the terminal UI's state and drawing.
//!
//! The CLI lives in the `service-rs` binary (`src/main.rs`, `src/cli/`) and is a thin layer over this library.

pub mod bundle;
pub mod checkpoint;
pub mod config_file;
pub mod doctor;
pub mod egress;
pub mod error_chain;
pub mod event_source;
pub mod facade;
pub use service_worker::hardening;
pub mod home;
pub mod hooks;
pub mod mcp_server;
pub mod metrics;
pub mod model_config;
pub mod project_instructions;
pub mod providers;
pub mod reference;
pub mod registry;
pub mod runtime;
pub mod sandbox;
pub mod server;
pub mod telemetry;
pub mod tenancy;
pub mod trajectory;
pub mod tui;
pub mod usage_line;

pub use home::ServiceHome;
pub use runtime::{worker_beside, RuntimeOptions, ServiceRuntime};
