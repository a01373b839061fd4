//! What a node does in the background while it serves: stopping idle workers and unused sessions, a shared
//! store's upkeep, retention, and the first steps of a drain.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::runtime::ServiceRuntime;

/// Runs `pass` at once and then every `every` (a late pass delays the next) until `shutdown`.
async fn each_tick<F, Fut>(every: Duration, shutdown: CancellationToken, mut pass: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => pass().await,
            _ = shutdown.cancelled() => return,
        }
    }
}

/// Stops idle workers and deletes sessions left unused for `unused` every `tick` until `shutdown`.
pub(super) async fn reap_idle(
    rt: ServiceRuntime,
    idle: crate::runtime::IdleTimeouts,
    unused: Option<Duration>,
    tick: Duration,
    shutdown: CancellationToken,
) {
    each_tick(tick, shutdown, || async {
        rt.reap_idle(idle).await;
        if let Some(after) = unused {
            rt.delete_unused(after).await;
        }
    })
    .await
}

/// How often a node of a shared store brings its bundles in line with the cluster's and gives up the sessions
/// other nodes deleted.
pub(super) const UPKEEP: Duration = Duration::from_secs(10);

/// A shared store's upkeep every `every` until `shutdown`: this node's bundles synced with the cluster's (see
/// `runtime::shared_bundles`), so what another node installed is here before a client asks for it, and the sessions
/// another node deleted given up (see `runtime::retention`).
pub(super) async fn cluster_upkeep(
    rt: ServiceRuntime,
    every: Duration,
    shutdown: CancellationToken,
) {
    each_tick(every, shutdown, || async {
        rt.sync_bundles().await;
        rt.drop_deleted_elsewhere().await;
    })
    .await
}

/// Runs the retention job (and, over a shared store, the sweep of what other nodes deleted) at its tick until
/// `shutdown`; the job's lease lasts three ticks, so another node takes it over when this one stops.
pub(super) async fn retain(
    rt: ServiceRuntime,
    policy: crate::runtime::retention::Retention,
    shutdown: CancellationToken,
) {
    let every = policy.tick();
    each_tick(every, shutdown, || async {
        let pass = rt.retain(&policy, every * 3).await;
        if pass.expired + pass.swept > 0 {
            tracing::info!(expired = pass.expired, swept = pass.swept, "retention pass");
        }
    })
    .await
}

/// The stop's first steps: not ready at once, new turns taken for `pre_stop_delay`, then refused while running
/// turns get up to `timeout` to end.
pub(super) async fn drain_turns(rt: &ServiceRuntime, drain: super::Drain) {
    rt.drain();
    tracing::info!(
        running = rt.running_turns(),
        pre_stop_delay_s = drain.pre_stop_delay.as_secs_f64(),
        drain_timeout_s = drain.timeout.as_secs_f64(),
        "stopping: not ready; taking new turns until the pre-stop delay ends"
    );
    tokio::time::sleep(drain.pre_stop_delay).await;
    rt.refuse_new_turns();
    let deadline = tokio::time::Instant::now() + drain.timeout;
    while rt.running_turns() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let left = rt.running_turns();
    if left > 0 {
        tracing::warn!(
            running = left,
            "the drain timed out; ending the turns still running"
        );
    }
}
