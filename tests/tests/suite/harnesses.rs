//! The evaluation harness adapters in `adapters/`, driven by the real packages: an Inspect AI eval, run by Inspect's
//! own CLI with its `local` sandbox, whose solver is the `service_rs` agent running the real binary, scored by what
//! the agent left in the sample's directory.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::support::{binary, write_bundle, Env};

/// The evaluation tools' Python (`.ci/eval-python`); None (the test says it is skipped) without it.
fn eval_python() -> Option<PathBuf> {
    super::support::gated("SERVICE_TEST_EVAL_PYTHON", ".ci/eval-python")
}

fn adapters() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../adapters")
}

const TASK: &str = r#"
import os
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import Score, Target, accuracy, scorer
from inspect_ai.util import sandbox
from service_rs_inspect import service_rs

@scorer(metrics=[accuracy()])
def answer_file():
    async def score(state, target: Target):
        try:
            text = await sandbox().read_file("answer.txt")
        except FileNotFoundError:
            text = ""
        return Score(value="C" if text.strip() == target.text else "I", answer=text.strip())
    return score

@task
def answers():
    agent = service_rs(
        bundle=os.environ["BUNDLE"],
        binary=os.environ["SERVICE_RS"],
        sandbox_user="root" if os.geteuid() == 0 else None,
        env={"SERVICE_HOME": os.environ["SERVICE_HOME"]},
    )
    samples = [Sample(input="please write 42", target="42"), Sample(input="say hello", target="42")]
    return Task(dataset=samples, solver=agent, scorer=answer_file(), sandbox="local")
"#;

#[test]
fn an_inspect_eval_runs_the_bundle_in_its_local_sandbox_and_scores_what_it_left() {
    let Some(python) = eval_python() else { return };
    let env = Env::new();
    let bundle = env.path("bundle");
    write_bundle(
        &bundle,
        r#"{turns: [
          {when: "write 42", replies: [{tool_calls: [{name: "Bash", arguments: {command: "echo 42 > answer.txt"}}]}, {text: "wrote it"}]},
          {replies: [{text: "hello"}]},
        ]}"#,
        "",
        "workspace_write",
    );
    std::fs::write(env.path("task.py"), TASK).unwrap();
    let inspect = python.with_file_name("inspect");
    let out = std::process::Command::new(&inspect)
        .args([
            "eval",
            "task.py",
            "--model",
            "mockllm/model",
            "--log-dir",
            "logs",
        ])
        .args([
            "--log-format",
            "json",
            "--display",
            "plain",
            "--no-log-realtime",
        ])
        .current_dir(env.work.path())
        .env("PYTHONPATH", adapters().join("inspect_ai"))
        .env("BUNDLE", &bundle)
        .env("SERVICE_RS", binary())
        .env("SERVICE_HOME", env.home.path())
        .env("INSPECT_LOG_LEVEL", "warning")
        .output()
        .unwrap();
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    let log = std::fs::read_dir(env.path("logs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "json"))
        .unwrap_or_else(|| panic!("no log: {said}"));
    let log: Value = serde_json::from_str(&std::fs::read_to_string(log).unwrap()).unwrap();
    assert_eq!(log["status"], "success", "{said}");
    let accuracy = &log["results"]["scores"][0]["metrics"]["accuracy"]["value"];
    assert_eq!(accuracy.as_f64(), Some(0.5), "{}", log["results"]);
    let samples = log["samples"].as_array().unwrap();
    let wrote = samples
        .iter()
        .find(|s| s["input"] == "please write 42")
        .unwrap();
    assert_eq!(
        wrote["output"]["choices"][0]["message"]["content"],
        "wrote it"
    );
    assert_eq!(wrote["scores"]["answer_file"]["value"], "C");
    // The usage is the bundle model's, from the run's trajectory.
    let usage = &wrote["output"]["usage"];
    assert!(usage["input_tokens"].as_u64().unwrap() > 0, "{usage}");
    assert_eq!(wrote["store"]["service_rs_exit_code"], 0);
    let steps = wrote["store"]["service_rs_trajectory"]["steps"]
        .as_array()
        .unwrap();
    assert_eq!(
        steps[1]["tool_calls"][0]["arguments"]["command"],
        "echo 42 > answer.txt"
    );
}

#[test]
fn the_harbor_adapter_installs_runs_and_fills_harbors_context_from_the_trajectory() {
    let Some(python) = super::support::gated("SERVICE_TEST_HARBOR_PYTHON", ".ci/harbor") else {
        return;
    };
    let env = Env::new();
    let bundle = env.path("bundle");
    write_bundle(
        &bundle,
        r#"{turns: [
          {when: "write 42", replies: [{tool_calls: [{name: "Bash", arguments: {command: "echo 42 > answer.txt"}}]}, {text: "wrote it"}]},
        ]}"#,
        "",
        "workspace_write",
    );
    let (task, logs, install) = (env.path("task"), env.path("logs"), env.path("installed"));
    std::fs::create_dir_all(&task).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/harbor_local.py");
    let out = std::process::Command::new(&python)
        .arg(&script)
        .args([&task, &logs, &install, &bundle, &binary()])
        .arg("please write 42")
        .current_dir(&task)
        .env("PYTHONPATH", adapters().join("harbor"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let context: Value = serde_json::from_slice(&out.stdout).unwrap();
    // Installed: the binary and the bundle were put in the environment, and the run used them there.
    assert!(install.join("service-rs").is_file() && install.join("bundle/agent.yaml").is_file());
    assert_eq!(
        std::fs::read_to_string(task.join("answer.txt")).unwrap(),
        "42\n"
    );
    // Harbor's context, from the ATIF trajectory its own model read: the tokens the provider reported.
    assert_eq!(context["metadata"]["service_rs_exit_code"], 0, "{context}");
    assert_eq!(context["metadata"]["service_rs_outcome"], "completed");
    assert_eq!(context["metadata"]["service_rs_steps"], 3);
    let trajectory: Value =
        serde_json::from_str(&std::fs::read_to_string(logs.join("trajectory.json")).unwrap())
            .unwrap();
    let fm = &trajectory["final_metrics"];
    assert_eq!(context["n_input_tokens"], fm["total_prompt_tokens"]);
    assert_eq!(context["n_output_tokens"], fm["total_completion_tokens"]);
    assert!(context["n_input_tokens"].as_u64().unwrap() > 0);
    assert_eq!(
        std::fs::read_to_string(logs.join("answer.txt")).unwrap(),
        "wrote it"
    );
}
