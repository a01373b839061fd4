//! The Landlock backend (`--sandbox-backend landlock`), attacked from Bash through the real binary: the probes of
//! the escape suite that hold under Landlock, and the one that does not, said as such (see SECURITY.md and
//! `sandbox::landlock`).

use std::time::Duration;

use super::sandbox::env_with_workspace;
use super::support::Env;

/// Runs `command` with Bash in a Landlock sandbox of `sandbox` over `work/ws`, and returns what it printed.
fn attempt(env: &Env, name: &str, sandbox: &str, command: &str) -> String {
    super::sandbox::attempt_with(env, LANDLOCK, name, sandbox, command)
}

const LANDLOCK: &[&str] = &["--sandbox-backend", "landlock"];
const READ_ONLY: &str = r#"{ mode: "read_only", permissions: { network: [] } }"#;
const WRITE: &str = r#"{ mode: "workspace_write", permissions: { network: [] } }"#;

#[test]
fn under_landlock_read_only_refuses_workspace_writes_and_workspace_write_lets_them_through() {
    let env = env_with_workspace();
    let out = attempt(&env, "ro", READ_ONLY, "echo x > inside.txt || echo refused");
    assert!(out.contains("refused"), "{out}");
    assert!(!env.path("ws/inside.txt").exists());
    let out = attempt(&env, "rw", WRITE, "echo x > inside.txt && echo written");
    assert!(out.contains("written"), "{out}");
    assert_eq!(
        std::fs::read_to_string(env.path("ws/inside.txt")).unwrap(),
        "x\n"
    );
}

#[test]
fn under_landlock_the_store_the_home_directory_and_the_supervisor_are_out_of_reach() {
    let env = env_with_workspace();
    let home = env.home.path().display().to_string();
    let probe = format!(
        r#"id -u; ls {home} >/dev/null 2>&1 && echo "store: LISTED" || echo "store: denied"
cat {home}/tenants.json >/dev/null 2>&1 && echo "tenants: READ" || echo "tenants: denied"
ls {home}/sessions >/dev/null 2>&1 && echo "sessions: LISTED" || echo "sessions: denied"
ls /root >/dev/null 2>&1 && echo "root: LISTED" || echo "root: denied"
cat /proc/$PPID/environ >/dev/null 2>&1 && echo "worker environ: READ" || echo "worker environ: denied"
S=$(for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null | grep -q 'service-rs --sandbox-backend landlock run' && basename $p; done | head -1)
cat /proc/$S/environ >/dev/null 2>&1 && echo "supervisor environ: READ" || echo "supervisor environ: denied"
kill -0 $S 2>/dev/null && echo "supervisor: SIGNALLED" || echo "supervisor: denied"
echo x > /tmp/landlock-probe 2>/dev/null && echo "host tmp: WRITTEN" || echo "host tmp: denied"
echo x > $TMPDIR/own && echo "own tmp: written""#
    );
    let out = attempt(&env, "reach", WRITE, &probe);
    assert!(
        out.lines().next().is_some_and(|l| l.trim() != "0"),
        "a root supervisor's sandbox runs as root: {out}"
    );
    for line in [
        "store: denied",
        "tenants: denied",
        "sessions: denied",
        "root: denied",
        "worker environ: denied",
        "supervisor environ: denied",
        "supervisor: denied",
        "host tmp: denied",
        "own tmp: written",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
    assert!(!std::path::Path::new("/tmp/landlock-probe").exists());
}

#[test]
fn under_landlock_without_hosts_no_ip_or_unix_socket_can_be_made_and_host_loopback_is_unreachable()
{
    let env = env_with_workspace();
    let (port, accepted) = super::sandbox::host_listener();
    let probe = format!(
        r#"perl -MSocket -e 'socket(my $s, AF_INET, SOCK_STREAM, 0) ? print "tcp: MADE\n" : print "tcp: $!\n"'
perl -MSocket -e 'socket(my $s, AF_INET, SOCK_DGRAM, 0) ? print "udp: MADE\n" : print "udp: $!\n"'
perl -MSocket -e 'socket(my $s, AF_UNIX, SOCK_STREAM, 0) ? print "unix: MADE\n" : print "unix: $!\n"'
perl -MSocket -e 'socketpair(my $a, my $b, AF_UNIX, SOCK_STREAM, 0) ? print "pair: made\n" : print "pair: $!\n"'
(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo "loopback: CONNECTED" || echo "loopback: refused""#
    );
    let out = attempt(&env, "nonet", WRITE, &probe);
    for line in [
        "tcp: Operation not permitted",
        "udp: Operation not permitted",
        "unix: Operation not permitted",
        "pair: made",
        "loopback: refused",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
    assert!(accepted.recv_timeout(Duration::from_millis(200)).is_err());
}

#[test]
fn under_landlock_a_listed_host_answers_through_the_proxy_and_nothing_else_is_reached_but_the_forwarders_port(
) {
    let env = env_with_workspace();
    let plain = super::egress::Upstream::start(None);
    let p = plain.port;
    let port = "${HTTP_PROXY##*:}";
    let probe = format!(
        r#"curl -sS http://allowed.test:{p}/via-proxy
curl -sS http://other.test:{p}/unlisted
(exec 3<>/dev/tcp/127.0.0.1/{p}) 2>&1 | grep -q 'Permission denied' && echo "direct: denied" || echo "direct: ALLOWED"
curl -sS --noproxy '*' --max-time 5 http://127.0.0.1:{p}/ >/dev/null 2>&1 && echo "noproxy: REACHED" || echo "noproxy: failed"
perl -MSocket -e 'socket(my $s, AF_INET, SOCK_DGRAM, 0) ? print "udp: MADE\n" : print "udp: $!\n"'
(exec 3<>/dev/tcp/127.0.0.2/{port}) 2>&1 | grep -q 'Connection refused' && echo "other address on the forwarder's port: not denied""#
    );
    let sandbox = format!(
        r#"{{ mode: "workspace_write", permissions: {{ network: ["allowed.test:{p}"] }} }}"#
    );
    super::sandbox::bundle(&env, "egress", &sandbox, &probe);
    let out = env
        .run(&[
            LANDLOCK[0],
            LANDLOCK[1],
            "run",
            "./egress",
            "--prompt",
            "go",
            "--cwd",
            "ws",
            "--resolve",
            &format!("allowed.test:{p}:127.0.0.1"),
            "--resolve",
            &format!("other.test:{p}:127.0.0.1"),
        ])
        .ok()
        .to_string();
    assert!(
        out.contains(&format!("upstream allowed.test:{p} /via-proxy")),
        "{out}"
    );
    assert!(
        out.contains(&format!("other.test:{p} is not allowed")),
        "{out}"
    );
    assert!(!out.contains("/unlisted"), "{out}");
    for line in [
        "direct: denied",
        "noproxy: failed",
        "udp: Operation not permitted",
        // The bypass SECURITY.md names: Landlock matches the forwarder's port on any address, so this connection
        // is refused by the address, which nothing listens on, and not by the sandbox.
        "other address on the forwarder's port: not denied",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
}

#[test]
fn under_landlock_a_command_cannot_set_up_io_uring_to_make_sockets_the_filter_does_not_see() {
    let env = env_with_workspace();
    // io_uring_setup(8, params): 120 bytes of zeroed parameters.
    let probe = r#"perl -e '$p = "\0" x 120; $r = syscall(425, 8, $p); print "io_uring: ", ($r == -1 ? "$!" : "SET UP"), "\n"'"#;
    let out = attempt(&env, "uring", WRITE, probe);
    assert!(out.contains("io_uring: Operation not permitted"), "{out}");
}

#[test]
fn under_landlock_a_daemon_a_command_leaves_neither_holds_the_turn_nor_outlives_it() {
    let env = env_with_workspace();
    let out = attempt(
        &env,
        "daemon",
        READ_ONLY,
        "setsid sleep 3181 & (setsid sh -c 'sleep 3182' &); sleep 0.2; echo started",
    );
    assert!(out.contains("started"), "{out}");
    // The worker adopted them when their parents died, and killed them once the command had ended.
    let left = || super::support::processes_with("sleep 318");
    super::support::wait_until(
        Duration::from_secs(5),
        || left() == 0,
        || format!("{} daemons outlived the command", left()),
    );
}

#[test]
fn under_landlock_a_rule_that_names_a_path_in_the_workspace_as_bwrap_shows_it_still_holds() {
    let env = env_with_workspace();
    let dir = env.path("rules");
    std::fs::create_dir_all(dir.join("resources")).unwrap();
    std::fs::write(
        dir.join("service.bundle.json5"),
        r#"{ manifest_version: "service.bundle/v1", id: "rules", version: "1.0.0", tools: ["Write", "Bash"], sandbox: { mode: "workspace_write", permissions: { network: [] } } }"#,
    )
    .unwrap();
    // Rules and bundles name the workspace as bubblewrap shows it, on every backend.
    std::fs::write(
        dir.join("agent.yaml"),
        "model: { provider: scripted, name: s, config: { script: resources/script.json5 } }\n\
         permissions:\n  default: allow\n  rules:\n    - { tool: Write, match: \"/workspace/secret/**\", action: deny }\n",
    )
    .unwrap();
    std::fs::create_dir(env.path("ws/secret")).unwrap();
    super::support::give_to_sandbox(&env.path("ws/secret"));
    let script = serde_json::json!({"turns": [{"replies": [
        {"tool_calls": [{"name": "Write", "arguments": {"file_path": "secret/key.txt", "content": "planted"}}]},
        {"tool_calls": [{"name": "Write", "arguments": {"file_path": "open.txt", "content": "written"}}]},
        {"text": "done"},
    ]}]});
    std::fs::write(dir.join("resources/script.json5"), script.to_string()).unwrap();
    env.run(&[
        LANDLOCK[0],
        LANDLOCK[1],
        "run",
        "./rules",
        "--prompt",
        "go",
        "--cwd",
        "ws",
    ]);
    assert!(
        !env.path("ws/secret/key.txt").exists(),
        "the deny rule did not hold under Landlock"
    );
    assert_eq!(
        std::fs::read_to_string(env.path("ws/open.txt")).unwrap(),
        "written"
    );
}

#[test]
fn auto_keeps_the_backend_it_found_for_the_next_run_and_tests_again_when_what_decided_it_changed() {
    const AUTO: &[&str] = &["--sandbox-backend", "auto"];
    // Under bwrap the workspace is /workspace; under Landlock the command runs at the host's paths.
    let which = "test -d /workspace && echo under-bwrap || echo under-landlock";
    let env = env_with_workspace();
    let memo = env.home.path().join("run/sandbox-backend");
    let first = super::sandbox::attempt_with(&env, AUTO, "first", READ_ONLY, which);
    assert!(first.contains("under-bwrap"), "{first}");
    let kept = std::fs::read_to_string(&memo).unwrap();
    let (facts, answer) = kept.split_once('\n').unwrap();
    assert_eq!(answer, "bwrap\n");
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    assert!(facts.starts_with(boot.trim()), "{facts}");

    // The kept answer is what the next run goes by: planted under the same facts, it is followed.
    std::fs::write(&memo, format!("{facts}\nlandlock planted for the test\n")).unwrap();
    let second = super::sandbox::attempt_with(&env, AUTO, "second", READ_ONLY, which);
    assert!(second.contains("under-landlock"), "{second}");
    // Under other facts (another boot, say) it is not: bwrap is tried again, and the answer written anew.
    std::fs::write(
        &memo,
        format!("another-boot{facts}\nlandlock planted for the test\n"),
    )
    .unwrap();
    let third = super::sandbox::attempt_with(&env, AUTO, "third", READ_ONLY, which);
    assert!(third.contains("under-bwrap"), "{third}");
    assert_eq!(std::fs::read_to_string(&memo).unwrap(), kept);
}
