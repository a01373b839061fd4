//! A remote agent's card, fetched as the worker starts and checked before its tool is offered, and the JSON-RPC
//! requests the tool makes to it.

use std::time::Duration;

use serde_json::{json, Value};
use service_ipc::{A2aAgent, ToolSpec};

/// Largest card read.
const MAX_CARD: usize = 64 * 1024;
/// Largest JSON answer read (a task with its history).
const MAX_ANSWER: usize = 4 * 1024 * 1024;
/// Time the card may take to arrive.
const CARD_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest tool description kept from a card.
const MAX_DESCRIPTION: usize = 2048;

/// An agent whose card checked out.
pub(super) struct Ready {
    /// The tool the model sees.
    pub(super) spec: ToolSpec,
    /// The JSON-RPC endpoint, from the card.
    endpoint: String,
    token: Option<String>,
    /// Time one call may take.
    pub(super) timeout: Duration,
    /// Whether the agent streams (`capabilities.streaming`).
    pub(super) streaming: bool,
    client: reqwest::Client,
}

/// Fetches and checks the card of `config`.
pub(super) async fn fetch(config: &A2aAgent) -> Result<Ready, String> {
    if crate::egress::proxy_url().is_none() {
        return Err(
            "the sandbox has no way out (service.bundle.json5 sandbox.permissions.network lists no host); list the \
             agent's host:port there"
                .into(),
        );
    }
    let client = crate::egress::http_client()?;
    let url = format!("{}/.well-known/agent-card.json", config.url);
    let response = tokio::time::timeout(CARD_TIMEOUT, client.get(&url).send())
        .await
        .map_err(|_| format!("{url} did not answer within {} s", CARD_TIMEOUT.as_secs()))?
        .map_err(|e| format!("{url}: {e}"))?;
    if !response.status().is_success() {
        return Err(refusal(&url, response).await);
    }
    let body = read_capped(response, MAX_CARD).await?;
    let card: Value =
        serde_json::from_slice(&body).map_err(|e| format!("{url} is not an agent card: {e}"))?;
    let endpoint = endpoint(&card, &config.url)?;
    Ok(Ready {
        spec: spec(&config.name, &card),
        endpoint,
        token: config.token.clone(),
        timeout: Duration::from_millis(config.tool_timeout_ms.max(1)),
        streaming: card["capabilities"]["streaming"].as_bool() == Some(true),
        client,
    })
}

/// The card's JSON-RPC interface URL. It must be on the origin agent.yaml names: a card is the remote's word, and
/// the manifest author vouched for that origin only, not for wherever a card points (the caller's own server, a
/// service beside the agent).
fn endpoint(card: &Value, configured: &str) -> Result<String, String> {
    let interfaces = card["supportedInterfaces"].as_array();
    let jsonrpc = interfaces
        .into_iter()
        .flatten()
        .find(|i| {
            i["protocolBinding"].as_str() == Some("JSONRPC")
                && i["protocolVersion"]
                    .as_str()
                    .is_none_or(|v| v.split('.').next() == Some("1"))
        })
        .and_then(|i| i["url"].as_str())
        .ok_or("the card offers no JSON-RPC interface of A2A 1.x")?;
    let origin = |u: &str| {
        reqwest::Url::parse(u).ok().map(|u| {
            (
                u.scheme().to_string(),
                u.host_str().map(str::to_lowercase),
                u.port_or_known_default(),
            )
        })
    };
    match (origin(jsonrpc), origin(configured)) {
        (Some(a), Some(b)) if a == b => Ok(jsonrpc.to_string()),
        _ => Err(format!(
            "the card's interface {jsonrpc} is not on the origin of {configured}, which agent.yaml names; it is \
             not called"
        )),
    }
}

/// The tool of agent `name`, described by its card.
fn spec(name: &str, card: &Value) -> ToolSpec {
    let mut description = format!(
        "Ask the remote agent \"{}\": {}",
        card["name"].as_str().unwrap_or(name),
        card["description"].as_str().unwrap_or_default()
    );
    let skills: Vec<String> = card["skills"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            format!(
                "- {}: {}",
                s["name"].as_str().unwrap_or_default(),
                s["description"].as_str().unwrap_or_default()
            )
        })
        .collect();
    if !skills.is_empty() {
        description.push_str("\nIts skills:\n");
        description.push_str(&skills.join("\n"));
    }
    ToolSpec {
        name: format!("{}{name}", super::PREFIX),
        description: description.chars().take(MAX_DESCRIPTION).collect(),
        parameters: json!({
            "type": "object",
            "properties": {"message": {"type": "string",
                "description": "The whole request; the agent does not see this conversation."}},
            "required": ["message"],
        }),
    }
}

impl Ready {
    /// Posts JSON-RPC `method` with `params` to the agent.
    pub(super) async fn post(
        &self,
        method: &str,
        params: Value,
    ) -> Result<reqwest::Response, String> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let mut request = self
            .client
            .post(&self.endpoint)
            .header("A2A-Version", "1.0")
            .json(&body);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request
            .send()
            .await
            .map_err(|e| format!("{}: {e}", self.endpoint))?;
        if !response.status().is_success() {
            return Err(refusal(&self.endpoint, response).await);
        }
        Ok(response)
    }

    /// Calls `method` and returns its result.
    pub(super) async fn rpc(&self, method: &str, params: Value) -> Result<Value, String> {
        read_rpc(self.post(method, params).await?).await
    }
}

/// What a refused request says: the status and the start of the body (the egress proxy's reason, an agent's own).
async fn refusal(url: &str, response: reqwest::Response) -> String {
    use futures::StreamExt;
    let status = response.status();
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(Ok(chunk)) = chunks.next().await {
        body.extend_from_slice(&chunk);
        if body.len() >= 4096 {
            break;
        }
    }
    let text = String::from_utf8_lossy(&body);
    let text: String = text.trim().chars().take(512).collect();
    format!("{url} answered {status}: {text}")
}

/// The result of a JSON-RPC response body.
pub(super) async fn read_rpc(response: reqwest::Response) -> Result<Value, String> {
    let body = read_capped(response, MAX_ANSWER).await?;
    rpc_result(&String::from_utf8_lossy(&body))
}

/// The result of one JSON-RPC response, or its error as text.
pub(super) fn rpc_result(text: &str) -> Result<Value, String> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| format!("the agent's answer is not JSON-RPC: {e}"))?;
    if let Some(e) = v.get("error") {
        return Err(format!(
            "the agent answered error {}: {}",
            e["code"],
            e["message"].as_str().unwrap_or_default()
        ));
    }
    v.get("result")
        .cloned()
        .ok_or_else(|| "the agent's answer has neither result nor error".to_string())
}

/// The body of `response`, refused past `cap` bytes.
async fn read_capped(response: reqwest::Response, cap: usize) -> Result<Vec<u8>, String> {
    use futures::StreamExt;
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| e.to_string())?;
        if body.len() + chunk.len() > cap {
            return Err(format!("the agent's answer is over {cap} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_card_pointing_its_interface_elsewhere_is_refused() {
        let card = |url: &str| json!({"supportedInterfaces": [{"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]});
        let base = "http://peer.test:9000/a2a/x";
        assert_eq!(
            endpoint(&card("http://peer.test:9000/a2a/x"), base).unwrap(),
            "http://peer.test:9000/a2a/x"
        );
        assert!(endpoint(&card("http://127.0.0.1:8931/a2a/x"), base).is_err());
        assert!(endpoint(&card("https://peer.test:9000/a2a/x"), base).is_err());
        assert!(endpoint(&json!({"supportedInterfaces": []}), base).is_err());
    }
}
