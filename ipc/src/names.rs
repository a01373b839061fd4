//! Plain string enums used on the wire and in bundle files.
//!
//! Each one parses from exactly its listed spellings and nothing else; an unknown spelling is an error that names
//! the value and the allowed ones, which is what the manifest validator shows to users.

use std::fmt;

/// An unknown spelling of a [`names`](self) enum; says what was given and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown value \"{given}\"; expected one of {}", allowed.join(", "))]
pub struct UnknownName {
    /// The value that was given.
    pub given: String,
    /// Every accepted spelling, in declaration order.
    pub allowed: Vec<&'static str>,
}

/// Declares a string enum with exact spellings, `ALL`, `as_str`, `FromStr`, `Display` and serde impls that report
/// unknown values as [`UnknownName`].
macro_rules! name_enum {
    ($(#[$meta:meta])* pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($(#[$vmeta])* $variant),+ }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The exact wire spelling.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl std::str::FromStr for $name {
            type Err = UnknownName;
            fn from_str(s: &str) -> Result<Self, UnknownName> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err(UnknownName {
                        given: s.to_string(),
                        allowed: vec![$($text),+],
                    }),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        #[cfg(feature = "schema")]
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .enum_values(Some([$($text),+]))
                    .into()
            }
        }

        #[cfg(feature = "schema")]
        impl utoipa::ToSchema for $name {}

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

name_enum! {
    /// How the worker is confined (`sandbox.mode` in the manifest).
    pub enum SandboxMode {
        /// The session workspace is mounted read-only.
        ReadOnly => "read_only",
        /// The session workspace is mounted read-write.
        WorkspaceWrite => "workspace_write",
        /// No confinement: the worker runs on the host.
        DangerFullAccess => "danger_full_access",
    }
}

name_enum! {
    /// What confines a sandboxed worker: bubblewrap's namespaces, or Landlock and seccomp in the host's.
    pub enum SandboxBackend {
        /// bubblewrap: mount, PID, IPC, network and user namespaces of the sandbox's own.
        Bwrap => "bwrap",
        /// Landlock's file and TCP rules and a seccomp filter, with no namespace.
        Landlock => "landlock",
    }
}

name_enum! {
    /// A point of a session where hooks run, spelled as Claude Code and codex spell their hook events.
    pub enum HookEvent {
        /// A session's worker starts (a new session, a resumed one, a fork, after compaction).
        SessionStart => "SessionStart",
        /// A prompt is about to start a turn.
        UserPromptSubmit => "UserPromptSubmit",
        /// A tool call is about to run.
        PreToolUse => "PreToolUse",
        /// The rules ask for a decision on a tool call.
        PermissionRequest => "PermissionRequest",
        /// A tool call ran and succeeded.
        PostToolUse => "PostToolUse",
        /// A tool call failed.
        PostToolUseFailure => "PostToolUseFailure",
        /// The conversation is about to be compacted.
        PreCompact => "PreCompact",
        /// The conversation was compacted.
        PostCompact => "PostCompact",
        /// A subagent is about to start.
        SubagentStart => "SubagentStart",
        /// A subagent ended.
        SubagentStop => "SubagentStop",
        /// The agent is about to end its turn with an answer.
        Stop => "Stop",
        /// A turn ended with an error.
        StopFailure => "StopFailure",
        /// A session's worker stops.
        SessionEnd => "SessionEnd",
    }
}

name_enum! {
    /// Where a hook was declared, which decides who may change it and where it runs.
    pub enum HookSource {
        /// `hooks` of the bundle's agent.yaml, or its `hooks/hooks.json`: part of the bundle's digest.
        Bundle => "bundle",
        /// The project's `.service/hooks.json`, once the user trusted its content.
        Project => "project",
        /// The operator's configuration.
        Operator => "operator",
    }
}

name_enum! {
    /// Which host executables the sandbox exposes (`sandbox.system_tools_mode`).
    pub enum SystemToolsMode {
        /// Only executables the manifest lists.
        Explicit => "explicit",
        /// Also the host's /usr, /bin and /lib* read-only.
        Standard => "standard",
        /// No executable restriction.
        All => "all",
    }
}

name_enum! {
    /// A builtin tool the worker can offer to the model.
    pub enum BuiltinTool {
        /// Read a file with line numbers.
        Read => "Read",
        /// Write a whole file.
        Write => "Write",
        /// Replace an exact string in a file.
        Edit => "Edit",
        /// Run a shell command.
        Bash => "Bash",
        /// Find files by glob pattern.
        Glob => "Glob",
        /// Search file contents by regular expression.
        Grep => "Grep",
        /// Load a skill's instructions.
        Skill => "Skill",
        /// Publish the current plan.
        UpdatePlan => "UpdatePlan",
        /// Fetch a URL through the session's egress proxy, as markdown.
        WebFetch => "WebFetch",
    }
}

name_enum! {
    /// The turn executor named in `agent.yaml`.
    pub enum ExecutorKind {
        /// Reason, act with tools, observe, repeat.
        React => "react",
        /// Write a Python program that calls the tools, run it, observe its output, repeat.
        Codeact => "codeact",
    }
}

name_enum! {
    /// The memory provider named in `agent.yaml`.
    pub enum MemoryProvider {
        /// Keep the system prompt and the last N messages.
        SlidingWindow => "sliding_window",
        /// Keep the whole conversation, summarising its older turns once it nears the context window.
        Compact => "compact",
    }
}

name_enum! {
    /// What a permission rule resolves to.
    pub enum PermissionAction {
        /// Run the tool.
        Allow => "allow",
        /// Refuse the tool; the model sees a denial result.
        Deny => "deny",
        /// Pause the tool until an operator decides.
        Ask => "ask",
    }
}

name_enum! {
    /// An operator's answer to a permission request.
    pub enum ApprovalDecision {
        /// Run this call only.
        AllowOnce => "allow_once",
        /// Run it, and the same tool with the same key argument for the rest of the session.
        AllowAlways => "allow_always",
        /// Run it, and keep the rule the question offered (`project_rule`) for the session's project directory.
        AllowProject => "allow_project",
        /// Refuse it; the model sees a denial result.
        Deny => "deny",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn unknown_sandbox_mode_names_value_and_allowed_values() {
        let err = "readonly".parse::<SandboxMode>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown value \"readonly\"; expected one of read_only, workspace_write, danger_full_access"
        );
    }

    #[test]
    fn every_name_round_trips_through_json() {
        for tool in BuiltinTool::ALL {
            let json = serde_json::to_string(tool).unwrap();
            assert_eq!(json, format!("\"{}\"", tool.as_str()));
            assert_eq!(serde_json::from_str::<BuiltinTool>(&json).unwrap(), *tool);
        }
        for decision in ApprovalDecision::ALL {
            let json = serde_json::to_string(decision).unwrap();
            assert_eq!(
                serde_json::from_str::<ApprovalDecision>(&json).unwrap(),
                *decision
            );
        }
    }

    #[test]
    fn names_are_case_sensitive() {
        assert!("bash".parse::<BuiltinTool>().is_err());
        assert!("ALLOW_ONCE".parse::<ApprovalDecision>().is_err());
    }
}
