//! Fault tests: a supervisor killed mid-turn, a provider that hangs, a full or read-only store.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::provider_server::{ProviderServer, Reply, Step};
use super::support::{binary, own_cgroups, wait_until, write_bundle, Env, Server};

async fn post(client: &reqwest::Client, url: String, body: Value) -> Value {
    client
        .post(url)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn task(prompt: &str) -> Value {
    json!({"prompt": prompt, "submission_id": "6f1c1c2e-8f1a-4c59-9d0e-4f4a4f7f0a11", "completed": false})
}

async fn get(client: &reqwest::Client, url: String) -> Value {
    client.get(url).send().await.unwrap().json().await.unwrap()
}

/// A new session of `bundle` on `server`, and the answer to its first turn, `prompt`: the session's id and the
/// `run-sync` reply.
async fn session_with_a_turn(server: &Server, bundle: &str, prompt: &str) -> (String, Value) {
    let client = server.client();
    let session = post(
        &client,
        server.url("/sessions"),
        json!({"bundle_ref": bundle}),
    )
    .await;
    let id = session["id"].as_str().unwrap().to_string();
    let first = post(
        &client,
        server.url(&format!("/sessions/{id}/run-sync")),
        json!({"input": task(prompt)}),
    )
    .await;
    (id, first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervisor_killed_mid_turn_leaves_a_consistent_session_that_continues() {
    let env = Env::new();
    write_bundle(
        &env.path("b"),
        r#"{turns: [{when: "slow", replies: [{tool_calls: [{name: "Bash", arguments: {command: "echo started; sleep 60"}}]}]},
                    {replies: [{text: "seen {{message_count}}"}]}]}"#,
        "",
        "workspace_write",
    );
    let bundle = env.path("b").display().to_string();
    let mut server = Server::start(env.home.path(), &[], &[]);
    let client = server.client();
    let (id, first) = session_with_a_turn(&server, &bundle, "hello").await;
    assert_eq!(first["final_message"], "seen 2");
    let started = post(
        &client,
        server.url(&format!("/sessions/{id}/run")),
        json!({"input": task("slow")}),
    )
    .await;
    let turn_id = started["turn_id"].as_str().unwrap().to_string();
    let journal = env.home.path().join(format!("sessions/{id}/events.jsonl"));
    wait_until(
        Duration::from_secs(10),
        || {
            std::fs::read_to_string(&journal)
                .unwrap()
                .contains("started")
        },
        || "the slow command never started".into(),
    );
    server.child.kill().unwrap(); // SIGKILL: no cleanup runs
    server.child.wait().unwrap();

    let server = Server::start(env.home.path(), &[], &[]);
    let client = server.client();
    let record = get(&client, server.url(&format!("/sessions/{id}"))).await;
    assert_eq!(record["status"], "idle", "{record}");
    assert_eq!(record["active_turn"], Value::Null);
    assert_eq!(record["last_turn"]["turn_id"], turn_id.as_str());
    assert_eq!(record["last_turn"]["status"], "interrupted");

    let lines: Vec<Value> = std::fs::read_to_string(&journal)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("no torn line in the journal"))
        .collect();
    let ids: Vec<u64> = lines
        .iter()
        .map(|l| l["id"].as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(
        ids,
        (1..=ids.len() as u64).collect::<Vec<_>>(),
        "no gap, no duplicate"
    );
    let last = &lines.last().unwrap()["payload"];
    assert_eq!(last["type"], "error");
    assert_eq!(last["payload"]["code"], "supervisor_restarted");
    assert_eq!(last["payload"]["turn_id"], turn_id.as_str());

    let next = post(
        &client,
        server.url(&format!("/sessions/{id}/run-sync")),
        json!({"input": task("after")}),
    )
    .await;
    assert_eq!(next["status"], "completed", "{next}");
    // system + hello, seen 2, after: the abandoned turn left no half conversation.
    assert_eq!(next["final_message"], "seen 4");
}

/// `turn_flush = "background"` flushes a turn's end after reporting it, but writes it before: a supervisor killed
/// the moment the client has the answer loses nothing of the turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_flushed_in_the_background_survives_a_supervisor_killed_as_it_ends() {
    let env = Env::new();
    std::fs::write(
        env.home.path().join("config.toml"),
        "turn_flush = \"background\"\n",
    )
    .unwrap();
    write_bundle(
        &env.path("b"),
        r#"{turns: [{replies: [{text: "seen {{message_count}}"}]}]}"#,
        "",
        "read_only",
    );
    let bundle = env.path("b").display().to_string();
    let mut server = Server::start(env.home.path(), &[], &[]);
    let (id, first) = session_with_a_turn(&server, &bundle, "hello").await;
    assert_eq!(first["final_message"], "seen 2", "{first}");
    server.child.kill().unwrap(); // SIGKILL, as soon as the answer is in
    server.child.wait().unwrap();

    let server = Server::start(env.home.path(), &[], &[]);
    let client = server.client();
    let record = get(&client, server.url(&format!("/sessions/{id}"))).await;
    assert_eq!(record["status"], "idle", "{record}");
    assert_eq!(record["last_turn"]["status"], "completed", "{record}");
    assert_eq!(record["last_turn"]["turn_id"], first["turn_id"], "{record}");
    let next = post(
        &client,
        server.url(&format!("/sessions/{id}/run-sync")),
        json!({"input": task("again")}),
    )
    .await;
    // system, hello, seen 2, again: the first turn's messages were kept.
    assert_eq!(next["final_message"], "seen 4", "{next}");
}

#[test]
fn a_provider_that_hangs_fails_the_turn_when_the_time_out_fires() {
    let env = Env::new();
    let hang = Reply::sse(String::new());
    let hang = hang.with_steps(vec![Step::Pause(Duration::from_secs(30))]);
    let server = ProviderServer::start(vec![hang]);
    let dir = env.path("hang");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("service.bundle.json5"),
        r#"{ manifest_version: "service.bundle/v1", id: "hang", version: "1.0.0", tools: [], sandbox: { mode: "danger_full_access" } }"#,
    )
    .unwrap();
    let agent = json!({"model": {"provider": "openai", "name": "m", "config": {"base_url": server.base, "timeout_ms": 700, "max_retries": 0}}});
    std::fs::write(dir.join("agent.yaml"), agent.to_string()).unwrap();
    let started = Instant::now();
    let err = env
        .run(&["run", "./hang", "--prompt", "go"])
        .failed()
        .to_string();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the time-out did not fire"
    );
    assert!(
        err.contains(&format!(
            "(provider_timeout): the stream from {}/chat/completions stalled for 700ms",
            server.base
        )),
        "{err}"
    );
}

/// Runs a shell script as root in a private mount namespace (so test mounts vanish with it).
fn in_mount_namespace(script: &str) -> std::process::Output {
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script])
        .output()
        .expect("unshare (util-linux) is needed")
}

#[test]
fn a_full_store_gives_a_clear_error_and_leaves_no_partial_install() {
    let env = Env::new();
    let project = env.path("big");
    env.run(&["init", "big"]).ok();
    // 2 MiB of incompressible data cannot fit a 1 MiB store.
    let noise: Vec<u8> = (0..2 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(project.join("resources/noise.bin"), noise).unwrap();
    let store = env.path("store");
    std::fs::create_dir(&store).unwrap();
    let script = format!(
        "mount -t tmpfs -o size=1m tmpfs {store} && SERVICE_HOME={store} {bin} build {project}; echo EXIT=$?; find {store} -mindepth 1 | wc -l",
        store = store.display(),
        bin = binary().display(),
        project = project.display()
    );
    let out = in_mount_namespace(&script);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("EXIT=1"), "{stdout}{stderr}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    let leftover: usize = stdout.lines().last().unwrap().trim().parse().unwrap();
    // Only the empty namespace directories may remain: no staging directory, no version directory.
    assert!(
        leftover <= 4,
        "{leftover} entries left in the store:\n{stdout}"
    );
    assert!(!stdout.contains("staging"));
}

#[test]
fn a_read_only_store_gives_a_clear_error() {
    let env = Env::new();
    env.run(&["init", "ro"]).ok();
    let store = env.path("rostore");
    std::fs::create_dir(&store).unwrap();
    let script = format!(
        "mount -t tmpfs -o ro tmpfs {store} && SERVICE_HOME={store} {bin} build {project}; echo EXIT=$?; SERVICE_HOME={store} {bin} run {project} --prompt hi; echo EXIT=$?",
        store = store.display(),
        bin = binary().display(),
        project = env.path("ro").display()
    );
    let out = in_mount_namespace(&script);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stdout.matches("EXIT=1").count(), 2, "{stdout}{stderr}");
    assert!(stderr.contains("Read-only file system"), "{stderr}");
    assert!(
        stderr.contains("cannot create"),
        "the error names what it tried: {stderr}"
    );
}

/// Pids of host processes whose command line contains all of `needles`.
fn pids_with(needles: &[&str]) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_string_lossy().parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            needles.iter().all(|n| cmdline.contains(n)).then_some(pid)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_model_stream_fails_the_turn_and_the_next_turn_works() {
    let env = Env::new();
    write_bundle(
        &env.path("s"),
        // A tool call first, so the worker has the turn (a text-only turn the supervisor answers by itself).
        r#"{turns: [{when: "long", replies: [{tool_calls: [{name: "Glob", arguments: {pattern: "*"}}]},
                                            {text: "one two three four five six seven eight nine ten eleven twelve", delay_ms: 300}]},
                    {replies: [{text: "fresh {{message_count}}"}]}]}"#,
        "",
        "danger_full_access",
    );
    let rt = super::support::runtime(env.home.path());
    let id = rt
        .create_session(env.path("s").to_str().unwrap(), None)
        .await
        .unwrap()
        .id;
    let mut events = rt.subscribe_session(&id).await.unwrap();
    let pending = rt
        .start_turn(
            &id,
            service_ipc::Task::new("long story"),
            Default::default(),
        )
        .await
        .unwrap();
    use futures::StreamExt;
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .unwrap()
            .unwrap();
        if msg.payload.kind() == "agent_message_delta" {
            break;
        }
    }
    let workers = pids_with(&["worker --ipc-fd", &id]);
    assert_eq!(workers.len(), 1, "{workers:?}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(workers[0]),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(10), pending.outcome)
        .await
        .unwrap()
        .unwrap();
    let (code, message) = outcome.error.unwrap();
    assert_eq!(code, "worker_died");
    assert!(message.contains("signal 9"), "{message}");
    let next = rt
        .run_turn(&id, service_ipc::Task::new("again"), Default::default())
        .await
        .unwrap();
    assert_eq!(next.final_message, "fresh 2");
    rt.shutdown("test over").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_sessions_times_ten_turns_over_http_with_every_event_delivered() {
    let env = Env::new();
    write_bundle(
        &env.path("load"),
        r#"{turns: [{replies: [{reasoning: "hm", text: "turn done {{message_count}}"}]}]}"#,
        "",
        "workspace_write",
    );
    let bundle = env.path("load").display().to_string();
    let server = Server::start(env.home.path(), &[], &[]);
    let client = server.client();
    let mut ids = Vec::new();
    for _ in 0..50 {
        let s = post(
            &client,
            server.url("/sessions"),
            json!({"bundle_ref": bundle}),
        )
        .await;
        ids.push(s["id"].as_str().unwrap().to_string());
    }
    // One SSE client per session, counting what it receives until the tenth turn ends.
    let mut watchers = Vec::new();
    for id in &ids {
        let resp = client
            .get(server.url(&format!("/sessions/{id}/events")))
            .send()
            .await
            .unwrap();
        watchers.push(tokio::spawn(async move {
            use futures::StreamExt;
            let mut stream = eventsource_stream::Eventsource::eventsource(resp.bytes_stream());
            let (mut count, mut ends) = (0usize, 0usize);
            while let Some(Ok(ev)) = stream.next().await {
                count += 1;
                if ev.data.contains("\"turn_completed\"") || ev.data.contains("\"type\":\"error\"")
                {
                    ends += 1;
                    if ends == 10 {
                        break;
                    }
                }
            }
            count
        }));
    }
    let runs = ids.iter().map(|id| {
        let (client, url) = (
            client.clone(),
            server.url(&format!("/sessions/{id}/run-sync")),
        );
        async move {
            let mut errors = 0;
            for _ in 0..10 {
                let r = post(&client, url.clone(), json!({"input": task("go")})).await;
                if r["status"] != "completed" {
                    errors += 1;
                }
            }
            errors
        }
    });
    let errors: usize = futures::future::join_all(runs).await.into_iter().sum();
    assert_eq!(errors, 0);
    for (id, w) in ids.iter().zip(watchers) {
        let delivered = tokio::time::timeout(Duration::from_secs(30), w)
            .await
            .unwrap()
            .unwrap();
        let journaled =
            std::fs::read_to_string(env.home.path().join(format!("sessions/{id}/events.jsonl")))
                .unwrap()
                .lines()
                .count();
        assert_eq!(
            delivered, journaled,
            "session {id}: every journaled event reached its subscriber"
        );
    }
}

/// This process's cgroup directory of the `pids` controller (cgroup v1), where workers' cgroups are made.
fn pids_cgroup() -> std::path::PathBuf {
    own_cgroups()
        .into_iter()
        .find_map(|(controller, dir)| (controller == "pids").then_some(dir))
        .expect("a pids cgroup (cgroup v1)")
}

#[test]
fn cgroups_left_by_a_killed_supervisor_are_removed_by_the_next_one() {
    let base = pids_cgroup();
    let tag = std::process::id();
    let (old, young) = (
        base.join(format!("service-rs-left-{tag}")),
        base.join(format!("service-rs-young-{tag}")),
    );
    for dir in [&old, &young] {
        std::fs::create_dir(dir).expect("this test needs a writable cgroup v1 pids hierarchy");
    }
    let two_hours_ago = std::time::SystemTime::now() - Duration::from_secs(7200);
    std::fs::File::open(&old)
        .unwrap()
        .set_modified(two_hours_ago)
        .unwrap();
    let env = Env::new();
    let server = Server::start(env.home.path(), &[], &[]);
    wait_until(
        Duration::from_secs(10),
        || !old.exists(),
        || format!("{} was not removed", old.display()),
    );
    drop(server);
    assert!(
        young.exists(),
        "a cgroup younger than a minute may be a worker's being started; it must stay"
    );
    std::fs::remove_dir(&young).unwrap();
}
