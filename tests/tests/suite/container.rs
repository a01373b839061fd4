//! service-rs in a real container: Podman from Debian's packages, under its default seccomp profile and
//! capabilities, running the image the repository's `Containerfile` builds over a Debian rootfs made by debootstrap
//! (`.ci/container-rootfs`; no image registry is reachable here). bubblewrap cannot start there, `doctor` picks
//! Landlock, and the sessions of `run` and `serve` are confined by it. The probes' targets are readable by the
//! sandbox user's own permissions (each test shows it), so only the sandbox stands in their way.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::sandbox::bundle;
use super::support::{gated, Env};

const IMAGE: &str = "localhost/service-rs:test";
const BASE: &str = "localhost/service-rs-base:test";

/// A rootful Podman over storage of the tests' own, with the image built once per test process.
struct Engine {
    storage: PathBuf,
}

impl Engine {
    /// The engine and its freshly built image, or `None` (and a line saying why) when the suite is not enabled.
    fn get() -> Option<&'static Engine> {
        static ENGINE: OnceLock<Option<Engine>> = OnceLock::new();
        ENGINE
            .get_or_init(|| {
                let rootfs = gated("SERVICE_TEST_CONTAINER_ROOTFS", ".ci/container-rootfs")?;
                let engine = Engine {
                    storage: Path::new(env!("CARGO_TARGET_TMPDIR")).join("podman"),
                };
                engine.build(&rootfs);
                Some(engine)
            })
            .as_ref()
    }

    /// `podman` with this engine's storage.
    fn podman(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("podman");
        cmd.arg("--root")
            .arg(self.storage.join("root"))
            .arg("--runroot")
            .arg(self.storage.join("run"))
            // Debian's crun 1.8 refuses a hybrid cgroup hierarchy (this machine's); runc takes it.
            .args(["--runtime", "runc", "--cgroup-manager", "cgroupfs"])
            .args(["--events-backend", "file"])
            .args(args);
        cmd
    }

    /// Runs `podman args` and returns its output, failing the test with what it printed when it fails.
    fn ok(&self, args: &[&str]) -> Output {
        let out = self.podman(args).output().expect("start podman");
        assert!(
            out.status.success(),
            "podman {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Imports the rootfs as the base and builds the Containerfile over it with the binaries under test.
    fn build(&self, rootfs: &Path) {
        // Containers a killed run left behind would hold the image.
        let _ = self.podman(&["rm", "--all", "--force"]).output();
        self.ok(&["import", rootfs.to_str().unwrap(), BASE]);
        let context = self.storage.join("context");
        let bin = context.join("target/debug");
        let _ = std::fs::remove_dir_all(&context);
        std::fs::create_dir_all(&bin).unwrap();
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        std::fs::copy(repo.join("Containerfile"), context.join("Containerfile")).unwrap();
        let supervisor = super::support::binary();
        for (from, name) in [
            (supervisor.clone(), "service-rs"),
            (
                supervisor.with_file_name("service-worker"),
                "service-worker",
            ),
        ] {
            if std::fs::hard_link(&from, bin.join(name)).is_err() {
                std::fs::copy(&from, bin.join(name)).unwrap();
            }
        }
        let context = context.to_str().unwrap();
        self.ok(&[
            "build",
            "--from",
            BASE,
            "--build-arg",
            "PROFILE=debug",
            "--ulimit",
            ULIMITS[1],
            "--ulimit",
            ULIMITS[3],
            "--tag",
            IMAGE,
            context,
        ]);
        // The previous run's image, now untagged.
        let _ = self.podman(&["image", "prune", "--force"]).output();
    }

    /// Runs the image's `service-rs` with `args` (or, with `shell`, `sh -c args[0]`) in a new container on the
    /// host's network, with `mounts` (`HOST:CONTAINER[:ro]`), and returns stdout and stderr together.
    fn run(&self, extra: &[&str], mounts: &[String], shell: Option<&str>, args: &[&str]) -> String {
        let mut all: Vec<&str> = vec!["run", "--rm", "--network", "host"];
        all.extend(ULIMITS);
        for m in mounts {
            all.extend(["--volume", m]);
        }
        all.extend(extra);
        if let Some(script) = shell {
            all.extend(["--entrypoint", "sh", IMAGE, "-c", script]);
        } else {
            all.push(IMAGE);
            all.extend(args);
        }
        let out = self.podman(&all).output().expect("start podman");
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }
}

/// Limits below this process's own: the engine's defaults are higher, and raising a hard limit needs a capability
/// root lacks on some machines (this one).
const ULIMITS: [&str; 4] = [
    "--ulimit",
    "nofile=4096:4096",
    "--ulimit",
    "nproc=4096:4096",
];

/// Bundles at `work/<name>` whose model runs the command with Bash, mounted read-only at `/bundles`.
fn bundles(env: &Env, list: &[(&str, &str, &str)]) -> String {
    for (name, sandbox, command) in list {
        bundle(env, name, sandbox, command);
    }
    format!("{}:/bundles:ro", env.path("").display())
}

/// The lines of `out` between `== name` and the next `==` line.
fn section<'a>(out: &'a str, name: &str) -> &'a str {
    let start = out
        .find(&format!("== {name}\n"))
        .unwrap_or_else(|| panic!("no section {name} in:\n{out}"));
    let rest = &out[start + name.len() + 4..];
    &rest[..rest.find("\n== ").map_or(rest.len(), |e| e + 1)]
}

#[test]
fn in_a_container_under_the_default_profile_bubblewrap_cannot_start_and_doctor_picks_landlock() {
    let Some(engine) = Engine::get() else { return };
    let out = engine.run(
        &[],
        &[],
        Some("grep '^Seccomp:' /proc/self/status; service-rs doctor"),
        &[],
    );
    assert!(
        out.contains("Seccomp:\t2"),
        "the engine's seccomp profile is not in force: {out}"
    );
    assert!(
        out.contains("sessions are confined by Landlock")
            && out.contains("since bubblewrap cannot start here"),
        "{out}"
    );
    assert!(
        out.contains("a confined worker started and ran a command"),
        "{out}"
    );
    // Asked for bubblewrap, the same container cannot confine anything.
    let out = engine.run(&[], &[], None, &["--sandbox-backend", "bwrap", "doctor"]);
    assert!(
        out.contains("FAIL  a confined worker could not run a command")
            && out.contains("--sandbox-backend landlock confines without them"),
        "{out}"
    );
}

#[test]
fn in_a_container_run_confines_sessions_as_a_non_root_user_to_their_workspace_and_listed_hosts() {
    let Some(engine) = Engine::get() else { return };
    let env = Env::new();
    let upstream = super::egress::Upstream::start(None);
    let p = upstream.port;
    let reach = format!(
        r#"echo "uid $(id -u)"
cat /root/secret.txt 2>/dev/null || echo "root: denied"
cat /var/lib/service/planted.txt 2>/dev/null || echo "store file: denied"
ls /var/lib/service >/dev/null 2>&1 && echo "store: LISTED" || echo "store: denied"
curl -sS http://allowed.test:{p}/via-proxy
curl -sS http://other.test:{p}/unlisted
(exec 3<>/dev/tcp/127.0.0.1/{p}) 2>&1 | grep -q 'Permission denied' && echo "direct: denied" || echo "direct: ALLOWED""#
    );
    let net = format!(
        r#"{{ mode: "workspace_write", permissions: {{ network: ["allowed.test:{p}"] }} }}"#
    );
    let mounts = [bundles(
        &env,
        &[
            (
                "ro",
                r#"{ mode: "read_only" }"#,
                "echo x > ro.txt && echo written || echo refused",
            ),
            (
                "rw",
                r#"{ mode: "workspace_write" }"#,
                "echo x > rw.txt && echo written",
            ),
            ("reach", &net, &reach),
        ],
    )];
    let resolve = |host: &str| format!("--resolve {host}:{p}:127.0.0.1");
    // The targets are open to the sandbox user by their modes, as `setpriv` shows as uid 65534 without a sandbox;
    // a first session makes the store, whose root gets the group search its sandboxes need.
    let script = format!(
        r#"set -u
service-rs run /bundles/rw --prompt go --cwd /tmp >/dev/null 2>&1
echo TOPSECRET > /root/secret.txt; chmod 755 /root; chmod 644 /root/secret.txt
echo PLANTED > /var/lib/service/planted.txt; chmod 644 /var/lib/service/planted.txt
echo "== unconfined"
setpriv --reuid 65534 --regid 65534 --clear-groups cat /root/secret.txt /var/lib/service/planted.txt
echo "== ro"
service-rs run /bundles/ro --prompt go --cwd /work 2>&1
echo "== rw"
service-rs run /bundles/rw --prompt go --cwd /work 2>&1
echo "== reach"
service-rs run /bundles/reach --prompt go --cwd /work {} {} 2>&1
echo "== files"
ls /work"#,
        resolve("allowed.test"),
        resolve("other.test")
    );
    let out = engine.run(&[], &mounts, Some(&script), &[]);
    let unconfined = section(&out, "unconfined");
    assert!(
        unconfined.contains("TOPSECRET") && unconfined.contains("PLANTED"),
        "{out}"
    );
    assert!(section(&out, "ro").contains("refused"), "{out}");
    assert!(section(&out, "rw").contains("written"), "{out}");
    let reach = section(&out, "reach");
    for line in [
        "uid 65534",
        "root: denied",
        "store file: denied",
        "store: denied",
        &format!("upstream allowed.test:{p} /via-proxy"),
        &format!("other.test:{p} is not allowed"),
        "direct: denied",
    ] {
        assert!(reach.contains(line), "missing {line:?} in:\n{out}");
    }
    assert!(
        !reach.contains("TOPSECRET") && !reach.contains("PLANTED"),
        "{out}"
    );
    let files = section(&out, "files");
    assert!(
        files.contains("rw.txt") && !files.contains("ro.txt"),
        "{out}"
    );
}

#[test]
fn in_a_container_serve_confines_the_sessions_it_runs() {
    let Some(engine) = Engine::get() else { return };
    let env = Env::new();
    let probe = r#"echo "uid $(id -u)"
cat /root/secret.txt 2>/dev/null || echo "root: denied"
echo x > made.txt && echo written"#;
    let mounts = [bundles(
        &env,
        &[("probe", r#"{ mode: "workspace_write" }"#, probe)],
    )];
    let name = format!("service-rs-serve-{}", std::process::id());
    let script = "echo TOPSECRET > /root/secret.txt; chmod 755 /root; chmod 644 /root/secret.txt; \
                  exec service-rs serve --bind 127.0.0.1:0 --token container-token --allow-path /bundles";
    let mut args: Vec<&str> = vec!["run", "--detach", "--name", &name, "--network", "host"];
    args.extend(ULIMITS);
    args.extend([
        "--volume",
        &mounts[0],
        "--entrypoint",
        "sh",
        IMAGE,
        "-c",
        script,
    ]);
    engine.ok(&args);
    let _stop = Stop(engine, &name);
    let base = listening(engine, &name);
    let curl = |path: &str, body: &str| -> serde_json::Value {
        let out = Command::new("curl")
            .args([
                "-sS",
                "--max-time",
                "60",
                "-H",
                "Authorization: Bearer container-token",
            ])
            .args(["-H", "Content-Type: application/json", "--data", body])
            .arg(format!("{base}{path}"))
            .output()
            .expect("start curl");
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("{path}: {}", String::from_utf8_lossy(&out.stdout)))
    };
    let created = curl("/sessions", r#"{"bundle_ref": "/bundles/probe"}"#);
    let id = created["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"));
    let turn = curl(
        &format!("/sessions/{id}/run-sync"),
        &serde_json::json!({"input": super::http_client::task("go")}).to_string(),
    );
    let answer = turn["final_message"]
        .as_str()
        .unwrap_or_else(|| panic!("{turn}"));
    for line in ["uid 65534", "root: denied", "written"] {
        assert!(answer.contains(line), "missing {line:?} in: {turn}");
    }
}

/// The base URL `serve` in container `name` printed.
fn listening(engine: &Engine, name: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = engine.ok(&["logs", name]);
        let log = String::from_utf8_lossy(&out.stdout);
        if let Some(url) = log
            .lines()
            .find_map(|l| l.strip_prefix("service-rs listening on "))
        {
            return url.trim().to_string();
        }
        assert!(Instant::now() < deadline, "serve did not start: {log}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Removes a detached container when the test ends, passed or not.
struct Stop<'a>(&'a Engine, &'a str);

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        let _ = self
            .0
            .podman(&["rm", "--force", "--time", "0", self.1])
            .output();
    }
}

#[test]
fn in_a_container_whose_profile_refuses_landlock_doctor_names_the_calls_to_allow_and_nothing_runs()
{
    let Some(engine) = Engine::get() else { return };
    let env = Env::new();
    // The engine's default profile without Landlock's three calls, which it answers with ENOSYS like a kernel
    // without Landlock.
    let mut profile: serde_json::Value = serde_json::from_slice(
        &std::fs::read("/usr/share/containers/seccomp.json")
            .expect("Podman's default seccomp profile"),
    )
    .unwrap();
    for rule in profile["syscalls"].as_array_mut().unwrap() {
        if let Some(names) = rule["names"].as_array_mut() {
            names.retain(|n| !n.as_str().unwrap_or("").starts_with("landlock_"));
        }
    }
    let path = env.path("no-landlock.json");
    std::fs::write(&path, profile.to_string()).unwrap();
    let opt = format!("seccomp={}", path.display());
    let mounts = [bundles(
        &env,
        &[("rw", r#"{ mode: "workspace_write" }"#, "echo ran")],
    )];
    let out = engine.run(&["--security-opt", &opt], &mounts, None, &["doctor"]);
    assert!(out.contains("FAIL"), "{out}");
    assert!(
        out.contains("the seccomp filter this process runs under (a container engine's profile) refuses Landlock's calls: allow landlock_create_ruleset, landlock_add_rule and landlock_restrict_self"),
        "{out}"
    );
    let out = engine.run(
        &["--security-opt", &opt],
        &mounts,
        None,
        &["run", "/bundles/rw", "--prompt", "go"],
    );
    assert!(!out.contains("ran\n"), "{out}");
    assert!(out.contains("landlock_restrict_self"), "{out}");
}
