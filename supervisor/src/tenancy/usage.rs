//! The usage ledger: what each tenant spent, by UTC day, model and bundle, and the report `GET /usage` and
//! `service-rs usage` make of it.
//!
//! The runtime counts each model call's tokens as the call ends (the daily token quota reads them) and each turn's
//! tool calls, wall time and sandbox CPU time as the turn ends. Rows are kept at the finest grain, one per tenant,
//! day, model and bundle; a report sums them into the groups asked for and prices each row by its model before
//! summing, so a cost is exact whatever the grouping.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use service_ipc::{TurnActivity, Usage};

/// What was spent, summed over model calls and turns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Spent {
    /// Prompt tokens.
    #[serde(default)]
    pub input_tokens: u64,
    /// Completion tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Prompt tokens served from the provider's cache (part of `input_tokens`).
    #[serde(default)]
    pub cached_tokens: u64,
    /// Completion tokens spent reasoning (part of `output_tokens`).
    #[serde(default)]
    pub reasoning_tokens: u64,
    /// Model calls.
    #[serde(default)]
    pub model_calls: u64,
    /// Turns that ended, however they ended.
    #[serde(default)]
    pub turns: u64,
    /// Tool calls the turns started.
    #[serde(default)]
    pub tool_calls: u64,
    /// Milliseconds the turns ran, start to end.
    #[serde(default)]
    pub wall_ms: u64,
    /// CPU milliseconds the sessions' sandboxes spent during the turns (0 where no cgroup could be made).
    #[serde(default)]
    pub sandbox_cpu_ms: u64,
}

impl Spent {
    /// Adds one model call's usage.
    pub fn count(&mut self, call: &Usage) {
        self.input_tokens += call.input_tokens.unwrap_or(0);
        self.output_tokens += call.output_tokens.unwrap_or(0);
        self.cached_tokens += call.cached_tokens.unwrap_or(0);
        self.reasoning_tokens += call.reasoning_tokens.unwrap_or(0);
        self.model_calls += 1;
    }

    /// Adds one ended turn: its tool calls and times (its tokens were counted call by call).
    pub fn count_turn(&mut self, turn: &TurnActivity) {
        self.turns += 1;
        self.tool_calls += turn.tool_calls;
        self.wall_ms += turn.wall_ms;
        self.sandbox_cpu_ms += turn.sandbox_cpu_ms.unwrap_or(0);
    }

    /// Adds another sum.
    pub fn add(&mut self, other: &Spent) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cached_tokens += other.cached_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
        self.model_calls += other.model_calls;
        self.turns += other.turns;
        self.tool_calls += other.tool_calls;
        self.wall_ms += other.wall_ms;
        self.sandbox_cpu_ms += other.sandbox_cpu_ms;
    }

    /// Tokens in and out.
    pub fn tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }
}

/// How the ledger, the reports and the metrics name a model: `provider/name`.
pub fn model_name(model: &service_ipc::ModelRef) -> String {
    format!("{}/{}", model.provider, model.name)
}

/// Where a row of the ledger belongs: a tenant's day with one model and one bundle.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LedgerKey {
    /// The tenant.
    pub tenant: String,
    /// UTC day, `YYYY-MM-DD`.
    pub day: String,
    /// `provider/name` of the model.
    pub model: String,
    /// The bundle's reference (`namespace/id:version`).
    pub bundle: String,
}

/// One row of the ledger, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRow {
    /// Where it belongs.
    #[serde(flatten)]
    pub key: LedgerKey,
    /// What was spent there.
    #[serde(flatten)]
    pub spent: Spent,
}

/// What rows of a report are grouped by; the tenant always is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum GroupBy {
    /// One row per tenant.
    Tenant,
    /// Per UTC day.
    Day,
    /// Per model.
    Model,
    /// Per bundle.
    Bundle,
}

impl GroupBy {
    /// Parses `tenant`, `day`, `model`, `bundle`, or several of them comma-separated.
    pub fn parse_list(text: &str) -> Result<Vec<GroupBy>, String> {
        let mut out = Vec::new();
        for part in text.split(',') {
            out.push(match part.trim() {
                "tenant" => GroupBy::Tenant,
                "day" => GroupBy::Day,
                "model" => GroupBy::Model,
                "bundle" => GroupBy::Bundle,
                other => {
                    return Err(format!(
                        "group_by: \"{other}\" is not one of tenant, day, model, bundle (comma-separated for several)"
                    ))
                }
            });
        }
        Ok(out)
    }
}

/// A model's price in US dollars per million tokens (`[prices."provider/name"]` in config.toml).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Per million prompt tokens.
    pub input: f64,
    /// Per million completion tokens (reasoning included).
    pub output: f64,
    /// Per million prompt tokens served from the provider's cache; the input price when unset.
    #[serde(default)]
    pub cached_input: Option<f64>,
}

impl Price {
    /// What `spent`'s tokens cost.
    pub fn cost(&self, spent: &Spent) -> f64 {
        let cached = spent.cached_tokens.min(spent.input_tokens);
        let fresh = spent.input_tokens - cached;
        (fresh as f64 * self.input
            + cached as f64 * self.cached_input.unwrap_or(self.input)
            + spent.output_tokens as f64 * self.output)
            / 1_000_000.0
    }
}

/// One row of a usage report: a group and its sums.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UsageTotal {
    /// The tenant.
    pub tenant: String,
    /// The UTC day, when grouped by day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub day: Option<String>,
    /// `provider/name`, when grouped by model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The bundle's reference, when grouped by bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle: Option<String>,
    /// The sums.
    #[serde(flatten)]
    pub spent: Spent,
    /// US dollars, when config.toml prices every model of the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// `GET /usage`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UsageReport {
    /// One row per group, in order of tenant, then day, model and bundle.
    pub rows: Vec<UsageTotal>,
}

/// Sums `rows` into groups of `by` (the tenant always), pricing each row by its model.
pub fn report(
    rows: Vec<UsageRow>,
    by: &[GroupBy],
    prices: &BTreeMap<String, Price>,
) -> UsageReport {
    let has = |g| by.contains(&g);
    let mut groups: BTreeMap<LedgerKey, (Spent, Option<f64>)> = BTreeMap::new();
    for row in rows {
        let cost = prices.get(&row.key.model).map(|p| p.cost(&row.spent));
        let LedgerKey {
            tenant,
            day,
            model,
            bundle,
        } = row.key;
        let keep = |on: bool, v: String| if on { v } else { String::new() };
        let group = LedgerKey {
            tenant,
            day: keep(has(GroupBy::Day), day),
            model: keep(has(GroupBy::Model), model),
            bundle: keep(has(GroupBy::Bundle), bundle),
        };
        // Priced only while every row of the group is.
        let (sum, total) = groups.entry(group).or_insert((Spent::default(), Some(0.0)));
        sum.add(&row.spent);
        *total = total.zip(cost).map(|(t, c)| t + c);
    }
    let opt = |on: bool, v: String| on.then_some(v);
    UsageReport {
        rows: groups
            .into_iter()
            .map(|(k, (spent, cost))| UsageTotal {
                tenant: k.tenant,
                day: opt(has(GroupBy::Day), k.day),
                model: opt(has(GroupBy::Model), k.model),
                bundle: opt(has(GroupBy::Bundle), k.bundle),
                spent,
                cost_usd: cost,
            })
            .collect(),
    }
}

/// What a report covers: its days and its grouping, checked, as `GET /usage` and `service-rs usage` take them.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// The first day, `YYYY-MM-DD`.
    pub since: String,
    /// The last day, `YYYY-MM-DD`; None: to the last.
    pub until: Option<String>,
    /// What rows are grouped by, besides the tenant.
    pub by: Vec<GroupBy>,
}

impl Window {
    /// Checks `since` (a day or `Nd`; default 30 days), `until` (a day) and `group_by` (default `tenant`).
    pub fn parse(
        since: Option<&str>,
        until: Option<&str>,
        group_by: Option<&str>,
    ) -> Result<Window, String> {
        let since = since_day(since.unwrap_or("30d"))?;
        if let Some(until) = until.filter(|u| !is_day(u)) {
            return Err(format!(
                "until: \"{until}\" is not a day written YYYY-MM-DD"
            ));
        }
        Ok(Window {
            since,
            until: until.map(str::to_string),
            by: GroupBy::parse_list(group_by.unwrap_or("tenant"))?,
        })
    }
}

/// The report of the ledger in `dir` over `window`, of `tenant` (None: every tenant), priced with `prices`.
pub async fn read_report(
    dir: &dyn super::Directory,
    window: &Window,
    tenant: Option<&str>,
    prices: &BTreeMap<String, Price>,
) -> super::Result<UsageReport> {
    let mut rows = dir
        .usage_between(&window.since, window.until.as_deref())
        .await?;
    if let Some(tenant) = tenant {
        rows.retain(|r| r.key.tenant == tenant);
    }
    Ok(report(rows, &window.by, prices))
}

/// The first day a `since` names: a day (`YYYY-MM-DD`) as it is, or `Nd`, N days before today (UTC).
pub fn since_day(spec: &str) -> Result<String, String> {
    if is_day(spec) {
        return Ok(spec.to_string());
    }
    let days = spec
        .strip_suffix('d')
        .and_then(|n| n.parse::<u32>().ok())
        .filter(|n| *n <= 99_999)
        .ok_or_else(|| {
            format!("since: \"{spec}\" is neither a day written YYYY-MM-DD nor a number of days such as 7d")
        })?;
    Ok((chrono::Utc::now() - chrono::Days::new(u64::from(days)))
        .format("%Y-%m-%d")
        .to_string())
}

/// Whether `text` is shaped `YYYY-MM-DD` (days compare as text; the shape is all that matters).
pub fn is_day(text: &str) -> bool {
    text.len() == 10
        && text.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b'-',
            _ => b.is_ascii_digit(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(tenant: &str, day: &str, model: &str, input: u64, output: u64) -> UsageRow {
        UsageRow {
            key: LedgerKey {
                tenant: tenant.into(),
                day: day.into(),
                model: model.into(),
                bundle: "local/hello:0.1.0".into(),
            },
            spent: Spent {
                input_tokens: input,
                output_tokens: output,
                turns: 1,
                ..Spent::default()
            },
        }
    }

    #[test]
    fn a_report_sums_each_group_and_prices_it_by_model() {
        let rows = vec![
            row("acme", "2026-01-01", "a/cheap", 1_000_000, 0),
            row("acme", "2026-01-02", "a/dear", 0, 1_000_000),
            row("beta", "2026-01-01", "a/cheap", 10, 10),
        ];
        let prices = BTreeMap::from([
            (
                "a/cheap".to_string(),
                Price {
                    input: 1.0,
                    output: 2.0,
                    cached_input: None,
                },
            ),
            (
                "a/dear".to_string(),
                Price {
                    input: 10.0,
                    output: 20.0,
                    cached_input: None,
                },
            ),
        ]);
        let by_tenant = report(rows.clone(), &[GroupBy::Tenant], &prices).rows;
        assert_eq!(by_tenant.len(), 2);
        assert_eq!(by_tenant[0].spent.turns, 2);
        assert_eq!(by_tenant[0].cost_usd, Some(21.0));
        assert_eq!(by_tenant[0].day, None);
        let by_day = report(rows.clone(), &[GroupBy::Day], &prices).rows;
        assert_eq!(by_day.len(), 3);
        assert_eq!(by_day[1].day.as_deref(), Some("2026-01-02"));
        // A model without a price leaves its groups without a cost.
        let partial = BTreeMap::from([("a/cheap".to_string(), prices["a/cheap"])]);
        let rows = report(rows, &[GroupBy::Tenant], &partial).rows;
        assert_eq!(rows[0].cost_usd, None);
        assert!(rows[1].cost_usd.is_some());
    }

    #[test]
    fn cached_prompt_tokens_take_their_own_price() {
        let spent = Spent {
            input_tokens: 1_000_000,
            cached_tokens: 400_000,
            ..Spent::default()
        };
        let price = Price {
            input: 1.0,
            output: 0.0,
            cached_input: Some(0.5),
        };
        assert!((price.cost(&spent) - 0.8).abs() < 1e-9);
    }

    #[test]
    fn group_by_and_since_refuse_what_they_do_not_know() {
        assert_eq!(
            GroupBy::parse_list("day,model").unwrap(),
            vec![GroupBy::Day, GroupBy::Model]
        );
        assert!(GroupBy::parse_list("week").unwrap_err().contains("week"));
        assert!(Window::parse(None, Some("today"), None)
            .unwrap_err()
            .contains("until"));
        assert_eq!(
            Window::parse(None, None, None).unwrap().by,
            vec![GroupBy::Tenant]
        );
        assert_eq!(since_day("2026-01-01").unwrap(), "2026-01-01");
        assert!(is_day(&since_day("7d").unwrap()));
        for bad in ["7", "d", "7w", "2026-1-1", "-1d"] {
            assert!(since_day(bad).is_err(), "{bad}");
        }
    }
}
