//! Provider keys: the supervisor sends a key only to the provider's own endpoint or one the operator configured,
//! never to a URL a bundle names, and no key reaches the worker, the sandbox or the IPC traffic.

use pretty_assertions::assert_eq;
use serde_json::json;

use super::provider_server::{ProviderServer, Reply};
use super::providers::{bundle, local, openai_text, openai_tool_call};
use super::support::Env;

#[test]
fn a_missing_key_names_the_variable_to_set() {
    let env = Env::new();
    bundle(&env, "nokey", "anthropic", "claude-test", json!(null));
    let err = env
        .run(&["run", "./nokey", "--prompt", "go"])
        .failed()
        .to_string();
    assert!(
        err.contains(
            "(provider_auth): no API key for the anthropic provider: set ANTHROPIC_API_KEY"
        ),
        "{err}"
    );
    bundle(&env, "nokey2", "openai", "gpt", json!(null));
    let err = env
        .run(&["run", "./nokey2", "--prompt", "go"])
        .failed()
        .to_string();
    assert!(err.contains("set OPENAI_API_KEY"), "{err}");
}

#[test]
fn the_key_reaches_neither_the_worker_environment_nor_the_ipc_traffic() {
    let env = Env::new();
    let snoop = "env; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done";
    let server = ProviderServer::start(vec![openai_tool_call(snoop), openai_text("ok")]);
    bundle(&env, "snoop", "openai", "gpt-test", local(&server));
    let trace = env.path("ipc-trace.jsonl");
    let run = env
        .command(&["run", "./snoop", "--prompt", "go"])
        .env("OPENAI_API_KEY", "sk-SECRET-789")
        .env("OPENAI_BASE_URL", &server.base)
        .env("SERVICE_IPC_TRACE", &trace)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let reqs = server.recorded();
    assert_eq!(
        reqs[0].header("authorization"),
        Some("Bearer sk-SECRET-789"),
        "the supervisor used the key"
    );
    let tool_output = reqs[1].body["messages"][3]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(tool_output.contains("PATH="), "{tool_output}");
    assert!(!tool_output.contains("SECRET"), "{tool_output}");
    let traffic = std::fs::read_to_string(&trace).unwrap();
    assert!(
        traffic.contains("model_request") && traffic.contains("model_chunk"),
        "trace is empty?"
    );
    assert!(!traffic.contains("SECRET"));
}

#[test]
fn a_base_url_named_by_a_bundle_gets_no_key_and_the_error_says_how_to_configure_it() {
    let env = Env::new();
    let server = ProviderServer::start(vec![openai_text("keyless ok")]);
    bundle(&env, "harvest", "openai", "gpt-test", local(&server));
    let run = env
        .command(&["run", "./harvest", "--prompt", "go"])
        .env("OPENAI_API_KEY", "sk-HARVEST-ME")
        .env_remove("OPENAI_BASE_URL")
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let reqs = server.recorded();
    assert_eq!(
        reqs[0].header("authorization"),
        None,
        "the key went to a bundle's URL"
    );

    // A server that wants a key says so, and the error names the two ways to configure one.
    let refusing = ProviderServer::start(vec![Reply::status(
        401,
        r#"{"error": {"message": "missing key"}}"#,
        None,
    )]);
    bundle(&env, "harvest2", "openai", "gpt-test", local(&refusing));
    let run = env
        .command(&["run", "./harvest2", "--prompt", "go"])
        .env("OPENAI_API_KEY", "sk-HARVEST-ME")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains("it was sent no key")
            && err.contains("OPENAI_BASE_URL")
            && err.contains("config.toml"),
        "{err}"
    );
}

#[test]
fn an_endpoint_in_config_toml_gets_the_key_from_its_own_variable() {
    let env = Env::new();
    let server = ProviderServer::start(vec![openai_text("configured ok")]);
    bundle(&env, "conf", "openai", "gpt-test", local(&server));
    std::fs::write(
        env.home.path().join("config.toml"),
        format!(
            "[providers.lab]\ntype = \"openai\"\nbase_url = \"{}\"\napi_key_env = \"LAB_KEY\"\n",
            server.base
        ),
    )
    .unwrap();
    let run = env
        .command(&["run", "./conf", "--prompt", "go"])
        .env("LAB_KEY", "sk-lab-1")
        .env("OPENAI_API_KEY", "sk-not-this-one")
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(
        server.recorded()[0].header("authorization"),
        Some("Bearer sk-lab-1")
    );
}
