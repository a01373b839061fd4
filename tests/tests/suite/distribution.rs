//! Bundles that travel as files: `export` to an OCI layout tar that skopeo reads, `import` back with the same
//! digest, hostile archives refused, and `bundles remove` (also over HTTP and `--remote`).

use serde_json::Value;

use super::operations::Client;
use super::support::{Env, Server};

fn hello() -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/hello")
        .display()
        .to_string()
}

fn digest_of(env: &Env, reference: &str) -> String {
    env.run(&["inspect", reference, "--json"]).json()["digest"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn export_then_import_reproduces_the_digest_and_remove_deletes_the_install() {
    let env = Env::new();
    env.run(&["build", &hello()]).ok();
    let built = digest_of(&env, "hello");
    let tar = env.path("hello.tar");
    let out = env.run(&["export", "hello", "-o", tar.to_str().unwrap()]);
    assert!(
        out.ok().contains("manifest digest sha256:"),
        "{}",
        out.stdout
    );

    assert!(env
        .run(&["bundles", "remove", "hello"])
        .ok()
        .contains("removed local/hello:0.1.0"));
    assert!(super::support::installed(&env.run(&["bundles", "--json"]).json()).is_empty());
    assert!(!env
        .home
        .path()
        .join("bundles/installs/local/hello")
        .exists());
    let gone = env.run(&["bundles", "remove", "hello"]);
    assert!(
        gone.failed()
            .contains("no bundle named \"hello\" is installed"),
        "{}",
        gone.stderr
    );

    env.run(&["import", tar.to_str().unwrap()]).ok();
    assert_eq!(
        digest_of(&env, "hello"),
        built,
        "the round trip keeps the content digest"
    );
    // The same bundle exported again is the same file, byte for byte.
    let again = env.path("again.tar");
    env.run(&["export", "hello", "-o", again.to_str().unwrap()])
        .ok();
    assert_eq!(std::fs::read(&tar).unwrap(), std::fs::read(&again).unwrap());
}

#[test]
fn skopeo_reads_the_exported_archive_and_a_layout_skopeo_writes_loads() {
    let env = Env::new();
    env.run(&["build", &hello()]).ok();
    let tar = env.path("hello.tar");
    env.run(&["export", "hello", "-o", tar.to_str().unwrap()])
        .ok();
    let inspected = std::process::Command::new("skopeo")
        .args(["inspect", "--raw"])
        .arg(format!("oci-archive:{}", tar.display()))
        .output()
        .expect("skopeo runs (.ci/deps installs it)");
    assert!(
        inspected.status.success(),
        "{}",
        String::from_utf8_lossy(&inspected.stderr)
    );
    let manifest: Value = serde_json::from_slice(&inspected.stdout).unwrap();
    assert_eq!(
        manifest["artifactType"],
        "application/vnd.service.bundle.v1"
    );
    assert_eq!(
        manifest["layers"][0]["digest"],
        digest_of(&env, "hello").as_str()
    );

    // skopeo writes its own layout (no mediaType in index.json); it loads and runs as a bundle.
    let layout = env.path("copied");
    let copied = std::process::Command::new("skopeo")
        .arg("copy")
        .arg(format!("oci-archive:{}", tar.display()))
        .arg(format!("oci:{}:latest", layout.display()))
        .output()
        .unwrap();
    assert!(
        copied.status.success(),
        "{}",
        String::from_utf8_lossy(&copied.stderr)
    );
    let index: Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    assert!(
        index.get("mediaType").is_none(),
        "skopeo leaves the index mediaType out: {index}"
    );
    let answer = env.run(&["run", layout.to_str().unwrap(), "--prompt", "hi"]);
    assert!(
        answer.ok().contains("You asked: \"hi\""),
        "{}",
        answer.stderr
    );
}

/// A tar of `entries` (path, bytes, or None for a symlink to /etc/passwd).
fn tar_of(entries: &[(&str, Option<&[u8]>)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, content) in entries {
        let mut header = tar::Header::new_gnu();
        match content {
            Some(bytes) => {
                header.set_size(bytes.len() as u64);
                header.set_mode(0o644);
                header.set_entry_type(tar::EntryType::Regular);
                header.set_cksum();
                builder.append_data(&mut header, path, *bytes).unwrap();
            }
            None => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_size(0);
                builder
                    .append_link(&mut header, path, "/etc/passwd")
                    .unwrap();
            }
        }
    }
    builder.into_inner().unwrap()
}

#[test]
fn an_archive_with_a_link_or_a_tampered_blob_installs_nothing() {
    let env = Env::new();
    env.run(&["build", &hello()]).ok();
    let tar = env.path("hello.tar");
    env.run(&["export", "hello", "-o", tar.to_str().unwrap()])
        .ok();
    env.run(&["bundles", "remove", "hello"]).ok();

    // Every file of the real export, with the layer's bytes changed but its name (the digest) kept.
    let mut archive = tar::Archive::new(std::fs::File::open(&tar).unwrap());
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        if entry.header().entry_type().is_file() {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut bytes).unwrap();
            files.push((entry.path().unwrap().display().to_string(), bytes));
        }
    }
    let layer = digest_of_layer(&files);
    let tampered: Vec<(&str, Option<&[u8]>)> = files
        .iter()
        .map(|(p, b)| (p.as_str(), Some(b.as_slice())))
        .collect();
    let mut changed = files
        .iter()
        .find(|(p, _)| p.ends_with(&layer))
        .unwrap()
        .1
        .clone();
    let last = changed.len() - 600;
    changed[last] ^= 0x20;
    let tampered: Vec<(&str, Option<&[u8]>)> = tampered
        .into_iter()
        .map(|(p, b)| {
            if p.ends_with(&layer) {
                (p, Some(changed.as_slice()))
            } else {
                (p, b)
            }
        })
        .collect();
    let bad = env.path("tampered.tar");
    std::fs::write(&bad, tar_of(&tampered)).unwrap();
    let refused = env.run(&["import", bad.to_str().unwrap()]);
    assert!(
        refused.failed().contains(&layer),
        "the error names the digest: {}",
        refused.stderr
    );

    let linked = env.path("linked.tar");
    std::fs::write(
        &linked,
        tar_of(&[("oci-layout", Some(b"{}".as_slice())), ("index.json", None)]),
    )
    .unwrap();
    let refused = env.run(&["import", linked.to_str().unwrap()]);
    assert!(
        refused
            .failed()
            .contains("index.json: only files and directories"),
        "{}",
        refused.stderr
    );
    assert!(
        super::support::installed(&env.run(&["bundles", "--json"]).json()).is_empty(),
        "nothing was installed"
    );
}

/// The hex digest of the layer blob listed in the manifest among `files`.
fn digest_of_layer(files: &[(String, Vec<u8>)]) -> String {
    let index: Value =
        serde_json::from_slice(&files.iter().find(|(p, _)| p == "index.json").unwrap().1).unwrap();
    let manifest_hex = index["manifests"][0]["digest"]
        .as_str()
        .unwrap()
        .trim_start_matches("sha256:")
        .to_string();
    let manifest: Value = serde_json::from_slice(
        &files
            .iter()
            .find(|(p, _)| p.ends_with(&manifest_hex))
            .unwrap()
            .1,
    )
    .unwrap();
    manifest["layers"][0]["digest"]
        .as_str()
        .unwrap()
        .trim_start_matches("sha256:")
        .to_string()
}

#[tokio::test]
async fn over_http_remove_refuses_a_bundle_in_use_unless_forced_and_remote_exports_and_imports() {
    let env = Env::new();
    env.run(&["build", &hello()]).ok();
    let server = Server::start(env.home.path(), &[], &[]);
    let api = Client::of(&server);
    let (status, session) = api
        .json(
            reqwest::Method::POST,
            "/sessions",
            Some(serde_json::json!({"bundle_ref": "hello"})),
        )
        .await;
    assert_eq!(status, 201);
    let id = session["id"].as_str().unwrap().to_string();
    let (status, _) = api
        .json(
            reqwest::Method::POST,
            &format!("/sessions/{id}/run-sync"),
            Some(serde_json::json!({"input": {"prompt": "hi"}})),
        )
        .await;
    assert_eq!(status, 200);

    let (status, refused) = api
        .json(reqwest::Method::DELETE, "/bundles/hello", None)
        .await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["code"], "bundle_in_use");
    assert!(
        refused["error"]["message"].as_str().unwrap().contains(&id),
        "{refused}"
    );

    // Over --remote (the token comes from the server's store, as on the server's machine): export while
    // installed, remove with --force, import back.
    let tar = env.path("remote.tar");
    let tar = tar.to_str().unwrap();
    let remote = |args: &[&str]| {
        let mut all = vec!["--remote", server.base.as_str()];
        all.extend_from_slice(args);
        env.run(&all)
    };
    let out = remote(&["export", "hello", "-o", tar]);
    assert!(out.ok().contains("Wrote hello"), "{}", out.stderr);
    let out = remote(&["bundles", "remove", "hello", "--force"]);
    assert!(
        out.ok().contains("removed local/hello:0.1.0"),
        "{}",
        out.stderr
    );
    let (_, bundles) = api.json(reqwest::Method::GET, "/bundles", None).await;
    assert!(super::support::installed(&bundles).is_empty());
    let out = remote(&["import", tar]);
    assert!(
        out.ok()
            .contains("Installed local/hello:0.1.0 on the server"),
        "{}",
        out.stderr
    );
    let (_, bundles) = api.json(reqwest::Method::GET, "/bundles", None).await;
    assert_eq!(bundles[0]["reference"], "local/hello:0.1.0");
}

/// A tar whose one file entry carries `name` as written, unchecked (`..` included).
fn raw_tar(name: &str, bytes: &[u8]) -> Vec<u8> {
    let mut header = tar::Header::new_gnu();
    header.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name.as_bytes());
    header.set_size(bytes.len() as u64);
    header.set_mode(0o644);
    header.set_entry_type(tar::EntryType::Regular);
    header.set_cksum();
    let mut out = header.as_bytes().to_vec();
    out.extend_from_slice(bytes);
    out.resize(out.len().div_ceil(512) * 512 + 1024, 0);
    out
}

#[tokio::test]
async fn a_hostile_client_cannot_plant_files_through_an_upload_or_upload_from_a_foreign_page() {
    let env = Env::new();
    env.run(&["build", &hello()]).ok();
    let server = Server::start(env.home.path(), &[], &[]);
    let api = Client::of(&server);
    let token = server.token.clone().unwrap();
    let http = reqwest::Client::new();
    let upload = |body: Vec<u8>, content_type: &'static str, origin: Option<&'static str>| {
        let mut req = http
            .post(server.url("/bundles/import"))
            .bearer_auth(&token)
            .header("content-type", content_type)
            .body(body);
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        req.send()
    };
    let marker = format!("planted-{}", std::process::id());
    for name in [format!("../../{marker}"), format!("../{marker}")] {
        let resp = upload(raw_tar(&name, b"owned"), "application/x-tar", None)
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 422, "{name}");
        let body: Value = resp.json().await.unwrap();
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("leaves the archive"),
            "{body}"
        );
    }
    let linked = tar_of(&[("oci-layout", Some(b"{}".as_slice())), ("index.json", None)]);
    let resp = upload(linked, "application/x-tar", None).await.unwrap();
    assert_eq!(resp.status().as_u16(), 422);
    let planted = walkdir::WalkDir::new(std::env::temp_dir())
        .max_depth(4)
        .into_iter()
        .flatten()
        .any(|e| e.file_name().to_string_lossy() == marker);
    assert!(!planted, "a file named {marker} was written");

    // A page on another site cannot upload: a form's content types are refused, and a tar needs a preflight
    // whose Origin the server refuses.
    let tar = env.path("hello.tar");
    env.run(&["export", "hello", "-o", tar.to_str().unwrap()])
        .ok();
    let bytes = std::fs::read(&tar).unwrap();
    let form = upload(bytes.clone(), "text/plain", None).await.unwrap();
    assert_eq!(form.status().as_u16(), 415);
    let foreign = upload(bytes, "application/x-tar", Some("https://evil.example"))
        .await
        .unwrap();
    assert_eq!(foreign.status().as_u16(), 403);

    // A directory outside --allow-path is not a bundle a client may remove.
    let (status, refused) = api
        .json(reqwest::Method::DELETE, "/bundles/%2Fetc", None)
        .await;
    assert_eq!(status, 403, "{refused}");
    let (_, bundles) = api.json(reqwest::Method::GET, "/bundles", None).await;
    assert_eq!(
        super::support::installed(&bundles).len(),
        1,
        "nothing was installed or removed"
    );
}

#[test]
fn export_to_dash_writes_the_archive_to_stdout_and_no_file_named_dash() {
    let env = Env::new();
    env.run(&["build", &hello()]).ok();
    let tar = env.path("hello.tar");
    env.run(&["export", "hello", "-o", tar.to_str().unwrap()])
        .ok();
    let piped = env
        .command(&["export", "hello", "-o", "-"])
        .output()
        .unwrap();
    assert!(
        piped.status.success(),
        "{}",
        String::from_utf8_lossy(&piped.stderr)
    );
    assert_eq!(
        piped.stdout,
        std::fs::read(&tar).unwrap(),
        "the same reproducible archive"
    );
    assert!(String::from_utf8_lossy(&piped.stderr).contains("to stdout (manifest digest sha256:"));
    assert!(!env.path("-").exists(), "no file named -");
}
