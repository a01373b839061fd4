//! The web console on a session of over 10,000 events, in headless Chromium against a real `serve`: how long the
//! page takes from navigation until every event is rendered, the longest main-thread task meanwhile (what a user
//! feels as a freeze), and how long the virtualised inspector takes to show another part of the journal.
//!
//! `cargo build --workspace --bins && cargo bench -p service-e2e --bench console --profile dev` (the browser's work
//! is what is measured, so no optimised build is needed; `SERVICE_RS_BIN` picks another `service-rs`).

// A bench panics on a broken fixture by design; the workspace lint is for library code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/suite/browser.rs"]
#[allow(dead_code)]
mod browser;
#[path = "../tests/suite/postgres.rs"]
#[allow(dead_code)]
mod postgres;
#[path = "../tests/suite/store_backend.rs"]
#[allow(dead_code)]
mod store_backend;
#[path = "../tests/suite/support.rs"]
#[allow(dead_code)]
mod support;

use std::time::Duration;

use serde_json::{json, Value};

const RUNS: usize = 5;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    if std::env::var_os("SERVICE_RS_BIN").is_none() {
        let release =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/service-rs");
        if release.is_file() {
            std::env::set_var("SERVICE_RS_BIN", release);
        }
    }
    let env = support::Env::new();
    support::build_long_answer_bundle(&env, 30_000);
    let server = support::Server::start(env.home.path(), &["--no-auth"], &[]);
    let http = reqwest::Client::new();
    let call = |req: reqwest::RequestBuilder| async move {
        req.send().await.unwrap().json::<Value>().await.unwrap()
    };
    let session = call(
        http.post(server.url("/sessions"))
            .json(&json!({"bundle_ref": "fixture"})),
    )
    .await;
    let id = session["id"].as_str().unwrap().to_string();
    call(
        http.post(server.url(&format!("/sessions/{id}/run-sync")))
            .json(&json!({"input": {"prompt": "go"}})),
    )
    .await;
    let journal = call(http.get(server.url(&format!("/sessions/{id}/journal")))).await;
    let events = journal.as_array().unwrap().len();

    let browser = browser::Browser::start(1280).await;
    let (mut rendered, mut longest, mut scrolls) = (Vec::new(), Vec::new(), Vec::new());
    let supported = browser
        .js("return PerformanceObserver.supportedEntryTypes.includes('longtask')")
        .await;
    assert_eq!(supported, Value::Bool(true), "Chromium reports long tasks");
    for _ in 0..RUNS {
        browser.client.goto("about:blank").await.unwrap();
        browser
            .client
            .goto(&server.url(&format!("/ui/sessions/{id}")))
            .await
            .unwrap();
        // Milliseconds from navigation until the inspector holds every event, measured in the page.
        let done = browser
            .client
            .execute_async(
                &format!(
                    "const done = arguments[arguments.length - 1];
                     const check = () => document.querySelector('#events-count').dataset.count === '{events}'
                       ? done(performance.now()) : requestAnimationFrame(check);
                     check();"
                ),
                Vec::new(),
            )
            .await
            .unwrap();
        rendered.push(done.as_f64().unwrap());
        // The longest task on the main thread since navigation (the observer reads the buffered entries).
        let task = browser
            .client
            .execute_async(
                "const done = arguments[arguments.length - 1];
                 new PerformanceObserver((list, obs) => { obs.disconnect();
                   done(Math.max(0, ...list.getEntries().map(e => e.duration))); })
                   .observe({type: 'longtask', buffered: true});
                 setTimeout(() => done(0), 200);",
                Vec::new(),
            )
            .await
            .unwrap();
        longest.push(task.as_f64().unwrap_or(0.0));
        // The inspector jumping to 20 places in the journal: the frame in which each is drawn, from its start to
        // the next frame's (one display refresh when the rows fit in the frame).
        browser.click("#tab-events").await;
        let jump = browser
            .client
            .execute_async(
                "const done = arguments[arguments.length - 1];
                 const box = document.querySelector('#events');
                 const times = []; let i = 0;
                 const next = () => {
                   if (i === 20) return done(times);
                   box.scrollTop = (box.scrollHeight * i++) / 20;
                   requestAnimationFrame((t0) => requestAnimationFrame((t1) => { times.push(t1 - t0); next(); }));
                 };
                 next();",
                Vec::new(),
            )
            .await
            .unwrap();
        scrolls.extend(jump.as_array().unwrap().iter().filter_map(Value::as_f64));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    browser.close().await;
    println!("web console, a session of {events} events, {RUNS} loads in headless Chromium");
    println!("| measure | median | all |");
    println!("|---|---|---|");
    println!(
        "| navigation to every event rendered | {:.0} ms | {:?} |",
        median(rendered.clone()),
        rendered.iter().map(|v| v.round()).collect::<Vec<_>>()
    );
    println!(
        "| longest main-thread task during that (0: none over 50 ms, the long-task threshold) | {:.0} ms | {:?} |",
        median(longest.clone()),
        longest.iter().map(|v| v.round()).collect::<Vec<_>>()
    );
    println!(
        "| frame in which the inspector draws another part of the journal | {:.1} ms | {} jumps |",
        median(scrolls.clone()),
        scrolls.len()
    );
}
