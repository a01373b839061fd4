//! A model-provider server on 127.0.0.1 that speaks the OpenAI Chat Completions and Anthropic Messages streaming
//! wire formats byte for byte, with chunked transfer encoding like the real services. Each test scripts the
//! replies, including how the bytes are split, where the stream pauses, and where it is cut.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

/// One step of a reply body.
#[derive(Clone)]
pub enum Step {
    /// Write these bytes as one HTTP chunk.
    Bytes(Vec<u8>),
    /// Wait.
    Pause(Duration),
    /// Close the connection here, without ending the chunked body.
    Cut,
}

/// A scripted HTTP response.
#[derive(Clone)]
pub struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    steps: Vec<Step>,
}

impl Reply {
    /// An SSE reply of Anthropic events: `event: <type>` plus `data: <json>`.
    pub fn anthropic(events: &[Value]) -> Reply {
        let body: String = events
            .iter()
            .map(|e| {
                format!(
                    "event: {}\ndata: {}\n\n",
                    e["type"].as_str().unwrap_or("message"),
                    e
                )
            })
            .collect();
        Reply::sse(body)
    }

    /// An SSE reply of OpenAI chunks, ended by `data: [DONE]`.
    pub fn openai(chunks: &[Value]) -> Reply {
        let mut body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
        body.push_str("data: [DONE]\n\n");
        Reply::sse(body)
    }

    /// A raw SSE body, sent as one chunk.
    pub fn sse(body: String) -> Reply {
        Reply {
            status: 200,
            headers: vec![
                ("content-type".into(), "text/event-stream".into()),
                ("cache-control".into(), "no-cache".into()),
            ],
            steps: vec![Step::Bytes(body.into_bytes())],
        }
    }

    /// A JSON error reply.
    pub fn status(status: u16, body: &str, retry_after: Option<&str>) -> Reply {
        let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
        if let Some(r) = retry_after {
            headers.push(("retry-after".into(), r.into()));
        }
        Reply {
            status,
            headers,
            steps: vec![Step::Bytes(body.as_bytes().to_vec())],
        }
    }

    fn body(&self) -> Vec<u8> {
        self.steps
            .iter()
            .flat_map(|s| {
                if let Step::Bytes(b) = s {
                    b.clone()
                } else {
                    Vec::new()
                }
            })
            .collect()
    }

    /// Re-sends the body in pieces of `n` bytes (splitting events and even UTF-8 sequences across chunks).
    pub fn split_every(mut self, n: usize) -> Reply {
        self.steps = self
            .body()
            .chunks(n)
            .map(|c| Step::Bytes(c.to_vec()))
            .collect();
        self
    }

    /// Pauses after the first occurrence of `marker` in the body.
    pub fn pause_after(mut self, marker: &str, pause: Duration) -> Reply {
        let body = self.body();
        let text = String::from_utf8_lossy(&body);
        let at = text
            .find(marker)
            .map(|i| i + marker.len())
            .unwrap_or(body.len());
        let at = text[at..].find("\n\n").map(|i| at + i + 2).unwrap_or(at);
        self.steps = vec![
            Step::Bytes(body[..at].to_vec()),
            Step::Pause(pause),
            Step::Bytes(body[at..].to_vec()),
        ];
        self
    }

    /// Replaces the body with these steps (e.g. a pause that never ends the response).
    pub fn with_steps(mut self, steps: Vec<Step>) -> Reply {
        self.steps = steps;
        self
    }

    /// Cuts the connection after `n` bytes of the body.
    pub fn cut_after(mut self, n: usize) -> Reply {
        let body = self.body();
        self.steps = vec![Step::Bytes(body[..n.min(body.len())].to_vec()), Step::Cut];
        self
    }
}

/// A request the server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The running server; it stops accepting when dropped (the listener thread ends with the process).
pub struct ProviderServer {
    pub base: String,
    pub requests: Arc<Mutex<Vec<Recorded>>>,
}

/// Checks a request body before the next scripted reply; `Some(reply)` answers instead, as a server that
/// rejects the request would.
pub type Check = fn(&Value) -> Option<Reply>;

/// llama-cpp-python's check: an assistant message whose `content` is null or missing fails its chat template,
/// and it answers HTTP 500.
pub fn llama_cpp_check(body: &Value) -> Option<Reply> {
    let messages = body["messages"].as_array()?;
    let bad = messages
        .iter()
        .any(|m| m["role"] == "assistant" && !m["content"].is_string());
    bad.then(|| {
        Reply::status(
            500,
            r#"{"error": {"message": "1 validation error for ChatCompletionRequestAssistantMessage content: Input should be a valid string", "type": "internal_server_error"}}"#,
            None,
        )
    })
}

impl ProviderServer {
    /// Serves `replies` in order, one per request; a request beyond them gets a 500.
    pub fn start(replies: Vec<Reply>) -> ProviderServer {
        ProviderServer::start_checked(replies, |_| None)
    }

    /// Like `start`, but a request that `check` rejects gets its answer and keeps the scripted reply for later.
    pub fn start_checked(replies: Vec<Reply>, check: Check) -> ProviderServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let queue = Arc::new(Mutex::new(std::collections::VecDeque::from(replies)));
        let recorded = requests.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let (recorded, queue) = (recorded.clone(), queue.clone());
                std::thread::spawn(move || {
                    let _ = serve_one(conn, &recorded, &queue, check);
                });
            }
        });
        ProviderServer { base, requests }
    }

    pub fn recorded(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

fn serve_one(
    mut conn: std::net::TcpStream,
    recorded: &Mutex<Vec<Recorded>>,
    queue: &Mutex<std::collections::VecDeque<Reply>>,
    check: Check,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let mut headers = Vec::new();
    let mut length = 0;
    loop {
        let mut h = String::new();
        reader.read_line(&mut h)?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)?;
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let rejected = check(&body);
    recorded.lock().unwrap().push(Recorded {
        path,
        headers,
        body,
    });
    let scripted = || queue.lock().unwrap().pop_front();
    let reply = rejected.or_else(scripted).unwrap_or_else(|| {
        Reply::status(
            500,
            "{\"error\":{\"message\":\"no more scripted replies\"}}",
            None,
        )
    });
    let mut head = format!(
        "HTTP/1.1 {} X\r\ntransfer-encoding: chunked\r\nconnection: close\r\n",
        reply.status
    );
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    conn.write_all(head.as_bytes())?;
    for step in &reply.steps {
        match step {
            Step::Bytes(b) if !b.is_empty() => {
                conn.write_all(format!("{:x}\r\n", b.len()).as_bytes())?;
                conn.write_all(b)?;
                conn.write_all(b"\r\n")?;
                conn.flush()?;
                std::thread::sleep(Duration::from_millis(1));
            }
            Step::Bytes(_) => {}
            Step::Pause(d) => std::thread::sleep(*d),
            Step::Cut => return conn.shutdown(std::net::Shutdown::Both),
        }
    }
    conn.write_all(b"0\r\n\r\n")?;
    conn.flush()
}
