//! `batch`'s files: the tasks it reads (JSON lines, every one checked before any runs) and the results it appends
//! one line per item as each ends, which a restarted batch reads to skip what is done.

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use service_supervisor::runtime::Budget;

/// One task line as written: `{id, prompt, workspace?, verifier?, budget?}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskLine {
    id: serde_json::Value,
    prompt: String,
    #[serde(default)]
    workspace: Option<PathBuf>,
    #[serde(default)]
    verifier: Option<String>,
    #[serde(default)]
    budget: Option<Budget>,
}

/// One item of the dataset.
#[derive(Debug, Clone)]
pub(super) struct Item {
    /// Its id, as a string (a number in the file is written in decimal).
    pub(super) id: String,
    pub(super) prompt: String,
    /// The directory copied for it, resolved against the tasks file's directory.
    pub(super) workspace: Option<PathBuf>,
    /// Run in its sandbox after the agent; its exit status (or last stdout line) is the reward.
    pub(super) verifier: Option<String>,
    pub(super) budget: Option<Budget>,
}

/// Reads every task of `path`; the error lists each bad line (up to ten) with what is wrong, so that nothing runs
/// from a file that is partly wrong.
pub(super) fn read_tasks(path: &Path) -> anyhow::Result<Vec<Item>> {
    let file = std::fs::File::open(path)
        .map_err(|e| anyhow::anyhow!("cannot read --tasks {}: {e}", path.display()))?;
    let base = path.parent().unwrap_or(Path::new(".")).to_path_buf();
    let (mut items, mut problems, mut seen) = (Vec::new(), Vec::new(), HashSet::new());
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line =
            line.map_err(|e| anyhow::anyhow!("cannot read --tasks {}: {e}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        match item(&line, &base) {
            Ok(item) if !seen.insert(item.id.clone()) => {
                problems.push(format!("line {}: id \"{}\" is used twice", n + 1, item.id))
            }
            Ok(item) => items.push(item),
            Err(why) => problems.push(format!("line {}: {why}", n + 1)),
        }
    }
    if !problems.is_empty() {
        let shown: Vec<&str> = problems.iter().take(10).map(String::as_str).collect();
        anyhow::bail!(
            "--tasks {} has {} bad line(s); nothing was run. Each line is {{\"id\": …, \"prompt\": …}} with \
             optional \"workspace\", \"verifier\" and \"budget\":\n  {}",
            path.display(),
            problems.len(),
            shown.join("\n  ")
        );
    }
    if items.is_empty() {
        anyhow::bail!("--tasks {} holds no task", path.display());
    }
    Ok(items)
}

fn item(line: &str, base: &Path) -> Result<Item, String> {
    let t: TaskLine = serde_json::from_str(line).map_err(|e| e.to_string())?;
    let id = match &t.id {
        serde_json::Value::String(s) if !s.is_empty() => s.clone(),
        serde_json::Value::Number(n) => n.to_string(),
        other => return Err(format!("id {other} is not a non-empty string or a number")),
    };
    if t.prompt.trim().is_empty() {
        return Err(format!("item \"{id}\" has an empty prompt"));
    }
    let workspace = match t.workspace {
        None => None,
        Some(w) => {
            let w = base.join(w);
            match std::fs::canonicalize(&w) {
                Ok(dir) if dir.is_dir() => Some(dir),
                _ => {
                    return Err(format!(
                        "item \"{id}\": workspace {} is not a directory",
                        w.display()
                    ))
                }
            }
        }
    };
    if let Some(b) = &t.budget {
        b.check().map_err(|e| format!("item \"{id}\": {e}"))?;
    }
    Ok(Item {
        id,
        prompt: t.prompt,
        workspace,
        verifier: t.verifier.filter(|v| !v.trim().is_empty()),
        budget: t.budget,
    })
}

/// One line of the results file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct Outcome {
    pub(super) id: String,
    /// `completed`, or the code the turn (or the item's start) ended with: `budget_exceeded`,
    /// `max_steps_exceeded`, `timed_out`, `provider_unavailable`, …
    pub(super) outcome: String,
    /// From the verifier: 1 when it exited 0, else 0, unless its last stdout line is a number; null without one.
    pub(super) reward: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) session_id: Option<String>,
    #[serde(default)]
    pub(super) usage: service_ipc::Usage,
    /// At config.toml's prices; null for a model without one.
    #[serde(default)]
    pub(super) cost_usd: Option<f64>,
    /// The ATIF trajectory written for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) trajectory: Option<String>,
    /// For a git workspace: what the agent changed, as `git diff --binary` of every file (SWE-bench's field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) model_patch: Option<String>,
    /// The verifier's exit code and the end of its output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) verifier: Option<serde_json::Value>,
    /// Tries it took: more than one when the first failed for an infrastructure reason.
    pub(super) attempts: u32,
    pub(super) duration_ms: u64,
}

/// The results file, appended a whole line at a time.
pub(super) struct Results {
    file: std::sync::Mutex<std::fs::File>,
    pub(super) path: PathBuf,
}

impl Results {
    /// Opens `path` for appending, after reading the ids it holds (to skip them). A last line cut short by a
    /// killed batch is dropped: its item runs again.
    pub(super) fn open(path: &Path) -> anyhow::Result<(Results, HashSet<String>)> {
        let cannot =
            |e: std::io::Error| anyhow::anyhow!("cannot open --out {}: {e}", path.display());
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)
            .map_err(cannot)?;
        let text = std::fs::read_to_string(path).map_err(cannot)?;
        let whole = text.rfind('\n').map_or(0, |i| i + 1);
        if whole < text.len() {
            file.set_len(whole as u64).map_err(cannot)?;
        }
        let mut done = HashSet::new();
        for (n, line) in text[..whole].lines().enumerate() {
            let o: Outcome = serde_json::from_str(line).map_err(|e| {
                anyhow::anyhow!(
                    "--out {} line {} is not a batch result ({e}); name a new file, or the one an earlier batch wrote",
                    path.display(),
                    n + 1
                )
            })?;
            done.insert(o.id);
        }
        file.flush().map_err(cannot)?;
        Ok((
            Results {
                file: std::sync::Mutex::new(file),
                path: path.to_path_buf(),
            },
            done,
        ))
    }

    /// Appends `outcome` as one line, on disk before it returns.
    pub(super) fn append(&self, outcome: &Outcome) -> anyhow::Result<()> {
        let mut line = serde_json::to_vec(outcome)?;
        line.push(b'\n');
        let file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let mut f: &std::fs::File = &file;
        f.write_all(&line)
            .and_then(|()| f.sync_data())
            .map_err(|e| anyhow::anyhow!("cannot write --out {}: {e}", self.path.display()))
    }

    /// Every result in the file, for the summary.
    pub(super) fn all(&self) -> Vec<Outcome> {
        std::fs::read_to_string(&self.path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

/// The sessions a batch has made and not yet deleted (`<out>.sessions`, one id a line): a batch that is killed
/// leaves the ones of the items it was running, which the next batch on the same results deletes.
pub(super) struct Made {
    path: PathBuf,
    file: std::sync::Mutex<Option<std::fs::File>>,
}

impl Made {
    /// The list beside `out`, and the sessions a killed batch left in it.
    pub(super) fn open(out: &Path) -> (Made, Vec<String>) {
        let mut path = out.as_os_str().to_owned();
        path.push(".sessions");
        let path = PathBuf::from(path);
        let left = std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
        let made = Made {
            path,
            file: std::sync::Mutex::new(None),
        };
        (made, left)
    }

    /// Notes that session `id` was made (before it can be left behind).
    pub(super) fn add(&self, id: &str) {
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if file.is_none() {
            *file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
                .ok();
        }
        if let Some(f) = file.as_mut() {
            let _ = writeln!(f, "{id}");
        }
    }

    /// Forgets the list: every session in it is gone.
    pub(super) fn clear(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A file name for item `id`'s trajectory: the id where it is a safe name, else a safe form of it with a hash.
pub(super) fn file_name(id: &str) -> String {
    let safe: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    if safe == id && !id.starts_with('.') {
        return format!("{id}.json");
    }
    use sha2::Digest;
    let hash = hex::encode(&sha2::Sha256::digest(id.as_bytes())[..6]);
    format!("{}-{hash}.json", safe.trim_start_matches('.'))
}

/// What the whole dataset came to, from every result: the line `batch` ends with.
pub(super) fn summary(all: &[Outcome], total: usize, elapsed: std::time::Duration) -> String {
    let solved = all
        .iter()
        .filter(|o| o.reward.is_some_and(|r| r >= 1.0))
        .count();
    let rewarded: Vec<f64> = all.iter().filter_map(|o| o.reward).collect();
    let mut failed: BTreeMap<&str, usize> = BTreeMap::new();
    for o in all.iter().filter(|o| o.outcome != "completed") {
        *failed.entry(o.outcome.as_str()).or_default() += 1;
    }
    let cost = all
        .iter()
        .filter_map(|o| o.cost_usd)
        .fold(0.0, |a, b| a + b);
    let mut line = format!("{} of {total} items done", all.len());
    if !rewarded.is_empty() {
        let mean = rewarded.iter().sum::<f64>() / rewarded.len() as f64;
        line.push_str(&format!(" · {solved} solved · mean reward {mean:.3}"));
    }
    let not_completed: usize = failed.values().sum();
    if not_completed > 0 {
        let parts: Vec<String> = failed.iter().map(|(k, v)| format!("{k} {v}")).collect();
        line.push_str(&format!(
            " · {not_completed} did not complete ({})",
            parts.join(", ")
        ));
    }
    line.push_str(&format!(" · ${cost:.4} · {:.1} s", elapsed.as_secs_f64()));
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_task_lines_are_all_named_and_nothing_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.jsonl");
        std::fs::write(
            &path,
            "{\"id\": 1, \"prompt\": \"a\"}\n{\"id\": 1, \"prompt\": \"b\"}\n{\"prompt\": \"c\"}\nnot json\n\
             {\"id\": \"w\", \"prompt\": \"d\", \"workspace\": \"missing\"}\n",
        )
        .unwrap();
        let err = read_tasks(&path).unwrap_err().to_string();
        assert!(err.contains("4 bad line(s)"), "{err}");
        assert!(err.contains("line 2: id \"1\" is used twice"), "{err}");
        assert!(err.contains("line 3: missing field `id`"), "{err}");
        assert!(err.contains("line 5: item \"w\": workspace"), "{err}");
    }

    #[test]
    fn a_cut_last_result_line_is_dropped_and_its_item_runs_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.jsonl");
        let done = Outcome {
            id: "a".into(),
            outcome: "completed".into(),
            ..Default::default()
        };
        std::fs::write(
            &path,
            format!(
                "{}\n{{\"id\":\"b\",\"outc",
                serde_json::to_string(&done).unwrap()
            ),
        )
        .unwrap();
        let (results, ids) = Results::open(&path).unwrap();
        assert_eq!(ids, HashSet::from(["a".to_string()]));
        results
            .append(&Outcome {
                id: "b".into(),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(results.all().len(), 2);
    }

    #[test]
    fn item_ids_become_safe_file_names() {
        assert_eq!(file_name("task-1.a"), "task-1.a.json");
        let odd = file_name("../../etc/passwd");
        assert!(!odd.contains('/') && !odd.starts_with('.'), "{odd}");
        assert_ne!(file_name("a/b"), file_name("a_b"));
    }
}
