//! A bundle calling remote agents over A2A (`a2a_agents`): a real second `serve` as the peer, reached from inside the
//! caller's sandbox through the egress proxy, and a hostile peer (`tests/scripts/a2a_peer.py`) for the attacks.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::{json, Value};

use super::support::{get_json, write_bundle, Env, Server};

const TOKEN: &str = "a2a-token";
const PEER_TOKEN: &str = "peer-token";

/// Writes the bundle `fixture` into `env` that asks agent `peer` at `url` once, and answers with what it said;
/// `listed` is the host the manifest lets the sandbox reach. Returns what `build` wrote to stderr.
fn caller(env: &Env, url: &str, listed: &str) -> String {
    caller_with(env, url, listed, "hello peer", "")
}

/// [`caller`], sending `message`, with `more` in the agent's entry (`, tool_timeout_ms: 1500`).
fn caller_with(env: &Env, url: &str, listed: &str, message: &str, more: &str) -> String {
    let dir = env.path("caller");
    let script = json!({"turns": [{"replies": [
        {"tool_calls": [{"name": "a2a__peer", "arguments": {"message": message}}]},
        {"text": "caller got: {{last_tool_output}}"}]}]});
    write_bundle(
        &dir,
        &script.to_string(),
        &format!(
            "a2a_agents:\n  - {{ name: peer, url: \"{url}\", token_env: PEER_TOKEN{more} }}\n"
        ),
        "workspace_write",
    );
    let manifest = dir.join("service.bundle.json5");
    let network = format!("network: [\"{listed}\"]");
    let text = std::fs::read_to_string(&manifest)
        .unwrap()
        .replace("network: []", &network);
    std::fs::write(&manifest, text).unwrap();
    env.run(&["build", dir.to_str().unwrap()]).stderr
}

/// A `serve` over `env`'s store that resolves `name` to loopback and passes the peer's token.
fn caller_server(env: &Env, resolve: &str) -> Server {
    Server::start(
        env.home.path(),
        &[
            "--token",
            TOKEN,
            "--resolve",
            resolve,
            "--pass-env",
            "PEER_TOKEN",
        ],
        &[("PEER_TOKEN", PEER_TOKEN)],
    )
}

/// A second server whose bundle `peer` answers with what it heard; asked to sleep, it runs a long command, and
/// asked to write, its Write asks for permission.
fn peer_server(env: &Env) -> Server {
    let dir = env.path("peer-src");
    write_bundle(
        &dir,
        r#"{turns: [
          {when: "sleep", replies: [{tool_calls: [{name: "Bash", arguments: {command: "sleep 359"}}]}, {text: "woke"}]},
          {when: "write", replies: [{tool_calls: [{name: "Write", arguments: {file_path: "f.txt", content: "x"}}]}, {text: "wrote"}]},
          {replies: [{text: "peer heard: {{prompt}}"}]},
        ]}"#,
        "permissions:\n  default: allow\n  rules:\n    - { tool: Write, action: ask }\n",
        "workspace_write",
    );
    let manifest = dir.join("service.bundle.json5");
    let text = std::fs::read_to_string(&manifest)
        .unwrap()
        .replace("\"fixture\"", "\"peer\"");
    std::fs::write(&manifest, text).unwrap();
    env.run(&["build", dir.to_str().unwrap()]).ok();
    Server::start(
        env.home.path(),
        &["--token", PEER_TOKEN, "--allowed-host", "peer.test"],
        &[],
    )
}

fn port(server: &Server) -> u16 {
    server.base.rsplit(':').next().unwrap().parse().unwrap()
}

/// Sends `text` to the caller's bundle over A2A and returns (its answer, its session's journal).
async fn ask(server: &Server, text: &str) -> (String, Vec<Value>) {
    let client = reqwest::Client::new();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message":
        {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": text}]}}});
    let answer: Value = client
        .post(server.url("/a2a/fixture"))
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let task = &answer["result"]["task"];
    let session = task["contextId"].as_str().expect("a task").to_string();
    let journal: Vec<Value> = serde_json::from_value(
        get_json(server, TOKEN, &format!("/sessions/{session}/journal")).await,
    )
    .unwrap();
    let text = task["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no answer: {answer}"))
        .to_string();
    (text, journal)
}

fn of_type<'a>(journal: &'a [Value], kind: &str) -> Vec<&'a Value> {
    journal
        .iter()
        .filter(|e| e["payload"]["type"] == kind)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_asks_an_agent_of_another_server_through_its_listed_host() {
    let peer_env = Env::new();
    let peer = peer_server(&peer_env);
    let host = format!("peer.test:{}", port(&peer));
    let env = Env::new();
    let built = caller(&env, &format!("http://{host}/a2a/peer"), &host);
    assert!(!built.contains("not in service.bundle.json5"), "{built}");
    let server = caller_server(&env, &format!("{host}:127.0.0.1"));
    let (answer, journal) = ask(&server, "go").await;
    assert_eq!(answer, "caller got: peer heard: hello peer");
    let started = of_type(&journal, "tool_call_started");
    assert_eq!(started[0]["payload"]["payload"]["tool"], "a2a__peer");
    let deltas: String = of_type(&journal, "tool_call_delta")
        .iter()
        .map(|e| e["payload"]["payload"]["delta"].as_str().unwrap())
        .collect();
    assert!(
        deltas.contains("peer heard"),
        "the answer streamed in: {deltas}"
    );
    let on_peer: Value = get_json(&peer, PEER_TOKEN, "/sessions").await;
    assert_eq!(on_peer.as_array().unwrap().len(), 1, "{on_peer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_whose_host_is_not_listed_is_refused_by_the_egress_proxy() {
    let peer_env = Env::new();
    let peer = peer_server(&peer_env);
    let host = format!("peer.test:{}", port(&peer));
    let env = Env::new();
    // The sandbox reaches another host, so the proxy runs and answers for the peer's.
    let built = caller(&env, &format!("http://{host}/a2a/peer"), "other.test:1");
    assert!(
        built.contains(&format!("{host} is not in service.bundle.json5")),
        "build says so: {built}"
    );
    let server = caller_server(&env, &format!("{host}:127.0.0.1"));
    let (answer, journal) = ask(&server, "go").await;
    let failed = of_type(&journal, "a2a_agent_failed");
    assert_eq!(failed.len(), 1, "{journal:?}");
    let why = failed[0]["payload"]["payload"]["message"].as_str().unwrap();
    assert!(why.contains("403"), "the proxy's refusal: {why}");
    assert!(
        answer.contains("is not available") && answer.contains("403"),
        "{answer}"
    );
    let on_peer: Value = get_json(&peer, PEER_TOKEN, "/sessions").await;
    assert_eq!(on_peer, json!([]), "nothing reached the peer");
}

/// A hostile peer, started on a free port.
struct Hostile {
    child: Child,
    port: u16,
}

impl Hostile {
    fn start(mode: &str, interface_file: Option<&Path>) -> Hostile {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/a2a_peer.py");
        let mut cmd = Command::new("python3");
        cmd.arg(script).arg(mode);
        if let Some(f) = interface_file {
            cmd.arg(f);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        Hostile {
            port: line.trim().parse().unwrap(),
            child,
        }
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Attack: a peer streams 4 MiB as its answer. The tool's result is cut at the tool-result bound, the streamed
/// pieces stop at it too, and the journal stays small.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_peers_huge_answer_is_cut_at_the_tool_result_bound() {
    let peer = Hostile::start("huge", None);
    let host = format!("hostile.test:{}", peer.port);
    let env = Env::new();
    caller(&env, &format!("http://{host}/a2a/hostile"), &host);
    let server = caller_server(&env, &format!("{host}:127.0.0.1"));
    let (answer, journal) = ask(&server, "go").await;
    assert!(answer.len() < 70 * 1024, "{} bytes", answer.len());
    assert!(
        answer.contains("bytes of output omitted"),
        "the cut is noted"
    );
    let streamed: usize = of_type(&journal, "tool_call_delta")
        .iter()
        .map(|e| e["payload"]["payload"]["delta"].as_str().unwrap().len())
        .sum();
    assert!(streamed <= 160 * 1024, "{streamed} bytes of deltas");
    let size = serde_json::to_string(&journal).unwrap().len();
    assert!(size < 1024 * 1024, "the journal holds {size} bytes");
}

/// Attack: a peer's card points its interface at the caller's own server, to have the caller's sandbox call it.
/// The card is refused, the agent journaled as failed, and the caller's server never sees a request from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_pointing_its_interface_at_the_callers_own_server_is_refused() {
    let work = tempfile::tempdir().unwrap();
    let interface = work.path().join("interface");
    let peer = Hostile::start("elsewhere", Some(&interface));
    let host = format!("hostile.test:{}", peer.port);
    let env = Env::new();
    caller(&env, &format!("http://{host}/a2a/hostile"), &host);
    let server = caller_server(&env, &format!("{host}:127.0.0.1"));
    std::fs::write(&interface, server.url("/a2a/fixture")).unwrap();
    let (answer, journal) = ask(&server, "go").await;
    let failed = of_type(&journal, "a2a_agent_failed");
    assert_eq!(failed.len(), 1, "{journal:?}");
    let why = failed[0]["payload"]["payload"]["message"].as_str().unwrap();
    assert!(why.contains("is not on the origin"), "{why}");
    assert!(answer.contains("is not available"), "{answer}");
    let sessions: Value = get_json(&server, TOKEN, "/sessions").await;
    assert_eq!(
        sessions.as_array().unwrap().len(),
        1,
        "only the test's own session: {sessions}"
    );
}

/// A peer's markup is kept as text: the tool result carries it verbatim, for the front ends to escape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peers_markup_stays_text_in_the_journal() {
    let peer = Hostile::start("markup", None);
    let host = format!("hostile.test:{}", peer.port);
    let env = Env::new();
    caller(&env, &format!("http://{host}/a2a/hostile"), &host);
    let server = caller_server(&env, &format!("{host}:127.0.0.1"));
    let (answer, journal) = ask(&server, "go").await;
    assert!(
        answer.starts_with("caller got: <img src=x onerror="),
        "{answer}"
    );
    let finished = of_type(&journal, "tool_call_finished");
    assert!(finished[0]["payload"]["payload"]["output"]
        .as_str()
        .unwrap()
        .contains("<script>"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_question_ends_the_call_and_a_time_out_cancels_the_remote_task() {
    let peer_env = Env::new();
    let peer = peer_server(&peer_env);
    let host = format!("peer.test:{}", port(&peer));
    let url = format!("http://{host}/a2a/peer");
    let env = Env::new();
    caller_with(&env, &url, &host, "write the file", "");
    let server = caller_server(&env, &format!("{host}:127.0.0.1"));
    let (answer, _) = ask(&server, "go").await;
    assert!(
        answer.starts_with("caller got: The agent needs more before it can go on, and asks: Permission needed: Write"),
        "{answer}"
    );
    drop(server);

    let env = Env::new();
    caller_with(&env, &url, &host, "sleep now", ", tool_timeout_ms: 1500");
    let server = caller_server(&env, &format!("{host}:127.0.0.1"));
    let (answer, _) = ask(&server, "go").await;
    assert!(answer.contains("did not finish within 1500 ms"), "{answer}");
    super::support::wait_until(
        std::time::Duration::from_secs(10),
        || super::support::processes_with("sleep 359") == 0,
        || "the remote task's command still runs: it was not cancelled".into(),
    );
    let on_peer: Value = get_json(&peer, PEER_TOKEN, "/sessions").await;
    let last: Vec<&Value> = on_peer
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["last_turn"]["status"])
        .collect();
    assert!(last.contains(&&json!("interrupted")), "{on_peer}");
}
