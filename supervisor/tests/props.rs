//! Property tests of every parser that takes outside input: manifests, agent.yaml, scripts, bundle references and
//! HTTP request bodies. No input makes them panic, hang, or answer an HTTP request with a 500.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use service_supervisor::bundle::{AgentSpec, BundleRef, Manifest};

/// Text that is often almost-valid JSON5/YAML: fragments of real documents mixed with noise.
fn document() -> impl Strategy<Value = String> {
    let pieces = prop::sample::select(vec![
        "{",
        "}",
        "[",
        "]",
        ":",
        ",",
        "\"",
        "'",
        "manifest_version",
        "\"service.bundle/v1\"",
        "id",
        "\"x\"",
        "version",
        "\"1.0.0\"",
        "tools",
        "[\"Bash\"]",
        "sandbox",
        "mode",
        "\"read_only\"",
        "network",
        "[\"*\"]",
        "model",
        "provider",
        "scripted",
        "name",
        "- ",
        "\n",
        "  ",
        "#",
        "//",
        "/*",
        "*/",
        "null",
        "true",
        "1e999",
        "\\u0000",
        "\u{feff}",
        "permissions",
        "rules",
        "match",
        "action",
        "ask",
    ]);
    (prop::collection::vec(pieces, 0..40), ".{0,20}").prop_map(|(p, noise)| p.concat() + &noise)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn manifests_never_panic(text in document()) {
        let _ = Manifest::parse(&text);
    }

    #[test]
    fn agent_files_never_panic(text in document()) {
        let _ = AgentSpec::parse(&text);
    }

    #[test]
    fn arbitrary_manifest_text_never_panics(text in ".*") {
        let _ = Manifest::parse(&text);
        let _ = AgentSpec::parse(&text);
    }

    #[test]
    fn references_never_panic_and_installed_names_are_safe(reference in ".{0,80}") {
        if let Ok(BundleRef::Installed { namespace, name, .. }) = BundleRef::parse(&reference) {
            for part in [namespace, name] {
                prop_assert!(!part.contains('/') && !part.contains('\0') && part != "." && part != "..");
                prop_assert!(!part.is_empty() && part.len() <= 64);
            }
        }
    }
}

mod http {
    use super::*;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use service_supervisor::server::{router, state::Shared, AppState};
    use tower::ServiceExt;

    fn app() -> (tempfile::TempDir, axum::Router) {
        let home = tempfile::TempDir::new().unwrap();
        let rt = service_supervisor::ServiceRuntime::new(
            service_supervisor::ServiceHome::new(home.path()),
            service_supervisor::RuntimeOptions::new(env!("CARGO_BIN_EXE_service-rs").into()),
        );
        let state = AppState::new(Shared {
            rt,
            token: None,
            shutdown: Default::default(),
            hosts: std::sync::Arc::new(service_supervisor::server::guard::AllowedHosts::new(
                "127.0.0.1:8472".parse().unwrap(),
                &[],
            )),
            policy: Default::default(),
            streams: Default::default(),
            rates: Default::default(),
            cluster: None,
            forwarder: Default::default(),
            public_url: "http://127.0.0.1:8472".into(),
            advertised: false,
        });
        (home, router(state))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn no_request_body_gets_a_500(
            body in prop::collection::vec(any::<u8>(), 0..300),
            path in prop::sample::select(vec![
                "/sessions", "/sessions/x/run-sync", "/sessions/x/run", "/sessions/x/commands",
                "/approvals/x", "/sessions/00000000-0000-4000-8000-000000000000/run-sync",
            ]),
        ) {
            let (_home, app) = app();
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let resp = rt.block_on(async {
                let req = Request::post(path).header("host", "127.0.0.1:8472").header("content-type", "application/json").body(Body::from(body)).unwrap();
                app.oneshot(req).await.unwrap()
            });
            prop_assert!(resp.status() != StatusCode::INTERNAL_SERVER_ERROR);
            prop_assert!(resp.status().is_client_error(), "{}", resp.status());
            let bytes = rt.block_on(axum::body::to_bytes(resp.into_body(), 1 << 20)).unwrap();
            let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            prop_assert!(v["error"]["code"].is_string() && v["error"]["message"].is_string());
        }
    }
}
