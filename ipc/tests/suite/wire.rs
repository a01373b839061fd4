//! Pins the JSON wire form of every event kind and round-trips every frame through MessagePack.

use bytes::BytesMut;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use service_ipc::codec::{decode_frame, encode_frame};
use service_ipc::*;
use tokio_util::codec::{Decoder, Encoder};

fn context() -> TurnContext {
    TurnContext {
        cwd: "/workspace".into(),
        model: ModelRef {
            provider: "scripted".into(),
            name: "demo".into(),
            config: Some(json!({"script": "resources/script.json5"})),
        },
        sandbox_mode: SandboxMode::ReadOnly,
        instructions: Vec::new(),
        approval_policy: None,
        metadata: None,
    }
}

fn context_json() -> Value {
    json!({
        "cwd": "/workspace",
        "model": {"provider": "scripted", "name": "demo", "config": {"script": "resources/script.json5"}},
        "sandbox_mode": "read_only",
        "approval_policy": null,
    })
}

/// One payload of every kind with its exact JSON form.
fn every_event_kind() -> Vec<(EventPayload, Value)> {
    let t = || "t1".to_string();
    vec![
        (
            EventPayload::TurnStarted {
                turn_id: t(),
                context: Box::new(context()),
                submission_id: "s1".into(),
                prompt: "hi".into(),
                history_mark: Some(120),
            },
            json!({"type": "turn_started", "payload": {
                "turn_id": "t1", "context": context_json(), "submission_id": "s1", "prompt": "hi",
                "history_mark": 120}}),
        ),
        (
            EventPayload::CheckpointCreated {
                turn_id: t(),
                files: 10,
                bytes_new: 300,
                dropped: vec!["t0".into()],
                note: None,
            },
            json!({"type": "checkpoint_created", "payload": {
                "turn_id": "t1", "files": 10, "bytes_new": 300, "dropped": ["t0"]}}),
        ),
        (
            EventPayload::SessionRewound {
                to_turn: 2,
                files: true,
                conversation: false,
                restored: 3,
            },
            json!({"type": "session_rewound", "payload": {
                "to_turn": 2, "files": true, "conversation": false, "restored": 3}}),
        ),
        (
            EventPayload::SessionForked {
                from_session: "s0".into(),
                turn: 3,
                workspace: "copied".into(),
            },
            json!({"type": "session_forked", "payload": {
                "from_session": "s0", "turn": 3, "workspace": "copied"}}),
        ),
        (
            EventPayload::TurnCompleted {
                turn_id: t(),
                final_message: "done".into(),
                usage: Usage::new(3, 4),
                activity: None,
            },
            json!({"type": "turn_completed", "payload": {
                "turn_id": "t1", "final_message": "done", "usage": {"input_tokens": 3, "output_tokens": 4}}}),
        ),
        (
            EventPayload::AgentMessageDelta {
                turn_id: t(),
                delta: "Hel".into(),
            },
            json!({"type": "agent_message_delta", "payload": {"turn_id": "t1", "delta": "Hel"}}),
        ),
        (
            EventPayload::ReasoningDelta {
                turn_id: t(),
                delta: "hmm".into(),
            },
            json!({"type": "reasoning_delta", "payload": {"turn_id": "t1", "delta": "hmm"}}),
        ),
        (
            EventPayload::ReasoningSectionBreak { turn_id: t() },
            json!({"type": "reasoning_section_break", "payload": {"turn_id": "t1"}}),
        ),
        (
            EventPayload::ToolCallStarted {
                turn_id: t(),
                call_id: "c1".into(),
                tool: "Bash".into(),
                arguments: json!({"command": "ls"}),
                parent_exec_id: None,
            },
            json!({"type": "tool_call_started", "payload": {
                "turn_id": "t1", "call_id": "c1", "tool": "Bash", "arguments": {"command": "ls"}}}),
        ),
        (
            EventPayload::ToolCallStarted {
                turn_id: t(),
                call_id: "c2".into(),
                tool: "Read".into(),
                arguments: json!({"file_path": "a"}),
                parent_exec_id: Some("x1".into()),
            },
            json!({"type": "tool_call_started", "payload": {
                "turn_id": "t1", "call_id": "c2", "tool": "Read", "arguments": {"file_path": "a"},
                "parent_exec_id": "x1"}}),
        ),
        (
            EventPayload::ToolCallDelta {
                turn_id: t(),
                call_id: "c1".into(),
                delta: "running".into(),
            },
            json!({"type": "tool_call_delta", "payload": {"turn_id": "t1", "call_id": "c1", "delta": "running"}}),
        ),
        (
            EventPayload::ToolCallFinished {
                turn_id: t(),
                call_id: "c1".into(),
                tool: "Bash".into(),
                status: ToolCallStatus::Ok,
                output: "a\n".into(),
                diff: None,
            },
            json!({"type": "tool_call_finished", "payload": {
                "turn_id": "t1", "call_id": "c1", "tool": "Bash", "status": "ok", "output": "a\n"}}),
        ),
        (
            EventPayload::ExecCommandBegin {
                turn_id: None,
                exec_id: "e1".into(),
                call_id: None,
                command: "echo hi".into(),
                cwd: "/workspace".into(),
            },
            json!({"type": "exec_command_begin", "payload": {
                "turn_id": null, "exec_id": "e1", "call_id": null, "command": "echo hi", "cwd": "/workspace"}}),
        ),
        (
            EventPayload::ExecCommandOutputDelta {
                turn_id: Some(t()),
                exec_id: "e1".into(),
                stream: ExecStream::Stderr,
                chunk: "oops\n".into(),
            },
            json!({"type": "exec_command_output_delta", "payload": {
                "turn_id": "t1", "exec_id": "e1", "stream": "stderr", "chunk": "oops\n"}}),
        ),
        (
            EventPayload::ExecCommandOutputTruncated {
                turn_id: Some(t()),
                exec_id: "e1".into(),
                limit_bytes: 1_048_576,
            },
            json!({"type": "exec_command_output_truncated", "payload": {
                "turn_id": "t1", "exec_id": "e1", "limit_bytes": 1_048_576}}),
        ),
        (
            EventPayload::ExecCommandEnd {
                turn_id: Some(t()),
                exec_id: "e1".into(),
                exit_code: Some(0),
                duration_ms: 12,
                timed_out: false,
            },
            json!({"type": "exec_command_end", "payload": {
                "turn_id": "t1", "exec_id": "e1", "exit_code": 0, "duration_ms": 12, "timed_out": false}}),
        ),
        (
            EventPayload::PermissionRequested {
                turn_id: t(),
                request_id: "r1".into(),
                call_id: "c1".into(),
                tool: "Bash".into(),
                summary: "rm -rf x".into(),
                rule: Some("Bash rm*: ask".into()),
                diff: None,
                project_rule: None,
                warning: None,
                child_session_id: None,
            },
            json!({"type": "permission_requested", "payload": {
                "turn_id": "t1", "request_id": "r1", "call_id": "c1", "tool": "Bash",
                "summary": "rm -rf x", "rule": "Bash rm*: ask"}}),
        ),
        (
            EventPayload::PermissionRequested {
                turn_id: t(),
                request_id: "r2".into(),
                call_id: "c2".into(),
                tool: "Bash".into(),
                summary: "npm test".into(),
                rule: None,
                diff: None,
                project_rule: Some("Bash(npm test:*)".into()),
                warning: None,
                child_session_id: None,
            },
            json!({"type": "permission_requested", "payload": {
                "turn_id": "t1", "request_id": "r2", "call_id": "c2", "tool": "Bash",
                "summary": "npm test", "rule": null, "project_rule": "Bash(npm test:*)"}}),
        ),
        (
            EventPayload::ApprovalResolved {
                turn_id: t(),
                request_id: "r1".into(),
                decision: ApprovalDecision::AllowAlways,
                reason: None,
                child_session_id: Some("s2".into()),
                hook: None,
            },
            json!({"type": "approval_resolved", "payload": {
                "turn_id": "t1", "request_id": "r1", "decision": "allow_always", "child_session_id": "s2"}}),
        ),
        (
            EventPayload::ApprovalResolved {
                turn_id: t(),
                request_id: "r2".into(),
                decision: ApprovalDecision::Deny,
                reason: Some("use pytest instead".into()),
                child_session_id: None,
                hook: None,
            },
            json!({"type": "approval_resolved", "payload": {
                "turn_id": "t1", "request_id": "r2", "decision": "deny", "reason": "use pytest instead"}}),
        ),
        (
            EventPayload::HookStarted {
                turn_id: Some("t1".into()),
                hook_id: "h".into(),
                event: service_ipc::HookEvent::PreToolUse,
                hook: service_ipc::HookRef {
                    source: service_ipc::HookSource::Project,
                    command: "python3 guard.py".into(),
                },
                call_id: Some("c1".into()),
            },
            json!({"type": "hook_started", "payload": {
                "turn_id": "t1", "hook_id": "h", "event": "PreToolUse",
                "hook": {"source": "project", "command": "python3 guard.py"}, "call_id": "c1"}}),
        ),
        (
            EventPayload::HookFinished {
                turn_id: Some("t1".into()),
                hook_id: "h".into(),
                event: service_ipc::HookEvent::PreToolUse,
                hook: service_ipc::HookRef {
                    source: service_ipc::HookSource::Bundle,
                    command: "python3 guard.py".into(),
                },
                matcher: Some("Bash".into()),
                exit_code: Some(2),
                timed_out: false,
                decision: Some("deny".into()),
                reason: Some("no rm -rf".into()),
                duration_ms: 12,
            },
            json!({"type": "hook_finished", "payload": {
                "turn_id": "t1", "hook_id": "h", "event": "PreToolUse",
                "hook": {"source": "bundle", "command": "python3 guard.py"}, "matcher": "Bash",
                "exit_code": 2, "timed_out": false, "decision": "deny", "reason": "no rm -rf", "duration_ms": 12}}),
        ),
        (
            EventPayload::SubagentStarted {
                turn_id: t(),
                call_id: "c3".into(),
                subagent: "reviewer".into(),
                child_session_id: "s2".into(),
            },
            json!({"type": "subagent_started", "payload": {
                "turn_id": "t1", "call_id": "c3", "subagent": "reviewer", "child_session_id": "s2"}}),
        ),
        (
            EventPayload::SubagentFinished {
                turn_id: t(),
                call_id: "c3".into(),
                subagent: "reviewer".into(),
                child_session_id: "s2".into(),
                outcome: TurnStatus::Completed,
                usage: Usage::new(3, 4),
            },
            json!({"type": "subagent_finished", "payload": {
                "turn_id": "t1", "call_id": "c3", "subagent": "reviewer", "child_session_id": "s2",
                "outcome": "completed", "usage": serde_json::to_value(Usage::new(3, 4)).unwrap()}}),
        ),
        (
            EventPayload::PlanUpdate {
                turn_id: t(),
                explanation: None,
                plan: vec![PlanItem {
                    step: "read".into(),
                    status: PlanStatus::InProgress,
                }],
            },
            json!({"type": "plan_update", "payload": {
                "turn_id": "t1", "explanation": null, "plan": [{"step": "read", "status": "in_progress"}]}}),
        ),
        (
            EventPayload::Error {
                turn_id: Some(t()),
                code: "worker_died".into(),
                message: "the worker was killed by signal 9".into(),
            },
            json!({"type": "error", "payload": {
                "turn_id": "t1", "code": "worker_died", "message": "the worker was killed by signal 9"}}),
        ),
    ]
}

#[test]
fn every_event_kind_has_its_pinned_json_form() {
    let cases = every_event_kind();
    assert_eq!(
        cases.len(),
        26,
        "one case per kind of event, plus exec_command_output_truncated, a program's tool call, a question's project \
         rule and a denial's reason"
    );
    for (payload, expected) in cases {
        assert_eq!(serde_json::to_value(&payload).unwrap(), expected);
        assert_eq!(expected["type"], payload.kind());
        let back: EventPayload = serde_json::from_value(expected).unwrap();
        assert_eq!(back, payload);
    }
}

#[test]
fn event_msg_envelope_has_id_session_created_at_and_nested_payload() {
    let msg = EventMsg {
        id: "7".into(),
        session_id: "s".into(),
        created_at: "2026-01-01T00:00:00Z".into(),
        payload: EventPayload::ReasoningSectionBreak {
            turn_id: "t".into(),
        },
    };
    assert_eq!(
        serde_json::to_value(&msg).unwrap(),
        json!({"id": "7", "session_id": "s", "created_at": "2026-01-01T00:00:00Z",
               "payload": {"type": "reasoning_section_break", "payload": {"turn_id": "t"}}})
    );
    assert_eq!(msg.seq(), Some(7));
}

fn every_to_worker() -> Vec<ToWorker> {
    vec![
        ToWorker::Configure(WorkerConfig {
            protocol_version: PROTOCOL_VERSION,
            session_id: "s".into(),
            bundle_dir: "/bundle".into(),
            workspace: "/workspace".into(),
            sandbox_mode: SandboxMode::WorkspaceWrite,
            system_prompt: "be brief".into(),
            tools: BuiltinTool::ALL.to_vec(),
            skills: vec![SkillInfo {
                name: "x".into(),
                description: "y".into(),
                path: "/bundle/skills/x/SKILL.md".into(),
            }],
            max_steps: 8,
            memory_window: 20,
            permissions: Permissions {
                default: PermissionAction::Ask,
                rules: vec![PermissionRule {
                    tool: "Bash".into(),
                    pattern: Some("git *".into()),
                    action: PermissionAction::Allow,
                }],
                network: PermissionAction::Ask,
            },
            history: vec![ChatMessage::text(ChatRole::User, "earlier")],
            heartbeat_ms: 1000,
            egress_proxy: Some("/run/service/egress.sock".into()),
            no_proxy: "localhost".into(),
            spare_shell_idle_ms: 500,
            a2a_agents: vec![service_ipc::A2aAgent {
                name: "peer".into(),
                url: "https://peer.example/a2a/x".into(),
                token: Some("t".into()),
                tool_timeout_ms: 1000,
            }],
            subagents: vec![service_ipc::SubagentInfo {
                name: "reviewer".into(),
                description: "reviews".into(),
            }],
            executor: service_ipc::ExecutorKind::Codeact,
            codeact_timeout_ms: 5000,
            hooks: Vec::new(),
            operator_hooks_dir: Some("/operator-hooks".into()),
            sandbox_backend: service_ipc::SandboxBackend::Bwrap,
            egress_listener_fd: None,
            fork: true,
            mcp_servers: [(
                "git".to_string(),
                service_ipc::McpServer::Stdio {
                    command: "uvx".into(),
                    args: vec!["mcp-server-git".into()],
                    env: [("GIT_AUTHOR_NAME".to_string(), "x".to_string())].into(),
                    cwd: None,
                    startup_timeout_ms: 10_000,
                    tool_timeout_ms: 60_000,
                },
            )]
            .into(),
        }),
        ToWorker::RunTurn {
            turn_id: "t".into(),
            task: Task::new("hello"),
            context: context(),
            first_reply: None,
        },
        ToWorker::RunTurn {
            turn_id: "t2".into(),
            task: Task::new("list"),
            context: context(),
            first_reply: Some(service_ipc::FirstReply {
                text: "looking".into(),
                tool_calls: vec![ToolCall {
                    id: "c".into(),
                    name: "Bash".into(),
                    arguments: "{\"command\":\"ls\"}".into(),
                }],
                opaque: vec![serde_json::json!({"type": "reasoning", "encrypted_content": "x"})],
                usage: Usage::default(),
            }),
        },
        ToWorker::AppendHistory {
            messages: vec![ChatMessage::text(ChatRole::User, "hi")],
        },
        ToWorker::ReplaceHistory {
            messages: vec![ChatMessage::text(ChatRole::User, "summary")],
            trigger: Some("manual".into()),
        },
        ToWorker::Compacting {
            trigger: "auto".into(),
            custom_instructions: Some("keep the test names".into()),
        },
        ToWorker::ModelChunk {
            request_id: "m".into(),
            chunk: ModelChunk::ToolCall {
                call: ToolCall {
                    id: "c".into(),
                    name: "Bash".into(),
                    arguments: "{\"command\":\"ls\"}".into(),
                },
            },
        },
        ToWorker::ModelChunk {
            request_id: "m".into(),
            chunk: ModelChunk::ReasoningSectionBreak,
        },
        ToWorker::ApprovalDecision {
            request_id: "r".into(),
            decision: ApprovalDecision::Deny,
            reason: Some("use pytest instead".into()),
            hook: Some(service_ipc::HookRef {
                source: service_ipc::HookSource::Operator,
                command: "approve".into(),
            }),
        },
        ToWorker::RunCommand {
            exec_id: "e".into(),
            command: "echo hi".into(),
            cwd: None,
        },
        ToWorker::SubagentResult {
            request_id: "a".into(),
            status: ToolCallStatus::Ok,
            output: "reviewed".into(),
        },
        ToWorker::Interrupt {
            turn_id: "t".into(),
        },
        ToWorker::Shutdown,
    ]
}

fn every_to_supervisor() -> Vec<ToSupervisor> {
    let mut out = vec![
        ToSupervisor::Hello {
            protocol_version: PROTOCOL_VERSION,
            pid: 2,
        },
        ToSupervisor::Ready,
        ToSupervisor::Heartbeat,
        ToSupervisor::ModelRequest(ModelQuery {
            request_id: "m".into(),
            turn_id: "t".into(),
            messages: vec![ChatMessage::tool_result("c", "ok")],
            tools: vec![ToolSpec {
                name: "Read".into(),
                description: "read".into(),
                parameters: json!({"type": "object", "properties": {"file_path": {"type": "string"}}}),
            }],
        }),
        ToSupervisor::CancelModel {
            request_id: "m".into(),
        },
        ToSupervisor::PermissionRequest {
            request_id: "r".into(),
            turn_id: "t".into(),
            call_id: "c".into(),
            tool: "Write".into(),
            key: "/etc/passwd".into(),
            rule: None,
            diff: Some("--- a\n+++ a\n@@ -1 +1 @@\n-x\n+y\n".into()),
            hook: None,
        },
        ToSupervisor::TurnFinished {
            turn_id: "t".into(),
            status: TurnStatus::Completed,
            final_message: "done".into(),
            messages: vec![ChatMessage::text(ChatRole::Assistant, "done")],
            usage: Usage::default(),
            error: None,
        },
        ToSupervisor::TurnFinished {
            turn_id: "t".into(),
            status: TurnStatus::Failed,
            final_message: String::new(),
            messages: vec![],
            usage: Usage::default(),
            error: Some(("max_steps_exceeded".into(), "too many".into())),
        },
        ToSupervisor::CommandFinished {
            exec_id: "e".into(),
            exit_code: None,
        },
        ToSupervisor::SubagentCall {
            request_id: "a".into(),
            turn_id: "t".into(),
            call_id: "c".into(),
            subagent: "reviewer".into(),
            prompt: "review".into(),
        },
    ];
    out.extend(
        every_event_kind()
            .into_iter()
            .map(|(p, _)| ToSupervisor::Event(p)),
    );
    out
}

#[test]
fn every_frame_round_trips_through_messagepack() {
    for msg in every_to_worker() {
        let frame = encode_frame(&msg, MAX_FRAME_LEN).unwrap();
        let (back, used): (ToWorker, usize) = decode_frame(&frame, MAX_FRAME_LEN).unwrap().unwrap();
        assert_eq!(used, frame.len());
        assert_eq!(back, msg);
    }
    for msg in every_to_supervisor() {
        let frame = encode_frame(&msg, MAX_FRAME_LEN).unwrap();
        let (back, used): (ToSupervisor, usize) =
            decode_frame(&frame, MAX_FRAME_LEN).unwrap().unwrap();
        assert_eq!(used, frame.len());
        assert_eq!(back, msg);
    }
}

#[test]
fn codec_reassembles_frames_split_at_every_byte() {
    let msgs = every_to_worker();
    let mut wire = BytesMut::new();
    let mut enc = FrameCodec::<ToSupervisor, ToWorker>::new();
    for m in &msgs {
        enc.encode(m.clone(), &mut wire).unwrap();
    }
    let mut dec = FrameCodec::<ToWorker, ToSupervisor>::new();
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    for byte in wire.iter() {
        buf.extend_from_slice(&[*byte]);
        while let Some(m) = dec.decode(&mut buf).unwrap() {
            got.push(m);
        }
    }
    assert_eq!(dec.decode_eof(&mut buf).unwrap(), None);
    assert_eq!(got, msgs);
}

#[test]
fn truncated_frame_at_eof_is_an_error_not_a_panic() {
    let frame = encode_frame(&ToWorker::Shutdown, MAX_FRAME_LEN).unwrap();
    let mut dec = FrameCodec::<ToWorker, ToSupervisor>::new();
    for cut in 1..frame.len() {
        let mut buf = BytesMut::from(&frame[..cut]);
        let err = dec.decode_eof(&mut buf).unwrap_err();
        assert!(
            matches!(err, CodecError::Truncated { have, .. } if have == cut),
            "{err}"
        );
    }
}

#[test]
fn oversized_frame_is_refused_from_its_header() {
    let mut dec = FrameCodec::<ToWorker, ToSupervisor>::with_max(1024);
    let mut buf = BytesMut::from(&2048u32.to_be_bytes()[..]);
    let err = dec.decode(&mut buf).unwrap_err();
    assert_eq!(
        err.to_string(),
        "frame of 2048 bytes exceeds the 1024-byte limit"
    );
    let big = ToWorker::RunCommand {
        exec_id: "e".into(),
        command: "x".repeat(4096),
        cwd: None,
    };
    let mut enc = FrameCodec::<ToSupervisor, ToWorker>::with_max(1024);
    assert!(matches!(
        enc.encode(big, &mut BytesMut::new()),
        Err(CodecError::FrameTooLarge { .. })
    ));
}

#[test]
fn garbage_payload_is_a_decode_error() {
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&3u32.to_be_bytes());
    buf.extend_from_slice(&[0xc1, 0xff, 0x00]);
    let mut dec = FrameCodec::<ToWorker, ToSupervisor>::new();
    assert!(matches!(dec.decode(&mut buf), Err(CodecError::Decode(_))));
}

#[test]
fn a_read_buffer_gives_back_what_a_large_frame_grew_it_to_once_it_is_empty() {
    let mut codec = FrameCodec::<ToWorker, ToSupervisor>::new();
    let Some(ToWorker::Configure(mut config)) = every_to_worker().into_iter().next() else {
        panic!("the first frame of every_to_worker is a configuration");
    };
    config.system_prompt = "x".repeat(64 * 1024);
    let big = ToWorker::Configure(config);
    let mut wire = BytesMut::new();
    FrameCodec::<ToSupervisor, ToWorker>::new()
        .encode(big, &mut wire)
        .unwrap();
    let mut buf = BytesMut::with_capacity(8 * 1024);
    buf.extend_from_slice(&wire[..10]);
    assert!(codec.decode(&mut buf).unwrap().is_none());
    // A frame under way keeps its buffer.
    shrink_idle(&mut buf);
    assert!(buf.capacity() >= wire.len());
    buf.extend_from_slice(&wire[10..]);
    assert!(matches!(
        codec.decode(&mut buf),
        Ok(Some(ToWorker::Configure(_)))
    ));
    shrink_idle(&mut buf);
    assert_eq!(buf.capacity(), IDLE_BUFFER);
    // What it kept is enough to read the next frame whole.
    let mut small = BytesMut::new();
    FrameCodec::<ToSupervisor, ToWorker>::new()
        .encode(ToWorker::Shutdown, &mut small)
        .unwrap();
    buf.extend_from_slice(&small);
    assert!(matches!(
        codec.decode(&mut buf),
        Ok(Some(ToWorker::Shutdown))
    ));
}
