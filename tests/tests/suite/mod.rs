mod approvals;
mod bundles;
mod run_cli;
mod sandbox;
mod support;
mod turns;
