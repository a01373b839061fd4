//! The TUI's slash commands (`/help`, `/new`, `/resume`, `/compact`, …), run against the session on screen.

use service_supervisor::tui::commands::{BudgetArg, Slash, HELP};

use super::super::backend::Backend;
use super::Ui;

/// What `/init` asks of the agent.
const INIT_PROMPT: &str = "Write an AGENTS.md at the root of this project for coding agents that will work in it: \
how to build it, how to run its tests (the narrowest first), its layout, and its conventions. Read the project \
first (README, build files, CI settings, a few source files). If an AGENTS.md exists, improve it instead. Keep it \
short and factual.";

impl Ui {
    /// The prompts of the session on screen's turns, in order.
    async fn prompts(&self) -> anyhow::Result<Vec<String>> {
        let events = self.backend.journal(&self.app.session_id).await?;
        Ok(events
            .into_iter()
            .filter_map(|e| match e.payload {
                service_ipc::EventPayload::TurnStarted { prompt, .. } => Some(prompt),
                _ => None,
            })
            .collect())
    }

    /// Rewinds the session on screen to before `turn`: its files, its conversation, or both. The session's
    /// `session_rewound` event says what was done.
    pub(super) async fn rewind(
        &mut self,
        turn: u64,
        files: bool,
        conversation: bool,
    ) -> anyhow::Result<()> {
        self.backend
            .rewind(&self.app.session_id, turn, files, conversation, false)
            .await?;
        Ok(())
    }

    /// `/diff`: what the last turn changed in the workspace, from its checkpoints (commands included); without
    /// them, its Write and Edit calls' diffs.
    async fn show_diff(&mut self) -> anyhow::Result<()> {
        let turns = self.prompts().await?.len() as u64;
        let mut diffs = String::new();
        let changes = match turns {
            0 => serde_json::Value::Null,
            n => self.backend.changes(&self.app.session_id, n).await?,
        };
        if changes["checkpointed"] == true {
            for c in changes["changes"].as_array().into_iter().flatten() {
                match c["diff"].as_str() {
                    Some(d) if !d.is_empty() => diffs.push_str(d),
                    _ => diffs.push_str(&format!(
                        "{} {} (binary, a link, or too large to show)\n",
                        c["change"].as_str().unwrap_or("changed"),
                        c["path"].as_str().unwrap_or_default()
                    )),
                }
            }
        } else {
            diffs = self.app.turn_diffs.join("");
        }
        if diffs.is_empty() {
            self.app.info("the last turn changed no file");
        } else {
            self.app
                .entries
                .push(service_supervisor::tui::app::Entry::Diff(diffs));
            self.app.scroll = 0;
        }
        Ok(())
    }

    pub(super) async fn slash(&mut self, slash: Slash) -> anyhow::Result<()> {
        match slash {
            Slash::Help => {
                let text: Vec<String> = HELP.iter().map(|(c, h)| format!("{c:<24} {h}")).collect();
                self.app.info(format!(
                    "{}\n!<command>               run a command in the session sandbox (not a turn)\n\
                     Ctrl-R                   show or hide reasoning",
                    text.join("\n")
                ));
            }
            Slash::New => {
                let bundle = self.bundle_ref.clone();
                self.new_session(&bundle).await?;
            }
            Slash::Bundle(reference) => self.new_session(&reference).await?,
            Slash::Sessions => {
                let list: Vec<String> = self
                    .backend
                    .sessions()
                    .await?
                    .iter()
                    .map(|r| {
                        let turns = service_supervisor::usage_line::count(r.turn_count, "turn");
                        format!(
                            "{}  {}  {turns}  {}",
                            r.id,
                            r.bundle.reference,
                            r.title.as_deref().unwrap_or("")
                        )
                    })
                    .collect();
                self.app.info(if list.is_empty() {
                    "no sessions".into()
                } else {
                    list.join("\n")
                });
            }
            Slash::Resume(Some(id)) => self.resume(&id).await?,
            Slash::Resume(None) => self.open_picker().await?,
            Slash::Model(Some(spec)) => {
                // Said now, not at the next turn's first model call: a server holds its own keys.
                if let Backend::Local(_) = self.backend {
                    let provider = spec.split_once('/').map_or("", |(p, _)| p);
                    if let Some(var) = service_supervisor::providers::choice::missing_key(provider)
                    {
                        anyhow::bail!(
                            "/model {spec}: {var} is not set in the environment of service-rs; set it and start \
                             the TUI again, or pick another model (/model shows the ones this machine offers)"
                        );
                    }
                }
                self.use_model(&spec)?;
                self.app.info(format!("next turns use {spec}"));
            }
            Slash::Model(None) => {
                let mut models = match &self.backend {
                    Backend::Local(rt) => {
                        service_supervisor::providers::choice::offered(rt.home().root())
                    }
                    Backend::Remote(_) => Vec::new(),
                };
                let bundle = self.backend.bundle(&self.bundle_ref).await?;
                let own = format!("{}/{}", bundle.model.provider, bundle.model.name);
                for m in [self.app.model.clone(), own] {
                    if !m.is_empty() && !models.contains(&m) {
                        models.insert(0, m);
                    }
                }
                self.app.info(format!(
                    "model: {} (↑↓ and Enter to switch, Esc keeps it)",
                    self.app.model
                ));
                self.app.pick_model(models);
            }
            Slash::Status => {
                let (used, window) = self.app.context;
                let context = match (used, window) {
                    (Some(u), Some(w)) => format!("{u} of {w} tokens ({}%)", u * 100 / w.max(1)),
                    (Some(u), None) => format!("{u} tokens"),
                    _ => "no model call yet".to_string(),
                };
                let instructions = if self.app.instructions.is_empty() {
                    "none read".to_string()
                } else {
                    self.app.instructions.join(", ")
                };
                self.app.info(format!(
                    "session    {}\nbundle     {}\nmodel      {}\ndirectory  {}\nsandbox    {}\n\
                     instructions {instructions}\ncontext    {context}",
                    self.app.session_id,
                    self.app.bundle,
                    self.app.model,
                    self.app.workspace,
                    self.app.sandbox
                ));
            }
            Slash::Mcp => {
                let text = if self.app.mcp.is_empty() {
                    "no MCP server has started in this session (they start with its first turn)"
                        .to_string()
                } else {
                    self.app
                        .mcp
                        .iter()
                        .map(|(server, tools)| format!("{server}: {}", tools.join(", ")))
                        .collect::<Vec<_>>()
                        .join("\n")
                };
                self.app.info(text);
            }
            Slash::Init => {
                self.prompt(INIT_PROMPT.to_string());
            }
            Slash::Cwd(dir) => {
                let dir = self.checked_cwd(&dir)?;
                self.app.info(format!("next turns run in {dir}"));
                self.cwd = Some(dir);
            }
            Slash::Diff => self.show_diff().await?,
            Slash::Rewind(Some(turn)) => {
                self.app.confirm = Some(service_supervisor::tui::editing::Confirm::Rewind(turn))
            }
            Slash::Rewind(None) => {
                let prompts = self.prompts().await?;
                if prompts.is_empty() {
                    self.app.info("this session has no turns to rewind");
                } else {
                    self.app.picker =
                        Some(service_supervisor::tui::picker::Picker::turns(&prompts));
                }
            }
            Slash::Fork(turn) => {
                let done = self.backend.fork(&self.app.session_id, turn).await?;
                let child = done["session"]["id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let parent = self.app.session_id.clone();
                self.attach(&child).await?;
                self.app.info(format!(
                    "forked {parent} into {child} ({} inherited, workspace {})",
                    service_supervisor::usage_line::count(
                        done["turns"].as_u64().unwrap_or(0),
                        "turn"
                    ),
                    done["workspace"].as_str().unwrap_or_default()
                ));
            }
            Slash::Compact(focus) => {
                // The model writes the summary; its `context_compacted` event shows when it is done.
                let (backend, id) = (self.backend.clone(), self.app.session_id.clone());
                self.app
                    .info("compacting: the model is summarising the older turns");
                self.background(async move {
                    let done = backend.compact(&id, focus.as_deref()).await?;
                    if done["compacted"] != true {
                        anyhow::bail!("nothing to compact: no turns older than the ones kept");
                    }
                    Ok(None)
                });
            }
            Slash::Cost => {
                let record = self.backend.find_session(&self.app.session_id).await?;
                self.app
                    .info(cost_line(&record, &self.app.model, &self.prices));
            }
            Slash::Budget(arg) => {
                let id = self.app.session_id.clone();
                let record = match arg {
                    BudgetArg::Show => self.backend.find_session(&id).await?,
                    BudgetArg::Off => self.backend.set_budget(&id, None).await?,
                    BudgetArg::Set { tokens, usd } => {
                        let budget = service_supervisor::runtime::Budget {
                            max_tokens: tokens,
                            max_cost_usd: usd,
                        };
                        self.backend.set_budget(&id, Some(budget)).await?
                    }
                };
                self.app.info(budget_line(&record));
            }
            Slash::Clear => self.app.entries.clear(),
            Slash::Quit => self.app.quit = true,
        }
        Ok(())
    }
}

/// What `/cost` says of `record`: its tokens, steps and tool calls, and their cost at the price config.toml gives
/// `model` (the session's current one), when it gives one.
fn cost_line(
    record: &service_supervisor::runtime::SessionRecord,
    model: &str,
    prices: &std::collections::BTreeMap<String, service_supervisor::tenancy::usage::Price>,
) -> String {
    let mut line = format!(
        "this session: {} · {} tool call{}",
        service_supervisor::usage_line::describe(&record.usage, None),
        record.activity.tool_calls,
        if record.activity.tool_calls == 1 {
            ""
        } else {
            "s"
        }
    );
    match prices.get(model) {
        Some(price) => {
            let mut spent = service_supervisor::tenancy::usage::Spent::default();
            spent.count(&record.usage);
            line.push_str(&format!(" · ${:.4} at {model}'s price", price.cost(&spent)));
        }
        None => line.push_str(&format!(
            " · no price for {model}: add [prices.\"{model}\"] input and output (dollars per million tokens) to \
             config.toml"
        )),
    }
    line
}

/// What `/budget` says of `record`: its budget and what it spent of it.
fn budget_line(record: &service_supervisor::runtime::SessionRecord) -> String {
    let Some(budget) = record.budget else {
        return "no budget: this session may spend without limit (/budget 200000 $1.50 sets one)"
            .into();
    };
    let u = &record.usage;
    let spent = u.input_tokens.unwrap_or(0) + u.output_tokens.unwrap_or(0);
    let mut parts = Vec::new();
    if let Some(max) = budget.max_tokens {
        parts.push(format!("{spent} of {max} tokens"));
    }
    if let Some(max) = budget.max_cost_usd {
        parts.push(format!("${:.4} of ${max:.4}", record.cost_usd));
    }
    format!(
        "budget: {} spent; no model call is made past it (/budget off lifts it)",
        parts.join(" · ")
    )
}
