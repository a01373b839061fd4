//! The usage ledger of tenants over `serve`: every turn's tokens, calls, tool calls and times, as the journal has
//! them, summed per tenant, day, model and bundle, read over `GET /usage` (a tenant its own) and `service-rs usage`.

use std::path::Path;

use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use tempfile::TempDir;

use super::http_client::{task, Api};
use super::tenants::{bundle, code, store_command, tenants};

/// Runs `service-rs usage <args>` on the store of `home`, as [`tokens`] does; its stdout.
fn usage_cli(home: &Path, args: &[&str]) -> String {
    let url = super::store_backend::postgres().then(|| super::store_backend::url_for(home));
    store_command(home, url.as_deref(), "usage", args)
}

/// The sums of the journaled `turn_completed` events of session `id`: tokens and calls from their `usage`, tool
/// calls and times from their `activity`.
async fn journaled(api: &Api, id: &str) -> [u64; 6] {
    let (_, journal) = api.get(&format!("/sessions/{id}/journal")).await;
    let mut sums = [0; 6];
    for e in journal.as_array().unwrap() {
        let p = &e["payload"]["payload"];
        if e["payload"]["type"] == "turn_completed" {
            let n = |v: &Value| v.as_u64().unwrap_or(0);
            let row = [
                n(&p["usage"]["input_tokens"]),
                n(&p["usage"]["output_tokens"]),
                n(&p["usage"]["model_calls"]),
                n(&p["activity"]["tool_calls"]),
                n(&p["activity"]["wall_ms"]),
                n(&p["activity"]["sandbox_cpu_ms"]),
            ];
            for (sum, v) in sums.iter_mut().zip(row) {
                *sum += v;
            }
        }
    }
    sums
}

/// The same sums of a usage report's row.
fn ledger_row(row: &Value) -> [u64; 6] {
    [
        "input_tokens",
        "output_tokens",
        "model_calls",
        "tool_calls",
        "wall_ms",
        "sandbox_cpu_ms",
    ]
    .map(|k| row[k].as_u64().unwrap_or_else(|| panic!("{k} in {row}")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_usage_ledger_matches_the_journaled_usage_of_every_turn() {
    let home = TempDir::new().unwrap();
    // Prices per million tokens, so that the cost is exact to compute here.
    std::fs::write(
        home.path().join("config.toml"),
        "[prices.\"scripted/fixture\"]\ninput = 1.0\noutput = 2.0\n",
    )
    .unwrap();
    let t = tenants(home.path(), &[]);
    let bundle = bundle();
    let path = bundle.path().to_str().unwrap();
    let mut sums = [0; 6];
    let mut tool_session = String::new();
    for prompt in ["hi", "tool", "hi"] {
        let id = t.acme.session(path).await;
        let (status, result) = t
            .acme
            .post(
                &format!("/sessions/{id}/run-sync"),
                json!({"input": task(prompt)}),
            )
            .await;
        assert_eq!(status, 200, "{result}");
        for (sum, v) in sums.iter_mut().zip(journaled(&t.acme, &id).await) {
            *sum += v;
        }
        if prompt == "tool" {
            tool_session = id;
        }
    }
    assert_eq!(sums[2], 4, "three turns, one with a tool: four model calls");
    assert_eq!(sums[3], 1, "one tool call");
    assert!(sums[4] > 0, "the turns took time: {sums:?}");
    let (status, report) = t.acme.get("/usage").await;
    assert_eq!(status, 200, "{report}");
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["tenant"], "acme");
    assert_eq!(ledger_row(&rows[0]), sums, "{report}");
    assert_eq!(rows[0]["turns"], 3);
    let cost = rows[0]["cost_usd"].as_f64().unwrap();
    let priced = (sums[0] as f64 + 2.0 * sums[1] as f64) / 1e6;
    assert!((cost - priced).abs() < 1e-12, "{cost} against {priced}");
    // The session's record keeps its own totals.
    let (_, record) = t.acme.get(&format!("/sessions/{tool_session}")).await;
    assert_eq!(record["activity"]["tool_calls"], 1, "{record}");
    // Grouped by day, model and bundle, the one row names them.
    let (_, grouped) = t
        .acme
        .get("/usage?group_by=day,model,bundle&since=1d")
        .await;
    let row = &grouped["rows"][0];
    assert_eq!(
        (row["model"].as_str(), row["day"].as_str().map(str::len)),
        (Some("scripted/fixture"), Some(10)),
        "{grouped}"
    );
    assert!(row["bundle"].as_str().is_some(), "{grouped}");
    assert_eq!(ledger_row(row), sums);
    // Days before any turn have none; what the query cannot mean is refused.
    let (_, none) = t.acme.get("/usage?since=2000-01-01&until=2000-12-31").await;
    assert_eq!(none, json!({"rows": []}));
    assert_eq!(code(&t.acme.get("/usage?group_by=week").await).0, 400);
    assert_eq!(code(&t.acme.get("/usage?since=yesterday").await).0, 400);
    // Beta spent nothing, and may not read acme's.
    assert_eq!(t.beta.get("/usage").await.1, json!({"rows": []}));
    assert_eq!(
        code(&t.beta.get("/usage?tenant=acme").await),
        (403, "admin_only".into())
    );
    // The admin reads every tenant's, and the CLI prints the same ledger.
    let (_, all) = t.admin.get("/usage").await;
    assert_eq!(all["rows"].as_array().unwrap().len(), 1);
    let printed = usage_cli(home.path(), &["--json", "--group-by", "model"]);
    let printed: Value = serde_json::from_str(&printed).unwrap();
    assert_eq!(ledger_row(&printed["rows"][0]), sums, "{printed}");
    assert_eq!(printed["rows"][0]["cost_usd"].as_f64(), Some(cost));
    let table = usage_cli(home.path(), &["--tenant", "acme"]);
    assert!(
        table.starts_with("TENANT") && table.contains("COST_USD"),
        "{table}"
    );
}
