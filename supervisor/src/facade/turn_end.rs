//! How a turn ended, in the terms protocols map to their own stop reasons.

use service_ipc::{EventPayload, Usage};

/// The end of a turn.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEnd {
    /// The model gave its final answer.
    Completed {
        /// The answer.
        final_message: String,
        /// What the turn used.
        usage: Usage,
    },
    /// The turn used every model call `max_steps` allows.
    MaxSteps {
        /// The runtime's message.
        message: String,
    },
    /// The provider refused to answer.
    Refused {
        /// The provider's reason.
        message: String,
    },
    /// Interrupted by a client or an operator.
    Interrupted,
    /// Failed for another reason.
    Failed {
        /// The runtime's error code.
        code: String,
        /// Its message.
        message: String,
    },
}

/// The end `payload` reports for turn `turn_id`; None when it does not end that turn.
pub fn of(payload: &EventPayload, turn_id: &str) -> Option<TurnEnd> {
    if !payload.ends_turn() || payload.turn_id() != Some(turn_id) {
        return None;
    }
    Some(match payload {
        EventPayload::TurnCompleted {
            final_message,
            usage,
            ..
        } => TurnEnd::Completed {
            final_message: final_message.clone(),
            usage: *usage,
        },
        EventPayload::Error { code, message, .. } => match code.as_str() {
            "interrupted" => TurnEnd::Interrupted,
            "max_steps_exceeded" => TurnEnd::MaxSteps {
                message: message.clone(),
            },
            "refusal" => TurnEnd::Refused {
                message: message.clone(),
            },
            _ => TurnEnd::Failed {
                code: code.clone(),
                message: message.clone(),
            },
        },
        _ => return None,
    })
}
