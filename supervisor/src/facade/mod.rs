//! Facades: the runtime's sessions and turns in other protocols' terms, for clients that do not speak service-rs.
//!
//! The layer is shared; each protocol is one module over it:
//! - [`bundles`]: the bundle a client names, held to the server's sandbox policy;
//! - [`sessions`]: what a facade may do with sessions ([`Sessions`]), over the local runtime or a remote server;
//! - [`tool_view`]: what a tool call is about (its kind, a title, the files it touches), from its name and arguments;
//! - [`tool_text`]: what the agent did, as lines a person reads, shared by every front end;
//! - [`turn_end`]: how a turn ended, in terms every protocol maps to its own stop reasons;
//! - [`sse`]: server-sent events a task feeds while a response streams;
//! - [`acp`]: the Agent Client Protocol, for editors (`service-rs acp`);
//! - [`a2a`]: every installed bundle as an A2A agent on `serve` (`/a2a/{bundle}`), for other agents;
//! - [`openai`]: bundles as OpenAI-compatible models on `serve` (`/v1/models`, `/v1/chat/completions`,
//!   `/v1/responses`).
//!
//! A facade decides nothing a client could abuse: the runtime keeps choosing models, keys and sandboxes from its
//! own state, and every permission request still goes through the runtime's approval store.

pub mod a2a;
pub mod acp;
pub mod bundles;
pub mod openai;
pub mod sessions;
pub mod sse;
pub mod tool_text;
pub mod tool_view;
pub mod turn_end;

pub use sessions::{FacadeError, Sessions};
