//! How long a session's model took to its first answer, and what that says about the next turn's worker.
//!
//! A turn the supervisor leads starts the session's worker beside its first model call when the model is slow
//! enough to hide the sandbox's start (see `lead`). Waiting a few milliseconds to find out costs a timer on every
//! turn, and on a multi-threaded runtime a timer set sooner than the one the parked thread waits for wakes that
//! thread: about one wake-up of another thread a turn, for turns that need no worker. A session's model is paced
//! much the same from one turn to the next, so what its last led call took decides: a model that answered within
//! the bound starts no worker ahead, one that did not has it started at once, and only a session whose model has
//! not answered yet waits on a timer. A guess that misses costs one sandbox start (about 10 ms) on a turn whose
//! call was slow anyway: a fast model that stalls once, or a turn whose model an override changed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What a session's last led first call took to its whole reply; unknown until one answers.
#[derive(Debug, Default)]
pub(crate) struct ModelPace {
    /// Microseconds plus one; 0 while unknown.
    last: AtomicU64,
}

/// When a led turn starts the session's worker beside its first model call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WorkerAhead {
    /// Not at all: it starts if the model calls a tool.
    Never,
    /// As the turn starts.
    Now,
    /// Once the call has run this long without an answer.
    After(Duration),
}

impl ModelPace {
    /// Notes that a turn's first call had its whole reply after `took`.
    pub(crate) fn note(&self, took: Duration) {
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX - 1);
        self.last.store(micros.saturating_add(1), Ordering::Relaxed);
    }

    /// What the last noted call took.
    pub(crate) fn last(&self) -> Option<Duration> {
        match self.last.load(Ordering::Relaxed) {
            0 => None,
            n => Some(Duration::from_micros(n - 1)),
        }
    }

    /// When to start the worker ahead of a turn, for a runtime that starts it once the call has run `after`.
    pub(crate) fn worker_ahead(&self, after: Duration) -> WorkerAhead {
        match self.last() {
            None => WorkerAhead::After(after),
            Some(took) if took < after => WorkerAhead::Never,
            Some(_) => WorkerAhead::Now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unpaced_model_waits_a_fast_one_starts_nothing_and_a_slow_one_starts_at_once() {
        let after = Duration::from_millis(10);
        let pace = ModelPace::default();
        assert_eq!(pace.worker_ahead(after), WorkerAhead::After(after));
        pace.note(Duration::from_micros(300));
        assert_eq!(pace.last(), Some(Duration::from_micros(300)));
        assert_eq!(pace.worker_ahead(after), WorkerAhead::Never);
        pace.note(Duration::from_millis(250));
        assert_eq!(pace.worker_ahead(after), WorkerAhead::Now);
        pace.note(Duration::ZERO);
        assert_eq!(pace.last(), Some(Duration::ZERO));
        assert_eq!(pace.worker_ahead(after), WorkerAhead::Never);
    }
}
