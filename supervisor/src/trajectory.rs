//! A session's journal as an ATIF trajectory (Agent Trajectory Interchange Format v1.8, as the `atif` package on
//! PyPI defines it), the format eval harnesses such as Harbor read:
//! - each turn's prompt is a `user` step;
//! - each model call is an `agent` step: its text, its reasoning, the tool calls it asked for, and their results as
//!   the step's observation, linked by call id;
//! - a step's metrics are that call's tokens as the supervisor counted them (a turn's `usage_update` events give
//!   the running total after each call, its end the whole), and its cost at the price of config.toml;
//! - a turn that did not complete ends with a `system` step that says why.
//!
//! The final metrics add up the steps, and so match what the provider reported for the session's turns.

use std::collections::BTreeMap;

use serde::Serialize;
use service_ipc::{EventMsg, EventPayload, ToolCallStatus, Usage};

use crate::tenancy::usage::{Price, Spent};

/// The schema version written.
pub const SCHEMA_VERSION: &str = "ATIF-v1.8";

/// The root document.
#[derive(Debug, Serialize)]
pub struct Trajectory {
    schema_version: &'static str,
    session_id: String,
    agent: Agent,
    steps: Vec<Step>,
    #[serde(skip_serializing_if = "Option::is_none")]
    notes: Option<String>,
    final_metrics: FinalMetrics,
    #[serde(skip_serializing_if = "Option::is_none")]
    extra: Option<serde_json::Value>,
}

#[derive(Debug, Serialize)]
struct Agent {
    name: &'static str,
    version: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    model_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    extra: Option<serde_json::Value>,
}

#[derive(Debug, Default, Serialize)]
struct Step {
    step_id: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    timestamp: Option<String>,
    source: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    model_name: Option<String>,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<ToolCall>,
    #[serde(skip_serializing_if = "Option::is_none")]
    observation: Option<Observation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metrics: Option<Metrics>,
    #[serde(skip_serializing_if = "Option::is_none")]
    llm_call_count: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    extra: Option<serde_json::Value>,
}

#[derive(Debug, Serialize)]
struct ToolCall {
    tool_call_id: String,
    function_name: String,
    arguments: serde_json::Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    extra: Option<serde_json::Value>,
}

#[derive(Debug, Default, Serialize)]
struct Observation {
    results: Vec<ObservationResult>,
}

#[derive(Debug, Serialize)]
struct ObservationResult {
    source_call_id: String,
    content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    extra: Option<serde_json::Value>,
}

#[derive(Debug, Default, Clone, Copy, Serialize)]
struct Metrics {
    prompt_tokens: u64,
    completion_tokens: u64,
    cached_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    cost_usd: Option<f64>,
}

#[derive(Debug, Default, Serialize)]
struct FinalMetrics {
    total_prompt_tokens: u64,
    total_completion_tokens: u64,
    total_cached_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    total_cost_usd: Option<f64>,
    total_steps: usize,
}

/// What the trajectory says of the session besides its journal.
pub struct About<'a> {
    /// The session's id.
    pub session_id: &'a str,
    /// The bundle reference it runs.
    pub bundle: &'a str,
    /// Prices by `provider/name`, for each step's cost.
    pub prices: &'a BTreeMap<String, Price>,
}

/// An agent step being read from the journal.
struct Building {
    step: Step,
    /// Whether a tool result came in: the next model output is the next call's.
    observed: bool,
    /// Whether its metrics are known (its `usage_update` came).
    measured: bool,
}

/// Reads the trajectory of a session from its journal, oldest event first.
pub fn from_journal(events: &[EventMsg], about: &About<'_>) -> Trajectory {
    let mut t = Reader {
        about,
        steps: Vec::new(),
        current: None,
        model: None,
        price: None,
        counted: Usage::default(),
        unfinished: 0,
    };
    for e in events {
        t.event(e);
    }
    t.close();
    let model_name = t.first_model();
    let notes = (t.unfinished > 0).then(|| {
        format!(
            "{} turn(s) did not complete (see their system steps): the tokens of a failed or interrupted turn's last \
             model call are not in the steps' metrics",
            t.unfinished
        )
    });
    let steps = t.steps;
    let mut total = FinalMetrics {
        total_steps: steps.len(),
        ..Default::default()
    };
    let mut cost = None::<f64>;
    for m in steps.iter().filter_map(|s| s.metrics) {
        total.total_prompt_tokens += m.prompt_tokens;
        total.total_completion_tokens += m.completion_tokens;
        total.total_cached_tokens += m.cached_tokens;
        if let Some(c) = m.cost_usd {
            cost = Some(cost.unwrap_or(0.0) + c);
        }
    }
    total.total_cost_usd = cost;
    Trajectory {
        schema_version: SCHEMA_VERSION,
        session_id: about.session_id.to_string(),
        agent: Agent {
            name: "service-rs",
            version: env!("CARGO_PKG_VERSION"),
            model_name,
            extra: Some(serde_json::json!({"bundle": about.bundle})),
        },
        steps,
        notes,
        final_metrics: total,
        extra: None,
    }
}

struct Reader<'a> {
    about: &'a About<'a>,
    steps: Vec<Step>,
    current: Option<Building>,
    /// The running turn's model, as `provider/name`.
    model: Option<String>,
    price: Option<Price>,
    /// The running turn's usage already given to its steps.
    counted: Usage,
    /// Turns that ended without completing.
    unfinished: usize,
}

impl Reader<'_> {
    fn event(&mut self, e: &EventMsg) {
        let at = Some(e.created_at.clone());
        match &e.payload {
            EventPayload::TurnStarted {
                prompt, context, ..
            } => {
                self.close();
                let model = format!("{}/{}", context.model.provider, context.model.name);
                self.price = self.about.prices.get(&model).copied();
                self.model = Some(model);
                self.counted = Usage::default();
                self.push(Step {
                    timestamp: at,
                    source: "user",
                    message: prompt.clone(),
                    ..Default::default()
                });
            }
            EventPayload::AgentMessageDelta { delta, .. } => {
                self.agent(at).step.message.push_str(delta);
            }
            EventPayload::ReasoningDelta { delta, .. } => {
                self.agent(at)
                    .step
                    .reasoning_content
                    .get_or_insert_with(String::new)
                    .push_str(delta);
            }
            EventPayload::ToolCallStarted {
                call_id,
                tool,
                arguments,
                parent_exec_id,
                ..
            } => {
                let extra = parent_exec_id
                    .as_ref()
                    .map(|p| serde_json::json!({"parent_exec_id": p}));
                let call = ToolCall {
                    tool_call_id: call_id.clone(),
                    function_name: tool.clone(),
                    arguments: match arguments {
                        serde_json::Value::Object(_) => arguments.clone(),
                        other => serde_json::json!({ "input": other }),
                    },
                    extra,
                };
                // A call a CodeAct program made belongs to the step whose program runs.
                let nested = parent_exec_id.is_some();
                match self.current.as_mut().filter(|_| nested) {
                    Some(b) => b.step.tool_calls.push(call),
                    None => self.agent(at).step.tool_calls.push(call),
                }
            }
            EventPayload::ToolCallFinished {
                call_id,
                status,
                output,
                diff,
                ..
            } => {
                let Some(b) = self.current.as_mut() else {
                    return;
                };
                // Only results of the step's own calls: ATIF links each to a call of its step.
                if !b.step.tool_calls.iter().any(|c| &c.tool_call_id == call_id) {
                    return;
                }
                b.observed = true;
                let mut extra = serde_json::Map::new();
                if *status != ToolCallStatus::Ok {
                    extra.insert(
                        "status".into(),
                        serde_json::to_value(status).unwrap_or_default(),
                    );
                }
                if let Some(diff) = diff {
                    extra.insert("diff".into(), diff.clone().into());
                }
                b.step
                    .observation
                    .get_or_insert_with(Observation::default)
                    .results
                    .push(ObservationResult {
                        source_call_id: call_id.clone(),
                        content: output.clone(),
                        extra: (!extra.is_empty()).then_some(serde_json::Value::Object(extra)),
                    });
            }
            EventPayload::UsageUpdate { usage, .. } => {
                let metrics = self.metrics_to(usage);
                if self.agent(at.clone()).measured {
                    // A second call with nothing to show: a step of its own.
                    self.close();
                }
                let b = self.agent(at);
                b.step.metrics = Some(metrics);
                b.measured = true;
            }
            EventPayload::TurnCompleted {
                final_message,
                usage,
                ..
            } => {
                let rest = self.metrics_to(usage);
                let needs_step = match &self.current {
                    Some(b) => b.observed || b.measured,
                    None => true,
                };
                if needs_step
                    && (rest.prompt_tokens + rest.completion_tokens > 0
                        || !final_message.is_empty())
                {
                    self.close();
                    let b = self.agent(at);
                    b.step.message = final_message.clone();
                    b.step.metrics = Some(rest);
                } else if let Some(b) = self.current.as_mut() {
                    if b.step.message.is_empty() {
                        b.step.message = final_message.clone();
                    }
                    b.step.metrics = Some(rest);
                }
                self.close();
            }
            EventPayload::Error {
                turn_id: Some(_),
                code,
                message,
                ..
            } => {
                // Its end carries no usage: what its last call spent is in the session's record, not here.
                self.unfinished += 1;
                self.close();
                self.push(Step {
                    timestamp: at,
                    source: "system",
                    message: format!("the turn ended: {code}: {message}"),
                    extra: Some(serde_json::json!({"error_code": code})),
                    ..Default::default()
                });
            }
            _ => {}
        }
    }

    /// The step of the model call under way, begun when the last one has its results.
    fn agent(&mut self, at: Option<String>) -> &mut Building {
        if self.current.as_ref().is_some_and(|b| b.observed) {
            self.close();
        }
        let model = self.model.clone();
        self.current.get_or_insert_with(|| Building {
            step: Step {
                timestamp: at,
                source: "agent",
                model_name: model,
                llm_call_count: Some(1),
                ..Default::default()
            },
            observed: false,
            measured: false,
        })
    }

    /// The metrics of the calls since the last ones counted, when the turn's total is now `total`.
    fn metrics_to(&mut self, total: &Usage) -> Metrics {
        let n = |v: Option<u64>| v.unwrap_or(0);
        let m = Metrics {
            prompt_tokens: n(total.input_tokens).saturating_sub(n(self.counted.input_tokens)),
            completion_tokens: n(total.output_tokens).saturating_sub(n(self.counted.output_tokens)),
            cached_tokens: n(total.cached_tokens).saturating_sub(n(self.counted.cached_tokens)),
            cost_usd: None,
        };
        self.counted = *total;
        Metrics {
            cost_usd: self.price.map(|p| {
                p.cost(&Spent {
                    input_tokens: m.prompt_tokens,
                    output_tokens: m.completion_tokens,
                    cached_tokens: m.cached_tokens,
                    ..Default::default()
                })
            }),
            ..m
        }
    }

    fn close(&mut self) {
        if let Some(b) = self.current.take() {
            self.push(b.step);
        }
    }

    fn push(&mut self, mut step: Step) {
        step.step_id = self.steps.len() + 1;
        self.steps.push(step);
    }

    fn first_model(&self) -> Option<String> {
        self.steps.iter().find_map(|s| s.model_name.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msg(n: u64, payload: serde_json::Value) -> EventMsg {
        serde_json::from_value(
            json!({"id": n.to_string(), "session_id": "s", "created_at": "2026-12-06T10:00:00Z",
            "payload": payload}),
        )
        .unwrap()
    }

    #[test]
    fn each_model_call_is_a_step_with_its_calls_results_and_tokens() {
        let context = json!({"cwd": "/w", "model": {"provider": "openai", "name": "m"}, "sandbox_mode": "read_only"});
        let events = [
            json!({"type": "turn_started", "payload": {"turn_id": "t", "context": context, "submission_id": "x", "prompt": "list"}}),
            json!({"type": "reasoning_delta", "payload": {"turn_id": "t", "delta": "look"}}),
            json!({"type": "tool_call_started", "payload": {"turn_id": "t", "call_id": "c1", "tool": "Bash", "arguments": {"command": "ls"}}}),
            json!({"type": "usage_update", "payload": {"turn_id": "t", "usage": {"input_tokens": 50, "output_tokens": 12}}}),
            json!({"type": "tool_call_finished", "payload": {"turn_id": "t", "call_id": "c1", "tool": "Bash", "status": "ok", "output": "a b"}}),
            json!({"type": "agent_message_delta", "payload": {"turn_id": "t", "delta": "two files"}}),
            json!({"type": "turn_completed", "payload": {"turn_id": "t", "final_message": "two files", "usage": {"input_tokens": 120, "output_tokens": 15}}}),
        ];
        let events: Vec<EventMsg> = events
            .into_iter()
            .enumerate()
            .map(|(i, p)| msg(i as u64, p))
            .collect();
        let prices = BTreeMap::from([(
            "openai/m".to_string(),
            Price {
                input: 1_000_000.0,
                output: 1_000_000.0,
                cached_input: None,
            },
        )]);
        let about = About {
            session_id: "s",
            bundle: "b",
            prices: &prices,
        };
        let t = serde_json::to_value(from_journal(&events, &about)).unwrap();
        let steps = t["steps"].as_array().unwrap();
        assert_eq!(steps.len(), 3, "{t:#}");
        assert_eq!(steps[0]["source"], "user");
        assert_eq!(steps[1]["tool_calls"][0]["tool_call_id"], "c1");
        assert_eq!(
            steps[1]["observation"]["results"][0]["source_call_id"],
            "c1"
        );
        assert_eq!(steps[1]["reasoning_content"], "look");
        assert_eq!(steps[1]["metrics"]["prompt_tokens"], 50);
        assert_eq!(steps[2]["message"], "two files");
        assert_eq!(steps[2]["metrics"]["prompt_tokens"], 70);
        assert_eq!(t["final_metrics"]["total_prompt_tokens"], 120);
        assert_eq!(t["final_metrics"]["total_completion_tokens"], 15);
        assert_eq!(t["final_metrics"]["total_cost_usd"], 135.0);
    }
}
