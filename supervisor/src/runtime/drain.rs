//! A server's stop in steps, so that a rolling restart loses no turn: on the stop signal readiness turns false at
//! once (load balancers stop sending), new turns are still taken for a while (those already on their way), then
//! refused with 503 `draining`, and running turns get a bounded time to end before the rest of the stop.

use std::sync::atomic::{AtomicBool, Ordering};

use super::error::{Result, RuntimeError};
use super::ServiceRuntime;

/// Where a runtime's stop is.
#[derive(Default)]
pub(crate) struct Drain {
    /// Readiness is false: the server is stopping.
    draining: AtomicBool,
    /// New turns are refused.
    refusing: AtomicBool,
}

impl ServiceRuntime {
    /// Starts the stop: from now on the runtime is not ready (see [`Self::draining`]), and still takes turns.
    pub fn drain(&self) {
        self.inner.drain.draining.store(true, Ordering::SeqCst);
    }

    /// True once [`Self::drain`] was called: `readyz` answers 503.
    pub fn draining(&self) -> bool {
        self.inner.drain.draining.load(Ordering::SeqCst)
    }

    /// From now on, new turns are refused with [`RuntimeError::Draining`]; running ones go on.
    pub fn refuse_new_turns(&self) {
        self.drain();
        self.inner.drain.refusing.store(true, Ordering::SeqCst);
    }

    /// The turns running in this runtime's sessions.
    pub fn running_turns(&self) -> usize {
        self.sessions()
            .values()
            .filter(|s| s.active_turn().is_some())
            .count()
    }

    /// Refuses a new turn once [`Self::refuse_new_turns`] was called.
    pub(super) fn admit_turn(&self) -> Result<()> {
        if self.inner.drain.refusing.load(Ordering::SeqCst) {
            return Err(RuntimeError::Draining);
        }
        Ok(())
    }
}
