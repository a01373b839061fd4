//! Attacks through the surfaces a session reaches besides its own sandbox: a host directory another sandbox can
//! rewrite, an archive or a registry artifact that unpacks into the store, the operator's terminal, and a flood of
//! events the journal has to hold. Each runs the real attack (a real bwrap sandbox, a real `docker-registry`, a
//! real terminal in tmux) and shows that it fails.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use super::operations::Client;
use super::registry_server::Registry;
use super::support::{binary, wait_until, Env, Server};
use super::tmux::Tmux;

const WRITABLE: &str = r#"{ mode: "workspace_write", permissions: { network: [] } }"#;

fn real(p: &Path) -> std::path::PathBuf {
    std::fs::canonicalize(p).unwrap()
}

async fn turn(api: &Client, id: &str) -> (u16, Value) {
    api.json(
        reqwest::Method::POST,
        &format!("/sessions/{id}/run-sync"),
        Some(json!({"input": {"prompt": "go"}})),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_dir_another_sandbox_swapped_for_a_link_is_not_bound_and_the_host_dir_stays_untouched(
) {
    let env = Env::new();
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let (root, outside) = (real(root.path()), real(outside.path()));
    std::fs::write(outside.join("secret"), "host-secret-4711").unwrap();
    let proj = root.join("proj");
    std::fs::create_dir_all(proj.join("sub")).unwrap();
    // A project its user owns, as a root server's sandboxes run as the owner (a root-owned one would be refused).
    super::support::give_to_sandbox(&proj);
    // Session A works in proj; its command swaps proj/sub, where session B works, for a link out of the root.
    super::sandbox::bundle(
        &env,
        "swapper",
        WRITABLE,
        &format!(
            "rm -rf /workspace/sub && ln -s {} /workspace/sub && echo swapped",
            outside.display()
        ),
    );
    super::sandbox::bundle(
        &env,
        "victim",
        WRITABLE,
        "cat /workspace/secret; echo planted > /workspace/planted; echo victim-ran",
    );
    let server = Server::start(
        env.home.path(),
        &["--workspace-root", root.to_str().unwrap()],
        &[],
    );
    let api = Client::of(&server);
    let create = |bundle: &str, cwd: &Path| {
        let body = json!({"bundle_ref": env.path(bundle), "cwd": cwd});
        let api = &api;
        async move {
            let (status, record) = api
                .json(reqwest::Method::POST, "/sessions", Some(body))
                .await;
            assert_eq!(status, 201, "{record}");
            record["id"].as_str().unwrap().to_string()
        }
    };
    let victim = create("victim", &proj.join("sub")).await;
    let swapper = create("swapper", &proj).await;
    let (status, swapped) = turn(&api, &swapper).await;
    assert_eq!(status, 200, "{swapped}");
    assert!(swapped.to_string().contains("swapped"), "{swapped}");
    assert!(
        std::fs::symlink_metadata(proj.join("sub"))
            .unwrap()
            .file_type()
            .is_symlink(),
        "the attack must have put a link in place on the host"
    );

    let (_, result) = turn(&api, &victim).await;
    let text = result.to_string();
    assert!(
        !text.contains("host-secret-4711") && !text.contains("victim-ran"),
        "the victim's sandbox ran in the directory the link points to: {text}"
    );
    assert!(
        text.contains("symbolic link"),
        "the start fails naming the link: {text}"
    );
    assert!(
        !outside.join("planted").exists(),
        "a file was written outside the workspace root"
    );
    // A new session cannot be created through the link either.
    let (status, refused) = api
        .json(
            reqwest::Method::POST,
            "/sessions",
            Some(json!({"bundle_ref": env.path("victim"), "cwd": proj.join("sub")})),
        )
        .await;
    assert_eq!(status, 403, "{refused}");
}

/// One entry added to a layer: path, kind, mode, content (a link's target for a hard link).
type Extra<'a> = (&'a str, tar::EntryType, u32, &'a [u8]);

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// The exported `good` archive with `extra` entries added to its layer, the digests of the layer, the manifest and
/// the index made to match: an archive that verifies, as an attacker who controls a registry or a file would make.
fn crafted(good: &Path, extra: &[Extra<'_>]) -> Vec<u8> {
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for entry in tar::Archive::new(std::fs::File::open(good).unwrap())
        .entries()
        .unwrap()
    {
        let mut entry = entry.unwrap();
        if entry.header().entry_type().is_file() {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut bytes).unwrap();
            files.push((entry.path().unwrap().display().to_string(), bytes));
        }
    }
    let blob = |files: &[(String, Vec<u8>)], hex: &str| -> Vec<u8> {
        files
            .iter()
            .find(|(p, _)| p.ends_with(hex))
            .unwrap()
            .1
            .clone()
    };
    let mut index: Value =
        serde_json::from_slice(&files.iter().find(|(p, _)| p == "index.json").unwrap().1).unwrap();
    let manifest_hex = index["manifests"][0]["digest"].as_str().unwrap()[7..].to_string();
    let mut manifest: Value = serde_json::from_slice(&blob(&files, &manifest_hex)).unwrap();
    let layer_hex = manifest["layers"][0]["digest"].as_str().unwrap()[7..].to_string();

    let mut layer = tar::Builder::new(Vec::new());
    let old = blob(&files, &layer_hex);
    for entry in tar::Archive::new(old.as_slice()).entries().unwrap() {
        let mut entry = entry.unwrap();
        let header = entry.header().clone();
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut data).unwrap();
        layer.append(&header, data.as_slice()).unwrap();
    }
    for (path, kind, mode, data) in extra {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(*kind);
        h.set_mode(*mode);
        h.set_uid(0);
        h.set_gid(0);
        if *kind == tar::EntryType::Link {
            h.set_size(0);
            h.set_link_name(std::str::from_utf8(data).unwrap()).unwrap();
            layer.append_data(&mut h, path, &[][..]).unwrap();
        } else {
            if matches!(kind, tar::EntryType::Char | tar::EntryType::Block) {
                h.set_device_major(1).unwrap();
                h.set_device_minor(3).unwrap();
            }
            h.set_size(data.len() as u64);
            layer.append_data(&mut h, path, *data).unwrap();
        }
    }
    let layer = layer.into_inner().unwrap();
    let new_layer_hex = sha256_hex(&layer);
    manifest["layers"][0]["digest"] = json!(format!("sha256:{new_layer_hex}"));
    manifest["layers"][0]["size"] = json!(layer.len());
    let manifest_bytes = serde_json::to_vec(&manifest).unwrap();
    let new_manifest_hex = sha256_hex(&manifest_bytes);
    index["manifests"][0]["digest"] = json!(format!("sha256:{new_manifest_hex}"));
    index["manifests"][0]["size"] = json!(manifest_bytes.len());

    let mut out = tar::Builder::new(Vec::new());
    let mut add = |path: &str, bytes: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_size(bytes.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        out.append_data(&mut h, path, bytes).unwrap();
    };
    for (path, bytes) in &files {
        if !(path.ends_with(&layer_hex) || path.ends_with(&manifest_hex) || path == "index.json") {
            add(path, bytes);
        }
    }
    add(&format!("blobs/sha256/{new_layer_hex}"), &layer);
    add(&format!("blobs/sha256/{new_manifest_hex}"), &manifest_bytes);
    add("index.json", &serde_json::to_vec(&index).unwrap());
    out.into_inner().unwrap()
}

/// Every entry under `home` whose mode another user could abuse: setuid, setgid or sticky bits, or world-writable.
fn dangerous_modes(home: &Path) -> Vec<String> {
    walkdir::WalkDir::new(home)
        .into_iter()
        .flatten()
        .filter(|e| !e.path_is_symlink())
        .filter_map(|e| {
            let mode = e.metadata().ok()?.mode() & 0o7777;
            (mode & 0o7002 != 0).then(|| format!("{:o} {}", mode, e.path().display()))
        })
        .collect()
}

#[track_caller]
fn assert_store_is_safe(home: &Path) {
    assert_eq!(
        dangerous_modes(home),
        Vec::<String>::new(),
        "modes an archive chose survived in the store"
    );
    let root = std::fs::metadata(home).unwrap().mode() & 0o777;
    assert_eq!(root, 0o700, "the store is private to its user");
}

const SUID_ID: &[u8] = b"#!/bin/sh\nid\n";

fn hostile_entries() -> Vec<Extra<'static>> {
    vec![
        ("resources/id", tar::EntryType::Regular, 0o4755, SUID_ID),
        ("resources/open", tar::EntryType::Directory, 0o777, b""),
        (
            "resources/open/shared",
            tar::EntryType::Regular,
            0o666,
            b"x",
        ),
        ("resources/sticky", tar::EntryType::Directory, 0o3777, b""),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crafted_archive_plants_no_setuid_or_world_writable_file_through_import_upload_or_pull() {
    let source = Env::new();
    let hello = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/hello");
    source.run(&["build", hello.to_str().unwrap()]).ok();
    let good = source.path("hello.tar");
    source
        .run(&["export", "hello", "-o", good.to_str().unwrap()])
        .ok();
    let evil = source.path("evil.tar");
    std::fs::write(&evil, crafted(&good, &hostile_entries())).unwrap();

    // 1. `import` on the command line.
    let imported = Env::new();
    imported.run(&["import", evil.to_str().unwrap()]).ok();
    assert_store_is_safe(imported.home.path());
    let layout_copy = walkdir::WalkDir::new(imported.home.path().join("bundles/layouts"))
        .into_iter()
        .flatten()
        .find(|e| e.file_name() == "id")
        .expect("the layer was unpacked into the layout cache");
    assert_eq!(
        layout_copy.metadata().unwrap().mode() & 0o7777,
        0o755,
        "an executable keeps only rwxr-xr-x"
    );

    // 2. `POST /bundles/import`.
    let uploaded = Env::new();
    let server = Server::start(uploaded.home.path(), &[], &[]);
    let resp = reqwest::Client::new()
        .post(server.url("/bundles/import"))
        .bearer_auth(server.token.clone().unwrap())
        .header("content-type", "application/x-tar")
        .body(std::fs::read(&evil).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    assert_store_is_safe(uploaded.home.path());

    // 3. `pull` from a real registry the crafted artifact was copied into.
    let registry = Registry::start(&[]);
    let target = registry.url("evil/hello:1");
    let copied = std::process::Command::new("skopeo")
        .args(["copy", "--dest-tls-verify=false"])
        .arg(format!("oci-archive:{}", evil.display()))
        .arg(format!("docker://{target}"))
        .output()
        .unwrap();
    assert!(
        copied.status.success(),
        "{}",
        String::from_utf8_lossy(&copied.stderr)
    );
    let pulled = Env::new();
    pulled.run(&["pull", &target]).ok();
    assert_store_is_safe(pulled.home.path());

    // A layer whose bytes no longer match its digest is refused naming the archive's own path, not the server's
    // temporary directory.
    let mut tampered = tar::Builder::new(Vec::new());
    for entry in tar::Archive::new(std::fs::File::open(&good).unwrap())
        .entries()
        .unwrap()
    {
        let mut entry = entry.unwrap();
        let mut header = entry.header().clone();
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut data).unwrap();
        if data.len() > 1024 && entry.path().unwrap().starts_with("blobs") {
            let last = data.len() - 600;
            data[last] ^= 0x20;
        }
        header.set_cksum();
        tampered.append(&header, data.as_slice()).unwrap();
    }
    let resp = reqwest::Client::new()
        .post(server.url("/bundles/import"))
        .bearer_auth(server.token.clone().unwrap())
        .header("content-type", "application/x-tar")
        .body(tampered.into_inner().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 422);
    let body: Value = resp.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("the uploaded archive/blobs/sha256/") && !message.contains("/tmp"),
        "the error names the blob in the archive, no server path: {message}"
    );

    // A device node or a hard link is refused by name, whichever way it comes, and nothing is installed.
    for (name, extra) in [
        (
            "resources/null",
            ("resources/null", tar::EntryType::Char, 0o666, &b""[..]),
        ),
        (
            "resources/passwd",
            (
                "resources/passwd",
                tar::EntryType::Link,
                0o644,
                &b"agent.yaml"[..],
            ),
        ),
    ] {
        let bad = source.path("bad.tar");
        std::fs::write(&bad, crafted(&good, &[extra])).unwrap();
        let fresh = Env::new();
        let refused = fresh.run(&["import", bad.to_str().unwrap()]);
        assert!(
            refused
                .failed()
                .contains(&format!("{name}: only files and directories")),
            "{}",
            refused.stderr
        );
        let resp = reqwest::Client::new()
            .post(server.url("/bundles/import"))
            .bearer_auth(server.token.clone().unwrap())
            .header("content-type", "application/x-tar")
            .body(std::fs::read(&bad).unwrap())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 422);
        let body: Value = resp.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(name), "{message}");
        assert!(
            !message.contains("/tmp")
                && !message.contains(&*uploaded.home.path().to_string_lossy()),
            "the error names no server path: {message}"
        );
        assert_store_is_safe(fresh.home.path());
    }
}

#[test]
fn a_layout_cache_an_older_version_filled_with_setuid_files_is_unpacked_again_before_use() {
    let env = Env::new();
    let hello = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/hello");
    let layout = env.path("layout");
    env.run(&[
        "build",
        hello.to_str().unwrap(),
        "--output",
        layout.to_str().unwrap(),
    ])
    .ok();
    let layout_ref = layout.to_str().unwrap();
    env.run(&["inspect", layout_ref]).ok();
    let cached = walkdir::WalkDir::new(env.home.path().join("bundles/layouts"))
        .min_depth(1)
        .max_depth(1)
        .into_iter()
        .flatten()
        .next()
        .expect("a cached layer")
        .into_path();
    // What an unpack that kept the archive's modes left behind.
    use std::os::unix::fs::PermissionsExt;
    let planted = cached.join("resources/id");
    std::fs::write(&planted, SUID_ID).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o4755)).unwrap();
    std::fs::set_permissions(
        cached.join("resources"),
        std::fs::Permissions::from_mode(0o777),
    )
    .unwrap();
    env.run(&["inspect", layout_ref]).ok();
    assert!(!planted.exists(), "the tampered cache was used as it was");
    assert_store_is_safe(env.home.path());
}

#[test]
fn terminal_escapes_from_a_sandboxed_command_reach_the_terminal_only_as_visible_text() {
    let env = Env::new();
    // OSC 2 retitles the pane, OSC 52 writes the clipboard, CSI erases the line before it and moves the cursor.
    super::sandbox::bundle(
        &env,
        "esc",
        WRITABLE,
        r"printf 'before\033]2;PWNED-TITLE\007\033]52;c;cHduZWQ=\007\033[2K\033[1Aafter\n'",
    );
    for verbose in [true, false] {
        let command = format!(
            "cd {} && env SERVICE_HOME={} {} run ./esc --prompt go {}; echo EXIT=$?; sleep 60",
            env.work.path().display(),
            env.home.path().display(),
            binary().display(),
            if verbose { "--verbose" } else { "" }
        );
        let tmux = Tmux::start(&command);
        let screen = tmux.wait_for("EXIT=");
        assert!(screen.contains("EXIT=0"), "{screen}");
        let title = tmux
            .cmd(&["display-message", "-p", "-t", "main", "#{pane_title}"])
            .output()
            .unwrap();
        let title = String::from_utf8_lossy(&title.stdout);
        assert!(
            !title.contains("PWNED"),
            "the sandbox retitled the terminal (verbose: {verbose}): {title}"
        );
        assert!(
            screen.contains("before^[]2;PWNED-TITLE^G^[]52;c;cHduZWQ=^G^[[2K^[[1Aafter"),
            "the sequences are shown as text (verbose: {verbose}):\n{screen}"
        );
    }
}

#[test]
fn raw_output_to_a_pipe_keeps_the_bytes_and_the_default_escapes_them() {
    let env = Env::new();
    super::sandbox::bundle(&env, "esc", WRITABLE, r"printf 'a\033]2;t\007b\n'");
    let escaped = env.run(&["run", "./esc", "--prompt", "go"]);
    assert!(escaped.ok().contains("a^[]2;t^Gb"), "{}", escaped.stdout);
    let raw = env.run(&["run", "./esc", "--prompt", "go", "--raw"]);
    assert!(raw.ok().contains("a\x1b]2;t\x07b"), "{:?}", raw.stdout);
    let id = env.run(&["sessions", "--json"]).json()[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let shown = env.run(&["sessions", "show", &id]);
    assert!(
        shown.ok().contains("^[]2;t^G") && !shown.stdout.contains('\x1b'),
        "{}",
        shown.stdout
    );
}

/// A Python flood of refused requests through the egress proxy: `total` requests to hosts the bundle does not
/// list, one connection each, after `delay` seconds. Stops early when the proxy closes connections unanswered.
fn flood_script(total: usize, delay: f32) -> String {
    format!(
        r#"import os, socket, time, urllib.parse
time.sleep({delay})
proxy = urllib.parse.urlparse(os.environ["HTTP_PROXY"])
refused = closed = 0
for i in range({total}):
    try:
        s = socket.create_connection((proxy.hostname, proxy.port), timeout=5)
        s.sendall(b"GET http://h%d.unlisted.test/ HTTP/1.1\r\nHost: h%d.unlisted.test\r\nConnection: close\r\n\r\n" % (i, i))
        data = s.recv(4096)
        s.close()
        if data:
            refused += 1
        else:
            closed += 1
    except OSError:
        closed += 1
    if closed > 200:
        break
print("refused", refused, "closed", closed)
"#
    )
}

const QUOTA_MB: u64 = 1;
/// What the journal may hold past the quota: the event that crossed it, the turn's end and the one summary.
const SLACK: u64 = 64 * 1024;

fn journal_size(home: &Path, id: &str) -> u64 {
    std::fs::metadata(home.join("sessions").join(id).join("events.jsonl"))
        .map(|m| m.len())
        .unwrap_or(0)
}

#[test]
fn a_refused_connection_flood_from_a_command_stops_at_the_journal_quota() {
    let env = Env::new();
    std::fs::create_dir_all(env.path("ws")).unwrap();
    super::support::give_to_sandbox(&env.path("ws"));
    std::fs::write(env.path("ws/flood.py"), flood_script(20000, 0.0)).unwrap();
    super::sandbox::bundle(
        &env,
        "flood",
        r#"{ mode: "workspace_write", permissions: { network: ["allowed.test"] } }"#,
        "python3 /workspace/flood.py",
    );
    let out = env
        .command(&["run", "./flood", "--prompt", "go", "--cwd", "ws"])
        .env("SERVICE_JOURNAL_QUOTA_MB", QUOTA_MB.to_string())
        .output()
        .unwrap();
    let id = env.run(&["sessions", "--json"]).json()[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_bounded_and_summarised(env.home.path(), &id, &String::from_utf8_lossy(&out.stderr));
}

/// The journal of session `id` stayed within its quota and says what it left out.
#[track_caller]
fn assert_bounded_and_summarised(home: &Path, id: &str, context: &str) {
    let size = journal_size(home, id);
    assert!(
        size <= QUOTA_MB * 1024 * 1024 + SLACK,
        "the journal grew to {size} bytes past its quota: {context}"
    );
    let events =
        std::fs::read_to_string(home.join("sessions").join(id).join("events.jsonl")).unwrap();
    assert!(
        events.contains("\"network_refusals_suppressed\""),
        "the journal ({size} bytes) says what it left out: {context}"
    );
}

#[test]
fn a_refused_connection_flood_from_an_mcp_server_between_turns_stops_at_the_journal_quota() {
    let env = Env::new();
    super::mcp::bundle(
        &env,
        "mcpflood",
        "ok",
        json!({"command": "/bin/sh", "args": ["-c", "python3 /workspace/flood.py & exec /workspace/mcp-fixture ok marker-mcpflood"]}),
        json!({}),
        &[("Bash", json!({"command": "echo turn-done"}))],
    );
    // The fixture's bundle has no network; this one lists a host, so its server gets the proxy.
    super::support::edit(
        &env.path("mcpflood/service.bundle.json5"),
        r#""network":[]"#,
        r#""network":["allowed.test"]"#,
    );
    std::fs::write(env.path("ws/flood.py"), flood_script(20000, 1.5)).unwrap();
    let server = Server::start(
        env.home.path(),
        &["--workspace-root", env.work.path().to_str().unwrap()],
        &[("SERVICE_JOURNAL_QUOTA_MB", &QUOTA_MB.to_string())],
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let api = Client::of(&server);
    let id = rt.block_on(async {
        let (status, record) = api
            .json(
                reqwest::Method::POST,
                "/sessions",
                Some(json!({"bundle_ref": env.path("mcpflood"), "cwd": env.path("ws")})),
            )
            .await;
        assert_eq!(status, 201, "{record}");
        let id = record["id"].as_str().unwrap().to_string();
        let (status, result) = turn(&api, &id).await;
        assert_eq!(status, 200, "{result}");
        assert!(result.to_string().contains("turn-done"), "{result}");
        id
    });
    // The flood starts after the turn, while the session is idle; the journal must stop growing at the quota.
    let home = env.home.path().to_path_buf();
    let last = std::cell::Cell::new(0);
    wait_until(
        Duration::from_secs(60),
        || {
            let now = journal_size(&home, &id);
            let settled = now == last.get() && now >= QUOTA_MB * 1024 * 1024;
            last.set(now);
            std::thread::sleep(Duration::from_millis(500));
            settled
        },
        || format!("the journal never reached its quota: {} bytes", last.get()),
    );
    std::thread::sleep(Duration::from_secs(2));
    // The summary is written when the worker's proxy ends.
    server.terminate();
    assert_bounded_and_summarised(&home, &id, "between turns");
}

#[test]
fn a_root_supervisors_sandbox_reads_no_root_only_file_and_writes_no_root_owned_project() {
    let env = Env::new();
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("secret"), "root-only-4711").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        project.path().join("secret"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    // Readable by root's group: a sandbox that kept the supervisor's groups could read it.
    std::fs::write(project.path().join("group-secret"), "root-group-4712").unwrap();
    std::fs::set_permissions(
        project.path().join("group-secret"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    std::fs::set_permissions(project.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let probe = "cat /workspace/secret /workspace/group-secret 2>&1; ls /etc/ssl; ls /etc/ssl/private 2>&1; \
                 echo probed";
    super::sandbox::bundle(
        &env,
        "reader",
        r#"{ mode: "read_only", permissions: { network: ["*"] } }"#,
        probe,
    );
    super::sandbox::bundle(
        &env,
        "writer",
        WRITABLE,
        "touch /workspace/planted; echo wrote",
    );
    let cwd = project.path().to_str().unwrap();
    let root = nix::unistd::geteuid().is_root();

    let read = env.run(&["run", "./reader", "--prompt", "go", "--cwd", cwd]);
    let text = read.ok();
    assert!(text.contains("probed"), "{text}");
    assert!(
        !text.contains("root-only-4711"),
        "the sandbox read a file only its owner may read: {text}"
    );
    assert!(
        text.contains("certs") && !text.contains("private\n") && text.contains("No such file"),
        "/etc/ssl shows its certificates only: {text}"
    );

    if root {
        assert!(
            !text.contains("root-group-4712"),
            "the sandbox read a file only root's group may read: {text}"
        );
    }

    let wrote = env.run(&["run", "./writer", "--prompt", "go", "--cwd", cwd]);
    if root {
        let refused = wrote.failed();
        assert!(
            refused.contains("belongs to root") && refused.contains("sandbox_user"),
            "a writable sandbox over a root-owned directory is refused, saying what to do: {refused}"
        );
        assert!(!project.path().join("planted").exists());
        // The opt-in gives root back, which shows the probe above could read the file.
        let as_root = env.run(&[
            "run",
            "./reader",
            "--prompt",
            "go",
            "--cwd",
            cwd,
            "--sandbox-user",
            "root",
        ]);
        assert!(
            as_root.ok().contains("root-only-4711"),
            "{}",
            as_root.stdout
        );
    } else {
        // A normal user's sandbox is that user, who may not write a root-owned directory either.
        assert!(!project.path().join("planted").exists());
    }
    // A directory only root may enter (`mktemp -d` makes them): refused before bwrap, saying why and what to do.
    std::fs::set_permissions(project.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let private = env.run(&["run", "./reader", "--prompt", "go", "--cwd", cwd]);
    if root {
        let refused = private.failed();
        assert!(
            refused.contains("only root may enter it") && refused.contains("chmod o+rx"),
            "{refused}"
        );
    } else {
        assert!(private.ok().contains("probed"));
    }
}
