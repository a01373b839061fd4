//! Registry servers for the distribution tests: Debian's `docker-registry` (Docker Distribution) on a loopback
//! port, and a front for it that speaks the bearer-token challenge flow and can tamper with blobs in transit.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A Docker Distribution registry on a free loopback port, storing under a temporary directory; killed on drop.
pub struct Registry {
    child: Child,
    pub host: String,
    storage: PathBuf,
    _dir: tempfile::TempDir,
}

impl Registry {
    /// Starts the registry; `users` are (name, password) pairs for htpasswd auth (none: anonymous).
    pub fn start(users: &[(&str, &str)]) -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let storage = dir.path().join("data");
        let mut config = format!(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
            storage.display()
        );
        if !users.is_empty() {
            let htpasswd: String = users
                .iter()
                .map(|(u, p)| format!("{u}:{}\n", bcrypt::hash(p, 5).unwrap()))
                .collect();
            std::fs::write(dir.path().join("htpasswd"), htpasswd).unwrap();
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: test\n    path: {}\n",
                dir.path().join("htpasswd").display()
            ));
        }
        std::fs::write(dir.path().join("config.yml"), config).unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(dir.path().join("config.yml"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("docker-registry runs (.ci/deps installs it)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the registry did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Registry {
            child,
            host: format!("127.0.0.1:{port}"),
            storage,
            _dir: dir,
        }
    }

    pub fn url(&self, repo: &str) -> String {
        format!("{}/{repo}", self.host)
    }

    /// Where the registry keeps what was pushed (absent until something was).
    pub fn storage_root(&self) -> PathBuf {
        self.storage.clone()
    }

    /// The file holding blob `digest` in the registry's storage.
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.storage
            .join("docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The one token [`TokenGate`] issues.
pub const GATE_TOKEN: &str = "gate-token-7f3a";

/// A front for a registry that asks for a bearer token the way Docker Hub, GHCR and Harbor do: `/v2/` answers 401
/// with `WWW-Authenticate: Bearer realm=...`, the realm issues a token for the right Basic credentials, and requests
/// with that token are forwarded. With `tamper`, it flips one byte of every blob it serves. Stops on drop.
pub struct TokenGate {
    pub host: String,
    /// Tokens the realm issued.
    pub issued: Arc<AtomicUsize>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Clone)]
struct Gate {
    upstream: String,
    host: String,
    basic: String,
    tamper: bool,
    issued: Arc<AtomicUsize>,
    http: reqwest::Client,
}

impl TokenGate {
    pub fn start(upstream: &Registry, user: &str, password: &str, tamper: bool) -> TokenGate {
        use base64::Engine as _;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let host = listener.local_addr().unwrap().to_string();
        let issued = Arc::new(AtomicUsize::new(0));
        let gate = Gate {
            upstream: upstream.host.clone(),
            host: host.clone(),
            basic: format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
            ),
            tamper,
            issued: issued.clone(),
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let app = axum::Router::new().fallback(move |req| handle(gate.clone(), req));
                axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stopped.await;
                    })
                    .await
                    .unwrap();
            });
        });
        TokenGate {
            host,
            issued,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    pub fn url(&self, repo: &str) -> String {
        format!("{}/{repo}", self.host)
    }
}

impl Drop for TokenGate {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn handle(
    gate: Gate,
    req: axum::extract::Request,
) -> axum::response::Response<axum::body::Body> {
    use axum::http::{header, StatusCode};
    use axum::response::IntoResponse;
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    if req.uri().path() == "/token" {
        if authorization != gate.basic {
            return StatusCode::UNAUTHORIZED.into_response();
        }
        gate.issued.fetch_add(1, Ordering::SeqCst);
        return axum::Json(serde_json::json!({"token": GATE_TOKEN, "expires_in": 300}))
            .into_response();
    }
    if authorization != format!("Bearer {GATE_TOKEN}") {
        let challenge = format!(
            "Bearer realm=\"http://{}/token\",service=\"test-gate\"",
            gate.host
        );
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, challenge)],
            r#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}"#,
        )
            .into_response();
    }
    let blob = req.method() == axum::http::Method::GET && req.uri().path().contains("/blobs/");
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.to_string())
        .unwrap_or_default();
    let mut forward = gate.http.request(
        req.method().clone(),
        format!("http://{}{path}", gate.upstream),
    );
    for (name, value) in req.headers() {
        if name != header::HOST && name != header::AUTHORIZATION {
            forward = forward.header(name, value);
        }
    }
    let body = axum::body::to_bytes(req.into_body(), usize::MAX)
        .await
        .unwrap();
    let resp = forward.body(body).send().await.unwrap();
    let mut out = axum::http::Response::builder().status(resp.status());
    for (name, value) in resp.headers() {
        if name == header::LOCATION {
            let rewritten = value
                .to_str()
                .unwrap_or_default()
                .replace(&gate.upstream, &gate.host);
            out = out.header(name, rewritten);
        } else if name != header::CONTENT_LENGTH && name != header::TRANSFER_ENCODING {
            out = out.header(name, value);
        }
    }
    let mut bytes = resp.bytes().await.unwrap().to_vec();
    if gate.tamper && blob && !bytes.is_empty() {
        let at = bytes.len() / 2;
        bytes[at] ^= 0x01;
    }
    out.body(axum::body::Body::from(bytes)).unwrap()
}
