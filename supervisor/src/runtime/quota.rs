//! Tenants' daily tokens, as model calls finish: each call's tokens go to its tenant's ledger, and a turn whose
//! tenant has passed `tokens_per_day` stops once the call that passed it has finished, with `quota_exceeded`.
//!
//! Every runtime counts, so `service-rs usage` sees the turns of every front end (`run`, the TUI, ACP, `mcp serve`,
//! `serve`) in one ledger per store; only one with `RuntimeOptions::tenant_ledger` (`serve`) enforces the quota. A
//! turn's tool calls and times are counted as it ends (`Session::finish_turn`). The limit is checked before each call and
//! as each call ends: the call's end then reaches the turn as a failure, so the tools it asked for do not run.

use service_ipc::{ModelChunk, Usage};

use super::session::Session;
use super::Inner;

/// The code of a turn stopped by its tenant's daily tokens.
pub const QUOTA_EXCEEDED: &str = "quota_exceeded";

/// Why, when the tenant of `session` may spend no more today: its limit and what it has spent.
async fn over(rt: &Inner, tenant: &str) -> Option<(u64, u64)> {
    let tenancy = &rt.tenancy;
    let limit = match tenancy.quota(tenant).await {
        Ok(q) => q?.tokens_per_day?,
        Err(e) => {
            tracing::warn!(
                tenant,
                "the tenant's quota could not be read; not enforced for this call: {e}"
            );
            return None;
        }
    };
    let spent = tenancy.tokens_today(tenant).await.ok()?;
    (spent >= limit).then_some((limit, spent))
}

fn message(tenant: &str, (limit, spent): (u64, u64)) -> String {
    format!(
        "tenant \"{tenant}\" has spent {spent} of its {limit} tokens for today (UTC); the turn stopped after its \
         last model call. An admin can raise the limit with `service-rs tokens quota {tenant} --tokens-per-day N`"
    )
}

/// Counts a finished call of `model` against the session's tenant.
pub(super) fn count(rt: &Inner, session: &Session, model: &service_ipc::ModelRef, usage: &Usage) {
    let tenant = session.tenant();
    let name = crate::tenancy::usage::model_name(model);
    rt.tenancy
        .count(&tenant, &name, &session.bundle.reference(), usage);
    rt.metrics.count_tokens(&tenant, model, usage);
}

/// The chunk that refuses a call of `session`'s turn when its tenant has spent its day; None: the call may go.
pub(super) async fn refusal(rt: &Inner, session: &Session) -> Option<ModelChunk> {
    if !rt.options.tenant_ledger {
        return None;
    }
    let tenant = session.tenant();
    let why = over(rt, &tenant).await?;
    rt.metrics.quota_refused(&tenant, QUOTA_EXCEEDED);
    Some(ModelChunk::Failed {
        code: QUOTA_EXCEEDED.into(),
        message: message(&tenant, why),
    })
}
