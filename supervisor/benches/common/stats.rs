//! Small helpers every bench uses: a count from the environment, and the median of samples.
#![allow(dead_code)]

use std::time::Duration;

/// The number in the environment variable `name`, or `default` when it is unset or not a number.
pub fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The median of `samples` (the upper one of an even count).
pub fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}
