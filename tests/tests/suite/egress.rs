//! The network allowlist end to end: real HTTP and HTTPS servers on loopback (Python's http.server, a self-signed
//! certificate made with openssl), names mapped with `--resolve`, and curl, openssl and Bash inside a real bwrap
//! sandbox whose only way out is the supervisor's egress proxy.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::{json, Value};

use super::http_client::{task, Api};
use super::sandbox::{bundle_with_agent, env_with_workspace};
use super::support::{Env, Server};

/// An HTTP (or, with a certificate, HTTPS) server on a free loopback port that answers every GET with its Host
/// header and path. It exits by itself after two minutes, and is killed when dropped.
pub(super) struct Upstream {
    child: Child,
    pub(super) port: u16,
}

const UPSTREAM: &str = r#"
import http.server, ssl, sys, threading, os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("upstream %s %s\n" % (self.headers.get("Host"), self.path)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
if len(sys.argv) > 2:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[1], sys.argv[2])
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
threading.Timer(120, lambda: os._exit(0)).start()
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;

impl Upstream {
    pub(super) fn start(tls: Option<(&std::path::Path, &std::path::Path)>) -> Upstream {
        let args: Vec<&std::path::Path> = tls.map(|(c, k)| vec![c, k]).unwrap_or_default();
        Upstream::python(UPSTREAM, &args)
    }

    /// A Python server `script` (run with `args`) that prints its port on its first line.
    pub(super) fn python(script: &str, args: &[&std::path::Path]) -> Upstream {
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(script)
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 (install it, as .ci/run does)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().expect("the server's port");
        Upstream { child, port }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A self-signed certificate for `host` in `dir` (cert.pem, key.pem); the sandbox sees cert.pem in its workspace.
fn certificate(dir: &std::path::Path, host: &str) {
    let status = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .arg("-subj")
        .arg(format!("/CN={host}"))
        .arg("-addext")
        .arg(format!("subjectAltName=DNS:{host}"))
        .arg("-keyout")
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(dir.join("cert.pem"))
        .stderr(Stdio::null())
        .status()
        .expect("openssl");
    assert!(status.success());
}

fn sandbox(hosts: &[String]) -> String {
    format!(
        r#"{{ mode: "workspace_write", permissions: {{ network: {} }} }}"#,
        serde_json::to_string(hosts).unwrap()
    )
}

/// Runs the bundle's turn with `run --json` and these `--resolve` entries; returns the final answer and the events.
fn run(env: &Env, name: &str, resolve: &[String]) -> (String, Vec<Value>) {
    let mut args = vec!["run", name, "--prompt", "go", "--cwd", "ws", "--json"];
    for r in resolve {
        args.extend(["--resolve", r.as_str()]);
    }
    let out = env.run(&args);
    let events: Vec<Value> = out
        .ok()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let answer = events
        .iter()
        .find(|e| e["payload"]["type"] == "turn_completed")
        .map(|e| {
            e["payload"]["payload"]["final_message"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_else(|| panic!("no turn_completed in {events:?}"));
    (answer, events)
}

/// The `network_access` and `network_closed` payloads, in order.
fn network(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| {
            e["payload"]["type"]
                .as_str()
                .is_some_and(|k| k.starts_with("network_"))
        })
        .map(|e| &e["payload"])
        .collect()
}

#[test]
fn listed_hosts_answer_over_http_and_connect_and_others_get_a_403_that_names_them() {
    let env = env_with_workspace();
    certificate(&env.path("ws"), "secure.test");
    let plain = Upstream::start(None);
    let tls = Upstream::start(Some((&env.path("ws/cert.pem"), &env.path("ws/key.pem"))));
    let (p, t) = (plain.port, tls.port);
    let cmd = format!(
        "curl -sS http://allowed.test:{p}/plain; curl -sS -p http://allowed.test:{p}/tunnelled; \
         curl -sS --cacert cert.pem https://secure.test:{t}/tls; curl -sS http://other.test:{p}/; \
         echo end"
    );
    bundle_with_agent(
        &env,
        "allow",
        &sandbox(&[format!("allowed.test:{p}"), format!("secure.test:{t}")]),
        "",
        &cmd,
    );
    let resolve = [
        format!("allowed.test:{p}:127.0.0.1"),
        format!("secure.test:{t}:127.0.0.1"),
        format!("other.test:{p}:127.0.0.1"),
    ];
    let (out, events) = run(&env, "./allow", &resolve);
    assert!(
        out.contains(&format!("upstream allowed.test:{p} /plain")),
        "{out}"
    );
    assert!(
        out.contains(&format!("upstream allowed.test:{p} /tunnelled")),
        "{out}"
    );
    assert!(
        out.contains(&format!("upstream secure.test:{t} /tls")),
        "{out}"
    );
    assert!(
        out.contains(&format!("other.test:{p} is not allowed"))
            && out.contains(&format!("add \"other.test:{p}\"")),
        "{out}"
    );

    let net = network(&events);
    let decisions: Vec<(String, String, Value)> = net
        .iter()
        .filter(|e| e["type"] == "network_access")
        .map(|e| {
            let p = &e["payload"];
            (
                p["host"].as_str().unwrap().to_string(),
                p["decision"].as_str().unwrap().to_string(),
                p["rule"].clone(),
            )
        })
        .collect();
    assert_eq!(
        decisions,
        vec![
            (
                "allowed.test".into(),
                "allow".into(),
                json!(format!("allowed.test:{p}"))
            ),
            (
                "allowed.test".into(),
                "allow".into(),
                json!(format!("allowed.test:{p}"))
            ),
            (
                "secure.test".into(),
                "allow".into(),
                json!(format!("secure.test:{t}"))
            ),
            ("other.test".into(), "deny".into(), Value::Null),
        ]
    );
    let closed: Vec<&Value> = net
        .iter()
        .filter(|e| e["type"] == "network_closed")
        .map(|e| &e["payload"])
        .collect();
    assert_eq!(closed.len(), 3, "{net:?}");
    assert!(
        closed
            .iter()
            .all(|c| c["bytes_sent"].as_u64() > Some(0) && c["bytes_received"].as_u64() > Some(0)),
        "{closed:?}"
    );
}

#[test]
fn a_host_listed_sandbox_has_no_direct_route_and_no_dns() {
    let env = env_with_workspace();
    let plain = Upstream::start(None);
    let p = plain.port;
    let cmd = format!(
        "(exec 3<>/dev/tcp/127.0.0.1/{p}) 2>/dev/null && echo direct: connected || echo direct: refused; \
         getent hosts allowed.test >/dev/null && echo dns: answered || echo dns: failed; \
         curl -sS --noproxy '*' --max-time 5 http://allowed.test:{p}/ >/dev/null 2>&1 && echo noproxy: reached || echo noproxy: failed; \
         curl -sS http://allowed.test:{p}/via-proxy"
    );
    bundle_with_agent(
        &env,
        "direct",
        &sandbox(&[format!("allowed.test:{p}")]),
        "",
        &cmd,
    );
    let (out, _) = run(&env, "./direct", &[format!("allowed.test:{p}:127.0.0.1")]);
    for line in [
        "direct: refused",
        "dns: failed",
        "noproxy: failed",
        "/via-proxy",
    ] {
        assert!(out.contains(line), "missing {line:?} in {out}");
    }
}

#[test]
fn a_wildcard_name_that_resolves_to_loopback_is_refused_unless_listed_exactly() {
    let env = env_with_workspace();
    let plain = Upstream::start(None);
    let p = plain.port;
    let cmd =
        format!("curl -sS http://rebind.wild.test:{p}/; curl -sS http://exact.wild.test:{p}/exact");
    bundle_with_agent(
        &env,
        "rebind",
        &sandbox(&[format!("*.wild.test:{p}"), format!("exact.wild.test:{p}")]),
        "",
        &cmd,
    );
    let resolve = [
        format!("rebind.wild.test:{p}:127.0.0.1"),
        format!("exact.wild.test:{p}:127.0.0.1"),
    ];
    let (out, events) = run(&env, "./rebind", &resolve);
    assert!(
        out.contains(&format!(
            "rebind.wild.test:{p} is not allowed: it resolves to 127.0.0.1"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("upstream exact.wild.test:{p} /exact")),
        "{out}"
    );
    let denied = network(&events)
        .into_iter()
        .find(|e| e["payload"]["decision"] == "deny")
        .unwrap();
    assert_eq!(denied["payload"]["rule"], json!(format!("*.wild.test:{p}")));
}

#[test]
fn a_listed_loopback_address_is_reached_through_the_proxy_with_plain_curl() {
    let env = env_with_workspace();
    let plain = Upstream::start(None);
    let p = plain.port;
    // No --noproxy: the sandbox's NO_PROXY must not send 127.0.0.1 to the sandbox's own loopback.
    let cmd = format!("echo \"NO_PROXY=$NO_PROXY\"; curl -sS http://127.0.0.1:{p}/listed");
    bundle_with_agent(
        &env,
        "loop",
        &sandbox(&[format!("127.0.0.1:{p}")]),
        "",
        &cmd,
    );
    let (out, _) = run(&env, "./loop", &[]);
    assert!(
        out.contains(&format!("upstream 127.0.0.1:{p} /listed")),
        "{out}"
    );
    assert!(out.contains("NO_PROXY=localhost\n"), "{out}");
}

#[test]
fn a_tls_server_name_other_than_the_connect_host_closes_the_tunnel() {
    let env = env_with_workspace();
    certificate(&env.path("ws"), "secure.test");
    let tls = Upstream::start(Some((&env.path("ws/cert.pem"), &env.path("ws/key.pem"))));
    let t = tls.port;
    // openssl speaks CONNECT to the proxy itself, then sends a ClientHello naming another host.
    let cmd = format!(
        "echo | openssl s_client -proxy ${{HTTPS_PROXY#http://}} -connect secure.test:{t} -servername evil.test \
         2>&1 | grep -c 'BEGIN CERTIFICATE'; echo end"
    );
    bundle_with_agent(
        &env,
        "sni",
        &sandbox(&[format!("secure.test:{t}")]),
        "",
        &cmd,
    );
    let (out, events) = run(&env, "./sni", &[format!("secure.test:{t}:127.0.0.1")]);
    assert!(out.starts_with('0'), "a certificate came back: {out}");
    let net = network(&events);
    let refusal = net
        .iter()
        .find(|e| e["payload"]["decision"] == "deny")
        .unwrap_or_else(|| panic!("no refusal in {net:?}"));
    assert!(
        refusal["payload"]["reason"]
            .as_str()
            .unwrap()
            .contains("\"evil.test\" is not the CONNECT host"),
        "{refusal}"
    );
}

#[test]
fn network_star_allows_public_hosts_through_the_proxy_and_never_internal_ones() {
    let env = env_with_workspace();
    let plain = Upstream::start(None);
    let p = plain.port;
    // 203.0.113.7 is a documentation address: public by its range, so `*` allows it; nothing answers there.
    let cmd = format!(
        "curl -sS --noproxy '' http://127.0.0.1:{p}/; curl -sS http://local.test:{p}/; \
         curl -sS -p http://[::1]:{p}/; curl -sS http://169.254.169.254/latest/meta-data/; \
         curl -sS --max-time 1 http://public.test/ >/dev/null 2>&1; echo end"
    );
    bundle_with_agent(&env, "star", &sandbox(&["*".into()]), "", &cmd);
    let resolve = [
        format!("local.test:{p}:127.0.0.1"),
        "public.test:80:203.0.113.7".to_string(),
    ];
    let (out, events) = run(&env, "./star", &resolve);
    assert!(
        !out.contains("upstream"),
        "an internal host answered: {out}"
    );
    let decisions: Vec<(String, String)> = network(&events)
        .iter()
        .filter(|e| e["type"] == "network_access")
        .map(|e| {
            (
                e["payload"]["host"].as_str().unwrap().to_string(),
                e["payload"]["decision"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        decisions,
        vec![
            ("127.0.0.1".into(), "deny".into()),
            ("local.test".into(), "deny".into()),
            ("::1".into(), "deny".into()),
            ("169.254.169.254".into(), "deny".into()),
            ("public.test".into(), "allow".into()),
        ],
        "{out}"
    );
}

#[test]
fn without_hosts_there_is_no_proxy_at_all() {
    let env = env_with_workspace();
    let cmd =
        "env | grep -ci proxy; test -e /run/service/egress.sock && echo socket || echo no-socket";
    bundle_with_agent(&env, "none", &sandbox(&[]), "", cmd);
    let (out, events) = run(&env, "./none", &[]);
    assert_eq!(out.trim(), "0\nno-socket\n[done]");
    assert!(network(&events).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_ask_an_unlisted_host_waits_for_an_approval_over_http() {
    let env = env_with_workspace();
    let plain = Upstream::start(None);
    let p = plain.port;
    let cmd = format!(
        "curl -sS http://asked.test:{p}/first; curl -sS http://asked.test:{p}/again; \
         curl -sS http://refused.test:{p}/"
    );
    bundle_with_agent(
        &env,
        "ask",
        &sandbox(&[]),
        "permissions: { network: ask }\n",
        &cmd,
    );
    let resolve_asked = format!("asked.test:{p}:127.0.0.1");
    let resolve_refused = format!("refused.test:{p}:127.0.0.1");
    let server = Server::start(
        env.home.path(),
        &[
            "--allow-path",
            env.work.path().to_str().unwrap(),
            "--resolve",
            &resolve_asked,
            "--resolve",
            &resolve_refused,
        ],
        &[],
    );
    let api = Api::new(server);
    let (status, body) = api
        .post(
            "/sessions",
            json!({"bundle_ref": env.path("ask"), "cwd": null}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap().to_string();
    let mut sse = api.events(&id, None).await;
    let (status, _) = api
        .post(&format!("/sessions/{id}/run"), json!({"input": task("go")}))
        .await;
    assert_eq!(status, 202);

    let mut answers = [("asked.test", "allow_always"), ("refused.test", "deny")].into_iter();
    let final_message = loop {
        let (_, ev) = sse.next().await;
        match ev["payload"]["type"].as_str().unwrap() {
            "network_permission_requested" => {
                let (host, decision) = answers.next().expect("only two hosts need asking");
                assert_eq!(ev["payload"]["payload"]["host"], host);
                let request_id = ev["payload"]["payload"]["request_id"].as_str().unwrap();
                let (status, body) = api
                    .post(
                        &format!("/approvals/{request_id}"),
                        json!({"decision": decision}),
                    )
                    .await;
                assert_eq!(status, 200, "{body}");
            }
            "turn_completed" => {
                break ev["payload"]["payload"]["final_message"]
                    .as_str()
                    .unwrap()
                    .to_string();
            }
            "error" => panic!("{ev}"),
            _ => {}
        }
    };
    assert!(answers.next().is_none(), "a host was never asked about");
    assert!(
        final_message.contains(&format!("upstream asked.test:{p} /first")),
        "{final_message}"
    );
    // allow_always: the second request to the same host is not asked about again.
    assert!(
        final_message.contains(&format!("upstream asked.test:{p} /again")),
        "{final_message}"
    );
    assert!(
        final_message.contains("refused.test") && final_message.contains("the operator denied it"),
        "{final_message}"
    );
}
