//! What an operator installs: the systemd unit and its settings file (`docs/src/operating/service-rs.service`,
//! `serve.env`). systemd checks the unit; the unit's own command line, with its settings, credentials and
//! environment as systemd would give them, starts a real node over PostgreSQL that drains on SIGTERM well inside the
//! unit's stop timeout.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::postgres::Postgres;
use super::support::binary;

fn operating(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs/src/operating")
        .join(file)
}

/// The unit's `Key=value` lines of section [Service], in order.
fn service_lines() -> Vec<(String, String)> {
    let unit = std::fs::read_to_string(operating("service-rs.service")).unwrap();
    let mut in_service = false;
    let mut out = Vec::new();
    for line in unit.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_service = line == "[Service]";
        } else if in_service && !line.starts_with('#') {
            if let Some((k, v)) = line.split_once('=') {
                out.push((k.to_string(), v.to_string()));
            }
        }
    }
    out
}

fn seconds(value: &str) -> u64 {
    value.trim_end_matches('s').parse().unwrap()
}

#[test]
fn systemd_accepts_the_unit_and_its_stop_timeout_outlasts_the_drain() {
    let lines = service_lines();
    let exec = &lines.iter().find(|(k, _)| k == "ExecStart").unwrap().1;
    let flag = |name: &str| {
        let at = exec
            .find(name)
            .unwrap_or_else(|| panic!("ExecStart lacks {name}"));
        seconds(exec[at + name.len()..].split_whitespace().next().unwrap())
    };
    let stop = seconds(&lines.iter().find(|(k, _)| k == "TimeoutStopSec").unwrap().1);
    assert!(
        stop >= flag("--pre-stop-delay") + flag("--drain-timeout") + 5,
        "TimeoutStopSec={stop}s would kill a draining node"
    );
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: systemd-analyze is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let unit = std::fs::read_to_string(operating("service-rs.service"))
        .unwrap()
        .replace("/usr/local/bin/service-rs", binary().to_str().unwrap());
    let path = dir.path().join("service-rs.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && said.trim().is_empty(), "{said}");
}

#[test]
fn the_units_command_line_starts_a_node_that_drains_on_sigterm_inside_the_stop_timeout() {
    let pg = Postgres::start();
    super::support::Env::new()
        .run(&["migrate", "--store", &pg.url()])
        .ok();
    let work = tempfile::tempdir().unwrap();
    let credentials = work.path().join("credentials");
    std::fs::create_dir(&credentials).unwrap();
    for (name, value) in [
        ("token", "unit-client-token"),
        ("cluster-token", "unit-cluster-token"),
        ("store-url", pg.url().as_str()),
    ] {
        std::fs::write(credentials.join(name), format!("{value}\n")).unwrap();
    }
    // serve.env, with this machine's loopback for the addresses.
    let mut vars: BTreeMap<String, String> = std::fs::read_to_string(operating("serve.env"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    vars.insert("BIND".into(), "127.0.0.1:0".into());
    vars.insert("ADVERTISE_URL".into(), "http://127.0.0.1:9".into());
    let expand = |text: &str| {
        let text = text
            .replace("%d", credentials.to_str().unwrap())
            .replace("%H", "unit-node");
        vars.iter()
            .fold(text, |t, (k, v)| t.replace(&format!("${{{k}}}"), v))
    };
    let lines = service_lines();
    let exec = expand(&lines.iter().find(|(k, _)| k == "ExecStart").unwrap().1);
    let mut words = exec.split_whitespace().skip(1);
    let mut cmd = Command::new(binary());
    cmd.args(&mut words)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap());
    for (_, v) in lines.iter().filter(|(k, _)| k == "Environment") {
        let (name, value) = v.split_once('=').unwrap();
        cmd.env(name, expand(value));
    }
    let home = work.path().join("home");
    cmd.env("SERVICE_HOME", &home)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    let listening: serde_json::Value = serde_json::from_str(&first)
        .unwrap_or_else(|_| panic!("not the JSON start line: {first:?}"));
    let base = listening["listening"].as_str().unwrap().to_string();
    // The status of `GET path` with the credential file's token.
    let status = |path: &str| {
        super::support::http_status(&format!("{base}{path}"), Some("unit-client-token"))
            .parse::<u16>()
            .unwrap_or(0)
    };
    assert_eq!(status("/readyz"), 200);
    assert_eq!(status("/sessions"), 200, "the credential file's token");

    let stop = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    while status("/readyz") == 200 {
        assert!(
            stop.elapsed() < Duration::from_millis(500),
            "readyz still 200"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let timeout = seconds(&lines.iter().find(|(k, _)| k == "TimeoutStopSec").unwrap().1);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        assert!(
            stop.elapsed() < Duration::from_secs(timeout),
            "still running"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(home.join("cluster").is_file());
}
