//! End-to-end tests: one test binary that drives the real `service-rs` binary with a temporary SERVICE_HOME.

// Test helpers panic on broken fixtures by design; the workspace lint is for library code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
