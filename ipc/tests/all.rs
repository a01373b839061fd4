//! Integration tests of the wire types and codec (one test binary).

// Tests unwrap by design; the workspace lint is for library code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
