//! `init`, `build`, `inspect` and `bundles`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use service_supervisor::bundle::{self, oci, store, template, BundleInfo};
use service_supervisor::ServiceHome;

pub fn init(
    dir: &Path,
    force: bool,
    starter: template::Starter,
    executor: service_ipc::ExecutorKind,
) -> anyhow::Result<ExitCode> {
    let id = template::init(dir, force, starter, executor)?;
    println!(
        "Created bundle \"{id}\" in {} (model {}, executor {executor})",
        dir.display(),
        starter.model()
    );
    if let Some(var) = starter
        .key_variable()
        .filter(|v| std::env::var_os(v).is_none())
    {
        println!(
            "Note: {var} is not set; export it before you run the bundle, or start from an offline one with \
             `service-rs init --provider scripted`."
        );
    }
    if starter == template::Starter::Local {
        println!("Note: the model is served by an OpenAI-compatible server at http://127.0.0.1:11434/v1 (Ollama's); agent.yaml says how to point it elsewhere.");
    }
    println!("Next:\n  service-rs build {}\n  service-rs run {id} --prompt \"What is in this workspace?\"", dir.display());
    Ok(ExitCode::SUCCESS)
}

/// `init --template NAME`: a built-in bundle written out as a project.
pub fn init_from(dir: &Path, force: bool, name: &str) -> anyhow::Result<ExitCode> {
    let id = template::init_from_builtin(dir, force, name)?;
    println!(
        "Created bundle \"{id}\" in {} from builtin/{name}",
        dir.display()
    );
    println!(
        "Next:\n  service-rs build {}      # installs it as local/{id}\n  service-rs run {id} \"fix the failing test\"",
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

pub fn build(home: &ServiceHome, dir: &Path, output: Option<&Path>) -> anyhow::Result<ExitCode> {
    match output {
        Some(out) => {
            let digest = oci::write_layout(dir, out)?;
            println!(
                "Wrote OCI layout to {} (manifest digest {digest})",
                out.display()
            );
        }
        None => {
            let bundle = store::install(home, dir)?;
            println!(
                "Installed {} at {} ({})",
                bundle.reference(),
                bundle.root.display(),
                bundle.digest
            );
            for warning in service_supervisor::bundle::a2a_agents::unreachable(
                &bundle.agent.a2a_agents,
                &bundle.manifest.sandbox.permissions.network,
            ) {
                eprintln!("warning: {warning}");
            }
            if bundle.agent.memory.compacts_ahead()
                && service_supervisor::runtime::compaction::window_of(&bundle.agent.model.to_ref())
                    .is_none()
            {
                eprintln!(
                    "warning: memory.provider compact needs the model's context window to compact before a turn; \
                     set model.config.context_window (until then only an overflow or `sessions compact` compacts)"
                );
            }
            let asked = host_variables(&bundle.info());
            if !asked.is_empty() {
                eprintln!(
                    "warning: this bundle asks for host variables {} (env_from_host, token_env); a run passes only those the \
                     operator lists in {} or `serve --pass-env`",
                    asked.join(", "),
                    service_supervisor::providers::keys::PASS_ENV
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The host variables a bundle asks for (MCP servers' `env_from_host`, A2A agents' `token_env`), sorted, once each.
fn host_variables(info: &BundleInfo) -> Vec<String> {
    let names: std::collections::BTreeSet<&String> = info
        .mcp_servers
        .values()
        .flat_map(|s| &s.env_from_host)
        .chain(info.a2a_agents.iter().filter_map(|a| a.token_env.as_ref()))
        .collect();
    names.into_iter().cloned().collect()
}

pub fn inspect(
    home: &ServiceHome,
    reference: &str,
    json: bool,
    cwd: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    let bundle = bundle::resolve(home, reference)?;
    // What a session of it in `cwd` would add to its system prompt.
    let read = match cwd {
        Some(cwd) => {
            let dir = std::fs::canonicalize(cwd)
                .with_context(|| format!("--cwd {}: not a directory", cwd.display()))?;
            Some(
                service_supervisor::project_instructions::ProjectInstructions::of_bundle(
                    &bundle,
                    &dir,
                    &[],
                ),
            )
        }
        None => None,
    };
    let manifest = service_supervisor::registry::manifest_digest(&bundle)?;
    let pulled = bundle::reference::pulled_from(home, &bundle.reference());
    if json {
        let mut value = serde_json::to_value(bundle.info())?;
        value["manifest_digest"] = serde_json::json!(manifest);
        value["pulled_from"] = serde_json::json!(pulled);
        if let Some(read) = &read {
            value["project_instructions"] = serde_json::json!(read.paths());
        }
        value["hooks"] = serde_json::json!(bundle.agent.hooks);
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", describe(&bundle.info()));
    println!(
        "  {:<12} {manifest} (in registries, exports and layouts: pull by this one)",
        "manifest"
    );
    if !pulled.is_empty() {
        println!("  {:<12} {}", "pulled from", pulled.join(", "));
    }
    if bundle.agent.model.provider == service_supervisor::providers::choice::AUTO {
        let chosen =
            super::tokio()?.block_on(service_supervisor::providers::choice::choose(home.root()));
        let now = match chosen {
            Some(m) => format!(
                "{}/{} (chosen from what this machine has)",
                m.provider, m.name
            ),
            None => service_supervisor::providers::choice::NO_MODEL.to_string(),
        };
        println!("  {:<12} {now}", "model now");
    }
    // A bundle's hooks run in its sessions' sandboxes: a user sees them before running it.
    let hooks = bundle::hooks::specs(&bundle.agent.hooks, service_ipc::HookSource::Bundle);
    for (i, h) in hooks.iter().enumerate() {
        let matcher = h
            .matcher
            .as_deref()
            .map(|m| format!(" [{m}]"))
            .unwrap_or_default();
        let label = if i == 0 { "hooks" } else { "" };
        println!("  {label:<12} {}{matcher}: {}", h.event, h.command);
    }
    if let Some(read) = &read {
        println!(
            "  {:<12} {}",
            "instructions",
            instructions_list(read, bundle.agent.project_instructions)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Which project instructions were read, for `inspect --cwd` and `doctor`.
pub(super) fn instructions_list(
    read: &service_supervisor::project_instructions::ProjectInstructions,
    enabled: bool,
) -> String {
    match (enabled, read.paths()) {
        (false, _) => "off (project_instructions: false in agent.yaml)".to_string(),
        (true, paths) if paths.is_empty() => {
            "none (no AGENTS.md, CLAUDE.md or .service/instructions.md)".to_string()
        }
        (true, paths) => paths.join(", "),
    }
}

/// Arguments of `bundles`; without a subcommand it lists them.
#[derive(Debug, clap::Args)]
pub struct BundlesArgs {
    #[command(subcommand)]
    command: Option<BundlesCommand>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Subcommand)]
enum BundlesCommand {
    /// List installed bundles.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Remove an installed bundle.
    Remove {
        /// Bundle reference: <name>, <name>@<version>, <namespace>/<name>:<version>.
        #[arg(add = super::complete::bundles())]
        bundle_ref: String,
        /// Stop the live sessions that use it instead of refusing.
        #[arg(long)]
        force: bool,
    },
}

impl BundlesArgs {
    /// `Some((reference, force))` for `remove`; None for a listing (with its --json).
    pub(super) fn removal(&self) -> Result<(&str, bool), bool> {
        match &self.command {
            Some(BundlesCommand::Remove { bundle_ref, force }) => Ok((bundle_ref, *force)),
            Some(BundlesCommand::List { json }) => Err(*json || self.json),
            None => Err(self.json),
        }
    }
}

pub fn run(home: ServiceHome, args: BundlesArgs) -> anyhow::Result<ExitCode> {
    match args.removal() {
        Err(json) => list(&home, json),
        Ok((reference, force)) => {
            let rt = super::runtime(home, false, false, &[], None)?;
            let removed = super::tokio()?.block_on(async {
                let removed = rt.remove_bundle(reference, force).await;
                rt.shutdown("the command ended").await;
                removed
            })?;
            println!("removed {}", removed.reference);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `export`: the archive to the file `out`, or to stdout for `-` (the summary then goes to stderr).
pub fn export(home: &ServiceHome, reference: &str, out: &Path) -> anyhow::Result<ExitCode> {
    let bundle = bundle::resolve(home, reference)?;
    if out == Path::new("-") {
        let (digest, bytes) = bundle::oci_archive::export_bytes(&bundle)?;
        archive_to_stdout(&bytes)?;
        eprintln!(
            "Wrote {} to stdout (manifest digest {digest})",
            bundle.reference()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let digest = bundle::oci_archive::export(&bundle, out)?;
    println!(
        "Wrote {} to {} (manifest digest {digest})",
        bundle.reference(),
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Writes an archive to stdout (`export -o -`), unless stdout is a terminal.
pub(super) fn archive_to_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::{IsTerminal, Write};
    if std::io::stdout().is_terminal() {
        anyhow::bail!(
            "export -o - writes a tar archive to stdout, which is a terminal: redirect it (> bundle.tar) or pipe it"
        );
    }
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(bytes)
        .and_then(|()| stdout.flush())
        .context("cannot write the archive to stdout")
}

pub fn import(home: &ServiceHome, archive: &Path) -> anyhow::Result<ExitCode> {
    let installed = bundle::oci_archive::import(home, archive)?;
    println!(
        "Installed {} at {} ({})",
        installed.reference(),
        installed.root.display(),
        installed.digest
    );
    Ok(ExitCode::SUCCESS)
}

pub fn list(home: &ServiceHome, json: bool) -> anyhow::Result<ExitCode> {
    let mut infos = Vec::new();
    for loaded in store::list(home)? {
        match loaded {
            Ok(b) => infos.push(b.info()),
            Err(e) => eprintln!("warning: skipping a damaged install: {e}"),
        }
    }
    print_list(&infos, json)
}

/// `inspect` output: a summary, or the full metadata as JSON.
pub fn print_info(info: &BundleInfo, json: bool) -> anyhow::Result<ExitCode> {
    if json {
        println!("{}", serde_json::to_string_pretty(info)?);
    } else {
        print!("{}", describe(info));
    }
    Ok(ExitCode::SUCCESS)
}

/// `bundles` output: a table, or JSON.
pub fn print_list(infos: &[BundleInfo], json: bool) -> anyhow::Result<ExitCode> {
    if json {
        println!("{}", serde_json::to_string_pretty(infos)?);
        return Ok(ExitCode::SUCCESS);
    }
    if infos.is_empty() {
        println!("No bundles installed. Build one with `service-rs build <dir>`.");
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<[String; 5]> = infos
        .iter()
        .map(|i| {
            [
                i.namespace.clone().unwrap_or_default(),
                i.id.clone(),
                i.version.clone(),
                i.digest
                    .trim_start_matches("sha256:")
                    .chars()
                    .take(12)
                    .collect(),
                format!("{}/{}", i.model.provider, i.model.name),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            ["NAMESPACE", "NAME", "VERSION", "CONTENT DIGEST", "MODEL"],
            &rows
        )
    );
    Ok(ExitCode::SUCCESS)
}

/// Left-aligned columns separated by two spaces.
pub fn table<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(padded.join("  ").trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

fn describe(i: &BundleInfo) -> String {
    let tools: Vec<&str> = i.tools.iter().map(|t| t.as_str()).collect();
    let network = if i.sandbox.permissions.network_enabled() {
        "on"
    } else {
        "off"
    };
    let mut out = format!("{} {} ({})\n", i.id, i.version, i.reference);
    let mut field = |k: &str, v: String| out.push_str(&format!("  {k:<12} {v}\n"));
    field("name", i.name.clone());
    if let Some(d) = &i.description {
        field("description", d.clone());
    }
    field("path", i.path.display().to_string());
    field(
        "content",
        format!("{} (digest of the files; bundles lists it)", i.digest),
    );
    field("model", format!("{}/{}", i.model.provider, i.model.name));
    field("executor", i.executor.to_string());
    field(
        "memory",
        format!("{} (window {})", i.memory.provider, i.memory.window),
    );
    field("tools", tools.join(", "));
    field(
        "sandbox",
        format!(
            "{}, network {network}, system tools {}, cpu {}, memory {} MiB",
            i.sandbox.mode,
            i.sandbox.system_tools_mode,
            i.sandbox.resources.cpu,
            i.sandbox.resources.memory_mb
        ),
    );
    field(
        "skills",
        if i.skills.is_empty() {
            "none".into()
        } else {
            i.skills.join(", ")
        },
    );
    let servers: Vec<String> = i
        .mcp_servers
        .iter()
        .map(|(name, spec)| format!("{name} ({})", spec.summary()))
        .collect();
    field(
        "mcp servers",
        if servers.is_empty() {
            "none".into()
        } else {
            servers.join(", ")
        },
    );
    if !i.a2a_agents.is_empty() {
        let agents: Vec<String> = i
            .a2a_agents
            .iter()
            .map(|a| format!("{} ({})", a.name, a.url))
            .collect();
        field("a2a agents", agents.join(", "));
    }
    if !i.subagents.is_empty() {
        use service_supervisor::bundle::subagents::SubagentEntry;
        let subagents: Vec<String> = i
            .subagents
            .iter()
            .map(|s| match s {
                SubagentEntry::Any(_) => "any installed bundle (\"*\")".to_string(),
                SubagentEntry::Named(s) => format!("{} ({})", s.name, s.bundle),
            })
            .collect();
        field("subagents", subagents.join(", "));
    }
    let asked = host_variables(i);
    if !asked.is_empty() {
        field(
            "host env",
            format!(
                "{} (passed only if the operator lists them)",
                asked.join(", ")
            ),
        );
    }
    out
}
