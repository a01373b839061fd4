//! Registry benchmark: `cargo bench -p service-supervisor --bench registry` (needs Debian's `docker-registry` and
//! `skopeo`, which `.ci/deps` installs).
//!
//! A bundle carrying `BENCH_BUNDLE_MB` (default 20) MiB of incompressible resources is pushed once to a Docker
//! Distribution registry on a loopback port. Then, alternating, `BENCH_PULLS` (default 7) times each: our pull into
//! a fresh store (what `service-rs pull` runs: manifest, blobs with their digests checked, the verified layout
//! path, the atomic install), and `skopeo copy docker://… oci:<dir>` of the same artifact (download and digest
//! checks, no install). Reported: both medians and their ratio. A second push is timed too, with the count of
//! blobs it uploaded (zero: the registry has them).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use service_supervisor::registry::{self, Access};
use service_supervisor::ServiceHome;

#[path = "common/stats.rs"]
mod stats;
use stats::{env_or, median};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Writes a bundle project with `mb` MiB of random bytes under resources/.
fn project(dir: &Path, mb: usize) -> BenchResult<()> {
    std::fs::create_dir_all(dir.join("resources"))?;
    std::fs::write(
        dir.join("service.bundle.json5"),
        r#"{ manifest_version: "service.bundle/v1", id: "big", version: "1.0.0", tools: ["Bash"] }"#,
    )?;
    std::fs::write(
        dir.join("agent.yaml"),
        "model: { provider: scripted, name: s, config: { script: resources/script.json5 } }\n",
    )?;
    std::fs::write(
        dir.join("resources/script.json5"),
        r#"{turns: [{replies: [{text: "ok"}]}]}"#,
    )?;
    // xorshift: incompressible and reproducible, without a random-number crate.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut data = vec![0u8; mb * 1024 * 1024];
    for chunk in data.chunks_mut(8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }
    std::fs::write(dir.join("resources/data.bin"), data)?;
    Ok(())
}

fn main() -> BenchResult<()> {
    let mb = env_or("BENCH_BUNDLE_MB", 20);
    let pulls = env_or("BENCH_PULLS", 7);
    let tmp = tempfile::tempdir()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    std::fs::write(
        tmp.path().join("registry.yml"),
        format!(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
            tmp.path().join("data").display()
        ),
    )?;
    let mut server = Command::new("docker-registry")
        .arg("serve")
        .arg(tmp.path().join("registry.yml"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err("docker-registry did not start".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let result = run(tmp.path(), port, mb, pulls);
    let _ = server.kill();
    let _ = server.wait();
    result
}

fn run(tmp: &Path, port: u16, mb: usize, pulls: usize) -> BenchResult<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let project_dir = tmp.join("project");
    project(&project_dir, mb)?;
    let home = ServiceHome::new(tmp.join("home"));
    let bundle = service_supervisor::bundle::store::install(&home, &project_dir)?;
    let target = format!("127.0.0.1:{port}/bench/big:1.0.0");
    let access = Access::default();
    let first = rt.block_on(registry::push(&bundle, &target, &access))?;
    let started = Instant::now();
    let second = rt.block_on(registry::push(&bundle, &target, &access))?;
    let second_push = started.elapsed();

    let mut ours = Vec::new();
    let mut skopeo = Vec::new();
    for i in 0..pulls {
        let fresh = ServiceHome::new(tmp.join(format!("pull-{i}")));
        let started = Instant::now();
        let pulled = rt.block_on(registry::pull(&fresh, &target, &access))?;
        ours.push(started.elapsed());
        assert_eq!(
            pulled.digest, bundle.digest,
            "the pull installs the pushed content"
        );

        let layout = tmp.join(format!("skopeo-{i}"));
        let started = Instant::now();
        let status = Command::new("skopeo")
            .args(["copy", "--quiet", "--src-tls-verify=false"])
            .arg(format!("docker://{target}"))
            .arg(format!("oci:{}:latest", layout.display()))
            .status()?;
        skopeo.push(started.elapsed());
        if !status.success() {
            return Err("skopeo copy failed".into());
        }
    }
    let (ours, skopeo) = (median(ours), median(skopeo));
    println!("bundle: {mb} MiB of resources, layer {}", bundle.digest);
    println!(
        "first push: {} blobs uploaded; second push: {} uploaded, {} already there, {:.1} ms",
        first.uploaded,
        second.uploaded,
        second.present,
        second_push.as_secs_f64() * 1000.0
    );
    println!(
        "pull, median of {pulls}: service-rs {:.1} ms, skopeo copy {:.1} ms, ratio {:.2}",
        ours.as_secs_f64() * 1000.0,
        skopeo.as_secs_f64() * 1000.0,
        ours.as_secs_f64() / skopeo.as_secs_f64()
    );
    Ok(())
}
