//! The terminal UI's state and drawing; the terminal loop lives in the CLI (`service-rs tui`).
//!
//! - [`app`]: the state, built by folding session events, and the input line with history.
//! - [`commands`]: parsing input lines (prompt, `/command`, `!operator command`).
//! - [`view`]: drawing the state with ratatui.
//! - [`markdown`]: assistant text as styled lines; [`highlight`]: code blocks in colour.
//! - [`picker`]: the resume picker over sessions.
//! - [`transcript`]: the transcript as lines, tool calls in the shared tool view.
//! - [`editing`], [`input`]: pastes, the `/` and `@` popups, mentions attached to the prompt.
//! - [`files`]: the project's files for `@`, as `.gitignore` leaves them.

pub mod app;
pub mod commands;
pub mod editing;
pub mod files;
pub mod highlight;
pub mod input;
pub mod markdown;
pub mod picker;
pub mod transcript;
pub mod view;
