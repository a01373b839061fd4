mod approvals;
mod bundles;
mod run_cli;
mod support;
mod turns;
