//! The runtime bench's comparison of the two sandbox backends: the one-shot whose model calls Bash once, confined
//! and read-only, whole process, with `--sandbox-backend bwrap` and with `--sandbox-backend landlock`, against the
//! bench's loopback model server (`common/openai.rs`). The two alternate sample by sample, and the ratio is taken
//! pair by pair. Skipped where Landlock is not available.

use std::path::Path;

use super::{alternating, answered_ok, openai, print_pairs, BenchResult};

/// The rows: `iters` pairs (at most 100).
pub(super) fn rows(exe: &Path, iters: usize) -> BenchResult<()> {
    if let Err(e) = service_supervisor::sandbox::landlock::available() {
        println!("\nnote: {e}; the comparison of the sandbox backends is skipped");
        return Ok(());
    }
    let server = openai::start()?;
    let home = tempfile::TempDir::new()?;
    let bundle = tempfile::TempDir::new()?;
    openai::write_bundle_at(bundle.path(), &server.bash, "read_only")?;
    // A Landlock sandbox walks the host's paths to its bundle, as another user when the bench runs as root.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(bundle.path(), std::fs::Permissions::from_mode(0o755))?;
    }
    let reference = bundle.path().display().to_string();
    let once = |backend: &str| {
        answered_ok(
            std::process::Command::new(exe)
                .args(["--sandbox-backend", backend, "run", &reference])
                .args(["--prompt", "run true"])
                .env("SERVICE_HOME", home.path()),
        )
    };
    print_pairs(
        "The sandbox backends, a one-shot whose model calls Bash once, confined and read-only, whole processes",
        ("`service-rs --sandbox-backend bwrap run`", "`service-rs --sandbox-backend landlock run`"),
        alternating(iters, || once("bwrap"), || once("landlock"))?,
        "bwrap / Landlock, median of the pairs' ratios",
    );
    Ok(())
}
