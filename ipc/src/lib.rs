//! Wire types and the frame codec shared by the service-rs supervisor and its session workers.
//!
//! This crate holds data only: what crosses the supervisor/worker socket and what the event stream carries. It has
//! no sockets and no runtime logic. The naming rules every type follows are in `ipc/README.md`.
//!
//! Layout:
//! - [`names`]: plain string enums (sandbox modes, tool names, approval decisions) and the macro that makes them.
//! - [`task`]: `Task`, `TurnContext`, `ModelRef`, per-turn overrides.
//! - [`event`]: `EventMsg` and the event payload enum, one variant per kind of event.
//! - [`chat`]: conversation messages, tool specs and the streamed model chunks.
//! - [`config`]: what the supervisor tells a worker at start-up.
//! - [`message`]: `ToWorker` and `ToSupervisor`, one enum per direction.
//! - [`codec`]: the length-prefixed MessagePack frame codec.

pub mod chat;
pub mod codec;
pub mod config;
pub mod event;
pub mod message;
pub mod names;
pub mod task;

pub use chat::{
    ChatMessage, ChatRole, FirstReply, ModelChunk, ModelQuery, ModelRequest, ToolCall, ToolSpec,
    TurnActivity, Usage, OBSERVATION_HEADER,
};
pub use codec::{shrink_idle, CodecError, FrameCodec, IDLE_BUFFER, MAX_FRAME_LEN};
pub use config::{
    A2aAgent, HookSpec, McpServer, PermissionRule, Permissions, SkillInfo, SubagentInfo,
    WorkerConfig, BUNDLE_IN_SANDBOX, WORKSPACE_IN_SANDBOX,
};
pub use event::{
    EventMsg, EventPayload, ExecStream, HookRef, NetworkDecision, PlanItem, PlanStatus,
    SkippedFile, ToolCallStatus, TurnStatus,
};
pub use message::{HookAnswer, ToSupervisor, ToWorker};
pub use names::{
    ApprovalDecision, BuiltinTool, ExecutorKind, HookEvent, HookSource, MemoryProvider,
    PermissionAction, SandboxBackend, SandboxMode, SystemToolsMode, UnknownName,
};
pub use task::{ModelRef, Task, TurnContext, TurnOverrides};

/// Version of the supervisor/worker protocol; both sides refuse a peer that speaks another one.
pub const PROTOCOL_VERSION: u32 = 9;

/// The worker's command-line flag that asks it to read the cgroup handoff before its `hello`: one byte from the
/// supervisor carrying, as `SCM_RIGHTS`, a descriptor of the `tasks` file of each cgroup v1 the supervisor made for
/// it (none where there are none, or only v2). The worker writes `0` into each, moving its only thread, and closes
/// them. The supervisor checks the move before it sends `configure`, and makes it itself where it was not made.
pub const ENTER_CGROUPS_FLAG: &str = "--enter-cgroups";

/// The most descriptors the cgroup handoff carries (cgroup v1 `pids`, `memory` and `cpu`, with room to spare).
pub const MAX_CGROUP_HANDLES: usize = 8;
