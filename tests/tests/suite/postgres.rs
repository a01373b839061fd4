//! A throwaway PostgreSQL cluster: `initdb` and `pg_ctl` in a temporary directory, on a free loopback port, as an
//! unprivileged user when the tests run as root (PostgreSQL refuses to run as root). Stopped when dropped.

use std::net::TcpListener;
use std::os::unix::fs::chown;
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

/// The user the server runs as when the tests are root.
const UNPRIVILEGED: &str = "nobody";

/// A running cluster.
pub struct Postgres {
    dir: TempDir,
    bin: PathBuf,
    port: u16,
    /// Whether commits wait for the disk, as in production (`fsync=on`).
    durable: bool,
    /// Whether it serves TLS, with a certificate for 127.0.0.1 signed by the CA in `ca.pem`.
    tls: bool,
}

/// Where Debian (or the `PATH`) keeps `initdb` and `pg_ctl`.
fn bin_dir() -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.flatten().map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    versions.retain(|b| b.join("initdb").is_file());
    versions.sort();
    if let Some(newest) = versions.pop() {
        return newest;
    }
    let found = Command::new("sh")
        .args(["-c", "command -v initdb"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match found {
        Some(path) => Path::new(&path).parent().unwrap().to_path_buf(),
        None => panic!("PostgreSQL's server is not installed; run .ci/deps (Debian: apt-get install postgresql)"),
    }
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    // /proc/self belongs to the process's effective user.
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

impl Postgres {
    /// Starts a cluster whose user `service` needs no password on loopback, with `fsync=off`: the tests need no
    /// durability across a machine crash, and go faster without it.
    pub fn start() -> Postgres {
        Self::start_with(false)
    }

    /// [`Postgres::start`] with PostgreSQL's default `fsync=on`, for benches that compare with the files store,
    /// which flushes its writes.
    #[allow(dead_code)] // benches/store.rs includes this file and uses it; the tests do not.
    pub fn start_durable() -> Postgres {
        Self::start_with(true)
    }

    /// [`Postgres::start`], serving TLS with a certificate for 127.0.0.1 signed by a CA of its own
    /// ([`Postgres::ca`]).
    #[allow(dead_code)]
    pub fn start_tls() -> Postgres {
        Self::start_with_tls(false, true)
    }

    fn start_with(durable: bool) -> Postgres {
        Self::start_with_tls(durable, false)
    }

    fn start_with_tls(durable: bool, tls: bool) -> Postgres {
        let dir = tempfile::Builder::new().prefix("pg").tempdir().unwrap();
        let bin = bin_dir();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if is_root() {
            let (uid, gid) = ids(UNPRIVILEGED);
            chown(dir.path(), Some(uid), Some(gid)).unwrap();
        }
        let pg = Postgres {
            dir,
            bin,
            port,
            durable,
            tls,
        };
        let data = pg.data();
        pg.run(
            "initdb",
            &[
                "-D",
                &data,
                "-U",
                "service",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            ],
        );
        if tls {
            pg.make_certificates();
        }
        pg.ctl("start");
        pg
    }

    /// The CA that signed the server's certificate (PEM), for a TLS cluster.
    #[allow(dead_code)]
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// A CA, and a server certificate for 127.0.0.1 signed by it, with `openssl`; the key is the server user's own.
    fn make_certificates(&self) {
        let dir = self.dir.path();
        super::support::issue_certificate(dir, "IP:127.0.0.1", "server.crt", "server.key");
        let key = dir.join("server.key");
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        if is_root() {
            let (uid, gid) = ids(UNPRIVILEGED);
            chown(&key, Some(uid), Some(gid)).unwrap();
        }
    }

    /// The URL `serve --store` takes.
    pub fn url(&self) -> String {
        format!("postgres://service@127.0.0.1:{}/postgres", self.port)
    }

    /// The `serve` arguments of node `id` over this cluster: its store, node id, cluster token and lease, and
    /// `--migrate`, since the nodes of a test start together on a fresh database.
    pub fn node_args(&self, id: &str, cluster_token: &str, lease: &str) -> Vec<String> {
        let url = self.url();
        [
            "--migrate",
            "--store",
            &url,
            "--node-id",
            id,
            "--cluster-token",
            cluster_token,
            "--lease",
            lease,
        ]
        .map(String::from)
        .to_vec()
    }

    /// The URL of database `name` on this cluster.
    #[allow(dead_code)] // Used by the tests, not by benches/store.rs, which includes this file too.
    pub fn url_of(&self, name: &str) -> String {
        format!("postgres://service@127.0.0.1:{}/{name}", self.port)
    }

    /// Runs one SQL statement with `psql`, as the cluster's user; its output, unaligned, without headers.
    #[allow(dead_code)]
    pub fn sql(&self, statement: &str) -> String {
        let port = self.port.to_string();
        let host = self.dir.path().display().to_string();
        self.run(
            "psql",
            &[
                "-h", &host, "-p", &port, "-U", "service", "-d", "postgres", "-qtAc", statement,
            ],
        )
    }

    /// What the server has logged so far.
    #[allow(dead_code)]
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// Stops the server at once, for a cluster that is never dropped.
    #[allow(dead_code)]
    pub fn stop_now(&self) {
        let data = self.data();
        let _ = self
            .command("pg_ctl")
            .args(["-D", &data, "-m", "immediate", "-w", "stop"])
            .output();
    }

    /// Stops the server at once and deletes its files, for a cluster that is never dropped: its data directory
    /// holds a database per test home, about a gigabyte for a whole suite.
    #[allow(dead_code)]
    pub fn discard(&self) {
        self.stop_now();
        let _ = std::fs::remove_dir_all(self.dir.path());
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    /// Runs `pg_ctl start` or `stop` (fast), waiting for it.
    pub fn ctl(&self, what: &str) {
        let mut options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync={} -c max_connections=200",
            self.port,
            self.dir.path().display(),
            if self.durable { "on" } else { "off" }
        );
        if self.tls {
            let dir = self.dir.path().display();
            options.push_str(&format!(
                " -c ssl=on -c ssl_cert_file={dir}/server.crt -c ssl_key_file={dir}/server.key"
            ));
        }
        let log = self.dir.path().join("server.log").display().to_string();
        let data = self.data();
        match what {
            "start" => self.run(
                "pg_ctl",
                &["-D", &data, "-l", &log, "-o", &options, "-w", "start"],
            ),
            _ => self.run("pg_ctl", &["-D", &data, "-m", "fast", "-w", "stop"]),
        };
    }

    /// `tool` from PostgreSQL's bin directory, as the unprivileged user when the tests are root.
    fn command(&self, tool: &str) -> Command {
        let exe = self.bin.join(tool);
        if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", UNPRIVILEGED, "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        }
    }

    fn run(&self, tool: &str, args: &[&str]) -> String {
        let out = self
            .command(tool)
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {tool}: {e}"));
        let log = std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
        assert!(
            out.status.success(),
            "{tool} {args:?} failed: {}\n{}\nserver log:\n{log}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// The uid and gid of a user, from /etc/passwd.
fn ids(user: &str) -> (u32, u32) {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.first() == Some(&user))
        .map(|f| (f[2].parse().unwrap(), f[3].parse().unwrap()))
        .unwrap_or_else(|| panic!("no user {user} to run PostgreSQL as"))
}
