//! A session's running turn: begun, led by the supervisor or handed to the worker, and ended (completed, failed,
//! interrupted or abandoned) with its record, history and end event saved in order.

use service_ipc::{EventPayload, ModelRef, TurnActivity, TurnStatus, Usage};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::{lock, ActiveTurn, Session, TurnEnd, TurnOutcome};
use crate::runtime::error::{Result, RuntimeError};
use crate::runtime::record::{now, LastTurn, SessionRecord, SessionStatus};

impl Session {
    /// The running turn's id.
    pub fn active_turn(&self) -> Option<String> {
        lock(&self.active).as_ref().map(|a| a.turn_id.clone())
    }

    /// The running turn's id once a worker has it: not while the supervisor leads it (see `lead`), when a worker's
    /// end is none of its business.
    pub fn handed_turn(&self) -> Option<String> {
        lock(&self.active)
            .as_ref()
            .filter(|a| a.lead.is_none() && a.journaled)
            .map(|a| a.turn_id.clone())
    }

    /// Journals `turn_id`'s start (`event`, its `turn_started`) and marks it started, if it is the running turn.
    pub fn emit_started(&self, turn_id: &str, event: EventPayload) {
        if let Some(a) = lock(&self.active).as_mut().filter(|a| a.turn_id == turn_id) {
            a.journaled = true;
        }
        self.emit(event);
    }

    /// The model of `turn_id` when it is the running turn.
    pub fn turn_model(&self, turn_id: &str) -> Option<ModelRef> {
        lock(&self.active)
            .as_ref()
            .filter(|a| a.turn_id == turn_id)
            .map(|a| a.model.clone())
    }

    /// What running turn `turn_id` has used so far, as the supervisor counted its calls.
    pub fn turn_usage(&self, turn_id: &str) -> Option<service_ipc::Usage> {
        lock(&self.active)
            .as_ref()
            .filter(|a| a.turn_id == turn_id)
            .map(|a| a.usage)
    }

    /// The prompt of running turn `turn_id`.
    pub fn turn_prompt(&self, turn_id: &str) -> Option<String> {
        lock(&self.active)
            .as_ref()
            .filter(|a| a.turn_id == turn_id)
            .map(|a| a.prompt.clone())
    }

    /// True the first time running turn `turn_id` asks to compact away an overflow; false after, so that a turn
    /// whose context still overflows fails rather than compacting again and again.
    pub fn first_overflow(&self, turn_id: &str) -> bool {
        let mut active = lock(&self.active);
        match active.as_mut().filter(|a| a.turn_id == turn_id) {
            Some(a) if !a.overflow_compacted => {
                a.overflow_compacted = true;
                true
            }
            _ => false,
        }
    }

    /// Marks `turn_id` as led by the supervisor (see `lead`); the token is cancelled when the turn ends, or by
    /// `interrupt_lead`, until `hand_over`.
    pub(crate) fn lead(&self, turn_id: &str) -> Option<CancellationToken> {
        let mut active = lock(&self.active);
        let a = active.as_mut().filter(|a| a.turn_id == turn_id)?;
        let token = CancellationToken::new();
        a.lead = Some(token.clone().drop_guard());
        Some(token)
    }

    /// Cancels the lead of `turn_id`; false when the turn is not in its lead (its worker has it, or it ended).
    pub(crate) fn interrupt_lead(&self, turn_id: &str) -> bool {
        lock(&self.active)
            .as_mut()
            .filter(|a| a.turn_id == turn_id)
            .and_then(|a| a.lead.take())
            .is_some()
    }

    /// Hands `turn_id` from its lead to its worker with `send` (true when sent); None when the turn ended or was
    /// interrupted first. Under the turn's lock: an interrupt either stops the lead or reaches the worker after the
    /// turn.
    pub(crate) fn hand_over(&self, turn_id: &str, send: impl FnOnce() -> bool) -> Option<bool> {
        let mut active = lock(&self.active);
        let a = active.as_mut().filter(|a| a.turn_id == turn_id)?;
        a.lead.take()?.disarm();
        Some(send())
    }

    /// Emits `payloads` while `turn_id` runs; false (and nothing emitted) once it has ended. Under the turn's lock,
    /// so they come before its end event.
    pub(crate) fn emit_in_turn(&self, turn_id: &str, payloads: Vec<EventPayload>) -> bool {
        let active = lock(&self.active);
        if active.as_ref().is_none_or(|a| a.turn_id != turn_id) {
            return false;
        }
        if !payloads.is_empty() {
            self.journal_batch(payloads, || true);
        }
        true
    }

    /// True when `turn_id` is the session's last ended turn.
    pub fn knows_turn(&self, turn_id: &str) -> bool {
        lock(&self.record)
            .last_turn
            .as_ref()
            .is_some_and(|t| t.turn_id == turn_id)
    }

    /// Marks `turn_id` of `prompt` as running with `model`; fails when another turn runs.
    pub fn begin_turn(
        &self,
        turn_id: &str,
        model: ModelRef,
        prompt: &str,
    ) -> Result<oneshot::Receiver<TurnOutcome>> {
        let (tx, rx) = oneshot::channel();
        {
            let mut active = lock(&self.active);
            if let Some(a) = active.as_ref() {
                return Err(RuntimeError::TurnInProgress {
                    session_id: self.id.clone(),
                    turn_id: a.turn_id.clone(),
                });
            }
            let usage = Usage {
                context_window: context_window(&model),
                ..Usage::default()
            };
            let ended = CancellationToken::new();
            *active = Some(ActiveTurn {
                turn_id: turn_id.to_string(),
                model,
                done: Some(tx),
                stop_reason: None,
                lead: None,
                journaled: false,
                usage,
                max_tokens: None,
                max_cost: None,
                price: None,
                prompt: prompt.to_string(),
                overflow_compacted: false,
                history_mark: self.journal.log().history_mark(),
                started: std::time::Instant::now(),
                tool_calls: 0,
                ended: ended.clone(),
                _ended: ended.drop_guard(),
                _lease: crate::runtime::store::files_lock::live(&self.dir),
            });
        }
        let started = self.update_unflushed(|r| {
            r.status = SessionStatus::Running;
            r.active_turn = Some(turn_id.to_string());
            r.turn_count += 1;
            if r.title.is_none() {
                r.title = Some(crate::runtime::record::title_of(prompt));
            }
        });
        if let Err(e) = started {
            // Not started after all: the session stays idle, and the next request may try again.
            lock(&self.active).take();
            let _ = self.update(|r| {
                r.status = SessionStatus::Idle;
                r.active_turn = None;
                r.turn_count = r.turn_count.saturating_sub(1);
            });
            return Err(e);
        }
        Ok(rx)
    }

    /// The history log's length as running turn `turn_id` started.
    pub fn turn_history_mark(&self, turn_id: &str) -> Option<u64> {
        lock(&self.active)
            .as_ref()
            .filter(|a| a.turn_id == turn_id)
            .map(|a| a.history_mark)
    }

    /// A token cancelled when `turn_id` ends; None when it does not run.
    pub(crate) fn turn_ended(&self, turn_id: &str) -> Option<CancellationToken> {
        lock(&self.active)
            .as_ref()
            .filter(|a| a.turn_id == turn_id)
            .map(|a| a.ended.clone())
    }

    /// Counts a subagent's tokens and model calls towards `turn_id`, if it still runs.
    pub fn count_child(&self, turn_id: &str, child: &Usage) {
        if let Some(a) = lock(&self.active).as_mut().filter(|a| a.turn_id == turn_id) {
            a.usage.add(*child);
            if let Some(calls) = child.model_calls {
                a.usage.model_calls = Some(a.usage.model_calls.unwrap_or(0).saturating_add(calls));
            }
        }
    }

    /// Counts one model call of `turn_id` the supervisor made, if it still runs.
    pub fn count_call(&self, turn_id: &str, call: Usage) {
        if let Some(a) = lock(&self.active).as_mut().filter(|a| a.turn_id == turn_id) {
            a.usage.count_call(call);
        }
    }

    /// Caps the tokens and the US dollars `turn_id` may spend (see `TurnOverrides`); `price` is its model's, when
    /// the supervisor has one (the turn's and the session's dollars are counted at it).
    pub fn set_turn_budget(
        &self,
        turn_id: &str,
        max_tokens: Option<u64>,
        max_cost: Option<f64>,
        price: Option<crate::tenancy::usage::Price>,
    ) {
        if let Some(a) = lock(&self.active).as_mut().filter(|a| a.turn_id == turn_id) {
            a.max_tokens = max_tokens;
            a.max_cost = max_cost;
            a.price = price;
        }
    }

    /// Why `turn_id` may make no further model call: the turn or the session (`SessionRecord::budget`) spent its
    /// tokens, or its dollars, or the next call's prompt (at least as long as the last one's, since a turn's context
    /// only grows) would pass them. None while it may.
    pub fn over_budget(&self, turn_id: &str) -> Option<String> {
        let (budget, before_tokens, before_cost) = {
            let r = lock(&self.record);
            let u = &r.usage;
            let tokens = u.input_tokens.unwrap_or(0) + u.output_tokens.unwrap_or(0);
            (r.budget.unwrap_or_default(), tokens, r.cost_usd)
        };
        let active = lock(&self.active);
        let a = active.as_ref().filter(|a| a.turn_id == turn_id)?;
        let u = &a.usage;
        let spent = u.input_tokens.unwrap_or(0) + u.output_tokens.unwrap_or(0);
        if let Some(max) = a.max_tokens.filter(|max| spent >= *max) {
            return Some(format!(
                "the turn has spent {spent} tokens of its budget of {max} (--max-tokens)"
            ));
        }
        let session_spent = before_tokens + spent;
        if let Some(max) = budget.max_tokens.filter(|max| session_spent >= *max) {
            return Some(format!(
                "the session has spent {session_spent} tokens of its budget of {max} (budget.max_tokens)"
            ));
        }
        let price = a.price?;
        let cost = price.cost(&spent_of(u));
        let prompt = crate::tenancy::usage::Spent {
            input_tokens: u.context_tokens.unwrap_or(0),
            ..Default::default()
        };
        let cached = crate::tenancy::usage::Spent {
            cached_tokens: prompt.input_tokens,
            ..prompt
        };
        // The cheapest the next call could be: its prompt at the lower of the fresh and the cached price.
        let next = price.cost(&prompt).min(price.cost(&cached));
        if let Some(max) = a.max_cost.filter(|max| cost + next > *max) {
            return Some(format!(
                "the turn has spent ${cost:.4} of its budget of ${max:.4} (--max-cost), and its next call's prompt \
                 alone costs at least ${next:.4}"
            ));
        }
        let session_cost = before_cost + cost;
        budget
            .max_cost_usd
            .filter(|max| session_cost + next > *max)
            .map(|max| {
                format!(
                    "the session has spent ${session_cost:.4} of its budget of ${max:.4} (budget.max_cost_usd), and \
                     its next call's prompt alone costs at least ${next:.4}"
                )
            })
    }

    /// Counts a tool call a model call of `turn_id` asked for, if the turn still runs.
    pub fn count_tool_call(&self, turn_id: &str) {
        if let Some(a) = lock(&self.active).as_mut().filter(|a| a.turn_id == turn_id) {
            a.tool_calls += 1;
        }
    }

    /// Forgets a turn that never reached the worker, as if it had not been started.
    pub fn abandon_turn(&self, turn_id: &str) {
        let mut active = lock(&self.active);
        if active.as_ref().is_some_and(|a| a.turn_id == turn_id) {
            *active = None;
            drop(active);
            let _ = self.update(|r| {
                r.status = SessionStatus::Idle;
                r.active_turn = None;
                r.turn_count = r.turn_count.saturating_sub(1);
            });
        }
    }

    /// Records the end of `turn_id` (history, record), then emits its `turn_completed` or `error` event, then wakes
    /// the waiter: whoever sees the end event finds the session idle and the history saved. True when the turn was
    /// running and its messages are saved.
    pub fn finish_turn(&self, mut end: TurnEnd) -> bool {
        // Held until the end is saved: whoever then finds no turn running (a one-shot about to exit) finds its end
        // on disk, not still being written.
        let mut turn = lock(&self.active);
        let Some(mut active) = turn.take_if(|a| a.turn_id == end.turn_id) else {
            return false;
        };
        lock(&self.fault).take();
        // The supervisor's count, not the worker's claim: it made every call and read every tool call it asked for.
        end.usage = active.usage;
        let activity = TurnActivity {
            tool_calls: active.tool_calls,
            wall_ms: u64::try_from(active.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            sandbox_cpu_ms: self.sandbox_cpu_ms(),
        };
        let ended = |r: &mut SessionRecord, status: TurnStatus| {
            r.status = SessionStatus::Idle;
            r.active_turn = None;
            r.fork_fresh = false;
            r.last_turn = Some(LastTurn {
                turn_id: end.turn_id.clone(),
                status,
                finished_at: now(),
            });
            r.updated_at = now();
        };
        // The messages and the record that ends the turn are written together (see `save_turn_end`).
        let (history, _) = {
            let mut record = lock(&self.record);
            ended(&mut record, end.status);
            record.usage.add(end.usage);
            record.activity.add(activity);
            if let Some(price) = active.price {
                record.cost_usd += price.cost(&spent_of(&end.usage));
            }
            // The last call's prompt is the context the next turn starts from (compaction reads it).
            record.usage.context_tokens = end.usage.context_tokens.or(record.usage.context_tokens);
            self.journal.log().save_turn_end(&end.messages, &record)
        };
        // Ended in the record and the history, not yet in the journal: what a restart repairs (`repair`).
        crate::runtime::faults::point("after_turn_end_saved");
        if let Some(ledger) = self.ledger.get() {
            let model = crate::tenancy::usage::model_name(&active.model);
            ledger.count_turn(&self.tenant(), &model, &self.bundle.reference(), &activity);
        }
        let saved = history.is_ok();
        if let Err(e) = history {
            tracing::error!(session = %self.id, "history not persisted: {e}");
            // The next turn would not see these messages: the turn did not durably happen.
            let (code, cause) = e
                .storage_fault()
                .unwrap_or(("storage_error", "the server could not save the turn".into()));
            end.status = TurnStatus::Failed;
            end.error = Some((
                code.into(),
                format!("the turn's messages were not saved: {cause}"),
            ));
            active.stop_reason = None;
            let _ = self.update(|r| ended(r, TurnStatus::Failed));
        }
        drop(turn);
        let outcome = match end.status {
            TurnStatus::Completed => "completed",
            TurnStatus::Failed => "failed",
            TurnStatus::Interrupted => "interrupted",
        };
        self.metrics
            .turn_ended(outcome, active.started.elapsed().as_secs_f64());
        let error = match end.status {
            TurnStatus::Completed => None,
            TurnStatus::Interrupted if active.stop_reason.is_some() => active.stop_reason.take(),
            _ => Some(
                end.error
                    .unwrap_or_else(|| ("failed".into(), "the turn failed".into())),
            ),
        };
        let checkpoints = crate::runtime::checkpoints::turn_ending(self, &end.turn_id);
        self.emit(match &error {
            None => EventPayload::TurnCompleted {
                turn_id: end.turn_id.clone(),
                final_message: end.final_message.clone(),
                usage: end.usage,
                activity: Some(activity),
            },
            Some((code, message)) => EventPayload::Error {
                turn_id: Some(end.turn_id.clone()),
                code: code.clone(),
                message: message.clone(),
            },
        });
        let turn_id = end.turn_id.clone();
        let wake: Box<dyn FnOnce() + Send> = match active.done.take() {
            Some(done) => {
                let outcome = TurnOutcome {
                    turn_id: end.turn_id,
                    status: end.status,
                    final_message: end.final_message,
                    usage: end.usage,
                    error,
                };
                // Woken once the end is stored (a client told the turn ended finds it so on any node) and the
                // workspace checkpointed as the turn left it.
                let log = self.journal.log().clone();
                Box::new(move || {
                    log.after_stored(Box::new(move || {
                        let _ = done.send(outcome);
                    }))
                })
            }
            None => Box::new(|| {}),
        };
        crate::runtime::checkpoints::after_turn(self, &turn_id, checkpoints, wake);
        saved
    }

    /// Records why the supervisor is about to interrupt `turn_id`, for the `error` event that ends it.
    pub fn set_stop_reason(&self, turn_id: &str, code: &str, message: &str) {
        if let Some(a) = lock(&self.active).as_mut().filter(|a| a.turn_id == turn_id) {
            a.stop_reason = Some((code.into(), message.into()));
        }
    }

    /// Ends the running turn (if any) as failed with `code`, keeping no messages.
    pub fn fail_active_turn(&self, code: &str, message: &str) -> Option<String> {
        let turn_id = self.active_turn()?;
        self.fail_turn(&turn_id, code, message);
        Some(turn_id)
    }

    /// Ends `turn_id`, if it is the running turn, as failed with `code`, keeping no messages.
    pub fn fail_turn(&self, turn_id: &str, code: &str, message: &str) {
        let _ = self.finish_turn(TurnEnd {
            turn_id: turn_id.to_string(),
            status: TurnStatus::Failed,
            final_message: String::new(),
            messages: Vec::new(),
            usage: Usage::default(),
            error: Some((code.into(), message.into())),
        });
    }
}

/// The context window `model.config.context_window` gives, in tokens.
fn context_window(model: &ModelRef) -> Option<u64> {
    model.config.as_ref()?.get("context_window")?.as_u64()
}

/// A turn's usage as the price table counts it.
fn spent_of(u: &Usage) -> crate::tenancy::usage::Spent {
    crate::tenancy::usage::Spent {
        input_tokens: u.input_tokens.unwrap_or(0),
        output_tokens: u.output_tokens.unwrap_or(0),
        cached_tokens: u.cached_tokens.unwrap_or(0),
        ..Default::default()
    }
}
