//! Push and pull through a real OCI registry: Debian's `docker-registry` (Docker Distribution) on a loopback port,
//! without auth and with htpasswd auth, and skopeo copying both ways.

use std::path::Path;
use std::process::{Command, Stdio};

use super::registry_server::{Registry, TokenGate};
use super::support::Env;

fn hello() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/hello")
        .display()
        .to_string()
}

fn inspect(env: &Env, reference: &str) -> serde_json::Value {
    env.run(&["inspect", reference, "--json"]).json()
}

/// The manifest digest in a push's or build's output line.
fn manifest_digest(out: &str) -> String {
    let at = out
        .find("manifest digest sha256:")
        .expect("a manifest digest")
        + "manifest digest ".len();
    out[at..at + 71].to_string()
}

#[test]
fn push_then_pull_keeps_the_local_digests_a_second_push_uploads_nothing_and_a_pull_by_digest_works()
{
    let registry = Registry::start(&[]);
    let local = Env::new();
    local.run(&["build", &hello()]).ok();
    let layout = local.path("layout");
    let built = local.run(&["build", &hello(), "--output", layout.to_str().unwrap()]);
    let built_manifest = manifest_digest(built.ok());
    let target = registry.url("team/hello:0.1.0");

    let first = local.run(&["push", "hello", &target]);
    assert!(
        first.ok().contains("2 blobs uploaded, 0 already there"),
        "{}",
        first.stdout
    );
    assert_eq!(
        manifest_digest(&first.stdout),
        built_manifest,
        "the pushed manifest is the local build's"
    );
    let second = local.run(&["push", "hello", &target]);
    assert!(
        second.ok().contains("0 blobs uploaded, 2 already there"),
        "{}",
        second.stdout
    );

    let other = Env::new();
    let pulled = other.run(&["pull", &target]);
    assert!(
        pulled.ok().contains("Installed local/hello:0.1.0"),
        "{}",
        pulled.stderr
    );
    assert_eq!(
        inspect(&other, "hello")["digest"],
        inspect(&local, "hello")["digest"]
    );
    // The pulled bundle remembers where it came from.
    assert_eq!(
        inspect(&other, "hello")["pulled_from"],
        serde_json::json!([target])
    );
    assert!(other
        .run(&["inspect", "hello"])
        .ok()
        .contains(&format!("pulled from  {target}")));
    assert!(other
        .run(&["run", "hello", "--prompt", "hi"])
        .ok()
        .contains("You asked: \"hi\""));

    let by_digest = Env::new();
    let source = format!("{}@{built_manifest}", registry.url("team/hello"));
    by_digest.run(&["pull", &source]).ok();
    assert_eq!(
        inspect(&by_digest, "hello")["digest"],
        inspect(&local, "hello")["digest"]
    );

    // The content digest `bundles` and `inspect` show is not what a registry knows: the error says which to use.
    let content = inspect(&local, "hello")["digest"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        inspect(&local, "hello")["manifest_digest"],
        built_manifest.as_str()
    );
    let wrong = local.run(&["pull", &format!("{}@{content}", registry.url("team/hello"))]);
    let err = wrong.failed();
    assert!(
        err.contains("is the content digest of local/hello:0.1.0")
            && err.contains("manifest digest"),
        "{err}"
    );

    let missing = other.run(&["pull", &registry.url("team/hello:9.9.9")]);
    assert!(
        missing
            .failed()
            .contains("team/hello:9.9.9 does not exist in the registry"),
        "{}",
        missing.stderr
    );
}

#[test]
fn a_blob_tampered_in_transit_by_a_proxy_is_refused_naming_its_digest_and_nothing_is_installed() {
    let registry = Registry::start(&[]);
    let gate = TokenGate::start(&registry, "ci", "pw", true);
    let local = Env::new();
    local.run(&["build", &hello()]).ok();
    let target = registry.url("team/hello:0.1.0");
    local.run(&["push", "hello", &target]).ok();

    let other = Env::new();
    let mut cmd = other.command(&[
        "pull",
        &gate.url("team/hello:0.1.0"),
        "--username",
        "ci",
        "--password-stdin",
    ]);
    let refused = with_stdin(&mut cmd, "pw\n");
    assert_eq!(refused.status.code(), Some(1));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("does not match that digest") && err.contains("sha256:"),
        "the error names the digest: {err}"
    );
    let at = err.find("sha256:").unwrap();
    let named = &err[at..at + 71];
    assert!(
        registry.blob_file(named).exists(),
        "the digest named is one of the artifact's blobs: {err}"
    );
    assert!(super::support::installed(&other.run(&["bundles", "--json"]).json()).is_empty());
}

/// Runs `cmd` with `input` on stdin; returns its output.
fn with_stdin(cmd: &mut Command, input: &str) -> std::process::Output {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

/// `push hello <target> --username ci --password-stdin` with `password`.
fn push_with_password(env: &Env, target: &str, password: &str) -> std::process::Output {
    let mut cmd = env.command(&[
        "push",
        "hello",
        target,
        "--username",
        "ci",
        "--password-stdin",
    ]);
    with_stdin(&mut cmd, &format!("{password}\n"))
}

#[test]
fn a_bearer_token_challenge_is_answered_from_the_credentials_and_a_given_token_is_sent_as_is() {
    let registry = Registry::start(&[]);
    let gate = TokenGate::start(&registry, "ci", "s3cret-pass", false);
    let local = Env::new();
    local.run(&["build", &hello()]).ok();
    let target = gate.url("team/hello:0.1.0");

    let anonymous = local.run(&["push", "hello", &target]);
    assert!(
        anonymous.failed().contains("refused the credentials"),
        "{}",
        anonymous.stderr
    );
    let wrong = push_with_password(&local, &target, "not-it");
    assert!(
        String::from_utf8_lossy(&wrong.stderr)
            .contains(&format!("{} refused the credentials", gate.host)),
        "{}",
        String::from_utf8_lossy(&wrong.stderr)
    );
    assert_eq!(gate.issued.load(std::sync::atomic::Ordering::SeqCst), 0);

    let right = push_with_password(&local, &target, "s3cret-pass");
    assert!(
        String::from_utf8_lossy(&right.stdout).contains("2 blobs uploaded"),
        "{}",
        String::from_utf8_lossy(&right.stderr)
    );
    assert!(
        gate.issued.load(std::sync::atomic::Ordering::SeqCst) >= 1,
        "the token came from the realm"
    );

    // A token in SERVICE_REGISTRY_TOKEN goes straight into the requests, without the realm.
    let before = gate.issued.load(std::sync::atomic::Ordering::SeqCst);
    let other = Env::new();
    let pulled = other
        .command(&["pull", &target])
        .env("SERVICE_REGISTRY_TOKEN", super::registry_server::GATE_TOKEN)
        .output()
        .unwrap();
    assert!(
        pulled.status.success(),
        "{}",
        String::from_utf8_lossy(&pulled.stderr)
    );
    assert_eq!(
        gate.issued.load(std::sync::atomic::Ordering::SeqCst),
        before
    );
    assert_eq!(
        inspect(&other, "hello")["digest"],
        inspect(&local, "hello")["digest"]
    );
}

#[test]
fn skopeo_copies_our_artifact_into_the_registry_and_out_of_it() {
    let registry = Registry::start(&[]);
    let local = Env::new();
    local.run(&["build", &hello()]).ok();
    let tar = local.path("hello.tar");
    local
        .run(&["export", "hello", "-o", tar.to_str().unwrap()])
        .ok();
    let copied = registry.url("copied/hello:1");
    let skopeo = |args: &[String]| {
        let out = Command::new("skopeo")
            .args(args)
            .output()
            .expect("skopeo runs");
        assert!(
            out.status.success(),
            "skopeo {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    skopeo(&[
        "copy".into(),
        "--dest-tls-verify=false".into(),
        format!("oci-archive:{}", tar.display()),
        format!("docker://{copied}"),
    ]);
    let other = Env::new();
    other.run(&["pull", &copied]).ok();
    assert_eq!(
        inspect(&other, "hello")["digest"],
        inspect(&local, "hello")["digest"]
    );

    // What we push, skopeo reads and copies to a layout of its own, which we load.
    let ours = registry.url("team/hello:0.1.0");
    local.run(&["push", "hello", &ours]).ok();
    let raw: serde_json::Value = serde_json::from_slice(&skopeo(&[
        "inspect".into(),
        "--raw".into(),
        "--tls-verify=false".into(),
        format!("docker://{ours}"),
    ]))
    .unwrap();
    assert_eq!(raw["artifactType"], "application/vnd.service.bundle.v1");
    let layout = local.path("from-registry");
    skopeo(&[
        "copy".into(),
        "--src-tls-verify=false".into(),
        format!("docker://{ours}"),
        format!("oci:{}:latest", layout.display()),
    ]);
    assert_eq!(
        inspect(&local, layout.to_str().unwrap())["digest"],
        inspect(&local, "hello")["digest"]
    );
}

#[test]
fn credentials_come_from_the_flags_or_the_docker_config_and_wrong_ones_are_refused_clearly() {
    let registry = Registry::start(&[("ci", "s3cret-pass")]);
    let local = Env::new();
    local.run(&["build", &hello()]).ok();
    let target = registry.url("team/hello:0.1.0");
    let with_password = |password: &str| push_with_password(&local, &target, password);
    let wrong = with_password("not-it");
    assert_eq!(wrong.status.code(), Some(1));
    let err = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        err.contains(&format!("{} refused the credentials", registry.host)),
        "{err}"
    );
    assert!(!err.contains("not-it"), "the password is not echoed: {err}");
    let anonymous = local.run(&["push", "hello", &target]);
    assert!(
        anonymous.failed().contains("refused the credentials"),
        "{}",
        anonymous.stderr
    );
    let right = with_password("s3cret-pass");
    assert!(
        right.status.success(),
        "{}",
        String::from_utf8_lossy(&right.stderr)
    );

    // The auths of a Docker config, as `docker login` leaves them.
    use base64::Engine as _;
    let docker = local.path("docker");
    std::fs::create_dir_all(&docker).unwrap();
    let auth = base64::engine::general_purpose::STANDARD.encode("ci:s3cret-pass");
    std::fs::write(
        docker.join("config.json"),
        serde_json::json!({"auths": {registry.host.clone(): {"auth": auth}}}).to_string(),
    )
    .unwrap();
    let other = Env::new();
    let pulled = other
        .command(&["pull", &target])
        .env("DOCKER_CONFIG", &docker)
        .output()
        .unwrap();
    assert!(
        pulled.status.success(),
        "{}",
        String::from_utf8_lossy(&pulled.stderr)
    );
}

#[test]
fn run_with_a_registry_reference_pulls_on_first_use_and_says_so() {
    let registry = Registry::start(&[]);
    let local = Env::new();
    local.run(&["build", &hello()]).ok();
    let target = registry.url("team/hello:0.1.0");
    local.run(&["push", "hello", &target]).ok();

    let other = Env::new();
    let never = other.run(&["inspect", &target]);
    assert!(
        never
            .failed()
            .contains(&format!("service-rs pull {target}")),
        "{}",
        never.stderr
    );
    let first = other.run(&["run", &target, "--prompt", "hi"]);
    assert!(first.ok().contains("You asked: \"hi\""));
    assert!(
        first
            .stderr
            .contains(&format!("pulling {target} (first use)")),
        "{}",
        first.stderr
    );
    let again = other.run(&["run", &target, "--prompt", "again"]);
    assert!(again.ok().contains("You asked: \"again\""));
    assert!(!again.stderr.contains("pulling"), "{}", again.stderr);
    assert_eq!(inspect(&other, &target)["reference"], "local/hello:0.1.0");
}
