//! Who changes the shared database's schema: `service-rs migrate`, and `serve --migrate`; `serve` without it and
//! CLI commands that open the store (`tokens … --store`) never do, and say what to do on a database they do not run
//! on. A node runs on a newer schema while its newer migrations still serve its release. A migration that fails says
//! what PostgreSQL said.

use serde_json::json;
use tempfile::TempDir;

use super::http_client::{task, Api};
use super::postgres::Postgres;
use super::support::{Env, Server};

/// `serve` over `pg` as node `a`, with `extra` flags.
fn node_args<'a>(pg_url: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--store", pg_url, "--node-id", "a", "--cluster-token", "t"];
    args.extend(extra);
    args
}

#[test]
fn tokens_on_a_fresh_database_leaves_it_untouched_and_says_to_start_a_node_first() {
    let pg = Postgres::start();
    let env = Env::new();
    let out = env.run(&["tokens", "list", "--store", &pg.url()]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains("no service-rs schema") && out.stderr.contains("serve"),
        "{}",
        out.stderr
    );
    assert_eq!(pg.sql("SELECT to_regclass('service_schema') IS NULL"), "t");
}

#[test]
fn migrate_status_reports_without_writing_and_migrate_brings_the_schema_to_this_release() {
    let pg = Postgres::start();
    let env = Env::new();
    let status = env.run(&["migrate", "--status", "--store", &pg.url()]);
    assert_eq!(status.code, Some(1), "{status:?}");
    assert!(
        status.stdout.contains("at version 0") && status.stdout.contains("would apply 1, 2"),
        "{}",
        status.stdout
    );
    assert_eq!(pg.sql("SELECT to_regclass('service_schema') IS NULL"), "t");
    let migrated = env.run(&["migrate", "--store", &pg.url()]);
    assert_eq!(migrated.code, Some(0), "{migrated:?}");
    let status = env.run(&["migrate", "--status", "--store", &pg.url()]);
    assert_eq!(status.code, Some(0), "{status:?}");
    assert!(
        status.stdout.contains("nothing to apply"),
        "{}",
        status.stdout
    );
    let tokens = env.run(&["tokens", "list", "--store", &pg.url()]);
    assert_eq!(tokens.code, Some(0), "{tokens:?}");
}

#[test]
fn a_failed_migration_says_what_postgresql_said() {
    let pg = Postgres::start();
    // A table of the same name, made by something else: the first migration cannot create its own.
    pg.sql("CREATE TABLE sessions (unrelated integer)");
    let env = Env::new();
    let url = pg.url();
    let mut args = vec!["serve", "--bind", "127.0.0.1:0"];
    args.extend(node_args(&url, &["--migrate"]));
    let out = env.run(&args);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains("schema version 1")
            && out.stderr.contains("relation \"sessions\" already exists"),
        "{}",
        out.stderr
    );
}

#[test]
fn serve_without_migrate_changes_no_schema_and_dry_run_prints_what_migrate_would_apply() {
    let pg = Postgres::start();
    let env = Env::new();
    let url = pg.url();
    let mut args = vec!["serve", "--bind", "127.0.0.1:0"];
    args.extend(node_args(&url, &[]));
    let out = env.run(&args);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains("no service-rs schema") && out.stderr.contains("--migrate"),
        "{}",
        out.stderr
    );
    let dry = env.run(&["migrate", "--dry-run", "--store", &url]);
    assert_eq!(dry.code, Some(0), "{dry:?}");
    assert!(
        dry.stdout.starts_with("-- schema version 1\n")
            && dry.stdout.contains("CREATE TABLE sessions")
            && dry.stdout.contains("-- schema version 7\n"),
        "{}",
        dry.stdout
    );
    assert_eq!(pg.sql("SELECT to_regclass('service_schema') IS NULL"), "t");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_runs_on_a_newer_schema_that_still_serves_its_release_and_refuses_one_that_does_not()
{
    let pg = Postgres::start();
    let env = Env::new();
    let url = pg.url();
    env.run(&["migrate", "--store", &url]).ok();
    let ours: i32 = pg
        .sql("SELECT max(version) FROM service_schema")
        .parse()
        .unwrap();
    // What a next release's expand migration leaves: a table of its own, and the oldest release it serves.
    pg.sql("CREATE TABLE next_release_things (id text PRIMARY KEY)");
    pg.sql(&format!(
        "INSERT INTO service_schema (version, serves_from) VALUES ({}, {ours})",
        ours + 1
    ));
    let status = env.run(&["migrate", "--status", "--store", &url]);
    assert_eq!(status.code, Some(0), "{status:?}");
    assert!(
        status.stdout.contains("still serves it"),
        "{}",
        status.stdout
    );
    env.run(&["migrate", "--store", &url]).ok();
    env.run(&["tokens", "list", "--store", &url]).ok();
    let home = TempDir::new().unwrap();
    let api = Api::new(Server::start(home.path(), &node_args(&url, &[]), &[]));
    let hello = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/hello");
    let id = api.session(hello.to_str().unwrap()).await;
    let (code, out) = api
        .post(
            &format!("/sessions/{id}/run-sync"),
            json!({"input": task("on a newer schema")}),
        )
        .await;
    assert_eq!(
        (code, out["status"].as_str()),
        (200, Some("completed")),
        "{out}"
    );
    drop(api);

    // The release after that contracts: its migration no longer serves this one.
    pg.sql(&format!(
        "INSERT INTO service_schema (version, serves_from) VALUES ({}, {})",
        ours + 2,
        ours + 1
    ));
    let refusal = format!("migration {} no longer serves this service-rs", ours + 2);
    let mut args = vec!["serve", "--bind", "127.0.0.1:0"];
    args.extend(node_args(&url, &[]));
    for (what, out) in [
        ("serve", env.run(&args)),
        ("tokens", env.run(&["tokens", "list", "--store", &url])),
        ("migrate", env.run(&["migrate", "--store", &url])),
    ] {
        assert_eq!(out.code, Some(1), "{what}: {out:?}");
        assert!(out.stderr.contains(&refusal), "{what}: {}", out.stderr);
    }
    let status = env.run(&["migrate", "--status", "--store", &url]);
    assert_eq!(status.code, Some(1), "{status:?}");
    assert!(status.stdout.contains(&refusal), "{}", status.stdout);
}
