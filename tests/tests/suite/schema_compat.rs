//! Rolling upgrades over one PostgreSQL: the statements each release runs, kept in
//! `supervisor/src/runtime/store/postgres/compat/<version>.sql` (named by the release's newest schema version), run
//! against the schema this release migrates a database to, for every release that schema promises to serve
//! (`serves_from`, see the store's `schema.rs`). This release's own set is read from the store's source, so a
//! statement changed there without its fixture fails here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use service_supervisor::runtime::store::postgres::{newest_schema, oldest_release_served};
use tokio_postgres::types::{ToSql, Type};

use super::postgres::Postgres;
use super::support::Env;

fn store_source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../supervisor/src/runtime/store/postgres")
}

fn fixture_path(version: i32) -> PathBuf {
    store_source().join(format!("compat/{version}.sql"))
}

/// The statements of fixture `version`: one per paragraph, each ending with `;`.
fn fixture(version: i32) -> Vec<String> {
    let text = std::fs::read_to_string(fixture_path(version))
        .unwrap_or_else(|e| panic!("{}: {e}", fixture_path(version).display()));
    text.split(";\n")
        .map(|s| {
            s.lines()
                .filter(|l| !l.starts_with("--"))
                .collect::<Vec<_>>()
                .join("\n")
                .trim()
                .to_string()
        })
        .filter(|s| !s.is_empty())
        .collect()
}

/// The SQL statements in the store's source: string literals that start with a DML keyword, and `format!` strings
/// that do once the file's `&str` constants they name are put in.
fn statements_in(dir: &Path) -> Vec<String> {
    use syn::visit::Visit;

    #[derive(Default)]
    struct Sql {
        consts: BTreeMap<String, String>,
        found: Vec<String>,
        formats: Vec<String>,
    }
    impl<'a> Visit<'a> for Sql {
        fn visit_item_const(&mut self, c: &'a syn::ItemConst) {
            if let syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) = &*c.expr
            {
                self.consts.insert(c.ident.to_string(), s.value());
            }
            syn::visit::visit_item_const(self, c);
        }
        fn visit_lit_str(&mut self, s: &'a syn::LitStr) {
            self.found.push(s.value());
        }
        fn visit_macro(&mut self, m: &'a syn::Macro) {
            use syn::punctuated::Punctuated;
            if !m.path.is_ident("format") {
                return;
            }
            let args = m.parse_body_with(Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated);
            if let Some(syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            })) = args.ok().as_ref().and_then(|a| a.first())
            {
                self.formats.push(s.value());
            }
        }
    }

    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let parsed = syn::parse_file(&std::fs::read_to_string(&file).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut sql = Sql::default();
        sql.visit_file(&parsed);
        let filled = sql.formats.iter().map(|f| {
            sql.consts.iter().fold(f.clone(), |f, (name, value)| {
                f.replace(&format!("{{{name}}}"), value)
            })
        });
        for s in sql.found.iter().cloned().chain(filled) {
            let s = s.trim().to_string();
            let dml = ["SELECT ", "INSERT ", "UPDATE ", "DELETE ", "WITH "]
                .iter()
                .any(|k| s.starts_with(k));
            if dml && !s.contains('{') && !out.contains(&s) {
                out.push(s);
            }
        }
    }
    out
}

/// The fixture file of `version` holding `statements`.
fn fixture_text(version: i32, statements: &[String]) -> String {
    let mut text = format!(
        "-- The statements of the service-rs releases whose newest schema version is {version}, read from\n\
         -- supervisor/src/runtime/store/postgres/*.rs by tests/tests/suite/schema_compat.rs. Kept as they are once\n\
         -- a later release has its own set.\n\n"
    );
    for s in statements {
        text.push_str(s);
        text.push_str(";\n\n");
    }
    text
}

#[test]
fn this_releases_statements_are_its_fixture() {
    let newest = newest_schema();
    let code = statements_in(&store_source());
    assert!(code.len() > 30, "{code:?}");
    if std::env::var_os("SERVICE_BLESS").is_some() {
        std::fs::write(fixture_path(newest), fixture_text(newest, &code)).unwrap();
    }
    assert_eq!(
        fixture(newest),
        code,
        "the store's statements changed: if the schema did not, write the new set with SERVICE_BLESS=1 cargo test \
         -p service-e2e --test all -- schema_compat; if a migration came with them, the set of the release before \
         stays as it is and this release's is written as compat/{newest}.sql"
    );
}

/// What went wrong running statement `sql` with made-up values: None when it ran, or failed only on the values
/// (a foreign key, a unique key, a cast of the made-up text); Some when the schema refused it: an unknown table
/// or column, an `ON CONFLICT` without its key, a column a release does not fill that must be filled.
async fn schema_refusal(tx: &tokio_postgres::Transaction<'_>, sql: &str) -> Option<String> {
    let refused = |e: &tokio_postgres::Error| {
        let code = e.code().map(|c| c.code().to_string()).unwrap_or_default();
        (code.starts_with("42") || code == "23502" || code.is_empty())
            .then(|| format!("{code} {}", said(e)))
    };
    tx.batch_execute("SAVEPOINT statement").await.unwrap();
    let prepared = match tx.prepare(sql).await {
        Ok(p) => p,
        Err(e) => return refused(&e),
    };
    let mut values: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
    for t in prepared.params() {
        values.push(match *t {
            Type::TEXT | Type::VARCHAR | Type::NAME => Box::new("x".to_string()),
            Type::INT2 => Box::new(1i16),
            Type::INT4 => Box::new(1i32),
            Type::INT8 => Box::new(1i64),
            Type::FLOAT8 => Box::new(1.0f64),
            Type::BOOL => Box::new(true),
            Type::TEXT_ARRAY => Box::new(vec!["x".to_string()]),
            Type::INT8_ARRAY => Box::new(vec![1i64]),
            Type::TIMESTAMPTZ => Box::new(std::time::SystemTime::now()),
            Type::BYTEA => Box::new(vec![0u8]),
            ref other => panic!("no made-up value for a {other} parameter of: {sql}"),
        });
    }
    let params: Vec<&(dyn ToSql + Sync)> = values
        .iter()
        .map(|v| v.as_ref() as &(dyn ToSql + Sync))
        .collect();
    let ran = tx.execute(&prepared, &params).await;
    let out = ran.err().and_then(|e| refused(&e));
    tx.batch_execute("ROLLBACK TO SAVEPOINT statement")
        .await
        .unwrap();
    out
}

/// PostgreSQL's own message of `e`.
fn said(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map(|d| d.message().to_string())
        .unwrap_or_else(|| e.to_string())
}

/// The statements of fixture `version` the database at `url` refuses, each with why.
async fn refused(url: &str, version: i32) -> Vec<String> {
    let (mut client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let tx = client.transaction().await.unwrap();
    let mut out = Vec::new();
    for sql in fixture(version) {
        if let Some(why) = schema_refusal(&tx, &sql).await {
            out.push(format!("{why}\n  in: {sql}"));
        }
    }
    tx.rollback().await.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_release_the_newest_schema_serves_runs_its_statements_on_it() {
    let pg = Postgres::start();
    Env::new().run(&["migrate", "--store", &pg.url()]).ok();
    let served = oldest_release_served()..=newest_schema();
    assert!(served.clone().count() >= 2, "{served:?}");
    for version in served {
        let refused = refused(&pg.url(), version).await;
        assert!(
            refused.is_empty(),
            "release {version}'s statements fail on the newest schema:\n{}",
            refused.join("\n")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_5_which_the_usage_ledgers_new_key_no_longer_serves_is_caught_by_its_statements() {
    let pg = Postgres::start();
    Env::new().run(&["migrate", "--store", &pg.url()]).ok();
    assert!(oldest_release_served() > 5);
    let refused = refused(&pg.url(), 5).await;
    // Migration 6 changed the usage ledger's key, which release 5 writes by.
    assert!(
        refused
            .iter()
            .any(|r| r.starts_with("42P10") && r.contains("ON CONFLICT (tenant, day)")),
        "{refused:#?}"
    );
}
