//! `--remote <base_url>`: `bundles`, `sessions`, `inspect` and `run` against a running `service-rs serve`.

use std::process::ExitCode;

use anyhow::{anyhow, Context};
use futures::StreamExt;
use serde_json::{json, Value};
use service_ipc::{EventMsg, EventPayload, Task};
use service_supervisor::bundle::BundleInfo;

use super::run::{Answer, RunArgs};

/// An HTTP client of one server.
#[derive(Clone)]
pub struct Remote {
    base: String,
    client: reqwest::Client,
    token: Option<String>,
}

impl Remote {
    /// A client of `base` (e.g. `http://127.0.0.1:8472`), sending `SERVICE_TOKEN`, else the token a local server
    /// stored in `$SERVICE_HOME/serve.token`.
    pub fn new(base: &str) -> Self {
        Remote {
            base: base.trim_end_matches('/').to_string(),
            client: reqwest::Client::new(),
            token: service_supervisor::ServiceHome::from_env().and_then(|h| h.client_token()),
        }
    }

    pub(super) fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let req = self.client.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    pub(super) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let mut req = self.request(method, path);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("cannot reach the server at {}", self.base))?;
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        if status.is_success() {
            return Ok(body);
        }
        let message = body["error"]["message"]
            .as_str()
            .unwrap_or("the server gave no reason");
        let code = body["error"]["code"].as_str().unwrap_or("unknown");
        Err(anyhow!("{message} (HTTP {}, {code})", status.as_u16()))
    }
}

pub async fn bundles(remote: &Remote, json: bool) -> anyhow::Result<ExitCode> {
    let infos: Vec<BundleInfo> =
        serde_json::from_value(remote.call(reqwest::Method::GET, "/bundles", None).await?)?;
    super::bundles::print_list(&infos, json)
}

pub async fn sessions(remote: &Remote, json: bool) -> anyhow::Result<ExitCode> {
    let records: Vec<service_supervisor::runtime::SessionRecord> =
        serde_json::from_value(remote.call(reqwest::Method::GET, "/sessions", None).await?)?;
    super::sessions::print_list(&records, json)
}

pub async fn inspect(remote: &Remote, reference: &str, json: bool) -> anyhow::Result<ExitCode> {
    let path = format!("/bundles/{}", encode(reference));
    let info: BundleInfo =
        serde_json::from_value(remote.call(reqwest::Method::GET, &path, None).await?)?;
    super::bundles::print_info(&info, json)
}

/// Percent-encodes a path segment.
pub(super) fn encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b':' | b'@' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub async fn run(remote: &Remote, args: &RunArgs) -> anyhow::Result<ExitCode> {
    if args.dangerous_sandbox_mode {
        return Err(anyhow!("--dangerous-sandbox-mode is the server's choice: start `service-rs serve` with it instead"));
    }
    if !args.resolve.is_empty() {
        return Err(anyhow!(
            "--resolve is the server's choice: start `service-rs serve` with it instead"
        ));
    }
    let prompt = args.prompt_text()?;
    let cwd = args.cwd.as_ref().map(|c| c.display().to_string());
    let session = remote
        .call(
            reqwest::Method::POST,
            "/sessions",
            Some(json!({"bundle_ref": args.bundle_ref, "cwd": cwd})),
        )
        .await?;
    let id = session["id"]
        .as_str()
        .ok_or_else(|| anyhow!("the server answered without a session id"))?
        .to_string();

    // Subscribe before starting the turn, so no event is missed.
    let events = remote
        .request(reqwest::Method::GET, &format!("/sessions/{id}/events"))
        .send()
        .await
        .context("cannot open the event stream")?
        .error_for_status()?;
    let mut events = service_supervisor::event_source::events(events.bytes_stream());

    let model = match &args.model {
        Some(spec) => {
            let (provider, name) = spec
                .split_once('/')
                .ok_or_else(|| anyhow!("--model takes provider/name; got \"{spec}\""))?;
            json!({"provider": provider, "name": name, "config": null})
        }
        None => Value::Null,
    };
    let started = remote
        .call(
            reqwest::Method::POST,
            &format!("/sessions/{id}/run"),
            Some(json!({"input": Task::new(prompt), "turn_context": {"model": model}})),
        )
        .await?;
    let turn_id = started["turn_id"].as_str().unwrap_or_default().to_string();
    let answer = Answer::from_args(args);

    let end = loop {
        let frame = tokio::select! {
            f = events.next() => f,
            _ = tokio::signal::ctrl_c() => {
                eprintln!("interrupting...");
                let _ = remote.call(reqwest::Method::POST, &format!("/sessions/{id}/interrupt"), None).await;
                continue;
            }
        };
        let Some(frame) = frame else {
            return Err(anyhow!(
                "the server closed the event stream before the turn ended"
            ));
        };
        let frame = frame.map_err(|e| anyhow!("broken event stream: {e}"))?;
        let Ok(msg) = serde_json::from_str::<EventMsg>(&frame.data) else {
            continue;
        };
        super::run::show(&msg, args.json, args.verbose);
        if let Some((request_id, decision)) = answer.respond(&msg.payload).await {
            let path = format!("/approvals/{request_id}");
            if let Err(e) = remote
                .call(
                    reqwest::Method::POST,
                    &path,
                    Some(json!({"decision": decision})),
                )
                .await
            {
                eprintln!("warning: could not answer the permission request: {e}");
            }
        }
        if msg.payload.ends_turn() && msg.payload.turn_id() == Some(turn_id.as_str()) {
            break msg.payload;
        }
    };
    match end {
        EventPayload::TurnCompleted { final_message, .. } => {
            if !args.json {
                println!("{final_message}");
            }
            Ok(ExitCode::SUCCESS)
        }
        EventPayload::Error { code, message, .. } => {
            eprintln!("error: turn {turn_id} failed ({code}): {message}");
            Ok(if code == "interrupted" {
                ExitCode::from(130)
            } else {
                ExitCode::FAILURE
            })
        }
        _ => Ok(ExitCode::FAILURE),
    }
}
