//! Who changes the shared database's schema: `serve` applies what is missing; a CLI command that opens the store
//! (`tokens … --store`) never does, and says what to do on a database without the schema. A migration that fails
//! says what PostgreSQL said.

use super::postgres::Postgres;
use super::support::Env;

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
    let out = env.run(&[
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--store",
        &pg.url(),
        "--node-id",
        "a",
        "--cluster-token",
        "t",
    ]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains("schema version 1")
            && out.stderr.contains("relation \"sessions\" already exists"),
        "{}",
        out.stderr
    );
}
