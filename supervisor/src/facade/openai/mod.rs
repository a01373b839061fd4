//! Bundles served as OpenAI-compatible models on `serve`: `GET /v1/models`, `POST /v1/chat/completions` and
//! `POST /v1/responses`, so
//! that chat UIs, IDE plugins and evaluation harnesses that speak OpenAI's API reach a bundle.
//!
//! - [`chat`]: Chat Completions, streamed and not;
//! - [`responses`]: the Responses API, streamed and not, with `previous_response_id`;
//! - [`turn`]: starting a turn in a new or continued session, its permission requests, its end;
//! - this module: the routes, their token check and OpenAI's error shape, the model list and how a model id names a
//!   bundle.
//!
//! A client never steers the agent past its bundle: its `system` messages become user-level context after the
//! bundle's own system prompt, its `tools` are not called, and permission requests are answered by the server's
//! `--openai-approvals` setting, not by the client.

pub mod chat;
pub mod responses;
mod turn;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use crate::bundle::{self, Bundle};
use crate::server::api::ApiError;
use crate::server::state::AppState;
pub use crate::server::state::OpenAiApprovals;
use crate::tenancy::Caller;

/// An error in OpenAI's shape: `{"error": {"message", "type", "code", "param"}}`.
#[derive(Debug)]
pub struct OpenAiError {
    status: StatusCode,
    message: String,
    kind: &'static str,
    code: String,
    /// The node that owns the session, for the forwarding layer (see `server::forward`).
    owner: Option<String>,
}

impl OpenAiError {
    fn new(status: StatusCode, code: &str, message: impl Into<String>) -> OpenAiError {
        let kind = match status {
            StatusCode::UNAUTHORIZED => "authentication_error",
            StatusCode::NOT_FOUND | StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => {
                "invalid_request_error"
            }
            _ => "server_error",
        };
        OpenAiError {
            status,
            message: message.into(),
            kind,
            code: code.to_string(),
            owner: None,
        }
    }

    fn invalid(message: impl Into<String>) -> OpenAiError {
        OpenAiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// The JSON body, also sent as a stream's last event.
    fn body(&self) -> serde_json::Value {
        json!({"error": {"message": self.message, "type": self.kind, "code": self.code, "param": null}})
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body())).into_response();
        if let Some(url) = self.owner {
            response
                .extensions_mut()
                .insert(crate::server::api::OwnedBy(url));
        }
        response
    }
}

impl From<ApiError> for OpenAiError {
    fn from(e: ApiError) -> OpenAiError {
        let status = e.status();
        let owner = e.owner().map(str::to_string);
        let body = e.into_body();
        // OpenAI's API answers a malformed request with 400 where ours says 422.
        let status = if status == StatusCode::UNPROCESSABLE_ENTITY {
            StatusCode::BAD_REQUEST
        } else {
            status
        };
        OpenAiError {
            owner,
            ..OpenAiError::new(status, &body.code, body.message)
        }
    }
}

impl From<crate::runtime::RuntimeError> for OpenAiError {
    fn from(e: crate::runtime::RuntimeError) -> OpenAiError {
        ApiError::from(e).into()
    }
}

/// The `/v1` routes, behind the server's token (sent as OpenAI clients send an API key).
pub fn routes(state: &AppState) -> Router<AppState> {
    // A continued session may run on another node of a cluster: the request goes there.
    let turns = Router::new()
        .route("/v1/chat/completions", post(chat::completions))
        .route("/v1/responses", post(responses::create))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::server::forward::forward,
        ));
    Router::new()
        .route("/v1/models", get(models))
        .merge(turns)
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            require_token,
        ))
}

async fn require_token(State(st): State<AppState>, req: Request, next: Next) -> Response {
    use crate::server::tenants::Authenticated;
    match crate::server::tenants::authenticate(&st, req.headers()).await {
        Authenticated::Caller(caller) => {
            return crate::server::tenants::run_as(&st, caller, req, next).await
        }
        // As OpenAI's API says it is overloaded: its SDKs retry a 503.
        Authenticated::Unchecked(why) => {
            return OpenAiError::new(StatusCode::SERVICE_UNAVAILABLE, "store_unavailable", why)
                .into_response()
        }
        Authenticated::Refused => {}
    }
    OpenAiError::new(
        StatusCode::UNAUTHORIZED,
        "invalid_api_key",
        "send the server's token as the API key (Authorization: Bearer <token>); `serve` prints it at start-up and \
         stores it in $SERVICE_HOME/serve.token",
    )
    .into_response()
}

/// Each installed bundle's model id (the short reference of a local bundle, `hello`, the full one otherwise) and its
/// exact reference.
fn model_ids(home: &crate::ServiceHome) -> Vec<(String, String)> {
    let installed = bundle::store::list_installed(home).unwrap_or_default();
    let mut ids: Vec<(String, String)> = installed
        .iter()
        .map(|b| {
            let short = installed.iter().filter(|o| o.id == b.id).count() == 1;
            let id = if b.namespace == "local" && short {
                b.id.clone()
            } else if b.namespace == bundle::builtin::NAMESPACE {
                format!("{}/{}", b.namespace, b.id)
            } else {
                b.reference()
            };
            (id, b.reference())
        })
        .collect();
    ids.dedup_by(|a, b| a.0 == b.0);
    ids
}

/// Every installed bundle as an OpenAI model.
#[utoipa::path(get, path = "/v1/models", tag = "openai",
    responses((status = 200, description = "{object: list, data: [{id, object: model, created, owned_by: service-rs}]}", body = Object),
        (status = 401, description = "Missing or wrong token, in OpenAI's error shape", body = Object)))]
pub async fn models(
    State(st): State<AppState>,
    axum::Extension(caller): axum::Extension<crate::tenancy::Caller>,
) -> Response {
    let mut data = Vec::new();
    for (id, reference) in model_ids(st.rt.home()) {
        match crate::server::tenants::may_use_bundle(&st, &caller, &reference).await {
            Ok(true) => data
                .push(json!({"id": id, "object": "model", "created": 0, "owned_by": "service-rs"})),
            Ok(false) => {}
            Err(e) => return OpenAiError::from(e).into_response(),
        }
    }
    Json(json!({"object": "list", "data": data})).into_response()
}

/// The bundle a request's `model` names, under the server's policy; an unknown one lists the installed ones.
async fn bundle_of(st: &AppState, caller: &Caller, model: &str) -> Result<Bundle, OpenAiError> {
    crate::server::policy::bundle_ref(&st.policy, model)?;
    if crate::bundle::reference::BundleRef::parse(model).is_err() {
        // Not even a reference: no model of this server has that name.
        return Err(OpenAiError::new(
            StatusCode::NOT_FOUND,
            "model_not_found",
            format!("no model \"{model}\"; GET /v1/models lists the models"),
        ));
    }
    // A registry the operator allowed serves its bundles as models too, pulled on first use.
    crate::server::registry_routes::fetch_on_first_use(st, model).await?;
    use crate::facade::bundles::{resolve_allowed, Unserved};
    let not_found = || {
        // With bundles granted per tenant, the list would name other tenants' bundles.
        let known = if st.policy.tenant_bundles {
            "GET /v1/models lists the models this token may use".to_string()
        } else {
            let ids: Vec<String> = model_ids(st.rt.home())
                .into_iter()
                .map(|(id, _)| id)
                .collect();
            format!("the models are the installed bundles: {}", ids.join(", "))
        };
        OpenAiError::new(
            StatusCode::NOT_FOUND,
            "model_not_found",
            format!("no model \"{model}\"; {known}"),
        )
    };
    match resolve_allowed(st, model).await {
        Ok(b) if crate::server::tenants::may_use_bundle(st, caller, &b.reference()).await? => Ok(b),
        Ok(_) | Err(Unserved::NotFound) => Err(not_found()),
        Err(Unserved::Refused(e)) => Err(e.into()),
    }
}
