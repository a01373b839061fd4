//! The arguments of `service-rs run`, and how they settle: which positional is the bundle and which the prompt,
//! the user's defaults, the prompt read from stdin.

use std::path::PathBuf;

use super::backend::Backend;

impl RunArgs {
    /// The prompt: `--prompt TEXT`, or stdin for `--prompt -` and for a piped run without `--prompt`.
    pub(super) fn prompt_text(&self) -> anyhow::Result<String> {
        use std::io::{IsTerminal, Read};
        match self.prompt.as_deref() {
            Some(p) if p != "-" => return Ok(p.to_string()),
            None if std::io::stdin().is_terminal() => anyhow::bail!(
                "no prompt: pass it after the bundle (service-rs run {} \"fix the failing test\"), as --prompt TEXT, \
                 or on stdin (echo hi | service-rs run {})",
                self.bundle_ref.as_deref().unwrap_or("<bundle>"),
                self.bundle_ref.as_deref().unwrap_or("<bundle>")
            ),
            _ => {}
        }
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| anyhow::anyhow!("cannot read the prompt from stdin: {e}"))?;
        let text = text.trim_end_matches(['\n', '\r']).to_string();
        if text.trim().is_empty() {
            anyhow::bail!("the prompt on stdin is empty: pipe some text, or pass --prompt TEXT");
        }
        Ok(text)
    }
}

impl RunArgs {
    /// The session budget `--budget-tokens` and `--budget-cost` set, if either is given.
    pub(super) fn session_budget(&self) -> Option<service_supervisor::runtime::Budget> {
        (self.budget_tokens.is_some() || self.budget_cost.is_some()).then_some(
            service_supervisor::runtime::Budget {
                max_tokens: self.budget_tokens,
                max_cost_usd: self.budget_cost,
            },
        )
    }

    /// Settles which positional names the bundle and which is the prompt, and applies the user's defaults
    /// (`config.toml`): one positional is the bundle when `--prompt` is given or when it names a bundle; a word
    /// close to a bundle's name is refused as a probable typo; otherwise it is the prompt, for the
    /// default bundle (`default_bundle`, else the built-in coding agent).
    pub(super) async fn settle(
        &mut self,
        backend: &Backend,
        defaults: &service_supervisor::config_file::ConfigFile,
    ) -> anyhow::Result<()> {
        if self.model.is_none() {
            self.model = defaults.default_model.clone();
        }
        self.approvals = defaults.approvals;
        match self.decide {
            Some(Decide::Allow) => self.approve = true,
            Some(Decide::Deny) => self.deny = true,
            None => {}
        }
        if self.session.is_some()
            && self.bundle_ref.is_some()
            && (self.prompt_arg.is_some() || self.prompt.is_some())
        {
            anyhow::bail!(
                "--session continues a session of its own bundle: name no bundle, and pass the prompt alone \
                 (service-rs run --session ID \"prompt\")"
            );
        }
        match (self.bundle_ref.take(), self.prompt_arg.take()) {
            (Some(bundle), Some(prompt)) => {
                self.bundle_ref = Some(bundle);
                self.prompt = Some(prompt);
            }
            (Some(word), None) => {
                let bundle = if self.prompt.is_some() {
                    true
                } else if self.session.is_some() {
                    false
                } else {
                    names_a_bundle(backend, &word).await
                };
                if bundle {
                    self.bundle_ref = Some(word);
                } else {
                    if let Backend::Local(rt) = backend {
                        let names = super::suggest::bundles(rt.home());
                        if let Some(near) = super::suggest::near(&word, names) {
                            anyhow::bail!(
                                "\"{word}\" names no bundle; did you mean {near}? To send the word as the prompt, \
                                 pass it as --prompt {word}"
                            );
                        }
                    }
                    self.prompt = Some(word);
                }
            }
            (None, _) => {}
        }
        if self.bundle_ref.is_none() && self.session.is_none() && !self.continue_last {
            self.bundle_ref = Some(
                defaults
                    .default_bundle
                    .clone()
                    .unwrap_or_else(|| service_supervisor::bundle::builtin::DEFAULT.to_string()),
            );
        }
        Ok(())
    }
}

/// Whether `word` names a bundle: an installed one, a bundle directory, or a registry reference.
async fn names_a_bundle(backend: &Backend, word: &str) -> bool {
    if word.contains(char::is_whitespace) {
        return false;
    }
    let registry = word.contains('/') && (word.contains(':') || word.contains('@'));
    registry || std::path::Path::new(word).is_dir() || backend.bundle(word).await.is_ok()
}

/// How `run` exits, for scripts: said in `run --help` and the README.
pub(super) const EXIT_CODES: &str = "Exit codes:
  0    the turn completed
  1    the turn failed (or the run could not start it)
  3    the turn reached the bundle's max_steps
  4    the turn spent its --max-tokens or --max-cost, or the session its budget; no further model call was made
  5    output_invalid: the answer did not validate against --output-schema, also after one retry
  124  --timeout passed; what the turn started was stopped
  130  interrupted (Ctrl-C, or an interrupt from elsewhere)
  141  stdout was closed under the run (a reader such as `head` went away); the turn was interrupted";

/// `--input-format`: where a run's prompts come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum InputFormat {
    /// One prompt, from the arguments or stdin.
    #[default]
    Text,
    /// JSON lines on stdin: prompts, approvals and interrupts for one session.
    StreamJson,
}

/// `--approvals`: every permission request of a run decided up front.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum Decide {
    /// Allow every request once.
    Allow,
    /// Deny every request.
    Deny,
}

/// Arguments of `run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Bundle reference: <name>, <name>@latest, <namespace>/<name>:<version>, builtin/coder or a directory
    /// (default: the default_bundle of `service-rs config`, else builtin/coder, the built-in coding agent). With
    /// --continue, it picks the last session of that bundle. When it names no bundle, it is the prompt.
    #[arg(add = super::complete::bundles())]
    pub(super) bundle_ref: Option<String>,
    /// The prompt (or --prompt TEXT, or stdin).
    #[arg(value_name = "PROMPT", conflicts_with = "prompt")]
    pub(super) prompt_arg: Option<String>,
    /// Continue this session (its id, or the start of one) instead of creating one.
    #[arg(long, short = 's', conflicts_with = "continue_last", add = super::complete::sessions())]
    pub(super) session: Option<String>,
    /// Continue the most recently used session (of the bundle, when one is named).
    #[arg(long = "continue", short = 'c')]
    pub(super) continue_last: bool,
    /// The prompt; `-` reads it from stdin, which is also where it comes from when no prompt is given and stdin is
    /// not a terminal (`echo hi | service-rs run b`). `-p`/`--print` is the same (`service-rs -p "prompt"`).
    #[arg(long, short = 'p', visible_alias = "print")]
    pub(super) prompt: Option<String>,
    /// Also write the final answer to FILE (created or replaced) when the turn completes.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub(super) output_last_message: Option<PathBuf>,
    /// When the run ends, however it ends, write the session's trajectory to FILE as ATIF v1.8 (as `sessions export`
    /// does): each model call a step, with its tool calls, their results and its tokens.
    #[arg(long, value_name = "FILE")]
    pub(super) trajectory: Option<PathBuf>,
    /// A JSON Schema file the final answer must validate against: the model is told the schema, an answer that
    /// does not validate is sent back once with what is wrong, and then the run exits 5 (`output_invalid`). The
    /// answer printed (and written by -o) is the JSON value alone.
    #[arg(long, value_name = "FILE.json")]
    pub(super) output_schema: Option<PathBuf>,
    /// End the turn after this long (`90s`, `10m`), stopping what it started; the run exits 124.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub(super) timeout: Option<std::time::Duration>,
    /// Tokens (input plus output, as the provider reports them) the turn may spend: no model call is made once
    /// they are spent, and the run exits 4.
    #[arg(long, value_name = "N")]
    pub(super) max_tokens: Option<u64>,
    /// US dollars the turn may spend, at the prices of config.toml's `[prices]`: no model call is made once they
    /// are spent, or when the next call's prompt alone would pass them, and the run exits 4. A model with no price
    /// is held to nothing (the run says so).
    #[arg(long, value_name = "USD")]
    pub(super) max_cost: Option<f64>,
    /// Tokens the session may spend over all its turns, this one and later ones (`budget.max_tokens`): set on the
    /// new or continued session, the run exits 4 once they are spent.
    #[arg(long, value_name = "N")]
    pub(super) budget_tokens: Option<u64>,
    /// US dollars the session may spend over all its turns, at the prices of config.toml (`budget.max_cost_usd`):
    /// set on the new or continued session, the run exits 4 once they are spent.
    #[arg(long, value_name = "USD")]
    pub(super) budget_cost: Option<f64>,
    /// Decide every permission request of this run up front: `allow` or `deny` (each decision is journaled).
    #[arg(long = "approvals", value_enum, value_name = "DECISION", conflicts_with_all = ["approve", "deny"])]
    pub(super) decide: Option<Decide>,
    /// Where prompts come from: `text`, one prompt (the default), or `stream-json`, JSON lines on stdin (prompts,
    /// approvals, interrupts, as Claude Code's stream-json input) for one session until stdin closes, every event
    /// going out as a JSON line on stdout.
    #[arg(
        long,
        value_enum,
        default_value_t,
        value_name = "FORMAT",
        conflicts_with_all = ["prompt", "prompt_arg", "output_schema", "output_last_message", "quiet"]
    )]
    pub(super) input_format: InputFormat,
    /// Stream every event as a JSON line on stdout instead of printing the answer.
    #[arg(long)]
    pub(super) json: bool,
    /// Write the answer as the model sent it, control characters included, when stdout is not a terminal (by
    /// default they are shown as escapes such as `^[`, so that no answer can drive the terminal).
    #[arg(long)]
    pub(super) raw: bool,
    /// Describe every event on stderr as it happens, besides what the agent did.
    #[arg(long, short, conflicts_with = "quiet")]
    pub(super) verbose: bool,
    /// Print nothing but the answer: no progress, no list of what the agent did, no usage line.
    #[arg(long, short, conflicts_with = "json")]
    pub(super) quiet: bool,
    /// Working directory of a new session (default: the current directory); of this turn only when continuing
    /// one. With --remote, a directory of the server's under one of its --workspace-root.
    #[arg(long)]
    pub(super) cwd: Option<PathBuf>,
    /// What a new session works in when --cwd is not given: `cwd`, the current directory (the default; with
    /// --remote, the server's fresh workspace), or `fresh`, an empty directory of the session's own.
    #[arg(long, value_enum, conflicts_with = "cwd")]
    pub(super) workspace: Option<super::workspace::WorkspaceChoice>,
    /// Model override as provider/name, e.g. scripted/demo.
    #[arg(long)]
    pub(super) model: Option<String>,
    /// Run the worker on the host with no confinement.
    #[arg(long)]
    pub(super) dangerous_sandbox_mode: bool,
    /// When running as root: the host user sandboxes run as where root owns the session's directory (a name,
    /// uid or uid:gid; default nobody; also SERVICE_SANDBOX_USER). `root` gives sandboxes root's rights.
    #[arg(long, value_name = "USER")]
    pub(super) sandbox_user: Option<String>,
    /// Fixed address for a host the sandbox reaches through the egress proxy, as curl's --resolve: HOST:PORT:ADDR
    /// (repeatable).
    #[arg(long, value_name = "HOST:PORT:ADDR")]
    pub(super) resolve: Vec<String>,
    /// Allow every permission request of this run without asking.
    #[arg(long, conflicts_with = "deny")]
    pub(super) approve: bool,
    /// Deny every permission request of this run without asking.
    #[arg(long)]
    pub(super) deny: bool,
    /// How requests are answered without --approve or --deny (`approvals` of `service-rs config`).
    #[arg(skip)]
    pub(super) approvals: service_supervisor::config_file::Approvals,
}
