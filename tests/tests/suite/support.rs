//! Shared helpers: locate the built binary, run it in a throwaway store, edit bundle files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The `service-rs` binary under test: `$SERVICE_RS_BIN`, else the one built beside this test binary.
pub fn binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("SERVICE_RS_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/all-<hash> -> target/<profile>/service-rs
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("service-rs"))
        .expect("target directory");
    assert!(
        bin.is_file(),
        "{} is missing: build it first with `cargo build --workspace --bins`",
        bin.display()
    );
    bin
}

/// A throwaway store and work directory.
pub struct Env {
    pub home: TempDir,
    pub work: TempDir,
}

/// What one run of the binary did.
#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn from(out: Output) -> Run {
        Run {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Asserts success and returns stdout.
    #[track_caller]
    pub fn ok(&self) -> &str {
        assert_eq!(
            self.code,
            Some(0),
            "expected success\nstdout: {}\nstderr: {}",
            self.stdout,
            self.stderr
        );
        &self.stdout
    }

    /// Asserts a failing exit and returns stderr.
    #[track_caller]
    pub fn failed(&self) -> &str {
        assert!(
            matches!(self.code, Some(c) if c != 0),
            "expected failure\nstdout: {}\nstderr: {}",
            self.stdout,
            self.stderr
        );
        &self.stderr
    }

    /// Parses stdout as JSON.
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.ok())
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.stdout))
    }
}

impl Env {
    /// A fresh store, and a work directory that commands run from: the project a session works in by default,
    /// so it is given to the sandbox user (see [`give_to_sandbox`]).
    pub fn new() -> Env {
        Env {
            home: TempDir::new().expect("temp home"),
            work: sandbox_tempdir(),
        }
    }

    /// A command for the binary with this env's store, run from the work directory, with no provider keys.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(binary());
        cmd.args(args)
            .current_dir(self.work.path())
            .env("SERVICE_HOME", self.home.path())
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("OPENAI_API_KEY")
            .env_remove("SERVICE_TOKEN");
        cmd
    }

    /// Runs the binary to completion.
    pub fn run(&self, args: &[&str]) -> Run {
        Run::from(self.command(args).output().expect("spawn service-rs"))
    }

    /// A path inside the work directory.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.work.path().join(rel)
    }

    /// `init`s a starter bundle in `work/<name>` and returns its path.
    pub fn init(&self, name: &str) -> PathBuf {
        self.run(&["init", name]).ok();
        self.path(name)
    }

    /// Relative paths of every file under the store, sorted.
    pub fn store_files(&self) -> Vec<String> {
        files_under(self.home.path())
    }
}

/// Relative paths of every file under `root`, sorted.
pub fn files_under(root: &Path) -> Vec<String> {
    let mut out: Vec<String> = walkdir::WalkDir::new(root)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .map(|e| {
            e.path()
                .strip_prefix(root)
                .unwrap_or(e.path())
                .display()
                .to_string()
        })
        .collect();
    out.sort();
    out
}

/// Replaces the first `from` with `to` in the file, failing when `from` is absent.
#[track_caller]
pub fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).expect("read file to edit");
    assert!(
        text.contains(from),
        "{} does not contain {from:?}",
        path.display()
    );
    std::fs::write(path, text.replacen(from, to, 1)).expect("write edited file");
}

/// Writes a bundle using the scripted provider into `dir`: `script` is the script's JSON5 text, `agent_extra`
/// YAML lines appended to agent.yaml (e.g. `max_steps: 3`), `sandbox_mode` the manifest's mode.
pub fn write_bundle(dir: &Path, script: &str, agent_extra: &str, sandbox_mode: &str) {
    std::fs::create_dir_all(dir.join("resources")).unwrap();
    std::fs::create_dir_all(dir.join("skills/greeting")).unwrap();
    std::fs::write(
        dir.join("service.bundle.json5"),
        format!(
            r#"{{ manifest_version: "service.bundle/v1", id: "fixture", version: "1.0.0",
                tools: ["Read", "Write", "Edit", "Bash", "Glob", "Grep", "Skill", "UpdatePlan"],
                sandbox: {{ mode: "{sandbox_mode}", permissions: {{ network: [] }} }} }}"#
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("agent.yaml"),
        format!(
            "model: {{ provider: scripted, name: fixture, config: {{ script: resources/script.json5 }} }}\n\
             system_prompt: You are a test agent.\n{agent_extra}\n"
        ),
    )
    .unwrap();
    std::fs::write(dir.join("resources/script.json5"), script).unwrap();
    std::fs::write(
        dir.join("skills/greeting/SKILL.md"),
        "---\nname: greeting\ndescription: How to greet.\n---\nSay hello warmly.\n",
    )
    .unwrap();
}

impl Env {
    /// A fresh env with the scripted bundle `fixture` (see [`write_bundle`]) written to `b/` and built.
    pub fn with_bundle(script: &str, agent_extra: &str, sandbox_mode: &str) -> Env {
        let env = Env::new();
        write_bundle(&env.path("b"), script, agent_extra, sandbox_mode);
        env.run(&["build", "b"]).ok();
        env
    }
}

/// Builds into `env`'s store a scripted bundle (`fixture`) whose one answer is `words` words, streamed as about
/// `words / 3` deltas; returns the answer.
pub fn build_long_answer_bundle(env: &Env, words: usize) -> String {
    let text: String = (0..words).map(|i| format!("w{i} ")).collect();
    let text = text.trim_end().to_string();
    let dir = env.path("long");
    write_bundle(
        &dir,
        &format!(r#"{{turns: [{{replies: [{{text: "{text}"}}]}}]}}"#),
        "",
        "workspace_write",
    );
    env.run(&["build", dir.to_str().unwrap()]).ok();
    text
}

/// An in-process runtime over `home` whose workers are the real binary.
pub fn runtime(home: &Path) -> service_supervisor::ServiceRuntime {
    runtime_with(home, |_| {})
}

/// As [`runtime`], with its options changed by `tune` first.
pub fn runtime_with(
    home: &Path,
    tune: impl FnOnce(&mut service_supervisor::RuntimeOptions),
) -> service_supervisor::ServiceRuntime {
    let mut options =
        service_supervisor::RuntimeOptions::new(service_supervisor::worker_beside(&binary()));
    tune(&mut options);
    super::store_backend::runtime(home, options)
}

/// Runs a turn of `prompt` in session `id`: its outcome and its events (20 s at most).
pub async fn run_turn(
    rt: &service_supervisor::ServiceRuntime,
    id: &str,
    prompt: &str,
) -> (
    service_supervisor::runtime::TurnOutcome,
    Vec<service_ipc::EventMsg>,
) {
    let mut events = rt.subscribe_session(id).await.expect("subscribe");
    let pending = rt
        .start_turn(
            id,
            service_ipc::Task::new(prompt),
            service_ipc::TurnOverrides::default(),
        )
        .await
        .expect("start the turn");
    let evs = events_of_turn(&mut events, &pending.turn_id).await;
    let outcome = tokio::time::timeout(std::time::Duration::from_secs(20), pending.outcome)
        .await
        .expect("the turn's outcome within 20 s")
        .expect("an outcome");
    (outcome, evs)
}

/// The answer of a turn whose events are `events`, after checking that it completed.
pub fn final_message(events: &[service_ipc::EventMsg]) -> String {
    match &events.last().expect("the turn's events").payload {
        service_ipc::EventPayload::TurnCompleted { final_message, .. } => final_message.clone(),
        other => panic!("the turn did not complete: {other:?}"),
    }
}

/// Reads events until the one that ends `turn_id` (20 s at most).
pub async fn events_of_turn(
    events: &mut service_supervisor::runtime::EventStream,
    turn_id: &str,
) -> Vec<service_ipc::EventMsg> {
    use futures::StreamExt;
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let next = tokio::time::timeout_at(deadline, events.next()).await;
        let msg = next
            .expect("turn did not end within 20 s")
            .expect("event stream ended");
        let ends = msg.payload.ends_turn() && msg.payload.turn_id() == Some(turn_id);
        out.push(msg);
        if ends {
            return out;
        }
    }
}

/// Event kinds in order, with runs of the same streaming kind collapsed to one entry. `checkpoint_created` is
/// left out: the checkpoint is taken while the first model call streams, so where it lands among the reply's
/// events varies (`checkpoints.rs` tests it).
/// What `events` yields until it has been quiet for 200 ms (or ends).
pub async fn until_quiet<T>(events: &mut (impl futures::Stream<Item = T> + Unpin)) -> Vec<T> {
    let mut seen = Vec::new();
    while let Ok(Some(item)) =
        tokio::time::timeout(Duration::from_millis(200), futures::StreamExt::next(events)).await
    {
        seen.push(item);
    }
    seen
}

pub fn kinds(events: &[service_ipc::EventMsg]) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for e in events {
        let k = e.payload.kind();
        if k == "checkpoint_created" {
            continue;
        }
        let streaming = matches!(
            k,
            "agent_message_delta" | "reasoning_delta" | "exec_command_output_delta"
        );
        if streaming && out.last() == Some(&k) {
            continue;
        }
        out.push(k);
    }
    out
}

/// A running `service-rs serve` on a free loopback port; killed when dropped.
pub struct Server {
    pub child: std::process::Child,
    pub base: String,
    /// The token the server generated (from `serve.token`), unless it was given one or none.
    pub token: Option<String>,
    /// Every line the server wrote on stderr so far (its log).
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Server {
    /// Starts `serve --bind 127.0.0.1:0` (plus `args`) over `home`, with `envs`, and waits for its address. Unless
    /// `args` set `--allow-path`, bundle directories under the temporary directory and the examples are allowed,
    /// where the tests keep theirs.
    pub fn start(home: &Path, args: &[&str], envs: &[(&str, &str)]) -> Server {
        use std::io::BufRead;
        let mut cmd = Command::new(binary());
        cmd.args(["serve", "--bind", "127.0.0.1:0"]).args(args);
        if !args.contains(&"--store") {
            cmd.args(super::store_backend::serve_args(home));
        }
        if !args.contains(&"--allow-path") {
            let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
            cmd.arg("--allow-path")
                .arg(std::env::temp_dir())
                .arg("--allow-path")
                .arg(examples);
        }
        cmd.env("SERVICE_HOME", home)
            .env_remove("SERVICE_TOKEN")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn serve");
        let stderr = child.stderr.take().expect("stderr");
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                eprintln!("[serve] {line}");
                lines.lock().unwrap().push(line);
            }
        });
        let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read serve stdout");
        // `service-rs listening on URL`, or `{"listening": URL}` under `--log-format json`.
        let line = line.trim();
        let base = line
            .strip_prefix("service-rs listening on ")
            .map(str::to_string)
            .or_else(|| {
                let json: serde_json::Value = serde_json::from_str(line).ok()?;
                json["listening"].as_str().map(str::to_string)
            })
            .unwrap_or_else(|| panic!("unexpected first line from serve: {line:?}"));
        let token = std::fs::read_to_string(home.join("serve.token"))
            .ok()
            .map(|t| t.trim().to_string());
        Server {
            child,
            base,
            token,
            log,
        }
    }

    /// The log lines so far that parse as JSON objects (`--log-format json`).
    pub fn json_log(&self) -> Vec<serde_json::Value> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The JSON log once a line satisfying `wanted` has arrived; serve writes its log from
    /// another thread, so a line may land just after the response it explains. Panics with the
    /// log after 10 s.
    pub fn json_log_with(
        &self,
        what: &str,
        wanted: impl Fn(&serde_json::Value) -> bool,
    ) -> Vec<serde_json::Value> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let log = self.json_log();
            if log.iter().any(&wanted) {
                return log;
            }
            if std::time::Instant::now() > deadline {
                panic!("no log line {what}: {log:#?}");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// A client that sends the server's token.
    pub fn client(&self) -> reqwest::Client {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(t) = &self.token {
            headers.insert(
                reqwest::header::AUTHORIZATION,
                format!("Bearer {t}").parse().expect("token header"),
            );
        }
        reqwest::Client::builder()
            .default_headers(headers)
            .build()
            .expect("client")
    }

    /// The full URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Waits for the server to exit by itself, for at most `timeout` (then kills it and panics).
    pub fn wait_exit(mut self, timeout: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for serve") {
                std::mem::forget(self);
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "serve did not exit within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let status = self.child.wait().expect("wait for serve");
        std::mem::forget(self);
        status
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `done` every 20 ms until it holds; panics with `failure()` after `timeout`.
pub fn wait_until(
    timeout: Duration,
    mut done: impl FnMut() -> bool,
    failure: impl FnOnce() -> String,
) {
    let deadline = Instant::now() + timeout;
    while !done() {
        if Instant::now() >= deadline {
            panic!("{}", failure());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Host processes whose command line (arguments joined by spaces) contains `marker`.
pub fn processes_with(marker: &str) -> usize {
    pids_with(marker).len()
}

/// The host pids of the processes whose command line contains `marker`.
pub fn pids_with(marker: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| {
                    String::from_utf8_lossy(&c)
                        .replace('\0', " ")
                        .contains(marker)
                })
                .unwrap_or(false)
        })
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// The pid of session `id`'s confined worker (the process bwrap runs as the sandbox's pid 1), as the host sees it.
pub fn confined_worker(id: &str) -> Option<i32> {
    pids_with(&format!("--label {id}")).into_iter().find(|p| {
        std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| {
            // Under Landlock the worker is the host's binary, not bwrap's mount of it.
            c.starts_with(b"/run/service/worker\0")
                || (landlock() && c.split(|b| *b == 0).nth(1) == Some(b"worker"))
        })
    })
}

/// This process's cgroup directory of each cgroup v1 controller, as `(controller, directory)`.
pub fn own_cgroups() -> Vec<(String, PathBuf)> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    own.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let controller = controllers.split(',').next().filter(|c| !c.is_empty())?;
            let dir = Path::new("/sys/fs/cgroup")
                .join(controller)
                .join(path.trim_start_matches('/'));
            Some((controller.to_string(), dir))
        })
        .collect()
}

/// Whether the tests' sandboxes are Landlock's: `SERVICE_SANDBOX_BACKEND=landlock` (which the binary reads too)
/// runs the escape suites against that backend, where some probes read differently and a few do not hold
/// (SECURITY.md, "The Landlock backend").
pub fn landlock() -> bool {
    std::env::var("SERVICE_SANDBOX_BACKEND").is_ok_and(|v| v == "landlock")
}

/// How a refused write outside what a sandbox may write reads: bwrap's read-only mounts, or Landlock's refusal.
pub fn write_refused() -> &'static str {
    match landlock() {
        true => "Permission denied",
        false => "Read-only file system",
    }
}

/// Gives `path` and everything under it to the user a root supervisor runs sandboxes as by default (`nobody`), as
/// a user's project belongs to that user: its sandbox then runs as that owner and may write there. Does nothing
/// when the tests do not run as root (the sandbox is then the test's own user).
pub fn give_to_sandbox(path: &Path) {
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    for entry in walkdir::WalkDir::new(path).into_iter().flatten() {
        std::os::unix::fs::lchown(entry.path(), Some(65534), Some(65534)).unwrap();
    }
}

/// A temporary directory for a session's `cwd` that its sandbox may write (see [`give_to_sandbox`]).
pub fn sandbox_tempdir() -> TempDir {
    let dir = TempDir::new().expect("temp cwd");
    give_to_sandbox(dir.path());
    dir
}

/// The path a gated suite's environment variable `var` names (a cached SDK's Python, a third-party server), or None
/// after saying the test is skipped and how `installer` (a `.ci/` script) provides it.
pub fn gated(var: &str, installer: &str) -> Option<PathBuf> {
    match std::env::var_os(var) {
        Some(p) => Some(PathBuf::from(p)),
        None => {
            eprintln!("skipped: set {var} to what `{installer}` prints (.ci/run sets it)");
            None
        }
    }
}

/// `GET path` on `server` with bearer `token`, as JSON.
pub async fn get_json(server: &Server, token: &str, path: &str) -> serde_json::Value {
    reqwest::Client::new()
        .get(server.url(path))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The entries of a bundle listing (`bundles --json`, `GET /bundles`) that a user installed: without the bundles
/// the binary carries (`builtin/…`), which every store lists.
pub fn installed(list: &serde_json::Value) -> Vec<serde_json::Value> {
    list.as_array()
        .expect("a bundle listing")
        .iter()
        .filter(|b| {
            !b["reference"]
                .as_str()
                .unwrap_or_default()
                .starts_with("builtin/")
        })
        .cloned()
        .collect()
}

/// The status of `GET url` as curl reads it (with `token` as the bearer when given), or `000` when nothing
/// answered: for tests that must not hold a client of their own across a server's stop.
pub fn http_status(url: &str, token: Option<&str>) -> String {
    let mut curl = Command::new("curl");
    curl.args([
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--max-time",
        "5",
    ]);
    if let Some(token) = token {
        curl.args(["-H", &format!("Authorization: Bearer {token}")]);
    }
    let out = curl.arg(url).output().expect("run curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// With `openssl` in `dir`, as an operator would: a certificate authority (`ca.pem`, `ca.key`) and a certificate it
/// issued for `subject_alt_name` (`IP:127.0.0.1`, `DNS:localhost`), written to `cert` with its key in `key`.
pub fn issue_certificate(dir: &Path, subject_alt_name: &str, cert: &str, key: &str) {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("run openssl (installed by .ci/deps)");
        Run::from(out).ok();
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let name = subject_alt_name
        .split_once(':')
        .map_or(subject_alt_name, |(_, n)| n);
    let subject = format!("/CN={name}");
    openssl(
        &[
            &["req", "-x509", "-days", "2", "-subj", "/CN=test CA"],
            &ec[..],
            &["-keyout", "ca.key", "-out", "ca.pem"],
        ]
        .concat(),
    );
    openssl(
        &[
            &["req", "-subj", subject.as_str()],
            &ec[..],
            &["-keyout", key, "-out", "leaf.csr"],
        ]
        .concat(),
    );
    std::fs::write(
        dir.join("leaf.ext"),
        format!("subjectAltName={subject_alt_name}\nbasicConstraints=CA:FALSE\n"),
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "leaf.ext",
        "-out",
        cert,
    ]);
}
