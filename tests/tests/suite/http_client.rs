//! A test client of the HTTP API: requests with the server's token, and a session's event stream read with a
//! stock SSE parser (eventsource-stream).

use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};

use super::support::Server;

pub(super) fn task(prompt: &str) -> Value {
    json!({"prompt": prompt, "submission_id": uuid(), "completed": false})
}

fn uuid() -> String {
    // A v4-shaped id without pulling a UUID crate into the tests.
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let h = format!("{:032x}", n ^ (std::process::id() as u128) << 64);
    format!(
        "{}-{}-4{}-8{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

/// A client of one server, with the token it sends (none for a server without one). Clients made with
/// [`Api::beside`] share the server, which stops when the last of them is dropped.
pub(super) struct Api {
    pub(super) server: std::sync::Arc<Server>,
    pub(super) client: reqwest::Client,
    pub(super) token: Option<String>,
}

impl Api {
    pub(super) fn new(server: Server) -> Api {
        Api {
            client: reqwest::Client::new(),
            token: server.token.clone(),
            server: std::sync::Arc::new(server),
        }
    }

    /// A client of `server` that sends `token`.
    pub(super) fn with_token(server: Server, token: &str) -> Api {
        Api {
            client: reqwest::Client::new(),
            token: Some(token.to_string()),
            server: std::sync::Arc::new(server),
        }
    }

    /// The server, once no other client shares it.
    pub(super) fn into_server(self) -> Server {
        std::sync::Arc::try_unwrap(self.server)
            .ok()
            .expect("a server another client shares")
    }

    /// Another client of the same server, sending `token`.
    pub(super) fn beside(&self, token: &str) -> Api {
        Api {
            client: reqwest::Client::new(),
            token: Some(token.to_string()),
            server: self.server.clone(),
        }
    }

    /// The server's URL for `path`.
    pub(super) fn url(&self, path: &str) -> String {
        self.server.url(path)
    }

    /// The server under the client.
    pub(super) fn server(&mut self) -> &mut Server {
        std::sync::Arc::get_mut(&mut self.server)
            .expect("a server another client shares cannot be changed")
    }

    pub(super) fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let r = self.client.request(method, self.server.url(path));
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut r = self.req(method, path);
        if let Some(b) = body {
            r = r.json(&b);
        }
        let resp = r.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    pub(super) async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    pub(super) async fn put(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::PUT, path, Some(body)).await
    }

    pub(super) async fn patch(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::PATCH, path, Some(body)).await
    }

    pub(super) async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, None).await
    }

    /// Runs a turn of `prompt` in `session` to its end with `run-sync`; its final message.
    pub(super) async fn answer(&self, session: &str, prompt: &str) -> String {
        let (status, body) = self
            .post(
                &format!("/sessions/{session}/run-sync"),
                json!({"input": task(prompt)}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body["final_message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    pub(super) async fn session(&self, bundle: &str) -> String {
        let (status, body) = self.post("/sessions", json!({"bundle_ref": bundle})).await;
        assert_eq!(status, 201, "{body}");
        body["id"].as_str().unwrap().to_string()
    }

    /// An SSE subscription to a session's events (after `after`, or live).
    pub(super) async fn events(&self, id: &str, last_event_id: Option<&str>) -> Sse {
        let mut r = self.req(reqwest::Method::GET, &format!("/sessions/{id}/events"));
        if let Some(last) = last_event_id {
            r = r.header("Last-Event-ID", last);
        }
        let resp = r.send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        assert!(resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream"));
        Sse(Box::pin(eventsource_stream::Eventsource::eventsource(
            resp.bytes_stream(),
        )))
    }
}

pub(super) type SseStream = std::pin::Pin<
    Box<
        dyn futures::Stream<
                Item = Result<
                    eventsource_stream::Event,
                    eventsource_stream::EventStreamError<reqwest::Error>,
                >,
            > + Send,
    >,
>;
/// A session's event stream.
pub(super) struct Sse(pub(super) SseStream);

impl Sse {
    /// The next event: (SSE id, parsed EventMsg).
    pub(super) async fn next(&mut self) -> (String, Value) {
        let ev = tokio::time::timeout(Duration::from_secs(20), self.0.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        (ev.id.clone(), serde_json::from_str(&ev.data).unwrap())
    }

    /// Events until (and with) the first of `kind`.
    pub(super) async fn until(&mut self, kind: &str) -> Vec<(String, Value)> {
        let mut out = Vec::new();
        loop {
            let e = self.next().await;
            let done = e.1["payload"]["type"] == kind;
            out.push(e);
            if done {
                return out;
            }
        }
    }
}
