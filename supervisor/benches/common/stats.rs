//! Small helpers every bench uses: a count from the environment, the median of samples, and a probe of the file
//! system.
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

/// The median time to make a new empty file in `dir`, which it creates, over 30 files; keep `dir` until the run's
/// end, as a deletion would slow what follows. About 0.03 ms on a quiet ext4; on one without a journal 0.2-0.7 ms
/// for minutes after many files were deleted, as each new file steps over every recently freed inode
/// (`find_inode_bit` in `fs/ext4/ialloc.c`) and every session makes several.
pub fn new_file(dir: &std::path::Path) -> std::io::Result<Duration> {
    std::fs::create_dir(dir)?;
    let samples = (0..30)
        .map(|i| {
            let t = std::time::Instant::now();
            std::fs::File::create_new(dir.join(i.to_string()))?;
            Ok(t.elapsed())
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    Ok(median(samples))
}
