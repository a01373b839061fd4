//! The shared PostgreSQL store against the embedded files, with a throwaway PostgreSQL on loopback (`fsync=on`, as in
//! production):
//!
//! - the median warm turn (a confined worker, the scripted model) with each store, in interleaved rounds;
//! - events per second journaled through PostgreSQL by 3 nodes (3 stores with their own pools, 4 sessions each),
//!   from the first append to the last commit.
//!
//! `cargo build --release --workspace --bins && cargo bench -p service-e2e --bench store` (`BENCH_TURNS` sets the
//! turns per round, 200 by default).

// A bench panics on a broken fixture by design; the workspace lint is for library code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/suite/postgres.rs"]
#[allow(dead_code)]
mod postgres;
#[path = "../tests/suite/support.rs"]
#[allow(dead_code)]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use service_ipc::{EventPayload, Task, TurnOverrides};
use service_supervisor::runtime::store::postgres::{Node, PgStore};
use service_supervisor::runtime::store::{files::FilesStore, Store};
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
    let files = runtime(
        "files",
        Arc::new(FilesStore::new(ServiceHome::new(work.path().join("files")))),
    );
    let shared = runtime(
        "pg",
        Arc::new(
            PgStore::connect(&pg.url(), node("bench"), Duration::from_secs(10))
                .await
                .unwrap(),
        ),
    );

    println!("warm turn, confined worker, scripted model ({per_round} turns a round, median ms):");
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
}
