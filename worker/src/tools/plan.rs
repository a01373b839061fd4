//! UpdatePlan: publishes the model's plan as a `plan_update` event.

use serde::Deserialize;
use service_ipc::{EventPayload, PlanItem};

use super::{ToolCtx, ToolResult};

#[derive(Deserialize)]
pub struct PlanArgs {
    plan: Vec<PlanItem>,
    explanation: Option<String>,
}

/// Emits the plan and confirms it to the model.
pub async fn update(args: PlanArgs, ctx: &ToolCtx<'_>) -> ToolResult {
    let steps = args.plan.len();
    ctx.outbox
        .event(EventPayload::PlanUpdate {
            turn_id: ctx.turn_id.to_string(),
            explanation: args.explanation,
            plan: args.plan,
        })
        .await;
    ToolResult::ok(format!("plan updated ({steps} steps)"))
}
