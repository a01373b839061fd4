//! A session's claim over PostgreSQL: a node that takes a session reads back what other nodes wrote to it, so does
//! a node restarted under its own id, and a node that held it all along reads nothing back.

use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::json;

use super::cluster::{node_with, turn};
use super::http_client::task;
use super::postgres::Postgres;
use super::support::write_bundle;

/// The statement a full claim runs to read the session's grants back, once per claim that reads back.
const READ_BACK: &str = "SELECT grant_json FROM grants WHERE session_id";

/// A bundle whose every answer says how many messages its model was sent.
pub(super) fn counting_bundle() -> tempfile::TempDir {
    let bundle = tempfile::TempDir::new().unwrap();
    write_bundle(
        bundle.path(),
        r#"{turns: [{replies: [{text: "seen {{message_count}}"}]}]}"#,
        "",
        "read_only",
    );
    bundle
}

/// Waits until no node holds session `id` (a node lets go of a session without a worker soon after its turn).
async fn until_released(pg: &Postgres, id: &str) {
    let start = Instant::now();
    let held = format!("SELECT count(*) FROM owners WHERE session_id = '{id}'");
    while pg.sql(&held).trim() != "0" {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "session {id} never released"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_taking_a_session_back_sees_the_turns_another_node_ran_meanwhile() {
    let pg = Postgres::start();
    let (_a_home, a) = node_with(&pg, "a", "1s", &[]);
    let (_b_home, b) = node_with(&pg, "b", "1s", &[]);
    let bundle = counting_bundle();
    let id = a.session(bundle.path().to_str().unwrap()).await;
    for (node, name, answer) in [
        (&a, "a", "seen 2"),
        (&b, "b", "seen 4"),
        (&a, "a", "seen 6"),
    ] {
        until_released(&pg, &id).await;
        let (status, result) = turn(node, &id, name).await;
        assert_eq!(status, 200, "{result}");
        assert_eq!(result["final_message"], answer, "on {name}: {result}");
    }
    // A's record counts B's turn: a node that wrote its record from what it knew before B's turn would say 2.
    until_released(&pg, &id).await;
    let stored = pg.sql(&format!(
        "SELECT record::json->>'turn_count' FROM sessions WHERE id = '{id}'"
    ));
    assert_eq!(stored.trim(), "3");
    let (status, record) = a.get(&format!("/sessions/{id}")).await;
    assert_eq!(status, 200, "{record}");
    assert_eq!(record["turn_count"], 3, "{record}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_held_a_session_since_its_last_turn_reads_nothing_back_for_the_next() {
    let pg = Postgres::start();
    pg.sql("ALTER SYSTEM SET log_statement = 'all'");
    pg.sql("SELECT pg_reload_conf()");
    // A lease long enough that the node keeps its claim between the turns below.
    let (_home, node) = node_with(&pg, "a", "60s", &[]);
    let bundle = counting_bundle();
    let id = node.session(bundle.path().to_str().unwrap()).await;
    let before = pg.log().matches(READ_BACK).count();
    for (prompt, answer) in [("one", "seen 2"), ("two", "seen 4"), ("three", "seen 6")] {
        let (status, result) = turn(&node, &id, prompt).await;
        assert_eq!(status, 200, "{result}");
        assert_eq!(result["final_message"], answer, "{result}");
    }
    // The first turn's claim made the lease and read the session back; the next two only renewed it.
    let read_back = pg.log().matches(READ_BACK).count() - before;
    assert_eq!(read_back, 1, "claims that read the session back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_under_its_own_id_abandons_the_turn_its_last_process_was_running() {
    let pg = Postgres::start();
    let bundle = tempfile::TempDir::new().unwrap();
    write_bundle(
        bundle.path(),
        r#"{turns: [{when: "slow", replies: [{tool_calls: [{name: "Bash", arguments: {command: "echo started; sleep 60"}}]}]},
                    {replies: [{text: "seen {{message_count}}"}]}]}"#,
        "",
        "workspace_write",
    );
    let (_home, mut a) = node_with(&pg, "a", "10s", &[]);
    let id = a.session(bundle.path().to_str().unwrap()).await;
    let (status, started) = a
        .post(
            &format!("/sessions/{id}/run"),
            json!({"input": task("slow")}),
        )
        .await;
    assert_eq!(status, 202, "{started}");
    let turn_id = started["turn_id"].as_str().unwrap().to_string();
    let output = format!(
        "SELECT count(*) FROM events WHERE session_id = '{id}' AND body LIKE '%exec_command_output_delta%'"
    );
    let start = Instant::now();
    while pg.sql(&output).trim() == "0" {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the slow command never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let server = a.server();
    server.child.kill().unwrap(); // SIGKILL: its lease stays, under the same node id
    server.child.wait().unwrap();

    let (_home, again) = node_with(&pg, "a", "10s", &[]);
    let (status, next) = turn(&again, &id, "after").await;
    assert_eq!(status, 200, "{next}");
    // system + the slow prompt, seen 2: the abandoned turn left no half conversation.
    assert_eq!(next["final_message"], "seen 2", "{next}");
    let abandoned = pg.sql(&format!(
        "SELECT body::json->'payload'->'payload'->>'code' FROM events WHERE session_id = '{id}' \
         AND body::json->'payload'->'payload'->>'turn_id' = '{turn_id}' \
         AND body::json->'payload'->>'type' = 'error'"
    ));
    assert_eq!(abandoned.trim(), "supervisor_restarted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_claiming_one_session_at_once_get_it_one_at_a_time() {
    use service_supervisor::runtime::store::postgres::{Node, PgStore};
    use service_supervisor::runtime::store::{Claim, Store};

    let pg = Postgres::start();
    let lease = Duration::from_millis(400);
    let mut stores = Vec::new();
    for id in ["x", "y", "z"] {
        let node = Node {
            id: id.into(),
            url: format!("http://{id}.invalid"),
        };
        stores.push(PgStore::connect(&pg.url(), node, lease).await.unwrap());
    }
    let record = super::cluster::idle_record("6f1c2b9e-0000-4000-8000-000000000002");
    stores[0].insert(&record).await.unwrap();
    let id = record.id.as_str();
    let nodes = ["x", "y", "z"];
    let mut previous: Option<usize> = None;
    for round in 0..30 {
        let claims = futures::future::join_all(stores.iter().map(|s| s.claim(id))).await;
        let claims: Vec<Claim> = claims.into_iter().map(Result::unwrap).collect();
        let winners: Vec<usize> = (0..3)
            .filter(|i| matches!(claims[*i], Claim::Mine { .. }))
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {claims:?}");
        let winner = winners[0];
        for (i, claim) in claims.iter().enumerate().filter(|(i, _)| *i != winner) {
            match claim {
                Claim::Elsewhere { node_id, .. } => {
                    assert_eq!(node_id, nodes[winner], "round {round}")
                }
                other => panic!("round {round}, node {}: {other:?}", nodes[i]),
            }
        }
        // Released rounds start from no lease; the others from a lapsed one, which the winner takes over.
        let expected = match previous {
            Some(last) if round % 2 == 1 && last != winner => Claim::Mine {
                taken_from: Some(nodes[last].to_string()),
                renewed: false,
            },
            Some(_) if round % 2 == 1 => Claim::Mine {
                taken_from: None,
                renewed: true,
            },
            _ => Claim::Mine {
                taken_from: None,
                renewed: false,
            },
        };
        assert_eq!(claims[winner], expected, "round {round}");
        // The holder claiming again only renews its lease.
        let again = stores[winner].claim(id).await.unwrap();
        let renewed = Claim::Mine {
            taken_from: None,
            renewed: true,
        };
        assert_eq!(again, renewed, "round {round}");
        if round % 2 == 0 {
            // Let the lease lapse: the next round's claims race to take it over.
            tokio::time::sleep(lease + Duration::from_millis(100)).await;
        } else {
            stores[winner].release(id).await;
        }
        previous = Some(winner);
    }
}
