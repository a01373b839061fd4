//! init, build, OCI layouts, references, inspect and bundles, through the real binary.

use pretty_assertions::assert_eq;
use serde_json::json;

use super::support::{edit, files_under, Env};

#[test]
fn init_creates_the_template_with_every_setting() {
    let env = Env::new();
    let dir = env.init("my-agent");
    for file in ["service.bundle.json5", "agent.yaml", "README.md"] {
        assert!(dir.join(file).is_file(), "{file} missing");
    }
    assert!(dir.join("skills").is_dir() && dir.join("resources").is_dir());

    let info = env.run(&["inspect", "./my-agent", "--json"]).json();
    assert_eq!(info["id"], "my-agent");
    assert_eq!(info["executor"], "react");
    assert_eq!(info["memory"]["provider"], "sliding_window");
    assert_eq!(info["model"]["provider"], "anthropic");
    assert!(!info["model"]["name"].as_str().unwrap().is_empty());
    assert_eq!(
        info["tools"],
        json!([
            "Read",
            "Write",
            "Edit",
            "Bash",
            "Glob",
            "Grep",
            "Skill",
            "UpdatePlan"
        ])
    );
    assert_eq!(info["sandbox"]["mode"], "read_only");
    assert_eq!(info["sandbox"]["permissions"]["network"], json!(["*"]));
    assert_eq!(info["sandbox"]["system_tools_mode"], "standard");
    assert!(env.store_files().iter().all(|f| !f.contains("installs")));
}

#[test]
fn init_refuses_a_non_empty_directory_unless_forced() {
    let env = Env::new();
    std::fs::create_dir(env.path("busy")).unwrap();
    std::fs::write(env.path("busy/notes.txt"), "keep me").unwrap();
    let err = env.run(&["init", "busy"]).failed().to_string();
    assert!(err.contains("is not empty; pass --force"), "{err}");
    assert!(!env.path("busy/service.bundle.json5").exists());
    env.run(&["init", "busy", "--force"]).ok();
    assert!(env.path("busy/service.bundle.json5").is_file());
    assert_eq!(
        std::fs::read_to_string(env.path("busy/notes.txt")).unwrap(),
        "keep me"
    );
}

#[test]
fn build_installs_at_the_exact_path_and_replaces_the_same_version() {
    let env = Env::new();
    let dir = env.init("hello");
    env.run(&["build", "hello"]).ok();
    let installed = env.home.path().join("bundles/installs/local/hello/0.1.0");
    assert!(installed.join("service.bundle.json5").is_file());
    assert!(installed.join("skills/getting-started/SKILL.md").is_file());

    edit(
        &dir.join("service.bundle.json5"),
        "A starter agent bundle.",
        "Second build.",
    );
    env.run(&["build", "hello"]).ok();
    let info = env.run(&["inspect", "hello", "--json"]).json();
    assert_eq!(info["description"], "Second build.");
    assert_eq!(info["path"], installed.display().to_string());
    let leftovers: Vec<_> = env
        .store_files()
        .into_iter()
        .filter(|f| f.contains(".staging"))
        .collect();
    assert_eq!(leftovers, Vec::<String>::new());
}

#[test]
fn output_layouts_are_reproducible() {
    let env = Env::new();
    env.init("repro");
    env.run(&["build", "repro", "--output", "out1"]).ok();
    // A copy made later has other mtimes and another path; the blobs must not change.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let copy = env.path("elsewhere/repro");
    std::fs::create_dir_all(&copy).unwrap();
    for f in files_under(&env.path("repro")) {
        let dest = copy.join(&f);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(env.path("repro").join(&f), dest).unwrap();
    }
    std::fs::create_dir_all(copy.join("resources")).unwrap();
    env.run(&["build", "elsewhere/repro", "--output", "out2"])
        .ok();

    let files = files_under(&env.path("out1"));
    assert_eq!(files, files_under(&env.path("out2")));
    assert!(files.contains(&"oci-layout".to_string()) && files.contains(&"index.json".to_string()));
    assert_eq!(
        files
            .iter()
            .filter(|f| f.starts_with("blobs/sha256/"))
            .count(),
        3
    );
    for f in &files {
        let a = std::fs::read(env.path("out1").join(f)).unwrap();
        let b = std::fs::read(env.path("out2").join(f)).unwrap();
        assert!(a == b, "{f} differs between builds");
        if let Some(hex) = f.strip_prefix("blobs/sha256/") {
            use sha2::Digest;
            assert_eq!(
                hex::encode(sha2::Sha256::digest(&a)),
                hex,
                "blob {f} is not named by its digest"
            );
        }
    }
    // Building into an existing layout replaces it.
    env.run(&["build", "repro", "--output", "out1"]).ok();
    assert_eq!(files_under(&env.path("out1")), files);
}

#[test]
fn tampered_layouts_are_refused() {
    let env = Env::new();
    env.init("tamper");
    env.run(&["build", "tamper", "--output", "out"]).ok();
    env.run(&["inspect", "./out"]).ok();

    let blobs = env.path("out/blobs/sha256");
    let layer = std::fs::read_dir(&blobs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let mut bytes = std::fs::read(&layer).unwrap();
    bytes[600] ^= 0x20;
    std::fs::write(&layer, &bytes).unwrap();
    let fresh = Env::new(); // an empty layout cache, so the layer must be read again
    let err = fresh
        .run(&["inspect", env.path("out").to_str().unwrap()])
        .failed()
        .to_string();
    assert!(err.contains("does not match its descriptor"), "{err}");

    let index = env.path("out/index.json");
    let text = std::fs::read_to_string(&index).unwrap();
    let digest = text
        .split("\"digest\": \"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_string();
    std::fs::write(
        &index,
        text.replace(&digest, "sha256:../../../../etc/passwd"),
    )
    .unwrap();
    let err = fresh
        .run(&["inspect", env.path("out").to_str().unwrap()])
        .failed()
        .to_string();
    assert!(err.contains("invalid digest"), "{err}");
}

#[test]
fn every_reference_form_resolves() {
    let env = Env::new();
    let dir = env.init("refs");
    env.run(&["build", "refs"]).ok();
    edit(
        &dir.join("service.bundle.json5"),
        "version: \"0.1.0\"",
        "version: \"0.10.0\"",
    );
    env.run(&["build", "refs"]).ok();
    env.run(&["build", "refs", "--output", "layout"]).ok();

    let version_of =
        |reference: &str| env.run(&["inspect", reference, "--json"]).json()["version"].clone();
    assert_eq!(
        version_of("refs"),
        "0.10.0",
        "semver order, not string order"
    );
    assert_eq!(version_of("refs@latest"), "0.10.0");
    assert_eq!(version_of("refs@0.1.0"), "0.1.0");
    assert_eq!(version_of("local/refs:0.1.0"), "0.1.0");
    assert_eq!(version_of("./layout"), "0.10.0");
    assert_eq!(version_of(env.path("layout").to_str().unwrap()), "0.10.0");
    assert_eq!(version_of("./refs"), "0.10.0");

    let listed = env.run(&["bundles", "--json"]).json();
    let refs: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["reference"].as_str().unwrap())
        .collect();
    // The built-in bundles are listed with the installed ones.
    assert_eq!(
        refs,
        [
            "local/refs:0.1.0",
            "local/refs:0.10.0",
            "builtin/coder:1.0.0"
        ]
    );
    let table = env.run(&["bundles"]).ok().to_string();
    assert!(
        table.starts_with("NAMESPACE  NAME   VERSION") && table.contains("0.10.0"),
        "{table}"
    );
}

#[test]
fn unknown_references_list_the_installed_candidates() {
    let env = Env::new();
    let err = env.run(&["inspect", "ghost"]).failed().to_string();
    assert!(
        err.contains("no bundle named \"ghost\" is installed") && err.contains("service-rs build"),
        "{err}"
    );

    env.init("known");
    env.run(&["build", "known"]).ok();
    let err = env.run(&["inspect", "known@9.9.9"]).failed().to_string();
    assert!(
        err.contains("installed versions of known: local/known:0.1.0"),
        "{err}"
    );
    let err = env.run(&["inspect", "ghost"]).failed().to_string();
    assert!(
        err.contains("installed bundles: local/known:0.1.0, builtin/coder:1.0.0"),
        "{err}"
    );
    let err = env.run(&["inspect", "./nowhere"]).failed().to_string();
    assert!(err.contains("does not exist"), "{err}");
}

/// Each case edits one file of a fresh bundle and expects build to fail with this message and write nothing.
#[test]
fn bad_bundles_fail_with_clear_errors_and_write_nothing() {
    let manifest = "service.bundle.json5";
    let agent = "agent.yaml";
    let cases: &[(&str, &str, &str, &str)] = &[
        (
            manifest,
            "mode: \"read_only\"",
            "mode: \"readonly\"",
            "service.bundle.json5: sandbox.mode: unknown value \"readonly\"; expected one of read_only, \
             workspace_write, danger_full_access",
        ),
        (
            manifest,
            "system_tools_mode: \"standard\"",
            "system_tools_mode: \"some\"",
            "service.bundle.json5: sandbox.system_tools_mode: unknown value \"some\"; expected one of explicit, \
             standard, all",
        ),
        (manifest, "id: \"bad\"", "id: \"../../x\"", "service.bundle.json5: id: invalid id \"../../x\""),
        (manifest, "version: \"0.1.0\"", "version: \"1.0\"", "service.bundle.json5: version: invalid semantic version"),
        (manifest, "tools: [\"Read\"", "tools: [\"Reed\"", "service.bundle.json5: tools[0]: unknown value \"Reed\""),
        (manifest, "name: \"bad\"", "nmae: \"bad\"", "service.bundle.json5: nmae: unknown field `nmae`"),
        (
            manifest,
            "network: [\"*\"]",
            "network: [\"pypi.org\", \"https://example.com\"]",
            "service.bundle.json5: sandbox.permissions.network[1]: \"https://example.com\" is not a host pattern: write \
             the host without a scheme; e.g. [\"pypi.org\", \"*.pythonhosted.org\", \"api.github.com:443\"]",
        ),
        (manifest, "network: [\"*\"]", "network: [\"pypi.*.org\"]", "sandbox.permissions.network[0]: \"pypi.*.org\""),
        (agent, "network: deny", "network: allow", "agent.yaml: permissions.network: \"allow\" is not accepted here"),
        (manifest, "\"service.bundle/v1\"", "\"service.bundle/v9\"", "manifest_version: unsupported value"),
        (manifest, "id: \"bad\",", "id: \"bad\"", "service.bundle.json5: syntax error"),
        (agent, "provider: anthropic", "provider: antropic", "agent.yaml: model.provider: unknown value \"antropic\""),
        (agent, "executor: react", "executor: plan", "agent.yaml: executor: unknown value \"plan\"; expected one of react"),
        (agent, "match: \"rm *\"", "match: \"rm [\"", "agent.yaml: permissions.rules[0].match: invalid glob"),
        (agent, "action: ask", "action: maybe", "agent.yaml: permissions.rules[0].action: unknown value \"maybe\""),
        (agent, "max_steps: 20", "max_steps: 0", "agent.yaml: max_steps: 0 is out of range"),
    ];
    for (file, from, to, expected) in cases {
        let env = Env::new();
        let dir = env.init("bad");
        edit(&dir.join(file), from, to);
        let err = env.run(&["build", "bad"]).failed().to_string();
        assert!(
            err.contains(expected),
            "editing {file} {from:?} -> {to:?}\nexpected: {expected}\ngot: {err}"
        );
        let out = env.run(&["build", "bad", "--output", "out"]);
        out.failed();
        assert!(
            !env.path("out").exists(),
            "--output wrote despite {expected}"
        );
        assert_eq!(
            env.store_files(),
            Vec::<String>::new(),
            "store written despite {expected}"
        );
    }
}

#[test]
fn a_bundle_without_agent_yaml_or_with_a_symlink_is_refused() {
    let env = Env::new();
    let dir = env.init("parts");
    std::fs::remove_file(dir.join("agent.yaml")).unwrap();
    let err = env.run(&["build", "parts"]).failed().to_string();
    assert!(err.contains("no agent.yaml here"), "{err}");

    let dir = env.init("linky");
    std::os::unix::fs::symlink("/etc/passwd", dir.join("resources/passwd")).unwrap();
    let err = env.run(&["build", "linky"]).failed().to_string();
    assert!(
        err.contains("symlinks and special files are not allowed"),
        "{err}"
    );
    assert_eq!(env.store_files(), Vec::<String>::new());
}
