//! A subagent's confinement, never wider than its parent's: the child bundle's sandbox cut down to the parent's.
//!
//! Mode, system tools and resources take the narrower of the two. The network list is the intersection: a child
//! entry stays where a parent entry also allows it, as the more specific of the two (`*.example.org` and
//! `api.example.org:443` give `api.example.org:443`). A parent that may not ask for hosts off its list makes the
//! child's `permissions.network` `deny` too.

use service_ipc::{PermissionAction, SandboxMode, SystemToolsMode};

use crate::bundle::manifest::SandboxSpec;
use crate::bundle::Bundle;
use crate::runtime::record::ParentLink;

/// Children of one parent that run at once; further calls wait for one of them to end.
pub(crate) const MAX_RUNNING: usize = 4;

/// `bundle` cut down to what `link` allows.
pub(crate) fn narrowed(mut bundle: Bundle, link: &ParentLink) -> Bundle {
    narrow_sandbox(&mut bundle.manifest.sandbox, &link.ceiling);
    if !link.network_ask {
        bundle.agent.permissions.network = PermissionAction::Deny;
    }
    if let Some(n) = link.max_steps {
        bundle.agent.max_steps = n;
    }
    bundle
}

fn narrow_sandbox(child: &mut SandboxSpec, parent: &SandboxSpec) {
    let mode_rank = |m: SandboxMode| match m {
        SandboxMode::ReadOnly => 0,
        SandboxMode::WorkspaceWrite => 1,
        SandboxMode::DangerFullAccess => 2,
    };
    if mode_rank(parent.mode) < mode_rank(child.mode) {
        child.mode = parent.mode;
    }
    let tools_rank = |m: SystemToolsMode| match m {
        SystemToolsMode::Explicit => 0,
        SystemToolsMode::Standard => 1,
        SystemToolsMode::All => 2,
    };
    match (child.system_tools_mode, parent.system_tools_mode) {
        (SystemToolsMode::Explicit, SystemToolsMode::Explicit) => {
            child.executables.retain(|e| parent.executables.contains(e));
        }
        (c, p) if tools_rank(p) < tools_rank(c) => {
            child.system_tools_mode = p;
            child.executables = parent.executables.clone();
        }
        _ => {}
    }
    child.resources.cpu = child.resources.cpu.min(parent.resources.cpu);
    child.resources.memory_mb = child.resources.memory_mb.min(parent.resources.memory_mb);
    child.permissions.network = network(&child.permissions.network, &parent.permissions.network);
}

/// The hosts both lists allow.
fn network(child: &[String], parent: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in child {
        for p in parent {
            if let Some(both) = intersect(c, p) {
                if !out.contains(&both) {
                    out.push(both);
                }
            }
        }
    }
    out
}

/// The ports of a network entry: none given (80 and 443), `*`, or one.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ports {
    Web,
    Any,
    One(u16),
}

fn split(entry: &str) -> (&str, Ports) {
    match entry.rsplit_once(':') {
        Some((host, "*")) if !host.is_empty() => (host, Ports::Any),
        Some((host, port)) if !host.is_empty() && !host.ends_with(':') => match port.parse() {
            Ok(p) => (host, Ports::One(p)),
            Err(_) => (entry, Ports::Web),
        },
        _ => (entry, Ports::Web),
    }
}

/// The entry both `a` and `b` allow, if any.
fn intersect(a: &str, b: &str) -> Option<String> {
    if a == "*" {
        return Some(b.to_string());
    }
    if b == "*" {
        return Some(a.to_string());
    }
    let (ha, pa) = split(a);
    let (hb, pb) = split(b);
    let host = if covers(ha, hb) {
        hb
    } else if covers(hb, ha) {
        ha
    } else {
        return None;
    };
    let ports = match (pa, pb) {
        (Ports::Any, p) | (p, Ports::Any) => p,
        (Ports::Web, Ports::Web) => Ports::Web,
        (Ports::Web, Ports::One(p)) | (Ports::One(p), Ports::Web) if p == 80 || p == 443 => {
            Ports::One(p)
        }
        (Ports::One(x), Ports::One(y)) if x == y => Ports::One(x),
        _ => return None,
    };
    Some(match ports {
        Ports::Web => host.to_string(),
        Ports::Any => format!("{host}:*"),
        Ports::One(p) => format!("{host}:{p}"),
    })
}

/// Whether host pattern `wide` allows every host `narrow` does: the same name, or `*.domain` over a name (or a
/// pattern) under that domain.
fn covers(wide: &str, narrow: &str) -> bool {
    let (wide, narrow) = (wide.to_ascii_lowercase(), narrow.to_ascii_lowercase());
    wide == narrow
        || wide
            .strip_prefix('*')
            .is_some_and(|suffix| suffix.starts_with('.') && narrow.ends_with(suffix))
}

#[cfg(test)]
mod tests {
    use super::network;

    fn n(child: &[&str], parent: &[&str]) -> Vec<String> {
        let own = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        network(&own(child), &own(parent))
    }

    #[test]
    fn the_child_keeps_only_what_the_parent_allows_as_the_narrower_entry() {
        assert_eq!(n(&["a.org", "b.org"], &["a.org"]), ["a.org"]);
        assert_eq!(n(&["*"], &["a.org:443"]), ["a.org:443"]);
        assert_eq!(n(&["a.org", "c.net"], &["*"]), ["a.org", "c.net"]);
        assert_eq!(
            n(&["api.example.org"], &["*.example.org:443"]),
            ["api.example.org:443"]
        );
        assert_eq!(
            n(&["*.example.org"], &["api.example.org"]),
            ["api.example.org"]
        );
        assert_eq!(n(&["127.0.0.1:5000"], &["127.0.0.1:*"]), ["127.0.0.1:5000"]);
        assert!(n(&["127.0.0.1:5000"], &["127.0.0.1"]).is_empty());
        assert!(n(&["a.org"], &[]).is_empty());
        assert!(n(&["evil.org"], &["*.org.example"]).is_empty());
    }
}
