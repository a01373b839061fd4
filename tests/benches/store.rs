//! The shared PostgreSQL store against the embedded files, with a throwaway PostgreSQL on loopback (`fsync=on`, as in
//! production):
//!
//! - the median warm turn (a confined worker, the scripted model) with each store, in interleaved rounds;
//! - events per second journaled through PostgreSQL by 3 nodes (3 stores with their own pools, 4 sessions each),
//!   from the first append to the last commit;
//! - failover: two `serve` processes over the database, the owner of a session SIGKILLed, and the time until the next
//!   turn sent to the other node is answered (clients retry every 20 ms, as `Retry-After` invites them to).
//!
//! `cargo build --release --workspace --bins && cargo bench -p service-e2e --bench store` (`BENCH_TURNS` sets the
//! turns per round, 200 by default; `BENCH_TURN_FLUSH=background` runs both stores with `turn_flush = background`).

// A bench panics on a broken fixture by design; the workspace lint is for library code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/suite/postgres.rs"]
#[allow(dead_code)]
mod postgres;
#[path = "../tests/suite/store_backend.rs"]
#[allow(dead_code)]
mod store_backend;
#[path = "../tests/suite/support.rs"]
#[allow(dead_code)]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use service_ipc::{EventPayload, Task, TurnOverrides};
use service_supervisor::runtime::store::postgres::{Node, PgStore};
use service_supervisor::runtime::store::{files::FilesStore, Store, TurnFlush};
use service_supervisor::{RuntimeOptions, ServiceHome, ServiceRuntime};

const ROUNDS: usize = 3;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn node(id: &str) -> Node {
    Node {
        id: id.into(),
        url: format!("http://{id}.invalid"),
    }
}

/// `turns` warm turns in a new session of `bundle`: each one's milliseconds.
async fn turns(rt: &ServiceRuntime, bundle: &str, turns: usize) -> Vec<f64> {
    let id = rt.create_session(bundle, None).await.unwrap().id;
    let run = |prompt: &str| rt.run_turn(&id, Task::new(prompt), TurnOverrides::default());
    assert_eq!(run("warm").await.unwrap().final_message, "ok");
    let mut out = Vec::with_capacity(turns);
    for i in 0..turns {
        let start = Instant::now();
        let outcome = run(&format!("turn {i}")).await.unwrap();
        out.push(start.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(outcome.final_message, "ok");
    }
    rt.delete_session(&id).await.unwrap();
    out
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let per_round: usize = std::env::var("BENCH_TURNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    // Durable commits, as the files store's flushed writes.
    let pg = postgres::Postgres::start_durable();
    let work = tempfile::TempDir::new().unwrap();
    let bundle = work.path().join("bundle");
    support::write_bundle(
        &bundle,
        r#"{turns: [{replies: [{text: "ok"}]}]}"#,
        "",
        "workspace_write",
    );
    let bundle = bundle.display().to_string();
    let worker = service_supervisor::worker_beside(&support::binary());
    let runtime = |home: &str, store: Arc<dyn Store>| {
        let home = ServiceHome::new(work.path().join(home));
        ServiceRuntime::with_store(home, RuntimeOptions::new(worker.clone()), store)
    };
    let flush = match std::env::var("BENCH_TURN_FLUSH").as_deref() {
        Ok("background") => TurnFlush::Background,
        _ => TurnFlush::Turn,
    };
    let files = runtime(
        "files",
        Arc::new(
            FilesStore::new(ServiceHome::new(work.path().join("files"))).with_turn_flush(flush),
        ),
    );
    let shared = runtime(
        "pg",
        Arc::new(
            PgStore::connect(&pg.url(), node("bench"), Duration::from_secs(10))
                .await
                .unwrap()
                .with_turn_flush(flush),
        ),
    );
    // As `serve` does: the leases of sessions without a running worker are let go in the background.
    shared.keep_claims();

    println!(
        "warm turn, confined worker, scripted model ({per_round} turns a round, median ms, turn_flush = {}):",
        flush.as_str()
    );
    println!("| round | files | postgres | difference |");
    println!("|---|---|---|---|");
    for round in 1..=ROUNDS {
        let f = median(turns(&files, &bundle, per_round).await);
        let p = median(turns(&shared, &bundle, per_round).await);
        println!("| {round} | {f:.3} | {p:.3} | {:+.3} |", p - f);
    }

    // Three nodes append to their own sessions at once, in batches as a streaming turn makes them.
    const SESSIONS: usize = 4;
    const BATCHES: usize = 500;
    const PER_BATCH: usize = 16;
    let mut logs = Vec::new();
    let mut stores = Vec::new();
    for n in 0..3 {
        let store = Arc::new(
            PgStore::connect(&pg.url(), node(&format!("n{n}")), Duration::from_secs(10))
                .await
                .unwrap(),
        );
        for _ in 0..SESSIONS {
            let id = shared.create_session(&bundle, None).await.unwrap().id;
            let quiet: service_supervisor::runtime::store::Publish = Arc::new(|_| {});
            logs.push(store.open_log(&id, quiet).await.unwrap());
        }
        stores.push(store);
    }
    for round in 1..=ROUNDS {
        let start = Instant::now();
        for _ in 0..BATCHES {
            for log in &logs {
                let batch = (0..PER_BATCH)
                    .map(|i| EventPayload::AgentMessageDelta {
                        turn_id: "t".into(),
                        delta: format!("word{i} "),
                    })
                    .collect();
                log.append_events(batch).unwrap();
            }
            tokio::task::yield_now().await;
        }
        for log in &logs {
            let (tx, rx) = tokio::sync::oneshot::channel();
            log.after_stored(Box::new(move || {
                let _ = tx.send(());
            }));
            rx.await.unwrap();
        }
        let events = logs.len() * BATCHES * PER_BATCH;
        let rate = events as f64 / start.elapsed().as_secs_f64();
        println!(
            "events journaled through PostgreSQL, 3 nodes x {SESSIONS} sessions, round {round}: {events} in \
             {:.2} s, {rate:.0} events/s",
            start.elapsed().as_secs_f64()
        );
    }

    let lease = Duration::from_secs(3);
    let times: Vec<f64> = {
        let mut out = Vec::new();
        for _ in 0..ROUNDS {
            out.push(failover(&pg, &work, &bundle, lease).await);
        }
        out
    };
    println!(
        "failover with a {lease:?} lease, owner SIGKILLed to the next turn answered on another node, s: {} \
         (median {:.3}, beyond the lease {:+.3})",
        times.iter().map(|t| format!("{t:.3}")).collect::<Vec<_>>().join(" / "),
        median(times.clone()),
        median(times) - lease.as_secs_f64()
    );
}

/// One failover: seconds from SIGKILL of a session's owner to the next turn answered by the other node.
async fn failover(
    pg: &postgres::Postgres,
    work: &tempfile::TempDir,
    bundle: &str,
    lease: Duration,
) -> f64 {
    const TOKEN: &str = "bench-token";
    let lease_arg = format!("{}s", lease.as_secs());
    // The session works in a directory both nodes reach, as a session that fails over must: one in a node's own
    // workspace runs on that node only.
    let shared = tempfile::TempDir::new_in(work.path()).unwrap();
    support::give_to_sandbox(shared.path());
    let root = shared.path().to_str().unwrap();
    let node = |id: &str| {
        let home = tempfile::TempDir::new_in(work.path()).unwrap();
        let node = pg.node_args(id, "bench-cluster", &lease_arg);
        let mut args = vec!["--token", TOKEN, "--workspace-root", root];
        args.extend(node.iter().map(String::as_str));
        (support::Server::start(home.path(), &args, &[]), home)
    };
    let ((survivor, _a), (mut owner, _b)) = (node("a"), node("b"));
    let http = reqwest::Client::new();
    let post = |base: &str, path: &str, body: serde_json::Value| {
        http.post(format!("{base}{path}"))
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
    };
    let created: serde_json::Value = post(
        &owner.base,
        "/sessions",
        serde_json::json!({"bundle_ref": bundle, "cwd": root}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let turn = format!("/sessions/{}/run-sync", created["id"].as_str().unwrap());
    let prompt = serde_json::json!({"input": {"prompt": "warm"}});
    let warm = post(&owner.base, &turn, prompt.clone()).await.unwrap();
    assert_eq!(warm.status(), 200);

    let killed = Instant::now();
    owner.child.kill().unwrap();
    owner.child.wait().unwrap();
    loop {
        let answer = post(&survivor.base, &turn, prompt.clone()).await.unwrap();
        match answer.status().as_u16() {
            200 => return killed.elapsed().as_secs_f64(),
            503 => tokio::time::sleep(Duration::from_millis(20)).await,
            other => panic!(
                "status {other}: {}",
                answer.text().await.unwrap_or_default()
            ),
        }
        assert!(killed.elapsed() < lease * 4, "no failover");
    }
}
