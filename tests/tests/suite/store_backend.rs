//! Which session store the runtime suite runs over. By default the embedded files; with `SERVICE_TEST_STORE=postgres`
//! the same tests run over PostgreSQL: one throwaway cluster for the test process (stopped and deleted when it exits), and one
//! database per `SERVICE_HOME`, so a test that restarts its runtime or server over the same home finds its sessions.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use super::postgres::Postgres;

/// The cluster of this test process, started on first use.
static CLUSTER: OnceLock<Postgres> = OnceLock::new();
/// Databases created so far.
static DATABASES: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// True when the suite runs over PostgreSQL.
pub fn postgres() -> bool {
    std::env::var("SERVICE_TEST_STORE").is_ok_and(|v| v == "postgres")
}

extern "C" fn stop_cluster() {
    if let Some(pg) = CLUSTER.get() {
        pg.discard();
    }
}

/// The URL of the database that stands for `home`, created on first use.
pub fn url_for(home: &Path) -> String {
    use std::hash::{Hash, Hasher};
    let pg = CLUSTER.get_or_init(|| {
        let pg = Postgres::start();
        // Statics are never dropped: the cluster stops, and its files go, when the process exits.
        // SAFETY: registers a plain function with no captured state; it runs once, at exit.
        unsafe { nix::libc::atexit(stop_cluster) };
        pg
    });
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    home.hash(&mut hasher);
    let name = format!("home_{:016x}", hasher.finish());
    let mut made = DATABASES.lock().unwrap_or_else(|p| p.into_inner());
    if made.get_or_insert_with(HashSet::new).insert(name.clone()) {
        pg.sql(&format!("CREATE DATABASE {name}"));
        // Only `serve` and `migrate` make the schema; the suite's CLI commands may run on it before any `serve`.
        let migrated = std::process::Command::new(super::support::binary())
            .args(["migrate", "--store", &pg.url_of(&name)])
            .output()
            .expect("run service-rs migrate");
        assert!(
            migrated.status.success(),
            "{}",
            String::from_utf8_lossy(&migrated.stderr)
        );
    }
    pg.url_of(&name)
}

/// `serve` arguments that put a server over `home` on the suite's store: none for the files store.
pub fn serve_args(home: &Path) -> Vec<String> {
    if !postgres() {
        return Vec::new();
    }
    [
        "--store",
        &url_for(home),
        "--node-id",
        "test",
        "--cluster-token",
        "test-cluster",
    ]
    .map(String::from)
    .to_vec()
}

/// An in-process runtime over `home` and the suite's store.
pub fn runtime(
    home: &Path,
    options: service_supervisor::RuntimeOptions,
) -> service_supervisor::ServiceRuntime {
    use service_supervisor::runtime::store::postgres::{Node, PgStore};
    let home_dir = service_supervisor::ServiceHome::new(home);
    if !postgres() {
        return service_supervisor::ServiceRuntime::new(home_dir, options);
    }
    let url = url_for(home);
    let node = Node {
        id: "test".into(),
        url: "http://test.invalid".into(),
    };
    // The suite's runtime tests are async, on a multi-threaded Tokio runtime.
    let connect = PgStore::connect(&url, node, std::time::Duration::from_secs(10));
    let store = tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(connect))
        .expect("connect to the suite's PostgreSQL");
    let rt = service_supervisor::ServiceRuntime::with_store(
        home_dir,
        options,
        std::sync::Arc::new(store),
    );
    rt.keep_claims();
    rt
}
