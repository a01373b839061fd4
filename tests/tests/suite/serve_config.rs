//! `serve`'s options from a config file: the `[serve]` section of `$SERVICE_HOME/config.toml`, or of `--config FILE`,
//! under the command line, which wins; secrets and unknown options refused, naming the file and the key; `config show
//! --effective` saying what is in force and from where, secrets masked. Through the real binary.

use std::io::BufRead;
use std::process::{Command, Stdio};

use super::support::{binary, Env};

/// Starts `serve` over `env` with `args` and nothing else; its base URL from the first line, and the process.
fn serve(env: &Env, args: &[&str]) -> (String, std::process::Child) {
    let mut child = Command::new(binary())
        .arg("serve")
        .args(args)
        .env("SERVICE_HOME", env.home.path())
        .env_remove("SERVICE_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("service-rs listening on ")
        .unwrap_or_else(|| panic!("{line:?}"))
        .to_string();
    (base, child)
}

fn status(url: &str) -> String {
    super::support::http_status(url, None)
}

#[test]
fn serve_takes_its_options_from_the_config_section_and_the_command_line_wins() {
    let env = Env::new();
    std::fs::write(
        env.home.path().join("config.toml"),
        "approvals = \"ask\"\n\n[serve]\nbind = \"127.0.0.1:0\"\nno_auth = true\nretention = \"30d\"\n",
    )
    .unwrap();
    let (base, mut child) = serve(&env, &[]);
    // No token asked: `no_auth` came from the file.
    assert_eq!(status(&format!("{base}/sessions")), "200");
    child.kill().unwrap();
    let _ = child.wait();

    // Another file, whose bind no machine has; the command line's wins.
    let other = env.path("node.toml");
    std::fs::write(&other, "[serve]\nbind = \"192.0.2.1:9\"\nno-auth = true\n").unwrap();
    let (base, mut child) = serve(
        &env,
        &["--config", other.to_str().unwrap(), "--bind", "127.0.0.1:0"],
    );
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");
    assert_eq!(status(&format!("{base}/sessions")), "200");
    child.kill().unwrap();
    let _ = child.wait();
}

#[test]
fn a_secret_an_unknown_option_or_a_missing_file_in_the_serve_config_stops_serve_naming_it() {
    let env = Env::new();
    let config = env.home.path().join("config.toml");
    for (section, says) in [
        ("token = \"abc\"", "name that file with SERVICE_TOKEN_FILE"),
        ("bogus = 1", "serve has no option --bogus"),
        (
            "store = \"postgres://svc:hunter2@db/x\"",
            "SERVICE_STORE_URL_FILE",
        ),
        ("bind = [\"a\", \"b\"]", "takes one value, not a list"),
        ("no-auth = \"yes\"", "is true or false"),
    ] {
        std::fs::write(&config, format!("[serve]\n{section}\n")).unwrap();
        let out = env.run(&["serve"]);
        assert_eq!(out.code, Some(2), "{section}: {out:?}");
        assert!(
            out.stderr.contains(says) && out.stderr.contains("config.toml [serve]"),
            "{section}: {}",
            out.stderr
        );
        assert!(!out.stderr.contains("hunter2"), "{}", out.stderr);
    }
    let out = env.run(&["serve", "--config", "no-such.toml"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("no-such.toml"), "{}", out.stderr);
}

#[test]
fn config_show_effective_says_what_serve_takes_and_from_where_without_a_secret() {
    let env = Env::new();
    std::fs::write(
        env.home.path().join("config.toml"),
        "[serve]\nretention = \"30d\"\nallow-path = [\"/srv/a\", \"/srv/b\"]\n",
    )
    .unwrap();
    let out = env
        .command(&["config", "show", "--effective"])
        .env("SERVICE_TOKEN", "the-very-secret-token")
        .env("SERVICE_STORE_URL", "postgres://svc:hunter2@db/x")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for line in [
        "retention = 30d    # ",
        "allow-path = /srv/a, /srv/b    # ",
        "token = (set, not shown)    # env SERVICE_TOKEN",
        "store = (set, holds a password, not shown)    # env SERVICE_STORE_URL",
        "bind = 127.0.0.1:8472    # default",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    assert!(
        !text.contains("the-very-secret-token") && !text.contains("hunter2"),
        "{text}"
    );
}
