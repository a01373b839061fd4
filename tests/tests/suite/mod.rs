mod approvals;
mod bundles;
mod http;
mod run_cli;
mod sandbox;
mod support;
mod turns;
