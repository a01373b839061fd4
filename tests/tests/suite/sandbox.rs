//! The escape suite: real turns whose scripted model runs Bash inside the bubblewrap sandbox, through the real
//! `service-rs run` binary. Each case tries to get out and must fail or see nothing; the positive cases prove the
//! sandbox still lets through what the manifest allows.

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use super::support::{landlock, processes_with, wait_until, write_refused, Env};

/// Writes a bundle at `work/<name>` whose model runs `command` with Bash, then answers with the tool output.
pub(super) fn bundle(env: &Env, name: &str, sandbox: &str, command: &str) {
    bundle_with_agent(env, name, sandbox, "", command);
}

/// As [`bundle`], with `agent_extra` appended to agent.yaml.
pub(super) fn bundle_with_agent(
    env: &Env,
    name: &str,
    sandbox: &str,
    agent_extra: &str,
    command: &str,
) {
    let dir = env.path(name);
    std::fs::create_dir_all(dir.join("resources")).unwrap();
    std::fs::write(
        dir.join("service.bundle.json5"),
        format!(r#"{{ manifest_version: "service.bundle/v1", id: "{name}", version: "1.0.0", tools: ["Bash"], sandbox: {sandbox} }}"#),
    )
    .unwrap();
    std::fs::write(
        dir.join("agent.yaml"),
        format!("model: {{ provider: scripted, name: s, config: {{ script: resources/script.json5 }} }}\n{agent_extra}"),
    )
    .unwrap();
    let script = serde_json::json!({"turns": [{"replies": [
        {"tool_calls": [{"name": "Bash", "arguments": {"command": command}}]},
        // A trailing line, so a command that prints nothing still gets an answer (an empty one is an error).
        {"text": "{{last_tool_output}}\n[done]"},
    ]}]});
    std::fs::write(dir.join("resources/script.json5"), script.to_string()).unwrap();
}

/// Runs the bundle's turn and returns what the command printed (the final answer).
fn attempt(env: &Env, name: &str, sandbox: &str, command: &str) -> String {
    attempt_with(env, &[], name, sandbox, command)
}

/// As [`attempt`], with `global` options before the command (`--sandbox-backend landlock`).
pub(super) fn attempt_with(
    env: &Env,
    global: &[&str],
    name: &str,
    sandbox: &str,
    command: &str,
) -> String {
    bundle(env, name, sandbox, command);
    let bundle = format!("./{name}");
    let mut args = global.to_vec();
    args.extend(["run", &bundle, "--prompt", "go", "--cwd", "ws"]);
    env.run(&args).ok().to_string()
}

/// An env with a `work/ws` the sandbox user owns, for sessions started with `--cwd ws`.
pub(super) fn env_with_workspace() -> Env {
    let env = Env::new();
    std::fs::create_dir(env.path("ws")).unwrap();
    super::support::give_to_sandbox(&env.path("ws"));
    env
}

const NO_NET: &str = r#"{ mode: "workspace_write", permissions: { network: [] } }"#;
const READ_ONLY: &str = r#"{ mode: "read_only", permissions: { network: [] } }"#;
const NET: &str = r#"{ mode: "workspace_write", permissions: { network: ["*"] } }"#;

#[test]
fn a_secret_in_the_host_home_is_invisible() {
    let env = env_with_workspace();
    let home = env.path("hosthome");
    std::fs::create_dir(&home).unwrap();
    std::fs::write(home.join("secret.txt"), "TOPSECRET").unwrap();
    let cmd = format!(
        "cat {0}/secret.txt; cat ~/secret.txt; ls -a /root /home; echo end",
        home.display()
    );
    bundle(&env, "peek", NO_NET, &cmd);
    let run = env
        .command(&["run", "./peek", "--prompt", "go", "--cwd", "ws"])
        .env("HOME", &home)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{out}");
    assert!(!out.contains("TOPSECRET"), "{out}");
    assert!(
        out.contains("No such file or directory") && out.contains("end"),
        "{out}"
    );
}

#[test]
fn writes_outside_the_workspace_fail_and_leave_the_host_untouched() {
    let env = env_with_workspace();
    let outside = env.path("outside.txt");
    // Under Landlock the bundle is where the host has it.
    let bundle_dir = match landlock() {
        true => env.path("writer").display().to_string(),
        false => "/bundle".to_string(),
    };
    let cmd = format!(
        "echo x > {0}; echo x > {bundle_dir}/planted; echo x > /usr/planted; echo x > /etc/planted; echo end",
        outside.display()
    );
    let out = attempt(&env, "writer", NO_NET, &cmd);
    assert!(!outside.exists());
    assert!(!env.path("writer/planted").exists());
    assert!(!Path::new("/usr/planted").exists() && !Path::new("/etc/planted").exists());
    assert!(
        out.contains(write_refused()) && out.contains("end"),
        "{out}"
    );
}

#[test]
fn etc_shows_the_host_files_read_only_and_the_network_files_only_with_the_network() {
    let env = env_with_workspace();
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let first_user = passwd.lines().next().unwrap();
    let cmd =
        "head -n 1 /etc/passwd; echo hosts=$(wc -c < /etc/hosts); echo x > /etc/planted; echo end";
    let out = attempt(&env, "etc-off", NO_NET, cmd);
    assert!(out.contains(first_user), "{out}");
    // bwrap shows an empty file. Not held under Landlock (SECURITY.md): the network files are readable without the
    // network, since a program that would take them missing fails on a file it may not read.
    let hosts_len = std::fs::metadata("/etc/hosts").unwrap().len();
    let no_hosts = match landlock() {
        true => format!("hosts={hosts_len}"),
        false => "hosts=0".to_string(),
    };
    assert!(out.contains(&no_hosts), "{out}");
    assert!(
        out.contains(write_refused()) && out.contains("end"),
        "{out}"
    );
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap();
    let out = attempt(&env, "etc-on", NET, "cat /etc/hosts; echo end");
    assert!(out.contains(hosts.trim()), "{out}");
}

#[test]
fn a_sandbox_that_binds_each_etc_file_shows_them_read_only_and_nothing_else_of_the_hosts_etc() {
    // A start that finds its `/etc` snapshot being built, or that cannot make one, binds each file instead. No
    // snapshot can be made here: where the snapshots go is a file.
    let env = env_with_workspace();
    std::fs::create_dir_all(env.home.path().join("run")).unwrap();
    std::fs::write(env.home.path().join("run/sandbox"), "not a directory").unwrap();
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let first_user = passwd.lines().next().unwrap();
    let cmd = "head -n 1 /etc/passwd; echo x > /etc/passwd; echo x > /etc/planted; \
               ls /etc/shadow /etc/ssh 2>&1; echo hosts=$(wc -c < /etc/hosts); echo end";
    let out = attempt(&env, "etc-binds", NO_NET, cmd);
    assert!(out.contains(first_user), "{out}");
    assert_eq!(std::fs::read_to_string("/etc/passwd").unwrap(), passwd);
    assert!(!Path::new("/etc/planted").exists());
    if landlock() {
        // Landlock binds nothing: the same files are granted, read-only, with or without a snapshot. Not held
        // under Landlock (SECURITY.md): the names of the host's other files resolve, so `ls /etc/shadow` shows
        // the name; what is in them, and in the directories, stays refused.
        for line in [
            "/etc/passwd: Permission denied",
            "/etc/planted: Permission denied",
            "/etc/ssh': Permission denied",
        ] {
            assert!(out.contains(line), "missing {line:?} in:\n{out}");
        }
        assert!(env.home.path().join("run/sandbox").is_file());
        return;
    }
    assert!(
        out.contains("/etc/passwd: Read-only file system")
            && out.contains("/etc/planted: Read-only file system"),
        "{out}"
    );
    assert!(
        out.contains("/etc/shadow': No such file or directory")
            && out.contains("/etc/ssh': No such file or directory"),
        "{out}"
    );
    // No network: no network file either (a snapshot has an empty one, a mount point).
    assert!(
        out.contains("/etc/hosts: No such file or directory") && out.contains("end"),
        "{out}"
    );
    assert!(env.home.path().join("run/sandbox").is_file());
}

#[test]
fn no_command_can_replace_the_sandboxs_bin_loader_or_dev_for_the_commands_after_it() {
    // bwrap's root and `/dev` are tmpfs the sandbox user owns. Writable, they would let one command swap `/bin`,
    // `/lib64` (the dynamic loader) or `/dev/stdout` under every later command of the session, operator commands
    // included. `/dev/shm` and the device nodes stay usable.
    let env = env_with_workspace();
    let cmd = "rm /bin; ln -s /workspace /bin; mv /lib64 /lib64.old; echo x > /planted; \
               echo x > /run/service/planted; rm /dev/stdout; echo x > /dev/planted; \
               echo x > /dev/shm/own && echo shm-writable; echo x > /dev/null && echo null-writable; \
               readlink /bin /lib64 /dev/stdout; /bin/true && echo true-ran; echo end";
    let out = attempt(&env, "swap", NO_NET, cmd);
    if landlock() {
        // The host's own `/`, `/bin`, `/lib64` and `/dev`, none of which Landlock lets a sandbox change; there is
        // no `/run/service` and no `/dev/shm` of the sandbox's (SECURITY.md: no private `/dev`).
        for refused in [
            "rm: cannot remove '/bin': Permission denied",
            "ln: failed to create symbolic link '/bin/workspace': Permission denied",
            "mv: cannot move '/lib64' to '/lib64.old': Permission denied",
            "/planted: Permission denied",
            "/run/service/planted: No such file or directory",
            "rm: cannot remove '/dev/stdout': Permission denied",
            "/dev/planted: Permission denied",
            "/dev/shm/own: Permission denied",
        ] {
            assert!(out.contains(refused), "{refused}\n{out}");
        }
        assert!(
            out.contains("null-writable\nusr/bin\nusr/lib64\n/proc/self/fd/1\ntrue-ran\nend"),
            "{out}"
        );
        return;
    }
    for refused in [
        "rm: cannot remove '/bin': Read-only file system",
        "ln: failed to create symbolic link '/bin/workspace': Read-only file system",
        "mv: cannot move '/lib64' to '/lib64.old': Read-only file system",
        "/planted: Read-only file system",
        "/run/service/planted: Read-only file system",
        "rm: cannot remove '/dev/stdout': Read-only file system",
        "/dev/planted: Read-only file system",
    ] {
        assert!(out.contains(refused), "{refused}\n{out}");
    }
    assert!(
        out.contains(
            "shm-writable\nnull-writable\nusr/bin\nusr/lib64\n/proc/self/fd/1\ntrue-ran\nend"
        ),
        "{out}"
    );
}

#[test]
fn read_only_mode_refuses_writes_inside_the_workspace() {
    let env = env_with_workspace();
    let out = attempt(&env, "ro", READ_ONLY, "echo x > inside.txt; echo end");
    assert!(out.contains(write_refused()), "{out}");
    assert!(!env.path("ws/inside.txt").exists());
}

#[test]
fn workspace_write_mode_writes_reach_the_host() {
    let env = env_with_workspace();
    let out = attempt(
        &env,
        "rw",
        NO_NET,
        "echo made-inside > made.txt && echo wrote",
    );
    assert!(out.contains("wrote"), "{out}");
    assert_eq!(
        std::fs::read_to_string(env.path("ws/made.txt")).unwrap(),
        "made-inside\n"
    );
}

/// A listener on the host's loopback that records whether anyone connected.
pub(super) fn host_listener() -> (u16, std::sync::mpsc::Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        listener.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok((mut s, _)) = listener.accept() {
                let _ = tx.send(());
                let mut buf = [0u8; 16];
                let _ = s.read(&mut buf);
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    (port, rx)
}

#[test]
fn without_network_the_host_loopback_is_unreachable() {
    let env = env_with_workspace();
    let (port, seen) = host_listener();
    let cmd = format!("(exec 3<>/dev/tcp/127.0.0.1/{port}) && echo connected || echo refused");
    let out = attempt(&env, "offline", NO_NET, &cmd);
    assert!(
        out.contains("refused") && !out.contains("connected"),
        "{out}"
    );
    assert!(
        seen.recv_timeout(Duration::from_millis(300)).is_err(),
        "the host listener saw a connection"
    );
}

/// Every socket file a sandboxed command can find, outside `/proc` and the host's read-only `/usr` (whose full
/// walk takes seconds). `%Y` stats each path: `-type s` would trust the directory entry, which for a socket bound
/// over a file says "file".
const FIND_SOCKETS: &str =
    "find / \\( -path /proc -o -path /usr \\) -prune -o -printf '%Y %p\\n' 2>/dev/null \\
    | sed -n 's/^s //p'; echo '[end]'";

#[test]
fn without_network_no_socket_of_the_supervisor_is_inside_and_with_it_only_the_proxy() {
    let env = env_with_workspace();
    let offline = attempt(&env, "no-sockets", NO_NET, FIND_SOCKETS);
    assert!(offline.contains("[end]"), "{offline}");
    let found = |out: &str| -> Vec<String> {
        out.lines()
            .take_while(|l| !l.contains("[end]"))
            .filter(|l| l.starts_with('/'))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(found(&offline), Vec::<String>::new(), "{offline}");
    let online = attempt(&env, "one-socket", NET, FIND_SOCKETS);
    // Under Landlock the worker reaches the proxy's socket through a descriptor, and no directory that holds a
    // socket is granted; commands may not make a Unix socket at all (`sandbox_landlock`).
    let proxy: &[&str] = match landlock() {
        true => &[],
        false => &["/run/service/egress.sock"],
    };
    assert_eq!(found(&online), proxy, "{online}");
}

#[test]
fn with_network_star_the_host_loopback_is_still_unreachable() {
    let env = env_with_workspace();
    let (port, seen) = host_listener();
    let cmd = format!("(exec 3<>/dev/tcp/127.0.0.1/{port}) && echo connected || echo refused");
    let out = attempt(&env, "online", NET, &cmd);
    assert!(out.contains("refused"), "{out}");
    assert!(seen.recv_timeout(Duration::from_millis(500)).is_err());
}

#[test]
fn the_provider_key_is_in_no_environment_the_sandbox_can_read() {
    let env = env_with_workspace();
    bundle(
        &env,
        "keys",
        NO_NET,
        "env; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done; echo end",
    );
    let run = env
        .command(&["run", "./keys", "--prompt", "go", "--cwd", "ws"])
        .env("ANTHROPIC_API_KEY", "sk-ant-SECRET-123")
        .env("OPENAI_API_KEY", "sk-SECRET-456")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && out.contains("PATH=") && out.contains("end"),
        "{out}"
    );
    assert!(!out.contains("SECRET"), "{out}");
}

#[test]
fn other_sessions_and_the_store_are_invisible() {
    let env = env_with_workspace();
    attempt(&env, "first", NO_NET, "echo first > note.txt");
    let store = env.home.path().display().to_string();
    let first_id = env.run(&["sessions", "--json"]).json()[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let out = attempt(
        &env,
        "second",
        NO_NET,
        &format!("ls {store}/sessions; ls {store}; ls /; echo end"),
    );
    assert!(!out.contains(&first_id), "{out}");
    // bwrap mounts none of it; Landlock refuses to read it.
    let absent = match landlock() {
        true => "Permission denied",
        false => "No such file or directory",
    };
    assert!(out.contains(absent) && out.contains("end"), "{out}");
    assert!(
        !out.contains("home") && !out.contains("root"),
        "host directories listed in /: {out}"
    );
}

#[test]
fn host_processes_are_invisible() {
    let env = env_with_workspace();
    let me = std::process::id();
    let out = attempt(
        &env,
        "ps",
        NO_NET,
        &format!("test -e /proc/{me} && echo visible || echo hidden; ls /proc | grep -c '^[0-9]'"),
    );
    if landlock() {
        // Not held under Landlock (SECURITY.md): there is no PID namespace, so the host's processes are listed;
        // their memory, environment and descriptors stay out of reach (`sandbox_landlock`, `escape`).
        assert!(out.contains("visible"), "{out}");
        return;
    }
    assert!(out.contains("hidden"), "{out}");
    let count: usize = out.lines().nth(1).unwrap().trim().parse().unwrap();
    // The sandbox's own: bwrap's init, the worker, this command and two spare shells (each with its reaper, see
    // the worker's `confine`) and the pipeline; the host has hundreds.
    assert!(count < 20, "{count} processes visible: {out}");
}

#[test]
fn nothing_in_the_sandbox_outlives_a_killed_supervisor() {
    let env = env_with_workspace();
    let marker = format!("{}", 900_000 + std::process::id() % 99_999);
    bundle(
        &env,
        "linger",
        NO_NET,
        &format!("sleep {marker} & sleep {marker}"),
    );
    let mut child = env
        .command(&["run", "./linger", "--prompt", "go", "--cwd", "ws"])
        .spawn()
        .unwrap();
    wait_until(
        Duration::from_secs(10),
        || processes_with(&format!("sleep {marker}")) >= 2,
        || "the sandboxed sleeps never started".into(),
    );
    child.kill().unwrap(); // SIGKILL: no cleanup code of the supervisor runs
    child.wait().unwrap();
    wait_until(
        Duration::from_secs(5),
        || processes_with(&format!("sleep {marker}")) == 0,
        || "sandboxed processes outlived the supervisor".into(),
    );
}

#[test]
fn memory_beyond_memory_mb_fails_the_command_not_the_supervisor() {
    let env = env_with_workspace();
    let sandbox = r#"{ mode: "workspace_write", permissions: { network: [] }, resources: { memory_mb: 128 } }"#;
    let out = attempt(
        &env,
        "hog",
        sandbox,
        "x=$(head -c 400000000 /dev/zero | tr '\\0' a); echo survived ${#x}",
    );
    assert!(!out.contains("survived 400000000"), "{out}");
    // The same machine still serves the next run.
    let out = attempt(&env, "after", NO_NET, "echo still-serving");
    assert!(out.contains("still-serving"), "{out}");
}

#[test]
fn a_fork_storm_hits_the_process_limit() {
    let env = env_with_workspace();
    // 800 processes exceed the per-worker limit (512); bash reports each failed fork as "fork: <reason>".
    let out = attempt(
        &env,
        "storm",
        NO_NET,
        "for i in $(seq 800); do sleep 3 & done 2>&1 | grep -c 'fork:'; wait; echo storm-over",
    );
    let failed: usize = out
        .lines()
        .next()
        .unwrap_or("0")
        .trim()
        .parse()
        .unwrap_or(0);
    assert!(failed > 0, "no fork failed: {out}");
    assert!(out.contains("storm-over"), "{out}");
}

/// A directory an unprivileged user owns, with copies of the binaries (the build's own directory may be closed to
/// that user), its store, and the bundles made there; as root, commands run as `nobody`.
struct Unprivileged {
    dir: tempfile::TempDir,
    env: Env,
    root: bool,
}

impl Unprivileged {
    fn new() -> Unprivileged {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let built = super::support::binary();
        for name in ["service-rs", "service-worker"] {
            std::fs::copy(built.with_file_name(name), bin.join(name)).unwrap();
        }
        Unprivileged {
            dir,
            env: Env::new(),
            root: nix::unistd::geteuid().is_root(),
        }
    }

    /// A bundle whose model runs `command`, in `sandbox`, at `<dir>/<name>`.
    fn bundle(&self, name: &str, sandbox: &str, command: &str) -> std::path::PathBuf {
        bundle(&self.env, name, sandbox, command);
        let project = self.dir.path().join(name);
        std::fs::rename(self.env.path(name), &project).unwrap();
        project
    }

    /// `service-rs run PROJECT --prompt go --dangerous-sandbox-mode`, as the unprivileged user.
    fn dangerous_one_shot(&self, project: &std::path::Path) -> std::process::Output {
        let project = project.to_str().unwrap();
        self.run(&["run", project, "--prompt", "go", "--dangerous-sandbox-mode"])
    }

    /// Runs `service-rs args` in the directory as the unprivileged user (everything in it made theirs first).
    fn run(&self, args: &[&str]) -> std::process::Output {
        use std::os::unix::fs::PermissionsExt;
        let bin = self.dir.path().join("bin/service-rs");
        let mut command = if self.root {
            for entry in walkdir::WalkDir::new(self.dir.path()).into_iter().flatten() {
                std::os::unix::fs::lchown(entry.path(), Some(65534), Some(65534)).unwrap();
            }
            std::fs::set_permissions(self.dir.path(), std::fs::Permissions::from_mode(0o755))
                .unwrap();
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "nobody", "--"]).arg(bin);
            c
        } else {
            std::process::Command::new(bin)
        };
        command
            .args(args)
            .current_dir(self.dir.path())
            .env("SERVICE_HOME", self.dir.path().join("home"))
            .env("HOME", self.dir.path())
            .output()
            .unwrap()
    }
}

#[test]
fn a_supervisor_started_by_an_unprivileged_user_runs_commands_in_its_sandbox() {
    let user = Unprivileged::new();
    let project = user.bundle(
        "plain",
        r#"{ mode: "workspace_write", permissions: { network: [] } }"#,
        &format!(
            "id -u; echo made > {0}/made.txt && cat {0}/made.txt",
            if landlock() { "." } else { "/workspace" }
        ),
    );
    let built = user.run(&["build", project.to_str().unwrap()]);
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let out = user.run(&["run", "plain", "--prompt", "go"]);
    let text = String::from_utf8_lossy(&out.stdout);
    // Under Landlock there is no user namespace: the command is the supervisor's own user.
    let uid = match (landlock(), user.root) {
        (false, _) => 1000,
        (true, true) => 65534,
        (true, false) => nix::unistd::geteuid().as_raw(),
    };
    assert!(
        out.status.success() && text.contains(&format!("{uid}\nmade")),
        "the command ran as uid {uid} and wrote its workspace: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn an_unprivileged_user_with_dangerous_sandbox_mode_runs_commands_on_the_host_as_themselves() {
    let user = Unprivileged::new();
    let project = user.bundle(
        "host",
        r#"{ mode: "workspace_write", permissions: { network: [] } }"#,
        "id -u; echo made > made.txt && cat made.txt",
    );
    let out = user.dangerous_one_shot(&project);
    let text = String::from_utf8_lossy(&out.stdout);
    let uid = match user.root {
        true => 65534,
        false => nix::unistd::geteuid().as_raw(),
    };
    assert!(
        out.status.success() && text.contains(&format!("{uid}\nmade")),
        "the command ran on the host as the user and wrote the directory it ran in: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(user.dir.path().join("made.txt")).unwrap(),
        "made\n"
    );
}

#[test]
fn a_host_command_of_an_unprivileged_user_cannot_read_its_reaper_or_its_worker_through_proc() {
    let user = Unprivileged::new();
    // The shell's parent (host pids: /proc is the host's) is the reaper forked from the worker, and its parent the
    // worker: a command of the same user tries their environment and descriptors.
    let probe = r#"read -r -a me < /proc/self/stat; reaper=${me[3]}; read -r -a r < /proc/$reaper/stat; worker=${r[3]}
echo "worker comm: $(cat /proc/$worker/comm)"
for p in $reaper $worker; do
  if cat /proc/$p/environ > /dev/null 2>&1; then echo "read the environment of $p"; else echo "environment of $p refused"; fi
  if ls /proc/$p/fd > /dev/null 2>&1; then echo "listed the descriptors of $p"; fi
done"#;
    let project = user.bundle(
        "snoop",
        r#"{ mode: "workspace_write", permissions: { network: [] } }"#,
        probe,
    );
    let out = user.dangerous_one_shot(&project);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("worker comm: service-worker"),
        "the probe did not find the worker: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text.matches("refused").count(), 2, "{text}");
    assert!(
        !text.contains("read the environment") && !text.contains("listed the descriptors"),
        "{text}"
    );
}

#[test]
fn a_store_under_a_long_path_still_starts_sandboxes_that_reach_the_network() {
    // The egress proxy's socket lives in the store; its path here is longer than a socket address may be.
    let base = tempfile::tempdir().unwrap();
    let home = base.path().join("a".repeat(100)).join("home");
    if landlock() {
        // Landlock's sandbox user walks the host's paths to its store, as `doctor` and its error say.
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir(home.parent().unwrap()).unwrap();
        std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    }
    let env = Env::new();
    bundle(&env, "net", NET, "echo through-the-long-home");
    let out = env
        .command(&["run", "./net", "--prompt", "go"])
        .env("SERVICE_HOME", &home)
        .output()
        .unwrap();
    assert!(
        out.status.success()
            && String::from_utf8_lossy(&out.stdout).contains("through-the-long-home"),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
