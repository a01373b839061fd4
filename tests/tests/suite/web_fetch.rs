//! WebFetch end to end: a real page server on loopback (Python's http.server), reached from a real bwrap sandbox
//! through the supervisor's egress proxy only, with provider keys in the supervisor's environment.

use serde_json::{json, Value};

use super::egress::Upstream;
use super::support::Env;

/// A page server: `/page` is HTML that shows every request header it received, `/data` is JSON, `/bin` is an
/// image. It exits by itself after two minutes and is killed when dropped.
struct Pages;

const PAGES: &str = r#"
import http.server, threading, os, html
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/data":
            body, kind = b'{"answer": 42}', "application/json"
        elif self.path == "/bin":
            body, kind = b"\x89PNG\r\n\x1a\n" + bytes(64), "image/png"
        else:
            seen = "".join("<li>%s: %s</li>" % (html.escape(k), html.escape(v)) for k, v in self.headers.items())
            body = ("<html><head><title>t</title><script>stealCookies()</script><style>p{}</style></head>"
                    "<body><h1>Release notes</h1><p>Version <b>2.0</b> is out.</p><ul>%s</ul></body></html>"
                    % seen).encode()
            kind = "text/html; charset=utf-8"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
threading.Timer(120, lambda: os._exit(0)).start()
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;

impl Pages {
    fn start() -> Upstream {
        Upstream::python(PAGES, &[])
    }
}

const KEY: &str = "sk-ant-test-never-leaves-the-supervisor";

/// A bundle offering WebFetch whose scripted model fetches each URL in turn, then answers with every result.
fn bundle(env: &Env, network: &[String], urls: &[String]) {
    let dir = env.path("fetcher");
    std::fs::create_dir_all(dir.join("resources")).unwrap();
    std::fs::write(
        dir.join("service.bundle.json5"),
        format!(
            r#"{{ manifest_version: "service.bundle/v1", id: "fetcher", version: "1.0.0", tools: ["WebFetch"],
                 sandbox: {{ mode: "read_only", permissions: {{ network: {} }} }} }}"#,
            serde_json::to_string(network).unwrap()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("agent.yaml"),
        "model: { provider: scripted, name: s, config: { script: resources/script.json5 } }\n",
    )
    .unwrap();
    let mut replies: Vec<Value> = urls
        .iter()
        .map(|u| json!({"tool_calls": [{"name": "WebFetch", "arguments": {"url": u}}]}))
        .collect();
    replies.push(json!({"text": "{{last_tool_output}}\n[done]"}));
    let script = json!({"turns": [{"replies": replies}]});
    std::fs::write(dir.join("resources/script.json5"), script.to_string()).unwrap();
}

/// Runs the bundle once with `run --json` and provider keys set; returns the tool results and the events.
fn run(env: &Env, resolve: &[String]) -> (Vec<(String, String)>, Vec<Value>) {
    let mut args = vec!["run", "./fetcher", "--prompt", "go", "--json"];
    for r in resolve {
        args.extend(["--resolve", r.as_str()]);
    }
    let out = env
        .command(&args)
        .env("ANTHROPIC_API_KEY", KEY)
        .env("OPENAI_API_KEY", KEY)
        .output()
        .unwrap();
    let events = json_lines(&out);
    let results = events
        .iter()
        .filter(|e| e["payload"]["type"] == "tool_call_finished")
        .map(|e| {
            let p = &e["payload"]["payload"];
            (
                p["status"].as_str().unwrap_or("").to_string(),
                p["output"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    (results, events)
}

/// The events `run --json` printed.
fn json_lines(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn a_listed_page_comes_back_as_markdown_without_scripts_or_any_key() {
    let env = Env::new();
    let pages = Pages::start();
    let p = pages.port;
    bundle(
        &env,
        &[format!("docs.test:{p}")],
        &[
            format!("http://docs.test:{p}/page"),
            format!("http://docs.test:{p}/data"),
            format!("http://docs.test:{p}/bin"),
        ],
    );
    let (results, events) = run(&env, &[format!("docs.test:{p}:127.0.0.1")]);
    assert_eq!(results.len(), 3, "{events:?}");
    let (status, page) = &results[0];
    assert_eq!(status, "ok", "{page}");
    assert!(page.contains("# Release notes"), "{page}");
    assert!(page.contains("**2.0**"), "{page}");
    assert!(!page.contains("stealCookies"), "{page}");
    // The page lists the headers it was sent: the request came through the proxy with no key of any provider.
    assert!(page.to_ascii_lowercase().contains("user-agent"), "{page}");
    assert!(!page.contains(KEY), "{page}");
    assert!(
        !page.to_ascii_lowercase().contains("authorization"),
        "{page}"
    );
    assert!(!page.to_ascii_lowercase().contains("x-api-key"), "{page}");

    assert_eq!(results[1].0, "ok");
    assert!(
        results[1].1.contains(r#"{"answer": 42}"#),
        "{:?}",
        results[1]
    );
    assert_eq!(results[2].0, "error");
    assert!(
        results[2].1.contains("image/png") && results[2].1.contains("does not show"),
        "{:?}",
        results[2]
    );

    let access: Vec<&Value> = events
        .iter()
        .filter(|e| e["payload"]["type"] == "network_access")
        .map(|e| &e["payload"]["payload"])
        .collect();
    assert_eq!(access.len(), 3, "{access:?}");
    assert!(
        access.iter().all(|a| a["decision"] == "allow"),
        "{access:?}"
    );
}

#[test]
fn an_unlisted_host_is_refused_by_the_proxy_and_the_model_reads_why() {
    let env = Env::new();
    let pages = Pages::start();
    let p = pages.port;
    bundle(
        &env,
        &[format!("docs.test:{p}")],
        &[format!("http://elsewhere.test:{p}/page")],
    );
    let (results, events) = run(
        &env,
        &[
            format!("docs.test:{p}:127.0.0.1"),
            format!("elsewhere.test:{p}:127.0.0.1"),
        ],
    );
    assert_eq!(results.len(), 1, "{events:?}");
    let (status, output) = &results[0];
    assert_eq!(status, "error", "{output}");
    assert!(
        output.contains(&format!("elsewhere.test:{p} is not allowed")),
        "{output}"
    );
    assert!(!output.contains("Release notes"), "{output}");
    let denied = events.iter().any(|e| {
        e["payload"]["type"] == "network_access"
            && e["payload"]["payload"]["host"] == "elsewhere.test"
            && e["payload"]["payload"]["decision"] == "deny"
    });
    assert!(denied, "{events:?}");
}

#[test]
fn a_sandbox_without_network_says_how_to_give_it_one() {
    let env = Env::new();
    bundle(&env, &[], &["https://example.com/".to_string()]);
    let (results, events) = run(&env, &[]);
    assert_eq!(results.len(), 1, "{events:?}");
    assert_eq!(results[0].0, "error");
    assert!(
        results[0].1.contains("sandbox.permissions.network"),
        "{:?}",
        results[0]
    );
}

#[test]
fn under_ask_a_fetch_waits_for_the_host_and_a_denial_refuses_it() {
    let env = Env::new();
    let pages = Pages::start();
    let p = pages.port;
    bundle(&env, &[], &[format!("http://asked.test:{p}/page")]);
    let agent = env.path("fetcher/agent.yaml");
    let text = std::fs::read_to_string(&agent).unwrap();
    std::fs::write(&agent, format!("{text}permissions: {{ network: ask }}\n")).unwrap();
    let resolve = format!("asked.test:{p}:127.0.0.1");
    let out = env
        .command(&[
            "run",
            "./fetcher",
            "--prompt",
            "go",
            "--json",
            "--deny",
            "--resolve",
            &resolve,
        ])
        .output()
        .unwrap();
    let events = json_lines(&out);
    let asked = events
        .iter()
        .any(|e| e["payload"]["type"] == "network_permission_requested");
    assert!(asked, "{events:?}");
    let result = events
        .iter()
        .find(|e| e["payload"]["type"] == "tool_call_finished")
        .map(|e| e["payload"]["payload"].clone())
        .expect("a tool result");
    assert_eq!(result["status"], "error", "{result}");
    assert!(
        !result["output"]
            .as_str()
            .unwrap_or("")
            .contains("Release notes"),
        "{result}"
    );
}
