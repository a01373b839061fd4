//! OpenTelemetry traces: a real OTLP/HTTP receiver on loopback decodes what `serve` and `run` export (protobuf,
//! with the protocol's own generated messages) and the tests read the span tree of real turns.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::json;
use tempfile::TempDir;

use super::http_client::{task, Api};
use super::support::{write_bundle, Env, Server};

/// An OTLP/HTTP receiver: every span it was sent, and every request body as it came (to look for secrets).
#[derive(Clone, Default)]
struct Receiver {
    spans: Arc<Mutex<Vec<Span>>>,
    raw: Arc<Mutex<Vec<u8>>>,
}

impl Receiver {
    /// Listens on a free loopback port; its base URL. The server task ends with the test's runtime.
    async fn start(&self) -> String {
        let me = self.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let me = me.clone();
                async move {
                    me.raw.lock().unwrap().extend_from_slice(&body);
                    let request = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                    let mut spans = me.spans.lock().unwrap();
                    for resource in request.resource_spans {
                        for scope in resource.scope_spans {
                            spans.extend(scope.spans);
                        }
                    }
                    ""
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        base
    }

    /// The spans received once one named `name` has arrived (panics after 10 s).
    async fn until(&self, name: &str) -> Vec<Span> {
        for _ in 0..200 {
            {
                let spans = self.spans.lock().unwrap();
                if spans.iter().any(|s| s.name == name) {
                    return spans.clone();
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("no span {name}: {:?}", names(&self.spans.lock().unwrap()));
    }
}

fn names(spans: &[Span]) -> Vec<String> {
    spans.iter().map(|s| s.name.clone()).collect()
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    let value = span
        .attributes
        .iter()
        .find(|kv| kv.key == key)?
        .value
        .clone()?;
    Some(match value.value? {
        Any::StringValue(s) => s,
        Any::IntValue(i) => i.to_string(),
        Any::BoolValue(b) => b.to_string(),
        Any::ArrayValue(a) => format!("{:?}", a.values),
        other => format!("{other:?}"),
    })
}

fn one<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    let found: Vec<&Span> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "one {name} in {:?}", names(spans));
    found[0]
}

const ASK: &str = "permissions:\n  default: allow\n  rules:\n    - { tool: Write, action: ask }\n";
const SCRIPT: &str = r#"{turns: [{replies: [
  {tool_calls: [{name: "Write", arguments: {file_path: "secret-plan.txt", content: "the prompt's secret words"}}]},
  {text: "done: {{last_tool_output}}"}]}]}"#;
const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";
const PROVIDER_KEY: &str = "sk-ant-never-in-a-span-0123456789";

/// A served turn with a tool call and an approval, from a client that sends a `traceparent`; the spans exported
/// and every byte the receiver got.
async fn served_turn(capture: bool) -> (Vec<Span>, Vec<u8>) {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let home = TempDir::new().unwrap();
    let bundle = TempDir::new().unwrap();
    write_bundle(bundle.path(), SCRIPT, ASK, "workspace_write");
    let mut envs = vec![
        ("ANTHROPIC_API_KEY", PROVIDER_KEY),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    if capture {
        envs.push(("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true"));
    }
    let server = Server::start(
        home.path(),
        &[
            "--token",
            "server-token-never-in-a-span",
            "--otlp-endpoint",
            &endpoint,
        ],
        &envs,
    );
    let api = Api::with_token(server, "server-token-never-in-a-span");
    let id = api.session(bundle.path().to_str().unwrap()).await;
    let mut sse = api.events(&id, None).await;
    let traceparent = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    let started = api
        .req(reqwest::Method::POST, &format!("/sessions/{id}/run"))
        .header("traceparent", &traceparent)
        .json(&json!({"input": task("write the plan with my secret words")}))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status().as_u16(), 202);
    let asked = sse.until("permission_requested").await;
    let request_id = asked.last().unwrap().1["payload"]["payload"]["request_id"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, _) = api
        .post(
            &format!("/approvals/{request_id}"),
            json!({"decision": "allow_once"}),
        )
        .await;
    assert_eq!(status, 200);
    sse.until("turn_completed").await;
    let spans = receiver.until("invoke_agent fixture").await;
    let raw = receiver.raw.lock().unwrap().clone();
    (spans, raw)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_is_one_trace_under_the_clients_traceparent_with_chat_tool_and_approval_spans() {
    let (spans, raw) = served_turn(false).await;
    let turn = one(&spans, "invoke_agent fixture");
    assert_eq!(
        hex(&turn.trace_id),
        CLIENT_TRACE,
        "the client's trace goes on"
    );
    assert_eq!(hex(&turn.parent_span_id), CLIENT_SPAN);
    assert_eq!(
        attribute(turn, "gen_ai.operation.name").as_deref(),
        Some("invoke_agent")
    );
    assert_eq!(
        attribute(turn, "gen_ai.agent.name").as_deref(),
        Some("fixture")
    );
    assert_eq!(
        attribute(turn, "gen_ai.provider.name").as_deref(),
        Some("scripted")
    );
    assert!(attribute(turn, "gen_ai.conversation.id").is_some_and(|s| s.len() == 36));
    assert!(attribute(turn, "gen_ai.usage.input_tokens").is_some());

    let chats: Vec<&Span> = spans.iter().filter(|s| s.name == "chat fixture").collect();
    assert_eq!(chats.len(), 2, "{:?}", names(&spans));
    for chat in &chats {
        assert_eq!(chat.parent_span_id, turn.span_id);
        assert_eq!(
            attribute(chat, "gen_ai.request.model").as_deref(),
            Some("fixture")
        );
        assert!(attribute(chat, "gen_ai.usage.output_tokens").is_some());
    }
    let reasons: Vec<String> = chats
        .iter()
        .filter_map(|c| attribute(c, "gen_ai.response.finish_reasons"))
        .collect();
    assert!(
        reasons.iter().any(|r| r.contains("tool_call")),
        "{reasons:?}"
    );
    assert!(reasons.iter().any(|r| r.contains("stop")), "{reasons:?}");

    let tool = one(&spans, "execute_tool Write");
    assert_eq!(tool.parent_span_id, turn.span_id);
    assert_eq!(
        attribute(tool, "gen_ai.tool.name").as_deref(),
        Some("Write")
    );
    assert!(attribute(tool, "gen_ai.tool.call.id").is_some());
    let approval = one(&spans, "approval.wait");
    assert_eq!(approval.parent_span_id, tool.span_id);
    assert_eq!(
        attribute(approval, "service.approval.decision").as_deref(),
        Some("allow_once")
    );
    assert!(approval.end_time_unix_nano >= approval.start_time_unix_nano);
    assert!(tool.end_time_unix_nano >= approval.end_time_unix_nano);
    let sandbox = one(&spans, "sandbox.start");
    assert_eq!(sandbox.parent_span_id, turn.span_id);
    for span in &spans {
        assert_eq!(
            hex(&span.trace_id),
            CLIENT_TRACE,
            "{} is in the client's trace",
            span.name
        );
    }

    // Without the opt-in no content is exported, and never a token or a key.
    let text = String::from_utf8_lossy(&raw);
    for secret in [
        "secret words",
        "secret-plan",
        "server-token-never-in-a-span",
        PROVIDER_KEY,
    ] {
        assert!(!text.contains(secret), "{secret} was exported");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_opt_in_prompts_and_tool_arguments_are_in_spans_but_tokens_and_keys_never() {
    let (spans, raw) = served_turn(true).await;
    let turn = one(&spans, "invoke_agent fixture");
    assert!(attribute(turn, "gen_ai.input.messages").is_some_and(|m| m.contains("my secret words")));
    assert!(attribute(turn, "gen_ai.output.messages").is_some_and(|m| m.contains("done")));
    let tool = one(&spans, "execute_tool Write");
    assert!(attribute(tool, "gen_ai.tool.call.arguments")
        .is_some_and(|a| a.contains("secret-plan.txt")));
    let text = String::from_utf8_lossy(&raw);
    for secret in ["server-token-never-in-a-span", PROVIDER_KEY] {
        assert!(!text.contains(secret), "{secret} was exported");
    }
}

/// `run BUNDLE PROMPT` exporting to `endpoint`; the spans `receiver` got once its turn's arrived.
async fn one_shot(
    env: &Env,
    bundle: &std::path::Path,
    prompt: &str,
    receiver: &Receiver,
    endpoint: &str,
) -> Vec<Span> {
    let out = env
        .command(&["run", bundle.to_str().unwrap(), prompt])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        // Longer than the run: only the flush at exit can send the span.
        .env("OTEL_BSP_SCHEDULE_DELAY", "60000")
        .output()
        .unwrap();
    super::support::Run::from(out).ok();
    receiver.until("invoke_agent fixture").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_shot_run_exports_its_turn_before_it_exits() {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let env = Env::new();
    let bundle = env.path("b");
    write_bundle(
        &bundle,
        r#"{turns: [{replies: [{text: "hi"}]}]}"#,
        "",
        "read_only",
    );
    let spans = one_shot(&env, &bundle, "hello", &receiver, &endpoint).await;
    let turn = one(&spans, "invoke_agent fixture");
    assert_eq!(turn.parent_span_id, Vec::<u8>::new(), "a root span");
    let by_id: HashMap<Vec<u8>, &Span> = spans.iter().map(|s| (s.span_id.clone(), s)).collect();
    let chat = one(&spans, "chat fixture");
    assert_eq!(by_id[&chat.parent_span_id].name, "invoke_agent fixture");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_run_is_a_span_under_its_tool_call_or_its_turn() {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let env = Env::new();
    let bundle = env.path("b");
    let hooks = "permissions: { default: allow }\nhooks:\n  PreToolUse:\n    - matcher: Write\n      hooks:\n        \
                 - { type: command, command: \"exit 0\" }\n  Stop:\n    - hooks:\n        - { type: command, command: \"sleep 5\", timeout: 0.2 }\n";
    write_bundle(&bundle, SCRIPT, hooks, "workspace_write");
    let spans = one_shot(&env, &bundle, "write the plan", &receiver, &endpoint).await;
    let by_id: HashMap<Vec<u8>, &Span> = spans.iter().map(|s| (s.span_id.clone(), s)).collect();
    let pre = one(&spans, "hook PreToolUse");
    assert_eq!(by_id[&pre.parent_span_id].name, "execute_tool Write");
    assert_eq!(
        attribute(pre, "service.hook.source").as_deref(),
        Some("bundle")
    );
    assert_eq!(
        attribute(pre, "service.hook.exit_code").as_deref(),
        Some("0")
    );
    let stop = one(&spans, "hook Stop");
    assert_eq!(by_id[&stop.parent_span_id].name, "invoke_agent fixture");
    assert_eq!(
        attribute(stop, "error.type").as_deref(),
        Some("hook_timeout"),
        "a hook stopped at its time-out is an error"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_replys_300_kb_tool_name_and_call_id_reach_no_span_whole() {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let env = Env::new();
    let bundle = env.path("b");
    let (name, id) = ("N".repeat(300 * 1024), "I".repeat(300 * 1024));
    let script = json!({"turns": [{"replies": [
        {"tool_calls": [{"name": name, "id": id, "arguments": {}}]},
        {"text": "saw: {{last_tool_output}}"},
    ]}]});
    write_bundle(&bundle, &script.to_string(), "", "read_only");
    let out = env
        .command(&["run", bundle.to_str().unwrap(), "hello"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("OTEL_BSP_SCHEDULE_DELAY", "60000")
        .output()
        .unwrap();
    let answer = super::support::Run::from(out).ok().to_string();
    // The model is told there is no such tool; the name it is told of is cut.
    assert!(
        answer.len() < 4096,
        "{} bytes: {}",
        answer.len(),
        &answer[..600.min(answer.len())]
    );
    let spans = receiver.until("invoke_agent fixture").await;
    let raw = receiver.raw.lock().unwrap().clone();
    assert!(raw.len() < 32 * 1024, "{} bytes exported", raw.len());
    let tool = spans
        .iter()
        .find(|s| s.name.starts_with("execute_tool"))
        .expect("an execute_tool span");
    assert!(
        tool.name.len() <= 300,
        "span name of {} bytes",
        tool.name.len()
    );
    for key in ["gen_ai.tool.name", "gen_ai.tool.call.id"] {
        let value = attribute(tool, key).unwrap();
        assert!(value.len() <= 300, "{key} of {} bytes", value.len());
    }
    assert!(attribute(tool, "gen_ai.tool.name").unwrap().contains("…[+"));
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_forwarded_to_another_node_stays_in_the_clients_trace() {
    use super::cluster::{node_with, turn};
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let pg = super::postgres::Postgres::start();
    let (_a_home, a) = node_with(&pg, "a", "10s", &["--otlp-endpoint", &endpoint]);
    let (_b_home, b) = node_with(&pg, "b", "10s", &["--otlp-endpoint", &endpoint]);
    let bundle = TempDir::new().unwrap();
    write_bundle(
        bundle.path(),
        r#"{turns: [{replies: [{text: "hi"}]}]}"#,
        "",
        "read_only",
    );
    let id = b.session(bundle.path().to_str().unwrap()).await;
    assert_eq!(turn(&b, &id, "first").await.0, 200);
    let traceparent = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    let answer = a
        .req(reqwest::Method::POST, &format!("/sessions/{id}/run-sync"))
        .header("traceparent", &traceparent)
        .json(&json!({"input": task("second")}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    for _ in 0..200 {
        let continued = receiver
            .spans
            .lock()
            .unwrap()
            .iter()
            .any(|s| s.name == "invoke_agent fixture" && hex(&s.trace_id) == CLIENT_TRACE);
        if continued {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "the owner's turn span is not in the client's trace: {:?}",
        names(&receiver.spans.lock().unwrap())
    );
}
