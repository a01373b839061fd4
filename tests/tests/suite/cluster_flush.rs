//! `turn_flush` over PostgreSQL: with `background`, a session's writes commit without waiting for the WAL's flush
//! (each write statement sets `synchronous_commit` off for its own transaction); with the default, they wait.

use super::cluster::{node_with_config, turn};
use super::cluster_handover::counting_bundle;
use super::postgres::Postgres;

/// How the server logs a session's write statement that relaxes its commit: the parameter that asks for it, the
/// last of the statement's.
const RELAXED: &str = "$12 = 't'";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_turn_flush_commits_a_sessions_writes_without_waiting_for_the_wal_and_the_default_waits(
) {
    let pg = Postgres::start();
    pg.sql("ALTER SYSTEM SET log_statement = 'all'");
    pg.sql("SELECT pg_reload_conf()");
    let bundle = counting_bundle();
    let bundle = bundle.path().to_str().unwrap();
    for (flush, relaxed) in [("turn", false), ("background", true)] {
        let before = pg.log().matches(RELAXED).count();
        let config = format!("turn_flush = \"{flush}\"\n");
        let (_home, node) = node_with_config(&pg, flush, "10s", &[], &config);
        let id = node.session(bundle).await;
        for (prompt, answer) in [("one", "seen 2"), ("two", "seen 4")] {
            let (status, result) = turn(&node, &id, prompt).await;
            assert_eq!(status, 200, "{result}");
            assert_eq!(result["final_message"], answer, "{flush}: {result}");
        }
        // The statements are logged as the server receives them, before the client hears of the commit.
        let set = pg.log().matches(RELAXED).count() - before;
        if relaxed {
            assert!(set >= 2, "{flush}: {set} transactions relaxed");
        } else {
            assert_eq!(set, 0, "{flush}: a transaction did not wait for the WAL");
        }
    }
}
