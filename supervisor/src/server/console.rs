//! The web console: static HTML, CSS and JavaScript modules compiled into the binary and served at `/` and under
//! `/ui/`. The page holds no data and needs no token; everything it shows comes from the API, with the token the
//! user typed in, as a bearer header (the event stream too, read with `fetch`, so no token is ever in a URL).
//!
//! Every response carries a Content-Security-Policy that allows nothing but this origin's own scripts, styles and
//! API, no inline code, no frames: a transcript the model wrote cannot run script in the operator's browser.

use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::state::AppState;

/// The policy of every console response.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; \
                   frame-ancestors 'none'";

/// The files: path under `/ui/`, content type, contents.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "app.css",
        "text/css; charset=utf-8",
        include_str!("../../console/app.css"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/app.js"),
    ),
    (
        "api.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/api.js"),
    ),
    (
        "chat.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/chat.js"),
    ),
    (
        "markdown.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/markdown.js"),
    ),
    (
        "inspector.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/inspector.js"),
    ),
    (
        "icon.svg",
        "image/svg+xml",
        include_str!("../../console/icon.svg"),
    ),
];

const INDEX: &str = include_str!("../../console/index.html");

fn page(content_type: &'static str, body: &'static str) -> Response {
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(CSP),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            ),
            (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
            (
                HeaderName::from_static("cross-origin-opener-policy"),
                HeaderValue::from_static("same-origin"),
            ),
            // Assets change with the binary; revalidating is cheap on loopback and never shows a stale console.
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        body,
    )
        .into_response()
}

async fn index() -> Response {
    page("text/html; charset=utf-8", INDEX)
}

async fn asset(axum::extract::Path(name): axum::extract::Path<String>) -> Response {
    match ASSETS.iter().find(|(path, _, _)| *path == name) {
        Some((_, content_type, body)) => page(content_type, body),
        None => super::api::ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("the console has no file {name}"),
        )
        .into_response(),
    }
}

/// `GET /`, `GET /ui/sessions/{id}` (deep links: the same page, which opens the session) and `GET /ui/{file}`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(index))
        .route("/ui", get(index))
        .route("/ui/sessions/{id}", get(index))
        .route("/ui/{file}", get(asset))
}

/// Bytes of the page and every file it loads, uncompressed: what a first visit transfers at most.
pub fn first_load_bytes() -> usize {
    INDEX.len() + ASSETS.iter().map(|(_, _, body)| body.len()).sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_whole_console_is_under_100_kb() {
        assert!(
            first_load_bytes() < 100 * 1024,
            "{} bytes",
            first_load_bytes()
        );
    }

    #[test]
    fn the_page_loads_only_files_the_server_has_and_no_inline_code() {
        for (attr, ext) in [("src=\"/ui/", ".js"), ("href=\"/ui/", ".css")] {
            for part in INDEX.split(attr).skip(1) {
                let name = &part[..part.find('"').unwrap_or(0)];
                if name.ends_with(ext) {
                    assert!(ASSETS.iter().any(|(p, _, _)| *p == name), "{name}");
                }
            }
        }
        assert!(!INDEX.contains("<script>") && !INDEX.contains("style="));
    }
}
