//! Every installed bundle as an A2A 1.0 agent on `serve`, so that orchestrators and other agents' servers can call
//! it: an agent card at `GET /a2a/{bundle}/.well-known/agent-card.json`, and JSON-RPC at `POST /a2a/{bundle}`.
//!
//! - [`wire`]: the protocol's JSON forms;
//! - [`tasks`]: a task is a turn, and its state follows from the turn's events;
//! - [`send`]: `SendMessage` and `SendStreamingMessage`, new tasks and answers to a task's question;
//! - [`follow`]: `GetTask`, `ListTasks`, `CancelTask` and `SubscribeToTask`;
//! - this module: the routes, the card, the token and version checks, JSON-RPC's envelope and error codes.
//!
//! A conversation (`contextId`) is a session. A client's own context id names the session it made (in the store, so
//! any node of a cluster finds it); a session made elsewhere is known by its session id. Permission questions are
//! the client's to answer (`input-required`), or the operator's through `POST /approvals/{id}`.

mod follow;
mod send;
mod tasks;
pub mod wire;

use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::bundle::{Bundle, BundleRef, Origin};
use crate::server::api::{ApiError, OwnedBy};
pub use crate::server::state::A2aPolicy;
use crate::server::state::AppState;

/// What a bundle reference keeps unescaped as one URL path segment.
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The protocol version this server speaks.
pub const VERSION: &str = "1.0";

/// The store name of a context id a client chose.
fn context_name(tenant: &str, context_id: &str) -> String {
    // Each tenant's context ids are its own: two tenants may both say "ctx-1".
    if tenant == crate::tenancy::DEFAULT_TENANT {
        format!("a2a-context:{context_id}")
    } else {
        format!("a2a-context:{tenant}:{context_id}")
    }
}

/// The store name of a task, which finds its session.
fn task_name(task_id: &str) -> String {
    format!("a2a-task:{task_id}")
}

/// A JSON-RPC error with A2A's codes.
#[derive(Debug)]
pub struct A2aError {
    code: i64,
    message: String,
    /// The runtime's snake_case error code, when the runtime refused.
    runtime_code: Option<String>,
    /// The node that owns the session, for the forwarding layer.
    owner: Option<String>,
}

impl A2aError {
    fn new(code: i64, message: impl Into<String>) -> A2aError {
        A2aError {
            code,
            message: message.into(),
            runtime_code: None,
            owner: None,
        }
    }

    /// `TaskNotFoundError`.
    fn task_not_found(id: &str) -> A2aError {
        A2aError::new(
            -32001,
            format!("no task \"{id}\" on this agent; ListTasks lists them"),
        )
    }

    /// `TaskNotCancelableError`.
    fn not_cancelable(message: impl Into<String>) -> A2aError {
        A2aError::new(-32002, message)
    }

    /// `UnsupportedOperationError`.
    fn unsupported(message: impl Into<String>) -> A2aError {
        A2aError::new(-32004, message)
    }

    /// `ContentTypeNotSupportedError`.
    fn content_type(message: impl Into<String>) -> A2aError {
        A2aError::new(-32005, message)
    }

    /// JSON-RPC's invalid params.
    fn invalid_params(message: impl Into<String>) -> A2aError {
        A2aError::new(-32602, message)
    }

    /// The JSON-RPC error object. As A2A 1.0 has it, `data` is a list of typed details whose first is a
    /// `google.rpc.ErrorInfo` naming the A2A reason; its metadata carries the runtime's code.
    fn object(&self) -> Value {
        let mut e = json!({"code": self.code, "message": self.message});
        let reason = match self.code {
            -32001 => "TASK_NOT_FOUND",
            -32002 => "TASK_NOT_CANCELABLE",
            -32003 => "PUSH_NOTIFICATION_NOT_SUPPORTED",
            -32004 => "UNSUPPORTED_OPERATION",
            -32005 => "CONTENT_TYPE_NOT_SUPPORTED",
            -32007 => "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            -32009 => "VERSION_NOT_SUPPORTED",
            -32600 => "INVALID_REQUEST",
            -32601 => "METHOD_NOT_FOUND",
            -32602 => "INVALID_PARAMS",
            -32603 => "INTERNAL_ERROR",
            _ => return e,
        };
        let metadata = match &self.runtime_code {
            Some(code) => json!({"code": code}),
            None => json!({}),
        };
        e["data"] = json!([{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason,
                            "domain": "a2a-protocol.org", "metadata": metadata}]);
        e
    }
}

impl From<ApiError> for A2aError {
    fn from(e: ApiError) -> A2aError {
        let server_side = e.status().is_server_error();
        let owner = e.owner().map(str::to_string);
        let body = e.into_body();
        A2aError {
            code: if server_side { -32603 } else { -32602 },
            message: body.message,
            runtime_code: Some(body.code),
            owner,
        }
    }
}

impl From<crate::runtime::RuntimeError> for A2aError {
    fn from(e: crate::runtime::RuntimeError) -> A2aError {
        ApiError::from(e).into()
    }
}

/// A JSON-RPC answer to request `id` (HTTP 200 either way, as A2A's clients expect).
fn answer(id: &Value, result: Result<Value, A2aError>) -> Response {
    match result {
        Ok(result) => Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response(),
        Err(e) => {
            let mut response =
                Json(json!({"jsonrpc": "2.0", "id": id, "error": e.object()})).into_response();
            if let Some(url) = e.owner {
                response.extensions_mut().insert(OwnedBy(url));
            }
            response
        }
    }
}

/// A JSON-RPC error for a body that is no JSON-RPC request, with HTTP status 400.
fn malformed(id: &Value, e: A2aError) -> Response {
    let mut response = answer(id, Err(e));
    *response.status_mut() = axum::http::StatusCode::BAD_REQUEST;
    response
}

/// The A2A routes: cards for anyone, JSON-RPC behind the server's token.
pub fn routes(state: &AppState) -> Router<AppState> {
    if state.policy.a2a.off {
        return Router::new();
    }
    let rpc = Router::new()
        .route("/a2a/{bundle}", post(rpc))
        // A task's session may run on another node of a cluster: the request goes there.
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::server::forward::forward,
        ))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            require_token,
        ));
    Router::new()
        .route("/a2a/{bundle}/.well-known/agent-card.json", get(card))
        .route("/.well-known/agent-card.json", get(default_card))
        .merge(rpc)
}

async fn require_token(State(st): State<AppState>, req: Request, next: Next) -> Response {
    use crate::server::tenants::Authenticated;
    match crate::server::tenants::authenticate(&st, req.headers()).await {
        Authenticated::Caller(caller) => {
            return crate::server::tenants::run_as(&st, caller, req, next).await
        }
        Authenticated::Unchecked(why) => {
            let body =
                json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32603, "message": why}});
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, "2")],
                Json(body),
            )
                .into_response();
        }
        Authenticated::Refused => {}
    }
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600,
        "message": "send the server's token as a bearer token (Authorization: Bearer <token>), as the agent card's \
                    security scheme says"}});
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        Json(body),
    )
        .into_response()
}

/// Installed bundle `reference`, under the server's sandbox policy: only installed bundles are agents.
async fn installed(st: &AppState, reference: &str) -> Result<Bundle, ApiError> {
    let not_found = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "bundle_not_found",
            format!("no installed bundle \"{reference}\"; GET /bundles lists them"),
        )
    };
    if matches!(BundleRef::parse(reference), Ok(BundleRef::Path(_)) | Err(_)) {
        return Err(not_found());
    }
    use crate::facade::bundles::{resolve_allowed, Unserved};
    match resolve_allowed(st, reference).await {
        Ok(b) if matches!(b.origin, Origin::Installed { .. }) => Ok(b),
        Ok(_) | Err(Unserved::NotFound) => Err(not_found()),
        Err(Unserved::Refused(e)) => Err(e),
    }
}

/// The id of the installed bundle `reference` names by name (`hello`, `local/hello:1.0.0`), seen from its install
/// directory alone; None for another form (a registry reference), which [`installed`] resolves.
fn installed_id(st: &AppState, reference: &str) -> Option<String> {
    let Ok(BundleRef::Installed {
        namespace,
        name,
        version,
    }) = BundleRef::parse(reference)
    else {
        return None;
    };
    let dir = st.rt.home().installs().join(namespace).join(&name);
    let present = match version {
        Some(v) => dir.join(v.to_string()).is_dir(),
        None => dir.is_dir(),
    };
    present.then_some(name)
}

/// The agent card of `bundle`, whose JSON-RPC endpoint is `endpoint`.
fn card_of(bundle: &Bundle, endpoint: &str) -> Value {
    let skills: Vec<Value> = bundle
        .skills
        .iter()
        .map(|s| {
            json!({"id": s.name, "name": s.name, "description": s.description,
                   "tags": [bundle.manifest.id]})
        })
        .collect();
    let m = &bundle.manifest;
    json!({
        "name": m.name.clone().unwrap_or_else(|| m.id.clone()),
        "description": m.description.clone().unwrap_or_else(|| format!("The {} agent bundle, run by service-rs.", m.id)),
        "version": m.version,
        "supportedInterfaces": [{"url": endpoint, "protocolBinding": "JSONRPC", "protocolVersion": VERSION}],
        "capabilities": {"streaming": true, "pushNotifications": false},
        "securitySchemes": {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer",
            "description": "the server's token (serve prints it; $SERVICE_HOME/serve.token)"}}},
        "securityRequirements": [{"schemes": {"bearer": {"list": []}}}],
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": skills,
    })
}

/// A bundle's A2A agent card; no token needed.
#[utoipa::path(get, path = "/a2a/{bundle}/.well-known/agent-card.json", tag = "a2a",
    params(("bundle" = String, Path, description = "An installed bundle's reference, one path segment")),
    responses((status = 200, description = "The A2A 1.0 agent card", body = Object),
        (status = 404, description = "No installed bundle of that name", body = crate::server::api::ErrorEnvelope)))]
pub async fn card(
    State(st): State<AppState>,
    Path(reference): Path<String>,
    headers: HeaderMap,
) -> Response {
    match installed(&st, &reference).await {
        Ok(b) => {
            // Clients post to the URL as written, so it is absolute; the reference is one path segment.
            let segment = percent_encoding::utf8_percent_encode(&reference, SEGMENT);
            let endpoint = format!("{}/a2a/{segment}", base_url(&st, &headers));
            Json(card_of(&b, &endpoint)).into_response()
        }
        Err(e) => e.into_response(),
    }
}

/// The base URL a card gives: `--advertise-url` when set, else the name the client reached this server by (the
/// `Host` the request guard accepted: the bound address or an `--allowed-host`).
fn base_url(st: &AppState, headers: &HeaderMap) -> String {
    if st.advertised {
        return st.public_url.to_string();
    }
    match headers.get(header::HOST).and_then(|h| h.to_str().ok()) {
        Some(host) => format!("http://{host}"),
        None => st.public_url.to_string(),
    }
}

async fn default_card(State(st): State<AppState>, headers: HeaderMap) -> Response {
    match st.policy.a2a.default_bundle.clone() {
        Some(reference) => card(State(st), Path(reference), headers).await,
        None => ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "this server has no default agent (serve --a2a-default <bundle>); each bundle's card is at \
             /a2a/<bundle>/.well-known/agent-card.json",
        )
        .into_response(),
    }
}

/// A JSON-RPC 2.0 request.
#[derive(Deserialize, utoipa::ToSchema)]
pub struct Envelope {
    /// Always "2.0".
    #[schema(pattern = r"^2\.0$", example = "2.0")]
    jsonrpc: String,
    /// The request's id, echoed in its response as it came.
    #[serde(default)]
    #[schema(value_type = Option<RpcId>)]
    id: Value,
    /// The method: `SendMessage`, `SendStreamingMessage`, `GetTask`, `ListTasks`, `CancelTask`, `SubscribeToTask`.
    method: String,
    /// The method's parameters.
    #[serde(default)]
    params: Option<serde_json::Map<String, Value>>,
}

/// A JSON-RPC request id: a string or a number.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
#[allow(dead_code)] // Describes `Envelope::id` in the OpenAPI document, which keeps the id as it came.
pub enum RpcId {
    /// A string id.
    Text(String),
    /// A numeric id.
    Number(f64),
}

/// One request, as the method handlers see it.
pub(super) struct Call {
    st: AppState,
    /// The route's bundle reference.
    reference: String,
    /// The id of the installed bundle it names: sessions of other bundles are not this agent's.
    bundle_id: String,
    /// The JSON-RPC id, repeated in every answer.
    id: Value,
    /// Who asks: only its tenant's tasks are there for it.
    caller: crate::tenancy::Caller,
}

impl Call {
    /// The request's parameters as `T`.
    fn params<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, A2aError> {
        serde_json::from_value(params)
            .map_err(|e| A2aError::invalid_params(format!("the params do not fit the method: {e}")))
    }
}

/// Whether the client's `A2A-Version` is one this server speaks (a missing header is taken as this version).
fn version_ok(headers: &HeaderMap) -> Result<(), A2aError> {
    let Some(given) = headers.get("a2a-version") else {
        return Ok(());
    };
    let given = given.to_str().unwrap_or_default().trim();
    let major = |v: &str| v.split('.').next().map(str::to_string);
    if major(given) == major(VERSION) && !given.is_empty() {
        return Ok(());
    }
    Err(A2aError::new(
        -32009,
        format!("A2A-Version {given} is not spoken here; this server speaks A2A {VERSION}"),
    ))
}

/// A2A 1.0 JSON-RPC for a bundle: SendMessage, SendStreamingMessage, GetTask, ListTasks, CancelTask,
/// SubscribeToTask.
#[utoipa::path(post, path = "/a2a/{bundle}", tag = "a2a",
    params(("bundle" = String, Path, description = "An installed bundle's reference, one path segment"),
        ("A2A-Version" = Option<String>, Header, description = "1.0 (taken as 1.0 when missing)")),
    request_body(content = Envelope, description = "A JSON-RPC 2.0 request"),
    responses((status = 200, description = "A JSON-RPC response (errors too, with A2A's codes), or for the streaming methods server-sent JSON-RPC responses", body = Object),
        (status = 400, description = "The body is not a JSON-RPC 2.0 request: a JSON-RPC error (-32700 or -32600)", body = Object),
        (status = 401, description = "Missing or wrong token, as a JSON-RPC error", body = Object)))]
pub async fn rpc(
    State(st): State<AppState>,
    axum::Extension(caller): axum::Extension<crate::tenancy::Caller>,
    Path(reference): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    // A body that is no JSON-RPC request is the client's error at the HTTP level too, as the schema says.
    let request: Envelope = match serde_json::from_slice::<Value>(&body) {
        Err(e) => {
            let e = A2aError::new(-32700, format!("the body is not JSON: {e}"));
            return malformed(&Value::Null, e);
        }
        Ok(v) => {
            let id = v.get("id").cloned().unwrap_or(Value::Null);
            match serde_json::from_value::<Envelope>(v) {
                Ok(r)
                    if r.jsonrpc == "2.0"
                        && (r.id.is_null() || r.id.is_string() || r.id.is_number()) =>
                {
                    r
                }
                Ok(_) => {
                    let e = A2aError::new(
                        -32600,
                        "a JSON-RPC 2.0 request has \"jsonrpc\": \"2.0\", and an id that is a string or a number",
                    );
                    return malformed(&id, e);
                }
                Err(e) => {
                    let e = A2aError::new(-32600, format!("not a JSON-RPC 2.0 request: {e}"));
                    return malformed(&id, e);
                }
            }
        }
    };
    let (id, method) = (request.id.clone(), request.method.clone());
    if let Err(e) = version_ok(&headers) {
        return answer(&id, Err(e));
    }
    // With bundles granted per tenant, an agent not granted to the caller is not there.
    if st.policy.tenant_bundles && !caller.admin {
        let visible = match installed(&st, &reference).await {
            Ok(b) => {
                crate::server::tenants::check_bundle(&st, &caller, &reference, &b.reference()).await
            }
            Err(e) => Err(e),
        };
        if let Err(e) = visible {
            return answer(&id, Err(e.into()));
        }
    }
    // Following a task or continuing a conversation needs only the bundle's id; a new session resolves it whole.
    let bundle_id = match installed_id(&st, &reference) {
        Some(bundle_id) => bundle_id,
        None => match installed(&st, &reference).await {
            Ok(b) => b.manifest.id,
            Err(e) => return answer(&id, Err(e.into())),
        },
    };
    let call = Call {
        st,
        reference,
        bundle_id,
        id,
        caller,
    };
    let params = request.params.map(Value::Object).unwrap_or(Value::Null);
    match method.as_str() {
        "SendStreamingMessage" => match Call::params(params) {
            Ok(p) => send::stream(call, p).await,
            Err(e) => answer(&call.id, Err(e)),
        },
        "SubscribeToTask" => match Call::params(params) {
            Ok(p) => follow::subscribe(call, p).await,
            Err(e) => answer(&call.id, Err(e)),
        },
        _ => answer(&call.id, unary(&call, &method, params).await),
    }
}

/// A method whose answer is one JSON-RPC response.
async fn unary(call: &Call, method: &str, params: Value) -> Result<Value, A2aError> {
    match method {
        "SendMessage" => send::send(call, Call::params(params)?).await,
        "GetTask" => follow::get(call, Call::params(params)?).await,
        "ListTasks" => follow::list(call, Call::params(params)?).await,
        "CancelTask" => follow::cancel(call, Call::params(params)?).await,
        "CreateTaskPushNotificationConfig"
        | "GetTaskPushNotificationConfig"
        | "ListTaskPushNotificationConfigs"
        | "DeleteTaskPushNotificationConfig" => Err(A2aError::new(
            -32003,
            "push notifications are not sent by this server (it would call URLs clients name); follow a task with \
             SendStreamingMessage or SubscribeToTask",
        )),
        "GetExtendedAgentCard" => Err(A2aError::new(
            -32007,
            "this agent has no extended card; its card is at .well-known/agent-card.json",
        )),
        other => Err(A2aError::new(
            -32601,
            format!(
                "no method \"{other}\"; this agent answers SendMessage, SendStreamingMessage, GetTask, ListTasks, \
                 CancelTask and SubscribeToTask"
            ),
        )),
    }
}
