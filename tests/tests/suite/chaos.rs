//! Chaos: clients run turns on `serve` (run-sync, and `/run` followed over SSE with `Last-Event-ID` resumes) while
//! the server is SIGKILLed and started again on the same store, files or PostgreSQL (`SERVICE_TEST_STORE=postgres`),
//! and sandboxed workers are killed in between; the last kills run with `turn_flush = "background"`. Afterwards:
//! every turn a client was told had completed is in the journal with its answer, every `turn_started` ends exactly
//! once and no end comes without a start, sequence numbers are dense, what SSE delivered is what the journal holds,
//! the list shows no running turn right after each restart, every session goes on, and a clean stop leaves no
//! spare workspace behind.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};
use tempfile::TempDir;
use tokio::sync::watch;

use super::crash_points::ends;
use super::http_client::{task, Api};
use super::support::{confined_worker, write_bundle, Server};

const TOKEN: &str = "chaos-token";
const CLIENTS: usize = 4;
/// Kills with the default flush, then with `turn_flush = "background"`.
const KILLS: usize = 3;
const BACKGROUND_KILLS: usize = 2;
/// A client moves to a new session after this many turns, so the store holds more than one session per client.
const TURNS_PER_SESSION: usize = 30;
const SCRIPT: &str = r#"{turns: [
  {when: "tool", replies: [
    {tool_calls: [{name: "Bash", arguments: {command: "echo from-bash"}}]},
    {text: "answer to {{prompt}}"},
  ]},
  {replies: [{text: "answer to {{prompt}}", delay_ms: 2}]},
]}"#;

/// A turn whose completion a client saw: in a run-sync answer or on the event stream.
#[derive(Debug, Clone)]
struct Acked {
    session: String,
    turn: String,
    answer: String,
}

/// Events SSE delivered, by session and sequence number: their type and turn.
type Delivered = HashMap<String, BTreeMap<u64, (String, String)>>;

/// What the clients and the killer share.
struct Chaos {
    base: watch::Receiver<String>,
    stop: AtomicBool,
    acked: Mutex<Vec<Acked>>,
    /// The turns `/run` accepted (202), by session.
    accepted: Mutex<Vec<(String, String)>>,
    delivered: Mutex<Delivered>,
    sessions: Mutex<Vec<String>>,
    resumes: AtomicUsize,
    refused: AtomicUsize,
}

impl Chaos {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base.borrow().as_str())
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

fn request(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: String,
) -> reqwest::RequestBuilder {
    client
        .request(method, url)
        .bearer_auth(TOKEN)
        .timeout(Duration::from_secs(30))
}

fn event_turn(event: &Value) -> (String, String) {
    let payload = &event["payload"];
    (
        payload["type"].as_str().unwrap_or_default().to_string(),
        payload["payload"]["turn_id"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

/// Follows `session`'s events after `last` until `turn` ends, resuming with `Last-Event-ID` on whichever server
/// is up; its final message when it completed. Sequence numbers never go back or repeat across resumes.
async fn follow(chaos: &Chaos, session: &str, turn: &str, last: &mut u64) -> Option<String> {
    let client = reqwest::Client::new();
    let mut first = true;
    loop {
        if !first {
            chaos.resumes.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        first = false;
        let url = chaos.url(&format!("/sessions/{session}/events"));
        let resp = client
            .get(url)
            .bearer_auth(TOKEN)
            .header("Last-Event-ID", last.to_string())
            .send()
            .await;
        let Ok(resp) = resp.map_err(|e| e.to_string()) else {
            continue;
        };
        if resp.status() != 200 {
            continue;
        }
        let mut events = eventsource_stream::Eventsource::eventsource(resp.bytes_stream());
        loop {
            let event = match tokio::time::timeout(Duration::from_secs(5), events.next()).await {
                Ok(Some(Ok(event))) => event,
                Ok(_) => break,
                // A quiet stream of a session that runs nothing: the turn's end is not coming (it was lost with
                // a server before it was stored; the journal check below finds out if it should have been).
                Err(_) if !session_runs(chaos, session).await => return None,
                Err(_) => continue,
            };
            let value: Value = serde_json::from_str(&event.data).expect("an event as JSON");
            let Ok(seq) = event.id.parse::<u64>() else {
                continue;
            };
            assert!(
                seq > *last,
                "event {seq} of {session} came after {last}: {value}"
            );
            *last = seq;
            let (kind, of) = event_turn(&value);
            chaos
                .delivered
                .lock()
                .unwrap()
                .entry(session.to_string())
                .or_default()
                .insert(seq, (kind.clone(), of.clone()));
            if of == turn {
                match kind.as_str() {
                    "turn_completed" => {
                        return value["payload"]["payload"]["final_message"]
                            .as_str()
                            .map(String::from)
                    }
                    "error" => return None,
                    _ => {}
                }
            }
        }
    }
}

/// Whether the list says `session` runs a turn.
async fn session_runs(chaos: &Chaos, session: &str) -> bool {
    let list = request(
        &reqwest::Client::new(),
        reqwest::Method::GET,
        chaos.url("/sessions"),
    )
    .send()
    .await;
    let Ok(list) = list else { return true };
    let list: Value = list.json().await.unwrap_or_default();
    list.as_array()
        .into_iter()
        .flatten()
        .any(|s| s["id"] == session && s["status"] == "running")
}

/// One client: turns on its session until the run stops, half of them run-sync, half followed over SSE; every
/// fifth turn calls a tool in the sandbox.
async fn client(chaos: Arc<Chaos>, bundle: String, me: usize) {
    let http = reqwest::Client::new();
    let mut session: Option<(String, u64)> = None;
    let mut n = 0usize;
    while !chaos.stopped() {
        let Some((id, last)) = &mut session else {
            let made = request(&http, reqwest::Method::POST, chaos.url("/sessions"))
                .json(&json!({"bundle_ref": bundle}))
                .send()
                .await;
            match made {
                Ok(r) if r.status() == 201 => {
                    let body: Value = r.json().await.unwrap();
                    let id = body["id"].as_str().unwrap().to_string();
                    chaos.sessions.lock().unwrap().push(id.clone());
                    session = Some((id, 0));
                }
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
            continue;
        };
        n += 1;
        let prompt = if n.is_multiple_of(5) {
            format!("client {me} turn {n} tool")
        } else {
            format!("client {me} turn {n}")
        };
        let acked = if n.is_multiple_of(2) {
            let answer = request(
                &http,
                reqwest::Method::POST,
                chaos.url(&format!("/sessions/{id}/run-sync")),
            )
            .json(&json!({"input": task(&prompt)}))
            .send()
            .await;
            match answer {
                Ok(r) if r.status() == 200 => {
                    let body: Value = r.json().await.unwrap();
                    (body["status"] == "completed").then(|| {
                        (
                            body["turn_id"].as_str().unwrap().to_string(),
                            body["final_message"].as_str().unwrap().to_string(),
                        )
                    })
                }
                _ => None,
            }
        } else {
            let started = request(
                &http,
                reqwest::Method::POST,
                chaos.url(&format!("/sessions/{id}/run")),
            )
            .json(&json!({"input": task(&prompt)}))
            .send()
            .await;
            match started {
                Ok(r) if r.status() == 202 => {
                    let body: Value = r.json().await.unwrap();
                    let turn = body["turn_id"].as_str().unwrap().to_string();
                    chaos
                        .accepted
                        .lock()
                        .unwrap()
                        .push((id.clone(), turn.clone()));
                    follow(&chaos, id, &turn, last)
                        .await
                        .map(|answer| (turn, answer))
                }
                _ => None,
            }
        };
        match acked {
            Some((turn, answer)) => {
                assert_eq!(answer, format!("answer to {prompt}"), "turn {turn} of {id}");
                chaos.acked.lock().unwrap().push(Acked {
                    session: id.clone(),
                    turn,
                    answer,
                });
            }
            None => {
                chaos.refused.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        if n.is_multiple_of(TURNS_PER_SESSION) {
            session = None;
        }
    }
}

/// The sessions the list shows as running.
async fn running(api: &Api) -> Vec<Value> {
    let (status, list) = api.get("/sessions").await;
    assert_eq!(status, 200, "{list}");
    list.as_array()
        .unwrap()
        .iter()
        .filter(|s| s["status"] == "running")
        .cloned()
        .collect()
}

fn start(home: &TempDir) -> Api {
    Api::with_token(Server::start(home.path(), &["--token", TOKEN], &[]), TOKEN)
}

/// Every path under `root`, directories too, relative to it.
fn walkdir(root: &std::path::Path) -> Vec<String> {
    walkdir::WalkDir::new(root)
        .min_depth(1)
        .into_iter()
        .filter_map(Result::ok)
        .map(|e| {
            e.path()
                .strip_prefix(root)
                .unwrap_or(e.path())
                .display()
                .to_string()
        })
        .collect()
}

/// The journal of `id` with its sequence numbers dense from 1.
async fn dense_journal(api: &Api, id: &str) -> Vec<Value> {
    let (status, journal) = api.get(&format!("/sessions/{id}/journal")).await;
    assert_eq!(status, 200, "{journal}");
    let journal = journal.as_array().unwrap().clone();
    for (i, event) in journal.iter().enumerate() {
        assert_eq!(
            event["id"],
            (i + 1).to_string(),
            "the journal of {id} skips or repeats a number at {i}"
        );
    }
    journal
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_survive_killed_servers_and_workers_whole_once_and_in_order() {
    let (home, bundle) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    write_bundle(
        bundle.path(),
        SCRIPT,
        "permissions:\n  default: allow\n",
        "read_only",
    );
    let mut api = start(&home);
    let (publish, base) = watch::channel(api.server.base.clone());
    let chaos = Arc::new(Chaos {
        base,
        stop: AtomicBool::new(false),
        acked: Mutex::new(Vec::new()),
        accepted: Mutex::new(Vec::new()),
        delivered: Mutex::new(HashMap::new()),
        sessions: Mutex::new(Vec::new()),
        resumes: AtomicUsize::new(0),
        refused: AtomicUsize::new(0),
    });
    let clients: Vec<_> = (0..CLIENTS)
        .map(|me| {
            let path = bundle.path().to_str().unwrap().to_string();
            tokio::spawn(client(chaos.clone(), path, me))
        })
        .collect();

    // The pauses between kills vary, from a seed the log shows, so a failing run can be told apart.
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("chaos seed {seed}");
    let mut next = move |below: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % below
    };
    for kill in 0..KILLS + BACKGROUND_KILLS {
        tokio::time::sleep(Duration::from_millis(1500 + next(1500))).await;
        let sessions = chaos.sessions.lock().unwrap().clone();
        if let Some(worker) = sessions
            .get(next(sessions.len().max(1) as u64) as usize)
            .and_then(|s| confined_worker(s))
        {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(worker),
                nix::sys::signal::Signal::SIGKILL,
            );
            tokio::time::sleep(Duration::from_millis(300 + next(700))).await;
        }
        let server = api.server();
        server.child.kill().unwrap();
        server.child.wait().unwrap();
        drop(api);
        if kill + 1 == KILLS {
            std::fs::write(
                home.path().join("config.toml"),
                "turn_flush = \"background\"\n",
            )
            .unwrap();
        }
        let home_path = home.path().to_path_buf();
        let restarted = tokio::task::spawn_blocking(move || {
            Server::start(&home_path, &["--token", TOKEN], &[])
        })
        .await
        .unwrap();
        api = Api::with_token(restarted, TOKEN);
        // Before any client knows the new server, the list must show that no turn runs.
        let running = running(&api).await;
        assert!(
            running.is_empty(),
            "right after restart {kill}: {running:#?}"
        );
        publish.send(api.server.base.clone()).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    chaos.stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.await.unwrap();
    }

    let acked = chaos.acked.lock().unwrap().clone();
    let sessions = chaos.sessions.lock().unwrap().clone();
    eprintln!(
        "chaos: {} turns acknowledged in {} sessions, {} refused or cut, {} SSE resumes",
        acked.len(),
        sessions.len(),
        chaos.refused.load(Ordering::Relaxed),
        chaos.resumes.load(Ordering::Relaxed)
    );
    assert!(
        acked.len() >= 100,
        "too few turns to say anything: {}",
        acked.len()
    );
    assert!(running(&api).await.is_empty());
    let delivered = chaos.delivered.lock().unwrap().clone();
    let accepted = chaos.accepted.lock().unwrap().clone();
    for id in &sessions {
        let journal = dense_journal(&api, id).await;
        // `ends` fails on an end without a start; each start has exactly one end.
        let turns = ends(&api, id).await;
        assert!(
            turns.iter().all(|t| t.len() == 1),
            "{id}: a turn without an end, or with two: {turns:?}"
        );
        for (seq, (kind, turn)) in delivered.get(id).into_iter().flatten() {
            let stored = journal
                .get(*seq as usize - 1)
                .map(event_turn)
                .unwrap_or_default();
            assert_eq!(
                (kind, turn),
                (&stored.0, &stored.1),
                "SSE delivered event {seq} of {id}, the journal holds another"
            );
        }
        for a in acked.iter().filter(|a| a.session == *id) {
            let end = journal
                .iter()
                .find(|e| event_turn(e) == ("turn_completed".to_string(), a.turn.clone()));
            let end =
                end.unwrap_or_else(|| panic!("acknowledged turn {a:?} is not in the journal"));
            assert_eq!(
                end["payload"]["payload"]["final_message"],
                a.answer.as_str()
            );
        }
        // A turn `/run` accepted was journaled before the 202: it started, and so it ended.
        for (_, turn) in accepted.iter().filter(|(s, _)| s == id) {
            assert!(
                journal
                    .iter()
                    .any(|e| event_turn(e) == ("turn_started".to_string(), turn.clone())),
                "turn {turn} of {id} was accepted and is not in the journal"
            );
        }
        // Every session goes on.
        let answer = api.answer(id, "after the chaos").await;
        assert_eq!(answer, "answer to after the chaos");
    }

    let status = api.into_server().terminate();
    assert!(status.success(), "{status:?}");
    // What stays under run/ is the sandbox's shared /etc, which every start reuses; no workspace, socket or
    // egress directory of a session is left.
    let left: Vec<String> = walkdir(&home.path().join("run"))
        .into_iter()
        .filter(|p| !(p == "sandbox" || p.starts_with("sandbox/etc-") || p == "workspaces"))
        .collect();
    assert!(left.is_empty(), "left after a clean stop: {left:?}");
}
