//! What the OpenAPI document says about every operation, added once instead of on each handler: the bearer
//! security scheme (every path but `/healthz` and the agent cards), and the error responses any request can meet on
//! its way through the middleware and the runtime, all with the `{"error": {...}}` body. The OpenAI-compatible and
//! A2A routes answer in their own protocols' shapes, which their handlers declare.

use utoipa::openapi::link::LinkBuilder;
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{Content, OpenApi, Ref, RefOr, ResponseBuilder};

/// The error statuses of every authenticated operation, and why each can happen.
const ERRORS: &[(&str, &str)] = &[
    ("400", "Malformed JSON or a bad header"),
    ("401", "Missing or wrong bearer token"),
    (
        "403",
        "A Host or Origin this server does not answer, a request the operator's policy refuses, or a registry \
         refusing the credentials",
    ),
    ("404", "Unknown session, bundle, approval request or path"),
    ("405", "Method not allowed on this path"),
    (
        "409",
        "A turn is running, or the request is no longer pending",
    ),
    ("413", "Body over the size limit"),
    ("415", "A body that is not JSON"),
    ("422", "A well-formed request with invalid values"),
    ("429", "Too many event streams from this client"),
    (
        "500",
        "Internal error; the log has the details under the request id",
    ),
    ("503", "No worker or no sandbox available"),
    ("507", "The server's store is full or read-only"),
];

/// A registry reference, `<host[:port]>/<repository>(:<tag>|@sha256:<digest>)`, in the Distribution grammar: a host
/// with a dot or a port, or `localhost`; lower-case path components.
macro_rules! registry_ref {
    () => {
        concat!(
            r"(([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)+|localhost)(:[0-9]{1,5})?",
            r"|[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?:[0-9]{1,5})",
            r"/[a-z0-9]+(([._-]|__)[a-z0-9]+)*(/[a-z0-9]+(([._-]|__)[a-z0-9]+)*)*",
            r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[0-9a-f]{64})?"
        )
    };
}

/// [`registry_ref!`] alone, for `POST /bundles/pull` and `/bundles/push`.
const REGISTRY_REF_PATTERN: &str = concat!("^", registry_ref!(), "$");

/// The grammar of a bundle reference, for every `reference` path parameter and `bundle_ref` field: a directory
/// (`./x`, `~/x`, `/x`, `x/y`), `<name>[@latest|@<version>]`, `<namespace>/<name>:<version>`, or a registry
/// reference. Written once here because utoipa takes only literals.
const BUNDLE_REF_PATTERN: &str = concat!(
    r"^([.~].*|[^/]*/[^:]*",
    r"|[a-z0-9][a-z0-9._-]{0,63}/[a-z0-9][a-z0-9._-]{0,63}:(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})",
    r"|[a-z0-9][a-z0-9._-]{0,63}(@latest|@(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8}))?",
    "|",
    registry_ref!(),
    r")$"
);

/// Errors even the unauthenticated health check can meet.
const HEALTH_ERRORS: &[&str] = &["403", "405", "500"];

/// Adds the security scheme, the security requirement and the error responses.
pub struct Contract;

impl utoipa::Modify for Contract {
    fn modify(&self, openapi: &mut OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The server's token: --token, SERVICE_TOKEN, or the one generated into serve.token",
                    ))
                    .build(),
            ),
        );
        link_sessions(openapi);
        for (path, item) in openapi.paths.paths.iter_mut() {
            // The probes answer without a token; /readyz declares its 503 itself.
            let health = path == "/healthz" || path == "/readyz";
            let ops: [&mut Option<Operation>; 5] = [
                &mut item.get,
                &mut item.post,
                &mut item.delete,
                &mut item.put,
                &mut item.patch,
            ];
            // The protocol routes (OpenAI's, A2A's) declare their errors in their protocol's shape themselves;
            // agent cards need no token.
            if path.starts_with("/v1/") || path.starts_with("/a2a/") {
                let public = path.ends_with("/agent-card.json");
                for op in ops.into_iter().flatten().filter(|_| !public) {
                    op.security = Some(vec![SecurityRequirement::new(
                        "bearer",
                        Vec::<String>::new(),
                    )]);
                }
                continue;
            }
            for op in ops.into_iter().flatten() {
                if !health {
                    op.security = Some(vec![SecurityRequirement::new(
                        "bearer",
                        Vec::<String>::new(),
                    )]);
                }
                for (status, why) in ERRORS {
                    if health && !HEALTH_ERRORS.contains(status) {
                        continue;
                    }
                    op.responses
                        .responses
                        .entry(status.to_string())
                        .or_insert_with(|| {
                            ResponseBuilder::new()
                                .description(*why)
                                .content(
                                    "application/json",
                                    Content::new(Some(Ref::from_schema_name("ErrorEnvelope"))),
                                )
                                .build()
                                .into()
                        });
                }
            }
        }
    }
}

/// Links from the `201` of `POST /sessions` to every operation on `/sessions/{id}...`: a client (or a test
/// generator) learns that the new session's `id` goes there.
fn link_sessions(openapi: &mut OpenApi) {
    let mut targets = Vec::new();
    for (path, item) in &openapi.paths.paths {
        if !path.starts_with("/sessions/{id}") {
            continue;
        }
        for op in [&item.get, &item.post, &item.delete, &item.patch]
            .into_iter()
            .flatten()
        {
            if let Some(id) = &op.operation_id {
                targets.push(id.clone());
            }
        }
    }
    let Some(created) = openapi
        .paths
        .paths
        .get_mut("/sessions")
        .and_then(|item| item.post.as_mut())
        .and_then(|op| op.responses.responses.get_mut("201"))
    else {
        return;
    };
    if let RefOr::T(response) = created {
        for target in targets {
            let link = LinkBuilder::new()
                .operation_id(target.clone())
                .parameter("id", "$response.body#/id")
                .build();
            response.links.insert(target, link.into());
        }
    }
}

/// The OpenAPI document as served. utoipa 5 writes a link's `operationId` as `operation_id`, which OpenAPI tools
/// do not read; it is renamed here.
pub fn document() -> serde_json::Value {
    use utoipa::OpenApi as _;
    let mut doc = serde_json::to_value(super::ApiDoc::openapi()).unwrap_or_default();
    if let Some(paths) = doc.get_mut("paths").and_then(|p| p.as_object_mut()) {
        let links = paths
            .values_mut()
            .filter_map(|item| item.as_object_mut())
            .flat_map(|item| item.values_mut())
            .filter_map(|op| op.get_mut("responses")?.as_object_mut())
            .flat_map(|responses| responses.values_mut())
            .filter_map(|response| response.get_mut("links")?.as_object_mut())
            .flat_map(|links| links.values_mut())
            .filter_map(|link| link.as_object_mut());
        for link in links {
            if let Some(id) = link.remove("operation_id") {
                link.insert("operationId".into(), id);
            }
        }
    }
    set_reference_patterns(&mut doc);
    doc
}

/// Puts [`BUNDLE_REF_PATTERN`] on each bundle reference of the document.
fn set_reference_patterns(doc: &mut serde_json::Value) {
    let pattern = serde_json::Value::from(BUNDLE_REF_PATTERN);
    if let Some(paths) = doc.get_mut("paths").and_then(|p| p.as_object_mut()) {
        let params = paths
            .iter_mut()
            .filter(|(path, _)| path.contains("{reference}"))
            .filter_map(|(_, item)| item.as_object_mut())
            .flat_map(|item| item.values_mut())
            .filter_map(|op| op.get_mut("parameters")?.as_array_mut())
            .flatten()
            .filter(|param| param["name"] == "reference");
        for param in params {
            param["schema"]["pattern"] = pattern.clone();
        }
    }
    let fields = [
        ("CreateSession", "bundle_ref", BUNDLE_REF_PATTERN),
        ("PushRequest", "bundle_ref", BUNDLE_REF_PATTERN),
        ("PushRequest", "target", REGISTRY_REF_PATTERN),
        ("PullRequest", "reference", REGISTRY_REF_PATTERN),
    ];
    for (schema, name, pattern) in fields {
        if let Some(field) = doc
            .pointer_mut(&format!("/components/schemas/{schema}/properties/{name}"))
            .and_then(|f| f.as_object_mut())
        {
            field.insert("pattern".into(), pattern.into());
        }
    }
}
