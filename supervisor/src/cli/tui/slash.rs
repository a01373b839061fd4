//! The TUI's slash commands (`/help`, `/new`, `/resume`, `/compact`, …), run against the session on screen.

use service_supervisor::tui::commands::{Slash, HELP};

use super::Ui;

impl Ui {
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
                        let turns = match r.turn_count {
                            1 => "1 turn".to_string(),
                            n => format!("{n} turns"),
                        };
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
            Slash::Model(spec) => {
                self.use_model(&spec)?;
                self.app.info(format!("next turns use {spec}"));
            }
            Slash::Cwd(dir) => {
                let dir = self.checked_cwd(&dir)?;
                self.app.info(format!("next turns run in {dir}"));
                self.cwd = Some(dir);
            }
            Slash::Diff => {
                if self.app.turn_diffs.is_empty() {
                    self.app
                        .info("the last turn changed no file with Write or Edit");
                } else {
                    let diffs = self.app.turn_diffs.join("");
                    self.app
                        .entries
                        .push(service_supervisor::tui::app::Entry::Diff(diffs));
                    self.app.scroll = 0;
                }
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
            Slash::Clear => self.app.entries.clear(),
            Slash::Quit => self.app.quit = true,
        }
        Ok(())
    }
}
